"""What the conditional builders read from the scorer of a first-order head (DFlash2's candidate selector,
DSpark's Markov bias): a node's children depend on the path only through the node's own token, so a
node's state is a function of that token alone."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CandidateRow:
    """What builders read of one row's candidates (``row(d).cand``, as for a Domino scorer)."""

    cand: torch.Tensor  # (k,) target ids


class FirstOrderScorer:
    """The scorer interface the conditional builders use (``root_state``, ``depth``, ``m``,
    ``child_logprobs``, ``top_children``, ``candidate_ids``, ``row(d).cand``, ``child_states``,
    ``advance``), for heads whose state is the node's token. Subclasses set ``depth``, ``m``, ``cand``
    (D, m) target ids and ``root_state``, and implement :meth:`child_logprobs` and :meth:`state_of`."""

    depth: int
    m: int
    cand: torch.Tensor
    root_state: torch.Tensor

    def state_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """(n,) tokens -> the states (n, ...) of nodes holding them."""
        raise NotImplementedError

    def child_logprobs(self, row: int, states: torch.Tensor) -> torch.Tensor:
        """States of n nodes at depth ``row`` -> (n, m) log-probs of the row's candidates."""
        raise NotImplementedError

    def row(self, r: int) -> CandidateRow:
        return CandidateRow(self.cand[r])

    def candidate_ids(self, r: int) -> list[int]:
        """Row ``r``'s candidate token ids as a Python list (for builders that select on the host)."""
        cache = self.__dict__.setdefault("_cand_lists", {})
        if r not in cache:
            cache[r] = self.cand[r].tolist()
        return cache[r]

    def top_children(self, row: int, states: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best children of each node: (n, k) log-probs and candidate indices, best first."""
        return self.child_logprobs(row, states).topk(k, dim=-1)

    def child_states(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The children's states after ``tokens`` (n,): the parents' do not matter to a first-order head."""
        return self.state_of(tokens)

    def advance(self, parents: torch.Tensor, owner: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """Child states for child tokens (c,), whatever their parents."""
        return self.state_of(tokens)
