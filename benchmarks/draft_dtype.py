"""One draft forward of the shipped SmolLM2 drafter in fp32 and in bf16, beside the fp32 target.

A draft round in decoding runs right after a verify forward has streamed the target's weights through
the core's cache, so the drafter reads its own weights and head rows from farther away every round.
This times the draft the same way: each timed draft follows one target forward and a commit of 2
rows to the drafter's context (as a round with one accepted token leaves it). The two dtypes alternate
block by block; the table prints medians, and the kernels are those decoding runs (packed on a CPU).

    .venv/bin/python benchmarks/draft_dtype.py [--rounds 60] [--context 300] [--threads 2]

Only the drafter's dtype differs, never the target's, so output tokens do not depend on it; tau does
slightly (benchmarks/drafter_tau.py --drafters shipped@fp32,shipped@bf16).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hf_treegen.drafters.auto import load_any_drafter
from hf_treegen.models import DEFAULT_DRAFTER_DIR, load_smollm2
from hf_treegen.ops import native_bf16_matmuls
from hf_treegen.target import packed_linears

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
COMMITTED_PER_ROUND = 2  # rows a round with one accepted drafted token adds to the drafter's context


@torch.no_grad()
def timed_drafts(model, drafter, rounds: int, context: int, seed: int) -> list[float]:
    """Seconds of ``rounds`` drafts, each after a 3-row target forward and a 2-row commit."""
    generator = torch.Generator().manual_seed(seed)
    features = lambda rows: torch.randn(rows, drafter.config.feature_size, generator=generator)  # noqa: E731
    ids = torch.randint(0, model.config.vocab_size, (1, 3), generator=generator)
    session = drafter.new_session()
    session.extend(features(context), torch.arange(context))
    seconds = []
    for i in range(rounds):
        start = context + COMMITTED_PER_ROUND * i
        session.extend(features(COMMITTED_PER_ROUND), torch.arange(start, start + COMMITTED_PER_ROUND))
        model(ids)  # streams the target's weights through the cache, as a verify forward does
        t0 = time.perf_counter()
        session.draft(int(ids[0, 0]), start + COMMITTED_PER_ROUND)
        seconds.append(time.perf_counter() - t0)
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60, help="timed drafts per dtype and block")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per dtype")
    parser.add_argument("--context", type=int, default=300, help="committed positions before the first draft")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not native_bf16_matmuls("cpu"):
        print("note: this CPU has no native bf16 matmuls, so the bf16 drafter runs on emulated kernels here")

    model, _ = load_smollm2(torch.float32)
    drafters = {name: load_any_drafter(DEFAULT_DRAFTER_DIR, target=model, dtype=dtype).eval()
                for name, dtype in DTYPES.items()}
    times: dict[str, list[float]] = {name: [] for name in DTYPES}
    with packed_linears(model, *drafters.values()):
        for block in range(args.blocks):
            for name, drafter in drafters.items():
                seconds = timed_drafts(model, drafter, args.rounds, args.context, seed=block)
                times[name] += seconds[5:]  # the first drafts of a block warm the session up

    print(f"one draft forward after a target forward, shipped SmolLM2 drafter ({drafters['fp32'].config.block_size} "
          f"rows, draft vocabulary {drafters['fp32'].draft_vocab.numel()}), fp32 target, {args.threads} threads, "
          f"context {args.context}+; medians over {args.blocks} alternating blocks of {args.rounds - 5} drafts")
    base = statistics.median(times["fp32"])
    print(f"{'drafter dtype':<14} {'ms/draft':>9} {'vs fp32':>8}")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:<14} {median * 1e3:9.2f} {median / base:8.2f}")


if __name__ == "__main__":
    main()
