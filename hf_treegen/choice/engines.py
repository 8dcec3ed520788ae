"""Three engines for the same greedy constrained policy, and the result they share.

    compiled_select   root prefill + one tree-causal probe (+ a fallback round when a width-limited
                      probe misses the greedy path); margin guard re-decides near-ties serially
    chunked_select    one forward per decision: the decided token and the forced span after it are
                      appended together (jump-forward)
    serial_select     stock generate() with the SerialChoiceProcessor: one forward per output token

All three return a :class:`ChoiceResult`; ``token_ids`` are the tokens generate() would emit.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import torch

from ..costs import VerifyCostModel
from .grammar import ChoiceGrammar, State
from ..target import chunk_forward, prefill, serial_logits, stock_generate
from .probe import build_probe
from .serial import SerialChoiceProcessor
from .width import CHUNKED, MEASURE_ROWS, MissStats, context_bucket, label_ranking

# Logit gaps below these are treated as float near-ties and re-decided the serial way. Probe rows and
# serial rows differ only by reduction order: ~1e-13 in fp64, ~1e-5 in fp32, ~0.1 in bf16 logits.
FUSE_MAX_ROWS = 256  # "auto" fusion only considers choice trees smaller than this

DEFAULT_GUARD = {torch.float64: 1e-9, torch.float32: 1e-3, torch.bfloat16: 0.5, torch.float16: 0.1}


@dataclass
class ChoiceResult:
    labels: tuple[str, ...]
    indices: tuple[int, ...]
    token_ids: tuple[int, ...]  # generated tokens, as generate() would emit them (EOS included)
    forwards: int  # dependent forwards, the prefill included
    probe_rows: int = 0  # decision rows evaluated by probes
    probe_tokens: int = 0  # tokens evaluated by probes
    rounds: int = 0  # probe forwards
    fallbacks: int = 0  # extra probe rounds because a width-limited probe missed the greedy path
    guarded: int = 0  # decisions whose margin fell below the guard and were re-decided serially
    margins: tuple[float, ...] = ()  # per label slot: the smallest decision margin (logit gap) in it
    engine: str = ""
    seconds: float = 0.0
    width: int | str | None = None  # probe width used (None: full; "chunked": adaptive chose chunked)
    extra: dict = field(default_factory=dict)


def decide(logits: torch.Tensor, allowed: tuple[int, ...]) -> tuple[int, float]:
    """Masked greedy choice (lowest id wins ties, like argmax) and its margin over the runner-up."""
    idx = torch.tensor(allowed, device=logits.device)
    values = logits[idx]  # (A,)
    best = int(values.argmax())
    if len(allowed) == 1:
        return allowed[0], float("inf")
    top2 = torch.topk(values, 2).values
    return allowed[best], float(top2[0] - top2[1])


class _Trace:
    """Accumulates the decided path, per-slot margins and the grammar state."""

    def __init__(self, grammar: ChoiceGrammar):
        self.grammar, self.path, self.state = grammar, (), grammar.initial
        self.margins: dict[int, float] = {}

    def push(self, token: int, margin: float | None = None) -> None:
        if margin is not None:
            slot = self.grammar.slot(self.state)
            self.margins[slot] = min(self.margins.get(slot, float("inf")), margin)
        self.path += (token,)
        self.state = self.grammar.advance(self.state, token)

    def forced_tail(self) -> None:
        while not self.grammar.is_complete(self.state):
            allowed = self.grammar.allowed(self.state)
            if len(allowed) != 1:
                return
            self.push(allowed[0])

    @property
    def complete(self) -> bool:
        return self.grammar.is_complete(self.state)

    def result(self, engine: str, forwards: int, seconds: float, **kw) -> ChoiceResult:
        g = self.grammar
        order = g.chosen(self.state)
        tokens = self.path + ((g.eos_token_id,) if g.appends_eos else ())
        margins = tuple(self.margins.get(s, float("inf")) for s in range(g.num_select))
        return ChoiceResult(tuple(g.choices[i] for i in order), order, tokens, forwards, margins=margins,
                            engine=engine, seconds=seconds, **kw)


def measured_cost(model, prompt_length: int) -> VerifyCostModel:
    """The forward-cost curve for this model at the prompt's context size, from
    :func:`hf_treegen.calibrate` (measured once per context bucket, visibly, and cached)."""
    from .. import calibration  # looked up at call time: tests pin calibration.calibrate

    return calibration.calibrate(model, max_rows=MEASURE_ROWS, context=context_bucket(prompt_length)).verify


def _check_prompt(model, input_ids: torch.Tensor, grammar: ChoiceGrammar) -> None:
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"select() takes one prompt: input_ids of shape (1, P), got {tuple(input_ids.shape)}.")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty; select() needs at least one prompt token.")
    longest = max_output_tokens(grammar)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and input_ids.shape[1] + longest > limit:
        raise ValueError(
            f"the prompt has {input_ids.shape[1]} tokens and the choice output needs up to ~{longest} more, "
            f"past the model's context of {limit}; shorten the prompt (fewer or shorter candidates)."
        )


# ------------------------------------------------------------------------------------ compiled
@torch.no_grad()
def compiled_select(model, input_ids: torch.Tensor, grammar: ChoiceGrammar, guard_margin: float | None = None,
                    width: int | str | None = None, fuse: bool | str = "auto", *,
                    costs: VerifyCostModel | None = None, miss_stats: MissStats | None = None) -> ChoiceResult:
    """Root prefill + tree-causal probe(s). ``width``: keep only the ``width`` best not-yet-chosen labels
    (ranked by the root distribution) at each decision; None: the full probe, one round; "auto": the
    width with the lowest expected cost under the measured cost curve (chunked when nothing pays).
    ``fuse``: put the whole choice tree into the prefill forward itself (one forward in all) when True,
    never when False, and when the measured cost curve says it is cheaper than a separate probe ("auto",
    full-width probes only). ``costs``: the forward-cost curve those plans use (default: measured by
    :func:`hf_treegen.calibrate` at the prompt's context size); ``miss_stats``: what earlier calls saw
    of width-limited probes (default: this call's own)."""
    _check_prompt(model, input_ids, grammar)
    miss_stats = MissStats() if miss_stats is None else miss_stats
    # measured (or read from the calibration cache) only if a plan needs it, once per call
    curve = functools.cache(lambda: costs if costs is not None else measured_cost(model, input_ids.shape[1]))
    start = time.perf_counter()
    guard = DEFAULT_GUARD.get(model.dtype, 1e-3) if guard_margin is None else guard_margin
    trace, stats = _Trace(grammar), dict(probe_rows=0, probe_tokens=0, rounds=0, fallbacks=0, guarded=0)
    # Tokens forced before the first decision (the "[" of "[3]") ride along with the prefill.
    trace.forced_tail()
    root_span = trace.path
    if not trace.complete and width is None and fuse:
        cap = None if fuse is True else FUSE_MAX_ROWS  # bigger trees never pay inside a prefill
        fused = build_probe(grammar, root_span, root_token=int(input_ids[0, -1]), max_rows=cap)
        if fused is not None and (fuse is True or (fused.num_tokens < FUSE_MAX_ROWS and _fusing_pays(
                curve(), fused, fused.rows[root_span]))):
            return _fused_select(model, input_ids, trace, fused, guard, stats, start)
    root_logits, cache = prefill(model, input_ids, root_span)
    past, forwards = input_ids.shape[1] + len(root_span), 1
    replay = SerialReplay(model, input_ids)

    def decide_guarded(logits, allowed, exact: bool):
        nonlocal forwards
        token, margin = decide(logits, allowed)
        if margin < guard and not exact:  # a float near-tie: re-decide the way serial decoding computes it
            token, margin = decide(replay.logits(trace.path), allowed)
            forwards += replay.last_forwards
            stats["guarded"] += 1
        return token, margin

    if trace.complete:
        return trace.result("compiled", forwards, time.perf_counter() - start, **stats)
    # Without a forced span the prefill's logits are exactly generate()'s first-step logits.
    allowed = grammar.allowed(trace.state)
    trace.push(*decide_guarded(root_logits, allowed, exact=not root_span))
    adaptive, k = width == "auto", len(grammar.choices)
    keep = None if width is None or adaptive else unary_width_filter(grammar, root_logits, width)
    plans = []

    while True:
        trace.forced_tail()
        if trace.complete:
            break
        if adaptive:  # plan (again, after a miss) from the path decided so far
            width, probe = _auto_width(grammar, trace, root_logits, curve(), len(root_span),
                                       observed=lambda w: miss_stats.rate(model, k, grammar.num_select, w))
            plans.append(width)
            if width == CHUNKED:
                forwards = _chunked_from(model, cache, input_ids.shape[1], trace, forwards, fed=len(root_span))
                break
        else:
            probe = build_probe(grammar, trace.path, keep, cached=len(root_span))
        logits, index = probe.run(model, cache, past), probe.logit_index()  # (D, V)
        forwards += 1
        stats["rounds"] += 1
        stats["fallbacks"] += stats["rounds"] > 1
        stats["probe_rows"] += probe.num_decisions
        stats["probe_tokens"] += probe.num_tokens
        first_slot, missed = grammar.slot(trace.state), False
        while not trace.complete:
            allowed = grammar.allowed(trace.state)
            if len(allowed) == 1:
                trace.push(allowed[0])
                continue
            row = probe.rows.get(trace.path)
            if row is None:  # the greedy path left a width-limited probe: probe again from here
                missed = True
                break
            trace.push(*decide_guarded(logits[index[row]], allowed, exact=False))
        if adaptive and width is not None:  # what the planner learns about the unary order at this width
            hits = max(0, grammar.slot(trace.state) - first_slot - missed)
            miss_stats.record(model, k, grammar.num_select, width, hits, missed)
    if adaptive:
        stats["width"] = plans[0] if plans else None
        stats["extra"] = {"plans": plans}
    return trace.result("compiled", forwards, time.perf_counter() - start, **stats)


def _fused_select(model, input_ids, trace: "_Trace", fused, guard: float, stats: dict, start: float) -> ChoiceResult:
    """Everything in one forward: the prompt and the whole choice tree below it."""
    logits, index = fused.run_fused(model, input_ids), fused.logit_index()  # (D, V)
    replay, forwards = SerialReplay(model, input_ids), 1
    # rounds counts separate probe forwards: the fused tree rides inside the prefill, so none
    stats.update(rounds=0, probe_rows=fused.num_decisions, probe_tokens=fused.num_tokens - 1, width="fused")
    grammar = trace.grammar
    while not trace.complete:
        allowed = grammar.allowed(trace.state)
        if len(allowed) == 1:
            trace.push(allowed[0])
            continue
        token, margin = decide(logits[index[fused.rows[trace.path]]], allowed)
        if margin < guard:  # a float near-tie: re-decide the way serial decoding computes it
            token, margin = decide(replay.logits(trace.path), allowed)
            forwards += replay.last_forwards
            stats["guarded"] += 1
        trace.push(token, margin)
    return trace.result("compiled", forwards, time.perf_counter() - start, **stats)


def _fusing_pays(cost: VerifyCostModel, fused, decision_row: int) -> bool:
    """Fuse when the tree's rows, added to a compute-bound prefill, cost less than the separate probe
    forward it saves (over the largest branch left after the first decision), per the cost curve."""
    parents = fused.tree.parents.tolist()
    size = [1] * len(parents)
    for node in range(len(parents) - 1, 0, -1):
        size[parents[node]] += size[node]
    separate = max((size[n] for n, p in enumerate(parents) if p == decision_row), default=0)
    per_row = (cost.seconds_for(256) - cost.seconds_for(128)) / 128  # marginal row cost once compute-bound
    return separate > 0 and per_row * (fused.num_tokens - 1) < cost.seconds_for(separate)


class SerialReplay:
    """Logits after an output prefix computed exactly as generate() computes them: a prefill of the
    prompt alone, then one token per forward. Built lazily: only guarded near-ties pay for it."""

    def __init__(self, model, input_ids: torch.Tensor):
        self.model, self.input_ids = model, input_ids
        self.cache, self.root_logits, self.last_forwards = None, None, 0

    def logits(self, path: tuple[int, ...]) -> torch.Tensor:
        self.last_forwards = len(path)
        if self.cache is None:
            self.root_logits, self.cache = prefill(self.model, self.input_ids)
            self.last_forwards += 1
        if not path:
            return self.root_logits
        return serial_logits(self.model, self.cache, self.input_ids.shape[1], path)


def _auto_width(grammar, trace: "_Trace", root_logits, cost: VerifyCostModel, cached: int, observed):
    """(width, first-round probe) or (CHUNKED, None) for the rest of the output, per the cost curve."""
    from .width import choose_width

    ranked, probs = label_ranking(grammar, root_logits)
    return choose_width(grammar, trace.path, trace.state, lambda w: unary_width_filter(grammar, root_logits, w),
                        ranked, probs, cost, cached, observed=observed)


def unary_width_filter(grammar: ChoiceGrammar, root_logits: torch.Tensor, width: int):
    """keep_child for a speculative probe: follow only tokens that can spell one of the ``width`` best
    labels not yet chosen, with labels ranked by the root logit of their first token (the unary order)."""
    if width < 1:
        raise ValueError(f"probe width must be >= 1, got {width}.")
    ranked, _ = label_ranking(grammar, root_logits)

    def keep(state: State, token: int, depth: int) -> bool:
        # follow a token when it spells (or continues spelling) one of the best unused labels; labels
        # sharing a prefix ("[1" of [1], [10]..[19]) are told apart by the hypothesis, not the token
        for labels, pos in state:
            spelling = grammar.spelling(labels)
            if pos >= len(spelling) or spelling[pos] != token:
                continue
            used = set(labels[:-1])
            if labels[-1] in [i for i in ranked if i not in used][:width]:
                return True
        return False

    return keep


# ------------------------------------------------------------------------------------- chunked
@torch.no_grad()
def chunked_select(model, input_ids: torch.Tensor, grammar: ChoiceGrammar) -> ChoiceResult:
    """One forward per decision: the decided token plus the forced span after it go in together."""
    _check_prompt(model, input_ids, grammar)
    start = time.perf_counter()
    trace = _Trace(grammar)
    trace.forced_tail()  # a forced start goes in with the prompt, as jump-forward engines do
    root_span = trace.path
    logits, cache = prefill(model, input_ids, root_span)
    forwards = 1
    if not trace.complete:
        allowed = grammar.allowed(trace.state)
        token, margin = decide(logits, allowed)
        trace.push(token, margin if len(allowed) > 1 else None)
        forwards = _chunked_from(model, cache, input_ids.shape[1], trace, 1, fed=len(root_span))
    return trace.result("chunked", forwards, time.perf_counter() - start)


def _chunked_from(model, cache, prompt_len: int, trace: _Trace, forwards: int, fed: int) -> int:
    """Continue a decided prefix chunk by chunk; the cache holds the prompt and the first ``fed`` output
    tokens. Returns the number of forwards so far."""
    while True:
        trace.forced_tail()
        if trace.complete:
            return forwards
        logits = chunk_forward(model, cache, prompt_len + fed, trace.path[fed:])
        forwards += 1
        fed = len(trace.path)
        allowed = trace.grammar.allowed(trace.state)
        token, margin = decide(logits, allowed)
        trace.push(token, margin if len(allowed) > 1 else None)


# -------------------------------------------------------------------------------------- serial
@torch.no_grad()
def serial_select(model, input_ids: torch.Tensor, grammar: ChoiceGrammar, processor=None) -> ChoiceResult:
    """Stock generate() (greedy) with the serial processor: the reference policy, one forward per token."""
    _check_prompt(model, input_ids, grammar)
    proc = processor or SerialChoiceProcessor.from_grammar(grammar)
    start = time.perf_counter()
    generate = stock_generate(model)
    limit = max_output_tokens(grammar)
    out = generate(input_ids, logits_processor=[proc], max_new_tokens=limit, do_sample=False,
                   eos_token_id=grammar.eos_token_id, pad_token_id=grammar.eos_token_id or 0)
    seconds = time.perf_counter() - start
    new = tuple(out[0, input_ids.shape[1]:].tolist())
    trace = _Trace(grammar)
    for token in new:
        if trace.complete:
            break
        trace.push(token)
    if not trace.complete:
        raise RuntimeError(f"serial decoding stopped before the choice was complete: {new}")
    return trace.result("serial", len(new), seconds)


def max_output_tokens(grammar: ChoiceGrammar) -> int:
    """An upper bound on the output length (EOS included)."""
    by_kind, b = grammar.spellings.by_kind, grammar.num_select
    longest = lambda kind: max(len(ids) for ids in by_kind[kind])
    if b == 1:
        return longest("only") + 1
    return longest("first") + (b - 2) * longest("middle") + longest("last") + 1
