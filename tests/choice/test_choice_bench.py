"""choose-bench end to end on a tiny model, and compiled == serial on SmolLM2 with real prompts."""

import pytest
import torch

from hf_treegen.bench.choice_bench import bench_config, format_tables, parse_engines, plot_report
from hf_treegen.bench.choice_prompts import SelectionPrompt
from tests.helpers import bpe_tokenizer, tiny_target

PROMPTS = [SelectionPrompt("p", "Doc", tuple(f"Heading {i}" for i in range(6)), "some passage text here", 2),
           SelectionPrompt("q", "Other", tuple(f"Part {i}" for i in range(6)), "another passage text", 4)]


def test_bench_cell_on_a_tiny_model(tmp_path):
    tok = bpe_tokenizer()
    model = tiny_target("llama", vocab=320, std=0.15)
    model.generation_config.eos_token_id = tok.eos_token_id
    engines = parse_engines("chunked,outlines,compiled,adaptive,unary")
    assert engines[0] == "serial"
    cell = bench_config(model, tok, 6, 2, PROMPTS, engines)
    for name in ("compiled", "adaptive", "chunked"):
        assert cell["engines"][name]["agreement"] == 1.0
    assert cell["engines"]["compiled"]["forwards"] <= 2
    assert cell["engines"]["unary"]["forwards"] == 1
    report = {"engines": engines, "cells": [cell]}
    assert "work and depth" in format_tables(report)
    plot_report(report, str(tmp_path / "plot.png"))
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_unknown_engine():
    with pytest.raises(ValueError, match="unknown engine"):
        parse_engines("serial,magic")


@pytest.mark.real_model
def test_smollm2_compiled_equals_serial_on_doc_prompts():
    from hf_treegen.bench.choice_prompts import selection_prompts
    from hf_treegen.choice import ChoiceGrammar, compiled_select, serial_select
    from hf_treegen.models import load_smollm2

    model, tok = load_smollm2(torch.float32)
    for k, n in ((5, 1), (10, 2), (10, 3)):
        grammar = ChoiceGrammar(tok, [f"[{i + 1}]" for i in range(k)], n)
        for prompt in selection_prompts(k, 2, seed=1):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt.text(n)}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
            serial, compiled = serial_select(model, ids, grammar), compiled_select(model, ids, grammar)
            assert compiled.token_ids == serial.token_ids
            assert compiled.forwards <= 2 or compiled.guarded


def test_diagnostics_on_a_tiny_model():
    from hf_treegen.bench.choice_bench import diagnose_config, format_diagnostics

    tok = bpe_tokenizer()
    model = tiny_target("llama", vocab=320, std=0.15, dtype=torch.float64)
    model.generation_config.eos_token_id = tok.eos_token_id
    row = diagnose_config(model, tok, 5, 2, PROMPTS)
    assert row["bound_holds"] and row["certified"] == 1.0
    assert 0 <= row["tv"] <= row["i_seq"] / 2 + 1e-12
    assert "MAP certified" in format_diagnostics([row])
    assert diagnose_config(model, tok, 20, 4, PROMPTS) is None  # too many orderings to enumerate
