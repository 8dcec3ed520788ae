"""The request-stream benchmark's workloads and tables (the serving itself is the benchmark's to run)."""

import pytest

from hf_treegen.bench.request_stream import (Served, builtin_texts, format_stream, format_workloads, serve,
                                            summary_rows, workload, workload_row)


def test_workloads():
    texts = builtin_texts()
    assert len(set(texts)) == len(texts) == 96
    assert workload("fresh", 10).order == list(range(10)) and workload("fresh").order == list(range(96))
    stream = workload("repeated", 120, pool=24, seed=0).order
    assert sorted(stream) == sorted(list(range(24)) * 5) and stream != sorted(stream)
    assert workload("repeated", 120, pool=24, seed=0).order == stream  # seeded
    with pytest.raises(ValueError, match="96 distinct prompts"):
        workload("fresh", 97)
    with pytest.raises(ValueError, match="unknown workload"):
        workload("stale", 3)
    code = workload("code", 5)
    assert code.order == list(range(5)) and code.texts[:5] == [t for t in texts[0::3][:5]]  # the code set's own
    with pytest.raises(ValueError, match="distinct requests"):
        workload("chat", len(workload("chat").texts) + 1)


def test_code_edit_requests_give_the_whole_file_with_one_edit_each():
    load = workload("code-edit")
    assert len(load.texts) == len(set(load.texts)) == 24 and load.order == list(range(24))
    assert all("class Inventory:" in text for text in load.texts[:12])
    assert all("def top_words(text, n=10):" in text for text in load.texts[12:])
    with pytest.raises(ValueError, match="24 distinct requests"):
        workload("code-edit", 25)


def test_rag_requests_carry_bm25_evidence_from_one_paper_at_a_time():
    pytest.importorskip("bm25s")
    from hf_treegen.rag.qasper import load_qasper

    class Words:  # a whitespace tokenizer: the evidence budget counts words
        def __call__(self, text):
            return {"input_ids": text.split()}

    load = workload("rag", tokenizer=Words())
    papers = load_qasper(source="offline")
    assert len(load.texts) == sum(len(p.questions) for p in papers)
    first = papers[0]
    assert load.texts[0].startswith("Evidence:\n") and first.questions[0].question in load.texts[0]
    with pytest.raises(ValueError, match="tokenizer"):
        workload("rag")


def served(request, packed, auto, learned, tau=2.0):
    return Served(request, request % 3, 64, {"packed stock": packed, "auto": auto, "auto + learning": learned},
                  {"auto": tau, "auto + learning": tau + 1}, {"auto": True, "auto + learning": True}, 100, 0)


def test_tables_report_medians_of_per_request_ratios():
    stream = [served(0, 10, 20, 30), served(1, 10, 15, 15), served(2, 20, 20, 80)]
    rows = summary_rows(stream, block=2)
    assert [r["requests"] for r in rows] == ["1-2", "3-3"]
    assert rows[0]["auto"] == pytest.approx(1.75) and rows[0]["auto + learning"] == pytest.approx(2.25)
    assert rows[1]["learning vs auto"] == pytest.approx(4.0)
    text = format_stream("repeated", stream, 2, 1000)
    assert "3 requests, 3 distinct prompts" in text and "auto 3/3" in text and "100 of 1,000 tokens" in text


def test_the_workload_table_puts_every_method_against_stock_and_the_trees_against_the_fastest_plain():
    def request(i, packed, lookup, same=True):
        return Served(i, i, 64, {"stock": 10, "packed stock": packed, "prompt lookup": lookup, "auto": 20,
                                 "auto + learning": 30},
                      {"auto": 2.5, "auto + learning": 3.5},
                      {"packed stock": True, "prompt lookup": True, "auto": same, "auto + learning": True}, 10, 0)

    code = [request(0, 8, 9), request(1, 9, 12)]  # prompt lookup is the fastest plain method (median 10.5)
    assert code[0].reference == "stock" and code[1].speedup("auto", over="prompt lookup") == pytest.approx(20 / 12)
    row = workload_row(code)
    assert row["fastest plain"] == "prompt lookup" and row["reference tok/s"] == 10
    assert row["prompt lookup"] == {"speedup": pytest.approx(1.05), "over fastest plain": 1.0, "tau": None,
                                    "same": 2}
    assert row["auto"]["speedup"] == 2.0 and row["auto"]["over fastest plain"] == pytest.approx((20 / 9 + 20 / 12) / 2)
    rag = [request(2, 16, 10, same=False)]  # packed stock beats stock and prompt lookup here
    assert workload_row(rag)["fastest plain"] == "packed stock"
    assert workload_row(rag)["auto + learning"]["over fastest plain"] == pytest.approx(30 / 16)
    text = format_workloads({"code": code, "rag": rag})
    assert "stock tok/s" in text and "1.05x" in text and "3.00x (3.50)" in text and "1.88x" in text
    assert "outputs equal to stock's:" in text and "auto 2/3" in text and "prompt lookup 3/3" in text


def test_serve_refuses_methods_it_cannot_run():
    with pytest.raises(ValueError, match="start with 'stock' or 'packed stock'"):
        serve(None, None, [], [], 8, None, methods=("auto",))
    with pytest.raises(ValueError, match="come from"):
        serve(None, None, [], [], 8, None, methods=("packed stock", "beam search"))


def test_the_cpu_line_names_the_kernel_features():
    from hf_treegen.bench.machine import describe_cpu

    info = "processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16\n\nprocessor\t: 1\n"
    line = describe_cpu(info)
    assert line.startswith("Some Xeon, ") and line.endswith("(AMX, AVX-512, AVX2)")
    assert "cores" in describe_cpu("")  # no cpuinfo: still a line


def test_serve_runs_every_method_and_checks_each_output_against_the_reference():
    import torch

    from hf_treegen import LearningDatastore
    from hf_treegen.bench.request_stream import METHODS
    from tests.helpers import greedy_reference, random_prompts, tiny_domino, tiny_target

    model = tiny_target("llama", torch.float32)
    prompts = random_prompts(2, model.config.vocab_size, seed=3)
    store = LearningDatastore()
    stream = serve(model, tiny_domino(model), prompts, [0, 1, 0], 12, store, progress=False, methods=METHODS)
    assert [s.prompt for s in stream] == [0, 1, 0] and all(s.reference == "stock" for s in stream)
    assert all(list(s.tokens_per_s) == list(METHODS) and all(s.same.values()) for s in stream)
    assert all(set(s.tau) == {"auto", "auto + learning"} for s in stream)
    assert stream[0].new_tokens == greedy_reference(model, prompts[0], 12).shape[1] - prompts[0].shape[1]
    assert stream[-1].store_tokens == len(store) > 0  # the learning store kept what it served


def test_a_results_file_names_its_cpu_its_measured_costs_and_its_command():
    from hf_treegen.bench.machine import run_context

    lines = run_context({"step_ms": 40.1, "packed_from_rows": 4})
    assert lines[0].startswith("CPU: ") and lines[-1].startswith("command: .venv/bin/python ")
    assert lines[1] == "cost profile: step_ms 40.1, packed_from_rows 4"
    assert len(run_context()) == 2  # nothing measured: no profile line
