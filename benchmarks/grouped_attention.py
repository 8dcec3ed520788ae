"""Verify-forward cost with transformers' sdpa (each shared key/value head copied per query head) against
tree attention on the grouped heads read in place (hf_treegen.target.grouped), by context length.

    .venv/bin/python benchmarks/grouped_attention.py --out docs/results/grouped_attention.txt

Times one chain-masked verify forward of the embedded SmolLM2-135M-Instruct (fp32, 9 query heads on 3
key/value heads), as tree decoding runs it on a CPU (packed kernels), at several row counts on caches of
--contexts random tokens. The two attention paths alternate pass by pass, so a burst of other work lands
on both; the first pass of each is a warm-up, and each cell is the median over the timed passes. It also
checks that both paths give the same logits, bit for bit. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import torch

from hf_treegen.bench.machine import run_context
from hf_treegen.calibration import VerifyTimer
from hf_treegen.models import load_smollm2
from hf_treegen.target import grouped_tree_attention, packed_linears

PATHS = {"sdpa": lambda model: contextlib.nullcontext(), "grouped": grouped_tree_attention}


def parse_ints(parser, name: str, text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",")})
    except ValueError:
        parser.error(f"--{name} {text!r}: give whole numbers separated by commas, e.g. 1,5,9")
    if values[0] < 1:
        parser.error(f"--{name}: every value must be at least 1")
    return values


@torch.inference_mode()
def measure(model, rows: list[int], context: int, passes: int) -> tuple[dict[str, dict[int, float]], bool]:
    """Median ms per row count for each attention path, and whether their logits are equal."""
    timers = {}
    for name, within in PATHS.items():
        with within(model):
            timers[name] = VerifyTimer(model, rows, context)
    for number in range(passes + 1):
        for name, within in PATHS.items():
            with within(model):
                timers[name].timed_pass(keep=number > 0)  # pass 0 warms the kernels up
    logits = {}
    for name, within in PATHS.items():
        timer = timers[name]
        with within(model):
            logits[name] = timer.verify(timer.trees[rows[-1]], timer.context, timer.cache)
        timer.timed_pass(keep=False)  # leaves the cache as it found it
    same = torch.equal(logits["sdpa"], logits["grouped"])
    return {name: {r: 1000 * s for r, s in timer.medians().items()} for name, timer in timers.items()}, same


def table(context: int, medians: dict[str, dict[int, float]], rows: list[int], same: bool) -> str:
    lines = [f"{context:>7} {'path':<8} " + " ".join(f"{f'{r} rows':>9}" for r in rows) + "  same logits"]
    for name, per_rows in medians.items():
        lines.append(f"{'':>7} {name:<8} " + " ".join(f"{per_rows[r]:9.1f}" for r in rows)
                     + (f"  {'yes' if same else 'NO'}" if name == "grouped" else ""))
    ratio = " ".join(f"{medians['sdpa'][r] / medians['grouped'][r]:8.2f}x" for r in rows)
    lines.append(f"{'':>7} {'speed-up':<8} {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,5,9,17", help="verify row counts (default: %(default)s)")
    parser.add_argument("--contexts", default="128,540,1500", help="tokens in the cache (default: %(default)s)")
    parser.add_argument("--passes", type=int, default=9, help="timed passes per path (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="(default: %(default)s)")
    parser.add_argument("--out", help="also write the table here")
    args = parser.parse_args(argv)
    rows = parse_ints(parser, "rows", args.rows)
    contexts = parse_ints(parser, "contexts", args.contexts)
    if args.passes < 1:
        parser.error("--passes: time at least one pass")
    torch.set_num_threads(args.threads)
    model, _ = load_smollm2(torch.float32)
    header = [f"verify forward, SmolLM2-135M-Instruct fp32 on packed kernels, {args.threads} threads, median ms of "
              f"{args.passes} interleaved passes; sdpa = transformers' (key/value heads copied), grouped = read in "
              f"place", *run_context(), ""]
    print("\n".join(header), flush=True)
    blocks = []
    with packed_linears(model):
        for context in contexts:
            medians, same = measure(model, rows, context, args.passes)
            blocks.append(table(context, medians, rows, same))
            print(blocks[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(header + blocks) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
