"""Load a drafter checkpoint without knowing its kind: its config and tensors say DFlash or Domino."""

from __future__ import annotations

import torch

from .config import DrafterConfig
from .dflash import DFlashDrafter
from .domino import DominoDrafter
from .loading import read_config, has_domino_tensors, read_state_dict, resolve_checkpoint_dir


def load_any_drafter(path, target, dtype: torch.dtype | None = None, **hub_kwargs) -> DFlashDrafter:
    """DominoDrafter or DFlashDrafter, whichever the checkpoint is (its config and tensors decide)."""
    directory = resolve_checkpoint_dir(path, **hub_kwargs)
    config = read_config(directory / "config.json")
    domino = config.is_domino or has_domino_tensors(read_state_dict(directory))
    return (DominoDrafter if domino else DFlashDrafter).from_pretrained(directory, target, dtype=dtype)
