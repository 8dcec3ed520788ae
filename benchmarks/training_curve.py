"""The held-out validation curve of one or more `hf-treegen train-drafter` runs: a table and a plot.

    .venv/bin/python benchmarks/training_curve.py runs/domino-long
    .venv/bin/python benchmarks/training_curve.py runs/a runs/b --labels "from scratch,continued" \
        --reference 1.704 --reference-label "shipped drafter" --plot curve.png

Each run folder holds the trainer's ``log.jsonl`` (one line per held-out evaluation). The table lists,
per evaluation, the step, the training minutes, the learning rate, the held-out chain tau (expected
accepted drafts per round plus the bonus token), the top-1 accuracy at depths 1-4 and the held-out
loss. ``--reference`` draws a horizontal line at another drafter's held-out tau on the same split (the
step-0 row of a run started with ``--init`` from that drafter gives it). The reading, the table and the
plot live in hf_treegen/bench/training_curve.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hf_treegen.bench.training_curve import plot, read_runs, tables


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="train-drafter --out folders")
    parser.add_argument("--labels", help="comma-separated names for the runs (default: the folder names)")
    parser.add_argument("--reference", type=float, help="another drafter's held-out tau on the same split")
    parser.add_argument("--reference-label", default="reference", help="the legend entry of --reference")
    parser.add_argument("--plot", type=Path, help="write the curves to this PNG")
    args = parser.parse_args(argv)
    runs = read_runs(args.runs, args.labels.split(",") if args.labels else None)
    print(tables(runs))
    if args.plot is not None:
        print(f"plot: {plot(runs, args.reference, args.plot, args.reference_label)}")


if __name__ == "__main__":
    main()
