"""The middle rung of the conditioning ladder: the Domino correction computed once along the greedy
corrected chain, and shared by every node at a depth (a factorised tree on corrected marginals)."""

from __future__ import annotations

import torch

from ..drafters.domino import CorrectionScorer
from ..tree import DraftTree
from .base import TreeBuilder
from .conditional import sequential_scorer
from .marginal import best_first_nodes, tree_from_nodes


def greedy_corrected_chain(scorer: CorrectionScorer) -> tuple[list[list[int]], list[list[float]]]:
    """Follow the corrected argmax from the root; per depth, the candidates sorted by corrected log-prob.

    Returns (ids, logp) as depth-major lists, best first, ready for a best-first heap.
    """
    ids, logps = [], []
    state = scorer.root_state
    for row in range(scorer.depth):
        logp = scorer.child_logprobs(row, state)[0]  # (M,)
        values, order = logp.sort(descending=True, stable=True)
        tokens = scorer.row(row).cand[order]
        ids.append(tokens.tolist())
        logps.append(values.tolist())
        if row + 1 < scorer.depth:
            state = scorer.child_states(state, tokens[:1])
    return ids, logps


class StaticCorrectedBuilder(TreeBuilder):
    name = "static_corrected"

    def __call__(self, block, root_token: int) -> DraftTree:
        s = self.settings
        scorer = sequential_scorer(block, s, self.name)
        ids, logp = greedy_corrected_chain(scorer)
        width = min(s.topk, len(logp[0]))
        nodes = list(best_first_nodes([row[:width] for row in logp], s.budget))
        return tree_from_nodes(root_token, ids, nodes)
