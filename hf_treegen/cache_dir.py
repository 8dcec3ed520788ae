"""Where hf_treegen keeps converted models and measured cost curves."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """``$HF_TREEGEN_CACHE`` (default ``~/.cache/hf_treegen``) joined with ``parts``, created."""
    root = Path(os.environ.get("HF_TREEGEN_CACHE") or Path.home() / ".cache" / "hf_treegen")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
