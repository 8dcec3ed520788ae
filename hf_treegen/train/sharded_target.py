"""A frozen target sharded over the processes of a launch (FSDP), for targets too large for one device.

Every decoder layer's weights are split in N parts (torch's ``fully_shard``): each process holds one
part, and a layer's forward gathers the whole layer for as long as it runs. The embedding, the final
norm and the LM head stay whole on every process, because the drafter reads them directly. The main
process loads the checkpoint; the others build the model on the ``meta`` device (no memory) and
receive their parts from it, so one process, not N, ever holds the whole target in host memory.

A sharded forward is a collective: every process must run the same forwards through the same layers.
The data commands keep that rule (a process without a batch in a round runs a one-token forward, and
``generate`` runs with ``synced_gpus``); feature extraction runs all layers instead of stopping after
the deepest tapped one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..target import decoder_layers
from .features import FINGERPRINT_ATTRIBUTE, target_fingerprint
from .processes import Processes

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def load_sharded_target(model: str | None, dtype: torch.dtype, processes: Processes, *, tokenizer: bool = True
                        ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | None, str]:
    """``(model, tokenizer, name)`` like :func:`hf_treegen.models.load_target`, with the decoder layers
    sharded over ``processes`` (at least two) and the rest on each process's device. Every process
    must call it."""
    from transformers import AutoModelForCausalLM

    from ..models import load_target_on_cpu

    problem = sharding_problem(processes)
    if problem is not None:
        raise ValueError(problem)
    full, about = None, None
    if processes.is_main:  # also converts the embedded model on its first use, once
        try:
            full, its_tokenizer, name = load_target_on_cpu(model, dtype, tokenizer=tokenizer)
            about = (full.config, full.generation_config, its_tokenizer, name)
        except (OSError, ValueError) as err:  # every process raises it, rather than the others waiting
            about = err
    about = processes.from_main(about)
    if isinstance(about, Exception):
        raise about
    config, generation_config, its_tokenizer, name = about
    if full is None:
        with torch.device("meta"):  # the shape of the model, no memory: the weights come from the main process
            full = AutoModelForCausalLM.from_config(config, dtype=dtype)
        full.generation_config = generation_config
    shard_layers(full, processes)
    return full.eval(), its_tokenizer, name


def sharding_problem(processes: Processes, device_map=None) -> str | None:
    """Why ``--shard-target`` cannot be used here (None: it can), in words for the user."""
    if device_map is not None:
        return "--shard-target and --device-map are two ways to place the target; give one of them."
    if not processes.several:
        return ("--shard-target shares the target's layers among the processes of a launch: start several "
                "(accelerate launch --num_processes N -m hf_treegen.cli ..., or torchrun --nproc-per-node N), "
                "or drop it.")
    return None


def shard_layers(model, processes: Processes) -> None:
    """Shard ``model``'s decoder layers over ``processes`` in place and give every process the main
    process's weights; on the others ``model`` may be on the ``meta`` device."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device = processes.device or torch.device("cpu")
    # the whole weights' fingerprint, so the sharded target shares caches with the whole one
    fingerprint = processes.from_main(target_fingerprint(model) if processes.is_main else None)
    state = model.state_dict() if processes.is_main else {}  # whole tensors, before sharding replaces them
    mesh = init_device_mesh(device.type, (processes.count,))
    layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    # the model itself is the root that frees each layer's gathered weights after its forward (a layer
    # that were its own root would keep them); the parameters outside the layers stay whole
    fully_shard(model, mesh=mesh, ignored_params={p for p in model.parameters() if id(p) not in in_layers})
    if processes.is_main:
        model.to(device)
    else:
        model.to_empty(device=device)
    model.tie_weights()  # to_empty gives tied weights (embedding and LM head) separate tensors
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    del state
    # buffers outside the state dict (rotary frequencies) were left uninitialised by to_empty
    processes.copy_from_main(list(model.buffers()))
    setattr(model, FINGERPRINT_ATTRIBUTE, fingerprint)
    # FSDP settles which module is the root on the first forward: make it the model's own
    with torch.no_grad():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=False, logits_to_keep=1)


__all__ = ["load_sharded_target", "shard_layers", "sharding_problem"]
