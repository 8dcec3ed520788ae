"""Measured machine costs for cost-aware decoding, owned by the caller.

``tree_strategy="auto"`` chooses, round by round, between a draft tree and a plain one-token step by
comparing expected tokens per second, so it needs what a round costs on *this* machine: the target's
forward time by number of rows, one drafter forward, and the tree build per node. A
:class:`CostProfile` holds those numbers. It is measured only when asked:

* ``calibrate(model, drafter)`` measures them (a visible progress bar, 10-30 s on a CPU) and caches
  the profile as JSON under :func:`calibration_dir` (``$HF_TREEGEN_CACHE/calibration``); the next
  call with the same model, drafter shape, device, dtype and thread count reads that file.
  ``clear_calibration_cache()`` (or ``hf-treegen calibrate --clear``) deletes it.
* ``generate(..., tree_costs=profile)`` uses a profile the caller made (tests pin one, so no timing
  ever decides a test). Without ``tree_costs``, the cost-aware strategies (``auto``, ``adaptive``,
  ``cond_adaptive``) call ``calibrate``; the other strategies never measure anything.
* Compiled choice with ``width="auto"`` (and its default ``fuse="auto"``) plans probes on the verify
  curve of ``calibrate(model, context=...)``, measured at the prompt's context size.

A profile only decides tree *shapes* and probe widths: verification keeps the target's own choices,
so output tokens never depend on it. With a fixed profile, two identical calls build identical trees.
This is the only place the package times a model.
"""

from __future__ import annotations

import shutil
import statistics
import time
import warnings
from pathlib import Path

import torch

from .cache_dir import cache_dir
from .costs import CostProfile, VerifyCostModel
from .target import FeatureTap, attention_implementation, decode_prefill, keep_cache_rows, new_cache
from .tree import DraftTree

DEFAULT_MAX_ROWS = 65  # a 64-node tree plus its root: far past what pays on a CPU
DEFAULT_CONTEXT = 128  # tokens already in the cache when a forward is timed


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


def profile_key(model, drafter=None, context: int = DEFAULT_CONTEXT) -> str:
    """What a profile depends on: the target's shape, the drafter's shape, device, dtype, threads and
    the context the forwards were timed at."""
    cfg = model.config
    device = model.get_input_embeddings().weight.device
    parts = [cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size, str(model.dtype),
             device.type, attention_implementation(model), f"t{torch.get_num_threads()}"]
    if context != DEFAULT_CONTEXT:
        parts.append(f"ctx{context}")
    if drafter is not None:
        d = drafter.config
        vocab = d.vocab_size if drafter.draft_vocab is None else drafter.draft_vocab.numel()
        parts += ["drafter", d.num_hidden_layers, d.block_size, d.projector_type or "dflash", vocab]
    return "-".join(str(p) for p in parts).replace("/", "_").replace(".", "_")


# --------------------------------------------------------------------------------------------------
# measuring

def verify_sizes(max_rows: int) -> list[int]:
    """The forward widths a verify curve is measured at: every size up to 9 rows (the trees that pay on
    a CPU live there, and small-batch kernels change cost unevenly between neighbouring sizes), then a
    coarser grid up to ``max_rows``."""
    grid = set(range(1, 10)) | {12, 16, 24, 32, 48, 64, 96, 128, 192, 256, max_rows}
    return sorted(size for size in grid if 1 <= size <= max_rows)


@torch.no_grad()
def measure_verify_cost(model, max_rows: int, context: int = DEFAULT_CONTEXT, repeats: int = 3) -> VerifyCostModel:
    """Time one chain-masked verify forward (as decoding runs it) per size on a throwaway cache of
    ``context`` random tokens.

    The sizes are timed in interleaved passes (every size once per pass, after one warm-up pass), so a
    burst of other work on the machine spreads over all sizes instead of inflating a few neighbouring
    ones; each size keeps the median of its ``repeats`` runs."""
    device = model.get_input_embeddings().weight.device
    cache = new_cache(model)
    ids = torch.randint(0, model.config.vocab_size, (1, context + max_rows), device=device)
    _, verify = decode_prefill(model, ids[:, :context], cache)
    sizes = verify_sizes(max_rows)
    trees = {rows: DraftTree.chain(int(ids[0, context]), ids[0, context + 1: context + rows].tolist())
             for rows in sizes}
    runs: dict[int, list[float]] = {rows: [] for rows in sizes}
    for timed_pass in range(repeats + 1):
        for rows in sizes:
            t0 = time.perf_counter()
            verify(trees[rows], context, cache)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - t0
            keep_cache_rows(cache, context, torch.zeros(0, dtype=torch.long))
            if timed_pass:  # pass 0 warms every kernel up
                runs[rows].append(elapsed)
    return VerifyCostModel.from_measurements(sizes, [statistics.median(runs[rows]) for rows in sizes])


@torch.no_grad()
def measure_draft_costs(model, drafter, builder, context: int = 128, rounds: int = 12) -> tuple[float, float]:
    """Median seconds of one drafter forward and of one tree build per node, on a random context."""
    device = model.get_input_embeddings().weight.device
    ids = torch.randint(0, model.config.vocab_size, (1, context), device=device)
    with FeatureTap(model, drafter.config.target_layer_ids) as tap:
        decode_prefill(model, ids, new_cache(model))
        session = drafter.new_session()
        session.extend(tap.take(), torch.arange(context))
    draft, build = [], []
    for i in range(rounds + 1):
        anchor = int(ids[0, i % context])
        t0 = time.perf_counter()
        block = session.draft(anchor, context)
        t1 = time.perf_counter()
        tree = builder(block, anchor)
        t2 = time.perf_counter()
        if i:  # the first round warms up
            draft.append(t1 - t0)
            build.append((t2 - t1) / max(tree.num_drafted, 1))
    return statistics.median(draft), statistics.median(build)


def calibrate(model, drafter=None, *, builder=None, max_rows: int = DEFAULT_MAX_ROWS,
              context: int = DEFAULT_CONTEXT, use_cache: bool = True, progress: bool = True) -> CostProfile:
    """Measure (or read from the cache) the :class:`CostProfile` of ``model`` with ``drafter``.

    ``builder``: the tree builder whose build time to measure (default: what ``auto`` uses for this
    drafter). ``max_rows``: the widest verify forward to time. ``context``: tokens in the cache while
    timing. ``use_cache=False`` measures afresh and overwrites the cached file.
    """
    path = calibration_dir() / f"{profile_key(model, drafter, context)}.json"
    if use_cache and path.is_file():
        try:
            profile = CostProfile.load(path)
        except ValueError as err:  # a broken or outdated file: say so, then measure again over it
            warnings.warn(f"{err} Measuring again.", stacklevel=2)
        else:
            if profile.max_rows >= max_rows:
                return profile
    bar = _Announce(progress, f"hf_treegen: measuring decode costs once (cached in {path})")
    verify = measure_verify_cost(model, max_rows, context)
    bar.step()
    draft_s = build_s = 0.0
    if drafter is not None:
        if builder is None:
            from .builders.auto import default_auto_builder

            builder = default_auto_builder(drafter, model)
        draft_s, build_s = measure_draft_costs(model, drafter, builder)
    bar.step()
    profile = CostProfile(verify, draft_s, build_s)
    profile.save(path)
    bar.close()
    return profile


class _Announce:
    """A two-step progress bar (verify curve, drafter), shown on stderr when ``progress``."""

    def __init__(self, progress: bool, message: str):
        self.bar = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=2, desc=message, unit="part", leave=False)

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
            "build_ms_per_node": round(1000 * profile.build_s_per_node, 3)}


__all__ = ["CostProfile", "calibrate", "measure_verify_cost", "verify_sizes", "calibration_dir", "clear_calibration_cache", "profile_key",
           "profile_summary"]
