"""Width-adaptive probing: how many branches per decision a probe should carry.

A full probe over b = 4 of k = 20 labels holds hundreds of rows; one forward of that size can cost more
than the handful of small forwards the chunked engine needs. Before probing we know the root
distribution (the prefill computed it), so we rank labels by their first-token logit (the unary order)
and consider probes that keep only the ``w`` best not-yet-chosen labels at every decision. The expected
cost of width ``w`` is

    cost(w) = t(rows(w)) * (1 + p_miss(w))

where ``t`` is the measured forward-cost curve and ``p_miss`` the chance, under the unary shortcut's
Plackett-Luce law, that some slot picks a label outside the kept ones (a miss costs one more probe round).
If no width beats the chunked engine's estimate (one small forward per decision), we run chunked: so
adaptive compiled control is never planned to be slower than chunked.
"""

from __future__ import annotations

import math

import torch

from ..builders.cost_model import VerifyCostModel, cached_verify_cost
from .grammar import ChoiceGrammar
from .probe import build_probe

CHUNKED = "chunked"


def label_ranking(grammar: ChoiceGrammar, root_logits: torch.Tensor) -> tuple[list[int], list[float]]:
    """Labels in unary order and their first-slot probabilities (softmax over first tokens)."""
    kind = "only" if grammar.num_select == 1 else "first"
    first = torch.tensor([ids[0] for ids in grammar.spellings.by_kind[kind]])
    logits = root_logits[first].double()  # (k,)
    probs = torch.softmax(logits, 0).tolist()
    ranked = sorted(range(len(probs)), key=lambda i: (-float(logits[i]), i))
    return ranked, probs


def miss_probability(ranked: list[int], probs: list[float], num_select: int, width: int) -> float:
    """P(some slot t >= 2 leaves the top-``width`` unused labels) along the unary-predicted order."""
    hit = 1.0
    for t in range(1, num_select):
        remaining = ranked[t:]
        total = sum(probs[i] for i in remaining)
        if total > 0:
            hit *= sum(probs[i] for i in remaining[:width]) / total
    return 1.0 - hit


def context_bucket(length: int) -> int:
    return max(128, 1 << math.ceil(math.log2(max(length, 1))))


def choose_width(grammar: ChoiceGrammar, path: tuple[int, ...], keep_for_width, ranked, probs,
                 cost: VerifyCostModel, cached: int = 0) -> int | None | str:
    """The width (None = full probe) with the lowest expected cost, or CHUNKED when chunked is cheaper."""
    k = len(grammar.choices)
    narrow = build_probe(grammar, path, keep_for_width(1), cached=cached)
    if narrow is None:
        return None
    chunked_s = narrow.num_decisions * cost.seconds_for(3)
    best, best_s = CHUNKED, chunked_s
    for width in sorted({1, 2, 3, 4, 6, 8, 12, 16, k}):
        if width > k:
            continue
        probe = narrow if width == 1 else build_probe(grammar, path, None if width >= k else keep_for_width(width), cached=cached)
        seconds = cost.seconds_for(probe.num_tokens) * (1.0 + miss_probability(ranked, probs, grammar.num_select, width))
        if seconds < best_s:
            best, best_s = (None if width >= k else width), seconds
    return best


def measured_cost(model, grammar: ChoiceGrammar, prompt_length: int) -> VerifyCostModel:
    """The forward-cost curve for this model at the prompt's context size (measured once, cached)."""
    full = build_probe(grammar, (grammar.allowed(grammar.initial)[0],), max_rows=MEASURE_MAX_ROWS)
    rows = 8 if full is None else max(8, full.num_tokens)
    return cached_verify_cost(model, rows, context=context_bucket(prompt_length))


# Forwards wider than this are not timed (on a CPU one takes seconds); the curve is extended linearly.
MEASURE_MAX_ROWS = 1024
