"""Measured machine costs for cost-aware decoding, owned by the caller.

``tree_strategy="auto"`` chooses, round by round, between a draft tree and a plain one-token step by
comparing expected tokens per second, so it needs what a round costs on *this* machine: the target's
forward time by number of rows, one drafter forward, and the tree build per node. A
:class:`CostProfile` holds those numbers. It is measured only when asked:

* ``calibrate(model, drafter)`` measures them (a visible progress bar, 10-30 s on a CPU) and caches
  the profile as JSON under :func:`calibration_dir` (``$HF_TREEGEN_CACHE/calibration``); the next
  call with the same model, drafter shape, device, dtype and thread count reads that file.
  ``clear_calibration_cache()`` (or ``hf-treegen calibrate --clear``) deletes it.
* ``generate(..., tree_strategy="auto", tree_costs=profile)`` uses a profile the caller made (tests
  pin one, so no timing ever decides a test). Without ``tree_costs``, ``auto`` calls ``calibrate``.

A profile only decides tree *shapes*: verification keeps the target's own choices, so output tokens
never depend on it. With a fixed profile, two identical calls build identical trees.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .attention import attention_implementation
from .builders.cost_model import VerifyCostModel, measure_verify_cost
from .cache_dir import cache_dir

PROFILE_VERSION = 1
DEFAULT_MAX_ROWS = 65  # a 64-node tree plus its root: far past what pays on a CPU


@dataclass(frozen=True)
class CostProfile:
    """Seconds per round of each part, for one (target, drafter, device, dtype, threads)."""

    verify: VerifyCostModel  # target forward over N rows (N = 1 is one plain decode step)
    draft_s: float = 0.0  # one drafter forward and its draft logits
    build_s_per_node: float = 0.0  # tree building, per drafted node

    def round_seconds(self, nodes: int) -> float:
        """A draft round with ``nodes`` drafted nodes: draft + build + one verify of nodes + 1 rows."""
        return self.draft_s + self.build_s_per_node * nodes + self.verify.seconds_for(nodes + 1)

    def step_seconds(self) -> float:
        """A plain one-token step: no draft, no build, one single-row forward."""
        return self.verify.seconds_for(1)

    def to_dict(self) -> dict:
        return {"version": PROFILE_VERSION, "verify_rows": list(self.verify.rows),
                "verify_seconds": list(self.verify.seconds), "draft_s": self.draft_s,
                "build_s_per_node": self.build_s_per_node}

    @classmethod
    def from_dict(cls, data: dict) -> "CostProfile":
        if data.get("version") != PROFILE_VERSION:
            raise ValueError(f"cost profile version {data.get('version')!r} is not {PROFILE_VERSION}; "
                             f"measure it again with hf_treegen.calibrate(model, drafter).")
        verify = VerifyCostModel.from_measurements(data["verify_rows"], data["verify_seconds"])
        return cls(verify, float(data["draft_s"]), float(data["build_s_per_node"]))

    @classmethod
    def from_verify_seconds(cls, seconds_by_rows: dict[int, float], draft_s: float = 0.0,
                            build_s_per_node: float = 0.0) -> "CostProfile":
        """A profile from known numbers, e.g. ``{1: 0.060, 9: 0.080, 17: 0.110}`` (tests, what-ifs)."""
        rows = sorted(seconds_by_rows)
        return cls(VerifyCostModel.from_measurements(rows, [seconds_by_rows[r] for r in rows]), draft_s,
                   build_s_per_node)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        return cls.from_dict(json.loads(Path(path).read_text()))


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
    return removed


def profile_key(model, drafter=None) -> str:
    """What a profile depends on: the target's shape, the drafter's shape, device, dtype, threads."""
    cfg = model.config
    device = model.get_input_embeddings().weight.device
    parts = [cfg.model_type, cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size, str(model.dtype),
             device.type, attention_implementation(model), f"t{torch.get_num_threads()}"]
    if drafter is not None:
        d = drafter.config
        vocab = d.vocab_size if drafter.draft_vocab is None else drafter.draft_vocab.numel()
        parts += ["drafter", d.num_hidden_layers, d.block_size, d.projector_type or "dflash", vocab]
    return "-".join(str(p) for p in parts).replace("/", "_").replace(".", "_")


# --------------------------------------------------------------------------------------------------
# measuring

@torch.no_grad()
def measure_draft_costs(model, drafter, builder, context: int = 128, rounds: int = 12) -> tuple[float, float]:
    """Median seconds of one drafter forward and of one tree build per node, on a random context."""
    from transformers import DynamicCache

    from .generation.features import FeatureTap

    device = model.get_input_embeddings().weight.device
    ids = torch.randint(0, model.config.vocab_size, (1, context), device=device)
    with FeatureTap(model, drafter.config.target_layer_ids) as tap:
        model(input_ids=ids, past_key_values=DynamicCache(config=model.config), use_cache=True, logits_to_keep=1)
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


def calibrate(model, drafter=None, *, builder=None, max_rows: int = DEFAULT_MAX_ROWS, use_cache: bool = True,
              progress: bool = True) -> CostProfile:
    """Measure (or read from the cache) the :class:`CostProfile` of ``model`` with ``drafter``.

    ``builder``: the tree builder whose build time to measure (default: what ``auto`` uses for this
    drafter). ``use_cache=False`` measures afresh and overwrites the cached file.
    """
    path = calibration_dir() / f"{profile_key(model, drafter)}.json"
    if use_cache and path.is_file():
        try:
            profile = CostProfile.load(path)
            if profile.verify.rows[-1] >= max_rows:
                return profile
        except (ValueError, KeyError, json.JSONDecodeError):
            pass  # an old or broken file: measure again and overwrite it
    bar = _Announce(progress, f"hf_treegen: measuring decode costs once (cached in {path})")
    verify = measure_verify_cost(model, max_rows)
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


__all__ = ["CostProfile", "calibrate", "calibration_dir", "clear_calibration_cache", "profile_key",
           "profile_summary"]
