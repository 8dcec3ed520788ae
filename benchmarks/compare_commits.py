"""Did a change make anything slower? The same bench cells on two commits, run alternately.

    .venv/bin/python benchmarks/compare_commits.py --base e2927fe            # base vs the working tree
    .venv/bin/python benchmarks/compare_commits.py --base A --head B --repeats 3

Each side runs in its own process (two versions of one package cannot share one), with PYTHONPATH on
a git worktree of its commit, and the sides alternate A B A B ... so a machine that slows down or
speeds up mid-run affects both alike. Two cells by default: ``hf-treegen bench`` (tree decoding: the
fixed strategies, so no calibration decides the comparison) and ``hf-treegen choose-bench`` (compiled
choice with the full probe and the automatic width). The table lists each side's median over the
repeats and the head/base ratio. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREE_CELL = ["bench", "--prompts", "builtin:code,explain,chat", "--num-prompts", "4", "--max-new-tokens", "48",
             "--strategies", "ar,chain,conditional@8", "--no-lean"]
CHOICE_CELL = ["choose-bench", "--k", "10", "--n", "2", "--num-prompts", "4", "--engines", "serial,compiled,adaptive"]


def worktree(ref: str, root: Path) -> Path:
    path = root / ref.replace("/", "_")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), ref], check=True)
    return path


def run_cell(source: Path, cell: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source)}
    cmd = [sys.executable, "-m", "hf_treegen.cli", *cell, "--json", str(out)]
    subprocess.run(cmd, env=env, cwd=source, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def tree_numbers(report: dict) -> dict[str, float]:
    rows = report["tables"]["0.0"]["rows"]
    return {f"{r['strategy']} tok/s": r["tok_s"] for r in rows}


def choice_numbers(report: dict) -> dict[str, float]:
    out = {}
    for cell in report["cells"]:
        for engine, entry in cell["engines"].items():
            out[f"k={cell['k']} n={cell['n']} {engine} ms"] = entry["latency_ms"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare against")
    parser.add_argument("--head", default=None, help="the commit to test (default: the working tree)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each cell on each side (default: 2)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=REPO.parent, prefix=".compare-") as tmp:
        tmp = Path(tmp)
        sides = {"base": worktree(args.base, tmp), "head": worktree(args.head, tmp) if args.head else REPO}
        numbers: dict[str, dict[str, list[float]]] = {"base": {}, "head": {}}
        try:
            for i in range(args.repeats):
                order = ["base", "head"] if i % 2 == 0 else ["head", "base"]
                for cell, parse in ((TREE_CELL, tree_numbers), (CHOICE_CELL, choice_numbers)):
                    for side in order:
                        found = parse(run_cell(sides[side], cell, tmp / f"{side}.json"))
                        for key, value in found.items():
                            numbers[side].setdefault(key, []).append(value)
                        print(f"repeat {i + 1}/{args.repeats}: {cell[0]} on {side} done", file=sys.stderr, flush=True)
        finally:
            for side in ("base", "head"):
                if sides[side] != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(sides[side])])
    head_label = args.head or "working tree"
    print(f"base {args.base} vs head {head_label}: medians of {args.repeats} alternating runs")
    print(f"{'cell':38s} {'base':>10s} {'head':>10s} {'head/base':>10s}")
    for key in numbers["base"]:
        base, head = statistics.median(numbers["base"][key]), statistics.median(numbers["head"].get(key, [float("nan")]))
        print(f"{key:38s} {base:10.2f} {head:10.2f} {head / base:10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
