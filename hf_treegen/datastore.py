"""A datastore of text the target wrote before, searched for what it wrote after the current context.

A model answers similar questions with similar phrases: the same opening sentence, the same code
idioms, the same closing offer of help. A :class:`TokenDatastore` holds token sequences the target
generated earlier (for the shipped drafter: its training answers, about 1.3M tokens). Each round, the
last few committed tokens are looked up in it, and the continuation most of their occurrences share is
grafted onto the draft tree like a context-lookup one (:mod:`hf_treegen.lookup`; retrieval-based
drafting in the manner of REST and SuffixDecoding). Grafted nodes are checked by the target like any
other, so what the datastore holds never changes the output; it only changes how many tokens a round
keeps.

The index is a suffix array cut at :data:`LONGEST_MATCH` tokens: every position, sorted by the
tokens that start there. All occurrences of an n-gram (n <= LONGEST_MATCH) are then one contiguous
range of it, found by binary search on two packed sort keys; nothing but the tokens is stored on
disk, and the index is rebuilt on load (about a second for a million tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Protocol, Sequence

import torch
from safetensors.torch import load_file, save_file

from .defaults import DATASTORE_MAX_VOTERS as MAX_VOTERS  # an even sample of the occurrences votes
from .defaults import DATASTORE_MIN_SHARE as MIN_SHARE
from .files import publish

TOKEN_BITS = 16  # a code per token: its id + 1 (0 marks a sequence end), so ids up to 2**16 - 2 fit
MAX_TOKEN_ID = 2 ** TOKEN_BITS - 2
KEY_TOKENS = 3  # tokens packed into one int64 sort key (48 bits, so keys stay non-negative)
LONGEST_MATCH = 2 * KEY_TOKENS  # the two keys cover the 6 tokens the index is sorted by
SHORTEST_MATCH = 2  # one token matches everywhere: what follows it is too rarely what follows now
FILE_FORMAT = "hf_treegen.token_datastore.v1"


def _codes(tokens: torch.Tensor) -> torch.Tensor:
    """tokens (N,) ids with -1 after each sequence -> (N + LONGEST_MATCH,) int64 codes (id + 1, 0 at
    ends), padded with ends so every window of LONGEST_MATCH codes exists."""
    return torch.cat([tokens.to(torch.int64) + 1, torch.zeros(LONGEST_MATCH, dtype=torch.int64)])


def _pack(codes: torch.Tensor, first: int, count: int) -> torch.Tensor:
    """The key of codes[i + first : i + first + KEY_TOKENS] for each of ``count`` positions i: codes
    packed big-end first, so keys order like the token tuples they pack."""
    key = torch.zeros(count, dtype=torch.int64)
    for j in range(KEY_TOKENS):
        key = (key << TOKEN_BITS) | codes[first + j: first + j + count]
    return key


def _key_range(codes: Sequence[int]) -> tuple[int, int]:
    """[low, high] of the keys whose first len(codes) <= KEY_TOKENS tokens are ``codes``."""
    low = 0
    for code in codes:
        low = (low << TOKEN_BITS) | code
    free_bits = TOKEN_BITS * (KEY_TOKENS - len(codes))
    low <<= free_bits
    return low, low + (1 << free_bits) - 1


def _bounds(sorted_keys: torch.Tensor, low: int, high: int) -> tuple[int, int]:
    """[start, end) of the entries of ``sorted_keys`` within [low, high]."""
    query = torch.tensor([low, high], dtype=torch.int64)
    start = int(torch.searchsorted(sorted_keys, query[:1]))
    end = int(torch.searchsorted(sorted_keys, query[1:], right=True))
    return start, end


class Datastore(Protocol):
    """What lookup searches besides the context: a :class:`TokenDatastore` or a
    :class:`~hf_treegen.learning_datastore.LearningDatastore`."""

    max_token_id: int  # the largest id held (-1: none)

    def continuations(self, context: Sequence[int] | torch.Tensor, max_tokens: int, min_share: float | None = None,
                      max_paths: int = 1) -> list[list[int]]: ...

    def continuation(self, context: Sequence[int] | torch.Tensor, max_tokens: int,
                     min_share: float = MIN_SHARE) -> list[int]: ...


def context_suffixes(context: Sequence[int] | torch.Tensor) -> list[list[int]]:
    """The suffixes of ``context`` a datastore looks up, longest (LONGEST_MATCH tokens) first, down to
    SHORTEST_MATCH tokens."""
    if isinstance(context, torch.Tensor):
        context = context.reshape(-1)[-LONGEST_MATCH:].tolist()  # on a GPU: one copy to the host
    context = list(context)[-LONGEST_MATCH:]
    return [context[-n:] for n in range(len(context), SHORTEST_MATCH - 1, -1)]


class TokenDatastore:
    """Token sequences the target wrote, indexed for "what followed these tokens?".

    Build one with :meth:`from_sequences` (lists of token ids, e.g. the target's own answers), keep it
    with :meth:`save` and :meth:`load`, and hand it to ``generate(..., tree_lookup=LookupOptions(datastore=store))`` or set
    it as a drafter's ``datastore`` (saved and loaded with the drafter). Ids must be below 65,535.
    """

    def __init__(self, tokens: torch.Tensor):
        """tokens (N,) integer ids, each sequence followed by -1 (as :meth:`from_sequences` joins them)."""
        if tokens.dim() != 1 or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise ValueError(f"TokenDatastore takes a 1-D tensor of integer token ids, got {tokens.dtype} "
                             f"of shape {tuple(tokens.shape)}.")
        tokens = tokens.to(torch.int64)
        if tokens.numel() and (int(tokens.min()) < -1 or int(tokens.max()) > MAX_TOKEN_ID):
            raise ValueError(f"TokenDatastore token ids must lie in [0, {MAX_TOKEN_ID}] (-1 ends a sequence), got "
                             f"values from {int(tokens.min())} to {int(tokens.max())}.")
        self.tokens = tokens
        self.max_token_id = int(tokens.max()) if tokens.numel() else -1  # -1: no tokens at all
        self._codes = _codes(tokens)  # (N + LONGEST_MATCH,)
        n = tokens.numel()
        first, second = _pack(self._codes, 0, n), _pack(self._codes, KEY_TOKENS, n)  # (N,) each
        # sort positions by (first, second): a stable sort on the minor key, then on the major one
        order = torch.sort(second, stable=True).indices
        order = order[torch.sort(first[order], stable=True).indices]
        self._positions = order  # (N,) positions in the order of the LONGEST_MATCH tokens that start there
        self._first, self._second = first[order], second[order]  # (N,) each, sorted by (first, second)

    # ------------------------------------------------------------------------------ building and files
    @classmethod
    def from_sequences(cls, sequences: Iterable[Sequence[int]]) -> "TokenDatastore":
        """A datastore of these token sequences (lists, tuples or 1-D tensors of ids)."""
        parts = []
        for sequence in sequences:
            ids = torch.as_tensor(sequence, dtype=torch.int64).reshape(-1)
            parts += [ids, torch.tensor([-1])]
        return cls(torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64))

    def save(self, path) -> None:
        """Write the tokens (uint16) to ``path`` (a .safetensors file); the index is rebuilt on load."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        save_file({"codes": (self.tokens + 1).to(torch.int32).to(torch.uint16)}, str(tmp),
                  metadata={"format": FILE_FORMAT})
        publish(tmp, path)

    @classmethod
    def load(cls, path) -> "TokenDatastore":
        """The datastore saved at ``path``; a missing or foreign file is a clear error."""
        path = Path(path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"No datastore file at {path}; build one with TokenDatastore.from_sequences(...)"
                                    f".save(path) or `hf-treegen build-datastore`.")
        try:
            codes = load_file(str(path))["codes"]
        except Exception as err:  # safetensors has its own error types; a foreign file lacks "codes"
            raise ValueError(f"{path} is not a datastore saved by TokenDatastore.save ({err!r}).") from err
        return cls(codes.to(torch.int64) - 1)

    @property
    def nbytes(self) -> int:
        """Bytes the tokens and the index take in memory."""
        return sum(t.numel() * t.element_size() for t in (self.tokens, self._codes, self._positions, self._first,
                                                          self._second))

    def __len__(self) -> int:
        """Tokens held, sequence ends included."""
        return self.tokens.numel()

    def __repr__(self) -> str:
        return f"TokenDatastore({len(self):,} tokens, {int((self.tokens == -1).sum()):,} sequences)"

    # ------------------------------------------------------------------------------ search
    def occurrences(self, ngram: Sequence[int]) -> torch.Tensor:
        """Positions (sorted by what follows them) just after each occurrence of ``ngram`` (1 to
        LONGEST_MATCH ids) within one stored sequence."""
        if not 1 <= len(ngram) <= LONGEST_MATCH:
            raise ValueError(f"an n-gram of 1 to {LONGEST_MATCH} tokens, got {len(ngram)}.")
        if any(not 0 <= t <= MAX_TOKEN_ID for t in ngram):
            return torch.zeros(0, dtype=torch.int64)  # ids the store cannot hold occur nowhere in it
        codes = [int(t) + 1 for t in ngram]
        start, end = _bounds(self._first, *_key_range(codes[:KEY_TOKENS]))
        if len(codes) > KEY_TOKENS and end > start:  # within equal first keys, the second keys are sorted
            inner_start, inner_end = _bounds(self._second[start:end], *_key_range(codes[KEY_TOKENS:]))
            start, end = start + inner_start, start + inner_end
        return self._positions[start:end] + len(codes)

    def continuation(self, context: Sequence[int] | torch.Tensor, max_tokens: int,
                     min_share: float = MIN_SHARE) -> list[int]:
        """Up to ``max_tokens`` ids that most often followed the longest suffix of ``context`` (between
        SHORTEST_MATCH and LONGEST_MATCH tokens) that the store holds; [] if none occurs.

        Token by token, the continuation takes what most of the remaining occurrences wrote next and
        keeps only those; it stops at a sequence end or before fewer than ``min_share`` of all the
        occurrences would have written the whole continuation."""
        paths = self.continuations(context, max_tokens, min_share, max_paths=1)
        return paths[0] if paths else []

    def continuations(self, context: Sequence[int] | torch.Tensor, max_tokens: int, min_share: float | None = None,
                      max_paths: int = 1) -> list[list[int]]:
        """Up to ``max_paths`` continuations of the longest suffix of ``context`` the store holds, each
        written in full by at least ``min_share`` of its occurrences, likeliest first; [] if none occurs.

        The first is :meth:`continuation`'s. The others branch off where a runner-up next token still had
        ``min_share`` of the occurrences behind it, so together they form a small trie (at most
        ``1 / min_share`` leaves) of what the target wrote after these tokens before. ``min_share``
        defaults to MIN_SHARE, lowered for many paths to ``1 / (max_paths + 2)`` so that they can all
        occur."""
        for suffix in context_suffixes(context):
            follow = self.occurrences(suffix)
            if follow.numel():
                return self.vote(follow, max_tokens, max_paths, min_share)
        return []

    def vote(self, follow: torch.Tensor, max_tokens: int, max_paths: int = 1,
             min_share: float | None = None) -> list[list[int]]:
        """The continuations agreed on by the occurrences whose continuations start at ``follow`` (from
        :meth:`occurrences`), as :meth:`continuations` chooses them."""
        return vote_together([(self, follow)], max_tokens, max_paths, min_share)


def vote_together(sources: Sequence[tuple[TokenDatastore, torch.Tensor]], max_tokens: int, max_paths: int = 1,
                  min_share: float | None = None) -> list[list[int]]:
    """The continuations agreed on by the occurrences of several stores together: ``sources`` holds
    (store, positions where its occurrences' continuations start), and every occurrence has one vote.

    Token by token, a continuation takes what the most remaining occurrences wrote next and keeps only
    those; it stops at a sequence end or before fewer than ``min_share`` of all the occurrences would have
    written the whole continuation. Runners-up with ``min_share`` behind them branch off into further
    paths, up to ``max_paths``."""
    if min_share is None:
        min_share = min(MIN_SHARE, 1 / (max_paths + 2))
    total = sum(follow.numel() for _, follow in sources)
    if total > MAX_VOTERS:  # an even sample of each store's occurrences, sorted by their continuations
        sources = [(store, follow[torch.linspace(0, follow.numel() - 1, max(1, follow.numel() * MAX_VOTERS // total))
                                  .long()]) for store, follow in sources]
        total = sum(follow.numel() for _, follow in sources)
    enough = min_share * total  # voters that must have written the whole continuation
    paths: list[list[int]] = []

    def grow(prefix: list[int], voters: list[torch.Tensor]) -> None:
        """Extend ``prefix`` (written by ``voters``, one tensor per source) by each next token enough of
        them wrote, the most written first; a prefix no token extends is a finished path."""
        extended = False
        if len(prefix) < max_tokens:
            # (V_s,) per source: what each voter wrote next (the padding past the last token is an end)
            codes = [store._codes[torch.clamp(v + len(prefix), max=store._codes.numel() - 1)]
                     for (store, _), v in zip(sources, voters)]
            values, counts = torch.unique(torch.cat(codes), return_counts=True)
            order = torch.sort(counts, descending=True, stable=True).indices  # ties: the smaller id first
            for code, count in zip(values[order].tolist(), counts[order].tolist()):
                if count < enough or len(paths) >= max_paths:
                    break
                if code == 0:  # a sequence end: nothing to graft past it, and the rarer tokens are left too
                    break
                extended = True
                grow(prefix + [code - 1], [v[c == code] for v, c in zip(voters, codes)])
        if not extended and prefix and len(paths) < max_paths:
            paths.append(prefix)

    grow([], [follow for _, follow in sources])
    return paths
