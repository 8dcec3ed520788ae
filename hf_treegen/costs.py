"""What decoding costs on this machine, as plain numbers: the verify curve and the round profile.

Nothing here measures anything (see :mod:`hf_treegen.calibration` for that); these are the values
cost-aware tree sizes and choice-probe widths are planned with, so a caller (or a test) can build one
from known numbers and get identical plans on any machine.

    VerifyCostModel   seconds of one target forward over N rows, piecewise-linear in N
    CostProfile       a verify curve plus one drafter forward and the tree build per node
    best_tree_size    the best-first prefix that maximises expected tokens per second
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

PROFILE_VERSION = 7  # 2: verify curves timed at every size up to 9 rows, in interleaved passes; 3: packed_from_rows;
# 4: draft_s includes the drafter context of the previous round's commits, and head_shortcut; 5: a verify size
# costs its fastest pass, and the curve is the lower envelope of the measurements; 6: round_s and step_s;
# 7: tree forwards read grouped key/value heads in place (target/grouped.py)


@dataclass(frozen=True)
class VerifyCostModel:
    rows: tuple[int, ...]  # increasing numbers of rows in one verify forward
    seconds: tuple[float, ...]  # non-decreasing seconds, none above what was measured at that size

    def seconds_for(self, rows: int) -> float:
        """Piecewise-linear in ``rows``, extended linearly past the measured grid."""
        xs, ys = self.rows, self.seconds
        if rows <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if rows <= xs[i]:
                w = (rows - xs[i - 1]) / (xs[i] - xs[i - 1])
                return ys[i - 1] + w * (ys[i] - ys[i - 1])
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
        return ys[-1] + slope * (rows - xs[-1])

    @classmethod
    def from_measurements(cls, rows, seconds) -> "VerifyCostModel":
        """Sort by rows and take the lower envelope: each size costs the least measured at it or at any
        wider size. The curve is then non-decreasing (timing noise must not reward bigger trees), and a
        slow outlier at one size stays at that size: a running maximum would carry it into every wider
        one, pricing all mid-size trees as if the machine had been busy while they were timed."""
        pairs = sorted(zip(rows, seconds))
        envelope, running = [], math.inf
        for _, s in reversed(pairs):
            running = min(running, s)
            envelope.append(running)
        return cls(tuple(r for r, _ in pairs), tuple(reversed(envelope)))


@dataclass(frozen=True)
class CostProfile:
    """Seconds per round of each part, for one (target, drafter, device, dtype, threads)."""

    verify: VerifyCostModel  # target forward over N rows (N = 1 is one plain decode step)
    draft_s: float = 0.0  # one draft: the context of the last commits, one drafter forward, its draft logits
    build_s_per_node: float = 0.0  # tree building, per drafted node
    # forwards of fewer rows run the default CPU kernels, wider ones the packed ones (1: all packed);
    # the verify curve is timed that way (see hf_treegen.calibration.kernel_plan)
    packed_from_rows: int = 1
    # whether forwards on the default kernels apply the LM head as (V, H) @ (H, N) (the verifier's
    # shortcut) or through the model's own head; which is faster depends on the CPU's BLAS
    head_shortcut: bool = True
    # measured by a quick first-use calibration (fewer sizes and passes); a full calibrate() replaces it
    quick: bool = False
    # what a draft round pays besides those (lookup grafts, the walk, the commit, the loop's own work),
    # and what a plain step pays besides its one-row forward
    round_s: float = 0.0
    step_s: float = 0.0

    def round_seconds(self, nodes: int, extra_rows: float = 0.0) -> float:
        """A draft round with ``nodes`` drafted nodes: draft + build + one verify of nodes + 1 rows, plus
        ``extra_rows`` that other sources add to the tree (lookup grafts; an expected count), plus the
        round's fixed cost."""
        return (self.draft_s + self.build_s_per_node * nodes + self.verify.seconds_for(nodes + 1 + extra_rows)
                + self.round_s)

    def step_seconds(self) -> float:
        """A plain one-token step: no draft, no build, one single-row forward and the step's fixed cost."""
        return self.verify.seconds_for(1) + self.step_s

    def per_sequence(self, batch: int) -> "CostProfile":
        """What each of ``batch`` sequences decoded together pays: a verify of n rows per sequence is one
        forward of batch * n rows, and one drafter forward drafts for all of them, each cost shared by
        the batch. (Rows of different sequences attend to different contexts; on the devices measured
        the forward's cost follows its row count.)"""
        if batch == 1:
            return self
        verify = VerifyCostModel(tuple(r / batch for r in self.verify.rows),
                                 tuple(s / batch for s in self.verify.seconds))
        return replace(self, verify=verify, draft_s=self.draft_s / batch, round_s=self.round_s / batch,
                       step_s=self.step_s / batch)

    @property
    def max_rows(self) -> int:
        """The widest forward that was measured (wider ones are extrapolated)."""
        return self.verify.rows[-1]

    def to_dict(self) -> dict:
        return {"version": PROFILE_VERSION, "verify_rows": list(self.verify.rows),
                "verify_seconds": list(self.verify.seconds), "draft_s": self.draft_s,
                "build_s_per_node": self.build_s_per_node, "packed_from_rows": self.packed_from_rows,
                "head_shortcut": self.head_shortcut, "quick": self.quick, "round_s": self.round_s,
                "step_s": self.step_s}

    @classmethod
    def from_dict(cls, data: dict) -> "CostProfile":
        if data.get("version") != PROFILE_VERSION:
            raise ValueError(f"cost profile version {data.get('version')!r} is not {PROFILE_VERSION} "
                             f"(another hf_treegen release measured it)")
        verify = VerifyCostModel.from_measurements(data["verify_rows"], data["verify_seconds"])
        return cls(verify, float(data["draft_s"]), float(data["build_s_per_node"]), int(data["packed_from_rows"]),
                   bool(data["head_shortcut"]), bool(data.get("quick", False)), float(data["round_s"]),
                   float(data["step_s"]))

    @classmethod
    def from_verify_seconds(cls, seconds_by_rows: dict[int, float], draft_s: float = 0.0,
                            build_s_per_node: float = 0.0, packed_from_rows: int = 1,
                            head_shortcut: bool = True, quick: bool = False, round_s: float = 0.0,
                            step_s: float = 0.0) -> "CostProfile":
        """A profile from known numbers, e.g. ``{1: 0.060, 9: 0.080, 17: 0.110}`` (tests, what-ifs)."""
        rows = sorted(seconds_by_rows)
        return cls(VerifyCostModel.from_measurements(rows, [seconds_by_rows[r] for r in rows]), draft_s,
                   build_s_per_node, packed_from_rows, head_shortcut, quick, round_s, step_s)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        """Read a saved profile; a broken file is reported with its path."""
        path = Path(path)
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError is a ValueError
            raise ValueError(f"{path} is not a readable hf_treegen cost profile ({err}); delete it or "
                             f"measure again with hf_treegen.calibrate(model, drafter).") from err


def best_tree_size(masses: list[float], costs: CostProfile, extra_rows: float = 0.0,
                   extra_tokens: float = 0.0) -> int:
    """The n maximising expected tokens per second (1 + extra_tokens + sum of the first n masses) /
    round cost(n, extra_rows).

    ``masses`` are best-first node probabilities. Every n is scored (not just up to the first local
    maximum), so the choice does not rely on the verify curve being convex, which it is not on CPUs.
    ``extra_rows`` / ``extra_tokens``: what lookup grafts add to each round's tree, in verify rows and
    in accepted tokens (expected counts); rows that are verified anyway move the drafted nodes up the
    verify curve, where on a CPU they cost more.
    """
    best_n, best_rate, total = 0, (1.0 + extra_tokens) / costs.round_seconds(0, extra_rows), 1.0 + extra_tokens
    for n, mass in enumerate(masses, start=1):
        total += mass
        rate = total / costs.round_seconds(n, extra_rows)
        if rate > best_rate and not math.isclose(rate, best_rate):
            best_n, best_rate = n, rate
    return best_n


__all__ = ["CostProfile", "VerifyCostModel", "best_tree_size"]
