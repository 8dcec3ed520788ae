"""The target's KV cache: what tree decoding may do to it, and the two ways it is trimmed.

    keep_cache_rows   after a verify: keep the accepted rows of the tree window, in order
    crop_to           after a probe or a replay: drop everything past a length
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache(model) -> DynamicCache:
    """An empty dynamic cache for ``model`` (what generate() makes by default)."""
    return DynamicCache(config=model.config)


def check_cache_supports_trees(cache) -> None:
    """Only plain dynamic layers can be compacted row by row (sliding or recurrent state cannot)."""
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"Tree decoding needs a transformers Cache with .layers; got {type(cache).__name__}.")
    for layer in layers:
        if type(layer) is not DynamicLayer or isinstance(layer, DynamicSlidingWindowLayer):
            raise TypeError(
                f"Tree decoding keeps accepted rows by editing DynamicLayer caches; this cache has a "
                f"{type(layer).__name__}. Use the default dynamic cache (no cache_implementation) and a "
                f"target without sliding-window or recurrent layers."
            )


def keep_cache_rows(cache, past: int, keep: torch.Tensor) -> None:
    """Keep, of the rows appended after ``past``, only those at offsets ``keep`` (ascending), in order.

    Gathers inside the appended window only and crops the rest: the committed prefix is never copied.
    """
    kept = keep.numel()
    prefix = bool(torch.equal(keep.cpu(), torch.arange(kept)))  # accepted rows 0..kept-1: a crop suffices
    for layer in cache.layers:
        appended = layer.keys.shape[-2] - past
        if appended <= 0:
            continue
        if prefix:
            if kept < appended:
                layer.keys = layer.keys[..., : past + kept, :]
                layer.values = layer.values[..., : past + kept, :]
            continue
        k = keep.to(layer.keys.device)
        # (B, H, kept, D): advanced indexing copies before the write, so overlapping rows are safe
        layer.keys[..., past : past + kept, :] = layer.keys[..., past + k, :]
        layer.values[..., past : past + kept, :] = layer.values[..., past + k, :]
        layer.keys = layer.keys[..., : past + kept, :]
        layer.values = layer.values[..., : past + kept, :]


def crop_to(cache, length: int) -> None:
    """Drop every cached position from ``length`` on (transformers' crop takes a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
