"""hf_treegen: tree speculative decoding and compiled finite-choice control inside Hugging Face generate()."""

from .calibration import CostProfile, calibrate, clear_calibration_cache
from .choice import ChoiceResult, CompiledChoiceProcessor, SerialChoiceProcessor
from .drafters import DFlashDrafter, DominoDrafter, DrafterConfig
from .generation import TreeGenerationMixin, TreeGenerateOutput, TreeStats, disable, enable
from .tree import DraftTree

__version__ = "0.1.0"

__all__ = ["CostProfile", "calibrate", "clear_calibration_cache", "ChoiceResult", "CompiledChoiceProcessor", "SerialChoiceProcessor", "DFlashDrafter", "DominoDrafter", "DraftTree", "DrafterConfig", "TreeGenerateOutput",
           "TreeGenerationMixin", "TreeStats", "disable", "enable", "__version__"]
