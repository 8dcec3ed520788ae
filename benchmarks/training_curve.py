"""The held-out validation curve of one or more `hf-treegen train-drafter` runs: a table and a plot.

    .venv/bin/python benchmarks/training_curve.py runs/domino-long
    .venv/bin/python benchmarks/training_curve.py runs/a runs/b --labels "from scratch,continued" \
        --reference 1.704 --reference-label "shipped drafter" --plot curve.png

Each run folder holds the trainer's ``log.jsonl`` (one line per held-out evaluation). The table lists,
per evaluation, the step, the training minutes, the learning rate, the held-out chain tau (expected
accepted drafts per round plus the bonus token), the top-1 accuracy at depths 1-4 and the held-out
loss. ``--reference`` draws a horizontal line at another drafter's held-out tau on the same split (the
step-0 row of a run started with ``--init`` from that drafter gives it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_log(run: Path) -> list[dict]:
    """The evaluations of a run, in step order (a resumed run may repeat a step: the last one wins)."""
    path = run / "log.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: pass the --out folder of a train-drafter run.")
    rows: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            rows[int(entry["step"])] = entry
    if not rows:
        raise SystemExit(f"{path} holds no evaluation yet.")
    return [rows[step] for step in sorted(rows)]


def table(label: str, rows: list[dict]) -> str:
    lines = [label, f"{'step':>6} {'minutes':>8} {'lr':>9} {'tau':>6}  {'depth-1..4 acc':<19} {'loss':>7}"]
    for r in rows:
        acc = " ".join(f"{a:.2f}" for a in r.get("acc", [])[:4])
        loss = f"{r['loss']:.3f}" if r.get("loss") is not None else "-"
        lines.append(f"{r['step']:>6} {r['elapsed_s'] / 60:>8.1f} {r['lr']:>9.2e} {r['tau']:>6.3f}  {acc:<19} {loss:>7}")
    best = max(rows, key=lambda r: r["tau"])
    lines.append(f"best: tau {best['tau']:.3f} at step {best['step']}")
    return "\n".join(lines)


def plot(runs: list[tuple[str, list[dict]]], reference: float | None, path: Path,
         reference_label: str = "reference") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for label, rows in runs:
        ax.plot([r["step"] for r in rows], [r["tau"] for r in rows], marker="o", markersize=3, label=label)
    if reference is not None:
        ax.axhline(reference, color="grey", linestyle="--", linewidth=1, label=f"{reference_label} {reference:.3f}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("held-out chain tau")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="train-drafter --out folders")
    parser.add_argument("--labels", help="comma-separated names for the runs (default: the folder names)")
    parser.add_argument("--reference", type=float, help="another drafter's held-out tau on the same split")
    parser.add_argument("--reference-label", default="reference", help="the legend entry of --reference")
    parser.add_argument("--plot", type=Path, help="write the curves to this PNG")
    args = parser.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [str(run) for run in args.runs]
    if len(labels) != len(args.runs):
        raise SystemExit(f"--labels names {len(labels)} runs, but {len(args.runs)} were given.")
    runs = [(label, read_log(run)) for label, run in zip(labels, args.runs)]
    print("\n\n".join(table(label, rows) for label, rows in runs))
    if args.plot is not None:
        plot(runs, args.reference, args.plot, args.reference_label)


if __name__ == "__main__":
    main()
