"""Argument types for the ``hf-treegen`` commands: a bad value stops argparse with one line that names
the option and what it takes, before any model loads. :func:`user_error` reports the mistakes only a
command can see (a missing file, a mismatched drafter) in the same shape."""

from __future__ import annotations

import argparse
import sys
import time


def seconds_left(budget_min: float | None, started: float) -> float | None:
    """What remains of a ``--time-budget-min`` budget counted from ``started`` (a ``time.time()``), in
    seconds; None without a budget."""
    if budget_min is None:
        return None
    return max(0.0, budget_min * 60 - (time.time() - started))


def user_error(command: str, message: str) -> int:
    """Report a user's mistake as every command does (one line on stderr); returns exit status 2."""
    print(f"hf-treegen {command}: error: {message}", file=sys.stderr)
    return 2


def _whole_number(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def tree_strategy(text: str) -> str:
    """``ar`` (stock generate()) or a tree strategy as :meth:`hf_treegen.generation.TreeOptions.parse` reads it
    (``auto``, ``conditional@4+lookup8``); returned as written, checked here."""
    from .generation.options import TreeOptions

    if text != "ar":
        try:
            TreeOptions.parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return text


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def fraction(text: str) -> float:
    value = non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text}")
    return value


def int_list(text: str) -> list[int]:
    """``5,10,20`` -> [5, 10, 20], each >= 1."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers such as 5,10,20, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1, got {text!r}")
    return values


def float_list(text: str) -> list[float]:
    """``0,0.5,1`` -> [0.0, 0.5, 1.0], each >= 0."""
    try:
        return [non_negative_float(x) for x in text.split(",") if x.strip()] or _empty(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers >= 0 such as 0,0.5,1, got {text!r}") from None


def _empty(text: str):
    raise argparse.ArgumentTypeError(f"expected at least one value, got {text!r}")


def probe_width(text: str):
    """``auto`` or a whole number >= 1 (a choice probe's width)."""
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {text!r}") from None


def device_name(text: str) -> str:
    """``--device``: auto (a GPU when there is one, else the CPU), cpu, cuda or cuda:N; a CUDA device this
    machine lacks is refused here, before any model loads."""
    text = text.strip().lower()
    head, _, index = text.partition(":")
    if not (text in ("auto", "cpu", "cuda") or (head == "cuda" and index.isdigit())):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")
    if head == "cuda":
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(index or 0) >= count:
            raise argparse.ArgumentTypeError(f"{text}: this machine has {count} CUDA device(s); use cpu or auto")
    return text


def resolve_device(name: str):
    """The torch device a checked ``--device`` value names (auto: the GPU when there is one)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


#: device_map strategies transformers' from_pretrained computes itself
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def device_map(text: str) -> str | dict:
    """``--device-map``: a strategy name (auto, balanced, balanced_low_0, sequential) or a JSON file
    mapping module names to a device (0, "cpu", "disk"), as transformers' ``device_map`` takes them."""
    if text in DEVICE_MAP_STRATEGIES:
        return text
    import json
    from pathlib import Path

    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"expected {', '.join(DEVICE_MAP_STRATEGIES)} or a JSON file of "
                                         f"{{module: device}}, got {text!r} (no such file)")
    try:
        mapping = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise argparse.ArgumentTypeError(f"{text}: not a JSON device map ({err})") from None
    if not isinstance(mapping, dict) or not mapping:
        raise argparse.ArgumentTypeError(f"{text}: a device map is a JSON object of module name -> device")
    return mapping


def add_placement_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device-map`` and ``--offload-folder``: load a target too big for one device split over
    several (or partly offloaded to CPU memory or disk) with accelerate; one process only.
    ``--shard-target``: its layers sharded over the processes of a launch instead."""
    parser.add_argument("--device-map", type=device_map, default=None, metavar="MAP",
                        help="load the target split over devices: auto, balanced, balanced_low_0, sequential or a "
                             "JSON file {module: device} (devices 0, 1, ..., cpu, disk); needs accelerate, runs as "
                             "one process")
    parser.add_argument("--offload-folder", default=None, metavar="DIR",
                        help="with --device-map: where layers mapped to disk keep their weights")
    parser.add_argument("--shard-target", action="store_true",
                        help="under accelerate launch / torchrun: every process holds 1/N of each decoder layer "
                             "(FSDP), for a target too large for one device")
