"""A lean hand-written autoregressive loop: the fairest baseline for speedups.

Stock generate() spends time on bookkeeping every step (processors, stopping criteria, streamer hooks).
Speculative methods are sometimes compared against a heavier baseline than users would write; this
loop is the minimum: one cached forward and one argmax (or sample) per token.
"""

from __future__ import annotations

import torch

from ..target import new_cache, next_logits


@torch.no_grad()
def lean_generate(model, input_ids: torch.Tensor, max_new_tokens: int, eos_token_ids=(),
                  temperature: float = 0.0) -> torch.Tensor:
    """input_ids (1, T) -> (1, T + n); stops after an EOS token or ``max_new_tokens``."""
    cache = new_cache(model)
    eos = set(eos_token_ids or ())
    logits = next_logits(model, input_ids, cache)
    tokens = []
    for _ in range(max_new_tokens):
        logits = logits.float()
        if temperature > 0:
            token = int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1))
        else:
            token = int(torch.argmax(logits))
        tokens.append(token)
        if token in eos or len(tokens) == max_new_tokens:
            break
        logits = next_logits(model, input_ids.new_tensor([[token]]), cache)
    return torch.cat([input_ids, input_ids.new_tensor([tokens])], dim=1)
