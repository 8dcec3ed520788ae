"""Runs that tests/train/test_processes.py launches as several processes (``torchrun --nproc-per-node N
tests/train/distributed_runs.py KIND OUT ...``); each writes what the test compares under OUT.

* ``train OUT [--crash-at STEP] [--resume]``: a tiny drafter trained on the pattern corpus; the losses and
  held-out metrics go to ``OUT/result-<rank>.json``. ``--crash-at`` kills process 1 at that step.
* ``generate OUT [--crash-at BATCH]``: generated answers of a tiny target, written to the corpus folder
  OUT. ``--crash-at`` kills process 1 in its BATCH-th batch.
* ``teacher-forced OUT``: teacher-forced labels of a few texts, written to the corpus folder OUT.

``--shard``: the target's decoder layers are sharded over the processes (FSDP) first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.train.distributed_setup import (data_target, gradient, pattern_corpus, teacher_forced_texts,  # noqa: E402
                                           train_config, train_drafter_config, train_target)


def sharded(model, shard: bool):
    """``model`` with its layers sharded over the processes (when ``shard``)."""
    from hf_treegen.train.processes import Processes
    from hf_treegen.train.sharded_target import shard_layers

    if shard:
        shard_layers(model, Processes.current())
    return model


def layer_elements(model) -> dict:
    """How many layer weight elements this process holds, and how many the layers have."""
    from hf_treegen.target import decoder_layers

    params = [p for layer in decoder_layers(model) for p in layer.parameters()]
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    return {"held": sum(t.numel() for t in local), "whole": sum(p.numel() for p in params)}


def train_run(out: Path, crash_at: int | None, resume: bool, shard: bool) -> None:
    from hf_treegen.train.drafter_setup import init_drafter
    from hf_treegen.train.processes import Processes
    from hf_treegen.train.trainer import train

    processes = Processes.current()
    model = sharded(train_target(), shard)
    drafter = init_drafter(train_drafter_config(model), model, seed=train_config().seed)
    first_step = {}

    def after_step(step: int, loss: float) -> None:
        if step == 1:
            first_step["gradient"] = gradient(drafter)
        if step == crash_at and processes.rank == 1:
            os._exit(1)  # the process dies as a killed one would: no cleanup, no checkpoint

    result = train(model, drafter, pattern_corpus(), out, train_config(), feature_cache=out / "features",
                   progress=False, callback=after_step, resume=resume, processes=processes)
    weights = float(sum(p.detach().double().sum() for p in result.drafter.parameters()))
    (out / f"result-{processes.rank}.json").write_text(json.dumps(
        {"losses": result.losses, "accept_len": [e["accept_len"] for e in result.evals], "weights": weights,
         "first_gradient": first_step.get("gradient"), "layer_elements": layer_elements(model)}))


def generate_run(out: Path, crash_at: int | None, shard: bool) -> None:
    from hf_treegen.train import data
    from hf_treegen.train.processes import Processes

    if crash_at is not None and Processes.current().rank == 1:  # process 1 dies in its crash_at-th batch
        answer, calls = data._generate_batch, []

        def dying(*args, **kwargs):
            calls.append(1)
            if len(calls) == crash_at:
                os._exit(1)
            return answer(*args, **kwargs)

        data._generate_batch = dying
    model, tokenizer, prompts = data_target()
    model = sharded(model, shard)
    data.generate_corpus(model, tokenizer, prompts, out, batch_size=2, max_new_tokens=6, sample_fraction=0.5,
                         max_prompt_tokens=None, progress=False)


def teacher_forced_run(out: Path, shard: bool) -> None:
    from hf_treegen.train.teacher_forced import build_teacher_forced_corpus

    model, tokenizer, _ = data_target()
    model = sharded(model, shard)
    build_teacher_forced_corpus(model, tokenizer, teacher_forced_texts(), out, batch_size=2, chunk_tokens=24,
                                window_items=5, progress=False, feature_layers=[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("train", "generate", "teacher-forced"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--crash-at", type=int, default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--shard", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.kind == "train":
        train_run(args.out, args.crash_at, args.resume, args.shard)
    elif args.kind == "generate":
        generate_run(args.out, args.crash_at, args.shard)
    else:
        teacher_forced_run(args.out, args.shard)
    from hf_treegen.train.processes import Processes

    Processes.current().close()


if __name__ == "__main__":
    main()
