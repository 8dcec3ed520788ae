"""The speculators checkpoint layout (what vLLM and SGLang read), in both directions.

A speculators folder's ``config.json`` names its family in ``speculators_model_type`` ("dflash",
"dflash2", "dspark"), nests the draft decoder's Qwen3 config in ``transformer_layer_config`` and taps
``aux_hidden_state_layer_ids``: the input of decoder layer i, so id i is layer i-1's output here (one
more than the z-lab ids). Its weights use the z-lab names for the backbone and may also hold the
target's embedding, a reduced ``lm_head`` and the draft vocabulary as ``t2d`` (bool over the target
vocabulary) and ``d2t`` (offsets: draft column j is target id ``j + d2t[j]``). Here the embedding and
head are always borrowed from the target, so those tensors are checked against it, never trusted.
"""

from __future__ import annotations

import torch

from .config import DFLASH2_FIELDS, DrafterConfig, _refuse_causal_layers

SPECULATORS_TYPES = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel", "dspark": "DSparkDraftModel"}
# speculators' own defaults for fields its configs may leave out
DFLASH2_DEFAULTS = {"conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 256, "selector_top_k": 16}
DSPARK_DEFAULTS = {"markov_rank": 256, "markov_head_type": "vanilla", "enable_confidence_head": True,
                   "confidence_head_with_markov": True}
# tensors a speculators folder may carry that belong to the target (checked against it, then dropped)
TARGET_TENSORS = ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight")
VOCAB_MAPS = ("t2d", "d2t")
SPECULATORS_VERSION = "0.9.0"  # the release whose loader the round-trip tests read our folders with


def is_speculators_config(data: dict) -> bool:
    return "speculators_model_type" in data


def config_from_speculators(data: dict, num_target_layers: int) -> DrafterConfig:
    """A speculators ``config.json`` -> DrafterConfig, for a target with ``num_target_layers`` layers
    (speculators configs do not record it)."""
    kind = data["speculators_model_type"]
    if kind not in SPECULATORS_TYPES:
        raise ValueError(f"speculators_model_type {kind!r} is not a drafter family hf_treegen runs; it reads "
                         f"{sorted(SPECULATORS_TYPES)}.")
    layer = data.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError("a speculators config.json needs a transformer_layer_config object.")
    _refuse_causal_layers(layer)
    aux = [int(i) for i in data.get("aux_hidden_state_layer_ids") or []]
    outside = [i for i in aux if not 1 <= i < num_target_layers]
    if not aux or outside:
        raise ValueError(f"aux_hidden_state_layer_ids {aux} must name target layers in [1, {num_target_layers - 1}] "
                         f"(hf_treegen taps layer outputs; id 0 is the embedding and id {num_target_layers} the "
                         f"last layer's output before the final norm, neither of which it taps).")
    vocab = layer["vocab_size"]
    draft_vocab = data.get("draft_vocab_size", vocab)
    heads = layer["num_attention_heads"]
    rope = layer.get("rope_parameters") or {}
    fields = dict(
        hidden_size=layer["hidden_size"], intermediate_size=layer["intermediate_size"],
        num_hidden_layers=layer["num_hidden_layers"], num_attention_heads=heads,
        num_key_value_heads=layer.get("num_key_value_heads") or heads,
        head_dim=layer.get("head_dim") or layer["hidden_size"] // heads, vocab_size=vocab,
        rms_norm_eps=float(layer.get("rms_norm_eps", 1e-6)),
        rope_theta=float(layer.get("rope_theta") or rope.get("rope_theta") or 10_000.0),
        max_position_embeddings=layer.get("max_position_embeddings", 32768),
        attention_bias=bool(layer.get("attention_bias", False)),
        block_size=data["block_size"], mask_token_id=data["mask_token_id"],
        target_layer_ids=tuple(i - 1 for i in aux), num_target_layers=num_target_layers,
        shift_label=bool(data.get("sample_from_anchor", kind == "dspark")),
        draft_vocab_size=None if draft_vocab == vocab else draft_vocab,
        architecture=SPECULATORS_TYPES[kind],
    )
    if kind == "dflash2":
        fields.update({name: data.get(name, DFLASH2_DEFAULTS[name]) for name in DFLASH2_FIELDS})
    if kind == "dspark":
        spark = {name: data.get(name, default) for name, default in DSPARK_DEFAULTS.items()}
        if not spark["markov_rank"]:  # the head is off: DFlash blocks, every row drafting
            fields["architecture"] = "DFlashDraftModel"
        else:
            fields.update(markov_rank=spark["markov_rank"], markov_head_type=spark["markov_head_type"],
                          confidence_head=bool(spark["enable_confidence_head"]),
                          confidence_head_with_markov=bool(spark["confidence_head_with_markov"]))
    return DrafterConfig(**fields)


def state_from_speculators(state: dict, config: DrafterConfig, target) -> dict:
    """Speculators tensors -> ours: the draft vocabulary from ``t2d``/``d2t``, and the target's tensors
    checked against ``target`` and dropped. Errors say which tensor disagrees."""
    state = dict(state)
    vocab = _draft_vocab(state.pop("t2d", None), state.pop("d2t", None), config)
    if vocab is not None:
        state["draft_vocab"] = vocab
    rows = slice(None) if vocab is None else vocab
    mine = {"embed_tokens.weight": target.get_input_embeddings().weight,
            "lm_head.weight": target.get_output_embeddings().weight[rows],
            "verifier_lm_head.weight": target.get_output_embeddings().weight[rows]}
    for name in TARGET_TENSORS:
        tensor = state.pop(name, None)
        if tensor is not None and name in mine:
            _check_same(name, tensor, mine[name])
    return state


def _draft_vocab(t2d, d2t, config: DrafterConfig) -> torch.Tensor | None:
    """The sorted target ids of the draft vocabulary (None: the full vocabulary), from the two maps."""
    if t2d is None and d2t is None:
        if config.draft_vocab_size is not None:
            raise ValueError(f"config.json records draft_vocab_size={config.draft_vocab_size} but the weights hold "
                             f"no t2d/d2t maps.")
        return None
    if t2d is None or d2t is None:
        raise ValueError("the weights hold only one of t2d and d2t; a draft vocabulary needs both.")
    ids = torch.arange(d2t.numel()) + d2t.long()
    if t2d.numel() != config.vocab_size or d2t.numel() != (config.draft_vocab_size or config.vocab_size):
        raise ValueError(f"t2d has {t2d.numel()} entries and d2t {d2t.numel()}; the config implies "
                         f"{config.vocab_size} and {config.draft_vocab_size}.")
    if not torch.equal(t2d.bool().nonzero()[:, 0], ids):
        raise ValueError("t2d and d2t name different draft vocabularies (t2d's True ids must be arange + d2t).")
    return ids


def _check_same(name: str, stored: torch.Tensor, target_tensor: torch.Tensor) -> None:
    if stored.shape != target_tensor.shape:
        raise ValueError(f"the checkpoint's {name} has shape {tuple(stored.shape)}, the target's "
                         f"{tuple(target_tensor.shape)}: this drafter was saved for another target (vocabulary "
                         f"or hidden size).")
    mine = target_tensor.detach().to(device="cpu", dtype=torch.float32)
    gap = float((stored.float() - mine).abs().max())
    scale = float(mine.abs().max()) or 1.0
    if gap > 1e-2 * scale:  # rounding of a bf16 copy stays far below this
        raise ValueError(f"the checkpoint's {name} differs from the target's (max |diff| {gap:.3g}): this drafter "
                         f"was saved for another target.")


def config_to_speculators(config: DrafterConfig, verifier: str | None, verifier_architectures: list[str]) -> dict:
    """Our config -> a speculators ``config.json`` (refused where the layout cannot say it)."""
    kind = {v: k for k, v in SPECULATORS_TYPES.items()}.get(config.architecture)
    if kind is None or config.is_domino:
        raise ValueError(f"A {config.describe()} has no speculators layout (speculators reads DFlash, DFlash2 "
                         f"and DSpark drafters); save it with format='zlab'.")
    if (config.input_embedding_scale, config.output_multiplier, config.final_logit_softcapping) != (1.0, 1.0, None):
        raise ValueError("The speculators layout has no input_embedding_scale, output_multiplier or "
                         "final_logit_softcapping; this drafter needs them, so save it with format='zlab'.")
    if config.num_target_layers - 1 in config.target_layer_ids:
        raise ValueError(f"This drafter taps the target's last layer ({config.num_target_layers - 1}), after the "
                         f"final norm; speculators' id for it means the output before the norm. Save it with "
                         f"format='zlab'.")
    layer = {"model_type": "qwen3", "hidden_size": config.hidden_size,
             "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_hidden_layers,
             "num_attention_heads": config.num_attention_heads,
             "num_key_value_heads": config.num_key_value_heads, "head_dim": config.head_dim,
             "vocab_size": config.vocab_size, "rms_norm_eps": config.rms_norm_eps,
             "max_position_embeddings": config.max_position_embeddings, "attention_bias": config.attention_bias,
             "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
             "layer_types": ["full_attention"] * config.num_hidden_layers, "tie_word_embeddings": False,
             "hidden_act": "silu"}  # vLLM builds the draft layers from these fields alone, without defaults
    drafted = config.num_draft_positions
    out = {
        "architectures": [config.architecture], "speculators_model_type": kind,
        "speculators_version": SPECULATORS_VERSION, "transformer_layer_config": layer,
        "aux_hidden_state_layer_ids": [i + 1 for i in config.target_layer_ids],
        "block_size": config.block_size, "mask_token_id": config.mask_token_id,
        "draft_vocab_size": config.draft_vocab_size or config.vocab_size,
        "sample_from_anchor": config.shift_label, "tie_word_embeddings": False,
        "speculators_config": {
            "algorithm": kind, "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": drafted,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "verifier": {"name_or_path": verifier, "architectures": verifier_architectures},
        },
    }
    if kind == "dflash2":
        out.update({name: getattr(config, name) for name in DFLASH2_FIELDS})
    if kind == "dspark":
        out.update(markov_rank=config.markov_rank, markov_head_type=config.markov_head_type,
                   enable_confidence_head=config.confidence_head,
                   confidence_head_with_markov=config.confidence_head_with_markov)
    return out


def state_to_speculators(state: dict, config: DrafterConfig, head: torch.Tensor) -> dict:
    """Our tensors -> speculators': the draft vocabulary as ``t2d``/``d2t`` plus the reduced ``lm_head``
    rows of the target's head (V, H) that its loader expects beside them (a full-vocabulary drafter
    carries neither)."""
    state = dict(state)
    ids = state.pop("draft_vocab", None)
    if ids is not None:
        ids = ids.cpu()
        t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
        t2d[ids] = True
        state["t2d"], state["d2t"] = t2d, ids - torch.arange(ids.numel())
        state["lm_head.weight"] = head.detach().cpu()[ids].to(state["fc.weight"].dtype).contiguous()
    if config.family == "dflash2":  # speculators keeps the codebooks as bare parameters
        for name in ("predecessor_codebook", "successor_codebook"):
            state[f"candidate_selector.{name}"] = state.pop(f"candidate_selector.{name}.weight")
    return state
