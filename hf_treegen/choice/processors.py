"""Logits processors for "choose b of k labels": the serial reference and its compiled drop-in.

    proc = SerialChoiceProcessor(tokenizer, choices, num_select, separator=", ", terminator=None)
    model.generate(ids, logits_processor=[proc], do_sample=False)      # the reference policy

    proc = CompiledChoiceProcessor(tokenizer, choices, num_select)     # same constructor
    proc.select(model, ids)                                            # ChoiceResult, two forwards
    model.generate(ids, logits_processor=[proc], custom_generate=proc.compiled_generate)  # same token ids
    model.generate(ids, logits_processor=[proc])                       # serial: a true drop-in
"""

from __future__ import annotations

import warnings

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

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

    def compiled_generate(self, model, input_ids, logits_processor, stopping_criteria, generation_config,
                          synced_gpus=False, **model_kwargs):
        """A ``custom_generate`` callable: ``model.generate(ids, logits_processor=[proc],
        custom_generate=proc.compiled_generate)`` returns the token ids serial greedy decoding with this
        processor returns, computed by :meth:`select`. Settings it would not reproduce are refused."""
        _check_compiled_call(self, input_ids, logits_processor, stopping_criteria, generation_config, model_kwargs)
        new = list(self.select(model, input_ids).token_ids)
        if generation_config.max_length is not None:  # generate() turned max_new_tokens into max_length
            new = new[: max(0, generation_config.max_length - input_ids.shape[1])]
        sequences = torch.cat([input_ids, input_ids.new_tensor([new])], dim=1)
        if generation_config.return_dict_in_generate:
            return GenerateDecoderOnlyOutput(sequences=sequences)
        return sequences


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


def _check_compiled_call(proc: CompiledChoiceProcessor, input_ids, logits_processor, stopping_criteria,
                         generation_config, model_kwargs) -> None:
    """Refuse what compiled choice would not reproduce, saying what to change (plain generate() with
    the processor decodes serially under any of these settings)."""
    fix = "or drop custom_generate to decode serially with the processor"
    if generation_config.do_sample:
        raise ValueError(f"compiled choice decides greedily: pass do_sample=False, {fix}.")
    mask = model_kwargs.get("attention_mask")
    if input_ids.shape[0] != 1 or (mask is not None and not bool(mask.all())):
        raise ValueError(f"compiled choice takes one unpadded prompt, got {input_ids.shape[0]} rows"
                         f"{' with padding' if mask is not None and not bool(mask.all()) else ''}; call generate() "
                         f"once per prompt, {fix}.")
    others = [type(p).__name__ for p in logits_processor or [] if p is not proc]
    if others:
        raise ValueError(f"compiled choice reproduces the processor alone, but generate() also applies "
                         f"{', '.join(others)} (from the call or the generation config); drop those settings, {fix}.")
    stops = [type(c).__name__ for c in stopping_criteria or [] if not isinstance(c, (MaxLengthCriteria, EosTokenCriteria))]
    if stops:
        raise ValueError(f"compiled choice stops at max_new_tokens and EOS only, but generate() was given "
                         f"{', '.join(stops)}; drop them, {fix}.")
    eos = generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    if proc.grammar.eos_token_id is not None and proc.grammar.eos_token_id not in eos:
        raise ValueError(f"the processor ends its output with EOS id {proc.grammar.eos_token_id}, where generate() "
                         f"would not stop (eos_token_id {sorted(eos) or None}); pass "
                         f"eos_token_id={proc.grammar.eos_token_id}, {fix}.")
