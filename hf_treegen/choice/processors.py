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
from transformers import LogitsProcessor

from .engines import ChoiceResult, chunked_select, compiled_select, serial_select
from .grammar import ChoiceGrammar


class SerialChoiceProcessor(LogitsProcessor):
    """Masks every token that would leave the choice grammar (chosen labels cannot repeat).

    The output starts at the first generated token; the processor remembers the prompt of the
    generate() call it is serving, so one instance can serve many calls (batch rows are independent).
    """

    def __init__(self, tokenizer, choices, num_select: int, separator: str = ", ", terminator: str | None = None):
        self.grammar = ChoiceGrammar(tokenizer, choices, num_select, separator, terminator)
        self._prompt: torch.Tensor | None = None

    @classmethod
    def from_grammar(cls, grammar: ChoiceGrammar) -> "SerialChoiceProcessor":
        proc = cls.__new__(cls)
        proc.grammar, proc._prompt = grammar, None
        return proc

    @property
    def choices(self) -> tuple[str, ...]:
        return self.grammar.choices

    def _prompt_length(self, input_ids: torch.Tensor) -> int:
        prompt = self._prompt
        if prompt is None or input_ids.shape[1] <= prompt.shape[1] or not torch.equal(
                input_ids[:, : prompt.shape[1]], prompt):
            self._prompt = input_ids.clone()  # a new generate() call
        return self._prompt.shape[1]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        start = self._prompt_length(input_ids)
        mask = torch.full_like(scores, float("-inf"))
        for row in range(input_ids.shape[0]):
            state = self.grammar.walk(input_ids[row, start:].tolist())
            allowed = self.grammar.allowed(state)
            if allowed:
                mask[row, list(allowed)] = 0
            else:  # complete, and no EOS to force: leave the row alone (stop it with stop_strings)
                mask[row] = 0
        return scores + mask


class CompiledChoiceProcessor(SerialChoiceProcessor):
    """The serial policy computed with one prefill and one tree-causal probe.

    ``guard_margin``: decisions whose logit gap is below it are re-decided serially (default by dtype);
    ``width``: None probes every branch; an int keeps the ``width`` best labels per decision (by the
    root distribution) and probes again when the greedy path leaves them; ``"auto"`` picks the width
    from a measured cost model.
    """

    def __init__(self, tokenizer, choices, num_select: int, separator: str = ", ", terminator: str | None = None,
                 guard_margin: float | None = None, width: int | str | None = None):
        super().__init__(tokenizer, choices, num_select, separator, terminator)
        if width is not None and width != "auto" and (not isinstance(width, int) or width < 1):
            raise ValueError(f"width must be None, 'auto' or a positive int, got {width!r}.")
        self.guard_margin, self.width = guard_margin, width

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
        return compiled_select(model, input_ids, self.grammar, guard_margin=self.guard_margin, width=self.width)


def probe_capable(model) -> bool:
    """Probes need a 4D tree mask; flash-attention cannot take one, so we fall back to serial."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl in ("sdpa", "eager", "flex_attention"):
        return True
    warnings.warn(f"CompiledChoiceProcessor: attention {impl!r} cannot take a tree mask; deciding serially "
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
