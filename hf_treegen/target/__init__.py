"""Everything that touches the target model: its forwards, its KV cache, hooks on its layers, and the
attention masks those forwards take. No other module of the core calls the target directly (the
drafter-training pipeline runs its own batched forwards in :mod:`hf_treegen.train.features`).

    masks     tree attention masks per backend; which backends can take them
    compat    the KV cache's name in this transformers release
    cache     keeping accepted rows after a verify, cropping after a probe
    hooks     layer-output taps (drafter features) and the final hidden row
    forward   the prefills, the tree verify, the choice probes and serial replays, stock generate()
    packed    the target's linear layers on oneDNN's packed weights (CPU), while a block runs
    grouped   tree forwards' attention reading grouped key/value heads in place (sdpa on a CPU), while a block runs
    batch     a batch of sequences: the prompts' and the trees' 4-D masks, each sequence's cache rows
"""

from .cache import check_cache_supports_trees, crop_to, keep_cache_rows, new_cache
from .compat import CACHE_NAME, cache_in, cache_of, with_cache
from .forward import (TreeVerifier, chunk_forward, decode_prefill, forward_paths, fused_tree_logits, logit_dtype,
                      next_logits, prefill, serial_logits, stock_generate, tree_logits)
from .grouped import grouped_tree_attention
from .hooks import FeatureTap, LastHidden, decoder_layers, is_sharded
from .packed import clear_packed_linears, default_linears, packing_for, packed_linears
from .masks import attention_implementation, takes_tree_masks, tree_attention_mask, tree_forward_inputs

__all__ = ["CACHE_NAME", "cache_in", "cache_of", "next_logits", "with_cache", "FeatureTap", "LastHidden", "TreeVerifier", "attention_implementation", "check_cache_supports_trees",
           "chunk_forward", "crop_to", "decode_prefill", "decoder_layers", "forward_paths", "grouped_tree_attention", "is_sharded", "fused_tree_logits",
           "keep_cache_rows", "logit_dtype", "new_cache", "default_linears", "packing_for", "packed_linears", "clear_packed_linears", "prefill", "serial_logits", "stock_generate",
           "takes_tree_masks", "tree_attention_mask", "tree_forward_inputs", "tree_logits"]
