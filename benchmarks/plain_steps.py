"""What one plain-step token of ``auto`` costs against a stock decode step, on the embedded SmolLM2.

    .venv/bin/python benchmarks/plain_steps.py                  # 4 chat prompts, 96 tokens, 2 threads

``auto`` is pinned to plain one-token steps by a cost profile in which drafting never pays (a draft
costs 10 s), so every round is one target forward plus the loop's own work. Two profiles are compared
with stock ``generate()``, interleaved prompt by prompt: one that keeps one-row forwards on the default
kernels (``packed_from_rows`` 4) and one that packs every forward (``packed_from_rows`` 1). Each cell
is the median ms per new token over the prompts of the timed repetition (the first repetition warms
up). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import hf_treegen as htg
from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.models import load_default_pair


def pinned_to_plain_steps(packed_from_rows: int) -> htg.CostProfile:
    """A profile under which no tree pays: a step costs 31 ms, any wider forward or a draft far more."""
    return htg.CostProfile.from_verify_seconds({1: 0.031, 2: 1.0, 65: 10.0}, draft_s=10.0,
                                               packed_from_rows=packed_from_rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-prompts", type=int, default=4, help="built-in chat prompts")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, drafter = load_default_pair()
    variants = {
        "stock generate()": {},
        "auto, plain steps (packed_from_rows 4)": dict(tree_costs=pinned_to_plain_steps(4)),
        "auto, plain steps (packed_from_rows 1)": dict(tree_costs=pinned_to_plain_steps(1)),
    }
    ms_per_token: dict[str, list[float]] = {name: [] for name in variants}
    for repetition in range(2):
        for prompt in builtin_prompts("chat")[: args.num_prompts]:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                return_tensors="pt", return_dict=True)["input_ids"]
            for name, kwargs in variants.items():
                if kwargs:
                    kwargs = dict(kwargs, assistant_model=drafter, tree_strategy="auto")
                t0 = time.perf_counter()
                out = model.generate(ids, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                                     do_sample=False, **kwargs)
                seconds = time.perf_counter() - t0
                if repetition > 0:
                    ms_per_token[name].append(1000 * seconds / (out.shape[1] - ids.shape[1]))
    print(f"{args.num_prompts} chat prompts, {args.max_new_tokens} new tokens, fp32, {args.threads} threads")
    for name, values in ms_per_token.items():
        print(f"{name:<40} {statistics.median(values):7.2f} ms/token   ({', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
