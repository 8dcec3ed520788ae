"""What offloading layers to disk does to tree decoding: SmolLM2-135M-Instruct with the shipped drafter,
whole on the CPU and with some decoder layers offloaded to disk by accelerate's hooks (as
``from_pretrained(device_map=..., offload_folder=...)`` does for a target too big for memory).
Stock generate(), stock on packed kernels and ``auto`` on the same split target, interleaved per
prompt (greedy; built-in code, explain and chat prompts).

    .venv/bin/python benchmarks/split_target.py --disk-layers 0,6,30 --prompts 6 --threads 2 \
        --out docs/results/split_target.txt

"same" counts prompts whose output equals stock generate()'s on the same split target.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--disk-layers", default="0,6,30",
                        help="comma-separated counts of decoder layers on disk, the last ones (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=6, help="prompts, cycling code/explain/chat (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--methods", default="ar_packed,auto", help="besides stock (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", help="also write the tables here")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.disk_layers.split(",")]
    except ValueError:
        parser.error(f"--disk-layers: comma-separated whole numbers, got {args.disk_layers!r}")
    if args.prompts < 1 or args.max_new_tokens < 1 or min(counts) < 0:
        parser.error("--prompts and --max-new-tokens must be >= 1, --disk-layers >= 0")

    import torch

    from hf_treegen.bench.harness import format_table, run_strategies
    from hf_treegen.bench.offload import offload_layers
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.bench.prompts import builtin_prompts
    from hf_treegen.models import load_default_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    sets = [builtin_prompts(n) for n in ("code", "explain", "chat")]
    texts = [sets[i % 3][i // 3] for i in range(args.prompts)]
    methods = ["ar"] + [m.strip() for m in args.methods.split(",") if m.strip()]
    lines = [f"SmolLM2-135M-Instruct fp32 + shipped drafter, layers offloaded to disk with accelerate, "
             f"{args.prompts} built-in prompts x {args.max_new_tokens} new tokens, greedy, "
             f"{torch.get_num_threads()} threads, {platform.machine()} {os.cpu_count()} cores",
             f"command: {' '.join(['.venv/bin/python', *sys.argv])}", ""]
    summary = [f"{'layers on disk':>14} {'stock tok/s':>11} {'auto tok/s':>10} {'tau':>5} {'vs stock':>8} "
               f"{'vs packed':>9} {'same':>5}"]
    for count in counts:
        model, tokenizer, drafter = load_default_pair()
        layers = model.config.num_hidden_layers
        with tempfile.TemporaryDirectory() as folder:
            if count:
                model = offload_layers(model, range(layers - min(count, layers), layers), folder)
            prompts = [render_chat(tokenizer, t) for t in texts]
            # warm-up: the calibration of this placement and first-use costs stay out of the table
            run_strategies(model, prompts[:1], drafter, methods, max_new_tokens=8, progress=False)
            results = run_strategies(model, prompts, drafter, methods, max_new_tokens=args.max_new_tokens)
        rows = {r.name: r.row() for r in results}
        lines += [f"{min(count, layers)} of {layers} decoder layers on disk", format_table(results), ""]
        auto = rows.get("auto")
        if auto is not None:
            summary.append(f"{min(count, layers):>14} {rows['ar']['tok_s']:>11.2f} {auto['tok_s']:>10.2f} "
                           f"{auto['tau']:>5.2f} {auto['speedup']:>7.2f}x "
                           f"{(auto['speedup_vs_packed'] or float('nan')):>8.2f}x {auto['equal']:>2}/{auto['prompts']}")
        print("\n".join(lines[-3:]), flush=True)
    lines += ["auto on each placement, against stock and packed stock on the same placement (medians per prompt)",
              *summary]
    print("\n".join(lines[-len(summary) - 1:]))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
