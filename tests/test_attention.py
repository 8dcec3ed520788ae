"""One tree forward gives every node the logits of its own path; compaction keeps a valid cache."""

import pytest
import torch
from transformers import DynamicCache

from hf_treegen import DraftTree
from hf_treegen.target import attention_implementation, keep_cache_rows, tree_forward_inputs
from hf_treegen.target.compat import with_cache
from tests.helpers import tiny_target

# parents and tokens with a repeated token id at different depths and shared prefixes
PARENTS = [-1, 0, 0, 1, 1, 2, 3, 6]
TOKENS = [5, 9, 17, 9, 40, 9, 3, 77]
TOLERANCE = {torch.float64: 1e-12, torch.float32: 5e-5}


def prefill(model, prefix):
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=prefix, **with_cache(cache), use_cache=True)
    return cache


# FlexAttention on CPU supports fp32/fp16/bf16 only, so it is checked in fp32.
COMBOS = [("sdpa", torch.float32), ("sdpa", torch.float64), ("eager", torch.float32), ("eager", torch.float64),
          ("flex_attention", torch.float32)]


@pytest.mark.parametrize("attn, dtype", COMBOS, ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tree_logits_equal_serial_path_logits(arch, dtype, attn):
    # eager computes its softmax in float32 even for fp64 models, so it is only float32-accurate
    tolerance = TOLERANCE[torch.float32] if attn == "eager" else TOLERANCE[dtype]
    model = tiny_target(arch, dtype, attn)
    prefix = torch.randint(1, 256, (1, 10), generator=torch.Generator().manual_seed(0))
    tree = DraftTree(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.zeros(len(TOKENS)))
    cache = prefill(model, prefix)
    impl = attention_implementation(model)
    with torch.no_grad():
        logits = model(**tree_forward_inputs(tree, 10, impl, dtype, torch.device("cpu")),
                       **with_cache(cache), use_cache=True).logits[0]
        ref_model = tiny_target(arch, dtype, "sdpa")
        for node in range(tree.num_nodes):
            path = tree.tokens[tree.path_to(node)]
            serial = ref_model(input_ids=torch.cat([prefix, path[None]], dim=1)).logits[0, -1]
            assert (logits[node] - serial).abs().max() < tolerance, f"node {node}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_compacted_cache_equals_fresh_forward(dtype):
    model = tiny_target("qwen3", dtype, "sdpa")
    prefix = torch.randint(1, 256, (1, 10), generator=torch.Generator().manual_seed(1))
    tree = DraftTree(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.zeros(len(TOKENS)))
    cache = prefill(model, prefix)
    impl = attention_implementation(model)
    keep = tree.path_to(7)  # 0 -> 1 -> 3 -> 6 -> 7
    with torch.no_grad():
        model(**tree_forward_inputs(tree, 10, impl, dtype, torch.device("cpu")), **with_cache(cache), use_cache=True)
        keep_cache_rows(cache, 10, torch.tensor(keep))
        fresh = prefill(model, torch.cat([prefix, tree.tokens[keep][None]], dim=1))
    assert cache.get_seq_length() == 10 + len(keep)
    for mine, ref in zip(cache.layers, fresh.layers):
        assert (mine.keys - ref.keys).abs().max() < TOLERANCE[dtype]
        assert (mine.values - ref.values).abs().max() < TOLERANCE[dtype]


def test_flash_attention_is_refused_with_the_working_list():
    model = tiny_target("llama", torch.float32, "sdpa")
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match=r"sdpa.*eager.*flex_attention"):
        attention_implementation(model)
