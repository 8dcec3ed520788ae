"""Batched decoding on SmolLM2-135M-Instruct with the shipped drafter: tokens/s of stock batched
generate() (default and packed kernels) and of tree strategies, at several batch sizes, on the
built-in prompts (code, explain, chat; greedy; left-padded chat prompts).

    .venv/bin/python benchmarks/batched_decoding.py --batch-sizes 1,2,4,8 --prompts 24 --threads 2 \
        --out docs/results/batched_decoding.txt

Every batch runs each method once, interleaved; medians over the batches. "same rows": rows whose new
tokens equal stock batched generate()'s.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

DEFAULT_METHODS = "ar,ar_packed,conditional@4,auto,auto+lookup8"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="1,2,4,8", help="comma-separated batch sizes (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=24, help="prompts, cycling code/explain/chat (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--methods", default=DEFAULT_METHODS, help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", help="also write the tables here")
    args = parser.parse_args()
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes: comma-separated whole numbers, got {args.batch_sizes!r}")
    if not sizes or min(sizes) < 1 or args.prompts < max(sizes) or args.max_new_tokens < 1:
        parser.error("batch sizes must be >= 1 and at most --prompts; --max-new-tokens >= 1")

    import torch

    from hf_treegen.bench.batched import format_batched, run_batched
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.bench.prompts import builtin_prompts
    from hf_treegen.models import load_default_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, drafter = load_default_pair()
    sets = [builtin_prompts(n) for n in ("code", "explain", "chat")]
    texts = [sets[i % 3][i // 3] for i in range(args.prompts)]
    prompts = [render_chat(tokenizer, t) for t in texts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.generation_config.eos_token_id
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]

    lines = [f"batched greedy decoding, SmolLM2-135M-Instruct fp32 + shipped drafter, {args.prompts} built-in "
             f"prompts x {args.max_new_tokens} new tokens, {torch.get_num_threads()} threads, "
             f"{platform.machine()} {os.cpu_count()} cores",
             f"command: {' '.join(['.venv/bin/python', *sys.argv])}"]
    for size in sizes:
        # warm-up: first-use costs (packing, the measurement of this batch size) stay out of the table
        run_batched(model, drafter, prompts[:size], methods, size, 4, pad, progress=False)
        results = run_batched(model, drafter, prompts, methods, size, args.max_new_tokens, pad)
        lines += ["", f"batch size {size} ({len(prompts) // size} batches)", format_batched(results)]
        print("\n".join(lines[-3:]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
