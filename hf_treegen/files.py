"""Replacing a file whole: written beside its final path, then renamed over it."""

from __future__ import annotations

import os
from pathlib import Path

#: What a saved drafter, datastore or corpus shard is readable as: safetensors creates its files 0600,
#: which would keep them from anyone the folder is shared with.
FILE_MODE = 0o644


def publish(tmp: Path, final: Path) -> None:
    """Flush ``tmp`` to disk, give it :data:`FILE_MODE` and rename it to ``final``, so a crash leaves
    the old ``final`` or the new one, never half of one."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, final)
