#!/usr/bin/env python
"""Generate drafter-distillation data: SmolLM2-135M-Instruct's own answers to offline training prompts.

Prompts come from :func:`hf_treegen.train.prompts.train_prompts` (Python 3.11 docs from Debian
``python3.11-doc`` + the CPython stdlib, PSF-2.0; eval-reserved sources excluded). Answers are stored
by :func:`hf_treegen.train.data.generate_corpus` as small uint16 shards plus ``manifest.json`` in
``--out``. The run is resumable: re-running the same command skips every prompt already stored, and
``--time-budget-min`` makes a sitting stop cleanly (no batch is started that would overrun it).

    .venv/bin/python scripts/generate_drafter_data.py --out data/drafter/smollm2 --threads 1 \\
        --num-prompts 12000 --batch-size 32 --time-budget-min 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    t_start = time.time()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="data/drafter/smollm2", help="corpus folder (shards + manifest.json)")
    parser.add_argument("--num-prompts", type=int, default=12000,
                        help="size of the prompt list (a prefix of the seeded shuffle; raising it later appends)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0, help="prompt shuffle, template choice and sampling seed")
    parser.add_argument("--time-budget-min", type=float, default=None,
                        help="stop cleanly before this many minutes (counted from start, loading included)")
    parser.add_argument("--sample-fraction", type=float, default=0.2, help="share of prompts answered by sampling")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--sort-window", type=int, default=512)
    parser.add_argument("--max-prompt-tokens", type=int, default=512)
    parser.add_argument("--doc-share", type=float, default=0.5, help="share of documentation prompts (rest: stdlib code)")
    parser.add_argument("--no-docs", action="store_true", help="stdlib prompts only (no python3.11-doc download)")
    parser.add_argument("--source", choices=("python", "chat"), default="python",
                        help="python: prompts from the Python docs and stdlib; chat: everyday chat prompts "
                             "(hf_treegen.train.chat_prompts)")
    parser.add_argument("--no-packed", action="store_true",
                        help="generate on PyTorch's default CPU kernels instead of packed (oneDNN) weights")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    if args.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from hf_treegen.models import MODEL_NAME, load_smollm2
    from hf_treegen.train.data import generate_corpus
    from hf_treegen.train.chat_prompts import chat_prompts
    from hf_treegen.train.prompts import train_prompts

    if args.source == "chat":
        prompts = chat_prompts(args.num_prompts, seed=args.seed)
    else:
        prompts = train_prompts(args.num_prompts, seed=args.seed, docs_dir=False if args.no_docs else None,
                                doc_share=args.doc_share)
    print(f"{len(prompts)} prompts ({sum(p.source.startswith('doc:') for p in prompts)} from the docs), "
          f"{time.time() - t_start:.0f} s", flush=True)
    model, tokenizer = load_smollm2(torch.float32)
    print(f"model loaded, {torch.get_num_threads()} threads, {time.time() - t_start:.0f} s", flush=True)

    budget = None
    if args.time_budget_min is not None:
        budget = max(0.0, args.time_budget_min * 60 - (time.time() - t_start))
    try:
        manifest = generate_corpus(
            model, tokenizer, prompts, args.out, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
            temperature=args.temperature, top_p=args.top_p, sample_fraction=args.sample_fraction, seed=args.seed,
            sort_window=args.sort_window, max_prompt_tokens=args.max_prompt_tokens, time_budget_s=budget,
            model_name=MODEL_NAME, packed=not args.no_packed, progress=not args.no_progress)
    except KeyboardInterrupt:
        print("interrupted; every finished batch is stored, re-run the same command to resume", file=sys.stderr)
        return 130
    run = manifest.pop("this_run")
    summary = {k: manifest[k] for k in ("num_sequences", "total_tokens", "response_tokens", "sampled_sequences",
                                        "finished_sequences", "generation_seconds")}
    print(json.dumps({"this_run": run, "corpus": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
