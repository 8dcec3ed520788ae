"""The released DFlash/Domino behaviour: one path, the draft argmax at each depth."""

from __future__ import annotations

from ..drafters.dflash import DraftBlock
from ..tree import DraftTree
from .base import BuildSettings, depth_candidates


class ChainBuilder:
    name = "chain"

    def __init__(self, settings: BuildSettings, **_):
        self.settings = settings

    def __call__(self, block: DraftBlock, root_token: int) -> DraftTree:
        ids, logp = depth_candidates(block.logits, self.settings)
        length = min(len(ids), self.settings.budget)
        tokens = [ids[d][0] for d in range(length)]
        scores, total = [], 0.0
        for d in range(length):
            total += logp[d][0]
            scores.append(total)
        return DraftTree.chain(root_token, tokens, scores)
