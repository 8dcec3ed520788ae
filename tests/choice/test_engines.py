"""Compiled == chunked == serial (stock generate() with the serial processor), token for token."""

import random

import pytest
import torch
from transformers.generation.stopping_criteria import MaxTimeCriteria, StoppingCriteriaList

import hf_treegen as htg
from hf_treegen.choice import ChoiceGrammar, chunked_select, compiled_select, serial_select
from hf_treegen.choice.probe import build_probe
from hf_treegen.target import fused_tree_logits, prefill, serial_logits, tree_logits
from hf_treegen.target.compat import with_cache
from tests.helpers import bpe_tokenizer, tiny_target

# shared prefixes ([1] / [12] / [11]; al / alpha) and spellings that are prefixes of others (al / alpha)
POOL = ["[1]", "[2]", "[3]", "[4]", "[5]", "[6]", "[7]", "[8]", "[11]", "[12]", "alpha", "al", "beta",
        "gamma", "methods", "results", "data", "model", "intro"]


@pytest.fixture(scope="module")
def tok():
    return bpe_tokenizer()


def case(seed: int, tok):
    rng = random.Random(seed)
    k = rng.randint(2, 12)
    b = rng.randint(1, min(k, 4))
    labels = rng.sample(POOL, k)
    prompt = torch.tensor([[rng.randrange(3, len(tok)) for _ in range(rng.randint(3, 14))]])
    terminator = rng.choice([None, "\n"])
    return ChoiceGrammar(tok, labels, b, separator=", ", terminator=terminator), prompt


def _model(arch, dtype, attn, tok):
    model = tiny_target(arch, dtype=dtype, attn=attn, vocab=320, std=0.15)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("dtype, attn", [(torch.float64, "sdpa"), (torch.float32, "sdpa"),
                                         (torch.float32, "eager"), (torch.float64, "eager")])
def test_compiled_equals_serial(tok, arch, dtype, attn):
    model = _model(arch, dtype, attn, tok)
    for seed in range(30):
        g, prompt = case(seed, tok)
        serial = serial_select(model, prompt, g)
        compiled = compiled_select(model, prompt, g)
        assert compiled.token_ids == serial.token_ids, (seed, g.choices, serial.labels, compiled.labels)
        assert chunked_select(model, prompt, g).token_ids == serial.token_ids
        narrow = compiled_select(model, prompt, g, width=1)
        assert narrow.token_ids == serial.token_ids
        if seed < 8:
            assert compiled_select(model, prompt, g, width="auto").token_ids == serial.token_ids
        # no guard and no fallback: the prefill plus one probe (or none when all was decided at the root)
        if compiled.guarded == 0:
            assert compiled.forwards == 1 + compiled.rounds and compiled.rounds <= 1
        assert serial.forwards == len(serial.token_ids)


def test_narrow_probes_fall_back_and_stay_exact(tok):
    model = _model("qwen3", torch.float64, "sdpa", tok)
    fallbacks = 0
    for seed in range(40):
        g, prompt = case(seed, tok)
        narrow = compiled_select(model, prompt, g, width=1)
        assert narrow.token_ids == serial_select(model, prompt, g).token_ids
        fallbacks += narrow.fallbacks
        if not narrow.guarded:
            assert narrow.forwards == 1 + narrow.rounds
    assert fallbacks > 0  # the unary order is often wrong on a random model: fallback rounds fire


def test_two_dependent_forwards_when_no_fallback(tok):
    model = _model("llama", torch.float64, "sdpa", tok)
    g = ChoiceGrammar(tok, ["[1]", "[2]", "[3]", "[4]", "[5]"], 3)
    result = compiled_select(model, torch.tensor([[5, 6, 7, 8]]), g, fuse=False)
    assert (result.forwards, result.rounds, result.fallbacks, result.guarded) == (2, 1, 0, 0)
    assert len(result.labels) == 3 and len(set(result.labels)) == 3
    assert result.probe_tokens > result.probe_rows > 0


def test_forced_start_rides_with_the_prefill(tok):
    # "[" starts every label: it goes in with the prompt, so b = 1 needs the prefill alone
    model = _model("llama", torch.float64, "sdpa", tok)
    g = ChoiceGrammar(tok, ["[1]", "[2]", "[3]", "[4]", "[5]"], 1)
    prompt = torch.tensor([[5, 6, 7, 8]])
    result = compiled_select(model, prompt, g)
    assert result.forwards == 1 and result.rounds == 0
    assert result.token_ids == serial_select(model, prompt, g).token_ids
    assert chunked_select(model, prompt, g).forwards == 1


def test_probe_rows_match_serial_logits_fp64(tok):
    """Prefix-state: every probe row's logits equal the serial logits after that row's path."""
    model = _model("qwen3", torch.float64, "sdpa", tok)
    g = ChoiceGrammar(tok, ["[1]", "[12]", "alpha", "al", "beta"], 2)
    prompt = torch.tensor([[9, 40, 41, 50, 51, 60]])
    root, cache = prefill(model, prompt)
    first = g.allowed(g.initial)[0]
    probe = build_probe(g, (first,))
    logits, index = tree_logits(model, cache, prompt.shape[1], probe.tree, probe.decision_rows), probe.logit_index()
    assert logits.shape[0] == probe.num_decisions < probe.num_tokens  # forced rows skip the LM head
    for path, row in probe.rows.items():
        if row not in index:
            continue
        want = serial_logits(model, cache, prompt.shape[1], path)
        assert torch.allclose(logits[index[row]], want, atol=1e-12, rtol=0), path
    assert cache.get_seq_length() == prompt.shape[1]  # probes and replays leave the prompt cache as it was


def _probe_logits(model, prompt, g, tokens=None, positions=None):
    from hf_treegen.target import tree_attention_mask

    root, cache = prefill(model, prompt)
    probe = build_probe(g, (g.allowed(g.initial)[0],))
    P = prompt.shape[1]
    ids = probe.tree.tokens[None].clone() if tokens is None else tokens
    pos = probe.tree.position_ids(P)[None] if positions is None else positions
    mask = tree_attention_mask(probe.tree.ancestor_mask(), P, "sdpa", model.dtype, model.device)
    with torch.no_grad():
        return probe, model(input_ids=ids, position_ids=pos, attention_mask=mask, **with_cache(cache)).logits[0]


def test_siblings_do_not_leak_but_positions_matter(tok):
    model = _model("llama", torch.float64, "sdpa", tok)
    g = ChoiceGrammar(tok, ["[1]", "[2]", "[3]", "[4]"], 2)
    prompt = torch.tensor([[9, 40, 41, 50]])
    probe, base = _probe_logits(model, prompt, g)
    parents = probe.tree.parents.tolist()
    siblings = [i for i in range(1, len(parents)) if parents.count(parents[i]) > 1]
    assert len(siblings) >= 2
    changed, kept = siblings[0], siblings[1]
    tokens = probe.tree.tokens[None].clone()
    tokens[0, changed] = (tokens[0, changed] + 7) % 300
    _, perturbed = _probe_logits(model, prompt, g, tokens=tokens)
    assert torch.equal(perturbed[kept], base[kept])  # a sibling's token never reaches this row
    assert not torch.allclose(perturbed[changed], base[changed])
    positions = probe.tree.position_ids(prompt.shape[1])[None].clone()
    positions[0, 1:] = positions[0, 1:].flip(0)
    _, shuffled = _probe_logits(model, prompt, g, positions=positions)
    assert not torch.allclose(shuffled, base, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_guard_makes_bf16_agree(tok, dtype):
    model = _model("llama", dtype, "sdpa", tok)
    guarded = 0
    for seed in range(30):
        g, prompt = case(seed, tok)
        serial = serial_select(model, prompt, g)
        compiled = compiled_select(model, prompt, g)
        guarded += compiled.guarded
        assert compiled.token_ids == serial.token_ids, seed
    assert guarded > 0  # bf16 near-ties exist and the guard re-decided them


def test_generate_drop_in(tok):
    model = htg.disable(_model("llama", torch.float32, "sdpa", tok))  # a stock model: nothing to enable
    proc = htg.CompiledChoiceProcessor(tok, ["[1]", "[2]", "[3]", "alpha", "al"], 2, terminator="\n")
    prompt = torch.tensor([[9, 40, 41, 50, 51]])
    compiled = model.generate(prompt, logits_processor=[proc], custom_generate=proc.compiled_generate,
                              max_new_tokens=20, do_sample=False)
    stock = model.generate(prompt, logits_processor=[proc], max_new_tokens=20, do_sample=False)
    assert compiled.tolist() == stock.tolist()
    assert compiled[0, -1] == tok.eos_token_id
    # a truncating max_new_tokens truncates the same way; the dict form carries the same ids
    short = model.generate(prompt, logits_processor=[proc], custom_generate=proc.compiled_generate,
                           max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    assert short.sequences.tolist() == stock[:, : prompt.shape[1] + 3].tolist()


@pytest.mark.parametrize("settings, message", [
    (dict(do_sample=True), "decides greedily"),
    (dict(repetition_penalty=1.3), "RepetitionPenaltyLogitsProcessor"),
    (dict(stopping_criteria=StoppingCriteriaList([MaxTimeCriteria(60.0)])), "MaxTimeCriteria"),
    (dict(eos_token_id=3), "would not stop"),
    (dict(input_ids=torch.tensor([[9, 40, 41], [9, 40, 42]])), "one unpadded prompt"),
])
def test_compiled_generate_refuses_what_it_would_not_reproduce(tok, settings, message):
    model = htg.disable(_model("llama", torch.float32, "sdpa", tok))
    proc = htg.CompiledChoiceProcessor(tok, ["[1]", "[2]", "[3]"], 1, terminator="\n")
    settings = dict(settings)
    prompt = settings.pop("input_ids", torch.tensor([[9, 40, 41, 50, 51]]))
    with pytest.raises(ValueError, match=message):
        model.generate(prompt, logits_processor=[proc], custom_generate=proc.compiled_generate, max_new_tokens=8,
                       **{"do_sample": False, **settings})


def test_flash_attention_falls_back_to_serial(tok):
    model = _model("llama", torch.float32, "sdpa", tok)
    proc = htg.CompiledChoiceProcessor(tok, ["[1]", "[2]", "[3]"], 1)
    model.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.warns(UserWarning, match="deciding serially"):
            assert not __import__("hf_treegen.choice.processors", fromlist=["x"]).probe_capable(model)
    finally:
        model.config._attn_implementation = "sdpa"


def test_prompt_longer_than_context(tok):
    model = _model("llama", torch.float32, "sdpa", tok)
    g = ChoiceGrammar(tok, ["[1]", "[2]"], 1)
    with pytest.raises(ValueError, match="past the model's context"):
        compiled_select(model, torch.ones(1, 1020, dtype=torch.long), g)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_fused_prefill_equals_serial(tok, attn):
    model = _model("qwen3", torch.float64, attn, tok)
    for seed in range(20):
        g, prompt = case(seed, tok)
        fused = compiled_select(model, prompt, g, fuse=True)
        assert fused.token_ids == serial_select(model, prompt, g).token_ids, seed
        if fused.width == "fused" and not fused.guarded:
            assert fused.forwards == 1


def test_fused_rows_match_serial_logits(tok):

    model = _model("llama", torch.float64, "sdpa", tok)
    g = ChoiceGrammar(tok, ["[1]", "[12]", "alpha", "al"], 2)
    prompt = torch.tensor([[9, 40, 41, 50, 51, 60]])
    probe = build_probe(g, (), root_token=int(prompt[0, -1]))
    logits, index = fused_tree_logits(model, prompt, probe.tree, probe.decision_rows), probe.logit_index()
    root, cache = prefill(model, prompt)
    assert torch.allclose(logits[index[0]], root, atol=1e-12, rtol=0)
    for path, row in list(probe.rows.items())[1:]:
        if row in index:
            want = serial_logits(model, cache, prompt.shape[1], path)
            assert torch.allclose(logits[index[row]], want, atol=1e-12, rtol=0)


def test_a_huge_full_probe_is_never_built(tok, monkeypatch):
    import hf_treegen.choice.engines as engines

    monkeypatch.setattr(engines, "FULL_PROBE_MAX_ROWS", 10)  # a small cap stands in for thousands of rows
    model = _model("llama", torch.float64, "sdpa", tok)
    g = ChoiceGrammar(tok, POOL[:10], 3)
    prompt = torch.tensor([[5, 6, 7, 8]])
    serial = serial_select(model, prompt, g)
    with pytest.warns(UserWarning, match="planning the probe width"):
        capped = compiled_select(model, prompt, g, width=None, fuse=False)
    assert capped.token_ids == serial.token_ids
    assert capped.extra["plans"]  # the width was planned instead of building the full probe


def test_the_processor_plans_its_width_by_default(tok):
    proc = htg.CompiledChoiceProcessor(tok, POOL[:8], 2)
    assert proc.width == "auto"
    model = _model("llama", torch.float64, "sdpa", tok)
    prompt = torch.tensor([[5, 6, 7, 8]])
    assert proc.select(model, prompt).token_ids == serial_select(model, prompt, proc.grammar).token_ids
