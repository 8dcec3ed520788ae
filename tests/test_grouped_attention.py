"""Tree forwards on grouped key/value heads read in place give the logits of transformers' sdpa, and the
model's attention is sdpa again once the block ends."""

import pytest
import torch
from transformers import DynamicCache

from hf_treegen import DraftTree
from hf_treegen.target import tree_forward_inputs
from hf_treegen.target.compat import with_cache
from hf_treegen.target.grouped import GROUPED_SDPA, grouped_tree_attention, reads_grouped_heads
from hf_treegen.target.masks import attention_implementation
from tests.helpers import greedy_reference, random_prompts, tiny_drafter, tiny_target

PARENTS = [-1, 0, 0, 1, 1, 2, 3, 6]
TOKENS = [5, 9, 17, 9, 40, 9, 3, 77]


def tree_logits(model, prefix: torch.Tensor) -> torch.Tensor:
    """A prefill of ``prefix``, then one tree forward on top of it -> the tree rows' logits (N+1, V)."""
    cache = DynamicCache(config=model.config)
    tree = DraftTree(torch.tensor(TOKENS), torch.tensor(PARENTS), torch.zeros(len(TOKENS)))
    with torch.no_grad():
        model(input_ids=prefix, **with_cache(cache), use_cache=True)
        inputs = tree_forward_inputs(tree, prefix.shape[1], "sdpa", model.dtype, torch.device("cpu"))
        return model(**inputs, **with_cache(cache), use_cache=True).logits[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tree_logits_on_grouped_heads_equal_sdpa_bit_for_bit(arch, dtype):
    model = tiny_target(arch, dtype, "sdpa")
    assert reads_grouped_heads(model)  # 4 query heads on 2 key/value heads
    prefix = torch.randint(1, 256, (1, 37), generator=torch.Generator().manual_seed(3))
    reference = tree_logits(model, prefix)
    with grouped_tree_attention(model):
        assert model.config._attn_implementation == GROUPED_SDPA
        assert attention_implementation(model) == "sdpa"  # the masks it takes are sdpa's
        grouped = tree_logits(model, prefix)
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(grouped, reference)


def test_the_block_puts_sdpa_back_when_it_raises():
    model = tiny_target("llama", torch.float32, "sdpa")
    with pytest.raises(RuntimeError, match="inside"):
        with grouped_tree_attention(model):
            raise RuntimeError("inside")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("attn, kv_heads", [("eager", 2), ("sdpa", 4)], ids=["eager", "one_kv_head_per_head"])
def test_models_it_would_not_change_are_left_alone(attn, kv_heads):
    model = tiny_target("llama", torch.float32, attn)
    model.config.num_key_value_heads = kv_heads
    assert not reads_grouped_heads(model)
    with grouped_tree_attention(model):
        assert model.config._attn_implementation == attn


def test_tree_decoding_runs_its_forwards_on_grouped_heads_and_gives_sdpa_back():
    model = tiny_target("qwen3", torch.float32, "sdpa")
    seen = []
    hook = model.register_forward_pre_hook(lambda module, args: seen.append(module.config._attn_implementation))
    prompt = random_prompts(1, model.config.vocab_size, seed=4)[0]
    try:
        out = model.generate(prompt, assistant_model=tiny_drafter(model), tree_strategy="chain", max_new_tokens=12,
                             do_sample=False)
    finally:
        hook.remove()
    assert torch.equal(out, greedy_reference(model, prompt, 12))
    assert set(seen) == {GROUPED_SDPA}
    assert model.config._attn_implementation == "sdpa"
