"""Targets split with accelerate's device_map (some layers offloaded to disk, whose weights accelerate's
hooks load for each forward): every strategy's greedy output equals stock generate() on the same split
target, a batch's rows equal each prompt alone, compiled choice equals serial, and calibration runs."""

import pytest
import torch

import hf_treegen as htg
from hf_treegen.bench.offload import offload_layers
from hf_treegen.builders import DFLASH_STRATEGIES, STRATEGIES
from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select
from tests.helpers import bpe_tokenizer, random_prompts, tiny_domino, tiny_drafter, tiny_target

accelerate = pytest.importorskip("accelerate")

NEW_TOKENS = 24
PROFILE = htg.CostProfile.from_verify_seconds({1: 0.060, 9: 0.080, 17: 0.110})


def split(model, offload_dir, offloaded=(-1,)):
    """``model`` dispatched with the layers at ``offloaded`` (indices) on disk and the rest on the CPU."""
    return offload_layers(model, offloaded, offload_dir)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """(arch, split target, its DFlash drafter, its Domino drafter), drafters made before the split."""
    out = []
    for arch in ("llama", "qwen3"):
        model = tiny_target(arch, torch.float64)
        dflash, domino = tiny_drafter(model), tiny_domino(model)
        out.append((arch, split(model, tmp_path_factory.mktemp(arch)), dflash, domino))
    return out


def test_the_split_really_offloads(targets):
    for _, model, _, _ in targets:
        on_meta = [name for name, p in model.named_parameters() if p.device.type == "meta"]
        assert on_meta and all(".layers." in name for name in on_meta)


def test_a_split_target_keeps_its_own_calibration(targets):
    from hf_treegen.calibration import placement_tag, profile_key

    _, model, dflash, _ = targets[0]
    whole = tiny_target("llama", torch.float64)
    assert placement_tag(whole) == "" and placement_tag(model) == "map-cpu5-disk1"  # 2 layers, one on disk
    assert profile_key(model, dflash) == profile_key(whole, dflash).replace("-drafter", "-map-cpu5-disk1-drafter")


def test_every_strategy_equals_stock_on_the_split_target(targets):
    for arch, model, dflash, domino in targets:
        for prompt in random_prompts(2, model.config.vocab_size, seed=51, min_len=3, max_len=9):
            ref = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
            for drafter, strategies in ((dflash, DFLASH_STRATEGIES), (domino, STRATEGIES)):
                for strategy in strategies:
                    out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, tree_lookup=4,
                                         tree_costs=PROFILE, max_new_tokens=NEW_TOKENS, do_sample=False)
                    assert torch.equal(out, ref), f"{arch} {strategy} on {prompt.tolist()}"


def test_a_batch_on_the_split_target_equals_each_prompt_alone(targets):
    _, model, _, domino = targets[0]
    prompts = random_prompts(3, model.config.vocab_size, seed=52, min_len=2, max_len=10)
    width = max(p.shape[1] for p in prompts)
    ids = torch.stack([torch.cat([torch.zeros(width - p.shape[1], dtype=torch.long), p[0]]) for p in prompts])
    mask = (torch.arange(width)[None] >= torch.tensor([width - p.shape[1] for p in prompts])[:, None]).long()
    out = model.generate(ids, attention_mask=mask, assistant_model=domino, tree_strategy="conditional",
                         max_new_tokens=NEW_TOKENS, do_sample=False)
    for row, prompt in enumerate(prompts):
        alone = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False)
        assert torch.equal(out[row, width:width + NEW_TOKENS], alone[0, prompt.shape[1]:])


def test_compiled_choice_equals_serial_on_a_split_target(tmp_path):
    tok = bpe_tokenizer()
    model = tiny_target("llama", torch.float64, vocab=320, std=0.15)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model = split(model, tmp_path, offloaded=(0,))
    grammar = ChoiceGrammar(tok, ["[1]", "[2]", "[3]", "[12]", "alpha", "al"], 3, separator=", ")
    for seed in range(4):
        prompt = torch.randint(3, len(tok), (1, 6 + seed), generator=torch.Generator().manual_seed(seed))
        assert compiled_select(model, prompt, grammar).indices == serial_select(model, prompt, grammar).indices


def test_calibration_measures_a_split_target(targets):
    from hf_treegen.calibration import calibrate as real_calibrate

    _, model, dflash, _ = targets[0]
    profile = real_calibrate(model, dflash, max_rows=9, context=32, use_cache=False, progress=False)
    assert profile.max_rows >= 9 and profile.round_seconds(8) > profile.step_seconds() > 0


@pytest.mark.real_model
def test_smollm2_with_layers_on_disk_decodes_and_chooses_exactly(tmp_path):
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.models import load_default_pair

    model, tokenizer, drafter = load_default_pair()
    model = offload_layers(model, (0, 14, -1), tmp_path)  # the first, a middle and the last layer on disk
    for text in ("Write a Python function that reverses a string.", "Give me three tips for sleeping better."):
        ids = render_chat(tokenizer, text)
        ref = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        for strategy in ("conditional", "auto"):
            out = model.generate(ids, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=NEW_TOKENS,
                                 do_sample=False)
            assert torch.equal(out, ref), f"{strategy} on {text!r}"
    grammar = ChoiceGrammar(tokenizer, ["[1]", "[2]", "[3]", "[4]", "[5]"], 2, separator=", ")
    prompt = render_chat(tokenizer, "Which two of these paragraphs are about cooking? [1] pasta [2] taxes "
                                    "[3] baking bread [4] rain [5] chess. Answer with two labels.")
    assert compiled_select(model, prompt, grammar).indices == serial_select(model, prompt, grammar).indices
