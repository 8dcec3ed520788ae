"""Tier 3: the real SmolLM2-135M-Instruct target (fp32) with a random Domino drafter."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen.builders import STRATEGIES

pytestmark = pytest.mark.real_model

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Write one sentence about the sea.",
]


@pytest.fixture(scope="module")
def smollm2():
    from hf_treegen.models import load_smollm2

    model, tokenizer = load_smollm2(torch.float32)
    model = htg.enable(model)
    # a random Domino drafter runs every strategy (the DFlash ones use its base logits)
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=8, projector_type="domino",
                                       emb_dim=64, gru_hidden_dim=128)
    torch.manual_seed(0)
    drafter = htg.DominoDrafter(cfg, target=model).eval()
    return model, tokenizer, drafter


def chat_ids(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)["input_ids"]


def test_every_strategy_matches_stock_greedy(smollm2):
    model, tokenizer, drafter = smollm2
    for text in PROMPTS:
        ids = chat_ids(tokenizer, text)
        ref = model.generate(ids, max_new_tokens=24, do_sample=False)
        for strategy in STRATEGIES:
            out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=24,
                                 do_sample=False, return_dict_in_generate=True)
            assert torch.equal(out.sequences, ref), (text, strategy, tokenizer.decode(out.sequences[0]))


def test_stop_strings_match_stock(smollm2):
    model, tokenizer, drafter = smollm2
    ids = chat_ids(tokenizer, "List three colours, separated by commas.")
    kw = dict(max_new_tokens=40, do_sample=False, stop_strings=[": "], tokenizer=tokenizer)
    ref = model.generate(ids, **kw)
    out = model.generate(ids, assistant_model=drafter, tree_strategy="marginal", **kw)
    assert torch.equal(out, ref)
    assert tokenizer.decode(out[0, ids.shape[1]:]).endswith(": ")
    with pytest.raises(ValueError, match="tokenizer"):
        model.generate(ids, assistant_model=drafter, tree_strategy="marginal", max_new_tokens=4, stop_strings=[": "])
