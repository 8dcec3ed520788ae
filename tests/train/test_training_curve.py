"""benchmarks/training_curve.py: the validation-curve table and plot of train-drafter runs."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "training_curve.py"


@pytest.fixture(scope="module")
def curve():
    spec = importlib.util.spec_from_file_location("training_curve", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_log(folder: Path, entries: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return folder


def entry(step, tau, elapsed=0.0):
    return {"step": step, "elapsed_s": elapsed, "lr": 8e-4, "tau": tau, "acc": [0.4, 0.3, 0.2, 0.1, 0.1],
            "loss": 3.5}


def test_table_lists_every_evaluation_and_the_best(curve, tmp_path, capsys):
    run = write_log(tmp_path / "run", [entry(0, 1.02), entry(250, 1.5, 300.0), entry(500, 1.4, 600.0)])
    curve.main([str(run), "--plot", str(tmp_path / "curve.png")])
    out = capsys.readouterr().out
    assert "   250      5.0" in out and "1.500" in out and "0.40 0.30 0.20 0.10" in out
    assert "best: tau 1.500 at step 250" in out
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_a_resumed_run_keeps_the_last_line_of_a_repeated_step(curve, tmp_path):
    run = write_log(tmp_path / "run", [entry(0, 1.0), entry(250, 1.3), entry(250, 1.4)])
    assert [r["tau"] for r in curve.read_log(run)] == [1.0, 1.4]


def test_missing_log_and_label_count_are_clear_errors(curve, tmp_path):
    with pytest.raises(SystemExit, match="train-drafter"):
        curve.read_log(tmp_path)
    run = write_log(tmp_path / "run", [entry(0, 1.0)])
    with pytest.raises(SystemExit, match="--labels names 2 runs"):
        curve.main([str(run), "--labels", "a,b"])
