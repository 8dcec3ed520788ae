"""Optional dependencies: the core (tree decoding, compiled choice) needs torch, transformers,
safetensors and tqdm only; everything else comes with an extra and is imported where it is used.

    rag       datasets, accelerate, evaluate,  QASPER loading from the Hub, rag-eval and its
              bm25s, wordllama                 retrieval baselines
    metrics   datasets, evaluate               the QASPER metrics as `evaluate` modules
    outlines  outlines                         the outlines baseline in choose-bench
    plots     matplotlib                       --plot of the bench commands
    smollm2   gguf                             converting the embedded SmolLM2 GGUF
    train     gguf, accelerate                 training a drafter for the embedded SmolLM2, and
                                               training or building corpora with several processes
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` saying which ``pip install`` fixes it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtra(f"{purpose} needs the `{module.split('.')[0]}` package, which the core install does not "
                           f"bring: pip install 'hf-treegen[{extra}]'") from err


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the file-only Agg backend: the bench commands write plots, never show them."""
    matplotlib = require("matplotlib", "plots", "--plot")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")
