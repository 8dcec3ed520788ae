"""Block-diffusion drafters (DFlash; Domino adds a GRU logit correction)."""

from .config import DrafterConfig, default_target_layer_ids
from .dflash import DFlashDrafter, DraftBlock, DraftSession
from .domino import CorrectionScorer, DominoBlock, DominoDrafter
from .loading import default_draft_dtype
from .vocab import choose_draft_vocab

__all__ = ["CorrectionScorer", "DFlashDrafter", "DominoBlock", "DominoDrafter", "DraftBlock", "DraftSession",
           "DrafterConfig", "choose_draft_vocab", "default_draft_dtype", "default_target_layer_ids"]
