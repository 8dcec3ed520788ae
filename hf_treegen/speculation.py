"""The speculation round both halves of the package run: propose -> verify -> walk -> commit.

    proposal = proposer.propose(seq, cached) a DraftTree rooted at the first uncached token
    logits   = verify(tree, rows)            ONE target forward over the tree (ancestor-only mask)
    walk     = walk_tree(tree, decide)       the target's own decision at each visited node
    kept     = commit(walk)                  the caller keeps the accepted rows (cache, features)
    proposer.observe(tree, walk.nodes)       what the target accepted, for the next proposal

Tree decoding's proposer is a drafter plus a tree builder (:mod:`hf_treegen.generation.loop`);
compiled choice's is the choice grammar plus a width policy (:mod:`hf_treegen.choice.engines`). Each
brings its own ``decide`` (a logits processor and argmax/sampling; masked greedy with a margin guard)
and its own ``commit``. Because every emitted token is the target's own decision on that token's own
prefix, greedy output equals serial decoding and sampling keeps its law, whatever the proposer does
(docs/design.md, "Exactness").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from .tree import DraftTree


@dataclass(frozen=True)
class Proposal:
    """What to verify: ``tree`` (N+1 nodes; row 0 is the first token not yet in the target's cache)
    and the rows whose logits a decision may need (None: every row; the LM head skips the others)."""

    tree: DraftTree
    rows: tuple[int, ...] | None = None


class Proposer(Protocol):
    def propose(self, committed, cached: int) -> Proposal:
        """``committed``: the tokens decided so far (the whole sequence for decoding, the output for
        choice); the first ``cached`` of them are in the target's KV cache. The tree's root is
        ``committed[cached]``; a proposer whose walk needs the decided tokens after it puts them in
        the tree as a chain."""

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        """After the walk: the nodes of ``tree`` the target accepted, root first."""


@dataclass(frozen=True)
class Walk:
    nodes: list[int]  # accepted nodes, root first; nodes[i] is at depth i
    tokens: list[int]  # decided tokens: tokens[i] was decided at nodes[i]; the last one is not in the tree


def walk_tree(tree: DraftTree, decide: Callable[[int], int | None]) -> Walk:
    """``decide(node)`` returns the target's token at ``node`` (None: nothing follows, e.g. a finished
    choice); the walk follows it while it is a child of that node."""
    nodes, tokens = [0], []
    while True:
        token = decide(nodes[-1])
        if token is None:
            return Walk(nodes, tokens)
        tokens.append(token)
        child = tree.child(nodes[-1], token)
        if child is None:
            return Walk(nodes, tokens)
        nodes.append(child)


# verify(tree, rows) -> logits (len(rows), V), or (N+1, V) when rows is None
Verify = Callable[[DraftTree, "tuple[int, ...] | None"], torch.Tensor]
# decide(tree, node, logits) -> token (None: nothing follows); logits (1, V) are the node's row, None
# where the proposal asked for no logits at that node
Decide = Callable[[DraftTree, int, "torch.Tensor | None"], "int | None"]
# commit(tree, walk) -> how many of walk.nodes were kept (the caller may stop early, e.g. at EOS)
Commit = Callable[[DraftTree, Walk], int]


@dataclass
class Round:
    tree: DraftTree
    walk: Walk
    kept: int  # accepted rows the caller committed
    seconds: dict[str, float] = field(default_factory=dict)  # propose, verify, walk, commit


def run_round(proposer: Proposer, committed, cached: int, verify: Verify, decide: Decide, commit: Commit,
              walk: Callable[[DraftTree, Callable[[int], int | None]], Walk] = walk_tree) -> Round:
    """One round: propose, one verify forward, the walk of the target's decisions, commit, observe.
    ``walk`` is :func:`walk_tree` (tests pass a deliberately broken one to show they would notice)."""
    t0 = time.perf_counter()
    proposal = proposer.propose(committed, cached)
    t1 = time.perf_counter()
    tree, rows = proposal.tree, proposal.rows
    logits = verify(tree, rows)
    t2 = time.perf_counter()
    index = {row: i for i, row in enumerate(rows)} if rows is not None else None

    def decide_at(node: int) -> int | None:
        i = node if index is None else index.get(node)
        return decide(tree, node, None if i is None else logits[i: i + 1])

    walked = walk(tree, decide_at)
    t3 = time.perf_counter()
    kept = commit(tree, walked)
    t4 = time.perf_counter()
    proposer.observe(tree, walked.nodes)
    return Round(tree, walked, kept, {"propose": t1 - t0, "verify": t2 - t1, "walk": t3 - t2, "commit": t4 - t3})
