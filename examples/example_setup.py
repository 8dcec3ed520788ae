"""What every example script does the same way: one-line errors and the --device choice.

The scripts import it as a sibling module (``python examples/NAME.py`` puts this folder on the path).
"""

from __future__ import annotations

import argparse


def one_line(err: BaseException) -> str:
    """An exception's message on one line (transformers and the Hub client write several)."""
    return " ".join(str(err).split()) or type(err).__name__


def resolve_device(parser: argparse.ArgumentParser, requested: str) -> str:
    """``--device``: "auto" is CUDA when torch sees one, else the CPU; anything torch cannot use is a
    one-line parser error."""
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if requested == "auto" else requested
    try:
        device = str(torch.device(device))
    except RuntimeError as err:
        parser.error(f"--device {requested}: {one_line(err)}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {device}: this torch sees no CUDA device")
    return device
