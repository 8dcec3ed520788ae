"""Load a drafter checkpoint without knowing its family: its config and tensors say which class."""

from __future__ import annotations

import torch

from .dflash import DFlashDrafter
from .dflash2 import DFlash2Drafter
from .dspark import DSparkDrafter
from .domino import DominoDrafter
from .loading import checkpoint_family, read_checkpoint, resolve_checkpoint_dir

DRAFTER_CLASSES = {"dflash": DFlashDrafter, "dflash2": DFlash2Drafter, "dspark": DSparkDrafter,
                   "domino": DominoDrafter}


def load_any_drafter(path, target, dtype: torch.dtype | None = None, **hub_kwargs) -> DFlashDrafter:
    """The drafter saved at ``path`` as the class of its family (DFlash, DFlash2, DSpark or Domino)."""
    directory = resolve_checkpoint_dir(path, **hub_kwargs)
    family = checkpoint_family(*read_checkpoint(directory, target))
    return DRAFTER_CLASSES[family].from_pretrained(directory, target, dtype=dtype)
