"""The target's side of a batched tree call: one forward over every sequence's tree, and a KV cache
whose sequences keep different numbers of tokens each round.

All sequences of a batch share one cache length L, so a sequence that keeps fewer tokens than another
in a round leaves unused slots behind its accepted rows. ``valid`` (B, L) bool marks the slots that
hold a committed token; every later forward attends to those only, so each sequence's attention sees
exactly its own committed tokens, in order, as an unbatched run's cache holds them. Positions count a
sequence's valid slots, not the slots. Left padding of the prompt is the first run of invalid slots.

    batch_prefill_mask  the 4-D mask of the prompts' forward: causal over each prompt's own tokens
    batch_tree_inputs   input_ids, position_ids and the 4-D mask of one verify forward over B trees
    keep_batch_rows     after the verify: each sequence's accepted rows to the front of the window
    select_sequences    drop finished sequences from the cache (the only copy of the whole cache)
"""

from __future__ import annotations

import torch

from ..tree import DraftTree
from .masks import mask_for_backend


def batch_prefill_mask(mask: torch.Tensor, impl: str, dtype: torch.dtype, device: torch.device):
    """The attention mask of a left-padded batch of prompts, mask (B, P) 1 on prompt tokens: each prompt
    token sees the prompt tokens up to itself; a padding row sees only itself. (transformers' own mask
    leaves padding rows with nothing to attend to; in eager attention their outputs become NaN, and a
    NaN value times a zero weight turns every later row NaN.)"""
    length = mask.shape[1]
    valid = mask.bool().to(device)  # (B, P)
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()  # (P, P)
    allowed = causal[None] & valid[:, None, :]  # (B, P, P)
    allowed |= torch.eye(length, dtype=torch.bool, device=device)[None]
    return mask_for_backend(allowed, impl, dtype, device)


def batch_tree_inputs(trees: list[DraftTree], valid: torch.Tensor, past: list[int], impl: str, dtype: torch.dtype,
                      device: torch.device) -> dict:
    """Keyword arguments for ``model(**inputs, **with_cache(cache))`` that verify tree b on top of
    sequence b's cache. valid (B, L) bool: the cache slots each sequence attends to; ``past[b]``: how
    many of them hold its committed tokens (``valid[b].sum()``, which the caller knows without a sync).

    Trees have N_b + 1 rows; the forward has W = max N_b + 1 rows per sequence. Row i of tree b sits
    at position ``valid[b].sum() + depth_i`` and attends to the valid slots and its own ancestors; a
    padding row (i > N_b) repeats the root's token and position and attends to itself and the valid
    slots, so no row of the softmax is empty; its logits and cache entries are never read."""
    batch, length = valid.shape
    width = max(tree.num_nodes for tree in trees)
    ids = torch.empty(batch, width, dtype=torch.long)
    positions = torch.empty(batch, width, dtype=torch.long)
    allowed = torch.zeros(batch, width, length + width, dtype=torch.bool, device=device)  # (B, W, L+W)
    allowed[:, :, :length] = valid[:, None, :].to(device)
    allowed[:, :, length:] = torch.eye(width, dtype=torch.bool, device=device)
    for b, tree in enumerate(trees):
        n = tree.num_nodes
        ids[b, :n], ids[b, n:] = tree.tokens, tree.tokens[0]
        positions[b, :n], positions[b, n:] = tree.position_ids(past[b]), past[b]
        allowed[b, :n, length:length + n] = tree.ancestor_mask().to(device)
    return {"input_ids": ids.to(device), "position_ids": positions.to(device),
            "attention_mask": mask_for_backend(allowed, impl, dtype, device)}


def keep_batch_rows(cache, length: int, kept: list[list[int]]) -> torch.Tensor:
    """After a verify appended W rows per sequence to a cache of ``length`` slots: keep, for sequence b,
    the window rows ``kept[b]`` (ascending), moved to the front of the window in order; the window is
    cut to the longest list. Returns (B, K) bool, the new slots that hold a committed token."""
    width = max(len(rows) for rows in kept)
    index = torch.zeros(len(kept), width, dtype=torch.long)  # (B, K) window offsets; 0 pads the short lists
    valid = torch.zeros(len(kept), width, dtype=torch.bool)
    for b, rows in enumerate(kept):
        index[b, :len(rows)] = torch.tensor(rows, dtype=torch.long)
        valid[b, :len(rows)] = True
    for layer in cache.layers:
        if layer.keys.shape[-2] <= length:
            continue
        at = index.to(layer.keys.device)[:, None, :, None]  # (B, 1, K, 1)
        for name in ("keys", "values"):
            states = getattr(layer, name)  # (B, H, length + W, D)
            window = states[:, :, length:]
            moved = window.gather(2, at.expand(-1, states.shape[1], -1, states.shape[3]))  # (B, H, K, D)
            states = states[:, :, :length + width]
            states[:, :, length:] = moved
            setattr(layer, name, states)
    return valid


def select_sequences(cache, rows: torch.Tensor) -> None:
    """Keep the sequences ``rows`` (indices into the batch) of every cache layer."""
    for layer in cache.layers:
        at = rows.to(layer.keys.device)
        layer.keys = layer.keys.index_select(0, at)
        layer.values = layer.values.index_select(0, at)
