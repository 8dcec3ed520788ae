"""hf_treegen: tree speculative decoding and compiled finite-choice control inside Hugging Face generate()."""

from .acceptance import DepthCalibration
from .calibration import clear_calibration_cache
from .generation.fixed_costs import calibrate
from .costs import CostProfile
from .datastore import TokenDatastore
from .learning_datastore import LearningDatastore
from .choice import ChoiceResult, CompiledChoiceProcessor, SerialChoiceProcessor
from .drafters import DFlash2Drafter, DFlashDrafter, DSparkDrafter, DominoDrafter, DrafterConfig, default_draft_dtype, load_drafter
from .generation import LookupOptions, TreeGenerationMixin, TreeGenerateOutput, TreeStats, disable, enable
from .target.packed import clear_packed_linears, packed_linears
from .tree import DraftTree

__version__ = "0.1.0"

__all__ = ["CostProfile", "DepthCalibration", "calibrate", "clear_calibration_cache", "ChoiceResult",
           "CompiledChoiceProcessor", "SerialChoiceProcessor", "DFlash2Drafter", "DFlashDrafter", "DSparkDrafter", "DominoDrafter",
           "DraftTree", "DrafterConfig", "LookupOptions", "default_draft_dtype", "load_drafter", "TreeGenerateOutput", "TreeGenerationMixin", "TreeStats",
           "LearningDatastore", "TokenDatastore", "clear_packed_linears", "disable", "enable", "packed_linears", "__version__"]
