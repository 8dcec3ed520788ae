"""Draft vocabularies for the tests: maps for tiny vocabularies, and scripted drafters that draft over one."""

from __future__ import annotations

import torch

from hf_treegen.drafters.dflash import DraftBlock
from hf_treegen.drafters.domino import DominoBlock


def sparse_vocab(vocab_size: int, keep_every: int = 3, always=()) -> torch.Tensor:
    """Every ``keep_every``-th id (plus ``always``): a map that drops most tokens, so greedy tokens are
    regularly outside it."""
    return torch.tensor(sorted(set(range(0, vocab_size, keep_every)) | {int(t) for t in always}), dtype=torch.long)


class MappedSession:
    """A session's blocks restricted to the draft vocabulary ``vocab``: logits keep only its columns
    and the block carries the column -> target id map (what a drafter with that map produces)."""

    def __init__(self, session, vocab: torch.Tensor):
        self.session, self.vocab = session, vocab

    def extend(self, features, positions) -> None:
        self.session.extend(features, positions)

    def draft(self, anchor_token: int, start: int) -> DraftBlock:
        block = self.session.draft(anchor_token, start)
        logits = block.logits[:, self.vocab]  # (L, Vd)
        if isinstance(block, DominoBlock):
            return DominoBlock(logits=logits, hidden=block.hidden, token_ids=self.vocab,
                               anchor_token=block.anchor_token, drafter=block.drafter)
        return DraftBlock(logits=logits, hidden=block.hidden, token_ids=self.vocab)


def mapped(drafter, vocab: torch.Tensor):
    """``drafter`` (a scripted one) drafting over ``vocab`` only."""
    make_session = drafter.new_session
    drafter.new_session = lambda: MappedSession(make_session(), vocab)
    return drafter
