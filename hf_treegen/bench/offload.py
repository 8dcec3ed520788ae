"""A target split with accelerate's ``device_map``: some decoder layers offloaded to disk, the rest
kept on the CPU, as ``from_pretrained(device_map=..., offload_folder=...)`` does for a model too big
for memory. Used by the split-target benchmark and tests."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable


def disk_offload_map(model, on_disk: Iterable[int]) -> dict[str, str]:
    """A ``device_map`` for a Llama-style causal LM (``model.<base>.layers``) with the decoder layers
    at ``on_disk`` (indices; negative ones count from the end) on disk and everything else on the CPU."""
    base = model.base_model_prefix
    layers = model.config.num_hidden_layers
    disk = {i % layers for i in on_disk}
    device_map = {name: "cpu" for name, _ in model.named_children() if name != base}
    device_map |= {f"{base}.{name}": "cpu" for name, _ in getattr(model, base).named_children() if name != "layers"}
    device_map |= {f"{base}.layers.{i}": "disk" if i in disk else "cpu" for i in range(layers)}
    return device_map


def offload_layers(model, on_disk: Iterable[int], folder: str | Path):
    """``model`` dispatched by :func:`disk_offload_map`: the layers at ``on_disk`` keep their weights in
    ``folder`` and accelerate's hooks load them for each forward."""
    from accelerate import dispatch_model

    return dispatch_model(model, device_map=disk_offload_map(model, on_disk), offload_dir=str(folder))
