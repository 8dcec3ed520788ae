"""cond_adaptive against fixed budgets, and the calibration of the conditional tree's path masses.

Same shipped drafter, same prompts, interleaved (hf_treegen.bench): the conditional tree at fixed
budgets, and cond_adaptive (cost-aware size on calibrated masses, budget cap 64). Then, per depth over
every round of the fixed-budget-16 run: the probability mass the drafter put on that depth's nodes,
the nodes the target accepted there, and their ratio (what cond_adaptive learns online).

    .venv/bin/python benchmarks/budgets.py [--prompts 12] [--max-new-tokens 64] [--budgets 2,4,8,16,32]
"""

from __future__ import annotations

import argparse

import torch

from hf_treegen.bench import format_table, run_strategies
from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.models import load_default_pair


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--budgets", default="2,4,8,16,32")
    args = parser.parse_args()

    model, tokenizer, drafter = load_default_pair()
    texts = [p for kind in ("code", "explain", "chat") for p in builtin_prompts(kind)[: args.prompts // 3]]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"] for t in texts]
    fixed = [f"conditional@{b}" for b in args.budgets.split(",")]
    strategies = fixed + ["cond_adaptive"]
    # warm-up: verify-cost curves and allocator growth stay out of the table (cond_adaptive's learned
    # calibration starts here too, as it would in a serving process)
    run_strategies(model, prompts[:1], drafter, strategies, max_new_tokens=16, progress=False)
    results = run_strategies(model, prompts, drafter, strategies, max_new_tokens=args.max_new_tokens)
    print(f"SmolLM2-135M-Instruct fp32, {torch.get_num_threads()} threads, shipped Domino drafter, "
          f"{len(prompts)} prompts x {args.max_new_tokens} new tokens, greedy")
    print(format_table(results))

    by_name = {r.name: r for r in results}
    reference = by_name.get("conditional@16") or by_name[fixed[-1]]
    print(f"\ncalibration of {reference.name} ({reference.rounds} rounds): per round, per depth")
    print(f"{'depth':>5} {'predicted mass':>15} {'accepted':>9} {'ratio':>7}")
    for row in reference.calibration_rows():
        ratio = row["accepted"] / row["predicted"] if row["predicted"] else float("nan")
        print(f"{row['depth']:>5} {row['predicted']:15.3f} {row['accepted']:9.3f} {ratio:7.2f}")
    adaptive = by_name["cond_adaptive"]
    print(f"\ncond_adaptive: median tree {adaptive.row()['tree_size']:.1f} nodes, tau {adaptive.row()['tau']:.2f}")


if __name__ == "__main__":
    main()
