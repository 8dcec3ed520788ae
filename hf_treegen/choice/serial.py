"""The reference policy: a logits processor that keeps stock generate() inside the choice grammar."""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

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
