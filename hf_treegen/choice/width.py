"""Width-adaptive probing: how many branches per decision a probe should carry.

A full probe over b = 4 of k = 20 labels holds thousands of rows; one forward of that size costs far
more than the handful of small forwards the chunked engine needs. Before probing we know the root
distribution (the prefill computed it), so we rank labels by their first-token logit (the unary order)
and consider probes that keep only the ``w`` best not-yet-chosen labels at every decision. The expected
cost of width ``w`` is

    cost(w) = t(rows(w)) * rounds(w)

where ``t`` is the measured forward-cost curve and ``rounds(w)`` one round plus the expected number of
later slots that pick a label outside the kept ones (each such miss costs one more probe round). The
per-slot miss chance starts from the unary shortcut's Plackett-Luce law and is corrected online by the
misses actually seen at that width (:class:`MissStats`): on real prompts the unary order is often
wrong after the first slot, far more often than its own law predicts. The chunked engine's estimate
is one forward per decision left, priced by its real size; a probe plan must beat it by a margin
(``PROBE_MARGIN``), else we run chunked. The plan is remade after every miss, from the path decided so
far, so compiled control is never planned to be slower than chunked.

Planning is cheap: widths are tried from narrow to wide and the search stops at the first probe whose
single forward already costs more than the best plan (wider probes only cost more), so the huge full
probes of the n = 4 regime are never built.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch

from ..costs import VerifyCostModel
from ..defaults import CANDIDATE_WIDTHS, PROBE_MARGIN
from .grammar import ChoiceGrammar, State
from .probe import Probe, build_probe

CHUNKED = "chunked"
# The forward-cost curve is measured up to this many rows (once per model and context bucket, by
# hf_treegen.calibrate and cached there); wider probes are priced by extending it linearly.
MEASURE_ROWS = 512


def label_ranking(grammar: ChoiceGrammar, root_logits: torch.Tensor) -> tuple[list[int], list[float]]:
    """Labels in unary order and the unary law's probability of each for the first slot.

    The prefill only scores first tokens, and labels can share one ("1" starts [1] and [10]..[19]), so
    a first token's probability is split evenly among the labels it starts: the law then admits that
    it cannot tell those labels apart, instead of crediting each with the whole mass."""
    kind = "only" if grammar.num_select == 1 else "first"
    first = [ids[0] for ids in grammar.spellings.by_kind[kind]]
    distinct = sorted(set(first))
    logits = root_logits[torch.tensor(distinct)].double()  # (F,) one per distinct first token
    token_probs = dict(zip(distinct, torch.softmax(logits, 0).tolist()))
    token_logits = dict(zip(distinct, logits.tolist()))
    sharing = {t: first.count(t) for t in distinct}
    probs = [token_probs[t] / sharing[t] for t in first]
    ranked = sorted(range(len(first)), key=lambda i: (-token_logits[first[i]], i))
    return ranked, probs


def slot_misses(ranked: list[int], probs: list[float], chosen: tuple[int, ...], num_select: int,
                width: int) -> list[float]:
    """Per slot after the current one: the chance, along the unary-predicted order, that its label
    leaves the ``width`` best unused labels (``chosen``: labels already spelled or being spelled)."""
    predicted = list(chosen) + [i for i in ranked if i not in chosen]
    misses = []
    for slot in range(len(chosen), num_select):
        remaining = predicted[slot:]
        total = sum(probs[i] for i in remaining)
        misses.append(1.0 - sum(probs[i] for i in remaining[:width]) / total if total > 0 else 0.0)
    return misses


def expected_rounds(ranked: list[int], probs: list[float], chosen: tuple[int, ...], num_select: int,
                    width: int, observed: "MissRate | None" = None) -> float:
    """1 + the expected number of later slots that miss a width-``width`` probe (each one costs a round)."""
    predicted = slot_misses(ranked, probs, chosen, num_select, width)
    if observed is not None:
        predicted = [observed.blend(p) for p in predicted]
    return 1.0 + sum(predicted)


@dataclass
class MissRate:
    """Slots decided inside a width-limited probe (``trials``) and how many left it (``misses``)."""

    misses: int = 0
    trials: int = 0
    PRIOR_WEIGHT = 1.0  # the unary law counts as this many observations

    def blend(self, prior: float) -> float:
        return (self.PRIOR_WEIGHT * prior + self.misses) / (self.PRIOR_WEIGHT + self.trials)


class MissStats:
    """Per model, per (k, b, width): the misses seen so far. Owned by whoever made it (each
    :class:`~hf_treegen.CompiledChoiceProcessor` keeps its own), so planning never depends on what
    unrelated calls saw."""

    def __init__(self):
        self._by_model: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def rate(self, model, k: int, num_select: int, width: int) -> MissRate:
        table = self._by_model.setdefault(model, {})
        return table.setdefault((k, num_select, width), MissRate())

    def record(self, model, k: int, num_select: int, width: int, hits: int, missed: bool) -> None:
        rate = self.rate(model, k, num_select, width)
        rate.trials += hits + missed
        rate.misses += missed


def labels_in_play(state: State) -> tuple[int, ...]:
    """Labels spelled so far, the one in progress included (from the first hypothesis: they agree on
    the completed ones, and the one in progress only feeds an estimate)."""
    labels, _ = min(state, key=lambda h: (len(h[0]), h[0]))
    return labels


def choose_width(grammar: ChoiceGrammar, path: tuple[int, ...], state: State, keep_for_width, ranked, probs,
                 cost: VerifyCostModel, cached: int = 0, observed=None) -> tuple[int | None | str, Probe | None]:
    """The plan with the lowest expected cost below ``path`` and the probe for its first round:
    ``(width, probe)``, ``(None, probe)`` for the full probe, or ``(CHUNKED, None)``. ``observed(width)``
    gives the :class:`MissRate` seen so far at that width (None: the unary law alone)."""
    k = len(grammar.choices)
    narrow = build_probe(grammar, path, keep_for_width(1), cached=cached)
    if narrow is None:
        return None, None
    chosen = labels_in_play(state)
    best, best_probe = CHUNKED, None
    chunked_s = sum(cost.seconds_for(size) for size in chunk_sizes(narrow))
    best_s = PROBE_MARGIN * chunked_s  # a probe's cost is an estimate (misses); chunked's is not
    for width in sorted({w for w in CANDIDATE_WIDTHS if w < k} | {k}):
        cap = rows_within(cost, best_s)
        probe = narrow if width == 1 else build_probe(
            grammar, path, None if width >= k else keep_for_width(width), cached=cached, max_rows=cap + 1)
        if probe.num_tokens > cap:
            break  # one forward of this probe already costs more than the best plan; wider ones cost more
        seen = None if observed is None or width >= k else observed(width)
        rounds = expected_rounds(ranked, probs, chosen, grammar.num_select, width, seen)
        seconds = cost.seconds_for(probe.num_tokens) * rounds
        if seconds < best_s:
            best, best_probe, best_s = (None if width >= k else width), probe, seconds
    return best, best_probe


def chunk_sizes(narrow: Probe) -> list[int]:
    """Tokens per forward the chunked engine would run along the predicted path of a width-1 probe:
    one forward per decision, carrying everything since the previous one (on a CPU a 1-token forward
    costs about half a 2-token one, so the sizes matter, not just the count)."""
    depths = narrow.tree.depths.tolist()
    sizes, fed = [], -1  # depth of the last token already fed
    for row in narrow.decision_rows:  # breadth-first: non-decreasing depth
        if depths[row] > fed:
            sizes.append(depths[row] - fed)
            fed = depths[row]
    return sizes


def rows_within(cost: VerifyCostModel, seconds: float) -> int:
    """The most rows one forward can hold for at most ``seconds`` under the cost curve."""
    low, high = 0, 1
    while cost.seconds_for(high) <= seconds and high < 1 << 20:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if cost.seconds_for(mid) <= seconds else (low, mid)
    return low


def context_bucket(length: int) -> int:
    return max(128, 1 << math.ceil(math.log2(max(length, 1))))

