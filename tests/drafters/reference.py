"""Drafters built, saved and run by z-lab's reference package (``dflash``)."""

from __future__ import annotations

import time

import dflash.model as reference
import torch
from transformers import Qwen3Config

from tests.fitting import fit_to_target  # noqa: F401  (the reference tests fit drafters with it)

# dflash_generate(return_stats=True) times itself with torch.cuda.synchronize; on a CPU-only torch that
# raises, so the reference's timer is swapped for a plain clock (its counts are what the tests read).
reference._cuda_time = time.perf_counter

DFLASH2_SIZES = {"conv_kernel_size": 3, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 6}


def reference_config(target, *, layers: int = 2, block_size: int = 5, tapped=(1, 3), dflash2: bool = False,
                     **extra) -> Qwen3Config:
    """A reference drafter config for ``target`` (a Qwen3 config with the DFlash fields, as z-lab writes
    it). ``extra`` goes into ``dflash_config`` (input_embedding_scale, output_multiplier, ...)."""
    t = target.config
    cfg = Qwen3Config(hidden_size=t.hidden_size, intermediate_size=2 * t.hidden_size, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=t.hidden_size // 4,
                      vocab_size=t.vocab_size, max_position_embeddings=1024, rms_norm_eps=1e-6,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      attention_bias=extra.pop("attention_bias", False))
    cfg.num_target_layers = t.num_hidden_layers
    cfg.block_size = block_size
    cfg.dflash_config = {"mask_token_id": t.vocab_size - 1, "target_layer_ids": list(tapped), **extra}
    if dflash2:
        cfg.dflash_config.update(DFLASH2_SIZES)
    return cfg


def reference_drafter(cfg: Qwen3Config, seed: int = 0, std: float = 0.2):
    """The reference model for ``cfg`` with random N(0, std) weights."""
    cls = reference.DFlash2DraftModel if "selector_rank" in cfg.dflash_config else reference.DFlashDraftModel
    torch.manual_seed(seed)
    model = cls(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model.eval()


class ReferenceRounds:
    """The reference's draft forward driven round by round, as ``dflash_generate`` drives it: each round
    adds the new context rows' features, drafts the block ``[anchor, MASK...]`` at ``start..``, and crops
    the draft cache back to the committed context."""

    def __init__(self, model, target):
        self.model, self.target = model, target
        self.cache = reference._make_cache(model.config)
        self.start = 0

    @torch.no_grad()
    def draft(self, features: torch.Tensor, anchor: int):
        """features (T, k*H) of the next T committed positions -> (hidden (L, H), logits (L, V))."""
        n, size = features.shape[0], self.model.block_size
        self.start += n
        block = torch.full((1, size), self.model.mask_token_id, dtype=torch.long)
        block[0, 0] = anchor
        scale = float(reference._draft_value(self.model.config, "input_embedding_scale", 1.0))
        noise = reference._raw_input_embeddings(self.target, block, scale)
        positions = torch.arange(self.start - n, self.start + size)[None]
        hidden = self.model(target_hidden=features[None], noise_embedding=noise, position_ids=positions,
                            past_key_values=self.cache, use_cache=True)[:, 1 - size:]
        reference._crop_to(self.cache, self.start)
        logits = self.model.compute_logits(hidden, reference._output_head(self.target))
        return hidden[0], logits[0]

    @torch.no_grad()
    def selector_path(self, hidden: torch.Tensor, anchor: int) -> list[int]:
        """DFlash2's greedy proposal for one block's hidden rows (L, H)."""
        tokens, _, _ = self.model.propose(hidden[None], torch.tensor([anchor]),
                                          reference._output_head(self.target), 0.0)
        return tokens[0].tolist()


def reference_generate(model, target, input_ids: torch.Tensor, max_new_tokens: int):
    """The reference chain loop, greedy: (output ids (1, T), tokens emitted per round)."""
    stats = reference.dflash_generate(model.to(target.dtype).eval(), target, input_ids, max_new_tokens,
                                      stop_token_ids=None, return_stats=True)
    return stats.output_ids, stats.acceptance_lengths
