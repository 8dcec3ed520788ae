"""The held-out validation curve of `hf-treegen train-drafter` runs: the table and the plot that
``benchmarks/training_curve.py`` prints and draws.

Each run folder holds the trainer's ``log.jsonl`` (one line per held-out evaluation). The table lists,
per evaluation, the step, the training minutes, the learning rate, the held-out chain tau (expected
accepted drafts per round plus the bonus token), the top-1 accuracy at depths 1-4 and the held-out
loss. The plot draws tau against the step, with an optional horizontal line at another drafter's
held-out tau on the same split. The plot needs matplotlib (the ``plots`` extra).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..extras import pyplot


def read_log(run: Path) -> list[dict]:
    """The evaluations of a run, in step order (a resumed run may repeat a step: the last one wins)."""
    path = Path(run) / "log.jsonl"
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


def read_runs(runs: list[Path], labels: list[str] | None = None) -> list[tuple[str, list[dict]]]:
    """(label, evaluations) of each run folder; ``labels`` default to the folder names."""
    labels = labels if labels is not None else [str(run) for run in runs]
    if len(labels) != len(runs):
        raise SystemExit(f"--labels names {len(labels)} runs, but {len(runs)} were given.")
    return [(label, read_log(run)) for label, run in zip(labels, runs)]


def table(label: str, rows: list[dict]) -> str:
    lines = [label, f"{'step':>6} {'minutes':>8} {'lr':>9} {'tau':>6}  {'depth-1..4 acc':<19} {'loss':>7}"]
    for r in rows:
        acc = " ".join(f"{a:.2f}" for a in r.get("acc", [])[:4])
        loss = f"{r['loss']:.3f}" if r.get("loss") is not None else "-"
        lines.append(f"{r['step']:>6} {r['elapsed_s'] / 60:>8.1f} {r['lr']:>9.2e} {r['tau']:>6.3f}  {acc:<19} {loss:>7}")
    best = max(rows, key=lambda r: r["tau"])
    lines.append(f"best: tau {best['tau']:.3f} at step {best['step']}")
    return "\n".join(lines)


def tables(runs: list[tuple[str, list[dict]]]) -> str:
    """One :func:`table` per run, a blank line between them."""
    return "\n\n".join(table(label, rows) for label, rows in runs)


def plot(runs: list[tuple[str, list[dict]]], reference: float | None, path: Path,
         reference_label: str = "reference") -> Path:
    """Draw each run's held-out tau against the step into the PNG ``path`` (and ``reference`` as a
    dashed line); returns ``path``."""
    plt = pyplot()
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
