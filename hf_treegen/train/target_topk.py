"""The target's top-k next-token distribution per position: soft labels for drafter distillation.

Hard labels say only which token the target picks; on a small corpus the target's whole next-token
distribution carries more signal per position (which tokens were close, how sure it was). This module
stores, for every response position t of a training sequence, the target's ``k`` most probable next
tokens after ``ids[:t+1]`` and their log-probabilities over the full vocabulary, in the same kind of
content-keyed, memory-mapped cache as the tapped features (:class:`~.features.FeatureCache`, rows
of float32 ``[ids (k) ; log-probs (k)]``; positions before the response hold id -1).

Computing them needs the target's last layers and its LM head, but not a second pass over the whole
target: the feature cache already holds the output of the deepest tapped layer, so
:func:`extract_target_topk` runs only the layers after it (plus the final norm and the head, on
response rows only). For SmolLM2-135M tapped at layer 26 that is 3 of 30 layers. The cached
features are fp16, so the soft labels carry fp16 rounding of one residual stream: harmless for a
training signal (the hard labels stay what they were).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..target import decoder_layers, packed_linears
from .features import (FORMAT_VERSION, FeatureCache, _batches, sequence_key, target_cache_folder, target_fingerprint,
                       target_name)

NO_TOKEN = -1.0  # the id stored for positions without a distribution (the prompt)


def topk_meta(model, source_layer: int, k: int) -> dict:
    cfg = model.config
    return {
        "format": FORMAT_VERSION,
        "kind": "target_topk",
        "target": target_name(model),
        "num_hidden_layers": int(cfg.num_hidden_layers),
        "vocab_size": int(cfg.vocab_size),
        "fingerprint": target_fingerprint(model),
        "source_layer": int(source_layer),
        "k": int(k),
        "storage": "float32",  # token ids up to 2^24 are exact in float32
    }


def default_topk_cache_dir(model, source_layer: int, k: int) -> Path:
    """``$HF_TREEGEN_CACHE/target-topk/<target>-<fingerprint>-from<L>-k<k>``."""
    return target_cache_folder(model, "target-topk", f"from{int(source_layer)}-k{int(k)}")


@contextlib.contextmanager
def _layers_after(model, source_layer: int, source: torch.Tensor):
    """While open, a forward of ``model.get_decoder()`` runs only the decoder layers after
    ``source_layer``, starting from ``source`` (b, T, H) (the cached output of ``source_layer``) instead of
    the embeddings.

    The model's own forward keeps doing the rest (masks, rotary positions, final norm), so no modeling
    code is copied. No public API runs a slice of the layers: the decoder's ``layers`` list is swapped
    for the tail (restored on exit), and a pre-hook on the first remaining layer replaces its input.
    """
    decoder = model.get_decoder()
    layers = decoder_layers(model)
    tail = list(layers)[source_layer + 1:]

    def replace_input(module, args, kwargs):
        hidden = source.to(dtype=model.dtype)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    handle = tail[0].register_forward_pre_hook(replace_input, with_kwargs=True) if tail else None
    decoder.layers = nn.ModuleList(tail)
    try:
        yield
    finally:
        decoder.layers = layers
        if handle is not None:
            handle.remove()


def _final_hidden(model, source_layer: int, source: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """(b, T, H) output of ``source_layer`` -> (b, T, H) final-norm hidden states of the target."""
    if source_layer == len(decoder_layers(model)) - 1:
        # a tap of the last layer already holds the decoder's output, final norm included (FeatureTap)
        return source.to(model.dtype)
    with _layers_after(model, source_layer, source):
        # input_ids only shape the forward; the pre-hook feeds the cached rows to the first remaining layer
        ids = torch.zeros(source.shape[:2], dtype=torch.long, device=source.device)
        return model.get_decoder()(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state


def topk_rows(model, hidden: torch.Tensor, k: int) -> np.ndarray:
    """(R, H) final hidden rows -> (R, 2k) float32 ``[top-k ids ; their log-probs]`` over the full vocabulary."""
    logits = model.get_output_embeddings()(hidden).float()  # (R, V)
    cap = getattr(model.config, "final_logit_softcapping", None)  # Gemma-style capping happens after the head
    if cap:
        logits = cap * torch.tanh(logits / cap)
    logp = torch.log_softmax(logits, dim=-1)
    top = logp.topk(k, dim=-1)
    return torch.cat([top.indices.float(), top.values], dim=-1).cpu().numpy()


@torch.no_grad()
def extract_target_topk(model, sequences: Sequence, features: FeatureCache, cache_dir: str | Path, *, k: int = 16,
                        batch_tokens: int = 4096, max_batch_rows: int = 64, chunk_tokens: int = 65536,
                        packed: bool = True, progress: bool = True) -> FeatureCache:
    """Make sure every ``(ids, response_start)`` of ``sequences`` has its target top-k rows in the cache at
    ``cache_dir``, computed from ``features`` (which must hold every sequence, extracted for layers whose
    deepest is the source). Returns the cache."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a positive int (tokens kept per position), got {k!r}.")
    source_layer = max(int(i) for i in features.meta["layer_ids"])
    hidden_size = int(features.meta["hidden_size"])
    cache = FeatureCache(cache_dir, topk_meta(model, source_layer, k))
    todo: dict[str, tuple[torch.Tensor, int]] = {}
    for ids, start in sequences:
        ids = torch.as_tensor(ids).reshape(-1)
        key = sequence_key(ids)
        if key in cache or key in todo:
            continue
        if key not in features:
            raise ValueError("extract_target_topk needs the features of every sequence; extract them first "
                             "(hf_treegen.train.features.extract_features).")
        todo[key] = (ids, max(int(start), 0))
    if not todo:
        return cache
    keys = list(todo)
    batches = _batches([len(todo[key][0]) for key in keys], batch_tokens, max_batch_rows)
    device = model.get_input_embeddings().weight.device
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(len(ids) for ids, _ in todo.values()), unit="tok", unit_scale=True, dynamic_ncols=True,
                   desc=f"target top-{k} ({len(cache)} cached)")
    pending: list[tuple[str, np.ndarray]] = []
    pending_tokens = 0
    was_training = model.training
    model.eval()
    try:
        with packed_linears(model) if packed else contextlib.nullcontext():
            for batch in batches:
                lengths = [len(todo[keys[i]][0]) for i in batch]
                width = max(lengths)
                source = torch.zeros((len(batch), width, hidden_size), dtype=torch.float32)
                attention = torch.zeros((len(batch), width), dtype=torch.long)
                for r, i in enumerate(batch):
                    # the deepest tapped layer is the last hidden_size columns of the cached features
                    rows = features.get(keys[i])[:, -hidden_size:]
                    source[r, : lengths[r]] = torch.from_numpy(np.array(rows, dtype=np.float32))
                    attention[r, : lengths[r]] = 1
                hidden = _final_hidden(model, source_layer, source.to(device), attention.to(device))  # (b, T, H)
                for r, i in enumerate(batch):
                    start = todo[keys[i]][1]
                    out = np.zeros((lengths[r], 2 * k), dtype=np.float32)
                    out[:, :k] = NO_TOKEN
                    if start < lengths[r]:
                        out[start:] = topk_rows(model, hidden[r, start: lengths[r]], k)
                    pending.append((keys[i], out))
                    pending_tokens += lengths[r]
                if pending_tokens >= chunk_tokens:
                    cache.write_chunk(pending)
                    pending, pending_tokens = [], 0
                if bar is not None:
                    bar.update(sum(lengths))
            cache.write_chunk(pending)
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
    cache.refresh()
    return cache


def soft_targets(rows: np.ndarray, anchors: torch.Tensor, depths: int, remap: torch.Tensor | None):
    """The soft labels of the blocks at ``anchors`` from one sequence's cached (T, 2k) rows.

    Row i of block a (depth ``i+1``) predicts ``x_{p+1+i}`` after ``ids[:p+i+1]``: the target's distribution
    at position ``p+i``. Returns ``(columns, probs)``, both (A, depths, k): the softmax column of each
    top-k token (``remap`` maps token ids to the loss's columns; None = the full vocabulary) and its
    probability renormalised over the tokens that have a column (0 elsewhere and past the sequence end;
    a position with none left gets all zeros, so it adds nothing to the soft loss).
    """
    table = torch.from_numpy(np.array(rows, dtype=np.float32))  # (T, 2k)
    n, k = table.shape[0], table.shape[1] // 2
    pos = anchors.cpu()[:, None] + torch.arange(depths)[None, :]  # (A, D)
    inside = pos < n
    picked = table[pos.clamp(max=n - 1)]  # (A, D, 2k)
    ids = picked[..., :k].long()  # (A, D, k); -1 = no distribution stored there
    logp = picked[..., k:]
    columns = ids if remap is None else torch.where(ids >= 0, remap.cpu()[ids.clamp_min(0)], ids)
    usable = (columns >= 0) & inside[..., None]
    weight = torch.where(usable, logp.exp(), torch.zeros_like(logp))
    probs = weight / weight.sum(-1, keepdim=True).clamp_min(1e-12)
    return columns.clamp_min(0), probs
