"""hf_treegen.bench.training_curve (behind benchmarks/training_curve.py): the validation-curve table and
plot of train-drafter runs."""

import json
from pathlib import Path

import pytest

from hf_treegen.bench.training_curve import plot, read_log, read_runs, tables


def write_log(folder: Path, entries: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return folder


def entry(step, tau, elapsed=0.0):
    return {"step": step, "elapsed_s": elapsed, "lr": 8e-4, "tau": tau, "acc": [0.4, 0.3, 0.2, 0.1, 0.1],
            "loss": 3.5}


def test_table_lists_every_evaluation_and_the_best(tmp_path):
    run = write_log(tmp_path / "run", [entry(0, 1.02), entry(250, 1.5, 300.0), entry(500, 1.4, 600.0)])
    runs = read_runs([run])
    out = tables(runs)
    assert out.startswith(str(run)) and "   250      5.0" in out and "1.500" in out and "0.40 0.30 0.20 0.10" in out
    assert "best: tau 1.500 at step 250" in out
    assert plot(runs, 1.2, tmp_path / "plots" / "curve.png").stat().st_size > 0


def test_tables_of_several_runs_carry_their_labels(tmp_path):
    a = write_log(tmp_path / "a", [entry(0, 1.0)])
    b = write_log(tmp_path / "b", [entry(0, 1.1), entry(250, 1.3)])
    out = tables(read_runs([a, b], ["from scratch", "continued"]))
    first, second = out.split("\n\n")
    assert first.startswith("from scratch") and "best: tau 1.000 at step 0" in first
    assert second.startswith("continued") and "best: tau 1.300 at step 250" in second


def test_a_resumed_run_keeps_the_last_line_of_a_repeated_step(tmp_path):
    run = write_log(tmp_path / "run", [entry(0, 1.0), entry(250, 1.3), entry(250, 1.4)])
    assert [r["tau"] for r in read_log(run)] == [1.0, 1.4]


def test_missing_log_and_label_count_are_clear_errors(tmp_path):
    with pytest.raises(SystemExit, match="train-drafter"):
        read_log(tmp_path)
    run = write_log(tmp_path / "run", [entry(0, 1.0)])
    with pytest.raises(SystemExit, match="--labels names 2 runs"):
        read_runs([run], ["a", "b"])
