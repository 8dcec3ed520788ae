"""The shipped SmolLM2 Domino drafter: loads offline, is small, and every strategy equals stock greedy."""

import pytest
import torch

from hf_treegen.models import DEFAULT_DRAFTER_DIR, load_default_pair

pytestmark = pytest.mark.real_model

PROMPTS = ["Write a Python function that reverses a string.", "What is a Python decorator?",
           "Give me three tips for sleeping better."]


@pytest.fixture(scope="module")
def pair():
    return load_default_pair()


def test_shipped_files_are_bf16_and_small():
    from safetensors import safe_open

    path = DEFAULT_DRAFTER_DIR / "model.safetensors"
    assert path.stat().st_size <= 50 * 2**20
    with safe_open(str(path), "pt") as f:
        keys = list(f.keys())
        assert "prefix_gru.weight_ih_l0" in keys and "embed_proj.0.weight" in keys  # released Domino layout
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in keys if k != "draft_vocab")
        vocab = f.get_tensor("draft_vocab")  # the draft-to-target id map: int64 target ids
        assert vocab.dtype == torch.int64 and vocab.numel() == 8192 and bool((vocab[1:] > vocab[:-1]).all())


def test_shipped_drafter_carries_its_datastore(pair):
    model, _, drafter = pair
    store = drafter.datastore  # the target's answers to the drafter's training prompts
    assert store is not None and len(store) > 1_000_000 and store.max_token_id < model.config.vocab_size


@pytest.mark.parametrize("strategy", ["chain", "conditional", "static_corrected", "auto"])
def test_greedy_equals_stock(pair, strategy):
    import hf_treegen as htg

    model, tokenizer, drafter = pair
    for text in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        stock = htg.disable(model).generate(ids, max_new_tokens=24, do_sample=False)
        htg.enable(model)
        out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, tree_budget=16,
                             max_new_tokens=24, do_sample=False, return_dict_in_generate=True)
        assert out.sequences.tolist() == stock.tolist()
        assert out.tree_stats.tau > 1.0  # a trained drafter gets drafts accepted
