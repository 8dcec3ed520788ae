"""Verify-forward cost on the default CPU kernels against the packed ones (hf_treegen.packed_linears).

    .venv/bin/python benchmarks/verify_kernels.py                    # fp32 and bf16, 2 threads
    .venv/bin/python benchmarks/verify_kernels.py --dtypes fp32 --threads 1 --passes 9

Times one chain-masked verify forward of the embedded SmolLM2-135M-Instruct, as tree decoding runs it,
at several row counts on a cache of --context random tokens: on the default kernels with the verifier's
LM-head shortcut ("default") and with the model's own head ("own head"), and on the packed kernels. The
kernel sets alternate pass by pass (one pass = every row count once), so a burst of other work lands on
every row; the first pass of each is a warm-up. Each cell is the median over the timed passes. Run it
on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib

import torch

from hf_treegen.calibration import VerifyTimer
from hf_treegen.models import load_smollm2
from hf_treegen.target import packed_linears

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@torch.inference_mode()  # as decoding runs: no autograd bookkeeping in the timed forwards
def measure(dtype: torch.dtype, rows: list[int], context: int, passes: int) -> dict[str, dict[int, float]]:
    """Median ms per row count for each kernel set, the two sets alternating pass by pass."""
    model, _ = load_smollm2(dtype)
    kernels = {"default": contextlib.nullcontext, "own head": contextlib.nullcontext,
               "packed": lambda: packed_linears(model)}
    timers = {}
    for name, within in kernels.items():
        with within():
            timers[name] = VerifyTimer(model, rows, context, head_shortcut=name != "own head")
    for number in range(passes + 1):
        for name, within in kernels.items():
            with within():
                timers[name].timed_pass(keep=number > 0)  # pass 0 warms the kernels up
    return {name: {r: 1000 * s for r, s in timer.medians().items()} for name, timer in timers.items()}


def table(label: str, medians: dict[str, dict[int, float]], rows: list[int]) -> str:
    lines = [f"{label:<8} {'kernels':<8} " + " ".join(f"{f'{r} rows':>9}" for r in rows)]
    for name, per_rows in medians.items():
        lines.append(f"{'':<8} {name:<8} " + " ".join(f"{per_rows[r]:9.1f}" for r in rows))
    # the faster default-kernel head against the packed kernels: above 1x packing pays at that width
    ratio = " ".join(f"{min(medians['default'][r], medians['own head'][r]) / medians['packed'][r]:8.2f}x"
                     for r in rows)
    lines.append(f"{'':<8} {'ratio':<8} {ratio}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16")
    parser.add_argument("--rows", default="1,5,9,17,33", help="comma-separated verify row counts")
    parser.add_argument("--context", type=int, default=128, help="tokens in the cache")
    parser.add_argument("--passes", type=int, default=7, help="timed passes per kernel set (after a warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = sorted({int(r) for r in args.rows.split(",")})
    names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in names if d not in DTYPES]
    if unknown:
        parser.error(f"--dtypes: unknown {', '.join(unknown)}; use fp32 and/or bf16")
    print(f"verify forward, SmolLM2-135M-Instruct, {args.context}-token context, {args.threads} threads, "
          f"median ms of {args.passes} interleaved passes")
    for name in names:
        print(table(name, measure(DTYPES[name], rows, args.context, args.passes), rows), flush=True)


if __name__ == "__main__":
    main()
