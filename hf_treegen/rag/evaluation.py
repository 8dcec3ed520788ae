"""``hf-treegen rag-eval``: selection interfaces and retrieval baselines side by side on QASPER-format papers.

For every question and interface the retriever walks the paper's tree once, up to the largest budget;
smaller budgets are prefixes of that walk (:meth:`Retrieval.within`), so each budget reports what a
walk with that budget would have gathered and spent. Each baseline (:mod:`.baselines`) ranks the
paper's paragraphs once per question and fills every budget from that ranking. The same reader answers
from each method's evidence at each budget.

Questions are sharded over processes with ``accelerate`` (``accelerate launch -m hf_treegen.cli
rag-eval ...``): each process takes a contiguous slice, results are gathered on the main process and
put back in question order, so the tables equal a single-process run's.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from ..metrics.qasper_official import all_evidence, eligible, evaluate_predictions, gold_from_papers
from .baselines import BASELINES, Ranker, baseline_ranker, evidence_at, paper_paragraphs, reading_order
from .doctree import build_tree, corrupt_hierarchy
from .qasper import Paper, papers_to_raw
from .retriever import INTERFACES, HierarchicalRetriever, answer_from_evidence


def parse_methods(spec: str, choices: tuple[str, ...], kind: str) -> list[str]:
    """``"a, b,a"`` -> ``["a", "b"]``; ``"none"`` or ``""`` -> ``[]``; a name not in ``choices`` is refused."""
    names = [s.strip() for s in spec.split(",") if s.strip() and s.strip() != "none"]
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise ValueError(f"unknown {kind} {unknown}; choose from {', '.join(choices)}, or none.")
    return list(dict.fromkeys(names))


def parse_interfaces(spec: str) -> list[str]:
    return parse_methods(spec, INTERFACES, "interface")


def parse_baselines(spec: str) -> list[str]:
    return parse_methods(spec, BASELINES, "baseline")


def work_items(papers: list[Paper], limit: int | None = None) -> list[tuple[int, int]]:
    """(paper index, question index) pairs, papers interleaved (every paper's first question, then every
    paper's second, ...) so that ``limit`` samples all papers."""
    longest = max((len(p.questions) for p in papers), default=0)
    items = [(p, q) for q in range(longest) for p, paper in enumerate(papers) if q < len(paper.questions)]
    return items[:limit] if limit else items


# Interfaces whose rounds are re-decided by serial on the same prompt when checking agreement: compiled
# (it must agree) and unary (the first-slot-only ablation: how often ignoring history changes a choice).
CHECKED_INTERFACES = ("compiled", "unary")


def run_item(model, tokenizer, paper: Paper, question_index: int, interface: str, k: int, b: int,
             budgets: list[int], check_against_serial: bool, corrupt_seed: int | None = None,
             max_rounds: int = 32, answers: dict | None = None, on_round=None) -> dict:
    """One question through one interface; ``answers`` caches reader outputs by evidence (interfaces
    that gathered the same evidence get the same answer without generating it again); ``on_round`` is
    called after every selection round."""
    question = paper.questions[question_index]
    tree = build_tree(paper)
    if corrupt_seed is not None:
        tree = corrupt_hierarchy(tree, corrupt_seed)
    retriever = HierarchicalRetriever(model, tokenizer, interface=interface, k=k, b=b, budget_tokens=max(budgets),
                                      max_rounds=max_rounds,
                                      check_against_serial=check_against_serial and interface in CHECKED_INTERFACES)
    walk = retriever.retrieve(tree, question.question, on_round=on_round)
    answers = {} if answers is None else answers
    record = {"paper_id": paper.paper_id, "question_id": question.question_id, "interface": interface,
              "rounds": [asdict(r) for r in walk.rounds], "budgets": {}}
    for budget in budgets:
        part = walk.within(budget)
        checked = [r for r in part.rounds if r.serial_chosen is not None and r.forwards > 0]
        key = (question.question_id, tuple(part.evidence))
        if key not in answers:
            answers[key] = retriever.answer(question.question, part.evidence)
        record["budgets"][str(budget)] = {
            "evidence": part.evidence,
            "answer": answers[key],
            "control_seconds": part.control_seconds,
            "forwards": part.forwards,
            "rounds": len(part.rounds),
            "decided_rounds": sum(1 for r in part.rounds if r.forwards > 0),
            "failures": part.failures,
            "agree": sum(r.chosen == r.serial_chosen for r in checked),
            "checked": len(checked),
        }
    return record


def run_baseline_item(model, tokenizer, paper: Paper, question_index: int, baseline: str, ranker: Ranker | None,
                      budgets: list[int], answers: dict | None = None) -> dict:
    """One question through one baseline, in the record layout of :func:`run_item`: no rounds and no
    model forwards; ``control_seconds`` is the time the ranking took."""
    question = paper.questions[question_index]
    paragraphs = paper_paragraphs(paper)
    token_counts = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in paragraphs]
    start = time.perf_counter()
    order = reading_order(ranker, question.question, paragraphs)
    seconds = time.perf_counter() - start
    answers = {} if answers is None else answers
    record = {"paper_id": paper.paper_id, "question_id": question.question_id, "interface": baseline,
              "rounds": [], "budgets": {}}
    for budget in budgets:
        evidence = [paragraphs[i] for i in evidence_at(baseline, order, token_counts, budget)]
        key = (question.question_id, tuple(evidence))
        if key not in answers:
            answers[key] = answer_from_evidence(model, tokenizer, question.question, evidence)
        record["budgets"][str(budget)] = {
            "evidence": evidence, "answer": answers[key], "control_seconds": seconds, "forwards": 0,
            "rounds": 0, "decided_rounds": 0, "failures": [], "agree": 0, "checked": 0,
        }
    return record


def evaluate(model, tokenizer, papers: list[Paper], interfaces: list[str], k: int, b: int, budgets: list[int],
             limit: int | None = None, check_against_serial: bool = True, corrupt_seed: int | None = None,
             progress: bool = True, max_rounds: int = 32, baselines: list[str] = (),
             rankers: dict[str, Ranker] | None = None) -> list[dict]:
    """Every (question, interface) and (question, baseline) on this process's shard; all records on the
    main process (else []). Baselines read the true paper, so ``corrupt_seed`` changes only the walks;
    ``rankers`` replaces a baseline's built-in ranker by name (e.g. another embedding model for dense)."""
    from ..extras import require

    PartialState = require("accelerate", "rag", "rag-eval").PartialState
    from accelerate.utils import gather_object
    from tqdm.auto import tqdm

    state = PartialState()
    items = [(i, item) for i, item in enumerate(work_items(papers, limit))]
    with state.split_between_processes(items) as mine:
        mine = list(mine)
    # one step per (question, interface); the postfix moves with every selection round, which can take
    # seconds each on a CPU, so a long walk never looks stalled
    bar = tqdm(total=len(mine) * (len(interfaces) + len(baselines)), desc=f"rag-eval[{state.process_index}]",
               unit="walk", disable=not progress or not state.is_local_main_process)
    rankers = {name: (rankers or {}).get(name) or baseline_ranker(name) for name in baselines}
    methods = [*interfaces, *baselines]
    records, answers = [], {}
    for position, (p, q) in mine:
        for baseline, ranker in rankers.items():
            bar.set_postfix_str(baseline, refresh=True)
            record = run_baseline_item(model, tokenizer, papers[p], q, baseline, ranker, budgets, answers=answers)
            record["position"] = position
            records.append(record)
            bar.update(1)
        for interface in interfaces:
            def show_round(rounds: int, _record, interface=interface):
                bar.set_postfix_str(f"{interface} round {rounds}/{max_rounds}", refresh=True)

            record = run_item(model, tokenizer, papers[p], q, interface, k, b, budgets, check_against_serial,
                              corrupt_seed, max_rounds=max_rounds, answers=answers, on_round=show_round)
            record["position"] = position
            records.append(record)
            bar.update(1)
    bar.close()
    if state.num_processes > 1:
        records = gather_object(records)
    if not state.is_main_process:
        return []
    return sorted(records, key=lambda r: (r["position"], methods.index(r["interface"])))


def unmapped_evidence(papers: list[Paper], question_ids: set[str]) -> list[str]:
    """Questions whose gold text evidence names a paragraph that is not in the paper: they can never
    reach AllEvidence, so they are reported rather than silently dropped."""
    bad = []
    for paper in papers:
        texts = {text for _, text in paper.paragraphs()}
        for question in paper.questions:
            if question.question_id not in question_ids:
                continue
            evidence = {e for a in question.answers for e in a.evidence if "FLOAT SELECTED" not in e}
            if evidence - texts:
                bad.append(question.question_id)
    return bad


def summarise(records: list[dict], papers: list[Paper], budgets: list[int]) -> dict:
    """Per method (interface or baseline) and budget: AllEvidence@K (one set / union), Evidence F1, Answer F1, latency, ..."""
    gold_all = gold_from_papers(papers_to_raw(papers))
    asked = {r["question_id"] for r in records}
    gold = {qid: refs for qid, refs in gold_all.items() if qid in asked}
    table: dict = {"_data": {"unmapped_evidence": unmapped_evidence(papers, asked)}}
    serial_walks = {r["question_id"]: r for r in records if r["interface"] == "serial"}
    for interface in dict.fromkeys(r["interface"] for r in records):
        mine = [r for r in records if r["interface"] == interface]
        for budget in budgets:
            rows = [r["budgets"][str(budget)] for r in mine]
            predictions = {r["question_id"]: {"answer": row["answer"], "evidence": row["evidence"]}
                           for r, row in zip(mine, rows)}
            scores = evaluate_predictions(gold, predictions)
            eligible_rows = [(r, row) for r, row in zip(mine, rows) if eligible(gold[r["question_id"]])]
            one = [all_evidence(row["evidence"], gold[r["question_id"]], mode="one") for r, row in eligible_rows]
            union = [all_evidence(row["evidence"], gold[r["question_id"]], mode="union") for r, row in eligible_rows]
            failures = [f for row in rows for f in row["failures"]]
            checked = sum(row["checked"] for row in rows)
            agree = sum(row["agree"] for row in rows)
            if not checked and interface not in ("serial", *BASELINES) and serial_walks:
                agree, checked = _walk_agreement(mine, serial_walks, budget)
            decided = sum(row["decided_rounds"] for row in rows)
            table.setdefault(interface, {})[str(budget)] = {
                "questions": len(rows), "eligible": len(eligible_rows),
                "all_evidence": statistics.mean(one) if one else 0.0,
                "all_evidence_union": statistics.mean(union) if union else 0.0,
                "evidence_f1": scores["Evidence F1"], "answer_f1": scores["Answer F1"],
                "answer_f1_by_type": scores["Answer F1 by type"],
                "control_ms": 1000 * statistics.mean(row["control_seconds"] for row in rows),
                "control_ms_per_round": 1000 * sum(row["control_seconds"] for row in rows) / max(decided, 1),
                "forwards": statistics.mean(row["forwards"] for row in rows),
                "forwards_per_round": sum(row["forwards"] for row in rows) / max(decided, 1),
                "rounds": statistics.mean(row["rounds"] for row in rows),
                "protocol_failures": len(failures),
                "failure_classes": {c: failures.count(c) for c in sorted(set(failures))},
                "agreement_with_serial": (agree / checked) if checked else None,
                "rounds_checked": checked,
            }
    return table


def _walk_agreement(mine: list[dict], serial_walks: dict, budget: int) -> tuple[int, int]:
    """Rounds where this interface chose what serial chose, comparing the two walks round by round for
    as long as they showed the same candidates (after a disagreement the prompts differ)."""
    agree = compared = 0
    for record in mine:
        serial = serial_walks.get(record["question_id"])
        if serial is None:
            continue
        rounds = record["rounds"][: record["budgets"][str(budget)]["rounds"]]
        for ours, theirs in zip(rounds, serial["rounds"]):
            if ours["candidates"] != theirs["candidates"]:
                break
            if ours["forwards"] or theirs["forwards"]:
                compared += 1
                agree += ours["chosen"] == theirs["chosen"]
            if ours["chosen"] != theirs["chosen"]:
                break
    return agree, compared


def format_table(table: dict, budgets: list[int]) -> str:
    unmapped = table.get("_data", {}).get("unmapped_evidence", [])
    lines = [f"questions whose gold evidence maps to no paragraph: {len(unmapped)}"
             + (f" ({', '.join(unmapped[:5])}{', ...' if len(unmapped) > 5 else ''})" if unmapped else ""), ""]
    for budget in budgets:
        lines += [f"budget {budget} tokens",
                  f"{'method':<10} {'AllEv@K':>7} {'union':>6} {'EvF1':>6} {'AnsF1':>6} {'ctrl ms':>8} "
                  f"{'ms/round':>8} {'fwd/round':>9} {'rounds':>6} {'fail':>5} {'agree':>6}"]
        for interface, by_budget in table.items():
            if interface.startswith("_"):
                continue
            row = by_budget[str(budget)]
            agree = "-" if row["agreement_with_serial"] is None else f"{row['agreement_with_serial']:.0%}"
            if interface in BASELINES:  # one ranking, no selection rounds: the per-round columns do not apply
                per_round = f"{'-':>8} {'-':>9} {'-':>6} {'-':>5}"
            else:
                per_round = (f"{row['control_ms_per_round']:8.0f} {row['forwards_per_round']:9.2f} {row['rounds']:6.1f} "
                             f"{row['protocol_failures']:5d}")
            lines.append(f"{interface:<10} {row['all_evidence']:7.1%} {row['all_evidence_union']:6.1%} "
                         f"{row['evidence_f1']:6.3f} {row['answer_f1']:6.3f} {row['control_ms']:8.0f} "
                         f"{per_round} {agree:>6}")
        lines.append("")
    return "\n".join(lines)


def plot_table(table: dict, budgets: list[int], path: str) -> None:
    """AllEvidence@K, Answer F1 and control time per question (log scale: a baseline ranks in
    milliseconds, a walk takes seconds) for every method, one bar per budget."""
    from ..extras import pyplot

    plt = pyplot()

    panels = (("all_evidence", "AllEvidence@K", False), ("answer_f1", "Answer F1", False),
              ("control_ms", "control time per question (ms)", True))
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    names = [n for n in table if not n.startswith("_")]
    width = 0.8 / len(budgets)
    for ax, (key, label, log) in zip(axes, panels):
        for j, budget in enumerate(budgets):
            xs = [i + j * width for i in range(len(names))]
            ax.bar(xs, [table[n][str(budget)][key] for n in names], width, label=f"K={budget}")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names, rotation=30)
        ax.set_ylabel(label)
        if log:
            ax.set_yscale("log")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(report: dict, path: str) -> None:
    Path(path).write_text(json.dumps(report, indent=1, default=str) + "\n")
