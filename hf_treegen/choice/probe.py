"""Probe trees over the choice grammar (the forwards that evaluate them are in :mod:`hf_treegen.target`).

A probe is a :class:`~hf_treegen.tree.DraftTree` whose root is the first output token (decided by the
prefill) and whose other nodes are output tokens reachable from it. Evaluated in one forward on top of
the prompt's KV cache with ancestor-only attention and ``position_ids = P + depth``, every row's logits
are the logits serial decoding would compute after that row's path (the prefix-state argument: each
row sees exactly the keys, values and positions it would see serially).

Only rows that lead to a decision are worth a place in the probe: a forced tail (one allowed token at
every step until the end) needs no logits, so :func:`build_probe` leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..tree import DraftTree
from .grammar import ChoiceGrammar, State

# keep_child(state, token, depth) -> bool: width policy for speculative probes (None keeps every child)
ChildFilter = Callable[[State, int, int], bool]


@dataclass(frozen=True)
class Probe:
    tree: DraftTree
    states: tuple  # states[i]: grammar state after row i's token
    rows: dict  # path tuple (output tokens) -> row index
    decision_rows: tuple[int, ...]  # rows whose next token is a decision: the only logits a walk needs

    @property
    def num_tokens(self) -> int:
        return self.tree.num_nodes

    @property
    def num_decisions(self) -> int:
        return len(self.decision_rows)

    def logit_index(self) -> dict[int, int]:
        """Tree row -> row of the logits of the probe's decision rows (``tree_logits(..., probe.decision_rows)``)."""
        return {row: i for i, row in enumerate(self.decision_rows)}


def build_probe(grammar: ChoiceGrammar, path: tuple[int, ...], keep_child: ChildFilter | None = None,
                max_rows: int | None = None, cached: int = 0, root_token: int | None = None) -> Probe | None:
    """The probe below ``path`` (verified output tokens): ``path[cached:]`` as a chain (the first
    ``cached`` tokens are already in the KV cache; at least one token must remain), then every node under
    its end that leads to a decision (filtered by ``keep_child``). With ``root_token`` (the prompt's last
    token, for a probe fused into the prefill) row 0 is that token, keyed by the empty path, and the whole
    of ``path`` hangs under it.

    Returns None when nothing after ``path`` needs a decision. ``max_rows`` caps the subtree (rows past
    the cap are dropped breadth-last, so the probe stays a valid tree; the walk falls back past it).
    """
    tokens, parents, states = [], [], []
    rows: dict[tuple[int, ...], int] = {}
    state = grammar.initial
    if root_token is not None:
        if cached:
            raise ValueError("a fused probe (root_token given) keeps its whole path in the tree: cached must be 0")
        rows[()] = 0
        tokens.append(root_token)
        parents.append(-1)
        states.append(state)
    elif not 0 <= cached < len(path):
        raise ValueError(f"build_probe needs an uncached path token to root the probe (path {len(path)}, cached {cached}).")
    for i, token in enumerate(path):
        state = grammar.advance(state, token)
        if i < cached:
            continue
        rows[path[: i + 1]] = len(tokens)
        tokens.append(token)
        parents.append(len(tokens) - 2)
        states.append(state)

    needs = _needs_decision_fn(grammar)
    if not needs(state):
        return None
    # Breadth-first, so a row cap keeps the shallow (most certainly needed) part of the tree.
    frontier = [(len(tokens) - 1, path, state)]
    depth = 0
    while frontier:
        depth += 1
        nxt = []
        for row, prefix, st in frontier:
            for token in grammar.allowed(st):
                child_state = grammar.advance(st, token)
                if not needs(child_state):
                    continue
                if grammar.is_decision(st) and keep_child is not None and not keep_child(st, token, depth):
                    continue
                if max_rows is not None and len(tokens) >= max_rows:
                    break
                child_path = prefix + (token,)
                rows[child_path] = len(tokens)
                tokens.append(token)
                parents.append(row)
                states.append(child_state)
                nxt.append((len(tokens) - 1, child_path, child_state))
        frontier = nxt
    tree = DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.zeros(len(tokens)))
    decision_rows = tuple(row for row, s in enumerate(states) if grammar.is_decision(s))
    return Probe(tree, tuple(states), rows, decision_rows)


def _needs_decision_fn(grammar: ChoiceGrammar):
    """needs(state): is there a decision at ``state`` or anywhere below it? (memoised per grammar)"""
    cache = grammar.__dict__.setdefault("_needs_decision_cache", {})

    def needs(state: State) -> bool:
        if state in cache:
            return cache[state]
        if grammar.is_complete(state):
            result = False
        elif grammar.is_decision(state):
            result = True
        else:
            (token,) = grammar.allowed(state)
            result = needs(grammar.advance(state, token))
        cache[state] = result
        return result

    return needs
