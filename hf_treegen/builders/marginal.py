"""DDTree: the best-first tree over the factorised per-depth draft distribution.

Under ``Q(y) = prod_d q_d(y_d)`` the top-B prefixes by probability form a prefix-closed tree (a child
never outscores its parent) and maximise the expected accepted length under Q. A max-heap over rank
tuples pops them in order: popping a node pushes its next sibling and its first child.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from ..drafters.dflash import DraftBlock
from ..tree import DraftTree
from .base import RankNode, TreeBuilder, depth_candidates


def best_first_nodes(logp: list[list[float]], limit: int) -> Iterator[RankNode]:
    """Yield up to ``limit`` nodes as (parent, depth_index, rank, score), best score first.

    ``logp[d][r]`` is the log-prob of the rank-r token at depth d+1 (ranks sorted descending). The
    parent is a node index in yield order (root = 0, the i-th yielded node = i). A score is summed
    root-to-node in depth order, so it equals a brute-force path sum bit for bit.
    """
    if not logp or not logp[0] or limit < 1:
        return
    depth_count, width = len(logp), len(logp[0])
    heap = [(-logp[0][0], 0, 0, 0, 0, 0.0)]  # (-score, tiebreak, parent, depth, rank, parent score)
    pushed, popped = 1, 0
    while heap and popped < limit:
        neg, _, parent, depth, rank, parent_score = heapq.heappop(heap)
        popped += 1
        score = -neg
        yield RankNode(parent, depth, rank, score)
        if rank + 1 < width:
            sibling = parent_score + logp[depth][rank + 1]
            heapq.heappush(heap, (-sibling, pushed, parent, depth, rank + 1, parent_score))
            pushed += 1
        if depth + 1 < depth_count:
            child = score + logp[depth + 1][0]
            heapq.heappush(heap, (-child, pushed, popped, depth + 1, 0, score))
            pushed += 1


def tree_from_nodes(root_token: int, ids: list[list[int]], nodes: list[RankNode]) -> DraftTree:
    import torch

    tokens = [root_token] + [ids[depth][rank] for _, depth, rank, _ in nodes]
    parents = [-1] + [parent for parent, _, _, _ in nodes]
    scores = [0.0] + [score for *_, score in nodes]
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(scores))


class MarginalBuilder(TreeBuilder):
    name = "marginal"

    def __call__(self, block: DraftBlock, root_token: int) -> DraftTree:
        ids, logp = depth_candidates(block, self.settings)
        nodes = list(best_first_nodes(logp, self.settings.budget))
        return tree_from_nodes(root_token, ids, nodes)
