"""CaDDTree: the DDTree best-first order, cut at the size that maximises expected tokens per second."""

from __future__ import annotations

import math

from ..drafters.dflash import DraftBlock
from ..tree import DraftTree
from .base import BuildSettings, depth_candidates
from .cost_model import RoundCosts, best_tree_size
from .marginal import best_first_nodes, tree_from_nodes


class AdaptiveBuilder:
    name = "adaptive"
    needs_costs = True

    def __init__(self, settings: BuildSettings, costs: RoundCosts, **_):
        self.settings, self.costs = settings, costs

    def __call__(self, block: DraftBlock, root_token: int) -> DraftTree:
        ids, logp = depth_candidates(block, self.settings)
        nodes = list(best_first_nodes(logp, self.settings.budget))
        size = best_tree_size([math.exp(score) for *_, score in nodes], self.costs)
        return tree_from_nodes(root_token, ids, nodes[:size])
