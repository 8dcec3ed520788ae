"""The drafter a training run starts from: a random one, a grown copy of a trained one, or one whose
decoder layer is copied from a target layer."""

from __future__ import annotations

import dataclasses

import torch

from ..drafters.config import DrafterConfig
from ..drafters.dflash import DFlashDrafter
from ..drafters.domino import DominoDrafter
from ..drafters.dspark import DSparkDrafter
from ..target import decoder_layers


def drafter_class(config: DrafterConfig) -> type[DFlashDrafter]:
    """The class that builds a drafter of ``config`` for training: DominoDrafter for a Domino projector,
    DSparkDrafter for a Markov head, else DFlashDrafter (DFlash2's candidate selector is not trained here)."""
    if config.family == "dflash2":
        raise ValueError("training a DFlash2 drafter (its candidate selector) is not supported; train a Domino "
                         "(GRU) or DSpark (Markov) head for the conditional strategies instead.")
    return {"domino": DominoDrafter, "dspark": DSparkDrafter}.get(config.family, DFlashDrafter)


def init_drafter(config: DrafterConfig, target, seed: int = 0) -> DFlashDrafter:
    """A freshly initialised fp32 drafter for ``target``; a Domino W2 and a DSpark Markov W2 start at
    zero (a neutral correction or bias)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        drafter = drafter_class(config)(config)
    with torch.no_grad():
        if config.is_domino:
            drafter.w2.zero_()
        if config.family == "dspark":
            drafter.markov_head.markov_w2.weight.zero_()
    device = target.get_input_embeddings().weight.device
    return drafter.to(device=device, dtype=torch.float32).attach(target)


def grow_drafter(drafter: DFlashDrafter, extra_layers: int, target) -> DFlashDrafter:
    """A copy of ``drafter`` (fp32, attached to ``target``) with ``extra_layers`` decoder layers
    appended, initialised so that it drafts exactly as before: each new layer starts as a copy of the
    last one with its two output projections (attention ``o_proj``, MLP ``down_proj``) at zero, so it
    adds nothing to the residual stream until training moves them. Continued training can then use
    the extra depth without first losing what the drafter already knows."""
    if isinstance(extra_layers, bool) or not isinstance(extra_layers, int) or extra_layers < 1:
        raise ValueError(f"extra_layers must be a positive int, got {extra_layers!r}.")
    config = dataclasses.replace(drafter.config, num_hidden_layers=drafter.config.num_hidden_layers + extra_layers)
    grown = type(drafter)(config)
    state = drafter.state_dict()
    last = drafter.config.num_hidden_layers - 1
    for new in range(drafter.config.num_hidden_layers, config.num_hidden_layers):
        for key, value in drafter.layers[last].state_dict().items():
            state[f"layers.{new}.{key}"] = value.clone()
        state[f"layers.{new}.self_attn.o_proj.weight"].zero_()
        state[f"layers.{new}.mlp.down_proj.weight"].zero_()
    if drafter.draft_vocab is not None:
        grown.set_draft_vocab(drafter.draft_vocab)
    grown.load_state_dict(state)
    return grown.to(device=drafter.fc.weight.device, dtype=torch.float32).attach(target)


def copy_target_layer(drafter: DFlashDrafter, target, layer_id: int) -> DFlashDrafter:
    """Start ``drafter`` (in place) from target layer ``layer_id`` instead of random weights, so that
    training begins from a layer that already reads the target's hidden states:

    * each decoder layer gets a copy of the target layer's projections, MLP and norms (the drafter's
      own per-head query/key norms, which a Llama layer lacks, keep their initialisation);
    * ``fc`` passes on the features of the deepest tapped layer alone, and ``hidden_norm`` takes the
      copied layer's input norm, so the context keys and values are the ones that layer computes from
      them (pick ``layer_id`` = deepest tapped layer + 1 for the layer that reads them in the target);
    * the final norm is the target's.

    A target layer whose weights do not fit the drafter's (another width or head count, biases the
    drafter has no place for) is refused."""
    layers = decoder_layers(target)
    if isinstance(layer_id, bool) or not isinstance(layer_id, int) or not 0 <= layer_id < len(layers):
        raise ValueError(f"target layer {layer_id!r} does not exist: the target has layers 0..{len(layers) - 1}.")
    source = layers[layer_id].state_dict()
    for layer in drafter.layers:
        own = layer.state_dict()
        misfits = sorted(name for name, value in source.items() if name not in own or own[name].shape != value.shape)
        if misfits:
            raise ValueError(f"target layer {layer_id} does not fit the drafter's decoder layer "
                             f"(no place or another shape for {', '.join(misfits)}); train from a random start.")
        # weights the target layer lacks keep theirs; misfits were refused above
        layer.load_state_dict(source, strict=False)
    hidden, taps = drafter.config.hidden_size, list(drafter.config.target_layer_ids)
    deepest = taps.index(max(taps))
    with torch.no_grad():
        drafter.fc.weight.zero_()  # (H, k*H): the deepest tap's block is the identity
        drafter.fc.weight[:, deepest * hidden:(deepest + 1) * hidden] = torch.eye(hidden)
        drafter.hidden_norm.weight.copy_(source["input_layernorm.weight"])
        drafter.norm.weight.copy_(target.get_decoder().norm.weight)  # Llama-family decoders name it norm
    return drafter


# the parameters a DFlash, Domino and DSpark drafter share: everything but the sequential head
BACKBONE_PARTS = ("fc", "hidden_norm", "layers", "norm")
# the config fields of the heads a drafter can trade (cleared before the new head's are set)
HEAD_FIELDS = dict(projector_type=None, emb_dim=None, gru_hidden_dim=None, architecture="DFlashDraftModel",
                   markov_rank=None, markov_head_type=None, confidence_head=False,
                   confidence_head_with_markov=False)


def with_new_head(drafter: DFlashDrafter, head: dict, target, seed: int = 0) -> DFlashDrafter:
    """A new fp32 drafter, attached to ``target``, with ``drafter``'s backbone (decoder layers, ``fc``,
    norms, draft vocabulary) and a freshly initialised sequential head of the ``head`` config fields
    (e.g. ``architecture="DSparkDraftModel", markov_rank=256, markov_head_type="gated"``; empty for plain
    DFlash). A new Domino or Markov head starts neutral (zero W2), so the new drafter drafts as the
    backbone alone does and training grows the head on weights that already draft."""
    if drafter.config.family == "dflash2":
        raise ValueError("a DFlash2 drafter's backbone has convolutions the other families lack; its head "
                         "cannot be traded.")
    config = dataclasses.replace(drafter.config, **{**HEAD_FIELDS, "draft_vocab_size": None, **head})
    fresh = init_drafter(config, target, seed=seed)
    if drafter.draft_vocab is not None:
        fresh.set_draft_vocab(drafter.draft_vocab)
    backbone = {name: value for name, value in drafter.state_dict().items()
                if name.split(".")[0] in BACKBONE_PARTS}
    fresh.load_state_dict(backbone, strict=False)  # the head keeps its initialisation
    return fresh.to(dtype=torch.float32)
