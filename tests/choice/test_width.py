"""The width planner: expected rounds, the cost-curve search and re-planning after a miss."""

import time

import pytest
import torch

from hf_treegen.calibration import cached_profile as real_cached_profile  # imported before conftest pins them
from hf_treegen.calibration import calibrate as real_calibrate
from hf_treegen.costs import VerifyCostModel
from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select
from hf_treegen.choice.engines import unary_width_filter
from hf_treegen.choice.width import CHUNKED, choose_width, expected_rounds, rows_within
from tests.choice.test_engines import _model, case
from tests.helpers import bpe_tokenizer


@pytest.fixture(scope="module")
def tok():
    return bpe_tokenizer()


def test_expected_rounds():
    ranked, probs = [0, 1, 2, 3], [0.4, 0.3, 0.2, 0.1]
    assert expected_rounds(ranked, probs, (0,), 3, width=4) == 1.0  # everything kept: never a miss
    # slot 1 keeps label 1 of {1,2,3}: miss 0.3/0.6; slot 2 keeps 2 of {2,3}: miss 0.1/0.3
    assert expected_rounds(ranked, probs, (0,), 3, width=1) == pytest.approx(1 + 0.3 / 0.6 + 0.1 / 0.3)
    # labels already in play come first, whatever their unary rank
    assert expected_rounds(ranked, probs, (3, 2), 3, width=1) == pytest.approx(1 + 0.3 / 0.7)
    assert expected_rounds(ranked, probs, (0,), 3, 2) < expected_rounds(ranked, probs, (0,), 3, 1)


def test_rows_within_inverts_the_curve():
    cost = VerifyCostModel((1, 8, 64), (0.01, 0.02, 0.10))
    assert rows_within(cost, 0.02) == 8
    assert cost.seconds_for(rows_within(cost, 0.05)) <= 0.05 < cost.seconds_for(rows_within(cost, 0.05) + 1)
    assert rows_within(cost, 0.001) == 0


def _plan(tok, cost, k=10, n=3):
    labels = [f"[{i + 1}]" for i in range(k)]
    g = ChoiceGrammar(tok, labels, n)
    root = torch.randn(320, generator=torch.Generator().manual_seed(0))
    state, path = g.initial, ()
    while len(g.allowed(state)) == 1:
        path += g.allowed(state)
        state = g.advance(state, path[-1])
    path += (g.allowed(state)[0],)
    state = g.advance(state, path[-1])
    from hf_treegen.choice.width import label_ranking

    ranked, probs = label_ranking(g, root)
    return choose_width(g, path, state, lambda w: unary_width_filter(g, root, w), ranked, probs, cost), g


def test_flat_cost_picks_the_full_probe(tok):
    # forwards cost the same at any size: one full round (no misses) beats everything
    (width, probe), g = _plan(tok, VerifyCostModel((1, 10_000), (0.1, 0.1)))
    assert width is None and probe is not None


def test_steep_cost_picks_chunked(tok):
    # a row costs as much as a forward: per-decision forwards of a few tokens win
    (width, probe), _ = _plan(tok, VerifyCostModel((1, 2), (0.1, 0.2)))
    assert width == CHUNKED and probe is None


def test_auto_width_replans_and_stays_exact(tok):
    # cheap forwards up to 16 rows, ruinous beyond: narrow probes win, and miss on a random model
    steep = VerifyCostModel((1, 16, 17), (0.01, 0.01, 10.0))
    model = _model("llama", torch.float64, "sdpa", tok)
    replans = 0
    for seed in range(12):
        g, prompt = case(seed, tok)
        auto = compiled_select(model, prompt, g, width="auto", costs=steep)
        assert auto.token_ids == serial_select(model, prompt, g).token_ids
        plans = auto.extra.get("plans", [])
        assert auto.rounds == sum(p != CHUNKED for p in plans)
        replans += len(plans) > 1
    assert replans > 0  # after a miss the rest of the output is planned again


def test_labels_sharing_a_first_token_split_its_probability(tok):
    from hf_treegen.choice.width import label_ranking

    g = ChoiceGrammar(tok, ["[1]", "[12]", "[2]", "alpha"], 2)
    first = [ids[0] for ids in g.spellings.by_kind["first"]]
    root = torch.zeros(320)
    root[first[0]] = 3.0  # the token starting [1] (and [12], if they share it) is the likeliest
    ranked, probs = label_ranking(g, root)
    assert sum(probs) == pytest.approx(1.0)
    assert ranked[0] == 0
    distinct = sorted(set(first))
    mass = torch.softmax(root[torch.tensor(distinct)].double(), 0).tolist()
    for token, token_mass in zip(distinct, mass):  # a first token's mass, split evenly among its labels
        members = [i for i, t in enumerate(first) if t == token]
        assert sum(probs[i] for i in members) == pytest.approx(token_mass)
        assert all(probs[i] == pytest.approx(probs[members[0]]) for i in members)
    assert len(distinct) < len(first)  # the case under test: some labels share a first token


def test_chunk_sizes_follow_the_decisions_of_the_predicted_path(tok):
    from hf_treegen.choice.probe import build_probe
    from hf_treegen.choice.width import chunk_sizes

    g = ChoiceGrammar(tok, ["[1]", "[12]", "[2]", "alpha", "beta"], 3)
    root = torch.randn(320, generator=torch.Generator().manual_seed(1))
    first = g.allowed(g.initial)[0]
    narrow = build_probe(g, (first,), unary_width_filter(g, root, 1))
    sizes = chunk_sizes(narrow)
    depths = narrow.tree.depths.tolist()
    decision_depths = sorted({depths[r] for r in narrow.decision_rows})
    assert len(sizes) == len(decision_depths) and all(s >= 1 for s in sizes)
    assert sum(sizes) == decision_depths[-1] + 1  # every token up to the last decision is fed once


def test_a_first_time_calibration_is_reported_apart_from_the_selection_latency(tok, monkeypatch):
    from hf_treegen import calibration
    from tests.helpers import FLAT_COSTS

    asked = []

    def slow_first_calibration(model, drafter=None, **kwargs):
        asked.append(kwargs)
        time.sleep(0.5)  # stands in for writing the curve at a new context size
        return FLAT_COSTS

    monkeypatch.setattr(calibration, "cached_profile", lambda *a, **kw: None)  # nothing cached yet
    monkeypatch.setattr(calibration, "calibrate", slow_first_calibration)
    model = _model("llama", torch.float64, "sdpa", tok)
    g, prompt = case(0, tok)
    start = time.perf_counter()
    result = compiled_select(model, prompt, g, width="auto")
    wall = time.perf_counter() - start
    assert result.setup_seconds >= 0.5
    assert asked[0]["quick"] and not asked[0]["packed"]  # first use on the default kernels
    own = asked[0]["first_use"]  # timed from the selection's own prefill and one one-row forward
    assert own.rows[0] == 1 and own.rows[-1] >= prompt.shape[1]
    assert result.seconds <= wall - result.setup_seconds  # latency counts the selection, not the measuring
    given = compiled_select(model, prompt, g, width="auto", costs=FLAT_COSTS.verify)
    assert given.setup_seconds < 0.1 and given.token_ids == result.token_ids


def test_first_use_plans_from_its_own_forwards_and_caches_them(tok, monkeypatch, tmp_path):
    """An empty calibration cache: the first selection at a context size times nothing but its own
    prefill and a one-row forward, caches that curve (quick), and the next selection reads it."""
    from hf_treegen import calibration

    monkeypatch.setattr(calibration, "calibrate", real_calibrate)
    monkeypatch.setattr(calibration, "cached_profile", real_cached_profile)
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "measure_profile", lambda *a, **kw: pytest.fail("measured the machine"))
    model = _model("llama", torch.float64, "sdpa", tok)
    g, prompt = case(0, tok)
    first = compiled_select(model, prompt, g, width="auto")
    files = list((tmp_path / "calibration").glob("*.json"))
    assert len(files) == 1
    profile = calibration.CostProfile.load(files[0])
    assert profile.quick and profile.verify.rows[0] == 1 and profile.verify.rows[-1] >= prompt.shape[1]
    again = compiled_select(model, prompt, g, width="auto")
    assert again.token_ids == first.token_ids == serial_select(model, prompt, g).token_ids
