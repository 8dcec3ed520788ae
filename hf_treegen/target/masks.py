"""Tree attention inputs for one target forward, in the form each attention backend takes.

A tree forward appends N+1 rows to a cache that already holds ``past`` committed positions. Each row
attends to every committed position plus its own ancestors in the tree, at position ``past + depth``.
Each attention backend wants that mask in its own form (docs/design.md, "Exactness"):

    sdpa            bool, True = attend                      (a float mask must match the query dtype)
    eager           additive float in the model dtype        (a bool mask is silently wrong there)
    flex_attention  a BlockMask
    flash_*         cannot take a tree at all
"""

from __future__ import annotations

import torch

from ..tree import DraftTree
from .grouped import GROUPED_SDPA

SUPPORTED_ATTENTION = ("sdpa", "eager", "flex_attention")


def configured_attention(model) -> str:
    """The attention implementation the model runs with. transformers has no public getter for it;
    ``config._attn_implementation`` is what its own modeling code reads, so we read it here, once."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    return "sdpa" if impl == GROUPED_SDPA else impl  # sdpa reading grouped heads in place (grouped.py)


def takes_tree_masks(model) -> bool:
    """Whether the model's attention takes an arbitrary 4D mask (flash-attention takes padding only)."""
    return configured_attention(model) in SUPPORTED_ATTENTION


def attention_implementation(model) -> str:
    """The target's attention implementation, refusing the ones that cannot run a tree mask."""
    impl = configured_attention(model)
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"Tree decoding needs an attention implementation that takes an arbitrary 4D mask; this model "
            f"uses {impl!r}. Load the target with attn_implementation= one of {list(SUPPORTED_ATTENTION)} "
            f"(e.g. model.set_attn_implementation('sdpa')). flash-attention only takes padding masks."
        )
    return impl


def tree_attention_mask(
    tree_mask: torch.Tensor, past: int, impl: str, dtype: torch.dtype, device: torch.device
):
    """Mask for rows ``past .. past+N`` given the in-tree ancestor mask ``tree_mask`` (N+1, N+1) bool.

    Returns a (1, 1, N+1, past+N+1) tensor for sdpa/eager, or a BlockMask for flex_attention.
    """
    n = tree_mask.shape[0]
    allowed = torch.ones(n, past + n, dtype=torch.bool, device=device)  # (N+1, past+N+1)
    allowed[:, past:] = tree_mask.to(device)
    return mask_for_backend(allowed, impl, dtype, device)


def prefix_tree_attention_mask(tree_mask: torch.Tensor, prefix: int, impl: str, dtype: torch.dtype,
                               device: torch.device):
    """Mask for one forward over ``prefix`` causal tokens followed by a tree (no cache): prefix rows are
    causal and never see the tree; tree rows see the whole prefix and their own ancestors.

    Returns (1, 1, prefix+N, prefix+N) for sdpa/eager, or a BlockMask for flex_attention."""
    n = tree_mask.shape[0]
    total = prefix + n
    allowed = torch.zeros(total, total, dtype=torch.bool, device=device)
    allowed[:prefix, :prefix] = torch.ones(prefix, prefix, dtype=torch.bool, device=device).tril()
    allowed[prefix:, :prefix] = True
    allowed[prefix:, prefix:] = tree_mask.to(device)
    return mask_for_backend(allowed, impl, dtype, device)


def mask_for_backend(allowed: torch.Tensor, impl: str, dtype: torch.dtype, device: torch.device):
    """A (Q, K) bool "may attend" matrix, or (B, Q, K) with one per sequence, in the form ``impl`` takes
    (see the module docstring): (1 or B, 1, Q, K) for sdpa and eager."""
    heads = allowed[None, None] if allowed.dim() == 2 else allowed[:, None]  # (1 or B, 1, Q, K)
    if impl == "sdpa":
        return heads
    if impl == "eager":
        additive = torch.zeros(heads.shape, dtype=dtype, device=device)
        additive.masked_fill_(~heads, torch.finfo(dtype).min)
        return additive
    if impl == "flex_attention" and allowed.dim() == 2:  # batches refuse flex attention (tree_decoding)
        from torch.nn.attention.flex_attention import create_block_mask

        def mask_mod(batch, head, q_idx, kv_idx):
            return allowed[q_idx, kv_idx]

        return create_block_mask(mask_mod, B=None, H=None, Q_LEN=allowed.shape[0], KV_LEN=allowed.shape[1],
                                 device=device)
    raise ValueError(f"no tree mask of shape {tuple(allowed.shape)} for attention implementation {impl!r}")


def tree_forward_inputs(tree: DraftTree, past: int, impl: str, dtype: torch.dtype, device: torch.device) -> dict:
    """Keyword arguments for ``model(**inputs, **with_cache(cache))`` that evaluate ``tree`` in one forward."""
    inputs = {
        "input_ids": tree.tokens.to(device)[None],  # (1, N+1)
        "position_ids": tree.position_ids(past).to(device)[None],  # (1, N+1)
    }
    # A root alone sees everything: the model's own causal path, as a stock step. Under flex attention it
    # still gets our mask: inductor's CPU code for a one-row forward on the model's own mask, compiled after
    # ones on ours, fails to build (torch 2.13), so every verify forward keeps one kind of mask.
    if tree.num_nodes > 1 or impl == "flex_attention":
        inputs["attention_mask"] = tree_attention_mask(tree.ancestor_mask(), past, impl, dtype, device)
    return inputs
