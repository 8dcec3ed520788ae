"""What a draft token costs a running serving engine, measured from the engine's own steps, and the
path probability below which drafting it does not pay (the proposer's ``min_path_prob="auto"``).

An engine that verifies chains runs one target forward per step over every scheduled request's rows:
its root plus the drafted tokens. Each drafted token is one more row, and that row costs the same
whether or not the target keeps the token. Adding a token that is kept with probability ``q`` to a
step that emits ``T`` tokens in ``t`` seconds raises throughput exactly when

    (T + q) / (t + b) > T / t    <=>    q > b * T / t

with ``b`` the seconds one more row adds to the forward. So the cut is the marginal row cost times
the throughput. Both come from the steps the engine runs anyway: nothing extra is run or cached.

* ``b`` is the slope of a least-squares fit of step seconds on rows, with the number of requests as a
  second regressor (attention and sampling also cost per request, and requests come and go);
* ``T / t`` is tokens over seconds of the same recent decode steps;
* ``q`` is the drafter's path probability times a measured calibration: tokens the target kept over
  the probabilities the drafter gave them, over recent rounds (drafters are seldom calibrated).

While the fit is still unknown the cut is 0, and every ``probe_every`` steps one step drafts uncut. On
those steps chains are alternately whole and cut to half their length: with one request drafting whole
chains, or with a high cut, the row counts would not vary, and ``b`` could not be measured.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EngineStep:
    """One decode step of the engine, seen from the proposer."""

    rows: int  # rows of the target's forward: each request's root plus the tokens drafted for it
    requests: int
    tokens: float  # tokens the step emitted over all its requests (kept drafts + one each)
    seconds: float  # wall time of the step: from one propose() call to the next


def marginal_row_seconds(steps: list[EngineStep]) -> float | None:
    """Seconds one more row adds to a step: the ``rows`` coefficient of the least-squares fit
    ``seconds ~ 1 + rows + requests``. None when the rows never varied apart from the requests."""
    if len(steps) < 3:
        return None
    design = np.array([[1.0, s.rows, s.requests] for s in steps])  # (S, 3)
    seconds = np.array([s.seconds for s in steps])  # (S,)
    # the rows coefficient is measured only if the rows vary apart from the other two columns (with
    # the requests constant, lstsq splits the intercept between them and leaves the slope exact)
    if np.linalg.matrix_rank(design) == np.linalg.matrix_rank(design[:, [0, 2]]):
        return None
    coefficients, *_ = np.linalg.lstsq(design, seconds, rcond=None)
    return max(float(coefficients[1]), 0.0)


def paying_cutoff(row_seconds: float, tokens_per_second: float, calibration: float, max_cutoff: float) -> float:
    """The drafter path probability below which one more drafted row lowers throughput."""
    return min(row_seconds * tokens_per_second / calibration, max_cutoff)


class PathCutoff:
    """The automatic ``min_path_prob``: call :meth:`observe` with every decode step and
    :meth:`record_round` with every drafted chain's outcome; :meth:`cutoff` is the cut to use next."""

    def __init__(self, window: int = 128, warmup: int = 8, probe_every: int = 16, max_cutoff: float = 1.0,
                 calibration_bounds: tuple[float, float] = (0.25, 4.0)):
        self.steps: deque[EngineStep] = deque(maxlen=window)
        self.rounds: deque[tuple[float, float]] = deque(maxlen=4 * window)  # (expected kept, kept) per chain
        self.warmup, self.probe_every, self.max_cutoff = warmup, probe_every, max_cutoff
        self.calibration_bounds = calibration_bounds
        self.observed = 0
        self.row_seconds: float | None = None  # the last fit's marginal row cost

    def observe(self, step: EngineStep) -> None:
        """A decode step; one far slower than the recent ones (the engine sat idle between calls) is
        left out, because a single such step would tilt the fit."""
        if self.steps and step.seconds > 10 * float(np.median([s.seconds for s in self.steps])):
            return
        self.steps.append(step)
        self.observed += 1
        if len(self.steps) >= self.warmup:
            fitted = marginal_row_seconds(list(self.steps))
            self.row_seconds = fitted if fitted is not None else self.row_seconds

    def record_round(self, expected: float, kept: float) -> None:
        """A drafted chain the drafter expected ``expected`` of its tokens kept (the sum of their path
        probabilities), of which the target kept ``kept``."""
        self.rounds.append((expected, kept))

    @property
    def calibration(self) -> float:
        """Kept tokens per expected kept token over recent rounds (1 until there are any)."""
        expected = sum(e for e, _ in self.rounds)
        if expected <= 0:
            return 1.0
        low, high = self.calibration_bounds
        return min(max(sum(k for _, k in self.rounds) / expected, low), high)

    @property
    def tokens_per_second(self) -> float:
        seconds = sum(s.seconds for s in self.steps)
        return sum(s.tokens for s in self.steps) / seconds if seconds > 0 else 0.0

    def probing(self) -> bool:
        """Whether the next step drafts uncut (during warm-up, and every ``probe_every`` steps)."""
        return self.row_seconds is None or self.observed % self.probe_every == 0

    def measured_cutoff(self) -> float | None:
        """The paying cut by the recent steps (None before the row cost is known)."""
        if self.row_seconds is None:
            return None
        return paying_cutoff(self.row_seconds, self.tokens_per_second, self.calibration, self.max_cutoff)

    def cutoff(self) -> float:
        """The path probability below which the next step drafts nothing (0 while probing)."""
        return 0.0 if self.probing() else self.measured_cutoff()

    def draft_limit(self, most: int) -> int:
        """Tokens a request may draft next step, of ``most``: all, except that probing steps take
        turns between all and half, so that the rows vary."""
        if not self.probing():
            return most
        turn = self.observed if self.row_seconds is None else self.observed // self.probe_every
        return most if turn % 2 == 0 else most // 2
