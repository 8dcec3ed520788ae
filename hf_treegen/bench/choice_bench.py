"""``hf-treegen choose-bench``: selection engines side by side on real selection prompts.

For every (k, n) the same prompts go through every engine, interleaved prompt by prompt (the engine
order rotates so no engine always runs first):

    serial     stock generate() + SerialChoiceProcessor (one forward per output token): the reference
    chunked    one forward per decision (forced spans appended together)
    outlines   stock generate() + outlines' regex processor over all orderings (small k, n only)
    compiled   prefill + one full tree-causal probe
    adaptive   compiled with the width chosen by the measured cost model
    unary      top-n labels of the first-slot scores (no history)

Reported per engine: median latency, dependent forwards, agreement with serial (same labels in the
same order; ``token_agreement``: same token ids, which outlines can miss by spelling a label differently);
for compiled: probe rows (decision nodes) and tokens, the work ratio (tokens evaluated after the
prompt, relative to serial) and decision-margin statistics.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import torch

from ..choice import ChoiceGrammar, chunked_select, compiled_select, serial_select
from ..choice.baselines import OUTLINES_MAX_PERMUTATIONS, OutlinesChoice, unary_select
from ..choice.engines import measured_cost
from ..choice.width import context_bucket
from ..choice.width import MissStats
from .choice_prompts import selection_prompts

ENGINES = ("serial", "chunked", "outlines", "compiled", "adaptive", "unary")


def parse_engines(spec: str) -> list[str]:
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in names if s not in ENGINES]
    if unknown:
        raise ValueError(f"unknown engine {unknown}; choose from {', '.join(ENGINES)}.")
    if "serial" not in names:
        names.insert(0, "serial")  # the reference every agreement is measured against
    return names


def _render(tokenizer, text: str) -> torch.Tensor:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)["input_ids"]


def _runner(engine, model, tokenizer, grammar):
    if engine == "serial":
        return lambda ids: serial_select(model, ids, grammar)
    if engine == "chunked":
        return lambda ids: chunked_select(model, ids, grammar)
    if engine == "compiled":
        return lambda ids: compiled_select(model, ids, grammar)
    if engine == "adaptive":  # one MissStats per cell: misses on earlier prompts correct later plans
        misses = MissStats()
        return lambda ids: compiled_select(model, ids, grammar, width="auto", miss_stats=misses)
    if engine == "unary":
        return lambda ids: unary_select(model, ids, grammar)
    if engine == "outlines":
        if math.perm(len(grammar.choices), grammar.num_select) > OUTLINES_MAX_PERMUTATIONS:
            return None
        return OutlinesChoice(model, tokenizer, grammar).select
    raise ValueError(engine)


def bench_config(model, tokenizer, k: int, n: int, prompts, engines: list[str], progress=None) -> dict:
    """One (k, n) cell: every engine on every prompt, interleaved."""
    labels = [f"[{i + 1}]" for i in range(k)]
    grammar = ChoiceGrammar(tokenizer, labels, n)
    runners = {e: _runner(e, model, tokenizer, grammar) for e in engines}
    runners = {e: r for e, r in runners.items() if r is not None}
    inputs = [_render(tokenizer, p.text(n)).to(model.device) for p in prompts]
    for ids in inputs:  # the cost curves of every context size the prompts fall in, measured before timing
        measured_cost(model, context_bucket(ids.shape[1]))
    for run in runners.values():  # warm-up: outlines caches, allocator growth
        run(inputs[0])
    results = {e: [] for e in runners}
    order = list(runners)
    for i, ids in enumerate(inputs):
        for engine in order[i % len(order):] + order[: i % len(order)]:
            results[engine].append(runners[engine](ids))
        if progress is not None:
            progress.update(1)
    return summarise(k, n, results, [ids.shape[1] for ids in inputs])


def summarise(k: int, n: int, results: dict, prompt_lengths: list[int]) -> dict:
    serial = results["serial"]
    serial_work = statistics.mean(len(r.token_ids) - 1 for r in serial)  # tokens fed after the prefill
    cell = {"k": k, "n": n, "prompts": len(serial), "prompt_tokens": statistics.median(prompt_lengths),
            "serial_tokens": statistics.mean(len(r.token_ids) for r in serial), "engines": {}}
    for engine, runs in results.items():
        entry = {
            "latency_ms": 1000 * statistics.median(r.seconds for r in runs),
            "forwards": statistics.mean(r.forwards for r in runs),
            "agreement": sum(r.labels == s.labels for r, s in zip(runs, serial)) / len(runs),
            "token_agreement": sum(r.token_ids == s.token_ids for r, s in zip(runs, serial)) / len(runs),
            "set_agreement": sum(set(r.indices) == set(s.indices) for r, s in zip(runs, serial)) / len(runs),
        }
        if engine in ("compiled", "adaptive"):
            margins = [min(r.margins) for r in runs]
            entry.update(
                probe_rows=statistics.mean(r.probe_rows for r in runs),
                probe_tokens=statistics.mean(r.probe_tokens for r in runs),
                work_ratio=statistics.mean(r.probe_tokens for r in runs) / max(serial_work, 1e-9),
                fallbacks=sum(r.fallbacks for r in runs), guarded=sum(r.guarded for r in runs),
                min_margin=min(margins), median_margin=statistics.median(margins),
                widths=sorted({str(r.width) for r in runs}),
            )
        cell["engines"][engine] = entry
    base = cell["engines"]["serial"]["latency_ms"]
    for entry in cell["engines"].values():
        entry["vs_serial"] = entry["latency_ms"] / base
    if "chunked" in cell["engines"]:
        chunked = cell["engines"]["chunked"]["latency_ms"]
        for entry in cell["engines"].values():
            entry["vs_chunked"] = entry["latency_ms"] / chunked
    return cell


def diagnose_config(model, tokenizer, k: int, n: int, prompts) -> dict | None:
    """Set inference and interactions on real prompts (exact enumeration; small k, n only): how far the
    sequential policy is from the unary shortcut (I_seq, TV, the bound TV <= I_seq/2), and whether the
    certified MAP set is the set greedy serial decoding picks."""
    from ..choice.setinference import interaction_mass, map_set, ordering_distribution

    if n < 2 or math.perm(k, n) > 720:
        return None
    grammar = ChoiceGrammar(tokenizer, [f"[{i + 1}]" for i in range(k)], n)
    rows = []
    for prompt in prompts:
        ids = _render(tokenizer, prompt.text(n)).to(model.device)
        report = interaction_mass(grammar, ordering_distribution(model, ids, grammar))
        best = map_set(model, ids, grammar, max_forwards=32, batch=64)
        greedy = compiled_select(model, ids, grammar)
        rows.append(dict(i_seq=report.i_seq, tv=report.tv, bound_holds=report.bound_holds,
                         certified=best.certified, map_forwards=best.forwards,
                         map_is_greedy_set=set(best.indices) == set(greedy.indices),
                         unary_is_greedy=tuple(report.unary_labels) == greedy.labels))
    return {"k": k, "n": n, "prompts": len(rows),
            "i_seq": statistics.mean(r["i_seq"] for r in rows), "tv": statistics.mean(r["tv"] for r in rows),
            "bound_holds": all(r["bound_holds"] for r in rows),
            "certified": sum(r["certified"] for r in rows) / len(rows),
            "map_forwards": statistics.mean(r["map_forwards"] for r in rows),
            "map_is_greedy_set": sum(r["map_is_greedy_set"] for r in rows) / len(rows),
            "unary_is_greedy": sum(r["unary_is_greedy"] for r in rows) / len(rows)}


def format_diagnostics(rows: list[dict]) -> str:
    lines = ["set inference and interactions (exact enumeration)",
             f"{'k':>3} {'n':>2} {'I_seq':>6} {'TV':>6} {'TV<=I/2':>7} {'MAP certified':>13} {'MAP fwd':>7} "
             f"{'MAP=greedy set':>14} {'unary=greedy':>12}"]
    for r in rows:
        lines.append(f"{r['k']:>3} {r['n']:>2} {r['i_seq']:6.3f} {r['tv']:6.3f} {str(r['bound_holds']):>7} "
                     f"{r['certified']:13.0%} {r['map_forwards']:7.1f} {r['map_is_greedy_set']:14.0%} "
                     f"{r['unary_is_greedy']:12.0%}")
    return "\n".join(lines)


def run_choice_bench(model, tokenizer, ks, ns, count: int, engines: list[str], seed: int = 0,
                     progress: bool = True, diagnostics: bool = False) -> dict:
    from tqdm.auto import tqdm

    cells = [(k, n) for k in ks for n in ns if n <= k]
    bar = tqdm(total=len(cells) * count, desc="choose-bench", disable=not progress)
    report = {"threads": torch.get_num_threads(), "dtype": str(model.dtype).removeprefix("torch."),
              "engines": engines, "cells": []}
    for k in ks:
        prompts = selection_prompts(k, count, seed=seed)
        for n in ns:
            if n <= k:
                report["cells"].append(bench_config(model, tokenizer, k, n, prompts, engines, progress=bar))
                row = diagnose_config(model, tokenizer, k, n, prompts) if diagnostics else None
                if row is not None:
                    report.setdefault("diagnostics", []).append(row)
    bar.close()
    return report


def format_tables(report: dict) -> str:
    engines = report["engines"]
    head = f"{'k':>3} {'n':>2} " + " ".join(f"{e[:9]:>9}" for e in engines)
    lines = ["latency ms (median) | agreement with serial", head]
    for cell in report["cells"]:
        e = cell["engines"]
        lat = " ".join(f"{e[x]['latency_ms']:9.1f}" if x in e else f"{'-':>9}" for x in engines)
        agr = " ".join(f"{e[x]['agreement']:9.0%}" if x in e else f"{'-':>9}" for x in engines)
        lines += [f"{cell['k']:>3} {cell['n']:>2} {lat}", f"{'':>6} {agr}"]
    lines += ["", "work and depth (compiled = full probe; adaptive = cost-model width)",
              f"{'k':>3} {'n':>2} {'serial fw':>9} {'chunk fw':>8} {'comp fw':>7} {'rows':>6} {'tokens':>6} "
              f"{'work x':>6} {'vs serial':>9} {'vs chunk':>8} {'adapt vs chunk':>14} {'guarded':>7} {'min margin':>10}"]
    for cell in report["cells"]:
        e = cell["engines"]
        comp, adapt = e.get("compiled", {}), e.get("adaptive", {})
        lines.append(
            f"{cell['k']:>3} {cell['n']:>2} {e['serial']['forwards']:9.1f} {e.get('chunked', {}).get('forwards', 0):8.1f} "
            f"{comp.get('forwards', 0):7.1f} {comp.get('probe_rows', 0):6.0f} {comp.get('probe_tokens', 0):6.0f} "
            f"{comp.get('work_ratio', 0):6.1f} {comp.get('vs_serial', 0):9.2f} {comp.get('vs_chunked', 0):8.2f} "
            f"{adapt.get('vs_chunked', 0):14.2f} {comp.get('guarded', 0):7d} {comp.get('min_margin', 0):10.3f}")
    return "\n".join(lines)


def plot_report(report: dict, path: str) -> None:
    from ..extras import pyplot

    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for k in sorted({c["k"] for c in report["cells"]}):
        cells = [c for c in report["cells"] if c["k"] == k and "compiled" in c["engines"]]
        ax1.plot([c["n"] for c in cells], [c["engines"]["compiled"]["probe_tokens"] for c in cells], "o-", label=f"k={k}")
    ax1.set_xlabel("labels selected n")
    ax1.set_ylabel("probe tokens (one forward)")
    ax1.set_yscale("log")
    ax1.set_title("Probe width grows with n (depth stays 2 forwards)")
    ax1.legend()
    names = [c for c in report["cells"]]
    xs = range(len(names))
    width = 0.8 / len(report["engines"])
    for j, engine in enumerate(report["engines"]):
        ys = [c["engines"].get(engine, {}).get("latency_ms", float("nan")) for c in names]
        ax2.bar([x + j * width for x in xs], ys, width, label=engine)
    ax2.set_xticks([x + 0.4 for x in xs], [f"{c['k']}/{c['n']}" for c in names], rotation=90, fontsize=7)
    ax2.set_ylabel("median latency (ms)")
    ax2.set_xlabel("k / n")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(report: dict, path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=1, default=str) + "\n")
