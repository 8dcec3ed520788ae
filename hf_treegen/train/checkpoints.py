"""Resumable training checkpoints: what one holds, how it is written and read back.

A checkpoint (``OUT/checkpoints/step-NNNNNNN.pt``) holds the drafter, the optimizer, the schedule, every
RNG state and the run's history, as tensors and plain data only, so it loads with
``torch.load(weights_only=True)`` and no code runs. It is written to a temporary name and renamed, so
an interrupted write never leaves a half checkpoint behind; the newest ``keep`` are kept.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import torch

from ..drafters.config import DrafterConfig
from ..drafters.dflash import DFlashDrafter
from .drafter_setup import drafter_class

CHECKPOINT_PATTERN = "step-{:07d}.pt"


def save_checkpoint(out_dir: str | Path, step: int, state: dict, keep: int) -> Path:
    """Write ``state`` as the checkpoint of ``step`` and delete all but the newest ``keep``."""
    folder = Path(out_dir) / "checkpoints"
    folder.mkdir(exist_ok=True)
    path = folder / CHECKPOINT_PATTERN.format(step)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    for old in sorted(folder.glob("step-*.pt"))[:-keep]:
        old.unlink()
    return path


def load_checkpoint(path: str | Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain data only: no code runs


def rng_state(generator: torch.Generator) -> dict:
    """Every RNG a run draws from: its sampler ``generator``, torch's, Python's and NumPy's (and CUDA's)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    # plain tensors and numbers only, so checkpoints load with torch.load(weights_only=True)
    numpy_state = {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "gauss": float(gauss)}
    state = {"sampler": generator.get_state(), "torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": numpy_state}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(generator: torch.Generator, state: dict) -> None:
    """Restore what :func:`rng_state` saved, so a resumed run draws exactly what the first one would have."""
    generator.set_state(state["sampler"])
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest checkpoint of the run in ``out_dir`` (None when it has none)."""
    ckpts = sorted(Path(out_dir, "checkpoints").glob("step-*.pt"))
    return ckpts[-1] if ckpts else None


def drafter_from_checkpoint(path: str | Path) -> DFlashDrafter:
    """The fp32 drafter a training checkpoint (``out_dir/checkpoints/step-*.pt``) holds, unattached.

    ``train`` writes only the best held-out state to ``out_dir/drafter``; this gives any other step, e.g. to
    compare checkpoints by how much they are accepted in trees, which the held-out blocks do not always
    rank the same way."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file (train-drafter writes them to OUT/checkpoints).")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # tensors and plain data: no code runs
    except (RuntimeError, pickle.UnpicklingError, EOFError) as err:  # what torch raises for a file that is not one
        raise ValueError(f"{path} is not a train-drafter checkpoint ({type(err).__name__}: {err}).") from err
    if not isinstance(ckpt, dict) or not {"drafter", "drafter_config"} <= ckpt.keys():
        raise ValueError(f"{path} is not a train-drafter checkpoint (it has no drafter and drafter_config).")
    config = DrafterConfig.from_dict(ckpt["drafter_config"])
    drafter = drafter_class(config)(config)
    drafter.load_state_dict(ckpt["drafter"])
    return drafter.float().eval()
