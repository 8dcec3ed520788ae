"""The released DFlash/Domino behaviour: one path. DFlash takes the draft argmax per depth; Domino
follows its corrected argmax, each step conditioned on the tokens chosen before it."""

from __future__ import annotations

from ..drafters.domino import CorrectionScorer, DominoBlock
from ..tree import DraftTree
from .base import TreeBuilder, depth_candidates


class ChainBuilder(TreeBuilder):
    name = "chain"

    def __call__(self, block, root_token: int) -> DraftTree:
        s = self.settings
        if isinstance(block, DominoBlock):
            from .static_corrected import greedy_corrected_chain

            ids, logp = greedy_corrected_chain(CorrectionScorer(block, s.top_m, s.temperature, s.max_depth))
        else:
            ids, logp = depth_candidates(block, s)
        length = min(len(ids), s.budget)
        tokens = [ids[d][0] for d in range(length)]
        scores, total = [], 0.0
        for d in range(length):
            total += logp[d][0]
            scores.append(total)
        return DraftTree.chain(root_token, tokens, scores)
