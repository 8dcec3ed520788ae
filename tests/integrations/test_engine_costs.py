"""The automatic path-probability cut for chain-verifying engines, on synthetic engine steps: the row
cost fit, the cut formula, warm-up and probing, calibration, and that the cut it settles on gives the
throughput of the best fixed cut on a simulated engine."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hf_treegen.integrations.engine_costs import EngineStep, PathCutoff, marginal_row_seconds, paying_cutoff


def steps_from(cost, pairs, tokens=4, noise=0.0, seed=0):
    """Engine steps at (rows, requests) pairs, timed by ``cost(rows, requests)`` plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    return [EngineStep(rows, requests, tokens, cost(rows, requests) + noise * rng.standard_normal())
            for rows, requests in pairs]


def test_the_row_cost_is_the_slope_apart_from_the_requests():
    cost = lambda rows, requests: 0.030 + 0.002 * rows + 0.005 * requests  # noqa: E731
    varied = [(rows, requests) for requests in (1, 2, 4) for rows in range(requests, 5 * requests + 1)]
    assert marginal_row_seconds(steps_from(cost, varied)) == pytest.approx(0.002)
    # one request count throughout: the intercept absorbs it, the slope is still exact
    assert marginal_row_seconds(steps_from(cost, [(rows, 4) for rows in range(4, 21)])) == pytest.approx(0.002)
    # noisy timings still give the slope closely
    noisy = steps_from(cost, varied * 4, noise=0.002)
    assert marginal_row_seconds(noisy) == pytest.approx(0.002, rel=0.15)


def test_no_row_cost_when_rows_only_follow_the_requests():
    cost = lambda rows, requests: 0.030 + 0.002 * rows  # noqa: E731
    # every request always drafts the same number of tokens: rows = 5 * requests, no separate slope
    assert marginal_row_seconds(steps_from(cost, [(5 * r, r) for r in (1, 2, 3, 4, 2, 1)])) is None
    assert marginal_row_seconds(steps_from(cost, [(5, 1)] * 10)) is None
    assert marginal_row_seconds(steps_from(cost, [(5, 1), (6, 1)])) is None  # too few steps
    # a fit never prices rows below zero (a machine that sped up mid-window)
    assert marginal_row_seconds(steps_from(lambda rows, _: 0.05 - 0.001 * rows, [(r, 1) for r in range(1, 9)])) == 0


def test_the_cut_is_the_row_cost_times_the_throughput_over_the_calibration():
    assert paying_cutoff(0.002, 100.0, 1.0, 0.9) == pytest.approx(0.2)
    assert paying_cutoff(0.002, 100.0, 2.0, 0.9) == pytest.approx(0.1)  # an underconfident drafter: cut lower
    assert paying_cutoff(0.02, 100.0, 1.0, 0.9) == 0.9  # never more than the cap


def test_warm_up_then_the_measured_cut_with_a_probe_every_so_often():
    cutoff = PathCutoff(warmup=8, probe_every=16)
    cost = lambda rows, requests: 0.030 + 0.002 * rows  # noqa: E731
    rows = itertools.cycle([4, 5, 6, 8])
    assert cutoff.probing() and cutoff.cutoff() == 0.0
    for _ in range(7):
        cutoff.observe(steps_from(cost, [(next(rows), 1)], tokens=2)[0])
        assert cutoff.row_seconds is None and cutoff.cutoff() == 0.0  # whole chains while warming up
    cuts = []
    for _ in range(40):
        cutoff.observe(steps_from(cost, [(next(rows), 1)], tokens=2)[0])
        cuts.append(cutoff.cutoff())
        assert cutoff.row_seconds == pytest.approx(0.002)
        assert cuts[-1] in (0.0, pytest.approx(0.002 * cutoff.tokens_per_second))
    assert [i for i, c in enumerate(cuts) if c == 0] == [8, 24]  # after the 16th and 32nd step: one probe each


def test_probing_steps_draft_whole_and_half_chains_in_turn():
    cutoff = PathCutoff(warmup=4, probe_every=4)
    limits = []
    for rows in [3, 5, 4, 5, 3, 5, 4, 5, 3, 5, 4, 5, 3]:
        limits.append(cutoff.draft_limit(7))
        cutoff.observe(EngineStep(rows, 1, 2, 0.03 + 0.002 * rows))
    # warm-up (4 steps) in turn, then whole chains except on every 4th step, a probe: half, whole, half
    assert limits == [7, 3, 7, 3, 3, 7, 7, 7, 7, 7, 7, 7, 3]


def test_an_idle_gap_between_requests_is_left_out():
    cutoff = PathCutoff()
    for rows in [4, 5, 6, 7] * 4:
        cutoff.observe(EngineStep(rows, 1, 2, 0.03 + 0.002 * rows))
    before = (cutoff.observed, cutoff.tokens_per_second)
    cutoff.observe(EngineStep(5, 1, 1, 5.0))  # the engine waited for the next generate() call
    assert (cutoff.observed, cutoff.tokens_per_second) == before


def test_calibration_is_kept_over_expected_and_bounded():
    cutoff = PathCutoff(calibration_bounds=(0.25, 4.0))
    assert cutoff.calibration == 1.0
    cutoff.record_round(expected=1.5, kept=3)
    cutoff.record_round(expected=0.5, kept=1)
    assert cutoff.calibration == pytest.approx(2.0)
    cutoff.record_round(expected=100.0, kept=0)
    assert cutoff.calibration == 0.25


def simulated_throughput(cut, path_probabilities, requests, base_s, row_s, request_s, trust):
    """Expected tokens per second of a chain engine whose drafts keep token i with probability
    ``trust * path_probabilities[i]`` (path probabilities fall along the chain), cutting below ``cut``."""
    kept = [p for p in path_probabilities if p >= cut]
    tokens = requests * (1 + trust * sum(kept))
    return tokens / (base_s + request_s * requests + row_s * requests * (1 + len(kept)))


@pytest.mark.parametrize("requests, row_s, trust", [(1, 0.0015, 1.0), (4, 0.0015, 1.0), (8, 0.0015, 1.0),
                                                    (8, 0.004, 1.0), (4, 0.0015, 0.6), (8, 0.03, 1.0)])
def test_the_settled_cut_gives_the_best_fixed_cuts_throughput(requests, row_s, trust):
    """A simulated engine (expected values, no sampling): the cut PathCutoff settles on, fed with the
    steps its own cuts produce, loses at most 1% against the best of every fixed cut."""
    probabilities = [0.8, 0.6, 0.45, 0.3, 0.2, 0.12, 0.07]  # one request's drafted path, each step alike
    engine = dict(path_probabilities=probabilities, requests=requests, base_s=0.025, row_s=row_s,
                  request_s=0.004, trust=trust)
    cutoff = PathCutoff()
    for step in range(200):
        cut = cutoff.cutoff()
        kept = [p for p in probabilities if p >= cut]
        # requests draft alike, except that one in each step happens to draft one token less, so that
        # the rows vary within a step count too (as lookups, room and requests' ends make them do)
        rows = requests * (1 + len(kept)) - (1 if kept and step % 3 else 0)
        seconds = 0.025 + 0.004 * requests + row_s * rows
        tokens = requests * (1 + trust * sum(kept))
        cutoff.observe(EngineStep(rows, requests, tokens, seconds))
        if kept:
            cutoff.record_round(expected=sum(kept), kept=trust * sum(kept))
    settled = cutoff.measured_cutoff()
    best = max(simulated_throughput(c, **engine) for c in [0.0] + probabilities + [1.0])
    assert simulated_throughput(settled, **engine) >= 0.99 * best
