"""Greedy tree decoding equals stock generate(do_sample=False) token for token (docs/design.md, "Exactness")."""

import pytest
import torch

from hf_treegen.builders import DFLASH_STRATEGIES, STRATEGIES
from tests.helpers import (ARCHS, CPU_LIKE, ScriptedDFlash2, ScriptedDomino, ScriptedDrafter, ScriptedDSpark,
                           greedy_reference, random_prompts, tiny_dflash2, tiny_domino, tiny_drafter, tiny_dspark,
                           tiny_target)

NEW_TOKENS = 16


def assert_matches_stock(model, drafter, strategies, seed, prompts=20):
    for prompt in random_prompts(prompts, model.config.vocab_size, seed=seed):
        ref = greedy_reference(model, prompt, NEW_TOKENS)
        for strategy in strategies:
            out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy,
                                 max_new_tokens=NEW_TOKENS, do_sample=False)
            assert torch.equal(out, ref), f"{strategy} diverged on prompt {prompt.tolist()}"


def exact_taus(model, prompt, ref, drafter, strategies) -> dict[str, float]:
    """Each strategy's tau over 40 greedy tokens, asserting its output equals ``ref`` (stock's)."""
    taus = {}
    for strategy in strategies:
        out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=40,
                             do_sample=False, return_dict_in_generate=True)
        assert torch.equal(out.sequences, ref), f"{strategy} diverged on prompt {prompt.tolist()}"
        taus[strategy] = out.tree_stats.tau
    return taus


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_dflash_drafter_matches_stock(arch, dtype, attn):
    model = tiny_target(arch, dtype, attn)
    assert_matches_stock(model, tiny_drafter(model), DFLASH_STRATEGIES, seed=len(arch) * 7 + len(attn))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_domino_drafter_matches_stock(arch, dtype):
    model = tiny_target(arch, dtype, "sdpa")
    assert_matches_stock(model, tiny_domino(model), STRATEGIES, seed=len(arch) * 5 + 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_dflash2_drafter_matches_stock(arch, dtype):
    model = tiny_target(arch, dtype, "sdpa")
    assert_matches_stock(model, tiny_dflash2(model), STRATEGIES, seed=len(arch) * 11 + 2, prompts=8)


@pytest.mark.parametrize("arch, dtype, head", [("llama", torch.float32, "vanilla"), ("qwen3", torch.float64, "vanilla"),
                                              ("qwen3", torch.float32, "gated")])
def test_random_dspark_drafter_matches_stock(arch, dtype, head):
    model = tiny_target(arch, dtype, "sdpa")
    assert_matches_stock(model, tiny_dspark(model, head=head), STRATEGIES, seed=len(arch) * 13 + len(head), prompts=8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("scripted", [ScriptedDFlash2, ScriptedDSpark], ids=["dflash2", "dspark"])
def test_sequential_head_trees_accept_deep_and_match_stock(dtype, scripted):
    """A noisy oracle under a random DFlash2 selector or DSpark Markov head: every strategy branches and
    accepts at depth over the head's path-conditional scores, and the output equals stock greedy."""
    model = tiny_target("qwen3", dtype, "sdpa")
    for i, prompt in enumerate(random_prompts(3, model.config.vocab_size, seed=9)):
        ref = greedy_reference(model, prompt, 40)
        taus = exact_taus(model, prompt, ref, scripted(model, ref, block_size=8, noise=0.3, seed=i), STRATEGIES)
        assert taus["conditional"] > 2.0 and taus["conditional"] >= taus["chain"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("arch", ARCHS)
def test_deep_acceptance_matches_stock(arch, dtype):
    """A noisy oracle makes rounds accept many tokens and branch: the walk, compaction and drafter
    context update are exercised at depth, and the output must still equal stock greedy."""
    model = tiny_target(arch, dtype, "sdpa")
    for i, prompt in enumerate(random_prompts(20, model.config.vocab_size, seed=7)):
        ref = greedy_reference(model, prompt, 40)
        runs = [(ScriptedDrafter(model, ref, block_size=8, noise=0.3, seed=i), DFLASH_STRATEGIES),
                (ScriptedDomino(model, ref, block_size=8, noise=0.3, seed=i), STRATEGIES)]
        for drafter, strategies in runs:
            taus = exact_taus(model, prompt, ref, drafter, strategies)
            assert taus["marginal"] > 2.0 and taus["marginal"] >= taus["chain"]


def test_oracle_reaches_maximal_acceptance_and_adversary_gets_tau_one():
    model = tiny_target("qwen3", torch.float64)
    prompt = random_prompts(1, model.config.vocab_size, seed=3)[0]
    ref = greedy_reference(model, prompt, 64)
    oracle = ScriptedDrafter(model, ref, block_size=8)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    for strategy in DFLASH_STRATEGIES:
        # no lookup (auto's default) in either call: it would find this random model's loops, rightly, and
        # carry rounds past the drafter's block (or off tau 1)
        out = model.generate(prompt, assistant_model=oracle, tree_strategy=strategy, max_new_tokens=64,
                             do_sample=False, return_dict_in_generate=True, tree_lookup=0)
        assert torch.equal(out.sequences, ref)
        # every full round accepts all 7 draft positions plus the bonus; only the last may be cut short
        assert out.tree_stats.accepted_lengths[:-1] == [8] * (len(out.tree_stats.accepted_lengths) - 1)
        bad = model.generate(prompt, assistant_model=adversary, tree_strategy=strategy, max_new_tokens=64,
                             do_sample=False, return_dict_in_generate=True, tree_lookup=0)
        assert torch.equal(bad.sequences, ref)
        assert bad.tree_stats.tau == 1.0


@pytest.mark.parametrize("strategy", DFLASH_STRATEGIES)
def test_eos_inside_an_accepted_path_stops_exactly_there(strategy):
    model = tiny_target("llama", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=11)[0]
    long_ref = greedy_reference(model, prompt, 40)
    new = long_ref[0, prompt.shape[1]:].tolist()
    eos = new[5]  # first occurrence decides where stock stops
    ref = greedy_reference(model, prompt, 40, eos_token_id=eos)
    assert ref.shape[1] == prompt.shape[1] + new.index(eos) + 1
    oracle = ScriptedDrafter(model, long_ref, block_size=8)
    out = model.generate(prompt, assistant_model=oracle, tree_strategy=strategy, max_new_tokens=40,
                         do_sample=False, eos_token_id=eos, return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref)
    assert out.tree_stats.accepted_lengths[-1] < 8 or new.index(eos) + 1 <= 8  # stopped inside a round


@pytest.mark.parametrize("max_new_tokens", [1, 2, 9, 13])
def test_max_new_tokens_ending_mid_round(max_new_tokens):
    model = tiny_target("qwen3", torch.float32)
    prompt = random_prompts(1, model.config.vocab_size, seed=5)[0]
    ref = greedy_reference(model, prompt, max_new_tokens)
    oracle = ScriptedDrafter(model, greedy_reference(model, prompt, 40), block_size=8)
    for strategy in DFLASH_STRATEGIES:
        out = model.generate(prompt, assistant_model=oracle, tree_strategy=strategy,
                             max_new_tokens=max_new_tokens, do_sample=False)
        assert torch.equal(out, ref)


def test_flex_attention_target_matches_stock():
    # The reference is the same weights under sdpa: stock generate() itself hits a torch-inductor C++
    # codegen error with flex attention on CPU for some prompt lengths (torch 2.13), not a tree issue.
    model = tiny_target("qwen3", torch.float32, "flex_attention")
    twin = tiny_target("qwen3", torch.float32, "sdpa")
    for i, prompt in enumerate(random_prompts(3, model.config.vocab_size, seed=21)):
        ref = greedy_reference(twin, prompt, 16)
        drafter = ScriptedDrafter(model, greedy_reference(twin, prompt, 30), block_size=8, noise=0.3, seed=i)
        for strategy in ("chain", "marginal"):
            out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=16,
                                 do_sample=False)
            assert torch.equal(out, ref)
    # a drafter that is always wrong sends auto back to plain steps: one-row forwards follow tree ones
    ref = greedy_reference(twin, prompt, 32)
    adversary = ScriptedDrafter(model, ref, block_size=8, adversarial=True)
    out = model.generate(prompt, assistant_model=adversary, tree_strategy="auto", tree_costs=CPU_LIKE, tree_lookup=0,
                         max_new_tokens=32, do_sample=False, return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref)
    assert 0 < out.tree_stats.plain_steps < out.tree_stats.rounds


@pytest.mark.parametrize("arch", ARCHS)
def test_drafters_with_a_draft_vocabulary_match_stock(arch):
    """A reduced draft vocabulary (tokens outside it are never drafted) leaves greedy output unchanged,
    for every strategy, DFlash and Domino."""
    from tests.vocab_helpers import sparse_vocab

    model = tiny_target(arch, torch.float32, "sdpa")
    vocab = sparse_vocab(model.config.vocab_size, keep_every=3)
    assert_matches_stock(model, tiny_drafter(model).set_draft_vocab(vocab), DFLASH_STRATEGIES, seed=len(arch) * 3)
    assert_matches_stock(model, tiny_domino(model).set_draft_vocab(vocab), STRATEGIES, seed=len(arch) * 3 + 1)


@pytest.mark.parametrize("arch", ARCHS)
def test_deep_acceptance_over_a_draft_vocabulary_matches_stock(arch):
    """Noisy oracles drafting over a map: one that holds every reference token (deep rounds, branching)
    and one that misses half of them (those are never drafted, rounds stop there)."""
    from tests.vocab_helpers import mapped, sparse_vocab

    model = tiny_target(arch, torch.float32, "sdpa")
    vocab_size = model.config.vocab_size
    for i, prompt in enumerate(random_prompts(6, vocab_size, seed=17)):
        ref = greedy_reference(model, prompt, 40)
        reference = ref[0].tolist()
        covering = sparse_vocab(vocab_size, 5, always=reference)
        missing = sorted(set(reference[prompt.shape[1]::2]) - set(reference[prompt.shape[1] + 1::2]))
        partial = torch.tensor(sorted(set(covering.tolist()) - set(missing)))
        for vocab in (covering, partial):
            runs = [(mapped(ScriptedDrafter(model, ref, block_size=8, noise=0.3, seed=i), vocab), DFLASH_STRATEGIES),
                    (mapped(ScriptedDomino(model, ref, block_size=8, noise=0.3, seed=i), vocab), STRATEGIES)]
            for drafter, strategies in runs:
                taus = exact_taus(model, prompt, ref, drafter, strategies)
                if vocab is covering:
                    assert taus["marginal"] > 2.0
