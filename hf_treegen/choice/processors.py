"""Logits processors for "choose b of k labels": the serial reference and its compiled drop-in.

    proc = SerialChoiceProcessor(tokenizer, choices, num_select, separator=", ", terminator=None)
    model.generate(ids, logits_processor=[proc], do_sample=False)      # the reference policy

    proc = CompiledChoiceProcessor(tokenizer, choices, num_select)     # same constructor
    proc.select(model, ids)                                            # ChoiceResult, two forwards
    htg.enable(model).generate(ids, logits_processor=[proc])           # compiled, same token ids
    stock_model.generate(ids, logits_processor=[proc])                 # serial: a true drop-in
"""

from __future__ import annotations

import warnings

import torch

from ..costs import CostProfile, VerifyCostModel
from ..target.masks import configured_attention, takes_tree_masks
from .engines import ChoiceResult, chunked_select, compiled_select, serial_select
from .serial import SerialChoiceProcessor
from .width import MissStats


class CompiledChoiceProcessor(SerialChoiceProcessor):
    """The serial policy computed with one prefill and one tree-causal probe.

    ``guard_margin``: decisions whose logit gap is below it are re-decided serially (default by dtype);
    ``width``: ``"auto"`` (the default) picks the width from the forward-cost curve (the whole choice
    tree fused into the prefill when that pays); an int keeps the ``width`` best labels per decision
    (by the root distribution) and probes again when the greedy path leaves them; None probes every
    branch (capped at ``FULL_PROBE_MAX_ROWS`` tokens, past which the width is planned instead). ``costs``: that curve (a ``VerifyCostModel`` or a ``CostProfile``;
    default: :func:`hf_treegen.calibrate` measures it once per context size, visibly, and caches it).
    The processor remembers how often width-limited probes missed, for its own later calls.
    """

    def __init__(self, tokenizer, choices, num_select: int, separator: str = ", ", terminator: str | None = None,
                 guard_margin: float | None = None, width: int | str | None = "auto", costs=None):
        super().__init__(tokenizer, choices, num_select, separator, terminator)
        if width is not None and width != "auto" and (not isinstance(width, int) or width < 1):
            raise ValueError(f"width must be None, 'auto' or a positive int, got {width!r}.")
        if isinstance(costs, CostProfile):
            costs = costs.verify
        if costs is not None and not isinstance(costs, VerifyCostModel):
            raise TypeError(f"costs must be an hf_treegen.CostProfile or VerifyCostModel, got {type(costs).__name__}.")
        self.guard_margin, self.width, self.costs = guard_margin, width, costs
        self.miss_stats = MissStats()

    def select(self, model, input_ids: torch.Tensor, engine: str = "compiled") -> ChoiceResult:
        """Decide the labels for ``input_ids`` (1, P). ``engine``: compiled | chunked | serial."""
        input_ids = _as_batch(input_ids, model)
        if engine == "serial":
            return serial_select(model, input_ids, self.grammar, processor=self)
        if not probe_capable(model):
            return serial_select(model, input_ids, self.grammar, processor=self)
        if engine == "chunked":
            return chunked_select(model, input_ids, self.grammar)
        if engine != "compiled":
            raise ValueError(f"unknown engine {engine!r}; use 'compiled', 'chunked' or 'serial'.")
        return compiled_select(model, input_ids, self.grammar, guard_margin=self.guard_margin, width=self.width,
                               costs=self.costs, miss_stats=self.miss_stats)


def probe_capable(model) -> bool:
    """Probes need a 4D tree mask; flash-attention cannot take one, so we fall back to serial."""
    if takes_tree_masks(model):
        return True
    warnings.warn(f"CompiledChoiceProcessor: attention {configured_attention(model)!r} cannot take a tree mask; deciding serially "
                  f"(same result, one forward per token). Load the model with attn_implementation='sdpa'.",
                  stacklevel=3)
    return False


def _as_batch(input_ids, model) -> torch.Tensor:
    ids = torch.as_tensor(input_ids)
    if ids.dim() == 1:
        ids = ids[None]
    return ids.to(model.device)


def compiled_processor_in(logits_processor) -> CompiledChoiceProcessor | None:
    """The CompiledChoiceProcessor when it is the only processor passed to generate(), else None."""
    procs = list(logits_processor or [])
    if len(procs) == 1 and isinstance(procs[0], CompiledChoiceProcessor):
        return procs[0]
    return None
