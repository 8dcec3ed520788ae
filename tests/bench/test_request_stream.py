"""The request-stream benchmark's workloads and tables (the serving itself is the benchmark's to run)."""

import pytest

from hf_treegen.bench.request_stream import Served, builtin_texts, format_stream, summary_rows, workload


def test_workloads():
    texts = builtin_texts()
    assert len(set(texts)) == len(texts) == 96
    assert workload("fresh", 10) == list(range(10))
    stream = workload("repeated", 120, pool=24, seed=0)
    assert sorted(stream) == sorted(list(range(24)) * 5) and stream != sorted(stream)
    assert workload("repeated", 120, pool=24, seed=0) == stream  # seeded
    with pytest.raises(ValueError, match="96 distinct prompts"):
        workload("fresh", 97)
    with pytest.raises(ValueError, match="unknown workload"):
        workload("stale", 3)


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
