"""Three engines for the same greedy constrained policy, and the result they share.

    compiled_select   root prefill + one tree-causal probe (+ a fallback round when a width-limited
                      probe misses the greedy path); margin guard re-decides near-ties serially
    chunked_select    one forward per decision: the decided token and the forced span after it are
                      appended together (jump-forward)
    serial_select     stock generate() with the SerialChoiceProcessor: one forward per output token

All three return a :class:`ChoiceResult`; ``token_ids`` are the tokens generate() would emit.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import torch

from ..costs import VerifyCostModel
from ..defaults import DEFAULT_GUARD, FIRST_USE_FUSE_ROWS, FUSE_MAX_ROWS
from ..speculation import Proposal, run_round
from ..tree import DraftTree
from ..target import (chunk_forward, fused_tree_logits, keep_cache_rows, prefill, serial_logits, stock_generate,
                      tree_logits)
from .grammar import ChoiceGrammar, State
from .probe import Probe, build_probe
from .serial import SerialChoiceProcessor
from .width import CHUNKED, MEASURE_ROWS, MissStats, context_bucket, label_ranking

# A full probe (width=None) larger than this is never built: its one forward would cost seconds to
# minutes (k = 20, b = 4 spells 18,741 tokens); the width is planned from the cost curve instead.
FULL_PROBE_MAX_ROWS = 4096


@dataclass
class ChoiceResult:
    """What one choice decision returned, whichever engine made it.

    ``labels`` / ``indices``: the chosen labels in output order and their positions in ``choices``;
    ``token_ids``: the generated tokens, as generate() would emit them (EOS included); ``forwards``:
    dependent forwards, the prefill included; ``probe_rows`` / ``probe_tokens``: decision rows and
    tokens evaluated by probes; ``rounds``: probe forwards; ``fallbacks``: extra probe rounds because a
    width-limited probe missed the greedy path; ``guarded``: decisions whose margin fell below the
    guard and were re-decided serially; ``margins``: per label slot, the smallest decision margin
    (logit gap) in it; ``engine``; ``seconds``; ``width``: the probe width used (None: full;
    ``"chunked"``: the adaptive width chose the chunked engine)."""

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
    seconds: float = 0.0  # the selection's wall time, without setup_seconds
    setup_seconds: float = 0.0  # a first-time cost-curve measurement made inside this call (cached after)
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


class SelectionCosts:
    """The forward-cost curve one selection plans with: the caller's, else the one cached for the
    prompt's context size, else (the first selection at that size) one timed from the selection's own
    forwards, its prefill and a one-row forward on top of it, and cached like a quick calibration.
    ``seconds``: the time spent obtaining it, reported apart from the selection's latency."""

    def __init__(self, model, prompt_length: int, given: VerifyCostModel | None):
        self.model, self.context, self.curve = model, context_bucket(prompt_length), given
        self.own: VerifyCostModel | None = None  # timed from this selection's forwards, where nothing is cached
        self.seconds = 0.0
        self.looked_up = False  # whether the calibration cache was read already

    def known(self) -> VerifyCostModel | None:
        """The curve where it costs no forward: the caller's or the cached one (None: neither)."""
        if self.curve is None and not self.looked_up:
            from .. import calibration  # looked up at call time: tests pin it

            self.looked_up = True
            profile = calibration.cached_profile(self.model, max_rows=MEASURE_ROWS, context=self.context,
                                                 packed=False)
            self.curve = None if profile is None else profile.verify
        return self.curve

    def time_own_forwards(self, prefill_rows: int, prefill_seconds: float, one_row) -> None:
        """Where no curve is known, time ``one_row()`` (a one-row forward; the faster of two runs) and
        keep the line through it and the prefill as this selection's own curve."""
        if self.known() is not None:
            return
        start = time.perf_counter()
        step = min(one_row() for _ in range(2))
        self.own = VerifyCostModel.from_measurements([1, max(2, prefill_rows)], [step, max(step, prefill_seconds)])
        self.seconds += time.perf_counter() - start

    def __call__(self) -> VerifyCostModel:
        if self.known() is None:
            start = time.perf_counter()
            self.curve = measured_cost(self.model, self.context, self.own)
            self.seconds += time.perf_counter() - start
        return self.curve


def measured_cost(model, context: int, own: VerifyCostModel | None = None) -> VerifyCostModel:
    """The forward-cost curve for this model at ``context`` tokens of context, from
    :func:`hf_treegen.calibrate`: cached, else ``own`` (timed from the selection's own forwards) where
    given, else measured briefly; cached either way."""
    from .. import calibration  # looked up at call time: tests pin calibration.calibrate

    # compiled choice runs the default kernels (not tree decoding's packed ones), so its curve is timed on them
    return calibration.calibrate(model, max_rows=MEASURE_ROWS, context=context, packed=False, quick=True,
                                 first_use=own).verify


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
@dataclass
class ProbeCounts:
    forwards: int = 0  # dependent forwards, the prefill and guard replays included
    probe_rows: int = 0  # decision rows evaluated by probes
    probe_tokens: int = 0  # tokens evaluated by probes
    rounds: int = 0  # probe forwards
    guarded: int = 0  # decisions re-decided serially because their margin fell below the guard


def _no_branch(state: State, token: int, depth: int) -> bool:
    return False  # a probe of the decided chain alone: one chunked forward to the next decision


class ChoiceProposer:
    """Compiled choice's :class:`~hf_treegen.speculation.Proposer`: the grammar is the drafter. Each
    round it plans a probe below the decided output (the tree of output tokens that lead to a decision,
    see :func:`~hf_treegen.choice.probe.build_probe`) kept to a width by the width policy: every branch
    (``width=None``), the ``width`` best labels by the root distribution, or (``"auto"``) the width with
    the lowest expected cost under the cost curve, planned again after each miss; where that says
    per-decision forwards are cheaper than any probe, the decided chain alone to the next decision
    (a chunked forward), for the rest of the output. ``observe`` counts the round and, for "auto",
    records in ``learn(width, hits, missed)`` how far the planned width carried the greedy path."""

    def __init__(self, grammar: ChoiceGrammar, width, root_logits: torch.Tensor, curve, trace: "_Trace",
                 counts: ProbeCounts, miss_rate=None, learn=None):
        self.grammar, self.width, self.root_logits, self.curve = grammar, width, root_logits, curve
        self.trace, self.counts = trace, counts  # the selection's decided output, read after each commit
        self.miss_rate, self.learn = miss_rate, learn  # miss_rate(width) -> MissRate; learn(width, hits, missed)
        fixed = width is not None and width != "auto"
        self.keep = unary_width_filter(grammar, root_logits, width) if fixed else None
        self.plans: list = []  # the widths "auto" chose, round by round
        self.chunked = False  # "auto" found per-decision forwards cheaper: chains from here on
        self.probe: Probe | None = None
        self.paths: dict[int, tuple[int, ...]] = {}  # probe row -> the output path through it
        self.first_slot = 0  # the label slot the round started in

    def propose(self, committed: tuple[int, ...], cached: int) -> Proposal:
        """The probe below ``committed`` (the decided output; its first ``cached`` tokens are in the cache)."""
        path = tuple(committed)
        state = self.grammar.walk(path)
        self.first_slot = self.grammar.slot(state)
        self.probe = self._plan(path, state, cached)
        self.paths = {row: rows_path for rows_path, row in self.probe.rows.items()}
        return Proposal(self.probe.tree, self.probe.decision_rows)

    def _plan(self, path: tuple[int, ...], state: State, cached: int) -> Probe:
        if self.chunked:
            return build_probe(self.grammar, path, _no_branch, cached=cached)
        if self.width is None:
            probe = build_probe(self.grammar, path, None, cached=cached, max_rows=FULL_PROBE_MAX_ROWS + 1)
            if probe.num_tokens <= FULL_PROBE_MAX_ROWS:
                return probe
            warnings.warn(f"compiled choice: the full probe over {len(self.grammar.choices)} labels (b = "
                          f"{self.grammar.num_select}) has more than {FULL_PROBE_MAX_ROWS} tokens; planning the "
                          f"probe width from the cost curve instead (width='auto').", stacklevel=6)
            self.width = "auto"
        if self.width != "auto":
            return build_probe(self.grammar, path, self.keep, cached=cached)
        width, probe = _auto_width(self.grammar, path, state, self.root_logits, self.curve(), cached,
                                   self.miss_rate)
        self.plans.append(width)
        if width == CHUNKED:
            self.chunked = True
            return build_probe(self.grammar, path, _no_branch, cached=cached)
        return probe

    def observe(self, tree, accepted_nodes: list[int]) -> None:
        if self.chunked:
            return  # a chunked forward: counted in forwards only, and nothing to learn
        self.counts.rounds += 1
        self.counts.probe_rows += self.probe.num_decisions
        self.counts.probe_tokens += self.probe.num_tokens
        width = self.plans[-1] if self.plans else None
        if self.width == "auto" and isinstance(width, int):  # how far the planned width carried the path
            missed = not self.trace.complete
            hits = max(0, self.grammar.slot(self.trace.state) - self.first_slot - missed)
            self.learn(width, hits, missed)


class FixedProbe:
    """The proposer of a choice tree fused into the prefill: one round, that probe."""

    def __init__(self, probe: Probe):
        self.probe = probe
        self.paths = {row: path for path, row in probe.rows.items()}

    def propose(self, committed: tuple[int, ...], cached: int) -> Proposal:
        return Proposal(self.probe.tree, self.probe.decision_rows)

    def observe(self, tree, accepted_nodes: list[int]) -> None:
        pass


class CompiledSelection:
    """One compiled selection: a prefill, then speculation rounds over probes until the choice is
    complete. Between rounds the cache holds the prompt and the first ``cached`` output tokens."""

    def __init__(self, model, input_ids: torch.Tensor, grammar: ChoiceGrammar, guard: float,
                 curve: SelectionCosts):
        self.model, self.input_ids, self.grammar, self.guard, self.curve = model, input_ids, grammar, guard, curve
        self.trace = _Trace(grammar)
        self.counts = ProbeCounts()
        self.replay = SerialReplay(model, input_ids)
        self.proposer: ChoiceProposer | None = None
        self.cache, self.cached = None, 0

    # the round's three callbacks
    def decide(self, tree, node: int, logits: torch.Tensor | None) -> int | None:
        """The greedy constrained token at ``node`` (pushed onto the trace); None once complete."""
        path, trace = self.proposer.paths[node], self.trace
        if len(path) < len(trace.path):  # decided before this round: the probe's chain
            return trace.path[len(path)]
        if trace.complete:
            return None
        allowed = self.grammar.allowed(trace.state)
        if len(allowed) == 1:
            trace.push(allowed[0])
            return allowed[0]
        trace.push(*self.guarded(logits[0], allowed, exact=False))
        return trace.path[-1]

    def verify(self, tree, rows) -> torch.Tensor:
        """The probe on top of the cache; its rows stay appended for :meth:`commit`."""
        self.counts.forwards += 1
        past = self.input_ids.shape[1] + self.cached
        return tree_logits(self.model, self.cache, past, tree, rows, crop=False)  # (D, V)

    def commit(self, tree, walk) -> int:
        """Keep the accepted probe rows in the cache; decide the forced tokens after the walk."""
        keep_cache_rows(self.cache, self.input_ids.shape[1] + self.cached, torch.tensor(walk.nodes))
        self.cached += len(walk.nodes)
        self.trace.forced_tail()
        return len(walk.nodes)

    def guarded(self, logits: torch.Tensor, allowed: tuple[int, ...], exact: bool) -> tuple[int, float]:
        """Masked greedy choice; a float near-tie (margin below the guard) is re-decided the way serial
        decoding computes it, unless ``logits`` are already exactly serial decoding's."""
        token, margin = decide(logits, allowed)
        if margin < self.guard and not exact:
            token, margin = decide(self.replay.logits(self.trace.path), allowed)
            self.counts.forwards += self.replay.last_forwards
            self.counts.guarded += 1
        return token, margin

    # the selection
    def run(self, width, fuse, miss_stats: MissStats) -> ChoiceResult:
        start, trace, grammar = time.perf_counter(), self.trace, self.grammar
        trace.forced_tail()  # tokens forced before the first decision (the "[" of "[3]") ride with the prefill
        root_span = trace.path
        if not trace.complete and width in (None, "auto") and fuse:
            fused = self._fusable(root_span, fuse)
            if fused is not None:
                return self._run_fused(fused, start)
        prefill_start = time.perf_counter()
        root_logits, self.cache = prefill(self.model, self.input_ids, root_span)
        prefill_seconds = time.perf_counter() - prefill_start
        self.counts.forwards += 1
        self.cached = len(root_span)
        if trace.complete:
            return self._result(start)
        if width == "auto":
            self.curve.time_own_forwards(self.input_ids.shape[1] + self.cached, prefill_seconds, self._one_row)
        # Without a forced span the prefill's logits are exactly generate()'s first-step logits.
        trace.push(*self.guarded(root_logits, grammar.allowed(trace.state), exact=not root_span))
        k, b = len(grammar.choices), grammar.num_select
        self.proposer = ChoiceProposer(grammar, width, root_logits, self.curve, trace, self.counts,
                                       miss_rate=lambda w: miss_stats.rate(self.model, k, b, w),
                                       learn=lambda w, hits, missed: miss_stats.record(self.model, k, b, w, hits,
                                                                                       missed))
        while True:
            trace.forced_tail()
            if trace.complete:
                break
            run_round(self.proposer, trace.path, self.cached, self.verify, self.decide, self.commit)
        if self.proposer.width == "auto":  # asked for, or a full probe too large to build
            plans = self.proposer.plans
            return self._result(start, width=plans[0] if plans else None, extra={"plans": plans})
        return self._result(start)

    def _one_row(self) -> float:
        """Seconds of a one-row forward on top of the cache (cropped back afterwards)."""
        past = self.input_ids.shape[1] + self.cached
        start = time.perf_counter()
        tree_logits(self.model, self.cache, past, DraftTree.chain(int(self.input_ids[0, -1]), []), (0,))
        return time.perf_counter() - start

    def _fusable(self, root_span: tuple[int, ...], fuse) -> Probe | None:
        """The whole choice tree under the prompt's last token, when fusing it into the prefill is asked
        for (True) or pays under the cost curve ("auto", small trees only; with no curve known yet,
        trees of at most FIRST_USE_FUSE_ROWS tokens, which cost less than the probe forward they save
        on any device)."""
        cap = FULL_PROBE_MAX_ROWS + 1 if fuse is True else FUSE_MAX_ROWS  # bigger trees never pay in a prefill
        fused = build_probe(self.grammar, root_span, root_token=int(self.input_ids[0, -1]), max_rows=cap)
        if fused is None:
            return None
        if fuse is True:
            if fused.num_tokens <= FULL_PROBE_MAX_ROWS:
                return fused
            warnings.warn(f"compiled choice: the choice tree has more than {FULL_PROBE_MAX_ROWS} tokens; not fusing "
                          f"it into the prefill.", stacklevel=4)
            return None
        curve = self.curve.known()
        if curve is None:
            return fused if fused.num_tokens <= FIRST_USE_FUSE_ROWS else None
        pays = fused.num_tokens < FUSE_MAX_ROWS and _fusing_pays(curve, fused, fused.rows[root_span])
        return fused if pays else None

    def _run_fused(self, fused: Probe, start: float) -> ChoiceResult:
        """Everything in one forward: one round whose verify forward is the prefill itself (no cache,
        nothing to commit)."""
        self.proposer = FixedProbe(fused)

        def verify(tree, rows):
            self.counts.forwards += 1
            return fused_tree_logits(self.model, self.input_ids, tree, rows)  # (D, V)

        def commit(tree, walk) -> int:  # no cache to keep rows in; the forced tail is decided
            self.trace.forced_tail()
            return 0

        run_round(self.proposer, self.trace.path, 0, verify, self.decide, commit)
        # rounds counts separate probe forwards: the fused tree rides inside the prefill, so none
        c = self.counts
        c.probe_rows, c.probe_tokens = fused.num_decisions, fused.num_tokens - 1
        return self._result(start, width="fused")

    def _result(self, start: float, **kw) -> ChoiceResult:
        c = self.counts
        fallbacks = max(0, c.rounds - 1)  # probe rounds after the first: the greedy path left a probe
        setup = self.curve.seconds
        return self.trace.result("compiled", c.forwards, time.perf_counter() - start - setup,
                                 probe_rows=c.probe_rows, probe_tokens=c.probe_tokens, rounds=c.rounds,
                                 fallbacks=fallbacks, guarded=c.guarded, setup_seconds=setup, **kw)


@torch.no_grad()
def compiled_select(model, input_ids: torch.Tensor, grammar: ChoiceGrammar, guard_margin: float | None = None,
                    width: int | str | None = None, fuse: bool | str = "auto", *,
                    costs: VerifyCostModel | None = None, miss_stats: MissStats | None = None) -> ChoiceResult:
    """Root prefill + speculation rounds over probes (:func:`hf_treegen.speculation.run_round`).

    ``width``: keep only the ``width`` best not-yet-chosen labels (ranked by the root distribution) at
    each decision, and probe again from where the greedy path leaves them; None: the full probe, one
    round; "auto": the width with the lowest expected cost under the cost curve, planned again after a
    miss (chunked forwards when no probe pays). ``fuse``: put the whole choice tree into the prefill
    forward itself (one forward in all) when True, never when False, and when the cost curve says it
    is cheaper than a separate probe ("auto", full-width probes only). ``costs``: that curve (default:
    measured by :func:`hf_treegen.calibrate` at the prompt's context size); ``miss_stats``: what earlier
    calls saw of width-limited probes (default: this call's own)."""
    _check_prompt(model, input_ids, grammar)
    guard = DEFAULT_GUARD.get(model.dtype, 1e-3) if guard_margin is None else guard_margin
    # measured (or read from the calibration cache) only if a plan needs it, once per call
    curve = SelectionCosts(model, input_ids.shape[1], costs)
    selection = CompiledSelection(model, input_ids, grammar, guard, curve)
    return selection.run(width, fuse, MissStats() if miss_stats is None else miss_stats)


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


def _auto_width(grammar, path: tuple[int, ...], state: State, root_logits, cost: VerifyCostModel, cached: int,
                observed):
    """(width, first-round probe) or (CHUNKED, None) for the rest of the output, per the cost curve."""
    from .width import choose_width

    ranked, probs = label_ranking(grammar, root_logits)
    return choose_width(grammar, path, state, lambda w: unary_width_filter(grammar, root_logits, w),
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
