"""cond_adaptive against fixed budgets, and the calibration of the conditional tree's path masses.

Same shipped drafter, same prompts, interleaved (hf_treegen.bench): the conditional tree at fixed
budgets, and cond_adaptive (cost-aware size on calibrated masses, budget cap 64). Then, per depth over
every round of each run: the probability mass the drafter put on that depth's nodes, the nodes the
target accepted there, and their ratio (what cond_adaptive learns online and rescales masses by).

    .venv/bin/python benchmarks/budgets.py [--prompts 12] [--max-new-tokens 64] [--budgets 2,4,8,16,32]
"""

from __future__ import annotations

import argparse

from hf_treegen.bench.harness import report_strategies
from hf_treegen.bench.prompt_files import render_chat
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
    prompts = [render_chat(tokenizer, t) for t in texts]
    strategies = [f"conditional@{b}" for b in args.budgets.split(",")] + ["cond_adaptive"]
    report_strategies(model, prompts, drafter, strategies, max_new_tokens=args.max_new_tokens,
                      header="SmolLM2-135M-Instruct fp32, shipped Domino drafter")


if __name__ == "__main__":
    main()
