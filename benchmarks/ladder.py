"""The conditioning ladder on one Domino drafter: marginal -> static_corrected -> conditional.

Same drafter, budget and prompts for every rung, run interleaved (hf_treegen.bench). Reports tau,
build and verify ms per round, tokens/s and the speedup over stock generate(), plus the per-depth
calibration of every rung over all rounds (drafter-predicted mass per round vs nodes the target
accepted per round): how well each rung's path probabilities predict acceptance.

    .venv/bin/python benchmarks/ladder.py --drafter PATH [--prompts 12] [--budget 16] [--max-new-tokens 64]

Without --drafter a random Domino head is used: that checks the plumbing, not the gain (tau ~ 1).
"""

from __future__ import annotations

import argparse

import torch

import hf_treegen as htg
from hf_treegen.bench.harness import report_strategies
from hf_treegen.bench.prompt_files import render_chat
from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.models import load_smollm2

# the held-out built-in prompts of the main bench: code, explain and chat in turn
PROMPTS = [p for trio in zip(*(builtin_prompts(kind) for kind in ("code", "explain", "chat"))) for p in trio]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drafter", help="Domino drafter checkpoint (default: random head, plumbing only)")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--strategies", default="chain,marginal,static_corrected,conditional,cond_adaptive")
    args = parser.parse_args()

    model, tokenizer = load_smollm2(torch.float32)
    model = htg.enable(model)
    if args.drafter:
        drafter = htg.DominoDrafter.from_pretrained(args.drafter, target=model)
    else:
        torch.manual_seed(0)
        cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=16, projector_type="domino",
                                           emb_dim=128, gru_hidden_dim=256)
        drafter = htg.DominoDrafter(cfg, target=model).eval()
    prompts = [render_chat(tokenizer, p) for p in PROMPTS[: args.prompts]]
    report_strategies(model, prompts, drafter, args.strategies.split(","), max_new_tokens=args.max_new_tokens,
                      budget=args.budget,
                      header=f"SmolLM2-135M-Instruct fp32, {drafter.config.describe()}, budget {args.budget}")


if __name__ == "__main__":
    main()
