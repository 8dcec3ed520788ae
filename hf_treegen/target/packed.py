"""Packed linear layers: the target's matrix products in oneDNN's blocked weight layout, on a CPU.

A verify forward multiplies a handful of rows (one per tree node) by every weight matrix of the target.
On a CPU, PyTorch's default BLAS path for such short, wide products is far from the memory-bound ideal
(measured on SmolLM2-135M, fp32, 2 threads: a 5-row verify forward 100-114 ms against 75-79 ms for
one row), while oneDNN's kernels on weights reordered once into its own blocked layout keep the cost
almost flat in the number of rows (58-84 ms for 5 rows, 96-106 ms for 17, 63-65 ms for one row).

:func:`packed_linears` is a context manager: inside it, every ``nn.Linear`` of the model runs on
copies of its weight packed once into that layout, and the layers get their own ``forward`` back on
exit (also after an error). Tree decoding runs its rounds inside it (the prompt's prefill, a product
of many rows, keeps the default kernels); stock ``generate()`` can run inside it too::

    with hf_treegen.packed_linears(model):
        model.generate(input_ids, max_new_tokens=64)

Which kernels win depends on the CPU and on the number of rows: on one with AMX units the default path
runs a one-row product faster, on older AVX-512 and AVX2 machines the packed one does.
``packed_linears(model, min_rows=n)`` keeps products of fewer than n rows on the default path; tree
decoding takes n from its measured cost profile (``CostProfile.packed_from_rows``) and packs every
product when it has none.

Only the layers' arithmetic changes: the same products summed in another order, so logits differ
from the default path by float rounding (~1e-5 in fp32), the same kind of difference a batched verify
forward already has against one-row decoding.

While a block is open the swap is visible to every caller of the model, so a stock forward running in
another thread at the same time runs packed too (same tokens up to float rounding).

The packed copies cost as much memory as the weights themselves. They are kept per model (weakly,
so they go with the model) and packed again when a weight is replaced or changed in place;
:func:`clear_packed_linears` drops them, and ``HF_TREEGEN_PACKED_LINEARS=0`` turns packing off.

PyTorch has no public API for oneDNN's prepacked linear: ``torch.ops.mkldnn._reorder_linear_weight``
and ``torch.ops.mkldnn._linear_pointwise`` are the operators torch.compile's CPU backend emits for the
same purpose, so we call those two, here only, behind a numeric self-check.
"""

from __future__ import annotations

import contextlib
import math
import os
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import weights_key
from .hooks import is_sharded

ENV_SWITCH = "HF_TREEGEN_PACKED_LINEARS"  # "0" turns packing off
PACKED_DTYPES = (torch.float32, torch.bfloat16)
# A oneDNN call costs ~15 us more than a BLAS call, which only a product of at least 256 x 256 weights
# repays (measured: a 64 x 128 layer takes 17 us packed against 6-8 us, a 576 x 576 one 73 us against
# 106 us for 5 rows); smaller layers keep the default path.
MIN_PACKED_WEIGHT = 256 * 256


def _pack(weight: torch.Tensor) -> torch.Tensor:
    """weight (out, in) -> an opaque oneDNN tensor in the layout its kernels read fastest."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def _packed_forward(weight: torch.Tensor, bias: torch.Tensor | None, min_rows=lambda: 1):
    """A ``forward`` for one layer: x (..., in) -> (..., out), as ``F.linear(x, weight, bias)``, on a
    packed copy of ``weight``. Under autocast, or for input of another dtype, it takes the default path:
    the packed kernel neither casts (autocast would) nor accepts mixed dtypes. So does a product of
    fewer rows than ``min_rows()``: on some CPUs the default kernels win for one or two rows."""
    packed = _pack(weight)

    def forward(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != weight.dtype or torch.is_autocast_enabled(x.device.type) or x.shape[:-1].numel() < min_rows():
            return F.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    return forward


def _unsupported(weight: torch.Tensor) -> str | None:
    """Why products with ``weight`` cannot run packed, or None if they can."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return f"{ENV_SWITCH}=0"
    if weight.device.type != "cpu":
        return f"the model is on {weight.device.type}, and packing is for CPU kernels"
    if weight.dtype not in PACKED_DTYPES:
        return f"the model's dtype is {weight.dtype}; packing covers {', '.join(map(str, PACKED_DTYPES))}"
    if not torch.backends.mkldnn.is_available():
        return "this PyTorch build has no oneDNN (mkldnn)"
    return None


def unsupported_reason(model) -> str | None:
    """Why the linears of ``model`` cannot be packed, or None if they can."""
    weight = next(model.parameters(), None)
    if weight is None:
        return "the module has no weights"
    if is_sharded(model):
        return "its weights are sharded over processes (gathered anew for each forward)"
    return _unsupported(weight)


def _linear_layers(model) -> list[nn.Linear]:
    """The layers packing takes: plain ``nn.Linear`` (subclasses such as quantized layers compute
    something else) in a packed dtype, large enough to repay the call, whose ``forward`` nobody else
    has replaced (accelerate's offloading hooks do)."""
    return [m for m in model.modules() if type(m) is nn.Linear and "forward" not in vars(m)
            and m.weight.dtype in PACKED_DTYPES and m.weight.numel() >= MIN_PACKED_WEIGHT]


def _checked_forward(weight: torch.Tensor, bias: torch.Tensor | None):
    """The packed product with ``weight``, checked against F.linear on random rows; None when this
    build lacks the operators or they disagree (decoding then keeps the default path instead of failing
    or deciding on wrong logits)."""
    rows = torch.randn(3, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
    try:
        forward = _packed_forward(weight, bias)
        with torch.no_grad():
            ours, reference = forward(rows).float(), F.linear(rows, weight, bias).float()
    except (RuntimeError, AttributeError, NotImplementedError):
        return None
    tolerance = 1e-4 if weight.dtype == torch.float32 else 5e-2
    agrees = torch.allclose(ours, reference, rtol=tolerance, atol=tolerance * float(reference.abs().max() + 1))
    return forward if bool(agrees) else None


class PackedLinears:
    """The packed weights of some linear layers; ``with packing.block(min_rows):`` applies them to
    products of at least ``min_rows`` rows. Blocks may nest (a calibration inside a generation): the
    innermost open block's ``min_rows`` applies, and the layers get their own forward back when the
    outermost ends."""

    def __init__(self, layers: list[nn.Linear]):
        self.thresholds: list[float] = []  # min_rows of each open block, innermost last
        self.installed = False  # whether the layers carry our forwards now
        self.layers = layers
        self.key = self.weights_key(layers)
        self.forwards = [_packed_forward(m.weight, m.bias, self.min_rows) for m in layers]

    @property
    def depth(self) -> int:
        """How many blocks are open."""
        return len(self.thresholds)

    def min_rows(self) -> float:
        """The fewest rows a product needs to run packed now (the innermost open block's)."""
        return self.thresholds[-1]

    @staticmethod
    def weights_key(layers) -> tuple:
        return weights_key(*(t for m in layers for t in ((m.weight,) if m.bias is None else (m.weight, m.bias))))

    def is_current(self, model) -> bool:
        """Whether the packed copies still match ``model``'s layers and weights."""
        layers = _linear_layers(model)
        return [id(m) for m in layers] == [id(m) for m in self.layers] and self.weights_key(layers) == self.key

    @contextlib.contextmanager
    def block(self, min_rows: float = 1):
        """Packed products from ``min_rows`` rows on; ``math.inf`` gives the layers their own forward
        back while the block is open (no per-product check at all, for forwards known to be narrow)."""
        self.thresholds.append(min_rows)
        self._install(min_rows != math.inf)
        try:
            yield self
        finally:
            self.thresholds.pop()
            self._install(self.depth > 0 and self.min_rows() != math.inf)

    def _install(self, packed: bool) -> None:
        if packed == self.installed:
            return
        for layer, forward in zip(self.layers, self.forwards):
            # an instance attribute, which nn.Module.__call__ runs instead of the class's; set in the instance
            # dict directly: nn.Module.__setattr__'s checks cost as much as a narrow forward saves by the swap
            if packed:
                vars(layer)["forward"] = forward
            else:
                vars(layer).pop("forward", None)
        self.installed = packed


_PACKED: "weakref.WeakKeyDictionary[nn.Module, PackedLinears]" = weakref.WeakKeyDictionary()


def packing_for(model) -> PackedLinears | None:
    """The model's packed linears (packed on first use, again after a weight changed), or None where
    packing does not apply (see :func:`unsupported_reason`), the model has no layer large enough, or the
    kernels fail their self-check."""
    if unsupported_reason(model) is not None:
        return None
    packing = _PACKED.get(model)
    if packing is not None and (packing.depth > 0 or packing.is_current(model)):
        return packing  # (while a block is open the layers carry our forwards, and the weights are in use)
    _PACKED.pop(model, None)
    layers = _linear_layers(model)
    if not layers or _checked_forward(layers[0].weight.detach(), layers[0].bias) is None:
        return None
    packing = _PACKED[model] = PackedLinears(layers)
    return packing


def runs_packed(layer: nn.Module, rows: int = 1) -> bool:
    """Whether a product of ``rows`` rows by ``layer`` runs on packed weights right now (inside an open
    :func:`packed_linears` block whose ``min_rows`` it reaches)."""
    return any(p.depth > 0 and rows >= p.min_rows() and any(m is layer for m in p.layers) for p in _PACKED.values())


def packed_matmul(weight: torch.Tensor, bias: torch.Tensor | None = None):
    """``x (..., in) -> F.linear(x, weight, bias)`` on a packed copy of ``weight`` (out, in), or None
    where packing does not apply (not on a CPU, another dtype, a small matrix,
    ``HF_TREEGEN_PACKED_LINEARS=0``) or the kernel fails its self-check. For a matrix that is no layer's
    weight (a drafter's gathered head rows)."""
    if _unsupported(weight) is not None or weight.numel() < MIN_PACKED_WEIGHT:
        return None
    return _checked_forward(weight.detach(), None if bias is None else bias.detach())


@contextlib.contextmanager
def packed_linears(*models, min_rows: int = 1):
    """A context manager that runs the linear layers of each of ``models`` (None entries are skipped)
    on packed weights while it is open, for a CPU model in fp32 or bf16; elsewhere (or with
    ``HF_TREEGEN_PACKED_LINEARS=0``) it does nothing. Nothing changes until the ``with`` block opens.
    The first use packs the weights (about 0.3 s for SmolLM2-135M) and keeps the copies for later calls.

    ``min_rows``: products of fewer rows (a one-token decode step has one) keep the default kernels,
    which some CPUs run faster there; :func:`~hf_treegen.calibration.calibrate` measures where the
    packed kernels start to win (``CostProfile.packed_from_rows``)."""
    if min_rows < 1:
        raise ValueError(f"min_rows={min_rows!r}: a product has at least one row; pass 1 to pack them all.")
    with contextlib.ExitStack() as stack:
        for model in models:
            packing = None if model is None else packing_for(model)
            if packing is not None:
                stack.enter_context(packing.block(min_rows))
        yield


@contextlib.contextmanager
def default_linears(*models):
    """Inside an open :func:`packed_linears` block of any of ``models``, run their layers on the default
    kernels until this block closes (calibration times both kernel sets this way). Elsewhere a no-op."""
    with contextlib.ExitStack() as stack:
        for model in models:
            packing = None if model is None else _PACKED.get(model)
            if packing is not None and packing.depth > 0:
                stack.enter_context(packing.block(math.inf))
        yield


def linears_for_rows(model, rows: int):
    """A context manager for one forward of ``rows`` rows: inside an open :func:`packed_linears` block of
    ``model`` whose ``min_rows`` that forward stays below, the layers run their own forward (the packed
    one would only check the rows and call it, a few microseconds a layer); otherwise a no-op."""
    packing = None if model is None else _PACKED.get(model)
    narrow = packing is not None and packing.depth > 0 and rows < packing.min_rows()
    return default_linears(model) if narrow else contextlib.nullcontext()


def clear_packed_linears() -> None:
    """Drop every packed copy (they are rebuilt on the next use)."""
    _PACKED.clear()


__all__ = ["PackedLinears", "packing_for", "packed_linears", "packed_matmul", "clear_packed_linears", "runs_packed",
           "linears_for_rows", "unsupported_reason", "ENV_SWITCH"]
