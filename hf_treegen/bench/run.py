"""``hf-treegen bench``: strategies x temperatures on a prompt set, tables, JSON and a plot."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..builders import STRATEGIES
from .harness import (BASELINES, category_speedups, format_categories, format_table, parse_tree_spec,
                      run_strategies, strategy_name)
from .prompt_files import load_prompt_texts, render_chat

KNOWN = BASELINES + STRATEGIES


def parse_strategies(spec: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in names if strategy_name(s) not in KNOWN]
    if unknown:
        raise ValueError(f"Unknown strategy {unknown}; choose from: {', '.join(KNOWN)} "
                         f"(a tree strategy may carry its own budget and context lookup: conditional@8, "
                         f"conditional@4+lookup8).")
    for name in names:  # a malformed suffix is refused here, before anything loads
        if name not in BASELINES:
            parse_tree_spec(name, None)
    return names


def with_other_drafters(strategies: list[str], labels: list[str]) -> list[str]:
    """Every tree strategy once more per other drafter: ``["ar", "auto"]``, ``["2layers"]`` ->
    ``["ar", "auto", "auto:2layers"]`` (baselines run once, as they use no drafter; a strategy that
    already names its drafter stays as it is)."""
    tree = [s for s in strategies if s not in BASELINES and parse_tree_spec(s, None).drafter is None]
    return strategies + [f"{s}:{label}" for label in labels for s in tree]


def drafter_labels(paths: list[str]) -> list[str]:
    """Short row labels for drafter folders or Hub ids: the last path part, numbered where two agree."""
    labels = []
    for path in paths:
        base = Path(path.rstrip("/")).name or path
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return labels


def run_bench(model, tokenizer, drafter, prompts_spec: str, strategies: list[str], temperatures: list[float],
              max_new_tokens: int, budget: int | None, num_prompts: int | None = None, seed: int = 0,
              lean: bool = True, other_drafters: dict | None = None) -> dict:
    """``other_drafters`` (label -> drafter): every tree strategy also runs with each of them, on the
    same prompts, interleaved, as a row ``strategy:label``."""
    rows = load_prompt_texts(prompts_spec, limit=num_prompts)[: num_prompts or None]
    prompts = [render_chat(tokenizer, r["prompt"]).to(model.device) for r in rows]
    tree = [s for s in strategies if s not in BASELINES]
    if tree and drafter is None:
        raise ValueError(f"strategies {tree} need a drafter.")
    strategies = with_other_drafters(strategies, list(other_drafters or {}))
    # warm-up: first-use costs (adaptive verify-cost curves, allocator growth) stay out of the tables
    run_strategies(model, prompts[:1], drafter, strategies, max_new_tokens=4, budget=budget, progress=False,
                   lean=lean, other_drafters=other_drafters)
    report = {"prompts": prompts_spec, "num_prompts": len(prompts), "max_new_tokens": max_new_tokens,
              "budget": budget, "threads": torch.get_num_threads(), "tables": {}}
    for temperature in temperatures:
        torch.manual_seed(seed)
        results = run_strategies(model, prompts, drafter, strategies, max_new_tokens=max_new_tokens, budget=budget,
                                 temperature=temperature, lean=lean, other_drafters=other_drafters)
        text = format_table(results, greedy=temperature == 0)
        categories = [r["category"] for r in rows]
        by_category = category_speedups(results, categories)
        if len(set(categories)) > 1:
            text += "\n\n" + format_categories(by_category)
        report["tables"][str(temperature)] = {"rows": [r.row() for r in results], "by_category": by_category,
                                              "text": text}
    return report


def plot_report(report: dict, path: str) -> None:
    from ..extras import pyplot

    plt = pyplot()

    temps = list(report["tables"])
    names = [r["strategy"] for r in report["tables"][temps[0]]["rows"]]
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(names), 3.6))
    width = 0.8 / len(temps)
    for i, t in enumerate(temps):
        speed = [r["speedup"] for r in report["tables"][t]["rows"]]
        ax.bar([x + i * width for x in range(len(names))], speed, width, label=f"T={t}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks([x + width * (len(temps) - 1) / 2 for x in range(len(names))], names, rotation=30, ha="right")
    ax.set_ylabel("speedup over stock generate()")
    ax.set_title(f"{report['prompts']}, {report['num_prompts']} prompts, budget {report['budget']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_json(report: dict, path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=2) + "\n")
