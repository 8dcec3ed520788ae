"""``hf-treegen qasper-score`` on temporary files."""

from __future__ import annotations

import json

import pytest

from hf_treegen.metrics import evaluate_predictions, gold_from_papers, read_predictions_jsonl
from hf_treegen.metrics.cli import qasper_score_main

from .test_qasper_official import PREDICTIONS, RAW


@pytest.fixture
def files(tmp_path):
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps(RAW), encoding="utf-8")
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in PREDICTIONS), encoding="utf-8")
    return gold, preds


@pytest.mark.parametrize("text_only", [False, True])
def test_cli_prints_official_json(files, capsys, text_only):
    gold, preds = files
    argv = ["--gold", str(gold), "--predictions", str(preds)] + (["--text-evidence-only"] if text_only else [])
    assert qasper_score_main(argv) == 0
    expected = evaluate_predictions(gold_from_papers(RAW, text_evidence_only=text_only),
                                    read_predictions_jsonl(preds))
    out = capsys.readouterr().out
    assert out == json.dumps(expected, indent=2) + "\n"
    assert json.loads(out)["Evidence F1"] == pytest.approx(17 / 21 if text_only else 13 / 21)


def test_cli_unreadable_files(files, tmp_path, capsys):
    gold, preds = files
    assert qasper_score_main(["--gold", str(tmp_path / "nope.json"), "--predictions", str(preds)]) == 2
    assert "cannot read gold file" in capsys.readouterr().err
    assert qasper_score_main(["--gold", str(gold), "--predictions", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read predictions file" in capsys.readouterr().err
    bad_gold = tmp_path / "bad.json"
    bad_gold.write_text("{oops", encoding="utf-8")
    assert qasper_score_main(["--gold", str(bad_gold), "--predictions", str(preds)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_cli_malformed_prediction_line(files, capsys):
    gold, preds = files
    preds.write_text(json.dumps(PREDICTIONS[0]) + "\n" + json.dumps(PREDICTIONS[1]) + "\n[1, 2\n", encoding="utf-8")
    assert qasper_score_main(["--gold", str(gold), "--predictions", str(preds)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and str(preds) in err


def test_cli_refuses_a_gold_file_the_loader_rejects(files, tmp_path, capsys):
    import copy

    gold, preds = files
    raw = copy.deepcopy(RAW)
    paper = next(iter(raw.values()))
    paper["qas"][0]["answers"][0]["answer"]["extractive_spans"] = "not a list"  # would score as characters
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(raw), encoding="utf-8")
    assert qasper_score_main(["--gold", str(broken), "--predictions", str(preds)]) == 2
    assert "extractive_spans" in capsys.readouterr().err


def test_cli_warns_or_fails_when_no_prediction_matches(files, tmp_path, capsys):
    gold, _ = files
    preds = tmp_path / "other.jsonl"
    preds.write_text(json.dumps({"question_id": "zzz", "predicted_answer": "a", "predicted_evidence": []}) + "\n")
    assert qasper_score_main(["--gold", str(gold), "--predictions", str(preds)]) == 0
    assert "none of the 1 question ids" in capsys.readouterr().err
    assert qasper_score_main(["--gold", str(gold), "--predictions", str(preds), "--strict"]) == 2
