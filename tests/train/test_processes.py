"""Training and corpus building with several processes (gloo on this CPU), launched as users launch
them: a 2-process training run takes the steps of a 1-process run with the same global batch, resumes
after a process is killed, and the corpus commands write the corpus one process writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_treegen.train.data import load_corpus_records
from hf_treegen.train.drafter_setup import init_drafter
from hf_treegen.train.features import FeatureCache, sequence_key
from hf_treegen.train.processes import Processes, Rounds
from hf_treegen.train.trainer import train
from tests.train import distributed_runs
from tests.train.distributed_setup import gradient, pattern_corpus, train_config, train_drafter_config, train_target

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(distributed_runs.__file__)
#: loss agreement between 2 processes and 1 over 30 steps (relative; float sums in another order, carried by Adam)
LOSS_TOLERANCE = 1e-2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(*args, processes: int = 2, check: bool = True) -> subprocess.CompletedProcess:
    """``torchrun --nproc-per-node N ARGS`` (what ``accelerate launch`` runs too); ARGS start with a script,
    or with ``-m`` and a module (default: tests/train/distributed_runs.py)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    program = list(map(str, args)) if args[0] == "-m" else [str(SCRIPT), *map(str, args)]
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes}",
           f"--master-port={free_port()}", "--master-addr=127.0.0.1", *program]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


def result(out: Path, rank: int = 0) -> dict:
    return json.loads((out / f"result-{rank}.json").read_text())


# --------------------------------------------------------------------------------------------------
# one process: the collectives are no-ops and rounds are single batches

def test_one_process_shares_everything_and_its_collectives_change_nothing():
    alone = Processes()
    assert alone.is_main and not alone.several and alone.share([1, 2, 3]) == [1, 2, 3]
    t = torch.tensor([1.0, 2.0])
    assert alone.sum(t) is t and torch.equal(t, torch.tensor([1.0, 2.0]))
    assert alone.max(3.5) == 3.5 and alone.from_main({"a"}) == {"a"} and alone.gather(7) == [7]


def test_shares_of_several_processes_hold_every_item_once():
    items = list(range(11))
    parts = [Processes(rank, 3).share(items) for rank in range(3)]
    assert sorted(sum(parts, [])) == items and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_rounds_ask_before_every_batch_and_stop_when_told():
    calls = []

    def decide():
        calls.append(len(calls))
        return (1, None) if len(calls) <= 3 else (0, "max_batches")

    rounds = Rounds(Processes(), decide)
    worked = [pairs for pairs in rounds.over(iter("abcdef"), str.upper)]
    assert worked == [[("a", "A")], [("b", "B")], [("c", "C")]] and rounds.stop_reason == "max_batches"
    finished = Rounds(Processes(), lambda: (1, None))
    assert len(list(finished.over("ab", str.upper))) == 2 and finished.stop_reason is None


def test_a_step_needs_a_sequence_for_every_process(tmp_path):
    model = train_target()
    with pytest.raises(ValueError, match="at least one training sequence each"):
        train(model, train_drafter_config(model), pattern_corpus()[:8], tmp_path, train_config(),
              feature_cache=tmp_path / "f", progress=False, processes=Processes(0, 5))


# --------------------------------------------------------------------------------------------------
# two processes (gloo), launched with torchrun

@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The 1-process run (its result, with the gradient of its first step as ``first_gradient``)."""
    out = tmp_path_factory.mktemp("one")
    model = train_target()
    drafter = init_drafter(train_drafter_config(model), model, seed=train_config().seed)
    first = []
    run = train(model, drafter, pattern_corpus(), out, train_config(), feature_cache=out / "features",
                progress=False, processes=Processes(),
                callback=lambda step, loss: first.append(gradient(drafter)) if step == 1 else None)
    run.first_gradient = first[0]
    return run


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    launch("train", out)
    return out


def test_two_processes_take_the_step_of_one_with_the_same_global_batch(one_process, two_processes):
    two = result(two_processes)
    # the same loss over the whole batch, and the same summed gradient, up to float summation order
    assert two["losses"][0] == pytest.approx(one_process.losses[0], rel=1e-6)
    np.testing.assert_allclose(two["first_gradient"], one_process.first_gradient, rtol=1e-4, atol=1e-7)


def test_the_loss_curve_of_two_processes_follows_the_one_of_one_process(one_process, two_processes):
    two = result(two_processes)
    assert len(two["losses"]) == len(one_process.losses) == train_config().steps
    # Adam turns float-order differences in near-zero gradients into whole steps, so the curves part slowly
    np.testing.assert_allclose(two["losses"], one_process.losses, rtol=LOSS_TOLERANCE)
    np.testing.assert_allclose(two["accept_len"], [e["accept_len"] for e in one_process.evals],
                               atol=LOSS_TOLERANCE * 4)
    assert one_process.losses[-1] < one_process.losses[0] * 0.8  # and the run learns


def test_every_process_ends_with_the_same_drafter_and_only_the_main_one_writes(two_processes):
    assert result(two_processes, 0)["weights"] == result(two_processes, 1)["weights"]
    summary = json.loads((two_processes / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == train_config().steps
    log = [json.loads(line) for line in (two_processes / "log.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [0, 10, 20, 30]  # one line per evaluation: one writer
    assert (two_processes / "drafter" / "model.safetensors").is_file()


def test_a_killed_two_process_run_resumes_to_the_same_result(two_processes, tmp_path):
    crashed = launch("train", tmp_path, "--crash-at", 17, check=False)
    assert crashed.returncode != 0 and not (tmp_path / "summary.json").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*.pt")) == ["step-0000010.pt"]
    launch("train", tmp_path, "--resume")
    resumed, full = result(tmp_path), result(two_processes)
    assert resumed["losses"] == full["losses"] and resumed["weights"] == full["weights"]


def test_the_feature_cache_is_written_once_by_the_main_process(two_processes):
    chunks = sorted((two_processes / "features").glob("chunk-*.json"))
    keys = [key for chunk in chunks for key in json.loads(chunk.read_text())["keys"]]
    assert len(keys) == len(set(keys)) == len(pattern_corpus())  # no sequence extracted twice


# "sharded": the target's layers are shared among the two processes (FSDP)
PLACEMENTS = pytest.mark.parametrize("placement", [[], ["--shard"]], ids=["whole", "sharded"])


@PLACEMENTS
def test_two_processes_generate_the_corpus_one_process_generates(tmp_path, placement):
    from tests.train.distributed_setup import data_target
    from hf_treegen.train.data import generate_corpus

    model, tokenizer, prompts = data_target()
    generate_corpus(model, tokenizer, prompts, tmp_path / "one", batch_size=2, max_new_tokens=6,
                    sample_fraction=0.5, max_prompt_tokens=None, progress=False, processes=Processes())
    launch("generate", tmp_path / "two", *placement)  # 11 prompts in batches of 2: the last round has one batch
    one, two = load_corpus_records(tmp_path / "one"), load_corpus_records(tmp_path / "two")
    ids = [r["prompt_id"] for r in two]
    assert len(ids) == len(set(ids)) == len(prompts)  # every prompt once
    assert [(r["prompt_id"], r["ids"].tolist(), r["sampled"]) for r in two] == \
        [(r["prompt_id"], r["ids"].tolist(), r["sampled"]) for r in one]
    assert any(r["sampled"] for r in two) and not all(r["sampled"] for r in two)


def test_a_killed_two_process_generation_resumes_to_the_corpus_of_one_process(tmp_path):
    from tests.train.distributed_setup import data_target
    from hf_treegen.train.data import generate_corpus

    model, tokenizer, prompts = data_target()
    generate_corpus(model, tokenizer, prompts, tmp_path / "one", batch_size=2, max_new_tokens=6,
                    sample_fraction=0.5, max_prompt_tokens=None, progress=False, processes=Processes())
    crashed = launch("generate", tmp_path / "two", "--crash-at", 2, check=False)
    stored = len(load_corpus_records(tmp_path / "two"))
    assert crashed.returncode != 0 and 0 < stored < len(prompts)  # the first round was stored, then it died
    launch("generate", tmp_path / "two")
    one, two = load_corpus_records(tmp_path / "one"), load_corpus_records(tmp_path / "two")
    assert [(r["prompt_id"], r["ids"].tolist()) for r in two] == [(r["prompt_id"], r["ids"].tolist()) for r in one]


@PLACEMENTS
def test_two_processes_label_the_teacher_forced_corpus_one_process_labels(tmp_path, monkeypatch, placement):
    from tests.train.distributed_setup import data_target, teacher_forced_texts
    from hf_treegen.train.teacher_forced import build_teacher_forced_corpus

    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path / "cache-one"))
    model, tokenizer, _ = data_target()
    build_teacher_forced_corpus(model, tokenizer, teacher_forced_texts(), tmp_path / "one", batch_size=2,
                                chunk_tokens=24, window_items=5, progress=False, feature_layers=[0],
                                processes=Processes())
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path / "cache-two"))
    launch("teacher-forced", tmp_path / "two", *placement)
    one, two = load_corpus_records(tmp_path / "one"), load_corpus_records(tmp_path / "two")
    assert len(two) == len({r["prompt_id"] for r in two}) > 4
    for a, b in zip(one, two, strict=True):
        assert a["prompt_id"] == b["prompt_id"] and np.array_equal(a["ids"], b["ids"])
        assert np.array_equal(a["labels"], b["labels"])
    caches = [next((tmp_path / name / "features").iterdir()) for name in ("cache-one", "cache-two")]
    assert caches[0].name == caches[1].name  # a sharded target's cache is the whole target's
    for record in two:
        key = sequence_key(record["ids"])
        stored = [FeatureCache(c, json.loads((c / "meta.json").read_text())).get(key) for c in caches]
        assert np.array_equal(stored[0], stored[1])


@pytest.mark.parametrize("placement", [[], ["--shard-target"]], ids=["whole", "sharded"])
def test_train_drafter_runs_under_a_launcher(tmp_path, placement):
    from tests.train.distributed_setup import data_target
    from hf_treegen.train.data import generate_corpus

    model, tokenizer, prompts = data_target()
    generate_corpus(model, tokenizer, prompts, tmp_path / "corpus", batch_size=4, max_new_tokens=12,
                    max_prompt_tokens=None, progress=False, processes=Processes())
    model.save_pretrained(tmp_path / "target")
    out = tmp_path / "run"
    done = launch("-m", "hf_treegen.cli", "train-drafter", "--model", tmp_path / "target", "--data",
                  tmp_path / "corpus", "--out", out, "--steps", 4, "--sequences", 2, "--anchors", 4, "--eval-every", 2,
                  "--block-size", 4, "--emb-dim", 8, "--gru-hidden", 8, "--val-fraction", 0.2, "--threads", 1,
                  "--feature-cache", tmp_path / "features", "--no-progress", *placement)
    assert done.stdout.count("drafter saved to") == 1  # the main process reports; the others stay quiet
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == 4


# --------------------------------------------------------------------------------------------------
# a target sharded over the two processes (FSDP): each holds half of every layer

def test_a_target_sharded_over_two_processes_trains_as_the_whole_target(one_process, tmp_path):
    launch("train", tmp_path, "--shard")
    for rank in (0, 1):
        held = result(tmp_path, rank)["layer_elements"]
        assert held["held"] * 2 == held["whole"]  # each process holds half of the layers' weights
    sharded = result(tmp_path)
    assert sharded["losses"][0] == pytest.approx(one_process.losses[0], rel=1e-6)  # the same features
    np.testing.assert_allclose(sharded["losses"], one_process.losses, rtol=LOSS_TOLERANCE)
    assert result(tmp_path, 1)["weights"] == sharded["weights"]


def test_soft_labels_are_refused_with_a_sharded_target(tmp_path, capsys):
    from hf_treegen.cli import main

    argv = ["train-drafter", "--data", str(tmp_path), "--out", str(tmp_path / "o"), "--steps", "1",
            "--shard-target", "--soft-labels", "0.3"]
    assert main(argv) == 2
    assert "drop --soft-labels" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train-drafter", "generate-data", "teacher-forced-data"])
def test_shard_target_without_a_launch_says_to_launch_several(command, tmp_path, capsys):
    from hf_treegen.cli import main

    extra = {"train-drafter": ["--data", str(tmp_path), "--out", str(tmp_path / "o"), "--steps", "1"],
             "generate-data": ["--source", "exercises", "--num-prompts", "2", "--out", str(tmp_path / "o")],
             "teacher-forced-data": ["--source", str(tmp_path), "--out", str(tmp_path / "o")]}[command]
    (tmp_path / "doc.txt").write_text("some text to label\n" * 4)
    assert main([command, "--shard-target", *extra]) == 2
    err = capsys.readouterr().err
    assert "--shard-target" in err and "torchrun --nproc-per-node N" in err and "Traceback" not in err
