"""A lean hand-written autoregressive loop: the fairest baseline for speedups.

Stock generate() spends time on bookkeeping every step (processors, stopping criteria, streamer hooks).
Speculative methods are sometimes compared against a heavier baseline than users would write; this
loop is the minimum: one cached forward and one argmax (or sample) per token.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


@torch.no_grad()
def lean_generate(model, input_ids: torch.Tensor, max_new_tokens: int, eos_token_ids=(),
                  temperature: float = 0.0) -> torch.Tensor:
    """input_ids (1, T) -> (1, T + n); stops after an EOS token or ``max_new_tokens``."""
    cache = DynamicCache(config=model.config)
    eos = set(eos_token_ids or ())
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tokens = []
    for _ in range(max_new_tokens):
        logits = out.logits[0, -1].float()
        if temperature > 0:
            token = int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1))
        else:
            token = int(torch.argmax(logits))
        tokens.append(token)
        if token in eos or len(tokens) == max_new_tokens:
            break
        out = model(input_ids=input_ids.new_tensor([[token]]), past_key_values=cache, use_cache=True)
    return torch.cat([input_ids, input_ids.new_tensor([tokens])], dim=1)
