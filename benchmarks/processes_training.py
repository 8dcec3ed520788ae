"""One process against two (gloo on a CPU), and two that share the target's layers (``--shard-target``),
for the drafter pipeline on SmolLM2-135M-Instruct: the corpus ``generate-data`` writes and the loss
curve ``train-drafter`` follows, with the same global batch.

    .venv/bin/python benchmarks/processes_training.py --prompts 32 --steps 40 \
        --out docs/results/processes_training.txt

Both runs split the machine's cores: one process with all the threads, or two with half each.
Generation runs the ``generate-data`` command (two processes under ``torchrun``); training runs
:func:`hf_treegen.train.trainer.train` on that corpus with a fresh Domino drafter (one layer, blocks of
8, the command's defaults), each run with its own feature cache. The table lists the training loss
of both runs at every fifth step and their largest relative difference.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _launcher(processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes}",
            f"--master-port={port}", "--master-addr=127.0.0.1"]


def _run(cmd: list[str], threads: int) -> float:
    """Run ``cmd`` with ``threads`` per process; returns its wall time in seconds."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return time.perf_counter() - t0


def generate(folder: Path, processes: int, threads: int, prompts: int, shard: bool = False) -> float:
    cmd = _launcher(processes) + ["-m", "hf_treegen.cli", "generate-data", "--source", "exercises",
                                  "--num-prompts", str(prompts), "--max-new-tokens", "64", "--batch-size", "8",
                                  "--out", str(folder), "--threads", str(threads), "--no-progress"]
    return _run(cmd + ["--shard-target"] * shard, threads)


def train(corpus: Path, folder: Path, processes: int, threads: int, steps: int, shard: bool = False) -> dict:
    cmd = _launcher(processes) + [__file__, "--worker", str(corpus), str(folder), "--steps", str(steps),
                                  "--threads", str(threads)] + ["--shard"] * shard
    _run(cmd, threads)
    return json.loads((folder / "losses.json").read_text())


def worker(corpus: str, folder: str, steps: int, threads: int, shard: bool) -> None:
    """One training run (a process of it, under torchrun): losses and timings to FOLDER/losses.json."""
    import torch

    torch.set_num_threads(threads)
    from hf_treegen.drafters.config import DrafterConfig
    from hf_treegen.models import load_smollm2
    from hf_treegen.train.processes import Processes
    from hf_treegen.train.sharded_target import load_sharded_target
    from hf_treegen.train.trainer import TrainConfig, train as train_drafter

    processes = Processes.current()
    if shard:
        model = load_sharded_target(None, torch.float32, processes, tokenizer=False)[0]
    else:
        model, _ = load_smollm2(torch.float32)
    drafter = DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=8, projector_type="domino",
                                       emb_dim=256, gru_hidden_dim=256)
    config = TrainConfig(steps=steps, eval_every=max(steps // 2, 1), checkpoint_every=steps, patience=None,
                         autocast="none", val_blocks=256)
    result = train_drafter(model, drafter, corpus, Path(folder) / "run", config, feature_cache=Path(folder) / "features",
                           progress=False, processes=processes)
    if processes.is_main:
        (Path(folder) / "losses.json").write_text(json.dumps({
            "losses": result.losses, "train_seconds": result.summary["train_seconds"],
            "extract_seconds": result.summary["feature_cache"]["extract_seconds_this_call"],
            "accept_len": result.final.get("accept_len"), "layer_share": _layer_share(model)}))


def _layer_share(model) -> float:
    """The share of the decoder layers' weight elements this process holds."""
    from hf_treegen.target import decoder_layers

    params = [p for layer in decoder_layers(model) for p in layer.parameters()]
    held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in params)
    return held / sum(p.numel() for p in params)


def same_corpus(a: Path, b: Path) -> bool:
    from hf_treegen.train.data import load_corpus_records

    rows = [[(r["prompt_id"], r["ids"].tolist()) for r in load_corpus_records(folder)] for folder in (a, b)]
    return rows[0] == rows[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32, help="exercise prompts to answer (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=40, help="training steps (default: %(default)s)")
    parser.add_argument("--out", help="also write the tables here")
    parser.add_argument("--worker", nargs=2, metavar=("CORPUS", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--shard", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.steps, args.threads or 1, args.shard)
        return 0
    if args.prompts < 8 or args.steps < 2:
        parser.error("--prompts must be >= 8 and --steps >= 2")
    cores = os.cpu_count() or 2
    half = max(cores // 2, 1)
    lines = [f"one process ({cores} threads) against two ({half} thread{'s' * (half != 1)} each, gloo), "
             f"SmolLM2-135M-Instruct fp32, "
             f"{platform.machine()} {cores} cores",
             f"command: {' '.join(['.venv/bin/python', *sys.argv])}", ""]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        gen_one = generate(tmp / "corpus-1", 1, cores, args.prompts)
        gen_two = generate(tmp / "corpus-2", 2, half, args.prompts)
        gen_sharded = generate(tmp / "corpus-sharded", 2, half, args.prompts, shard=True)
        same = same_corpus(tmp / "corpus-1", tmp / "corpus-2")
        same_sharded = same_corpus(tmp / "corpus-1", tmp / "corpus-sharded")
        lines += [f"generate-data, {args.prompts} exercise prompts x 64 new tokens, batches of 8 (wall time, loading "
                  f"included)", f"  1 process:                {gen_one:6.1f} s",
                  f"  2 processes:              {gen_two:6.1f} s   same corpus as 1: {'yes' if same else 'NO'}",
                  f"  2 processes, sharded:     {gen_sharded:6.1f} s   same corpus as 1: "
                  f"{'yes' if same_sharded else 'NO (packed kernels do not apply to sharded layers: float rounding)'}",
                  ""]
        one = train(tmp / "corpus-1", tmp / "train-1", 1, cores, args.steps)
        two = train(tmp / "corpus-1", tmp / "train-2", 2, half, args.steps)
        sharded = train(tmp / "corpus-1", tmp / "train-sharded", 2, half, args.steps, shard=True)
    runs = {"1 process": one, "2 processes": two, "2, sharded": sharded}
    diffs = {name: [abs(a - b) / abs(a) for a, b in zip(one["losses"], run["losses"])] for name, run in runs.items()}
    lines += [f"train-drafter, {args.steps} steps of 8 sequences x 16 anchors (global), fresh 1-layer Domino drafter",
              f"{'step':>5} " + " ".join(f"{'loss, ' + name:>20}" for name in runs)
              + f" {'rel diff 2':>11} {'rel diff 2s':>11}"]
    for step in [1, *range(5, args.steps + 1, 5)]:
        lines.append(f"{step:>5} " + " ".join(f"{run['losses'][step - 1]:>20.4f}" for run in runs.values())
                     + f" {diffs['2 processes'][step - 1]:>11.2e} {diffs['2, sharded'][step - 1]:>11.2e}")
    lines += [f"largest relative difference from 1 process over {args.steps} steps: "
              f"{max(diffs['2 processes']):.2e} (2 processes), {max(diffs['2, sharded']):.2e} (2, sharded)",
              "held-out accepted length: " + ", ".join(f"{run['accept_len']:.3f} ({name})" for name, run in runs.items()),
              "seconds per step: " + ", ".join(f"{run['train_seconds'] / args.steps:.2f} ({name})"
                                              for name, run in runs.items()),
              "feature extraction, seconds: " + ", ".join(f"{run['extract_seconds']:.1f} ({name})"
                                                        for name, run in runs.items()),
              "decoder-layer weights held by the main process: " + ", ".join(
                  f"{run['layer_share']:.0%} ({name})" for name, run in runs.items())]
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
