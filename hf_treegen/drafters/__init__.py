"""Block-diffusion drafters: DFlash; DFlash2 adds convolutions and a candidate selector; DSpark a Markov
logit bias; Domino a GRU logit correction. :func:`load_drafter` reads any of them and picks the class."""

from .auto import load_any_drafter as load_drafter
from .config import DrafterConfig, default_target_layer_ids
from .dflash import DFlashDrafter, DraftBlock, DraftSession
from .dflash2 import DFlash2Drafter, SelectorBlock, SelectorScorer
from .domino import CorrectionScorer, DominoBlock, DominoDrafter
from .dspark import DSparkDrafter, MarkovBlock, MarkovScorer
from .loading import default_draft_dtype
from .vocab import choose_draft_vocab

__all__ = ["CorrectionScorer", "DFlash2Drafter", "DFlashDrafter", "DominoBlock", "DominoDrafter", "DraftBlock",
           "DraftSession", "DrafterConfig", "DSparkDrafter", "MarkovBlock", "MarkovScorer", "SelectorBlock", "SelectorScorer", "choose_draft_vocab",
           "default_draft_dtype", "default_target_layer_ids", "load_drafter"]
