"""The bundled ``evaluate`` modules load offline by path from any cwd and equal the plain functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_treegen.metrics import (
    aligned_inputs,
    all_evidence_rates,
    evaluate_predictions,
    gold_from_papers,
    metric_path,
)

from .test_qasper_official import PREDICTIONS, RAW


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Both modules, loaded once with the offline variables set and the cwd elsewhere."""
    import evaluate

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_EVALUATE_OFFLINE", "1")
        mp.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
        mp.chdir(tmp_path_factory.mktemp("elsewhere"))
        yield {name: evaluate.load(metric_path(name), keep_in_memory=True) for name in ("qasper", "all_evidence")}


def _predictions():
    out = {}
    for record in PREDICTIONS:
        out[record["question_id"]] = {"answer": record["predicted_answer"], "evidence": record["predicted_evidence"]}
    return out


def test_metric_path_is_absolute_module_folder():
    for name in ("qasper", "all_evidence"):
        path = Path(metric_path(name))
        assert path.is_absolute() and (path / f"{name}.py").is_file()
    with pytest.raises(ValueError):
        metric_path("squad")


def test_modules_do_not_import_metric_class_by_name():
    # `from evaluate import Metric` would make the abstract base the module's main class
    for name in ("qasper", "all_evidence"):
        source = (Path(metric_path(name)) / f"{name}.py").read_text(encoding="utf-8")
        assert "from evaluate import Metric" not in source
        assert "evaluate.Metric" in source


def test_qasper_module_equals_plain_function(loaded):
    predictions = _predictions()
    for text_only in (False, True):
        gold = gold_from_papers(RAW, text_evidence_only=text_only)
        preds, refs = aligned_inputs(gold, predictions)
        assert preds[4] == {"answer": None, "evidence": []}  # q5 has no prediction
        got = loaded["qasper"].compute(predictions=preds, references=refs)
        assert got == evaluate_predictions(gold, predictions)
    # the module's own text_evidence_only flag on the default references gives the text-only numbers
    preds, refs = aligned_inputs(gold_from_papers(RAW), predictions)
    got = loaded["qasper"].compute(predictions=preds, references=refs, text_evidence_only=True)
    assert got == evaluate_predictions(gold_from_papers(RAW, text_evidence_only=True), predictions)
    assert got["Missing predictions"] == 1


def test_qasper_module_keeps_duplicate_evidence(loaded):
    got = loaded["qasper"].compute(predictions=[{"answer": "x", "evidence": ["p1", "p1"]}],
                                   references=[[{"answer": "x", "evidence": ["p1"], "type": "extractive"}]])
    assert got["Evidence F1"] == pytest.approx(2 / 3)


def test_all_evidence_module_equals_plain_function(loaded):
    retrieved = [["P1"], ["P1", "P2"], [], ["P3"]]
    evidence = [[["P1"], ["P1", "P2"]], [["P1"], ["P1", "P2"]], [[]], [["P4"]]]
    got = loaded["all_evidence"].compute(predictions=retrieved, references=evidence)
    plain = all_evidence_rates(retrieved, [[{"evidence": e} for e in q] for q in evidence])
    assert got == plain
    assert got["num_eligible"] == 3 and got["all_evidence_one"] == pytest.approx(2 / 3)
    assert got["all_evidence_union"] == pytest.approx(1 / 3)
