"""hf_treegen.bench.graft_replay (behind benchmarks/graft_replay.py) scores grafting choices it did not
verify; its scores must be what the loop does when it verifies them."""

import torch

from hf_treegen import LookupOptions
from hf_treegen.bench import graft_replay as replay
from hf_treegen.datastore import TokenDatastore
from hf_treegen.tree import DraftTree
from tests.helpers import FLAT_COSTS, ScriptedDomino, greedy_reference, random_prompts, tiny_target


def test_replayed_tokens_of_the_verified_grafts_are_what_the_rounds_emitted():
    """Greedy auto verifies the root grafts and the copies inside the tree: replaying that rule on the
    recorded rounds gives every round's emitted tokens and verified rows back."""
    model = tiny_target("llama", torch.float32)
    prompts = random_prompts(3, model.config.vocab_size, seed=41, min_len=4, max_len=7)
    store = TokenDatastore.from_sequences([greedy_reference(model, p, 40)[0].tolist() for p in prompts[:2]])
    checked = stored = 0
    for i, prompt in enumerate(prompts):
        ref = greedy_reference(model, prompt, 40)
        drafter = ScriptedDomino(model, ref, block_size=4, noise=0.5, seed=i)
        out, stats, rounds = replay.record(model, drafter, prompt, FLAT_COSTS, dict(do_sample=False), 40,
                                           tree_lookup=LookupOptions(datastore=store))
        assert torch.equal(out, ref) and stats.plain_steps == 0 and len(rounds) == stats.rounds
        text = out[0].tolist()
        scores = [replay.score(r, replay.RULES["root+inside"], text[r.start + 1:], FLAT_COSTS) for r in rounds]
        # the last round may be cut short by max_new_tokens
        assert [s[0] for s in scores[:-1]] == stats.accepted_lengths[:-1]
        assert [s[2] - 1 for s in scores] == stats.tree_sizes
        checked += sum(len(r.offers) for r in rounds)
        stored += sum(o.kind == "store" for r in rounds for o in r.offers)
    assert checked > 0 and stored > 0  # the rounds were offered grafts, the given datastore's among them


def test_walked_tokens_and_the_ladder():
    tree = DraftTree(torch.tensor([1, 2, 3, 7]), torch.tensor([-1, 0, 1, 0]), torch.zeros(4))
    assert replay.walked_tokens(tree, [2, 3, 9]) == 3 and replay.walked_tokens(tree, [9]) == 1
    paying = {"none": (1, 1.0, 1), "root": (3, 1.1, 4), "root+inside": (3, 1.2, 6), "root+inside+paths4": (3, 1.3, 8)}
    assert replay.ladder_choices([paying] * 3, memory=0.9) == ["root", "root", "root"]
    idle = {name: (1, seconds, rows) for name, (_, seconds, rows) in paying.items()}
    assert replay.ladder_choices([idle] * 3, memory=0.9) == ["root", "none", "none"]
