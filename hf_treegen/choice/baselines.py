"""The peers a user would otherwise reach for: outlines' regex processor and the unary shortcut.

    outlines_select   stock generate() with outlines' own logits processor on the regex of every
                      ordered b-permutation (only for small k, b: the regex has k!/(k-b)! branches).
                      outlines accepts any spelling of the text, not only the in-context tokenization,
                      so its greedy path can differ from the serial processor's where a label has
                      several spellings; with one spelling per label the two policies coincide.
    unary_select      top-b labels of the first-slot distribution: the prefill only, no history.
"""

from __future__ import annotations

import itertools
import math
import re
import time

import torch

from .engines import ChoiceResult, _check_prompt, max_output_tokens
from .grammar import ChoiceGrammar
from ..target import prefill, stock_generate
from .width import label_ranking

OUTLINES_MAX_PERMUTATIONS = 5000


def permutation_regex(grammar: ChoiceGrammar) -> str:
    k, b = len(grammar.choices), grammar.num_select
    count = math.perm(k, b)
    if count > OUTLINES_MAX_PERMUTATIONS:
        raise ValueError(f"the outlines baseline enumerates {count} orderings (k={k}, b={b}); it is limited "
                         f"to {OUTLINES_MAX_PERMUTATIONS}. Use smaller k or b for this baseline.")
    term = re.escape(grammar.terminator) if grammar.terminator else ""
    options = (re.escape(grammar.separator).join(re.escape(grammar.choices[i]) for i in order)
               for order in itertools.permutations(range(k), b))
    return "(" + "|".join(options) + ")" + term


class OutlinesChoice:
    """Builds outlines' processor once per grammar (its index compile is the expensive part)."""

    def __init__(self, model, tokenizer, grammar: ChoiceGrammar):
        from ..extras import require

        outlines = require("outlines", "outlines", "the outlines baseline")
        get_regex_logits_processor = require("outlines.backends", "outlines",
                                             "the outlines baseline").get_regex_logits_processor
        self.grammar, self.model, self.tokenizer = grammar, model, tokenizer
        start = time.perf_counter()
        wrapped = outlines.from_transformers(model, tokenizer)
        self.processor = get_regex_logits_processor(None, wrapped, permutation_regex(grammar))
        self.compile_seconds = time.perf_counter() - start

    @torch.no_grad()
    def select(self, input_ids: torch.Tensor) -> ChoiceResult:
        g = self.grammar
        _check_prompt(self.model, input_ids, g)
        self.processor.reset()
        generate = stock_generate(self.model)
        start = time.perf_counter()
        out = generate(input_ids, logits_processor=[self.processor], max_new_tokens=4 * max_output_tokens(g),
                       do_sample=False, eos_token_id=g.eos_token_id, pad_token_id=g.eos_token_id or 0)
        seconds = time.perf_counter() - start
        new = out[0, input_ids.shape[1]:].tolist()
        text = self.tokenizer.decode([t for t in new if t != g.eos_token_id], skip_special_tokens=False)
        if g.terminator and text.endswith(g.terminator):
            text = text[: -len(g.terminator)]
        labels = tuple(text.split(g.separator)) if g.num_select > 1 else (text,)
        indices = tuple(g.choices.index(x) for x in labels if x in g.choices)
        return ChoiceResult(labels, indices, tuple(new), len(new), engine="outlines", seconds=seconds,
                            extra={"valid": len(indices) == g.num_select})


@torch.no_grad()
def unary_select(model, input_ids: torch.Tensor, grammar: ChoiceGrammar) -> ChoiceResult:
    """Top-b labels by their first token's root logit: one forward, interactions ignored."""
    _check_prompt(model, input_ids, grammar)
    start = time.perf_counter()
    logits, _ = prefill(model, input_ids)
    ranked, _ = label_ranking(grammar, logits)
    order = tuple(ranked[: grammar.num_select])
    return ChoiceResult(tuple(grammar.choices[i] for i in order), order, grammar.output_tokens(order), 1,
                        engine="unary", seconds=time.perf_counter() - start)
