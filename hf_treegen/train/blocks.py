"""DFlash-style training blocks: many anchors of one sequence in one drafter forward.

At inference a round drafts from the block ``[x_p, MASK x (B-1)]`` at positions ``p .. p+B-1``, where
``x_p`` is the last committed token (its target features do not exist yet) and the context is the
target features of every position ``< p``; the block attends to the context and bidirectionally to
itself (:meth:`hf_treegen.drafters.dflash.DraftSession.draft`).

Training packs A such blocks of one sequence into one forward of the drafter's own layers
(:class:`~hf_treegen.drafters.dflash.DraftLayer`, which takes a boolean mask): the keys are
``[context rows 0..T-1 ; all A*B block rows]`` and :func:`block_mask` lets the rows of block a see
exactly the context positions ``< p_a`` and the B rows of block a. Everything else (fusion, per-layer
``keys_values`` of the context, RoPE at true positions, final norm, ``prediction_rows``) is the
inference code, so training and inference compute the same function (tested).

Prediction rows, uniformly for both conventions: prediction row ``i`` (0-based) of a block predicts
the token at depth ``i+1``, i.e. ``x_{p+1+i}``. With ``shift_label=False`` (DFlash) those are block rows
``1..B-1`` (B-1 depths); with ``shift_label=True`` (Domino) block rows ``0..B-1`` (B depths).

Labels: on the target's own greedy text the label at depth d is simply the text token ``x_{p+d}``
(:func:`block_labels`). On teacher-forced text (human text with the target's argmax stored per
position, :mod:`hf_treegen.train.teacher_forced`) it is the target's argmax after ``x_{..p+d-1}``, kept
only while the text between anchor and label followed the target's greedy path
(:func:`teacher_forced_labels`).
"""

from __future__ import annotations

import torch


def block_mask(context_len: int, anchors: torch.Tensor, block_size: int, device=None) -> torch.Tensor:
    """(A*B, context_len + A*B) bool, True = may attend: block a's rows see context ``< anchors[a]``
    and all rows of block a (bidirectional), nothing else."""
    anchors = torch.as_tensor(anchors, dtype=torch.long, device=device)
    a, b = anchors.numel(), block_size
    block_of_row = torch.arange(a, device=device).repeat_interleave(b)  # (A*B,)
    ctx = torch.arange(context_len, device=device)[None, :] < anchors[block_of_row][:, None]  # (A*B, T)
    own = block_of_row[:, None] == block_of_row[None, :]  # (A*B, A*B)
    return torch.cat([ctx, own], dim=1)


def block_positions(anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """(A*B,) absolute positions of the block rows: p_a + 0..B-1."""
    anchors = torch.as_tensor(anchors, dtype=torch.long)
    return (anchors[:, None] + torch.arange(block_size, device=anchors.device)[None, :]).reshape(-1)


def block_input_ids(ids: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_token_id: int) -> torch.Tensor:
    """(A, B) block token ids ``[x_p, MASK, ...]``."""
    out = torch.full((anchors.numel(), block_size), mask_token_id, dtype=torch.long, device=ids.device)
    out[:, 0] = ids[anchors]
    return out


def block_labels(ids: torch.Tensor, anchors: torch.Tensor, depths: int, ignore_index: int = -100) -> torch.Tensor:
    """(A, depths) labels: row i of block a is ``x_{p_a+1+i}`` (``ignore_index`` past the sequence end)."""
    pos = anchors[:, None] + 1 + torch.arange(depths, device=anchors.device)[None, :]
    valid = pos < ids.numel()
    return torch.where(valid, ids[pos.clamp(max=ids.numel() - 1)], torch.full_like(pos, ignore_index))


def teacher_forced_labels(ids: torch.Tensor, target_next: torch.Tensor, anchors: torch.Tensor, depths: int,
                          ignore_index: int = -100) -> torch.Tensor:
    """(A, depths) labels from the target's own argmax, masked where they are not greedy-consistent.

    ``ids`` (T,) is the realised text; ``target_next`` (T,) the target's argmax after each prefix:
    ``target_next[i]`` is its prediction for position ``i+1`` given ``ids[:i+1]`` (negative = no label,
    e.g. outside the response). Row i of block a (depth ``d = i+1`` from anchor ``p = anchors[a]``) gets
    ``target_next[p+d-1]``, what the target would say after ``ids[:p+d]``. That is a valid greedy
    decoding label only when the text between the anchor and that position followed the target's
    greedy path, ``ids[p+j] == target_next[p+j-1]`` for ``j = 1..d-1``: at inference the drafts of
    depths ``< d`` are accepted only if they are the target's argmaxes, and the block (and the Domino GRU,
    which is teacher-forced on ``ids[p..p+d-1]``) conditions on exactly those tokens. Otherwise the label
    is ``ignore_index``, and so is every deeper one (the condition only grows with d). Depth 1 needs no
    condition. ``ignore_index`` also where ``p+d-1`` is past the end or has no label.

    On greedy text (``target_next[i] == ids[i+1]`` wherever both exist) this equals :func:`block_labels`,
    plus the one label past the text end when ``target_next[T-1]`` is given.
    """
    n = ids.numel()
    offsets = torch.arange(depths, device=anchors.device)
    pos = anchors[:, None] + offsets[None, :]  # (A, depths): p + d - 1, the prefix end whose argmax is the label
    inside = pos < n  # (A, depths)
    pos_c = pos.clamp(max=n - 1)
    label = target_next[pos_c]  # (A, depths)
    # agree[k]: the text's next token is the target's argmax after ids[:k+1] (False at k = T-1: no next token)
    agree = torch.zeros(n, dtype=torch.bool, device=ids.device)  # (T,)
    agree[:-1] = (ids[1:] == target_next[:-1]) & (target_next[:-1] >= 0)
    step_ok = agree[pos_c] & inside  # (A, depths): column i says ids[p+i+1] followed the greedy path
    # depth d = i+1 needs columns 0..i-1 all True: an exclusive cumulative product along the depths
    ok_before = torch.cumprod(torch.cat([torch.ones_like(step_ok[:, :1]), step_ok[:, :-1]], dim=1).to(torch.int64),
                              dim=1).bool()  # (A, depths)
    valid = inside & (label >= 0) & ok_before
    return torch.where(valid, label, torch.full_like(label, ignore_index))


def teacher_tokens(ids: torch.Tensor, anchors: torch.Tensor, block_size: int) -> torch.Tensor:
    """(A, B) realised tokens ``x_p .. x_{p+B-1}`` along each block (the Domino GRU inputs); positions
    past the end repeat the last token (only rows whose labels are ignored can see them)."""
    pos = anchors[:, None] + torch.arange(block_size, device=anchors.device)[None, :]
    return ids[pos.clamp(max=ids.numel() - 1)]


def valid_anchor_range(length: int, response_start: int) -> tuple[int, int]:
    """Anchors p with ``response_start <= p <= length-2`` (the anchor is a committed response token and
    at least one later token is a label). Returns ``(lo, hi)`` with hi exclusive (may be empty)."""
    lo = max(int(response_start), 1)
    return lo, max(lo, int(length) - 1)


def sample_anchors(length: int, response_start: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """Up to ``count`` distinct anchors, sorted, uniformly from the valid range."""
    lo, hi = valid_anchor_range(length, response_start)
    n = hi - lo
    if n <= 0:
        return torch.zeros(0, dtype=torch.long)
    if n <= count:
        return torch.arange(lo, hi)
    pick = torch.randperm(n, generator=generator)[:count]
    return (lo + pick).sort().values


def forward_blocks(drafter, ids: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Final-norm hidden rows of every block: (A, B, H). ``features`` must cover positions ``< max(anchors)``."""
    cfg = drafter.config
    b = cfg.block_size
    device = drafter.fc.weight.device
    anchors = anchors.to(device)
    ids = ids.to(device)
    context_len = int(anchors.max())
    fused = drafter.fuse(features[:context_len].to(device))  # (T, H)
    ctx_cos, ctx_sin = drafter.rope(torch.arange(context_len, device=device))
    blk_cos, blk_sin = drafter.rope(block_positions(anchors, b))
    mask = block_mask(context_len, anchors, b, device=device)
    x = drafter.embed_block(block_input_ids(ids, anchors, b, cfg.mask_token_id).reshape(-1))  # (A*B, H)
    for layer in drafter.layers:
        ctx_k, ctx_v = layer.self_attn.keys_values(fused, ctx_cos, ctx_sin)
        x = layer(x, ctx_k, ctx_v, blk_cos, blk_sin, mask)
    return drafter.norm(x).reshape(anchors.numel(), b, -1)


def prediction_rows(drafter, hidden: torch.Tensor) -> torch.Tensor:
    """(A, B, H) -> (A, L, H), the batched form of ``drafter.prediction_rows``."""
    return hidden if drafter.config.shift_label else hidden[:, 1:]
