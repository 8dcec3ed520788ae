"""Tiny random models, for checks that need no weights: a small target with peaky random weights and a
random DFlash drafter for it. They run in seconds on a CPU; what they generate means nothing, but tree
decoding must still reproduce the target's own output with them (the test suite's middle tier, see
docs/design.md, "Conventions", and the sampling-law table of benchmarks/vllm_serving.py)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from ..drafters import DFlashDrafter, DrafterConfig
from ..generation import enable

ARCHS = ("llama", "qwen3")


def tiny_target(arch: str = "llama", dtype=torch.float32, attn: str = "sdpa", vocab: int = 256, seed: int = 0,
                layers: int = 2, hidden: int = 64, std: float = 0.3):
    """A random 2-layer GQA model with peaky weights (N(0, std)) so argmax ties are unlikely, enabled for
    tree decoding. ``arch``: one of :data:`ARCHS`."""
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  attn_implementation=attn, eos_token_id=None, bos_token_id=None, pad_token_id=0)
    if arch == "llama":
        config = LlamaConfig(**common)
        cls = LlamaForCausalLM
    elif arch == "qwen3":
        config = Qwen3Config(head_dim=hidden // 4, **common)
        cls = Qwen3ForCausalLM
    else:
        raise ValueError(f"tiny_target builds one of {ARCHS}, got {arch!r}.")
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return enable(model.to(dtype))


def tiny_drafter(model, block_size: int = 8, layers: int = 1, seed: int = 1) -> DFlashDrafter:
    """A DFlash drafter for ``model`` with random N(0, 0.2) weights, in eval mode and the target's dtype."""
    cfg = DrafterConfig.for_target(model.config, num_hidden_layers=layers, block_size=block_size)
    torch.manual_seed(seed)
    drafter = DFlashDrafter(cfg, target=model).eval()
    with torch.no_grad():
        for p in drafter.parameters():
            p.normal_(0, 0.2)
    return drafter.to(model.dtype)
