"""How much the measured verify curve moves between calibrations in a row, for two ways of reading the
timed passes: the median of 3 passes with a running maximum over sizes (what profiles kept up to
version 4), and the fastest of 5 passes with the lower envelope (what they keep now).

    .venv/bin/python benchmarks/calibration_spread.py                 # 8 calibrations of the embedded target
    .venv/bin/python benchmarks/calibration_spread.py --trials 4 --dtype bf16

Each trial is one fresh VerifyTimer on the packed kernels (as tree decoding runs them): a warm-up pass,
then 5 timed passes over every size; both readings come from the same passes, so they saw the same
machine. The spread row is the largest over the smallest value at each size across trials: the closer
to 1.00, the less a cost-aware plan depends on when the machine was timed.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from hf_treegen.calibration import VerifyTimer
from hf_treegen.costs import VerifyCostModel
from hf_treegen.models import load_smollm2
from hf_treegen.target import packed_linears

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32]
TIMED_PASSES = 5
OLD_PASSES = 3  # the passes profiles used to take the median of


def running_maximum(seconds: list[float]) -> list[float]:
    """The old monotone fix: each size costs at least the most measured at any narrower size."""
    out, top = [], 0.0
    for s in seconds:
        top = max(top, s)
        out.append(top)
    return out


def readings(timer: VerifyTimer) -> dict[str, list[float]]:
    """Milliseconds per size under each reading of one timer's passes."""
    old = [statistics.median(timer.runs[rows][:OLD_PASSES]) for rows in SIZES]
    new = VerifyCostModel.from_measurements(SIZES, [min(timer.runs[rows]) for rows in SIZES]).seconds
    return {f"median of {OLD_PASSES}, running max": [1000 * s for s in running_maximum(old)],
            f"fastest of {TIMED_PASSES}, lower envelope": [1000 * s for s in new]}


def table(name: str, trials: list[list[float]]) -> str:
    lines = [name, "rows     " + " ".join(f"{r:>6}" for r in SIZES)]
    lines += ["         " + " ".join(f"{ms:6.1f}" for ms in trial) for trial in trials]
    spread = [max(t[i] for t in trials) / min(t[i] for t in trials) for i in range(len(SIZES))]
    lines.append("spread   " + " ".join(f"{x:6.2f}" for x in spread))
    nine = SIZES.index(9)
    lines.append("verify(9 rows) / one step, per trial: " + " ".join(f"{t[nine] / t[0]:.2f}" for t in trials))
    return "\n".join(lines)


@torch.inference_mode()
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8, help="calibrations in a row")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--context", type=int, default=128, help="tokens in the cache while timing")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.trials < 2:
        parser.error("--trials: at least 2 (a spread needs two calibrations)")
    torch.set_num_threads(args.threads)
    model, _ = load_smollm2(DTYPES[args.dtype])
    per_reading: dict[str, list[list[float]]] = {}
    with packed_linears(model):
        for _ in range(args.trials):
            timer = VerifyTimer(model, SIZES, args.context)
            for number in range(TIMED_PASSES + 1):
                timer.timed_pass(keep=number > 0)  # pass 0 warms the kernels up
            for name, ms in readings(timer).items():
                per_reading.setdefault(name, []).append(ms)
    print(f"verify forward ms by rows, SmolLM2-135M-Instruct {args.dtype}, packed kernels, {args.context} tokens of "
          f"context, {args.threads} threads, {args.trials} calibrations in a row")
    for name, trials in per_reading.items():
        print()
        print(table(name, trials))


if __name__ == "__main__":
    main()
