"""Measured machine costs for cost-aware decoding, owned by the caller.

``tree_strategy="auto"`` chooses, round by round, between a draft tree and a plain one-token step by
comparing expected tokens per second, so it needs what a round costs on *this* machine: the target's
forward time by number of rows, one drafter forward, and the tree build per node. A
:class:`CostProfile` holds those numbers. It is measured only when asked:

* ``calibrate(model, drafter)`` measures them fully (a visible progress bar, tens of seconds on a
  2-core CPU) and caches the profile as JSON under :func:`calibration_dir`
  (``$HF_TREEGEN_CACHE/calibration``); the next call with the same model, drafter shape, device,
  dtype and thread count reads that file.
  ``clear_calibration_cache()`` (or ``hf-treegen calibrate --clear``) deletes it.
* ``calibrate(..., quick=True)`` is what a call that needs a profile runs when none is cached: a
  coarser grid of sizes in as many passes as fit in about ``FIRST_USE_SECONDS``, so a first call is
  not a wait. Its profile is cached too, marked quick; a full ``calibrate`` replaces it.
* ``generate(..., tree_costs=profile)`` uses a profile the caller made (tests pin one, so no timing
  ever decides a test). Without ``tree_costs``, the cost-aware strategies (``auto``, ``adaptive``,
  ``cond_adaptive``) call ``calibrate(..., quick=True)``; the other strategies never measure anything.
* A batch of B sequences plans on ``calibrate(..., batch_size=B)``: what each sequence pays of a
  forward over every sequence's tree, measured on top of the one-sequence profile and cached per B.
* Compiled choice with ``width="auto"`` (and its default ``fuse="auto"``) plans probes on the verify
  curve of ``calibrate(model, context=..., quick=True)``, measured at the prompt's context size.

A profile only decides tree *shapes* and probe widths: verification keeps the target's own choices,
so output tokens never depend on it. With a fixed profile, two identical calls build identical trees.
This is the only place the package times a model.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from .cache_dir import cache_dir
from .costs import CostProfile, VerifyCostModel
from .defaults import FIRST_USE_SECONDS
from .machine_load import OtherProcesses, busy_warning
from .target import (FeatureTap, TreeVerifier, attention_implementation, decode_prefill, default_linears,
                     grouped_tree_attention, keep_cache_rows, new_cache, packing_for, packed_linears)
from .tree import DraftTree

DEFAULT_MAX_ROWS = 65  # a 64-node tree plus its root: far past what pays on a CPU
DEFAULT_CONTEXT = 128  # tokens already in the cache when a forward is timed
OVERHEAD_ROUNDS = 12  # draft rounds and plain steps each timed end to end for round_s and step_s (half if quick)
# (model, drafter, profile, random ids (1, T), rounds) -> (round_s, step_s); the decode loop that runs the
# rounds is a layer above this module, so the caller hands the timer in (hf_treegen.calibrate does)
FixedCostTimer = Callable[..., tuple[float, float]]
# timed passes (after one warm-up pass); a forward's cost is its fastest pass. On a shared machine other
# work only ever adds time, so the fastest of a few passes is the stable estimate of what the forward
# itself costs: on a 2-core VM, eight calibrations in a row spread by up to 1.30x at one size with medians
# of 3 passes and by at most 1.15x with the fastest of 5 (benchmarks/calibration_spread.py)
MEASURE_REPEATS = 5
FIRST_USE_DEFAULT_ROWS = 2  # a quick calibration times the default kernels up to this many rows only


# --------------------------------------------------------------------------------------------------
# the cache

def calibration_dir() -> Path:
    """Where measured profiles are kept: ``$HF_TREEGEN_CACHE/calibration`` (default ~/.cache/hf_treegen)."""
    return cache_dir("calibration")


def clear_calibration_cache() -> list[Path]:
    """Delete every cached profile; returns the deleted files."""
    removed = sorted(calibration_dir().glob("*.json"))
    for path in removed:
        path.unlink()
    legacy = calibration_dir().parent / "cost_models"  # where releases before 0.2 kept verify curves
    removed += sorted(legacy.glob("*.json"))
    shutil.rmtree(legacy, ignore_errors=True)
    return removed


def uses_packing(model, packed: bool | None = None) -> bool:
    """Whether a profile is measured on packed kernels: ``packed=None`` means as tree decoding runs
    (packed wherever packing applies); compiled choice, which runs the default kernels, passes False."""
    return (packed is None or bool(packed)) and packing_for(model) is not None


def placement_tag(model) -> str:
    """Where a target dispatched with a ``device_map`` keeps its modules, e.g. ``"map-cpu26-disk4"``
    ("" for a model on one device): layers offloaded to disk or spread over devices cost a forward
    very differently from the same model in one place, so their profiles are kept apart."""
    counts = Counter(str(where) for where in (getattr(model, "hf_device_map", None) or {}).values())
    if len(counts) < 2:
        return ""
    return "map-" + "-".join(f"{where}{n}" for where, n in sorted(counts.items()))


def profile_key(model, drafter=None, context: int = DEFAULT_CONTEXT, packed: bool | None = None) -> str:
    """What a profile depends on: the target's shape, the drafter's shape and dtype, device, dtype,
    threads, the kernels (``packed``, see :func:`uses_packing`), a split target's placement
    (:func:`placement_tag`) and the context the forwards were timed
    at."""
    cfg = model.config
    device = model.get_input_embeddings().weight.device
    parts = [cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size, str(model.dtype),
             device.type, attention_implementation(model), f"t{torch.get_num_threads()}"]
    if uses_packing(model, packed):
        parts.append("packed")
    placement = placement_tag(model)
    if placement:
        parts.append(placement)
    if context != DEFAULT_CONTEXT:
        parts.append(f"ctx{context}")
    if drafter is not None:
        d = drafter.config
        vocab = d.vocab_size if drafter.draft_vocab is None else drafter.draft_vocab.numel()
        parts += ["drafter", d.num_hidden_layers, d.block_size, d.projector_type or d.family, vocab,
                  str(drafter.dtype)]
    return "-".join(str(p) for p in parts).replace("/", "_").replace(".", "_")


# --------------------------------------------------------------------------------------------------
# measuring

def verify_sizes(max_rows: int) -> list[int]:
    """The forward widths a verify curve is measured at: every size up to 9 rows (the trees that pay on
    a CPU live there, and small-batch kernels change cost unevenly between neighbouring sizes), then a
    coarser grid up to ``max_rows``."""
    grid = set(range(1, 10)) | {12, 16, 24, 32, 48, 64, 96, 128, 192, 256, max_rows}
    return sorted(size for size in grid if 1 <= size <= max_rows)


def first_use_sizes(max_rows: int) -> list[int]:
    """The sizes a quick calibration may time, most useful first (``VerifyTimer.warm_up`` keeps the
    ones it reaches within its time): a spread over the small trees that pay on a CPU, then the sizes
    between them, then wider ones up to ``max_rows``."""
    order = [1, 4, 16, 2, 8, 32, 3, 6, 12]
    size = 64
    while size < max_rows:
        order.append(size)
        size *= 2
    order.append(max_rows)
    return list(dict.fromkeys(rows for rows in order if 1 <= rows <= max_rows))


def random_ids(vocab_size: int, length: int, device) -> torch.Tensor:
    """(1, length) token ids to time forwards on, from a private generator: measuring must not advance
    the global RNG, or a seeded sampling call that calibrates first would sample other tokens than the
    same call once the profile is cached."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (1, length), generator=generator).to(device)


@dataclass
class TimingContext:
    """One prefill of random tokens that every timer of a measurement shares (a prefill costs more
    than most timed forwards): the cache of the first ``context`` tokens, which each timed forward
    leaves as it found it, the call's verifier, and with drafter taps the prefilled rows' features."""

    ids: torch.Tensor  # (1, context + widest): the context, then the tokens timed trees are made of
    context: int
    cache: object
    verify: TreeVerifier
    features: torch.Tensor | None = None  # (context, k*H) at the drafter's tapped layers


def timing_context(model, context: int, widest: int, taps: Sequence[int] | None = None) -> TimingContext:
    """Prefill ``context`` random tokens (reading ``taps`` on the way) for trees up to ``widest`` rows."""
    device = model.get_input_embeddings().weight.device
    ids = random_ids(model.config.vocab_size, context + widest, device)
    cache = new_cache(model)
    with FeatureTap(model, taps) if taps else contextlib.nullcontext() as tap:
        _, verify = decode_prefill(model, ids[:, :context], cache)
        features = tap.take() if taps else None
    return TimingContext(ids, context, cache, verify, features)


class VerifyTimer:
    """Times one chain-masked verify forward (as decoding runs it) per size in ``sizes``, on a throwaway
    cache of ``context`` random tokens; :meth:`timed_pass` runs every size once and, with ``keep``,
    records the seconds in ``runs`` (``benchmarks/verify_kernels.py`` times kernel sets with it too).
    ``head_shortcut``: whether the verifier may apply the LM head itself (see ``decode_prefill``).
    ``shared``: a :class:`TimingContext` to time on instead of prefilling one of its own."""

    def __init__(self, model, sizes: Sequence[int], context: int, head_shortcut: bool = True,
                 shared: TimingContext | None = None):
        self.device = model.get_input_embeddings().weight.device
        self.sizes = sorted(sizes)
        shared = shared or timing_context(model, context, self.sizes[-1])
        context = self.context = shared.context  # the shared prefill decides it
        self.cache = shared.cache
        self.verify = shared.verify if head_shortcut else TreeVerifier(model, None)
        ids = shared.ids
        self.trees = {rows: DraftTree.chain(int(ids[0, context]), ids[0, context + 1: context + rows].tolist())
                      for rows in self.sizes}
        self.runs: dict[int, list[float]] = {rows: [] for rows in self.sizes}

    def timed_pass(self, keep: bool) -> None:
        for rows in self.sizes:
            elapsed = self._run(rows)
            if keep:
                self.runs[rows].append(elapsed)

    def warm_up(self, budget_s: float, order: Sequence[int]) -> None:
        """An untimed pass over the sizes in ``order`` that stops once ``budget_s`` is spent: the sizes
        it did not reach are dropped (wide forwards on a slow machine)."""
        started, reached = time.perf_counter(), []
        for rows in order:
            if reached and time.perf_counter() - started > budget_s:
                break
            self._run(rows)
            reached.append(rows)
        self.sizes = sorted(reached)
        self.runs = {rows: [] for rows in self.sizes}

    def _run(self, rows: int) -> float:
        """Seconds of one verify forward of ``rows`` rows; the cache is then cut back to the context."""
        t0 = time.perf_counter()
        self.verify(self.trees[rows], self.context, self.cache)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - t0
        keep_cache_rows(self.cache, self.context, torch.zeros(0, dtype=torch.long))
        return elapsed

    def medians(self) -> dict[int, float]:
        """Median seconds per size over the kept passes (what a busy machine typically pays)."""
        return {rows: statistics.median(self.runs[rows]) for rows in self.sizes}

    def fastest(self) -> dict[int, float]:
        """Fastest seconds per size over the kept passes (what the forward itself costs; see
        MEASURE_REPEATS): the numbers a profile keeps."""
        return {rows: min(self.runs[rows]) for rows in self.sizes}

    def curve(self) -> VerifyCostModel:
        fastest = self.fastest()
        return VerifyCostModel.from_measurements(self.sizes, [fastest[r] for r in self.sizes])


class _DraftTimer:
    """Times draft rounds and tree builds on a random context; :meth:`timed_rounds` runs a few.

    A timed draft is what a decoding round pays before its build: the drafter context of the tokens
    the previous round committed (``COMMITTED_PER_ROUND`` of them, projected lazily by the session)
    plus one drafter forward. Timing the forward alone left about a millisecond per round out of the
    cost model on a CPU, enough to tip ``auto`` towards drafting where it barely pays."""

    COMMITTED_PER_ROUND = 2  # tokens a round commits on a typical CPU tree (tau about 2)

    def __init__(self, model, drafter, builder, shared: TimingContext):
        self.builder = builder
        self.device = model.get_input_embeddings().weight.device
        context = shared.context
        self.ids = shared.ids[:, :context]
        self.features = shared.features  # (context, k*H): reused as the rows later rounds commit
        self.session = drafter.new_session()
        self.session.extend(self.features, torch.arange(context))
        self.session.project_pending()  # the prompt's context: no timed round should pay for it
        self.draft: list[float] = []
        self.build: list[float] = []  # per drafted node
        self.done = 0

    def commit_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The features (n, k*H) and positions (n,) of one round's committed tokens."""
        n, start = self.COMMITTED_PER_ROUND, self.session.length
        rows = torch.arange(start, start + n) % self.features.shape[0]
        return self.features[rows.to(self.features.device)], torch.arange(start, start + n)

    def timed_rounds(self, rounds: int, keep: bool) -> None:
        for _ in range(rounds):
            anchor = int(self.ids[0, self.done % self.ids.shape[1]])
            self.done += 1
            features, positions = self.commit_rows()
            t0 = time.perf_counter()
            self.session.extend(features, positions)
            block = self.session.draft(anchor, self.session.length)
            self._wait()
            t1 = time.perf_counter()
            tree = self.builder(block, anchor)
            self._wait()
            t2 = time.perf_counter()
            if keep:
                self.draft.append(t1 - t0)
                self.build.append((t2 - t1) / max(tree.num_drafted, 1))

    def _wait(self) -> None:
        """CUDA queues work: the clock is read once the device has done it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def costs(self) -> tuple[float, float]:
        return statistics.median(self.draft), statistics.median(self.build)


def mixed_seconds(default_s: dict[int, float], packed_s: dict[int, float], threshold: int) -> dict[int, float]:
    """Seconds by rows when forwards of fewer than ``threshold`` rows take the default kernels
    (``default_s``) and the others the packed ones (``packed_s``)."""
    return {rows: default_s[rows] if rows < threshold else seconds for rows, seconds in packed_s.items()}


def packed_threshold(default_s: dict[int, float], packed_s: dict[int, float]) -> int:
    """The ``min_rows`` for :func:`~hf_treegen.target.packed_linears` that makes the measured forwards
    cheapest in total (see :func:`mixed_seconds`). 1 packs everything; one past the widest measured
    size packs nothing that was measured. Ties go to the smaller threshold."""
    sizes = sorted(packed_s)
    # only thresholds below which every size was also timed on the default kernels
    candidates = [t for t in [*sizes, sizes[-1] + 1] if all(rows in default_s for rows in sizes if rows < t)]
    return min(candidates, key=lambda t: sum(mixed_seconds(default_s, packed_s, t).values()))


def kernel_plan(default_s: dict[bool, dict[int, float]], packed_s: dict[int, float]) -> tuple[int, bool]:
    """``(packed_from_rows, head_shortcut)`` making the measured forwards cheapest in total.

    ``default_s`` holds the default-kernel seconds by rows with the LM-head shortcut (key True) and,
    where it was timed, with the model's own head (key False). Which head wins for a few rows depends
    on the CPU's BLAS: on one AVX2 CPU the shortcut was 2-4x faster, on one AMX CPU twice as slow. A tie
    keeps the shortcut."""
    thresholds = {shortcut: packed_threshold(seconds, packed_s) for shortcut, seconds in default_s.items()}

    def total(shortcut: bool) -> float:
        return sum(mixed_seconds(default_s[shortcut], packed_s, thresholds[shortcut]).values())

    shortcut = min(sorted(default_s, reverse=True), key=total)  # True first: a tie keeps the shortcut
    return thresholds[shortcut], shortcut


@torch.no_grad()
def measure_profile(model, drafter=None, builder=None, *, max_rows: int = DEFAULT_MAX_ROWS,
                    context: int = DEFAULT_CONTEXT, repeats: int = 3, draft_rounds: int = 4,
                    on_pass=None, packed: bool | None = None, quick: bool = False,
                    fixed_costs: FixedCostTimer | None = None) -> CostProfile:
    """Measure a :class:`CostProfile`: the verify curve, and with a ``drafter`` one drafter forward
    and the build per node of ``builder`` (default: what ``auto`` builds for this drafter), and with
    ``fixed_costs`` too a draft round's and a plain step's fixed costs (``round_s``, ``step_s``).

    Everything is timed in interleaved passes after one warm-up pass: each pass runs every verify size
    once and ``draft_rounds`` draft rounds. A verify size costs its fastest of the ``repeats`` timed
    passes (other work on the machine only adds time; see MEASURE_REPEATS), a draft round and a build
    the median of all timed rounds (they take a few milliseconds each, and some rounds genuinely cost
    more than others, e.g. those that project more drafter context). ``on_pass()`` is called after
    each pass (a progress bar). ``packed``: the kernels to time (see :func:`uses_packing`). Where
    packing applies, each pass times the verify sizes on the packed kernels and on the default ones,
    the latter with the LM-head shortcut and with the model's own head, and the profile keeps the
    cheapest mix (:func:`kernel_plan`): on some CPUs the default kernels win for one or two rows.

    ``quick``: time the sizes of :func:`first_use_sizes` that a warm-up reaches in a quarter of
    ``FIRST_USE_SECONDS`` (the default kernels up to ``FIRST_USE_DEFAULT_ROWS`` rows), and stop after
    the first timed pass that leaves too little of ``FIRST_USE_SECONDS`` for another. Wider forwards
    are then priced by extending the curve linearly."""
    packed = uses_packing(model, packed)
    sizes = sorted(first_use_sizes(max_rows)) if quick else verify_sizes(max_rows)
    started = time.perf_counter()
    # the kernels and the attention tree decoding runs the forwards on (see tree_decoding)
    with packed_linears(model, drafter) if packed else contextlib.nullcontext(), grouped_tree_attention(model):
        shared = timing_context(model, context, sizes[-1], drafter.config.target_layer_ids if drafter else None)
        verify = VerifyTimer(model, sizes, context, shared=shared)
        if quick:
            verify.warm_up(FIRST_USE_SECONDS / 4, first_use_sizes(max_rows))
            sizes = verify.sizes
        default_sizes = [rows for rows in sizes if rows <= FIRST_USE_DEFAULT_ROWS] if quick else sizes
        unpacked: dict[bool, VerifyTimer] = {}  # head_shortcut -> the default kernels' timer
        if packed:
            unpacked[True] = VerifyTimer(model, default_sizes, context, shared=shared)
            if shared.verify.head is not None:  # without an exact shortcut both heads are one
                unpacked[False] = VerifyTimer(model, default_sizes, context, head_shortcut=False, shared=shared)
        draft = _draft_timer(model, drafter, builder, shared)
        for timed_pass in range(repeats + 1):
            pass_started = time.perf_counter()
            keep = timed_pass > 0  # pass 0 warms every kernel up (a quick measurement warmed its sizes up)
            if keep or not quick:
                verify.timed_pass(keep)
            for timer in unpacked.values():
                with default_linears(model):
                    timer.timed_pass(keep)
            if draft is not None:
                draft.timed_rounds(draft_rounds, keep)
            if on_pass is not None:
                on_pass()
            now = time.perf_counter()
            if quick and keep and now - started + (now - pass_started) > FIRST_USE_SECONDS:
                break
    draft_s, build_s = draft.costs() if draft is not None else (0.0, 0.0)
    if not unpacked:
        profile = CostProfile(verify.curve(), draft_s, build_s, quick=quick)
    else:
        packed_s = verify.fastest()
        default_s = {shortcut: timer.fastest() for shortcut, timer in unpacked.items()}
        threshold, shortcut = kernel_plan(default_s, packed_s)
        profile = CostProfile.from_verify_seconds(mixed_seconds(default_s[shortcut], packed_s, threshold), draft_s,
                                                  build_s, packed_from_rows=threshold, head_shortcut=shortcut,
                                                  quick=quick)
    if drafter is None or fixed_costs is None:
        return profile
    rounds = OVERHEAD_ROUNDS // 2 if quick else OVERHEAD_ROUNDS
    round_s, step_s = fixed_costs(model, drafter, profile, shared.ids, rounds)
    return replace(profile, round_s=round_s, step_s=step_s)


def _draft_timer(model, drafter, builder, shared: TimingContext) -> "_DraftTimer | None":
    """The draft-round timer for ``drafter`` (None without one), timing ``builder`` or auto's default."""
    if drafter is None:
        return None
    if builder is None:
        from .builders.auto import default_auto_builder

        builder = default_auto_builder(drafter, model)
    return _DraftTimer(model, drafter, builder, shared)


def measure_verify_cost(model, max_rows: int, context: int = DEFAULT_CONTEXT, repeats: int = 3,
                        packed: bool | None = None) -> VerifyCostModel:
    """The verify curve alone (see :func:`measure_profile`)."""
    return measure_profile(model, max_rows=max_rows, context=context, repeats=repeats, packed=packed).verify


BATCH_ROWS = (1, 2, 4, 8, 16)  # rows per sequence a batch's verify curve is timed at


@torch.no_grad()
def measure_batch_profile(model, drafter, single: CostProfile, batch: int, *, context: int = DEFAULT_CONTEXT,
                          repeats: int = 3, on_pass=None) -> CostProfile:
    """What each of ``batch`` sequences decoded together pays, measured: a verify forward over every
    sequence's tree of n rows (their own contexts, the 4-D mask batched decoding uses) at n in
    BATCH_ROWS, and one drafter forward over every sequence's block, each divided by ``batch``. The
    kernels and the build cost per node are ``single``'s (the one-sequence profile)."""
    from .drafters.dflash import DraftSession
    from .target import crop_to, new_cache, with_cache
    from .target.batch import batch_tree_inputs

    device = model.get_input_embeddings().weight.device
    widest = BATCH_ROWS[-1]
    ids = random_ids(model.config.vocab_size, batch * (context + widest), device).reshape(batch, -1)
    cache, valid = new_cache(model), torch.ones(batch, context, dtype=torch.bool, device=device)
    impl = attention_implementation(model)
    taps = drafter.config.target_layer_ids if drafter is not None else []
    runs: dict[int, list[float]] = {rows: [] for rows in BATCH_ROWS}
    drafts: list[float] = []
    with packed_linears(model, min_rows=single.packed_from_rows), packed_linears(drafter), \
            grouped_tree_attention(model), FeatureTap(model, taps) as tap:
        model(input_ids=ids[:, :context], **with_cache(cache), use_cache=True, logits_to_keep=1)
        features = tap.take_all() if taps else None  # (B, context, k*H)
        trees = {rows: [DraftTree.chain(int(r[context]), r[context + 1: context + rows].tolist()) for r in ids]
                 for rows in BATCH_ROWS}
        sessions = [drafter.new_session() for _ in range(batch)] if drafter is not None else []
        for session, rows in zip(sessions, features if features is not None else []):
            session.extend(rows, torch.arange(context))
        for timed_pass in range(repeats + 1):  # pass 0 warms the kernels up
            for rows in BATCH_ROWS:
                inputs = batch_tree_inputs(trees[rows], valid, [context] * batch, impl, model.dtype, device)
                runs[rows].append(_timed(lambda: model(**inputs, **with_cache(cache), use_cache=True), device))
                crop_to(cache, context)
            if sessions:
                anchors = [int(r[context]) for r in ids]
                drafts.append(_timed(lambda: DraftSession.draft_all(sessions, anchors, [context] * batch), device))
            tap.clear()
            if on_pass is not None:
                on_pass()
    fastest = [min(runs[rows][1:]) / batch for rows in BATCH_ROWS]
    draft_s = statistics.median(drafts[1:]) / batch if drafts else 0.0
    return CostProfile(VerifyCostModel.from_measurements(BATCH_ROWS, fastest), draft_s, single.build_s_per_node,
                       single.packed_from_rows, single.head_shortcut, quick=True, round_s=single.round_s / batch,
                       step_s=single.step_s / batch)


def _timed(fn, device) -> float:
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def cached_profile(model, drafter=None, *, max_rows: int = DEFAULT_MAX_ROWS, context: int = DEFAULT_CONTEXT,
                   packed: bool | None = None, quick: bool = True) -> CostProfile | None:
    """The cached profile a :func:`calibrate` call with these arguments would return without measuring
    anything, or None (nothing cached, a broken file, or one that does not serve the call)."""
    path = calibration_dir() / f"{profile_key(model, drafter, context, packed)}.json"
    return _serving_profile(path, max_rows, quick, warn=False)


def _serving_profile(path: Path, max_rows: int, quick: bool, warn: bool) -> CostProfile | None:
    """The profile saved at ``path`` if it serves a call for ``max_rows`` rows (``quick``: a brief
    measurement will do); ``warn``: say so when the file is broken or outdated."""
    if not path.is_file():
        return None
    try:
        profile = CostProfile.load(path)
    except ValueError as err:
        if warn:
            warnings.warn(f"{err} Measuring again.", stacklevel=3)
        return None
    fits = profile.max_rows >= max_rows  # a quick profile may stop short of max_rows by design
    return profile if (fits and not profile.quick) or (quick and (fits or profile.quick)) else None


def calibrate(model, drafter=None, *, builder=None, max_rows: int = DEFAULT_MAX_ROWS,
              context: int = DEFAULT_CONTEXT, use_cache: bool = True, progress: bool = True,
              packed: bool | None = None, quick: bool = False,
              first_use: VerifyCostModel | None = None, batch_size: int = 1,
              fixed_costs: FixedCostTimer | None = None) -> CostProfile:
    """Measure (or read from the cache) the :class:`CostProfile` of ``model`` with ``drafter``.

    ``builder``: the tree builder whose build time to measure (default: what ``auto`` uses for this
    drafter). ``max_rows``: the widest verify forward to time. ``context``: tokens in the cache while
    timing. ``use_cache=False`` measures afresh and overwrites the cached file. ``packed``: time the
    packed CPU kernels tree decoding runs (the default, where they apply) or, with False, the default
    kernels compiled choice runs. ``quick``: where nothing is cached, measure for about
    ``FIRST_USE_SECONDS`` only (what decoding and compiled choice do on first use); a cached quick
    profile serves quick calls, and a full call measures again over it. ``first_use``: a verify curve
    the caller timed from its own forwards; where nothing is cached, a quick call caches it (marked
    quick) instead of measuring. ``batch_size`` above 1: what each of that many sequences decoded
    together pays (:func:`measure_batch_profile`, on top of the one-sequence profile), cached per size.
    """
    if batch_size > 1:
        return _batch_profile(model, drafter, batch_size, context=context, use_cache=use_cache, progress=progress,
                              packed=packed, quick=quick, fixed_costs=fixed_costs)
    path = calibration_dir() / f"{profile_key(model, drafter, context, packed)}.json"
    if use_cache:
        profile = _serving_profile(path, max_rows, quick, warn=True)
        if profile is not None:
            return profile
    if quick and first_use is not None:
        profile = CostProfile(first_use, quick=True)
        profile.save(path)
        if progress:
            print(f"hf_treegen: planned from this call's own forwards at {context} tokens of context (cached in "
                  f"{path}; `hf-treegen calibrate --clear` deletes it)", file=sys.stderr)
        return profile
    passes = MEASURE_REPEATS + 1
    if quick:
        message = (f"hf_treegen: measuring decode costs briefly (about {FIRST_USE_SECONDS:.0f} s, cached in {path}; "
                   f"`hf-treegen calibrate` measures them fully)")
    else:
        message = f"hf_treegen: measuring decode costs (cached in {path})"
    bar = _Announce(progress, message, passes)
    with OtherProcesses() as others:
        profile = measure_profile(model, drafter, builder, max_rows=max_rows, context=context,
                                  repeats=MEASURE_REPEATS, on_pass=bar.step, packed=packed, quick=quick,
                                  fixed_costs=fixed_costs)
    profile.save(path)
    bar.close()
    _warn_if_busy(others.share, path)
    return profile


def _batch_profile(model, drafter, batch: int, *, context: int, use_cache: bool, progress: bool,
                   packed: bool | None, quick: bool, fixed_costs: FixedCostTimer | None) -> CostProfile:
    """:func:`calibrate` for ``batch`` sequences at once: the cached batch profile, or one measured now."""
    path = calibration_dir() / f"{profile_key(model, drafter, context, packed)}-batch{batch}.json"
    if use_cache and path.is_file():
        try:
            return CostProfile.load(path)
        except ValueError as err:
            warnings.warn(f"{err} Measuring again.", stacklevel=3)
    single = calibrate(model, drafter, context=context, use_cache=use_cache, progress=progress, packed=packed,
                       quick=quick, fixed_costs=fixed_costs)
    bar = _Announce(progress, f"hf_treegen: measuring the costs of a batch of {batch} (cached in {path})",
                    MEASURE_REPEATS + 1)
    with OtherProcesses() as others:
        profile = measure_batch_profile(model, drafter, single, batch, context=context, repeats=MEASURE_REPEATS,
                                        on_pass=bar.step)
    profile.save(path)
    bar.close()
    _warn_if_busy(others.share, path)
    return profile


def _warn_if_busy(share: float | None, path: Path) -> None:
    message = busy_warning(share, f"the cost profile {path}")
    if message is not None:
        warnings.warn(message, stacklevel=3)


class _Announce:
    """A progress bar over the measuring passes, shown on stderr when ``progress``."""

    def __init__(self, progress: bool, message: str, total: int):
        self.bar = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=message, unit="pass", leave=False)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def profile_summary(profile: CostProfile) -> dict:
    """Milliseconds, for printing: one step, verify at a few sizes, draft, build per node."""
    ms = {f"verify_{r}_rows_ms": round(1000 * profile.verify.seconds_for(r), 2) for r in (1, 5, 9, 17, 33)}
    return {"step_ms": round(1000 * profile.step_seconds(), 2), **ms, "draft_ms": round(1000 * profile.draft_s, 2),
            "build_ms_per_node": round(1000 * profile.build_s_per_node, 3), "round_ms": round(1000 * profile.round_s, 2),
            "step_overhead_ms": round(1000 * profile.step_s, 2),
            "packed_from_rows": profile.packed_from_rows,
            "head_shortcut": profile.head_shortcut, "quick": profile.quick}


__all__ = ["CostProfile", "cached_profile", "calibrate", "first_use_sizes", "measure_profile", "packed_threshold", "kernel_plan", "uses_packing", "measure_verify_cost", "verify_sizes", "VerifyTimer", "calibration_dir", "clear_calibration_cache", "profile_key",
           "profile_summary"]
