"""Tree forwards that read grouped key/value heads in place (sdpa on a CPU).

With grouped-query attention several query heads share one key/value head. For a masked attention of
more than one query row, transformers' sdpa function first copies every shared head once per query
head that reads it (CUDA's fast kernels take no grouped heads with a mask), which is a copy of the whole
cache in every layer. Every tree forward is such an attention, so its cost grew with the context while
a plain step's (one row, which transformers already runs grouped) did not. On a CPU torch's sdpa reads
the grouped heads itself (``enable_gqa``) and returns the same numbers, bit for bit.

:func:`grouped_tree_attention` runs a block with the model's attention set to :data:`GROUPED_SDPA`:
transformers' sdpa for everything but masked multi-row attention on grouped heads, which it hands to
torch's sdpa unexpanded. It is registered through transformers' public ``AttentionInterface`` and set
with ``model.set_attn_implementation``; the block puts ``"sdpa"`` back however it ends.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

GROUPED_SDPA = "hf_treegen_grouped_sdpa"

# attention inputs that only transformers' own sdpa function knows how to apply
_DELEGATED_KWARGS = ("position_bias", "softcap", "s_aux")


def grouped_sdpa_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (B, H, Q, D), key and value (B, H_kv, K, D), a
    bool mask (B or 1, 1, Q, K) -> ((B, Q, H, D), None)."""
    grouped_masked_rows = (attention_mask is not None and attention_mask.dtype == torch.bool and query.shape[2] > 1
                           and key.shape[1] < query.shape[1]
                           and all(kwargs.get(name) is None for name in _DELEGATED_KWARGS))
    if not grouped_masked_rows:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)  # (B, H, Q, D)
    return out.transpose(1, 2).contiguous(), None


def reads_grouped_heads(model) -> bool:
    """Whether :func:`grouped_tree_attention` changes anything for ``model``: sdpa attention on a CPU,
    with fewer key/value heads than query heads."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    device = model.get_input_embeddings().weight.device
    # transformers keeps the implementation in a private config attribute and has no public getter
    return (getattr(config, "_attn_implementation", None) == "sdpa" and device.type == "cpu"
            and heads is not None and kv_heads < heads)


@contextlib.contextmanager
def grouped_tree_attention(model):
    """Run the block with ``model``'s attention on :data:`GROUPED_SDPA` where that changes anything
    (:func:`reads_grouped_heads`); a no-op elsewhere. Outputs are unchanged: only the copy goes."""
    if not reads_grouped_heads(model):
        yield
        return
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)  # the prompt's causal mask, as under sdpa
    model.set_attn_implementation(GROUPED_SDPA)
    try:
        yield
    finally:
        model.set_attn_implementation("sdpa")
