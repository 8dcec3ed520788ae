"""DominoTree: best-first trees scored with each path's own Domino correction.

A node's children are scored with the GRU state of the node's own root-to-node path, so the tree
distribution is path-conditional, not a product of per-depth marginals. Child log-probs are <= 0, so
a child never outscores its parent and the B best nodes form a prefix-closed tree. Two builders
produce that same tree:

* ``conditional_heap``: the reference. Pop the best node, score its top-k children with its state.
* ``conditional_frontier``: depth-synchronous and vectorised. Expand every surviving node of one depth
  at once, keep the best B of each depth (a top-B node's ancestors are top-B nodes), prune nodes that
  cannot beat the current B-th best, and finish with one stable top-B selection. It scores more
  nodes than the heap but in a handful of batched ops per depth instead of Python work per pop.
"""

from __future__ import annotations

import heapq

import torch

from ..drafters.domino import CorrectionScorer, DominoBlock
from ..tree import DraftTree
from .base import BuildSettings

Node = tuple[int, int, int, float]  # (parent node index, token, depth, cumulative log-prob)


def conditional_heap(scorer: CorrectionScorer, budget: int, k: int) -> list[Node]:
    """Reference best-first builder; nodes come out in pop order (node i+1 = the i-th popped)."""
    nodes: list[Node] = []
    states = [scorer.root_state]  # (1, G) per node, root first
    heap: list = []
    counter = 0

    def push_children(node: int, depth: int, score: float, state: torch.Tensor) -> None:
        nonlocal counter
        if depth >= scorer.depth:
            return
        logp = scorer.child_logprobs(depth, state)[0]  # (M,)
        values, index = logp.topk(min(k, logp.numel()))
        for lp, idx in zip(values.tolist(), index.tolist()):
            token = int(scorer.cand[depth, idx])
            heapq.heappush(heap, (-(score + lp), counter, node, token, depth + 1, score + lp))
            counter += 1

    push_children(0, 0, 0.0, scorer.root_state)
    while heap and len(nodes) < budget:
        _, _, parent, token, depth, score = heapq.heappop(heap)
        nodes.append((parent, token, depth, score))
        if len(nodes) == budget or depth >= scorer.depth:  # no children needed: skip the GRU step
            states.append(None)
            continue
        state = scorer.child_states(states[parent], torch.tensor([token]))
        states.append(state)
        push_children(len(nodes), depth, score, state)
    return nodes


def conditional_frontier(scorer: CorrectionScorer, budget: int, k: int) -> list[Node]:
    """Vectorised builder giving the same nodes as ``conditional_heap`` (on tie-free scores), in the
    same order (best score first, parents before children)."""
    states = scorer.root_state  # (n, G) states of the current frontier
    device = scorer.base_c.device
    scores = torch.zeros(1, device=device)  # (n,) their cumulative log-probs
    ledger_ids = torch.tensor([-1], device=device)  # (n,) their ledger rows; -1 is the root
    parents, tokens, depths, all_scores = [], [], [], []
    kth_best = float("-inf")
    for row in range(scorer.depth):
        logp = scorer.child_logprobs(row, states)  # (n, M)
        kk = min(k, logp.shape[1])
        top_lp, top_idx = logp.topk(kk, dim=-1)  # (n, kk)
        child_scores = (scores[:, None] + top_lp).reshape(-1)  # (n*kk,)
        order = torch.sort(child_scores, descending=True, stable=True).indices[:budget]
        order = order[child_scores[order] >= kth_best]  # cannot enter the top B otherwise
        if order.numel() == 0:
            break
        owner = order // kk  # frontier row of each kept child
        child_tokens = scorer.cand[row][top_idx.reshape(-1)[order]]
        base = sum(t.numel() for t in tokens)
        parents.append(ledger_ids[owner])
        tokens.append(child_tokens)
        depths.append(torch.full((order.numel(),), row + 1, device=device))
        all_scores.append(child_scores[order])
        states = scorer.child_states(states[owner], child_tokens)
        scores = child_scores[order]
        ledger_ids = torch.arange(base, base + order.numel(), device=device)
        pool = torch.cat(all_scores)
        if pool.numel() >= budget:
            kth_best = float(pool.topk(budget).values[-1])
    if not tokens:
        return []
    parents_t, tokens_t = torch.cat(parents), torch.cat(tokens)
    depths_t, scores_t = torch.cat(depths), torch.cat(all_scores)
    # best score first; on equal scores the shallower node (a parent) first: one stable sort
    by_depth = torch.sort(depths_t, stable=True).indices
    chosen = by_depth[torch.sort(scores_t[by_depth], descending=True, stable=True).indices[:budget]]
    chosen_rows = chosen.tolist()
    node_of = {row: i + 1 for i, row in enumerate(chosen_rows)}
    node_of[-1] = 0
    parents_l, tokens_l = parents_t.tolist(), tokens_t.tolist()
    depths_l, scores_l = depths_t.tolist(), scores_t.tolist()
    return [(node_of[parents_l[r]], tokens_l[r], depths_l[r], scores_l[r]) for r in chosen_rows]


def tree_from_conditional(root_token: int, nodes: list[Node]) -> DraftTree:
    return DraftTree(
        torch.tensor([root_token] + [t for _, t, _, _ in nodes]),
        torch.tensor([-1] + [p for p, _, _, _ in nodes]),
        torch.tensor([0.0] + [s for *_, s in nodes]),
    )


def require_domino(block, strategy: str) -> DominoBlock:
    if not isinstance(block, DominoBlock):
        raise ValueError(
            f"tree_strategy={strategy!r} needs a Domino drafter (hf_treegen.DominoDrafter); "
            f"with a DFlash drafter use 'chain', 'marginal' or 'adaptive'."
        )
    return block


class ConditionalBuilder:
    name = "conditional"
    reference = False  # True: use the reference heap (the tests' oracle)

    def __init__(self, settings: BuildSettings, **_):
        self.settings = settings

    def scorer(self, block) -> CorrectionScorer:
        s = self.settings
        return CorrectionScorer(require_domino(block, self.name), s.top_m, s.temperature, s.max_depth)

    def nodes(self, block) -> list[Node]:
        build = conditional_heap if self.reference else conditional_frontier
        return build(self.scorer(block), self.settings.budget, self.settings.topk)

    def __call__(self, block, root_token: int) -> DraftTree:
        return tree_from_conditional(root_token, self.nodes(block))
