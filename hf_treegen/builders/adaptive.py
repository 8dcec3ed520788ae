"""CaDDTree: the DDTree best-first order, cut at the size that maximises expected tokens per second."""

from __future__ import annotations

import math

from ..costs import best_tree_size
from ..drafters.dflash import DraftBlock
from ..tree import DraftTree
from .base import TreeBuilder, depth_candidates
from .marginal import best_first_nodes, tree_from_nodes


class AdaptiveBuilder(TreeBuilder):
    name = "adaptive"
    cost_aware = True

    def __call__(self, block: DraftBlock, root_token: int) -> DraftTree:
        ids, logp = depth_candidates(block, self.settings)
        nodes = list(best_first_nodes(logp, self.settings.budget))
        size = best_tree_size([math.exp(score) for *_, score in nodes], self.profile)
        return tree_from_nodes(root_token, ids, nodes[:size])
