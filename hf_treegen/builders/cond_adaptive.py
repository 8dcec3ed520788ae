"""Cost-aware budgets on the conditional tree, with online per-depth calibration.

A weak or over-confident drafter's path probabilities overstate what the target accepts, and a
cost-aware cut trusts them. This builder rescales each node's mass by its depth's running ratio of
(nodes the target actually accepted) / (probability mass the drafter predicted), learned from the
walks of earlier rounds, before choosing the size that maximises expected tokens per second. The
ratios live in the :class:`~hf_treegen.acceptance.DepthCalibration` the builder was given: a fresh
one per ``generate()`` call, or the drafter's ``depth_calibration`` where the caller set one, to start each call from what
earlier calls learned instead of from the drafter's own, over-confident, law.
"""

from __future__ import annotations

import math

from ..costs import best_tree_size
from ..tree import DraftTree
from .base import Node
from .conditional import ConditionalBuilder, tree_from_conditional


def calibrated_order(nodes: list[Node], ratio) -> tuple[list[Node], list[float]]:
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
    ranked = [Node(new_index[nodes[i][0]], *nodes[i][1:]) for i in order]
    return ranked, [masses[i] for i in order]


class CondAdaptiveBuilder(ConditionalBuilder):
    name = "cond_adaptive"
    cost_aware = True

    def __call__(self, block, root_token: int) -> DraftTree:
        nodes, masses = calibrated_order(self.nodes(block), self.calibration.ratio)
        return tree_from_conditional(root_token, nodes[: best_tree_size(masses, self.profile)])
