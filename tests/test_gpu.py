"""CUDA checks, run by benchmarks/gpu_check.sh on a machine with a GPU (skipped elsewhere, never counted)."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select
from tests.helpers import bpe_tokenizer, random_prompts, tiny_domino, tiny_target

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("strategy", ["chain", "marginal", "static_corrected", "conditional", "cond_adaptive"])
def test_tree_greedy_equals_stock_on_cuda(strategy):
    model = tiny_target("llama", dtype=torch.float32).to("cuda")
    drafter = tiny_domino(model).to("cuda")
    for ids in random_prompts(8, 256, seed=3):
        ids = ids[None].to("cuda") if ids.dim() == 1 else ids.to("cuda")
        stock = htg.disable(model).generate(ids, max_new_tokens=24, do_sample=False)
        htg.enable(model)
        out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=24, do_sample=False)
        assert out.tolist() == stock.tolist()


def test_compiled_choice_equals_serial_on_cuda():
    tok = bpe_tokenizer()
    model = tiny_target("qwen3", dtype=torch.float32, vocab=320, std=0.15).to("cuda")
    model.generation_config.eos_token_id = tok.eos_token_id
    g = ChoiceGrammar(tok, ["[1]", "[2]", "[3]", "[12]", "alpha", "al"], 3)
    for seed in range(10):
        prompt = torch.randint(3, 300, (1, 8), generator=torch.Generator().manual_seed(seed)).to("cuda")
        assert compiled_select(model, prompt, g).token_ids == serial_select(model, prompt, g).token_ids
