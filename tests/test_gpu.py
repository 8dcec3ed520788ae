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


def test_cuda_graph_builder_equals_the_reference_heap():
    from hf_treegen.builders import BuildSettings, ConditionalBuilder
    from hf_treegen.builders.conditional import conditional_heap
    from tests.builders.test_conditional import make_block

    model = tiny_target("llama", torch.float32, vocab=2048, hidden=64).to("cuda")
    drafter = tiny_domino(model, block_size=16).to("cuda")
    builder = ConditionalBuilder(BuildSettings(budget=16, topk=8, top_m=64, temperature=1.0, max_depth=16))
    graphs = set()
    for seed in range(10):
        block = make_block(drafter, seed, scale=2.0)  # random CPU logits and hidden rows, moved below
        block.logits, block.hidden, block.drafter = block.logits.cuda(), block.hidden.cuda(), drafter
        heap = conditional_heap(builder.scorer(block), 16, 8)
        fast = builder.nodes(block)
        graphs.add(id(builder._graph))
        assert [(p, t, d) for p, t, d, _ in heap] == [(p, t, d) for p, t, d, _ in fast]
        assert [s for *_, s in heap] == pytest.approx([s for *_, s in fast], abs=1e-4)
    assert builder._graph is not None and len(graphs) == 1  # captured once, replayed every round


def test_a_target_split_over_devices_decodes_exactly():
    """Layers over two GPUs where there are two, else one layer kept on the CPU and run on the GPU by
    accelerate's hooks: every strategy equals stock on the same split target."""
    accelerate = pytest.importorskip("accelerate")
    model = tiny_target("llama", dtype=torch.float32, layers=4)
    drafter = tiny_domino(model).to("cuda")
    last = 1 if torch.cuda.device_count() > 1 else "cpu"
    device_map = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.layers.0": 0, "model.layers.1": 0,
                  "model.layers.2": last, "model.layers.3": last, "model.norm": 0, "lm_head": 0}
    model = accelerate.dispatch_model(model, device_map=device_map, main_device=0)
    for ids in random_prompts(3, 256, seed=5):
        ids = ids[None].to("cuda") if ids.dim() == 1 else ids.to("cuda")
        stock = model.generate(ids, max_new_tokens=24, do_sample=False)
        for strategy in ("chain", "conditional", "auto"):
            out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=24,
                                 do_sample=False)
            assert out.tolist() == stock.tolist(), strategy
