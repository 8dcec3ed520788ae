"""Our DFlash drafters as the assistant of transformers' own DFlash route
(``generate(..., assistant_model=..., speculation_type="dflash")``, a chain verified by transformers'
assisted decoding), so the two loops can be compared on the same weights.

transformers drafts with ``assistant(noise_embeds, context_hidden_states, position_ids, attention_mask,
cache)``: the block's embeddings, the tapped features of the tokens accepted since the last call, and
the positions of both. It reads ``last_hidden_state[:, 1:]`` through the target's own LM head, so only a
plain DFlash drafter that predicts with its mask rows and applies no logit or embedding scaling fits.
The adapter keeps the drafter's context in a :class:`~hf_treegen.drafters.dflash.DraftSession`; the
route's own cache object is left unused.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import transformers
from packaging.version import Version
from torch import nn
from transformers import Qwen3Config

from ..drafters.dflash import DFlashDrafter


MIN_TRANSFORMERS = Version("5.25")


class TransformersDFlashAssistant(nn.Module):
    """Wraps a :class:`~hf_treegen.DFlashDrafter` for ``speculation_type="dflash"``. Build one per
    ``generate()`` call (it holds that call's drafter context)."""

    def __init__(self, drafter: DFlashDrafter):
        super().__init__()
        if Version(transformers.__version__) < MIN_TRANSFORMERS:  # older routes need the assistant to fill their cache
            raise ValueError(f"transformers' DFlash route runs our drafters from transformers {MIN_TRANSFORMERS} on; "
                             f"this is {transformers.__version__}.")
        cfg = drafter.config
        why = _unfit(cfg)
        if why:
            raise ValueError(f"transformers' DFlash route cannot run this drafter ({cfg.describe()}): {why}.")
        self.drafter = drafter
        self.config = Qwen3Config(hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
                                  num_attention_heads=cfg.num_attention_heads,
                                  num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                                  vocab_size=cfg.vocab_size)
        self.config.target_layer_ids = list(cfg.target_layer_ids)
        self.config.block_size = cfg.block_size
        self.config.mask_token_id = cfg.mask_token_id
        self.session = drafter.new_session()

    @property
    def device(self) -> torch.device:
        return self.drafter.fc.weight.device

    @torch.no_grad()
    def forward(self, noise_embeds, context_hidden_states, position_ids, attention_mask=None, **cache):
        """noise_embeds (1, B, H), context_hidden_states (1, n, k*H), position_ids (1, n + B) ->
        ``last_hidden_state`` (1, B, H), the drafter's final-norm rows. The route's cache goes unused."""
        n = context_hidden_states.shape[1]
        positions = position_ids[0].cpu()
        self.session.extend(context_hidden_states[0], positions[:n])
        x = noise_embeds[0].to(self.drafter.dtype)  # (B, H)
        hidden = type(self.session).run_blocks([self.session], x, [int(positions[n])])  # (B, H)
        return SimpleNamespace(last_hidden_state=hidden[None])


def _unfit(cfg) -> str | None:
    """Why transformers' route cannot draft with ``cfg`` (None when it can)."""
    if cfg.family != "dflash":
        return "its sequential head has no place there (the route takes each depth's argmax)"
    if cfg.shift_label:
        return "its block rows predict the next token (shift_label), the route reads the mask rows"
    if cfg.draft_vocab_size is not None:
        return "it drafts over a reduced vocabulary, the route scores the whole LM head"
    if (cfg.input_embedding_scale, cfg.output_multiplier, cfg.final_logit_softcapping) != (1.0, 1.0, None):
        return "it scales its embeddings or logits, which the route does not"
    return None
