"""SmolLM2-135M-Instruct (fp32, CPU): stock generate() vs tree strategies with a random DFlash drafter.

A random drafter accepts nothing (tau ~ 1), so this measures the engine's overhead per token and
checks exactness on a real model; the trained drafter and the full harness come with `hf-treegen bench`.
Methods run interleaved on the same prompts; the table reports medians over prompts.

    .venv/bin/python benchmarks/smollm2_random_drafter.py [--max-new-tokens 48] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import hf_treegen as htg
from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.models import load_smollm2

PROMPTS = builtin_prompts("python-qa")[:6]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--strategies", default="chain,marginal,adaptive")
    parser.add_argument("--block-size", type=int, default=8)
    args = parser.parse_args()

    model, tokenizer = load_smollm2(torch.float32)
    model = htg.enable(model)
    torch.manual_seed(0)
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=args.block_size)
    drafter = htg.DFlashDrafter(cfg, target=model).eval()
    strategies = args.strategies.split(",")
    rows = {name: {"tps": [], "tau": [], "same": 0, "stages": []} for name in ["ar", *strategies]}

    # warm-up (also measures the adaptive verify-cost curve once)
    warm = tokenizer("Hello", return_tensors="pt").input_ids
    for s in strategies:
        model.generate(warm, assistant_model=drafter, tree_strategy=s, max_new_tokens=4, do_sample=False)

    for text in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        t0 = time.perf_counter()
        ref = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
        ar_s = time.perf_counter() - t0
        new = ref.shape[1] - ids.shape[1]
        rows["ar"]["tps"].append(new / ar_s)
        rows["ar"]["tau"].append(1.0)
        rows["ar"]["same"] += 1
        for s in strategies:
            t0 = time.perf_counter()
            out = model.generate(ids, assistant_model=drafter, tree_strategy=s, max_new_tokens=args.max_new_tokens,
                                 do_sample=False, return_dict_in_generate=True)
            seconds = time.perf_counter() - t0
            rows[s]["tps"].append(new / seconds)
            rows[s]["tau"].append(out.tree_stats.tau)
            rows[s]["same"] += int(torch.equal(out.sequences, ref))
            rows[s]["stages"].append(out.tree_stats.per_round_ms())

    print(f"SmolLM2-135M-Instruct fp32, {torch.get_num_threads()} threads, {len(PROMPTS)} prompts, "
          f"{args.max_new_tokens} new tokens, random 1-layer DFlash drafter (block {args.block_size})")
    ar_median = statistics.median(rows["ar"]["tps"])
    print(f"{'method':<10} {'tok/s':>7} {'vs AR':>6} {'tau':>5} {'same':>5}  per-round ms: draft build verify walk commit")
    for name, r in rows.items():
        tps = statistics.median(r["tps"])
        stages = ""
        if r["stages"]:
            keys = ("draft", "build", "verify", "walk", "commit")
            stages = " ".join(f"{statistics.median(st[k] for st in r['stages']):6.1f}" for k in keys)
        print(f"{name:<10} {tps:7.2f} {tps / ar_median:6.2f} {statistics.median(r['tau']):5.2f} "
              f"{r['same']}/{len(PROMPTS)}  {stages}")


if __name__ == "__main__":
    main()
