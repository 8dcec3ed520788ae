"""A datastore that learns as it serves: what the target wrote joins a bounded in-memory store that
lookup searches from the next call on.

    store = hf_treegen.LearningDatastore()            # or LearningDatastore(base=drafter.datastore)
    model.generate(ids, assistant_model=drafter, tree_strategy="auto",
                   tree_lookup=hf_treegen.LookupOptions(datastore=store))   # learns this call's output
    store.save("served.safetensors")                  # LearningDatastore.load(...) brings it back

Requests that repeat or resemble earlier ones (the same question asked again, answers over the same
paper, edits of one file) are then drafted from the target's own earlier answers, as SuffixDecoding
drafts from a server's earlier outputs. Like any datastore it changes only what is drafted: every
grafted token is checked by the target, so the output stays exactly stock ``generate()``'s.

Memory: at most ``max_tokens`` tokens (each sequence's end marker counted); learning past that evicts
the oldest sequences first. Prompts are learned only with ``learn_prompts=True``, since they may hold
what a user would not want kept. The search index is rebuilt on the first search after learning.
A search takes the longest suffix of the context that occurs in the learned sequences or in ``base``.
Learned occurrences that match the last ``LEARNED_REPEAT_TOKENS`` tokens of the context (a request
served before) answer alone; otherwise the occurrences of both vote together on the continuation, one
vote each, so a few learned lines do not outvote what the base saw many times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from pathlib import Path

import torch

from .datastore import MAX_TOKEN_ID, SHORTEST_MATCH, TokenDatastore, context_suffixes, vote_together
from .defaults import DATASTORE_MIN_SHARE as MIN_SHARE
from .defaults import LEARNED_DATASTORE_TOKENS
from .defaults import LEARNED_REPEAT_TOKENS as REPEAT_TOKENS


def check_vocabulary(vocab_size: int) -> None:
    """Refuse a target whose ids a LearningDatastore could not hold, before anything runs."""
    if vocab_size - 1 > MAX_TOKEN_ID:
        raise ValueError(f"A LearningDatastore holds token ids up to {MAX_TOKEN_ID}, but the target's vocabulary "
                         f"has {vocab_size} ids, so its outputs could not be learned; use lookup without it.")


class LearningDatastore:
    """Token sequences learned while serving, searched like a :class:`TokenDatastore` (see the module
    docstring). ``base``: a fixed store searched beside them (e.g. the drafter's own); ``max_tokens``:
    the memory bound; ``learn_prompts``: whether prompts are learned besides outputs."""

    def __init__(self, base: TokenDatastore | None = None, max_tokens: int = LEARNED_DATASTORE_TOKENS,
                 learn_prompts: bool = False):
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2 * SHORTEST_MATCH:
            raise ValueError(f"LearningDatastore max_tokens must be an int >= {2 * SHORTEST_MATCH} (tokens held "
                             f"before the oldest sequences are evicted), got {max_tokens!r}.")
        if base is not None and not isinstance(base, TokenDatastore):
            raise ValueError(f"LearningDatastore base must be a TokenDatastore or None, got {type(base).__name__}.")
        self.base, self.max_tokens, self.learn_prompts = base, max_tokens, learn_prompts
        self._sequences: deque[torch.Tensor] = deque()  # oldest first, each (n,) int64
        self._held = 0  # tokens held, one end marker per sequence included
        self._index: TokenDatastore | None = None  # None: rebuilt on the next search
        self._max_learned_id = -1  # the largest id ever learned (evicted ones included: a bound, not exact)
        self.learned = 0  # sequences learned over the store's life
        self.evicted = 0  # of which evicted to stay within max_tokens

    # ------------------------------------------------------------------------------ learning
    def learn(self, tokens: Sequence[int] | torch.Tensor) -> None:
        """Add one sequence (its last ``max_tokens - 1`` ids when longer); sequences too short to
        match anything are skipped. Ids must lie in [0, 65534], as in any datastore."""
        ids = torch.as_tensor(tokens, dtype=torch.int64).reshape(-1).cpu()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) > MAX_TOKEN_ID):
            raise ValueError(f"LearningDatastore holds token ids in [0, {MAX_TOKEN_ID}], got values from "
                             f"{int(ids.min())} to {int(ids.max())}.")
        if ids.numel() <= SHORTEST_MATCH:
            return
        ids = ids[-(self.max_tokens - 1):]
        self._max_learned_id = max(self._max_learned_id, int(ids.max()))
        self._sequences.append(ids)
        self._held += ids.numel() + 1
        self.learned += 1
        while self._held > self.max_tokens:
            self._held -= self._sequences.popleft().numel() + 1
            self.evicted += 1
        self._index = None

    def learn_call(self, prompts: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> None:
        """Learn one generate() call: each row's new tokens, and its prompt first where ``learn_prompts``."""
        for prompt, output in zip(prompts, outputs):
            if self.learn_prompts:
                self.learn(prompt)
            self.learn(output)

    def clear(self) -> None:
        """Forget everything learned (the base store stays)."""
        self._sequences.clear()
        self._held, self._index, self._max_learned_id = 0, None, -1

    # ------------------------------------------------------------------------------ searching
    @property
    def index(self) -> TokenDatastore:
        """The learned sequences as a searchable TokenDatastore (built on first use after learning)."""
        if self._index is None:
            self._index = TokenDatastore.from_sequences(self._sequences)
        return self._index

    @property
    def max_token_id(self) -> int:
        """The largest id learned or in ``base`` (-1 if none), for the check against the target's vocabulary."""
        return max(self._max_learned_id, self.base.max_token_id if self.base is not None else -1)

    def continuations(self, context: Sequence[int] | torch.Tensor, max_tokens: int, min_share: float | None = None,
                      max_paths: int = 1) -> list[list[int]]:
        """As :meth:`TokenDatastore.continuations`, over the learned sequences and ``base`` together: the
        longest suffix found in either, continued as the learned repeats of the context vote if there
        are any (:meth:`repeats`), else as the occurrences in both vote."""
        recent = _recent_tokens(context, REPEAT_TOKENS)
        stores = [self.index] + ([self.base] if self.base is not None else [])
        for suffix in context_suffixes(recent):
            found = [(store, store.occurrences(suffix)) for store in stores]
            found = [(store, follow) for store, follow in found if follow.numel()]
            if not found:
                continue
            store, follow = found[0]
            if store is self.index:  # the learned store holds the suffix: a repeat answers alone
                repeats = self.repeats(follow, recent)
                if repeats.numel():
                    return self.index.vote(repeats, max_tokens, max_paths, min_share)
            return vote_together(found, max_tokens, max_paths, min_share)
        return []

    def repeats(self, follow: torch.Tensor, recent: list[int]) -> torch.Tensor:
        """The learned occurrences (``follow``: positions after them in :attr:`index`) preceded by the
        last REPEAT_TOKENS tokens of the context too: the same request served before, or the same text
        written again, whose own continuation is the best guess."""
        if len(recent) < REPEAT_TOKENS:
            return follow[:0]
        tokens = self.index.tokens  # (N,) learned ids, -1 after each sequence
        window = follow[:, None] - REPEAT_TOKENS + torch.arange(REPEAT_TOKENS)  # (M, R) positions before each
        inside = (window >= 0).all(dim=1)  # (M,)
        written = tokens[window.clamp(min=0)]  # (M, R)
        same = (written == torch.tensor(recent[-REPEAT_TOKENS:], dtype=tokens.dtype)).all(dim=1)  # (M,)
        return follow[inside & same]

    def continuation(self, context: Sequence[int] | torch.Tensor, max_tokens: int,
                     min_share: float = MIN_SHARE) -> list[int]:
        """The likeliest of :meth:`continuations` ([] if the context occurs nowhere)."""
        paths = self.continuations(context, max_tokens, min_share, max_paths=1)
        return paths[0] if paths else []

    # ------------------------------------------------------------------------------ files
    def save(self, path) -> None:
        """Write the learned sequences (not ``base``) in the TokenDatastore file format."""
        self.index.save(path)

    @classmethod
    def load(cls, path, base: TokenDatastore | None = None, max_tokens: int = LEARNED_DATASTORE_TOKENS,
             learn_prompts: bool = False) -> "LearningDatastore":
        """A store that has learned the sequences saved at ``path`` (oldest first, as saved)."""
        store = cls(base, max_tokens, learn_prompts)
        tokens = TokenDatastore.load(path).tokens
        ends = (tokens == -1).nonzero().reshape(-1).tolist()
        start = 0
        for end in ends:
            store.learn(tokens[start:end])
            start = end + 1
        store.learned = store.evicted = 0  # a fresh life: counts restart
        return store

    @property
    def memory_bytes(self) -> int:
        """Bytes the learned sequences and their index take (the base store not counted): about 48 per
        token held once the index is built, so the default bound is about 12 MB."""
        held = sum(s.numel() * s.element_size() for s in self._sequences)
        return held + (self._index.nbytes if self._index is not None else 0)

    def __len__(self) -> int:
        """Tokens held, one end marker per sequence included."""
        return self._held

    def __repr__(self) -> str:
        base = f", base {len(self.base):,} tokens" if self.base is not None else ""
        return (f"LearningDatastore({len(self._sequences):,} sequences, {self._held:,} of {self.max_tokens:,} "
                f"tokens{base})")


def _recent_tokens(context: Sequence[int] | torch.Tensor, count: int) -> list[int]:
    """The last ``count`` ids of ``context`` as a list (one copy to the host for a GPU tensor)."""
    if isinstance(context, torch.Tensor):
        return context.reshape(-1)[-count:].tolist()
    return list(context)[-count:]
