"""tree_lookup (context lookup grafted onto every drafted tree) never changes what generate() emits."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen.builders import DFLASH_STRATEGIES, STRATEGIES
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


@pytest.mark.parametrize("strategy", ["marginal", "conditional", "auto"])
def test_seeded_sampling_with_lookup_equals_stock_sampling(strategy):
    """The walk draws one sample per emitted token from the target's own law, as stock does, so a
    seeded call returns stock's sample whatever the tree holds."""
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    for prompt in repetitive_prompts(model.config.vocab_size, count=3):
        torch.manual_seed(5)
        stock = model.generate(prompt, do_sample=True, temperature=0.7, max_new_tokens=24)
        torch.manual_seed(5)
        tree = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, tree_lookup=6,
                              tree_costs=None if strategy != "auto" else _profile(), do_sample=True,
                              temperature=0.7, max_new_tokens=24)
        assert torch.equal(stock, tree), strategy


def _profile():
    return htg.CostProfile.from_verify_seconds({1: 0.060, 9: 0.080, 17: 0.110})
