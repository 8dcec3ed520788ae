"""What the target accepts of a drafter's trees, per depth: the statistics the cost-aware builders
re-rank nodes with and the benchmarks report.

A :class:`DepthCalibration` is plain state owned by whoever made it: ``generate()`` makes a fresh one
per call unless the caller sets ``drafter.depth_calibration`` to carry what earlier calls learned, so two
identical calls without it build identical trees.
"""

from __future__ import annotations

import math

from .tree import DraftTree


class DepthCalibration:
    """Per-depth accepted/predicted ratios with a pseudo-count prior of 1 (ratio 1 before any data)."""

    def __init__(self, prior: float = 1.0):
        self.prior = prior
        self.predicted: dict[int, float] = {}  # depth -> summed drafter path probability of its nodes
        self.accepted: dict[int, float] = {}  # depth -> nodes the target accepted there

    def ratio(self, depth: int) -> float:
        return (self.accepted.get(depth, 0.0) + self.prior) / (self.predicted.get(depth, 0.0) + self.prior)

    def merge(self, other: "DepthCalibration") -> None:
        for depth, mass in other.predicted.items():
            self.predicted[depth] = self.predicted.get(depth, 0.0) + mass
        for depth, count in other.accepted.items():
            self.accepted[depth] = self.accepted.get(depth, 0.0) + count

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        """Add one round: every drafted node's predicted mass, and the nodes the target walked."""
        depths = tree.depths.tolist()
        for node in range(1, tree.num_nodes):
            d = depths[node]
            self.predicted[d] = self.predicted.get(d, 0.0) + math.exp(float(tree.scores[node]))
        for node in accepted_nodes[1:]:
            d = depths[node]
            self.accepted[d] = self.accepted.get(d, 0.0) + 1.0


__all__ = ["DepthCalibration"]
