"""Sampling is lossless: what tree decoding emits has exactly the autoregressive law (docs/design.md, "Exactness").

Two tests, each also run on a deliberately broken verifier that must fail it:
1. exact: the law of one round, enumerated over every decision the walk can take on a real tree
   forward, equals the product of autoregressive conditionals from plain serial forwards;
2. Monte-Carlo: whole generate() samples of 3 tokens (vocabulary 16) against the exact AR law, chi-square.
"""

import functools
import itertools

import pytest
import torch
from scipy.stats import chisquare
from transformers import DynamicCache, GenerationConfig
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_treegen.generation import TreeDecoder, TreeOptions, Walk, plan_tree_call, tree_decoding, walk_tree
from hf_treegen.target import FeatureTap
from hf_treegen.tree import DraftTree
from tests.helpers import ScriptedDFlash2, ScriptedDomino, ScriptedDrafter, ScriptedDSpark, greedy_reference, tiny_target
from tests.vocab_helpers import mapped

VOCAB = 16
PROMPT = torch.tensor([[3, 7, 1, 9, 2]])
CONFIGS = [  # (temperature, top_k, top_p)
    (0.5, None, None),
    (1.0, None, None),
    (0.5, 4, 0.9),
    (1.0, 4, 0.9),
]


def broken_walk(tree: DraftTree, decide) -> Walk:
    """A classic bug: on a mismatch, commit the best drafted child anyway instead of stopping."""
    nodes, tokens = [0], []
    while True:
        token = decide(nodes[-1])
        children = tree.children(nodes[-1])
        if token not in children and children:
            token = next(iter(children))  # the first (best-scored) child
        tokens.append(token)
        if token not in children:
            return Walk(nodes, tokens)
        nodes.append(children[token])


def warpers(temperature, top_k, top_p) -> LogitsProcessorList:
    """The sampling warpers generate() builds, in its order."""
    procs = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        procs.append(TopKLogitsWarper(top_k))
    if top_p:
        procs.append(TopPLogitsWarper(top_p))
    return procs


@functools.cache
def sampling_model():
    return tiny_target("qwen3", torch.float64, vocab=VOCAB, layers=1, hidden=32, std=0.5)


def ar_probs(model, procs, ids: torch.Tensor) -> torch.Tensor:
    """(V,) autoregressive next-token law after ``ids`` from a plain serial forward."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -1].float()
    return torch.softmax(procs(ids, logits), dim=-1)[0].double()


def round_law(walk, tree: DraftTree, node_probs: dict[int, torch.Tensor]) -> dict[tuple, float]:
    """Exact law of a walk's emitted tokens, enumerating every decision sequence it can make."""

    class NeedDecision(Exception):
        def __init__(self, node):
            self.node = node

    law: dict[tuple, float] = {}

    def explore(script: list[int], prob: float):
        queue = list(script)

        def decide(node):
            if not queue:
                raise NeedDecision(node)
            return queue.pop(0)

        try:
            emitted = walk(tree, decide).tokens
        except NeedDecision as need:
            for token, p in enumerate(node_probs[need.node].tolist()):
                if p > 0:
                    explore(script + [token], prob * p)
            return
        law[tuple(emitted)] = law.get(tuple(emitted), 0.0) + prob

    explore([], 1.0)
    return law


def one_round(model, drafter, procs, strategy):
    """Run the decoder's own prefill, draft, build and verify; return (ids, tree, per-node laws)."""
    config = GenerationConfig(do_sample=True, max_new_tokens=8)
    decoder = TreeDecoder(model, drafter, plan_tree_call(model, drafter, TreeOptions(strategy, budget=10), config),
                          procs, None, config)
    cache = DynamicCache(config=model.config)
    with torch.no_grad(), FeatureTap(model, drafter.config.target_layer_ids) as tap:
        session, _, scores, _ = decoder.prefill(PROMPT, cache, tap)
        root = int(scores.argmax())  # any root will do: the round is what is tested
        ids = torch.cat([PROMPT, torch.tensor([[root]])], dim=1)
        tree = decoder.builder(session.draft(root, PROMPT.shape[1]), root)
        logits = decoder.verify(tree, PROMPT.shape[1], cache)
    node_probs = {}
    for node in range(tree.num_nodes):
        path = tree.tokens[tree.path_to(node)[1:]]
        _, node_scores = decoder.decide(torch.cat([ids, path[None]], dim=1), logits[node : node + 1])
        node_probs[node] = torch.softmax(node_scores, dim=-1)[0].double()
    return ids, tree, node_probs


def scripted(model, strategy, draft_vocab: bool = False):
    """A drafter that proposes the greedy continuation with noise; Domino for the Domino strategies.
    ``draft_vocab``: it drafts over a reduced vocabulary (two ids in three) instead of all 16 ids."""
    cls = ScriptedDrafter if strategy in ("chain", "marginal", "adaptive") else ScriptedDomino
    drafter = cls(model, greedy_reference(model, PROMPT, 20), block_size=4, noise=0.3)
    return mapped(drafter, MAP) if draft_vocab else drafter


MAP = torch.tensor([i for i in range(VOCAB) if i % 3 != 1])  # a draft vocabulary of 11 of the 16 ids


@pytest.mark.parametrize("draft_vocab", [False, True], ids=["full_vocab", "draft_vocab"])
@pytest.mark.parametrize("strategy", ["chain", "marginal", "adaptive", "static_corrected", "conditional",
                                      "cond_adaptive", "auto"])
@pytest.mark.parametrize("temperature, top_k, top_p", CONFIGS)
def test_round_law_equals_autoregressive_law_exactly(strategy, temperature, top_k, top_p, draft_vocab):
    model = sampling_model()
    drafter = scripted(model, strategy, draft_vocab)
    procs = warpers(temperature, top_k, top_p)
    ids, tree, node_probs = one_round(model, drafter, procs, strategy)
    assert tree.num_drafted >= 2 and int(tree.depths.max()) >= 2  # a real tree, not just the root
    if draft_vocab:
        assert set(tree.tokens[1:].tolist()) <= set(MAP.tolist())  # only the draft vocabulary is drafted

    law = round_law(walk_tree, tree, node_probs)
    assert_autoregressive(model, procs, ids, law)

    broken = round_law(broken_walk, tree, node_probs)
    gap = max(abs(broken.get(s, 0.0) - law.get(s, 0.0)) for s in set(broken) | set(law))
    assert gap > 1e-3, "the broken verifier should change the round law"


@pytest.mark.parametrize("strategy", ["chain", "conditional", "auto"])
@pytest.mark.parametrize("family", [ScriptedDFlash2, ScriptedDSpark], ids=["dflash2", "dspark"])
def test_round_law_over_the_new_heads_equals_autoregressive_law_exactly(strategy, family):
    """Trees grown over DFlash2's selector and DSpark's Markov head keep the target's law exactly."""
    model = sampling_model()
    drafter = family(model, greedy_reference(model, PROMPT, 20), block_size=4, noise=0.3)
    procs = warpers(*CONFIGS[1])
    ids, tree, node_probs = one_round(model, drafter, procs, strategy)
    assert tree.num_drafted >= 2 and int(tree.depths.max()) >= 2
    assert_autoregressive(model, procs, ids, round_law(walk_tree, tree, node_probs))


def assert_autoregressive(model, procs, ids, law: dict[tuple, float]) -> None:
    """Each emitted sequence's probability under the round law = the product of its AR conditionals."""
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-6)  # float32 probabilities, as stock
    for emitted, prob in law.items():
        expected = 1.0
        for i, token in enumerate(emitted):
            prefix = torch.cat([ids, torch.tensor([emitted[:i]], dtype=torch.long)], dim=1)
            expected *= float(ar_probs(model, procs, prefix)[token])
        assert prob == pytest.approx(expected, rel=1e-9, abs=1e-12), emitted


@pytest.mark.parametrize("strategy", ["marginal", "conditional"])
def test_round_law_with_a_bf16_drafter_beside_an_fp32_target(strategy):
    """The drafter's precision shapes the tree, never the law of what is emitted."""
    model = sampling_model()
    drafter = scripted(model, strategy).to(torch.bfloat16)
    procs = warpers(1.0, 4, 0.9)
    ids, tree, node_probs = one_round(model, drafter, procs, strategy)
    assert tree.num_drafted >= 2 and int(tree.depths.max()) >= 2
    assert_autoregressive(model, procs, ids, round_law(walk_tree, tree, node_probs))


def exact_ar_law(model, procs, new_tokens: int) -> dict[tuple, float]:
    law = {(): 1.0}
    for _ in range(new_tokens):
        nxt = {}
        for seq, p in law.items():
            probs = ar_probs(model, procs, torch.cat([PROMPT, torch.tensor([seq], dtype=torch.long)], dim=1))
            for token, q in enumerate(probs.tolist()):
                if q > 0:
                    nxt[seq + (token,)] = p * q
        law = nxt
    return law


def chi_square_pvalue(samples: list[tuple], law: dict[tuple, float]) -> float:
    """Cells with expected count >= 5 are tested one by one; the rest are pooled into one cell."""
    n = len(samples)
    counts: dict[tuple, int] = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    big = [s for s, p in law.items() if p * n >= 5]
    observed = [counts.get(s, 0) for s in big]
    expected = [law[s] * n for s in big]
    rest_obs, rest_exp = n - sum(observed), n - sum(expected)
    if rest_exp >= 5:
        observed.append(rest_obs)
        expected.append(rest_exp)
    else:  # fold a tiny remainder into the largest cell so the totals still match
        observed[0] += rest_obs
        expected[0] += rest_exp
    return float(chisquare(observed, expected).pvalue)


def sample_generations(model, n, temperature, top_k, top_p, **generate_kwargs) -> list[tuple]:
    torch.manual_seed(1234)
    out = []
    for _ in range(n):
        seq = model.generate(PROMPT, max_new_tokens=3, do_sample=True, temperature=temperature,
                             top_k=top_k or 0, top_p=top_p or 1.0, **generate_kwargs)
        out.append(tuple(seq[0, PROMPT.shape[1]:].tolist()))
    return out


SAMPLES = 2000


@pytest.mark.parametrize("strategy, temperature, top_k, top_p, draft_vocab",
                         [("marginal", *c, False) for c in CONFIGS] + [("conditional", *c, False) for c in CONFIGS[1:3]]
                         + [(s, 1.0, None, None, False) for s in ("chain", "adaptive", "static_corrected",
                                                                  "cond_adaptive")]
                         + [("conditional", 0.5, 4, 0.9, True), ("auto", 1.0, None, None, False),
                            ("auto", 0.5, None, None, False)])
def test_whole_generations_follow_the_autoregressive_law(strategy, temperature, top_k, top_p, draft_vocab):
    model = sampling_model()
    drafter = scripted(model, strategy, draft_vocab)
    law = exact_ar_law(model, warpers(temperature, top_k, top_p), 3)
    samples = sample_generations(model, SAMPLES, temperature, top_k, top_p, assistant_model=drafter,
                                 tree_strategy=strategy, tree_budget=6)
    assert chi_square_pvalue(samples, law) > 1e-3


def test_monte_carlo_test_has_power_against_a_broken_verifier():
    model = sampling_model()
    drafter = ScriptedDrafter(model, greedy_reference(model, PROMPT, 20), block_size=4, noise=0.3)
    law = exact_ar_law(model, warpers(1.0, None, None), 3)
    broken = functools.partial(tree_decoding, drafter=drafter, options=TreeOptions("marginal", budget=6),
                               walk=broken_walk)
    samples = sample_generations(model, SAMPLES, 1.0, None, None, custom_generate=broken)
    assert chi_square_pvalue(samples, law) < 1e-6


def test_drafting_and_building_never_touch_the_sampling_generator():
    """Losslessness needs a tree independent of the target's randomness: the global RNG (which
    target sampling uses) must be untouched by drafting and tree building."""
    from hf_treegen.builders import STRATEGIES
    from tests.helpers import tiny_domino

    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model)
    config = GenerationConfig(do_sample=True, temperature=0.7)
    for strategy in STRATEGIES:
        plan = plan_tree_call(model, drafter, TreeOptions(strategy), config)
        decoder = TreeDecoder(model, drafter, plan, LogitsProcessorList(), None, config)
        cache = DynamicCache(config=model.config)
        with torch.no_grad(), FeatureTap(model, drafter.config.target_layer_ids) as tap:
            session, token, _, _ = decoder.prefill(PROMPT, cache, tap)
            state = torch.get_rng_state()
            tree = decoder.builder(session.draft(token, PROMPT.shape[1]), token)
            assert torch.equal(torch.get_rng_state(), state)
            # cost-aware cuts may rightly choose an empty tree for a random drafter; the others draft
            assert tree.num_drafted >= 1 or strategy.endswith("adaptive")
