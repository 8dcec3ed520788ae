"""Reading and writing drafters in the released (z-lab DFlash / Domino) checkpoint layout.

A drafter folder holds ``config.json`` and its weights as exactly one of: ``model.safetensors``, or
``model.safetensors.index.json`` with the shards it names; optionally also ``datastore.safetensors``
(the drafter's :class:`~hf_treegen.datastore.TokenDatastore`). Other ``*.safetensors`` files next to them
(an old copy, a backup) are never read; a folder with only differently named weights is refused with
the names it holds. Every read error names the file."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..datastore import TokenDatastore
from ..files import publish
from ..ops import native_bf16_matmuls
from .config import DrafterConfig
from .speculators import (config_from_speculators, config_to_speculators, is_speculators_config,
                          state_from_speculators, state_to_speculators)
from .vocab import check_draft_vocab

# Domino head tensors, under their released names and the legacy ``logit_head.`` prefix.
DOMINO_TENSOR_PREFIXES = ("prefix_gru.", "embed_proj.", "logit_head.")
DRAFT_VOCAB_TENSOR = "draft_vocab"  # (Vd,) int64 target ids of a reduced draft vocabulary (absent: full vocabulary)


def resolve_checkpoint_dir(path, **hub_kwargs) -> Path:
    """A local directory as is; anything else is a Hub repo id fetched with huggingface_hub."""
    local = Path(path).expanduser()
    if local.is_dir():
        return local
    if local.exists():
        raise ValueError(f"{path} is a file; pass the checkpoint directory that holds config.json.")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(path), allow_patterns=["*.json", "*.safetensors"], **hub_kwargs))
    except Exception as err:  # offline machines, typos
        raise OSError(
            f"Could not find a drafter at {path!r}: not a local directory, and the Hub download failed ({err})."
        ) from err


WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
DATASTORE_FILE = "datastore.safetensors"  # the drafter's TokenDatastore, when it has one (not weights)


def weight_files(directory: Path) -> list[Path]:
    """The weight files of a drafter folder: ``model.safetensors``, or the shards its index names."""
    single, index = directory / WEIGHTS_FILE, directory / WEIGHTS_INDEX
    if single.is_file() and index.is_file():
        raise ValueError(f"{directory} holds both {WEIGHTS_FILE} and {WEIGHTS_INDEX}; keep one of them.")
    if single.is_file():
        return [single]
    if index.is_file():
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        if not shards:
            raise ValueError(f"{index}: no weight_map naming the shards.")
        missing = [name for name in shards if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(f"{index} names shards that are not in {directory}: {missing}.")
        return [directory / name for name in shards]
    others = sorted(p.name for p in directory.glob("*.safetensors"))
    hint = f" (it holds {', '.join(others)}; rename the right one to {WEIGHTS_FILE})" if others else ""
    raise FileNotFoundError(f"No {WEIGHTS_FILE} or {WEIGHTS_INDEX} in {directory}{hint}.")


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; a broken file is named in the error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}).") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}, expected a JSON object.")
    return data


def read_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for f in weight_files(directory):
        try:
            state.update(load_file(str(f)))
        except Exception as err:  # safetensors raises its own error types for truncated or foreign files
            raise ValueError(f"{f} is not a readable safetensors file ({err}); download or save it again.") from err
    # some exports prefix everything with "model."
    if state and all(k.startswith("model.") for k in state):
        state = {k[len("model."):]: v for k, v in state.items()}
    return state


def read_config(path: Path, target=None) -> DrafterConfig:
    """The drafter config in ``path`` (a ``config.json``, z-lab or speculators layout); errors name the
    file. A speculators config does not record the target's depth, so reading one needs ``target``."""
    data = read_json(path)
    try:
        if is_speculators_config(data):
            if target is None:
                raise ValueError("a speculators config is read for a target; pass target=.")
            return config_from_speculators(data, target.config.num_hidden_layers)
        return DrafterConfig.from_dict(data)
    except (TypeError, KeyError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from err


def read_checkpoint(directory: Path, target) -> tuple[DrafterConfig, dict[str, torch.Tensor]]:
    """A drafter folder's config and tensors under our names, whichever layout it is in."""
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"No config.json in {directory}.")
    config = read_config(config_file, target)
    state = read_state_dict(directory)
    if is_speculators_config(read_json(config_file)):
        try:
            config.validate_against(target.config)  # sizes first: a clearer error than a tensor's shape
            state = state_from_speculators(state, config, target)
        except ValueError as err:
            raise ValueError(f"{directory}: {err}") from err
    return config, state


def has_domino_tensors(state: dict) -> bool:
    return any(k.startswith(DOMINO_TENSOR_PREFIXES) for k in state)


FAMILY_NAMES = {"dflash": "plain DFlash", "dflash2": "DFlash2", "dspark": "DSpark", "domino": "Domino"}
FAMILY_CLASSES = {"dflash": "DFlashDrafter", "dflash2": "DFlash2Drafter", "dspark": "DSparkDrafter",
                  "domino": "DominoDrafter"}


def checkpoint_family(config: DrafterConfig, state: dict) -> str:
    """The drafter family of a checkpoint: its config's, unless its tensors carry a Domino head that the
    config does not name (some early Domino exports)."""
    if config.family == "dflash" and has_domino_tensors(state):
        return "domino"
    return config.family


def default_draft_dtype(target) -> torch.dtype:
    """The dtype a drafter loaded for ``target`` computes in unless told otherwise: bf16 beside an fp32
    target on a CPU with native bf16 matmuls (AVX512-BF16 or AMX), else the target's own dtype.

    Why bf16 there: a draft round is bound by reading the drafter's weights and draft head, which each
    target forward pushes out of the core's cache (the SmolLM2 drafter reads about 38 MB per round in
    fp32); bf16 halves those bytes. The drafter's precision never changes the output, since the target
    checks every token; it only changes which tokens are drafted, by rounding."""
    weight = target.get_input_embeddings().weight
    if weight.device.type == "cpu" and weight.dtype == torch.float32 and native_bf16_matmuls("cpu"):
        return torch.bfloat16
    return weight.dtype


def load_drafter(cls, path, target, dtype: torch.dtype | None = None, **hub_kwargs):
    """Build ``cls`` from a checkpoint directory (or Hub id) and attach it to ``target``, in ``dtype``
    (default: :func:`default_draft_dtype`)."""
    directory = resolve_checkpoint_dir(path, **hub_kwargs)
    config, state = read_checkpoint(directory, target)
    family = checkpoint_family(config, state)
    if family != cls.family:
        raise ValueError(
            f"{directory} is a {FAMILY_NAMES[family]} checkpoint ({config.describe()}), not a "
            f"{FAMILY_NAMES[cls.family]} one: loaded as the wrong family it drafts from the wrong rows or "
            f"without its head. Load it with hf_treegen.{FAMILY_CLASSES[family]}.from_pretrained, or with "
            f"hf_treegen.load_drafter, which picks the class."
        )
    if DRAFT_VOCAB_TENSOR in state or config.draft_vocab_size is not None:
        state[DRAFT_VOCAB_TENSOR] = _checked_draft_vocab(directory, config, state.get(DRAFT_VOCAB_TENSOR))
    drafter = cls(config)
    state = drafter.remap_checkpoint_names(state)
    expected = drafter.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"Checkpoint {directory} does not match a {cls.__name__} built from its config.json: "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
            f"unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}."
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise ValueError(
                f"Checkpoint tensor {name} has shape {tuple(tensor.shape)}, the config implies "
                f"{tuple(expected[name].shape)}."
            )
    drafter.load_state_dict(state)
    drafter.to(device=target.get_input_embeddings().weight.device, dtype=dtype or default_draft_dtype(target))
    drafter.eval()
    if (directory / DATASTORE_FILE).is_file():
        drafter.datastore = TokenDatastore.load(directory / DATASTORE_FILE)
    return drafter.attach(target)


def _checked_draft_vocab(directory: Path, config: DrafterConfig, vocab: torch.Tensor | None) -> torch.Tensor:
    """The checkpoint's draft vocabulary, checked against the size its config.json records."""
    size = config.draft_vocab_size
    if vocab is None:
        raise ValueError(f"{directory}/config.json records a draft vocabulary of {size} ids, but the weights hold "
                         f"no {DRAFT_VOCAB_TENSOR!r} tensor; re-save the drafter with save_pretrained.")
    if size is None or vocab.dim() != 1 or vocab.numel() != size:
        raise ValueError(f"{directory}: the {DRAFT_VOCAB_TENSOR!r} tensor has shape {tuple(vocab.shape)}, but "
                         f"config.json records draft_vocab_size={size}; the two must agree (re-save the drafter "
                         f"with save_pretrained).")
    try:
        return check_draft_vocab(vocab, config.vocab_size)
    except ValueError as err:
        raise ValueError(f"{directory}: {err}") from err


FORMATS = ("zlab", "speculators")


def save_drafter(drafter, path, dtype: torch.dtype | None = None, format: str = "zlab") -> None:
    """Write config.json + model.safetensors. ``format="zlab"``: the released DFlash/Domino layout (no
    embedding, no lm_head); ``"speculators"``: the layout vLLM and SGLang read (see
    :mod:`~hf_treegen.drafters.speculators`). ``dtype`` applies to the float tensors; integer ones (the
    draft vocabulary map) keep their dtype."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    directory = Path(path)
    state = {k: (v.to(dtype) if dtype and v.is_floating_point() else v).detach().contiguous().cpu()
             for k, v in drafter.state_dict().items()}
    config = drafter.config.to_dict()
    if format == "speculators":
        head = drafter.target_lm_head.weight  # (raises a clear error when the drafter has no target)
        config = config_to_speculators(drafter.config, *_verifier_of(drafter))
        state = state_to_speculators(state, drafter.config, head)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{WEIGHTS_FILE}.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    publish(tmp, directory / WEIGHTS_FILE)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    store = directory / DATASTORE_FILE
    if drafter.datastore is not None:
        drafter.datastore.save(store)
    elif store.is_file():  # a datastore left from an earlier save would be loaded with these weights
        store.unlink()



def _verifier_of(drafter) -> tuple[str | None, list[str]]:
    """The target's name or path and architectures, as the speculators config records its verifier."""
    config = drafter.target_config
    return getattr(config, "_name_or_path", None) or None, list(getattr(config, "architectures", None) or [])
