"""Forward hooks on the target: the outputs of a few decoder layers (the drafter's context features) and
the decoder's final hidden row. Each hook is removed when its context manager exits, also on errors."""

from __future__ import annotations

import sys

import torch


def decoder_layers(model):
    """The list of decoder layers of a causal LM (``model.model.layers`` for Llama/Qwen3).
    ``get_decoder()`` is transformers' public accessor; the ``layers`` list is each architecture's own
    attribute (no common API names it), so a model without one is refused with a clear message."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise TypeError(f"Cannot find the decoder layers of {type(model).__name__} (expected get_decoder().layers).")
    return layers


def is_sharded(model) -> bool:
    """Whether ``model`` is sharded over processes by FSDP (``fully_shard`` applied to the model itself,
    its root, as accelerate and :mod:`hf_treegen.train.sharded_target` do): its weights are gathered
    anew for each forward, which every process must then run together."""
    fsdp = sys.modules.get("torch.distributed.fsdp")  # never imported: nothing can be sharded
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


class FeatureTap:
    """Context manager: while active, each forward of ``model`` records the chosen layers' outputs,
    as transformers' ``output_hidden_states[i + 1]`` gives them: layer i's output, except that the last
    layer's is the decoder's output (after the final norm). Released drafters are trained on those.

    ``take()`` returns them concatenated as (T, k*H) for batch row 0 (``take_all()``: (B, T, k*H)) and
    clears the record.
    Hooks are removed on exit, also when the body raises.
    """

    def __init__(self, model, layer_ids):
        layers = decoder_layers(model)
        bad = [i for i in layer_ids if not 0 <= i < len(layers)]
        if bad:
            raise ValueError(f"Target has {len(layers)} layers; cannot tap layers {bad}.")
        last = len(layers) - 1
        self.layer_ids = list(layer_ids)
        self.modules = [model.get_decoder() if i == last else layers[i] for i in layer_ids]
        # a target split over devices leaves each layer's output on its own device: the features are
        # gathered where the embedding (and so the drafter) lives
        embedding = model.get_input_embeddings().weight.device
        self.device = None if embedding.type == "meta" else embedding
        self.outputs: list[torch.Tensor | None] = [None] * len(self.modules)
        self.handles = []

    def _hook(self, slot):
        def record(module, args, output):
            if hasattr(output, "last_hidden_state"):  # the decoder itself (a tap of the last layer)
                hidden = output.last_hidden_state
            else:
                hidden = output[0] if isinstance(output, tuple) else output
            hidden = hidden.detach()
            self.outputs[slot] = hidden if self.device is None else hidden.to(self.device)

        return record

    def __enter__(self) -> "FeatureTap":
        self.handles = [module.register_forward_hook(self._hook(i)) for i, module in enumerate(self.modules)]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    @property
    def deepest(self):
        """The module whose hook records the deepest tap (the forward may stop after it)."""
        return self.modules[max(range(len(self.layer_ids)), key=self.layer_ids.__getitem__)]

    def clear(self) -> None:
        self.outputs = [None] * len(self.modules)

    def take(self) -> torch.Tensor:
        """The last forward's features of batch row 0: (T, k*H)."""
        return self.take_all()[0]

    def take_all(self) -> torch.Tensor:
        """The last forward's features of every batch row: (B, T, k*H)."""
        if any(o is None for o in self.outputs):
            raise RuntimeError("FeatureTap.take() before a forward pass recorded every tapped layer.")
        features = torch.cat(self.outputs, dim=-1)  # (B, T, k*H)
        self.clear()
        return features


class LastHidden:
    """Context manager: records the decoder's final hidden row (1, H) of one forward (a hook we remove)."""

    def __init__(self, model):
        self.decoder = model.get_decoder()
        self.row: torch.Tensor | None = None

    def _record(self, module, args, output) -> None:
        self.row = output.last_hidden_state[0, -1:]

    def __enter__(self) -> "LastHidden":
        self.handle = self.decoder.register_forward_hook(self._record)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()
