"""tree_lookup and its datastore (continuations grafted onto every drafted tree) never change what
generate() emits."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen import LookupOptions
from hf_treegen.builders import DFLASH_STRATEGIES, STRATEGIES
from hf_treegen.datastore import TokenDatastore
from tests.helpers import ScriptedDrafter, greedy_reference, random_prompts, tiny_domino, tiny_drafter, tiny_target

NEW_TOKENS = 40


def repetitive_prompts(vocab: int, count: int = 6) -> list[torch.Tensor]:
    """Prompts that repeat a phrase, so that greedy output often continues copying it."""
    return [torch.cat([p, p, p[:, :2]], dim=1) for p in random_prompts(count, vocab, seed=21, min_len=4, max_len=7)]


def test_greedy_with_lookup_matches_stock_for_every_strategy():
    model = tiny_target("qwen3", torch.float32)
    runs = [(tiny_drafter(model), DFLASH_STRATEGIES), (tiny_domino(model), STRATEGIES)]
    from_lookup = 0
    for prompt in repetitive_prompts(model.config.vocab_size, count=3):
        ref = greedy_reference(model, prompt, NEW_TOKENS)
        for drafter, strategies in runs:
            for strategy in strategies:
                out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, tree_lookup=6,
                                     max_new_tokens=NEW_TOKENS, do_sample=False, return_dict_in_generate=True)
                assert torch.equal(out.sequences, ref), f"{strategy} with lookup diverged on {prompt.tolist()}"
                from_lookup += out.tree_stats.lookup_tokens
    assert from_lookup > 0  # grafted nodes were accepted, committed and fed to the drafter's context


def test_lookup_alone_accepts_tokens_beside_a_drafter_that_never_matches():
    model = tiny_target("llama", torch.float32)
    prompt = repetitive_prompts(model.config.vocab_size)[0]
    ref = greedy_reference(model, prompt, NEW_TOKENS)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    plain = model.generate(prompt, assistant_model=adversary, tree_strategy="marginal", max_new_tokens=NEW_TOKENS,
                           do_sample=False, return_dict_in_generate=True)
    looked = model.generate(prompt, assistant_model=adversary, tree_strategy="marginal", tree_lookup=8,
                            max_new_tokens=NEW_TOKENS, do_sample=False, return_dict_in_generate=True)
    assert torch.equal(plain.sequences, ref) and torch.equal(looked.sequences, ref)
    assert plain.tree_stats.tau == 1.0 and plain.tree_stats.lookup_tokens == 0
    assert looked.tree_stats.lookup_tokens == sum(n - 1 for n in looked.tree_stats.accepted_lengths) > 0
    assert looked.tree_stats.tau > 1.0


@pytest.mark.parametrize("strategy, inside", [("marginal", None), ("conditional", None), ("auto", None),
                                           ("conditional", 4)])
def test_seeded_sampling_with_lookup_equals_stock_sampling(strategy, inside):
    """The walk draws one sample per emitted token from the target's own law, as stock does, so a
    seeded call returns stock's sample whatever the tree holds."""
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    for prompt in repetitive_prompts(model.config.vocab_size, count=3):
        torch.manual_seed(5)
        stock = model.generate(prompt, do_sample=True, temperature=0.7, max_new_tokens=24)
        torch.manual_seed(5)
        tree = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy,
                              tree_lookup=LookupOptions(6, inside=inside), tree_costs=None if strategy != "auto" else _profile(),
                              do_sample=True,
                              temperature=0.7, max_new_tokens=24)
        assert torch.equal(stock, tree), strategy


def _profile():
    return htg.CostProfile.from_verify_seconds({1: 0.060, 9: 0.080, 17: 0.110})


# ---------------------------------------------------------------------------------------------- datastore
def answer_store(model, prompts) -> TokenDatastore:
    """A datastore of stock's greedy answers to ``prompts`` (prompt included) and some random text."""
    junk = random_prompts(4, model.config.vocab_size, seed=99, min_len=20, max_len=30)
    return TokenDatastore.from_sequences([greedy_reference(model, p, NEW_TOKENS)[0] for p in prompts]
                                         + [j[0] for j in junk])


@pytest.mark.parametrize("paths, inside", [(1, 0), (4, 5)])
def test_greedy_with_a_datastore_matches_stock_for_every_strategy(paths, inside):
    model = tiny_target("qwen3", torch.float32)
    prompts = random_prompts(3, model.config.vocab_size, seed=31, min_len=4, max_len=7)
    store = answer_store(model, prompts[:1])  # holds the first answer: long hits there, misses elsewhere
    runs = [(tiny_drafter(model), DFLASH_STRATEGIES), (tiny_domino(model), STRATEGIES)]
    from_lookup = 0
    for prompt in prompts:
        ref = greedy_reference(model, prompt, NEW_TOKENS)
        for drafter, strategies in runs:
            for strategy in strategies:
                out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy,
                                     tree_lookup=LookupOptions(datastore=store, paths=paths, inside=inside),
                                     max_new_tokens=NEW_TOKENS,
                                     do_sample=False, return_dict_in_generate=True)
                assert torch.equal(out.sequences, ref), f"{strategy} with a datastore diverged on {prompt.tolist()}"
                from_lookup += out.tree_stats.lookup_tokens
    assert from_lookup > 0


def test_a_datastore_holding_the_answer_carries_a_drafter_that_never_matches():
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=32, min_len=5, max_len=6)[0]
    ref = greedy_reference(model, prompt, NEW_TOKENS)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    out = model.generate(prompt, assistant_model=adversary, tree_strategy="marginal",
                         tree_lookup=LookupOptions(datastore=answer_store(model, [prompt])), max_new_tokens=NEW_TOKENS,
                         do_sample=False,
                         return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref)
    stats = out.tree_stats
    assert stats.lookup_tokens == sum(n - 1 for n in stats.accepted_lengths) and stats.tau > 2.0


def test_runner_up_datastore_continuations_are_grafted_too():
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=34, min_len=5, max_len=6)[0]
    ref = greedy_reference(model, prompt, NEW_TOKENS)
    answer = ref[0, prompt.shape[1]:].tolist()
    # the prefill emits answer[0]; from then on the decoy is wrong at every token
    decoy = answer[:1] + [(token + 1) % model.config.vocab_size for token in answer[1:]]
    # after the prompt and answer[0], two of three occurrences wrote the decoy: the likeliest continuation is wrong
    store = TokenDatastore.from_sequences([ref[0].tolist()] + [prompt[0].tolist() + decoy] * 2)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    first_round = {}
    for paths in (1, 2):
        out = model.generate(prompt, assistant_model=adversary, tree_strategy="marginal",
                             tree_lookup=LookupOptions(datastore=store, paths=paths), max_new_tokens=NEW_TOKENS,
                             do_sample=False,
                             return_dict_in_generate=True)
        assert torch.equal(out.sequences, ref)
        first_round[paths] = out.tree_stats.accepted_lengths[0]
    assert first_round[1] == 1 and first_round[2] > 1  # only the runner-up held the target's answer


def test_the_drafters_own_datastore_is_used_unless_turned_off():
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=32, min_len=5, max_len=6)[0]
    ref = greedy_reference(model, prompt, NEW_TOKENS)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    adversary.datastore = answer_store(model, [prompt])
    kwargs = dict(tree_strategy="marginal", max_new_tokens=NEW_TOKENS, do_sample=False, return_dict_in_generate=True)
    own = model.generate(prompt, assistant_model=adversary, tree_lookup=8, **kwargs)
    off = model.generate(prompt, assistant_model=adversary, tree_lookup=LookupOptions(8, datastore=False), **kwargs)
    fixed = model.generate(prompt, assistant_model=adversary, **kwargs)  # a fixed strategy grafts nothing unasked
    assert torch.equal(own.sequences, ref) and torch.equal(off.sequences, ref) and torch.equal(fixed.sequences, ref)
    assert own.tree_stats.lookup_tokens > off.tree_stats.lookup_tokens and fixed.tree_stats.lookup_tokens == 0


@pytest.mark.parametrize("strategy, paths", [("conditional", 1), ("auto", 1), ("conditional", 3), ("auto", 3)])
def test_seeded_sampling_with_a_datastore_equals_stock_sampling(strategy, paths):
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    prompts = random_prompts(3, model.config.vocab_size, seed=33, min_len=4, max_len=7)
    store = answer_store(model, prompts)
    for prompt in prompts:
        torch.manual_seed(6)
        stock = model.generate(prompt, do_sample=True, temperature=0.7, max_new_tokens=24)
        torch.manual_seed(6)
        tree = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy,
                              tree_lookup=LookupOptions(datastore=store, paths=paths), tree_costs=None if strategy != "auto" else _profile(),
                              do_sample=True, temperature=0.7, max_new_tokens=24)
        assert torch.equal(stock, tree), strategy


def test_datastore_round_trips_with_the_drafter(tmp_path):
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    drafter.datastore = TokenDatastore.from_sequences([[1, 2, 3, 4], [5, 6]])
    drafter.save_pretrained(tmp_path)
    loaded = htg.DominoDrafter.from_pretrained(tmp_path, model)
    assert torch.equal(loaded.datastore.tokens, drafter.datastore.tokens)
    # safetensors creates its files private (0600); a saved drafter is readable like its config.json
    assert {path.name: path.stat().st_mode & 0o777 for path in tmp_path.iterdir()} == {
        "config.json": 0o644, "model.safetensors": 0o644, "datastore.safetensors": 0o644}
    drafter.datastore = None
    drafter.save_pretrained(tmp_path)  # a stale datastore file must not come back with these weights
    assert htg.DominoDrafter.from_pretrained(tmp_path, model).datastore is None


def test_lookup_inside_the_tree_carries_on_where_a_right_but_short_draft_ends():
    """An oracle drafter with blocks of three (two drafted positions) drafts the answer right but no
    further; lookup copies one token at the root. Copying what followed the drafted path from a
    datastore that holds the answer accepts more a round, and output stays stock's."""
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=35, min_len=5, max_len=6)[0]
    ref = greedy_reference(model, prompt, NEW_TOKENS)
    oracle = ScriptedDrafter(model, ref, block_size=3)
    store = answer_store(model, [prompt])
    runs = {inside: model.generate(prompt, assistant_model=oracle, tree_strategy="marginal",
                                   tree_lookup=LookupOptions(1, store, inside=inside), max_new_tokens=NEW_TOKENS,
                                   do_sample=False, return_dict_in_generate=True) for inside in (0, 6)}
    assert all(torch.equal(out.sequences, ref) for out in runs.values())
    assert runs[0].tree_stats.tau <= 3.0  # two drafted positions and the bonus token
    assert runs[6].tree_stats.tau > runs[0].tree_stats.tau + 1.0
    assert runs[6].tree_stats.lookup_tokens > 0


def test_copies_are_shorter_when_sampling_and_inside_the_tree_they_copy_as_many_as_at_the_root():
    from hf_treegen.generation.options import AUTO_LOOKUP, SAMPLED_LOOKUP, TreeOptions
    auto = TreeOptions("auto")
    assert auto.copy_tokens(sampling=False) == auto.inside_tokens(sampling=False) == AUTO_LOOKUP
    assert auto.copy_tokens(sampling=True) == auto.inside_tokens(sampling=True) == SAMPLED_LOOKUP < AUTO_LOOKUP
    asked = TreeOptions("auto", lookup=6, lookup_inside=3)
    assert asked.copy_tokens(sampling=True) == 6 and asked.inside_tokens(sampling=True) == 3
    short = TreeOptions("auto", lookup=2)
    assert short.copy_tokens(sampling=True) == short.inside_tokens(sampling=True) == 2
    fixed = TreeOptions("conditional")  # lookup is off for fixed strategies unless asked
    assert fixed.copy_tokens(sampling=False) == fixed.inside_tokens(sampling=True) == 0


@pytest.mark.parametrize("do_sample", [False, True])
def test_the_loop_copies_as_many_tokens_as_the_options_say(do_sample, monkeypatch):
    from hf_treegen.generation import loop, plan
    from hf_treegen.generation.options import AUTO_LOOKUP, SAMPLED_LOOKUP
    seen = []

    def recording(*args, **kwargs):
        made = plan.plan_tree_call(*args, **kwargs)
        seen.append((made.lookup, made.inside))
        return made

    monkeypatch.setattr(loop, "plan_tree_call", recording)
    model = tiny_target("llama", torch.float32)
    prompt = repetitive_prompts(model.config.vocab_size, count=1)[0]
    model.generate(prompt, assistant_model=tiny_domino(model), tree_strategy="auto", tree_costs=_profile(),
                   do_sample=do_sample, max_new_tokens=8)
    tokens = SAMPLED_LOOKUP if do_sample else AUTO_LOOKUP
    assert seen == [(tokens, tokens)]
