"""DominoTree: best-first trees scored with each path's own sequential-head correction.

A node's children are scored with the state of the node's own root-to-node path (Domino's GRU state,
or for DFlash2 and DSpark the node's token), so the tree distribution is path-conditional, not a
product of per-depth marginals. Child log-probs are <= 0, so
a child never outscores its parent and the B best nodes form a prefix-closed tree. Three builders
produce that same tree (on tie-free scores):

* ``conditional_heap``: the reference. Pop the best node, score its top-k children with its state.
* ``conditional_frontier``: depth-synchronous, for the CPU. Expand every surviving node of one depth
  at once (one batched scoring and one batched GRU step per depth), keep the best B children of the
  depth (a top-B node is among the B best of its depth, and its parent is top-B too), and expand only
  children that still beat the B-th best score seen (a child never beats its parent). The small
  bookkeeping runs on Python floats: on a CPU an op costs microseconds, so fewer ops is faster.
* ``conditional_dense``: the same expansion with fixed shapes (always B frontier rows, padding scored
  -inf) and no host synchronisation, so that on CUDA the whole build is captured once as a CUDA graph
  and replayed every round (:class:`ConditionalGraph`).
"""

from __future__ import annotations

import heapq

import torch

from ..drafters.dflash2 import SelectorBlock, SelectorScorer
from ..drafters.domino import CorrectionScorer, DominoBlock
from ..drafters.dspark import MarkovBlock, MarkovScorer
from ..ops import weights_key
from ..tree import DraftTree
from .base import BuildSettings, Node, TreeBuilder



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
            token = int(scorer.row(depth).cand[idx])
            heapq.heappush(heap, (-(score + lp), counter, node, token, depth + 1, score + lp))
            counter += 1

    push_children(0, 0, 0.0, scorer.root_state)
    while heap and len(nodes) < budget:
        _, _, parent, token, depth, score = heapq.heappop(heap)
        nodes.append(Node(parent, token, depth, score))
        if len(nodes) == budget or depth >= scorer.depth:  # no children needed: skip the GRU step
            states.append(None)
            continue
        state = scorer.child_states(states[parent], torch.tensor([token]))
        states.append(state)
        push_children(len(nodes), depth, score, state)
    return nodes


def conditional_frontier(scorer: CorrectionScorer, budget: int, k: int) -> list[Node]:
    """Vectorised builder giving the same nodes as ``conditional_heap`` (on tie-free scores), in the
    same order (best score first, parents before children). Scoring and GRU steps are batched per
    depth; the selection of at most n*k children runs on Python floats."""
    kk = min(k, scorer.m)
    states = scorer.root_state  # (n, G): states of the nodes to expand
    device = states.device
    scores = torch.zeros(1, 1, device=device)  # (n, 1) their cumulative log-probs
    ids = [-1]  # (n,) their ledger ids; -1 is the root
    ledger: list[tuple[int, int, int, float]] = []  # (parent ledger id, token, depth, score)
    best: list[float] = []  # min-heap of the best ``budget`` scores so far: best[0] is the bar to beat
    for row in range(scorer.depth):
        top_lp, top_idx = scorer.top_children(row, states, kk)  # (n, kk) each
        child = (scores + top_lp).view(-1).tolist()  # n*kk cumulative scores, node-major
        index = top_idx.view(-1).tolist()
        bar = best[0] if len(best) == budget else float("-inf")
        # the depth's best children (stable: on equal scores the earlier node and rank first)
        kept = [i for i in sorted(range(len(child)), key=child.__getitem__, reverse=True)[:budget] if child[i] >= bar]
        if not kept:
            break
        cand = scorer.candidate_ids(row)
        base = len(ledger)
        ledger.extend((ids[i // kk], cand[index[i]], row + 1, child[i]) for i in kept)
        for i in kept:
            if len(best) < budget:
                heapq.heappush(best, child[i])
            elif child[i] > best[0]:
                heapq.heapreplace(best, child[i])
        if row + 1 == scorer.depth:
            break
        # only children that beat the bar can have a child in the top B (a child never beats its parent)
        bar = best[0] if len(best) == budget else float("-inf")
        grow = [j for j, i in enumerate(kept) if child[i] > bar]
        if not grow:
            break
        tokens = torch.tensor([cand[index[kept[j]]] for j in grow], device=device)
        states = scorer.advance(states, [kept[j] // kk for j in grow], tokens)
        scores = torch.tensor([[child[kept[j]]] for j in grow], device=device)
        ids = [base + j for j in grow]
    return _best_of_ledger(ledger, budget)


def _best_of_ledger(ledger: list[tuple[int, int, int, float]], budget: int) -> list[Node]:
    """The ``budget`` best ledger entries as nodes: best score first, on equal scores the shallower
    (a parent before its child); parents renumbered to node indices (root 0)."""
    chosen = sorted(range(len(ledger)), key=lambda i: (-ledger[i][3], ledger[i][2], i))[:budget]
    node_of = {-1: 0, **{row: i + 1 for i, row in enumerate(chosen)}}
    return [Node(node_of[ledger[r][0]], ledger[r][1], ledger[r][2], ledger[r][3]) for r in chosen]


def conditional_dense(scorer: CorrectionScorer, budget: int, k: int) -> tuple[torch.Tensor, ...]:
    """Fixed-shape expansion without host synchronisation (capturable as a CUDA graph).

    Every depth keeps exactly ``budget`` children (padding rows score -inf). Returns the ledger as
    (D, B) tensors: parent slot in the previous depth (-1: the root), token, score.
    """
    b, kk = budget, min(k, scorer.m)
    device = scorer.root_state.device
    states = scorer.root_state.expand(b, -1).contiguous()  # (B, G); rows past the root are padding
    scores = torch.full((b,), float("-inf"), device=device)
    scores[:1].fill_(0.0)  # a kernel with a scalar argument: `scores[0] = 0.0` copies from the host, which capture refuses
    parents, tokens, all_scores = [], [], []
    for row in range(scorer.depth):
        top_lp, top_idx = scorer.top_children(row, states, kk)  # (B, kk) each
        child = (scores[:, None] + top_lp).reshape(-1)  # (B*kk,)
        values, order = torch.sort(child, descending=True, stable=True)
        values, order = values[:b], order[:b]  # (B,) the depth's best children
        slot = order // kk  # (B,) parent slot
        token = scorer.row(row).cand[top_idx.reshape(-1)[order]]  # (B,)
        parents.append(torch.full_like(slot, -1) if row == 0 else slot)
        tokens.append(token)
        all_scores.append(values)
        if row + 1 < scorer.depth:
            states = scorer.child_states(states[slot], token)
            scores = values
    return torch.stack(parents), torch.stack(tokens), torch.stack(all_scores)


def nodes_from_dense(parents: torch.Tensor, tokens: torch.Tensor, scores: torch.Tensor, budget: int) -> list[Node]:
    """The dense (D, B) ledger -> the ``budget`` best finite nodes, as ``conditional_heap`` orders them."""
    b = parents.shape[1]
    par, tok, sc = parents.tolist(), tokens.tolist(), scores.tolist()
    ledger = []
    for depth, (p_row, t_row, s_row) in enumerate(zip(par, tok, sc)):
        for slot, (p, t, v) in enumerate(zip(p_row, t_row, s_row)):
            if v != float("-inf"):
                ledger.append(((depth - 1) * b + p if p >= 0 else -1, t, depth + 1, v, depth * b + slot))
    index_of = {row_id: i for i, (*_, row_id) in enumerate(ledger)}
    flat = [(index_of.get(p, -1) if p >= 0 else -1, t, d, v) for p, t, d, v, _ in ledger]
    return _best_of_ledger(flat, budget)


class ConditionalGraph:
    """``conditional_dense`` captured once per shape as a CUDA graph and replayed every round.

    The per-round inputs (every row's candidate tables and the root state) are copied into static
    buffers before each replay; the weights (GRU, W1s) are read in place. Only on CUDA; the builder
    uses ``conditional_frontier`` elsewhere.
    """

    def __init__(self, scorer: CorrectionScorer, budget: int, k: int):
        if scorer.root_state.device.type != "cuda":
            raise RuntimeError("ConditionalGraph needs CUDA tensors; use conditional_frontier on other devices.")
        self.key = self.shape_key(scorer, budget, k)
        self.static = _StaticScorer(scorer)
        self.budget, self.k = budget, k
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up outside the graph (allocations, lazy tables)
            conditional_dense(self.static, budget, k)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = conditional_dense(self.static, budget, k)

    @staticmethod
    def shape_key(scorer: CorrectionScorer, budget: int, k: int) -> tuple:
        gru = scorer.drafter.prefix_gru
        weights = weights_key(gru.weight_hh_l0, gru.weight_ih_l0)
        return (scorer.depth, scorer.m, scorer.temperature, budget, k, scorer.root_state.device,
                id(scorer.drafter), weights)  # new weights (moved or trained) need a new capture

    def __call__(self, scorer: CorrectionScorer) -> list[Node]:
        self.static.load(scorer)
        self.graph.replay()
        return nodes_from_dense(*self.outputs, self.budget)


class _StaticScorer(CorrectionScorer):
    """A CorrectionScorer whose per-round tensors live in fixed buffers (for graph capture): every
    row's tables are views of stacked buffers that ``load`` overwrites in place."""

    def __init__(self, scorer: CorrectionScorer):  # noqa: the parent's constructor would draft new tables
        self.drafter, self.temperature, self.depth, self.m = scorer.drafter, scorer.temperature, scorer.depth, scorer.m
        self.weights, self.correction_start = scorer.weights, scorer.correction_start
        self.root_state = scorer.root_state.clone()
        tables = scorer.tables()
        self._all = type(tables)(*(getattr(tables, f).clone() for f in tables.__dataclass_fields__))
        self._rows, self._made, self._cand_lists = [None] * self.depth, self.depth, {}

    def load(self, scorer: CorrectionScorer) -> None:
        tables = scorer.tables()
        for name in tables.__dataclass_fields__:
            getattr(self._all, name).copy_(getattr(tables, name))
        self.root_state.copy_(scorer.root_state)


def tree_from_conditional(root_token: int, nodes: list[Node]) -> DraftTree:
    return DraftTree(
        torch.tensor([root_token] + [t for _, t, _, _ in nodes]),
        torch.tensor([-1] + [p for p, _, _, _ in nodes]),
        torch.tensor([0.0] + [s for *_, s in nodes]),
    )


def sequential_scorer(block, settings: BuildSettings, strategy: str):
    """The path-conditional scorer of a block whose drafter has a sequential head: Domino's GRU
    correction (:class:`CorrectionScorer`), DFlash2's candidate selector (:class:`SelectorScorer`) or
    DSpark's Markov head (:class:`MarkovScorer`)."""
    if isinstance(block, DominoBlock):
        return CorrectionScorer(block, settings.top_m, settings.temperature, settings.max_depth)
    if isinstance(block, SelectorBlock):
        return SelectorScorer(block, settings.temperature, settings.max_depth)
    if isinstance(block, MarkovBlock):
        return MarkovScorer(block, settings.top_m, settings.temperature, settings.max_depth)
    raise ValueError(
        f"tree_strategy={strategy!r} needs a drafter with a sequential head (Domino, DFlash2 or DSpark); "
        f"with a plain DFlash drafter use 'chain', 'marginal' or 'adaptive'."
    )


class ConditionalBuilder(TreeBuilder):
    name = "conditional"
    reference = False  # True: use the reference heap (the tests' oracle)
    use_cuda_graph = True  # on CUDA, replay the build as a captured graph

    def __init__(self, settings: BuildSettings, **kwargs):
        super().__init__(settings, **kwargs)
        self._graph: ConditionalGraph | None = None

    def scorer(self, block):
        return sequential_scorer(block, self.settings, self.name)

    def nodes(self, block, budget: int | None = None) -> list[Node]:
        """The best ``budget`` nodes (default: the settings' budget), best first."""
        scorer, k = self.scorer(block), self.settings.topk
        budget = self.settings.budget if budget is None else budget
        if self.reference:
            return conditional_heap(scorer, budget, k)
        if self.use_cuda_graph and scorer.root_state.is_cuda and isinstance(scorer, CorrectionScorer):
            key = ConditionalGraph.shape_key(scorer, budget, k)
            if self._graph is None or self._graph.key != key:
                self._graph = ConditionalGraph(scorer, budget, k)
            return self._graph(scorer)
        return conditional_frontier(scorer, budget, k)

    def __call__(self, block, root_token: int) -> DraftTree:
        return tree_from_conditional(root_token, self.nodes(block))
