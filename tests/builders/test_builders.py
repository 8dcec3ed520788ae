"""Builders against brute force: the marginal heap is exactly the top-B prefixes; the adaptive cut is
the size with the best expected tokens per second."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_treegen.builders import BuildSettings, ChainBuilder, MarginalBuilder
from hf_treegen.costs import CostProfile, VerifyCostModel, best_tree_size
from hf_treegen.builders.marginal import best_first_nodes
from hf_treegen.drafters.dflash import DraftBlock


def brute_force_prefix_scores(logp: torch.Tensor) -> dict[tuple[int, ...], float]:
    """Every prefix (as a tuple of token ids) with its summed log-prob, summed root to leaf."""
    depth, vocab = logp.shape
    values = logp.tolist()
    scores = {}
    for d in range(1, depth + 1):
        for prefix in itertools.product(range(vocab), repeat=d):
            total = 0.0
            for i, tok in enumerate(prefix):
                total += values[i][tok]
            scores[prefix] = total
    return scores


def tree_prefixes(tree) -> set[tuple[int, ...]]:
    return {tuple(tree.tokens[tree.path_to(n)[1:]].tolist()) for n in range(1, tree.num_nodes)}


@settings(max_examples=80, deadline=None)
@given(depth=st.integers(1, 4), vocab=st.integers(2, 5), budget=st.integers(1, 30), seed=st.integers(0, 10_000),
       temperature=st.sampled_from([0.5, 1.0, 2.0]))
def test_marginal_tree_is_the_brute_force_top_b(depth, vocab, budget, seed, temperature):
    logits = torch.randn(depth, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    settings_ = BuildSettings(budget=budget, topk=min(budget, vocab), top_m=vocab, temperature=temperature,
                              max_depth=depth)
    tree = MarginalBuilder(settings_)(DraftBlock(logits=logits, hidden=torch.zeros(depth, 1)), root_token=99)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    scores = brute_force_prefix_scores(logp)
    ranked = sorted(scores, key=lambda p: -scores[p])
    expected = set(ranked[: min(budget, len(ranked))])
    assert tree_prefixes(tree) == expected
    # scores stored on nodes are the path sums
    for node in range(1, tree.num_nodes):
        prefix = tuple(tree.tokens[tree.path_to(node)[1:]].tolist())
        assert math.isclose(float(tree.scores[node]), scores[prefix], rel_tol=0, abs_tol=1e-5)


def test_best_first_nodes_come_out_in_non_increasing_order():
    logp = torch.log_softmax(torch.randn(6, 10, generator=torch.Generator().manual_seed(0)), -1).topk(10).values
    scores = [s for *_, s in best_first_nodes(logp.tolist(), 200)]
    assert scores == sorted(scores, reverse=True) and len(scores) == 200


def test_chain_takes_the_argmax_per_depth_up_to_the_budget():
    logits = torch.randn(7, 50, generator=torch.Generator().manual_seed(1))
    settings_ = BuildSettings(budget=5, topk=5, top_m=50, temperature=1.0, max_depth=7)
    tree = ChainBuilder(settings_)(DraftBlock(logits=logits, hidden=torch.zeros(7, 1)), root_token=3)
    assert tree.tokens.tolist() == [3] + logits[:5].argmax(-1).tolist()
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3, 4]


@settings(max_examples=60, deadline=None)
@given(masses=st.lists(st.floats(0.0, 1.0), min_size=0, max_size=20),
       draft=st.floats(0.0, 0.05), per_node=st.floats(0.0, 0.01),
       base=st.floats(0.01, 0.1), slope=st.floats(0.0, 0.02), extra_rows=st.floats(0.0, 10.0),
       extra_tokens=st.floats(0.0, 2.0))
def test_adaptive_size_maximises_expected_tokens_per_second(masses, draft, per_node, base, slope, extra_rows,
                                                             extra_tokens):
    masses = sorted(masses, reverse=True)
    curve = VerifyCostModel.from_measurements([1, 8, 32], [base, base + 7 * slope, base + 31 * slope])
    costs = CostProfile(curve, draft_s=draft, build_s_per_node=per_node)
    chosen = best_tree_size(masses, costs, extra_rows, extra_tokens)
    rates = [(1 + extra_tokens + sum(masses[:n])) / (draft + per_node * n + curve.seconds_for(n + 1 + extra_rows))
             for n in range(len(masses) + 1)]
    assert rates[chosen] >= max(rates) * (1 - 1e-9)


def test_auto_cuts_smaller_trees_when_lookup_grafts_rows_onto_them():
    from hf_treegen.builders.auto import AutoBuilder

    # a verify curve flat up to 9 rows and steep past it: 8 drafted nodes are free, unless grafts fill the rows
    costs = CostProfile.from_verify_seconds({1: 0.050, 9: 0.050, 33: 0.150})
    settings_ = BuildSettings(budget=16, topk=8, top_m=50, temperature=1.0, max_depth=7)
    builder = AutoBuilder(settings_, profile=costs, conditional=False)
    masses = [0.6 * 0.8 ** i for i in range(16)]  # best first
    assert best_tree_size(masses, costs) == 8
    for _ in range(100):  # rounds whose grafts added 6 rows and one accepted token
        builder.observe_grafts(6, 1)
    assert builder.graft_rows == pytest.approx(6.0, rel=1e-3) and builder.graft_tokens == pytest.approx(1.0, rel=1e-3)
    assert best_tree_size(masses, costs, builder.graft_rows, builder.graft_tokens) == 4


def test_verify_cost_curve_is_monotone_and_interpolates():
    curve = VerifyCostModel.from_measurements([4, 1, 16, 8, 32], [0.09, 0.06, 0.10, 0.08, 0.12])
    assert curve.rows == (1, 4, 8, 16, 32)
    assert list(curve.seconds) == sorted(curve.seconds)  # noise never makes a bigger tree cheaper
    assert curve.seconds == pytest.approx((0.06, 0.08, 0.08, 0.10, 0.12))  # 4 rows cost no more than 8 did
    assert curve.seconds_for(12) == pytest.approx(0.09)
    assert curve.seconds_for(64) >= curve.seconds_for(32)


def test_a_slow_outlier_stays_at_its_size():
    # one size timed while the machine was busy must not price every wider tree as busy
    curve = VerifyCostModel.from_measurements([1, 2, 3, 4, 5], [0.050, 0.090, 0.052, 0.053, 0.060])
    assert curve.seconds == pytest.approx((0.050, 0.052, 0.052, 0.053, 0.060))


@pytest.mark.parametrize("strategy", ["cond_adaptive", "auto"])
def test_acceptance_calibration_is_per_call_unless_the_caller_shares_one(strategy):
    import hf_treegen as htg
    from tests.helpers import FLAT_COSTS, random_prompts, tiny_domino, tiny_target

    # a flat cost profile: any drafted mass pays, so every round drafts a tree (timing-independent)
    model = htg.enable(tiny_target("llama", torch.float32))
    drafter = tiny_domino(model)
    ids = random_prompts(1, model.config.vocab_size, seed=4)[0]
    kwargs = dict(assistant_model=drafter, tree_strategy=strategy, max_new_tokens=12, do_sample=False,
                  return_dict_in_generate=True, tree_costs=FLAT_COSTS)
    first, second = model.generate(ids, **kwargs), model.generate(ids, **kwargs)
    assert sum(first.tree_stats.tree_sizes) > 0
    # no state survives a call: identical calls build identical trees
    assert first.tree_stats.tree_sizes == second.tree_stats.tree_sizes
    # a calibration the caller sets on the drafter collects every round's predicted and accepted mass ...
    shared = drafter.depth_calibration = htg.DepthCalibration()
    out = model.generate(ids, **kwargs)
    assert shared.predicted == pytest.approx(out.tree_stats.calibration.predicted)
    assert shared.accepted == out.tree_stats.calibration.accepted
    # ... and the next call starts from it
    before = dict(shared.predicted)
    model.generate(ids, **kwargs)
    assert all(shared.predicted[d] > before[d] for d in before)
    drafter.depth_calibration = {"1": 0.5}
    with pytest.raises(TypeError, match="drafter.depth_calibration must be an hf_treegen.DepthCalibration"):
        model.generate(ids, **kwargs)
    with pytest.raises(ValueError, match="set drafter.depth_calibration"):  # the kwarg it replaced
        model.generate(ids, **kwargs, tree_calibration=shared)


def test_cost_aware_builders_refuse_to_run_without_a_profile():
    from hf_treegen.builders import BUILDERS

    settings_ = BuildSettings(budget=8, topk=8, top_m=16, temperature=1.0, max_depth=4)
    for name, cls in BUILDERS.items():
        if cls.cost_aware:
            with pytest.raises(ValueError, match="needs a CostProfile"):
                cls(settings_)
        else:
            cls(settings_)  # the others need nothing else


def test_calibrated_order_stays_a_tree_and_promotes_under_predicted_depths():
    import random

    from hf_treegen.builders.cond_adaptive import calibrated_order

    rng = random.Random(0)
    for _ in range(50):
        # a random best-first node list: (parent, token, depth, log-prob), parents before children
        nodes = []
        for i in range(1, 30):
            parent = rng.randrange(0, i)
            depth = 1 if parent == 0 else nodes[parent - 1][2] + 1
            parent_score = 0.0 if parent == 0 else nodes[parent - 1][3]
            nodes.append((parent, i, depth, parent_score - rng.random() * 2))
        ranked, masses = calibrated_order(nodes, lambda depth: 1.0 + depth)
        assert sorted(t for _, t, _, _ in ranked) == sorted(t for _, t, _, _ in nodes)
        assert masses == sorted(masses, reverse=True)
        for i, (parent, _, depth, _) in enumerate(ranked, start=1):
            assert parent < i  # every prefix is a tree
            assert depth == (1 if parent == 0 else ranked[parent - 1][2] + 1)
        same, _ = calibrated_order(nodes, lambda depth: 1.0)
        # with ratio 1 the order is by path probability (the input's best-first order up to ties)
        assert [n[3] for n in same] == sorted((n[3] for n in nodes), reverse=True)
