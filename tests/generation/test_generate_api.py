"""generate() integration: stock when no tree_strategy, the generate() features honoured, bad input refused."""

import pytest
import torch
from transformers import DynamicCache
from transformers.generation.streamers import BaseStreamer

import hf_treegen as htg
from hf_treegen.hub import CUSTOM_GENERATE_DIR
from hf_treegen.target.compat import cache_of, with_cache
from tests.helpers import ScriptedDrafter, greedy_reference, random_prompts, tiny_drafter, tiny_target

PROMPT = torch.tensor([[5, 17, 42, 9, 77, 3]])


def oracle_for(model, prompt, noise=0.3, tokens=60, **kw):
    return ScriptedDrafter(model, greedy_reference(model, prompt, tokens, **kw), block_size=8, noise=noise)


def test_without_tree_strategy_generate_is_stock():
    model = tiny_target("llama")
    stock = htg.disable(tiny_target("llama"))
    assert type(stock).__name__ == type(model).__name__ == "LlamaForCausalLM"
    assert not isinstance(stock, htg.TreeGenerationMixin)
    assert torch.equal(model.generate(PROMPT, max_new_tokens=12, do_sample=False),
                       stock.generate(PROMPT, max_new_tokens=12, do_sample=False))
    torch.manual_seed(0)
    a = model.generate(PROMPT, max_new_tokens=12, do_sample=True)
    torch.manual_seed(0)
    b = stock.generate(PROMPT, max_new_tokens=12, do_sample=True)
    assert torch.equal(a, b)


def test_enable_is_idempotent_and_keeps_the_architecture_name(tmp_path):
    model = tiny_target("qwen3")
    cls = type(model)
    assert htg.enable(model) is model and type(model) is cls
    model.save_pretrained(tmp_path)
    assert '"Qwen3ForCausalLM"' in (tmp_path / "config.json").read_text()


def test_compacted_cache_after_many_rounds_equals_fresh_forward():
    model = tiny_target("qwen3", torch.float64)
    out = model.generate(PROMPT, assistant_model=oracle_for(model, PROMPT), tree_strategy="marginal",
                         max_new_tokens=40, do_sample=False, return_dict_in_generate=True)
    assert out.tree_stats.rounds > 3 and out.tree_stats.tau > 2
    fresh = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=out.sequences[:, :-1], **with_cache(fresh), use_cache=True)
    assert cache_of(out).get_seq_length() == out.sequences.shape[1] - 1
    for mine, ref in zip(cache_of(out).layers, fresh.layers):
        assert (mine.keys - ref.keys).abs().max() < 1e-12
        assert (mine.values - ref.values).abs().max() < 1e-12


def test_history_dependent_processors_apply_on_each_nodes_own_path():
    model = tiny_target("llama", torch.float64)
    kw = dict(repetition_penalty=1.5, no_repeat_ngram_size=2, min_new_tokens=5)
    for prompt in random_prompts(5, model.config.vocab_size, seed=4):
        ref = greedy_reference(model, prompt, 30, **kw)
        drafter = oracle_for(model, prompt, **kw)
        for strategy in ("chain", "marginal", "adaptive"):
            out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=30,
                                 do_sample=False, **kw)
            assert torch.equal(out, ref)


def test_scores_and_logits_match_stock():
    model = tiny_target("qwen3", torch.float64)
    kw = dict(max_new_tokens=20, do_sample=False, return_dict_in_generate=True, output_scores=True,
              output_logits=True, repetition_penalty=1.2)
    ref = model.generate(PROMPT, **kw)
    out = model.generate(PROMPT, assistant_model=oracle_for(model, PROMPT, repetition_penalty=1.2),
                         tree_strategy="marginal", **kw)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == 20
    for a, b in zip(out.scores + out.logits, ref.scores + ref.logits):
        assert torch.equal(a, b)
    assert out.tree_stats.new_tokens == 19  # the first token comes from the prefill


class Collect(BaseStreamer):
    def __init__(self):
        self.chunks, self.ended = [], False

    def put(self, value):
        self.chunks.append(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


def test_streamer_sees_the_prompt_then_every_token_once():
    model = tiny_target("llama")
    streamer = Collect()
    out = model.generate(PROMPT, assistant_model=oracle_for(model, PROMPT), tree_strategy="marginal",
                         max_new_tokens=25, do_sample=False, streamer=streamer)
    assert streamer.chunks[0] == PROMPT[0].tolist() and streamer.ended
    assert sum(streamer.chunks[1:], []) == out[0, PROMPT.shape[1]:].tolist()


def test_eos_token_id_list_is_honoured():
    model = tiny_target("qwen3")
    new = greedy_reference(model, PROMPT, 40)[0, PROMPT.shape[1]:].tolist()
    eos = [new[9], new[4]]
    ref = greedy_reference(model, PROMPT, 40, eos_token_id=eos)
    out = model.generate(PROMPT, assistant_model=oracle_for(model, PROMPT), tree_strategy="chain",
                         max_new_tokens=40, do_sample=False, eos_token_id=eos)
    assert torch.equal(out, ref) and out.shape[1] <= PROMPT.shape[1] + 10


def test_hub_style_custom_generate_folder_on_an_unmodified_model():
    model = htg.disable(tiny_target("qwen3"))
    ref = greedy_reference(model, PROMPT, 20)
    drafter = oracle_for(model, PROMPT)
    out = model.generate(PROMPT, custom_generate=CUSTOM_GENERATE_DIR, trust_remote_code=True,
                         assistant_model=drafter, tree_strategy="marginal", max_new_tokens=20, do_sample=False,
                         return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref) and out.tree_stats.tau > 1.5
    plain = model.generate(PROMPT, custom_generate=CUSTOM_GENERATE_DIR, trust_remote_code=True,
                           max_new_tokens=20, do_sample=False)
    assert torch.equal(plain, ref)



def test_custom_generate_shipped_inside_a_model_repo_takes_a_positional_prompt(tmp_path):
    """A repo holding custom_generate/ and loaded with trust_remote_code=True gets its generate replaced by
    functools.partial(generate, model=model): model.generate(ids, ...) passes the prompt positionally."""
    import shutil
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    model = htg.disable(tiny_target("qwen3"))
    model.save_pretrained(tmp_path)
    shutil.copytree(Path(CUSTOM_GENERATE_DIR) / "custom_generate", tmp_path / "custom_generate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shipped = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True, dtype=model.dtype).eval()
    assert not isinstance(shipped, htg.TreeGenerationMixin)
    ref = greedy_reference(model, PROMPT, 20)
    out = shipped.generate(PROMPT, assistant_model=oracle_for(shipped, PROMPT), tree_strategy="marginal",
                           max_new_tokens=20, do_sample=False, return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref) and out.tree_stats.tau > 1.5
    assert torch.equal(shipped.generate(PROMPT, max_new_tokens=20, do_sample=False), ref)
    assert torch.equal(shipped.generate(input_ids=PROMPT, max_new_tokens=20, do_sample=False), ref)

# ---------------------------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def pair():
    model = tiny_target("llama")
    return model, tiny_drafter(model)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(tree_strategy="dominotree"), ValueError, "valid strategies: chain, marginal, adaptive"),
    (dict(tree_strategy="marginal", tree_budget=0), ValueError, "tree_budget must be an int >= 1"),
    (dict(tree_strategy="marginal", tree_budget=2.5), ValueError, "tree_budget must be an int >= 1"),
    (dict(tree_strategy="marginal", tree_budget=100000), ValueError, "tree_budget=100000 is past what any tree"),
    (dict(tree_strategy="marginal", tree_temperature=-1.0), ValueError, "tree_temperature must be a number > 0"),
])
def test_bad_tree_kwargs(pair, kwargs, error, message):
    model, drafter = pair
    with pytest.raises(error, match=message):
        model.generate(PROMPT, assistant_model=drafter, max_new_tokens=4, **kwargs)


def test_tree_settings_without_strategy_or_drafter_are_refused(pair):
    model, drafter = pair
    with pytest.raises(ValueError, match="tree_budget given without tree_strategy"):
        model.generate(PROMPT, max_new_tokens=4, tree_budget=8)
    # with a drafter they go with the default strategy
    out = model.generate(PROMPT, assistant_model=drafter, max_new_tokens=4, tree_budget=2, return_dict_in_generate=True)
    assert out.tree_stats.strategy == "auto" and max(out.tree_stats.tree_sizes) <= 2


def test_a_prompt_of_the_wrong_shape_is_refused_with_a_clear_error(pair):
    model, drafter = pair
    with pytest.raises(ValueError, match=r"shape \(batch, prompt_length\); got shape \(1, 1, "):
        model.generate(PROMPT[None], assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)


def test_missing_or_foreign_drafter_is_refused(pair):
    model, _ = pair
    with pytest.raises(ValueError, match="needs a drafter"):
        model.generate(PROMPT, tree_strategy="chain", max_new_tokens=4)
    with pytest.raises(TypeError, match="hf_treegen drafter"):
        model.generate(PROMPT, assistant_model=tiny_target("llama"), tree_strategy="chain", max_new_tokens=4)


def test_flash_attention_target_is_refused(pair):
    _, drafter = pair
    model = tiny_target("llama")
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match=r"flash_attention_2.*\['sdpa', 'eager', 'flex_attention'\]"):
        model.generate(PROMPT, assistant_model=tiny_drafter(model), tree_strategy="chain", max_new_tokens=4)


def test_refusals_leave_no_hooks_behind(pair):
    model, drafter = pair
    batch = torch.cat([PROMPT, PROMPT])
    with pytest.raises(ValueError):  # right padding, refused once the call has started
        model.generate(batch, attention_mask=torch.ones_like(batch).index_fill(1, torch.tensor([2]), 0),
                       assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)
    assert all(not layer._forward_hooks for layer in model.model.layers)
    model.generate(PROMPT, assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)
    assert all(not layer._forward_hooks for layer in model.model.layers)


def test_head_shortcut_only_where_it_is_exactly_the_models_head():
    from hf_treegen.target.forward import HeadShortcut
    from hf_treegen.ops import linear_rows

    model = tiny_target("llama")
    hidden = torch.randn(1, model.config.hidden_size)
    own = model.lm_head(hidden).float()
    assert isinstance(HeadShortcut.if_exact(model, hidden, own), HeadShortcut)
    assert HeadShortcut.if_exact(model, hidden, 30 * torch.tanh(own / 30)) is None  # a soft-capping model
    assert HeadShortcut.if_exact(model, hidden, 2 * own) is None  # a model that scales its logits
    assert HeadShortcut.if_exact(model, None, own) is None
    torch.testing.assert_close(linear_rows(hidden.repeat(5, 1), model.lm_head.weight), own.repeat(5, 1))


def test_tree_settings_come_from_the_generation_config_and_call_kwargs_win(tmp_path):
    from transformers import GenerationConfig

    model = htg.enable(tiny_target("llama"))
    drafter = tiny_drafter(model)
    config = GenerationConfig(max_new_tokens=12, do_sample=False, tree_strategy="chain", tree_budget=2)
    config.save_pretrained(tmp_path)
    model.generation_config = GenerationConfig.from_pretrained(tmp_path)  # saved and loaded like any setting
    ref = htg.disable(tiny_target("llama")).generate(PROMPT, max_new_tokens=12, do_sample=False)
    out = model.generate(PROMPT, assistant_model=drafter, return_dict_in_generate=True)
    assert out.tree_stats.strategy == "chain" and max(out.tree_stats.tree_sizes) <= 2
    assert torch.equal(out.sequences, ref)
    out = model.generate(PROMPT, assistant_model=drafter, tree_strategy="marginal", tree_budget=3,
                         return_dict_in_generate=True)
    assert out.tree_stats.strategy == "marginal" and max(out.tree_stats.tree_sizes) <= 3
    # a strategy in the config with no drafter in the call: a clear error, not a silent stock run
    with pytest.raises(ValueError, match="generation_config"):
        model.generate(PROMPT)


def test_a_drafter_without_tree_strategy_runs_auto():
    model = htg.enable(tiny_target("llama"))
    out = model.generate(PROMPT, assistant_model=tiny_drafter(model), max_new_tokens=8, do_sample=False,
                         return_dict_in_generate=True)
    assert out.tree_stats.strategy == "auto"
    assert torch.equal(out.sequences, htg.disable(tiny_target("llama")).generate(PROMPT, max_new_tokens=8,
                                                                                  do_sample=False))


def test_inputs_embeds_are_refused_with_tree_decoding():
    model = htg.enable(tiny_target("llama"))
    drafter = tiny_drafter(model)
    embeds = model.get_input_embeddings()(PROMPT)
    with pytest.raises(ValueError, match="needs input_ids"):
        model.generate(inputs_embeds=embeds, assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)
    with pytest.raises(ValueError, match="instead of inputs_embeds"):
        model.generate(PROMPT, inputs_embeds=embeds, assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)
    # without a tree strategy and drafter, embeddings go to stock generate() as before
    assert model.generate(inputs_embeds=embeds, max_new_tokens=3, do_sample=False).shape == (1, 3)


def test_scores_and_logits_in_fp32_are_stock_within_float_rounding():
    model = tiny_target("qwen3", torch.float32)
    kw = dict(max_new_tokens=16, do_sample=False, return_dict_in_generate=True, output_scores=True,
              output_logits=True)
    ref = model.generate(PROMPT, **kw)
    out = model.generate(PROMPT, assistant_model=oracle_for(model, PROMPT), tree_strategy="marginal", **kw)
    assert torch.equal(out.sequences, ref.sequences)
    for a, b in zip(out.scores + out.logits, ref.scores + ref.logits):
        # tree rows and single-token steps sum in a different order: equal up to fp32 rounding
        assert torch.allclose(a, b, rtol=0, atol=1e-4 * (1 + float(b.abs().max())))


@pytest.mark.parametrize("limit", [{"max_new_tokens": 2}, {"max_length": PROMPT.shape[1] + 2}])
def test_the_last_token_of_a_call_is_a_plain_step(limit):
    """With one token left to make a tree can only cost more: the round is the root alone, even for a
    strategy that drafts every round, and even with a drafter that would be right."""
    model = tiny_target("llama")
    drafter = oracle_for(model, PROMPT, noise=0.0)
    out = model.generate(PROMPT, assistant_model=drafter, tree_strategy="chain", do_sample=False,
                         return_dict_in_generate=True, **limit)
    assert torch.equal(out.sequences, greedy_reference(model, PROMPT, 2))
    assert out.tree_stats.rounds == out.tree_stats.plain_steps == 1
    longer = model.generate(PROMPT, assistant_model=drafter, tree_strategy="chain", do_sample=False,
                            max_new_tokens=12, return_dict_in_generate=True)
    assert torch.equal(longer.sequences, greedy_reference(model, PROMPT, 12))
    assert longer.tree_stats.rounds > longer.tree_stats.plain_steps  # earlier rounds draft
