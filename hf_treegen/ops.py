"""Small tensor helpers shared by the drafter, the builders and the decode loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def weights_key(*tensors: torch.Tensor) -> tuple:
    """A key that changes when any of ``tensors`` is replaced or modified in place, for caches of
    tables derived from weights. PyTorch has no public counter of in-place writes; ``_version`` is the
    one autograd itself checks, so we read it here, in one place. Tensors made under
    ``torch.inference_mode`` (a serving engine's weights) keep no counter: for them the key is the
    storage alone, which is right for weights that are loaded once and never trained."""
    return tuple((t.data_ptr(), -1 if t.is_inference() else t._version, t.dtype, t.device) for t in tensors)


def linear_rows(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(rows, weight, bias)`` as float32, for a handful of rows against a wide weight.

    rows (L, H), weight (V, H) -> (L, V). On a CPU, BLAS computes (V, H) @ (H, L) for a few rows 2-4x
    faster than F.linear's (L, H) @ (H, V) (measured on a 49,152 x 576 LM head: 12-35 ms against
    41-54 ms for 2-17 rows); the sums are the same up to float rounding order. One row keeps
    F.linear, whose matrix-vector path is the faster one there.
    """
    rows = rows.to(weight.dtype)
    if rows.device.type == "cpu" and bias is None and rows.shape[0] > 1:
        return torch.mm(weight, rows.T).T.float().contiguous()
    return F.linear(rows, weight, bias).float()


def native_bf16_matmuls(device: torch.device | str = "cpu") -> bool:
    """Whether bf16 matmuls run natively on ``device``: always on a CUDA GPU; on a CPU only where oneDNN
    has bf16 kernels (AVX512-BF16 or AMX). Elsewhere bf16 GEMMs are emulated and many times slower than
    fp32 ones, so bf16 saves memory but not time."""
    if torch.device(device).type == "cuda":
        return True
    # torch has no public query for native CPU bf16; this is the check its own oneDNN paths use
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
