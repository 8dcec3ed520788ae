"""Block-diffusion drafters (DFlash; Domino adds a GRU logit correction)."""

from .config import DrafterConfig, default_target_layer_ids
from .dflash import DFlashDrafter, DraftBlock, DraftSession

__all__ = ["DFlashDrafter", "DraftBlock", "DraftSession", "DrafterConfig", "default_target_layer_ids"]
