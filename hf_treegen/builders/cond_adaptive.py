"""Cost-aware budgets on the conditional tree, with online per-depth calibration.

A weak or over-confident drafter's path probabilities overstate what the target accepts, and a
cost-aware cut trusts them. This builder rescales each node's mass by its depth's running ratio of
(nodes the target actually accepted) / (probability mass the drafter predicted), learned from the
walks of earlier rounds, before choosing the size that maximises expected tokens per second. The
ratios are kept per drafter (and tree temperature) for the life of the process, so each generate()
call starts from what earlier calls learned instead of from the drafter's own, over-confident, law.
"""

from __future__ import annotations

import math
import weakref

from ..tree import DraftTree
from .conditional import ConditionalBuilder, tree_from_conditional
from .cost_model import RoundCosts, best_tree_size


class DepthCalibration:
    """Per-depth accepted/predicted ratios with a pseudo-count prior of 1 (ratio 1 before any data)."""

    def __init__(self, prior: float = 1.0):
        self.prior = prior
        self.predicted: dict[int, float] = {}
        self.accepted: dict[int, float] = {}

    def ratio(self, depth: int) -> float:
        return (self.accepted.get(depth, 0.0) + self.prior) / (self.predicted.get(depth, 0.0) + self.prior)

    def merge(self, other: "DepthCalibration") -> None:
        for depth, mass in other.predicted.items():
            self.predicted[depth] = self.predicted.get(depth, 0.0) + mass
        for depth, count in other.accepted.items():
            self.accepted[depth] = self.accepted.get(depth, 0.0) + count

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        depths = tree.depths.tolist()
        for node in range(1, tree.num_nodes):
            d = depths[node]
            self.predicted[d] = self.predicted.get(d, 0.0) + math.exp(float(tree.scores[node]))
        for node in accepted_nodes[1:]:
            d = depths[node]
            self.accepted[d] = self.accepted.get(d, 0.0) + 1.0


_LEARNED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # drafter -> {temperature: DepthCalibration}


def learned_calibration(drafter, temperature: float) -> DepthCalibration:
    """The calibration shared by every cond_adaptive call on ``drafter`` at this tree temperature."""
    if drafter is None:
        return DepthCalibration()
    return _LEARNED.setdefault(drafter, {}).setdefault(temperature, DepthCalibration())


def calibrated_order(nodes: list, ratio) -> tuple[list, list[float]]:
    """Re-rank best-first nodes by calibrated mass (path probability x its depth's accepted/predicted
    ratio), capped by the parent's calibrated mass so every prefix of the new order is still a tree.

    When the drafter under-predicts deep acceptance (ratios > 1 past depth 1), a cut of this order
    keeps the deep nodes the target actually accepts instead of shallow siblings it rarely does.
    Returns the re-ordered nodes (parents renumbered) and their calibrated masses."""
    masses: list[float] = []
    for parent, _, depth, score in nodes:
        mass = math.exp(score) * ratio(depth)
        masses.append(mass if parent == 0 else min(mass, masses[parent - 1]))
    order = sorted(range(len(nodes)), key=lambda i: (-masses[i], nodes[i][2], i))
    new_index = {old + 1: new + 1 for new, old in enumerate(order)}
    new_index[0] = 0
    ranked = [(new_index[nodes[i][0]], *nodes[i][1:]) for i in order]
    return ranked, [masses[i] for i in order]


class CondAdaptiveBuilder(ConditionalBuilder):
    name = "cond_adaptive"
    needs_costs = True

    def __init__(self, settings, costs: RoundCosts, calibrate: bool = True, drafter=None, **_):
        super().__init__(settings)
        self.costs, self.calibrate = costs, calibrate
        self.calibration = learned_calibration(drafter, settings.temperature)

    def __call__(self, block, root_token: int) -> DraftTree:
        nodes = self.nodes(block)
        if self.calibrate:
            nodes, masses = calibrated_order(nodes, self.calibration.ratio)
        else:
            masses = [math.exp(score) for *_, score in nodes]
        return tree_from_conditional(root_token, nodes[: best_tree_size(masses, self.costs)])

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        self.calibration.observe(tree, accepted_nodes)
