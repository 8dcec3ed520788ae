"""Reduced draft vocabularies (EAGLE-3 / FR-Spec style): the drafter scores only a fixed set of target ids.

A draft vocabulary is a sorted, duplicate-free 1-D int64 tensor of target token ids; column ``j`` of
the reduced draft head is target id ``draft_vocab[j]``. A token outside it is simply never drafted,
so verification (and therefore the output of greedy or sampled generation) is untouched; only the
acceptance rate can change. The map travels with the drafter checkpoint (tensor ``draft_vocab`` in
``model.safetensors``, its size in ``config.json``), see :meth:`DFlashDrafter.set_draft_vocab`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

PREVIEW = 8  # offending ids shown in an error message


def _preview(ids: torch.Tensor) -> str:
    shown = ", ".join(str(i) for i in ids[:PREVIEW].tolist())
    return f"[{shown}{', ...' if ids.numel() > PREVIEW else ''}]"


def check_draft_vocab(ids, vocab_size: int) -> torch.Tensor:
    """Validate a draft vocabulary against a target vocabulary of ``vocab_size`` ids and return it as a
    sorted 1-D int64 CPU tensor. Raises a ValueError that says what is wrong and what to pass."""
    hint = "pass a 1-D tensor of distinct target token ids, e.g. choose_draft_vocab(corpus_ids, 8192)"
    if not isinstance(ids, torch.Tensor):
        try:
            ids = torch.as_tensor(ids)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"a draft vocabulary must be token ids ({hint}), got {type(ids).__name__}.") from err
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"a draft vocabulary must hold integer token ids, got dtype {ids.dtype}; {hint}.")
    if ids.dim() != 1:
        raise ValueError(f"a draft vocabulary must be 1-D, got shape {tuple(ids.shape)}; {hint}.")
    if ids.numel() == 0:
        raise ValueError(f"a draft vocabulary cannot be empty; {hint} (or None for the full vocabulary).")
    ids = ids.detach().to(device="cpu", dtype=torch.long)
    if bool((ids == -1).all()):
        raise ValueError("this drafter's draft vocabulary was never filled in (its config names a "
                         f"draft_vocab_size of {ids.numel()}): load the checkpoint with from_pretrained, or "
                         "call set_draft_vocab(ids).")
    outside = ids[(ids < 0) | (ids >= vocab_size)]
    if outside.numel():
        raise ValueError(f"draft vocabulary names token ids outside the target vocabulary (size {vocab_size}): "
                         f"{_preview(outside)}; every id must be in [0, {vocab_size}).")
    ids = ids.sort().values
    repeated = ids[1:][ids[1:] == ids[:-1]].unique()
    if repeated.numel():
        raise ValueError(f"draft vocabulary names some token ids more than once: {_preview(repeated)}; "
                         f"pass each id once (e.g. torch.unique(ids)).")
    return ids


def token_counts(counts_or_token_ids) -> dict[int, int]:
    """``{token id: count}`` from a mapping of counts, or from token ids (a tensor, a list of ints, or an
    iterable of such sequences, e.g. the response parts of a corpus): every occurrence counts once."""
    if isinstance(counts_or_token_ids, Mapping):
        return {int(t): int(c) for t, c in counts_or_token_ids.items()}
    if isinstance(counts_or_token_ids, torch.Tensor):
        pieces = [counts_or_token_ids.reshape(-1)]
    else:
        items = list(counts_or_token_ids)
        if items and all(isinstance(x, int) for x in items):
            pieces = [torch.tensor(items, dtype=torch.long)]
        else:
            pieces = [torch.as_tensor(x).reshape(-1) for x in items]
    ids = torch.cat([p.to(device="cpu", dtype=torch.long) for p in pieces]) if pieces else torch.zeros(0, dtype=torch.long)
    if ids.numel() and int(ids.min()) < 0:
        raise ValueError(f"token ids must be >= 0, got {int(ids.min())}.")
    counts = torch.bincount(ids)
    seen = torch.nonzero(counts).flatten()
    return dict(zip(seen.tolist(), counts[seen].tolist()))


def choose_draft_vocab(counts_or_token_ids, size: int, always: Iterable[int] = ()) -> torch.Tensor:
    """The ``size`` most frequent token ids (ties broken by the smaller id), plus every id of ``always``
    (e.g. the EOS ids), as a sorted 1-D int64 tensor ready for ``set_draft_vocab``.

    ``counts_or_token_ids``: a ``{token id: count}`` mapping, or token ids (see :func:`token_counts`).
    Only ids that occur are ranked, so a small corpus can give fewer than ``size`` ids."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int (the number of draft token ids), got {size!r}.")
    counts = token_counts(counts_or_token_ids)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
    chosen = set(ranked) | {int(t) for t in always}
    if not chosen:
        raise ValueError("no token ids to choose from: the counts are empty and no `always` ids were given.")
    return torch.tensor(sorted(chosen), dtype=torch.long)


def eos_token_ids(target, tokenizer=None) -> list[int]:
    """The EOS ids of a target's config and generation config (and of ``tokenizer``), sorted: a chosen
    draft vocabulary always keeps them, so the drafter can propose the end of an answer."""
    ids: set[int] = set()
    for source in (target.config, target.generation_config, tokenizer):
        eos = getattr(source, "eos_token_id", None)  # None for a missing source or field
        ids.update([eos] if isinstance(eos, int) else eos or [])
    return sorted(ids)


def draft_vocab_index(draft_vocab: torch.Tensor, vocab_size: int, outside: int = -1) -> torch.Tensor:
    """(V,) target id -> column of the draft vocabulary, ``outside`` for ids it does not hold."""
    index = torch.full((vocab_size,), outside, dtype=torch.long, device=draft_vocab.device)
    index[draft_vocab] = torch.arange(draft_vocab.numel(), device=draft_vocab.device)
    return index
