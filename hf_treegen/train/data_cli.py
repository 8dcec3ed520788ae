"""``hf-treegen generate-data``: the target's own answers to many prompts, the data a drafter learns from.

    hf-treegen generate-data --source chat --out data/drafter/chat --time-budget-min 60
    hf-treegen generate-data --source prompts.jsonl --model ./my-model --out data/drafter/mine

``--source`` is ``python`` (prompts from the Python documentation and standard library,
:func:`hf_treegen.train.prompts.train_prompts`), ``chat`` (everyday requests,
:func:`hf_treegen.train.chat_prompts.chat_prompts`), ``exercises`` (short programming requests,
:func:`hf_treegen.train.exercise_prompts.exercise_prompts`), ``questions`` (short questions about
computing and everyday life, :func:`hf_treegen.train.question_prompts.question_prompts`) or a JSONL file
with one ``{"prompt": ...}`` per line (the format ``hf-treegen bench --prompts`` reads). Prompts that are
hf_treegen's built-in evaluation prompts are left out, so benchmarks keep measuring unseen text. Each
prompt is answered as a one-turn chat by stock batched ``generate()``;
:func:`hf_treegen.train.data.generate_corpus` stores prompt + answer ids in resumable shards: re-running
the same command continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..cli_types import add_placement_arguments, fraction, positive_float, positive_int, seconds_left, user_error

COMMAND = "generate-data"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # torch dtype names (torch loads later)
SOURCES = ("python", "chat", "exercises", "questions")


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--source", required=True,
                   help="python (Python docs and stdlib), chat (everyday requests), exercises (short "
                        "programming requests), questions (short questions about computing and everyday "
                        "life) or a JSONL file of "
                        '{"prompt": ...} lines')
    p.add_argument("--out", required=True, help="corpus folder (shards + manifest.json); re-running resumes it")
    p.add_argument("--model", default=None,
                   help="target: a Hugging Face causal-LM folder or Hub id with a chat template "
                        "(default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", choices=tuple(DTYPES), default="fp32",
                   help="the target's dtype while it answers (bf16/fp16 halve its memory on a GPU; the answers "
                        "are then the bf16/fp16 model's, recorded in manifest.json)")
    add_placement_arguments(p)
    p.add_argument("--num-prompts", type=positive_int, default=None,
                   help="use the first N prompts of the source (python: 12000 by default; the others: all). "
                        "A larger N later appends new prompts to the same corpus")
    p.add_argument("--max-new-tokens", type=positive_int, default=128, help="answer length cap in tokens")
    p.add_argument("--batch-size", type=positive_int, default=32, help="prompts answered per generate() call")
    p.add_argument("--sample-fraction", type=fraction, default=0.2,
                   help="share of prompts answered by sampling instead of greedily (chosen by a hash of the prompt)")
    p.add_argument("--temperature", type=positive_float, default=0.8, help="temperature of the sampled answers")
    p.add_argument("--top-p", type=fraction, default=0.95, help="top-p of the sampled answers")
    p.add_argument("--seed", type=int, default=0, help="prompt order and sampling seed")
    p.add_argument("--max-prompt-tokens", type=positive_int, default=512,
                   help="skip prompts longer than this (chat-formatted, in tokens)")
    p.add_argument("--time-budget-min", type=positive_float, default=None,
                   help="stop cleanly before this many minutes (counted from start, loading included)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch intra-op threads")
    p.add_argument("--no-packed", action="store_true",
                   help="generate on PyTorch's default CPU kernels instead of packed (oneDNN) weights")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog=f"hf-treegen {COMMAND}", description=__doc__.split("\n")[0]))


def source_prompts(source: str, num_prompts: int | None, seed: int) -> tuple[list, int]:
    """The prompts of ``--source`` and how many built-in evaluation prompts were left out of a file.

    The built-in sources never emit evaluation prompts; a file is read like ``bench --prompts``."""
    if source == "python":
        from .prompts import train_prompts

        return train_prompts(12000 if num_prompts is None else num_prompts, seed=seed), 0
    if source == "chat":
        from .chat_prompts import chat_prompts

        return chat_prompts(num_prompts, seed=seed), 0
    if source == "exercises":
        from .exercise_prompts import exercise_prompts

        return exercise_prompts(num_prompts, seed=seed), 0
    if source == "questions":
        from .question_prompts import question_prompts

        return question_prompts(num_prompts, seed=seed), 0
    if not Path(source).is_file():
        raise FileNotFoundError(f"--source {source!r}: not python, chat, exercises, questions or an existing "
                                f"JSONL file.")
    from ..bench.prompt_files import load_prompt_texts
    from .prompts import is_eval_prompt

    texts = [row["prompt"] for row in load_prompt_texts(source)]
    kept = [text for text in texts if not is_eval_prompt(text)]
    return kept[:num_prompts], len(texts) - len(kept)


def run(args) -> int:
    from hf_treegen.train.processes import Processes

    status = _run(args)
    Processes.current().close()  # every process got here: leave the process group before exiting
    return status


def _run(args) -> int:
    t_start = time.time()
    if args.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from ..models import load_target
    from .data import generate_corpus
    from .processes import Processes
    from .sharded_target import load_sharded_target, sharding_problem

    processes = Processes.current()
    say = print if processes.is_main else (lambda *a, **k: None)

    try:
        prompts, left_out = source_prompts(args.source, args.num_prompts, args.seed)
    except (RuntimeError, OSError) as err:  # e.g. the Python docs package could not be fetched
        return user_error(COMMAND, str(err).splitlines()[0])
    if not prompts:
        return user_error(COMMAND, f"--source {args.source}: no prompts left to answer "
                                   f"({left_out} are built-in evaluation prompts, which are never trained on).")
    note = f"; {left_out} built-in evaluation prompt{'s' * (left_out != 1)} left out" if left_out else ""
    say(f"{len(prompts)} prompts from {args.source}{note}, {time.time() - t_start:.0f} s", flush=True)
    try:
        if args.shard_target:
            problem = sharding_problem(processes, args.device_map)
            if problem is not None:
                return user_error(COMMAND, problem)
            model, tokenizer, name = load_sharded_target(args.model, getattr(torch, DTYPES[args.dtype]), processes)
        elif args.device_map is not None and processes.several:
            return user_error(COMMAND, "--device-map splits one target over this machine's devices for one process; "
                                       "run it without accelerate launch / torchrun, or give --shard-target instead.")
        else:
            model, tokenizer, name = load_target(args.model, getattr(torch, DTYPES[args.dtype]),
                                                 device_map=args.device_map, offload_folder=args.offload_folder)
    except (OSError, ValueError) as err:  # no such folder, a Hub id that cannot be reached or is malformed
        option = f"--model {args.model}" if args.model else "--device-map"
        return user_error(COMMAND, f"{option}: {str(err).splitlines()[0]}")
    if not getattr(tokenizer, "chat_template", None):
        return user_error(COMMAND, f"the tokenizer of {args.model} has no chat template; generate-data asks each "
                                   f"prompt as a one-turn chat, so give an instruction-tuned model.")
    if processes.device is not None and not args.shard_target:  # under a launcher: this process's own GPU
        model = model.to(processes.device)
    say(f"model loaded, {torch.get_num_threads()} threads x {processes.count} process(es), "
        f"{time.time() - t_start:.0f} s", flush=True)
    try:
        manifest = generate_corpus(
            model, tokenizer, prompts, args.out, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, sample_fraction=args.sample_fraction, seed=args.seed,
            max_prompt_tokens=args.max_prompt_tokens, time_budget_s=seconds_left(args.time_budget_min, t_start),
            model_name=name, packed=not args.no_packed, progress=not args.no_progress and processes.is_main,
            processes=processes)
    except KeyboardInterrupt:
        print("interrupted; every finished batch is stored, re-run the same command to resume", file=sys.stderr)
        return 130
    if not processes.is_main:
        return 0
    this_run = manifest.pop("this_run")
    corpus = {k: manifest[k] for k in ("num_sequences", "total_tokens", "response_tokens", "sampled_sequences",
                                       "finished_sequences", "generation_seconds")}
    print(json.dumps({"this_run": this_run, "corpus": corpus}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
