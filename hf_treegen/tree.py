"""DraftTree: the one tree type used for verification (and later for choice probes).

A tree is stored as a struct of arrays over its nodes in topological order:

    node 0            the root: the pending token whose target logits are not computed yet
    node i (i >= 1)   a drafted token whose parent node precedes it

Everything a tree-attention forward needs is derived from ``parents``: the ancestor mask (row i is
True at i and at every ancestor of i) and the depths, which give ``position_ids = start + depth``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class DraftTree:
    """A tree of drafted tokens under a root: the one tree type for drafts and choice probes.

    ``tokens``, ``parents`` (row 0 is the root, ``parents[i] < i``) and ``scores`` (cumulative draft
    log-probability) are (N+1,) tensors; ``depths`` is derived from ``parents``."""

    tokens: torch.Tensor  # (N+1,) int64 token ids, row 0 is the root
    parents: torch.Tensor  # (N+1,) int64, parents[0] == -1, parents[i] < i
    scores: torch.Tensor  # (N+1,) float32 cumulative draft log-probability, 0 at the root
    depths: torch.Tensor = field(init=False)  # (N+1,) int64, 0 at the root
    _children: tuple[dict[int, int], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        tokens = self.tokens.detach().to("cpu", torch.long).reshape(-1)
        parents = self.parents.detach().to("cpu", torch.long).reshape(-1)
        scores = self.scores.detach().to("cpu", torch.float32).reshape(-1)
        if not (tokens.numel() == parents.numel() == scores.numel()) or tokens.numel() == 0:
            raise ValueError(
                f"DraftTree needs tokens, parents and scores of one equal, non-zero length; got "
                f"{tokens.numel()}, {parents.numel()}, {scores.numel()}."
            )
        parent_list = parents.tolist()
        token_list = tokens.tolist()
        if parent_list[0] != -1:
            raise ValueError("DraftTree node 0 is the root and must have parent -1.")
        depths = [0] * len(parent_list)
        children: list[dict[int, int]] = [dict() for _ in parent_list]
        for node in range(1, len(parent_list)):
            parent = parent_list[node]
            if not 0 <= parent < node:
                raise ValueError(
                    f"DraftTree nodes must be in topological order: node {node} has parent {parent}."
                )
            if token_list[node] in children[parent]:
                raise ValueError(
                    f"DraftTree siblings must carry distinct tokens: token {token_list[node]} appears twice "
                    f"under node {parent}."
                )
            children[parent][token_list[node]] = node
            depths[node] = depths[parent] + 1
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "depths", torch.tensor(depths, dtype=torch.long))
        object.__setattr__(self, "_children", tuple(children))

    # ----------------------------------------------------------------------------------- builders
    @classmethod
    def root_only(cls, root_token: int) -> "DraftTree":
        return cls(torch.tensor([root_token]), torch.tensor([-1]), torch.zeros(1))

    @classmethod
    def chain(cls, root_token: int, tokens: list[int], scores: list[float] | None = None) -> "DraftTree":
        """A single path: root -> tokens[0] -> tokens[1] -> ..."""
        n = len(tokens)
        cumulative = [0.0] + (list(scores) if scores is not None else [0.0] * n)
        return cls(
            torch.tensor([root_token, *tokens]),
            torch.arange(-1, n),
            torch.tensor(cumulative, dtype=torch.float32),
        )

    def first_nodes(self, count: int) -> "DraftTree":
        """The tree of rows 0 .. count - 1 (a tree again: every parent precedes its child)."""
        if count >= self.num_nodes:
            return self
        return DraftTree(self.tokens[:count], self.parents[:count], self.scores[:count])

    # ----------------------------------------------------------------------------------- queries
    @property
    def num_nodes(self) -> int:
        """Number of rows including the root."""
        return self.tokens.numel()

    @property
    def num_drafted(self) -> int:
        """Number of drafted nodes (the root excluded): what a budget counts."""
        return self.tokens.numel() - 1

    def child(self, node: int, token: int) -> int | None:
        """The child of ``node`` carrying ``token``, or None."""
        return self._children[node].get(token)

    def children(self, node: int) -> dict[int, int]:
        """token -> child node, for one node."""
        return dict(self._children[node])

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root to ``node`` (both included)."""
        path = []
        parents = self.parents.tolist()
        while node != -1:
            path.append(node)
            node = parents[node]
        return path[::-1]

    def best_path(self, limit: int | None = None, min_score: float = -math.inf) -> list[int]:
        """Drafted tokens of one root-to-leaf path: from the root, always the child with the highest
        score (the most probable continuation under the builder's law), at most ``limit`` of them, and
        none whose score (log path probability) is below ``min_score``. This is what an engine that
        verifies chains only can take from a tree."""
        scores = self.scores.tolist()
        tokens, node = [], 0
        while self._children[node] and (limit is None or len(tokens) < limit):
            token, child = max(self._children[node].items(), key=lambda item: scores[item[1]])
            if scores[child] < min_score:
                break
            tokens.append(token)
            node = child
        return tokens

    def ancestor_mask(self) -> torch.Tensor:
        """(N+1, N+1) bool; row i is True at i and at each ancestor of i (ancestor-only attention)."""
        n = self.num_nodes
        mask = torch.zeros(n, n, dtype=torch.bool)
        mask[0, 0] = True
        for node, parent in enumerate(self.parents.tolist()[1:], start=1):
            mask[node] = mask[parent]  # parent precedes node, so its row is final
            mask[node, node] = True
        return mask

    def position_ids(self, start: int) -> torch.Tensor:
        """(N+1,) positions of the rows when the root sits at ``start`` (siblings share a position)."""
        return self.depths + start
