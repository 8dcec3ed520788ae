"""Hierarchical RAG over QASPER: the model walks a paper's section tree, choosing b of k entries per round.

    python examples/qasper_rag.py                                    # offline: 2 questions, compiled vs serial
    python examples/qasper_rag.py --questions 10 --interfaces compiled,serial,json,unary --budgets 500,1000 \\
        --max-rounds 12 --plot rag.png --json rag.json
    python examples/qasper_rag.py --data hub --model Qwen/Qwen3-4B --device cuda --dtype bf16   # real QASPER

Each question goes through each selection interface (``hf_treegen.rag.evaluation``): the retriever shows
the first k entries of the paper's frontier (section titles with a preview, or paragraphs) as ``[1] .. [k]``
and the interface picks b of them; a picked section is opened, a picked paragraph becomes evidence, until
the evidence budget (tokens) or ``--max-rounds`` is reached. The model then answers from the evidence.

    compiled   CompiledChoiceProcessor: prefill + one tree-causal probe per round (same picks as serial)
    serial     stock generate() with the serial constrained processor (one forward per output token)
    chunked    one forward per decision
    unary      top-b of the first slot's scores (history ignored)
    json       free-form generation of {"sections": [...]}, parsed; failures are counted, not fatal

Metrics: AllEvidence@K (a question counts when one annotator's complete evidence set is inside the
context), the official QASPER Evidence F1 and Answer F1, control latency and forwards per round, and how
often the interface chose what serial chose. The metrics are also computed through the ``evaluate``
modules that ship with hf_treegen (``evaluate.load(hf_treegen.metrics.metric_path("qasper"))``).

``--data offline`` (default) is the QASPER-format set bundled with hf_treegen: 10 Python documentation
pages, 75 questions. ``--data hub`` loads allenai/qasper with ``datasets``; a path reads a raw release JSON.
"""

from __future__ import annotations

import argparse
import os
import sys

from example_setup import one_line, resolve_device

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp64": "float64"}
INTERFACES = ("compiled", "serial", "chunked", "unary", "json")


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 500,1000, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="target: local folder or Hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--data", default="offline",
                        help="offline (the bundled Python-docs set), hub (allenai/qasper), or a raw QASPER JSON file "
                             "(default: %(default)s)")
    parser.add_argument("--split", default="validation", choices=("train", "validation", "test"),
                        help="QASPER split for --data hub or a release folder (default: %(default)s)")
    parser.add_argument("--questions", type=int, default=2, help="questions to run, papers interleaved (default: %(default)s)")
    parser.add_argument("--interfaces", default="compiled,serial",
                        help=f"comma-separated, from {', '.join(INTERFACES)} (default: %(default)s)")
    parser.add_argument("--k", type=int, default=6, help="entries shown per round (default: %(default)s)")
    parser.add_argument("--b", type=int, default=2, help="entries chosen per round (default: %(default)s)")
    parser.add_argument("--budgets", type=int_list, default=[500],
                        help="evidence budgets K in tokens, comma-separated (default: 500)")
    parser.add_argument("--max-rounds", type=int, default=4, help="selection rounds per question at most (default: %(default)s)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="model dtype (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... or auto: cuda when there is one (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    parser.add_argument("--json", help="write the table and per-question records here")
    parser.add_argument("--plot", help="write AllEvidence@K and control-latency bars here (PNG; needs matplotlib)")
    args = parser.parse_args()

    interfaces = [s.strip() for s in args.interfaces.split(",") if s.strip()]
    unknown = [s for s in interfaces if s not in INTERFACES]
    if unknown or not interfaces:
        parser.error(f"--interfaces: unknown {unknown or '(none given)'}; choose from {', '.join(INTERFACES)}")
    if min(args.questions, args.k, args.b, args.max_rounds) < 1:
        parser.error("--questions, --k, --b and --max-rounds must be at least 1")
    if args.b > args.k:
        parser.error(f"--b {args.b} is larger than --k {args.k}: a round cannot choose more entries than it shows")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    import importlib.util

    missing = [m for m in ("accelerate", "evaluate", "datasets") if importlib.util.find_spec(m) is None]
    if missing:
        parser.error(f"this example needs {', '.join(missing)}: pip install 'hf-treegen[rag]'")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib: pip install 'hf-treegen[plots]'")

    import torch

    import evaluate as hf_evaluate
    import hf_treegen as htg
    from hf_treegen.metrics import aligned_inputs, gold_from_papers, metric_path
    from hf_treegen.rag import build_tree, iter_nodes, load_qasper, papers_to_raw
    from hf_treegen.rag.evaluation import evaluate, format_table, plot_table, summarise, write_json

    device = resolve_device(parser, args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        papers = load_qasper(args.split, source=args.data)
    except (OSError, ValueError, RuntimeError) as err:  # a missing file, a malformed record, an unreachable Hub
        parser.error(f"--data {args.data}: {one_line(err)}")
    dtype = getattr(torch, DTYPES[args.dtype])
    try:
        if args.model is None:
            from hf_treegen.models import load_smollm2

            model, tokenizer = load_smollm2(dtype)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa").eval()
            tokenizer = AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError) as err:
        parser.error(f"could not load --model {args.model}: {one_line(err)}")
    model = htg.enable(model.to(device))
    print(f"target: {args.model or 'SmolLM2-135M-Instruct (embedded)'} ({args.dtype}, {device}, "
          f"{torch.get_num_threads()} threads); data: {args.data}, {len(papers)} papers, "
          f"{sum(len(p.questions) for p in papers)} questions", flush=True)

    if "compiled" in interfaces:  # warm-up: the probe-width planner measures forward costs once per context size
        evaluate(model, tokenizer, papers, ["compiled"], args.k, args.b, args.budgets[:1], limit=1, max_rounds=1,
                 check_against_serial=False, progress=False)
    records = evaluate(model, tokenizer, papers, interfaces, args.k, args.b, args.budgets, limit=args.questions,
                       max_rounds=args.max_rounds, progress=False)
    table = summarise(records, papers, args.budgets)
    print(f"\n{len(records) // len(interfaces)} questions, k={args.k}, b={args.b}, at most {args.max_rounds} rounds; "
          f"ctrl ms: selection time per question, agree: rounds where the interface chose what serial chose")
    print(format_table(table, args.budgets))

    first = records[0]
    paper, question = next((p, q.question) for p in papers for q in p.questions if q.question_id == first["question_id"])
    titles = {node.node_id: node.title for node in iter_nodes(build_tree(paper))}
    budget = str(args.budgets[-1])
    print(f"one walk ({first['interface']}) in {paper.title!r}: {question}")
    for i, r in enumerate(first["rounds"], 1):
        chosen = ", ".join(f"{c} {titles.get(c, '')!r}" for c in r["chosen"])
        print(f"  round {i}: shown {len(r['candidates'])}, chose {chosen} "
              f"({r['forwards']} forwards, {1000 * r['seconds']:.0f} ms)")
    print(f"  answer from {len(first['budgets'][budget]['evidence'])} paragraphs: "
          f"{first['budgets'][budget]['answer'].strip()!r}")

    # the same scores through the evaluate modules that ship with hf_treegen (offline, by path)
    gold = gold_from_papers(papers_to_raw(papers))
    asked = [r["question_id"] for r in records if r["interface"] == interfaces[0]]
    gold = {qid: gold[qid] for qid in asked}
    mine = {r["question_id"]: r["budgets"][budget] for r in records if r["interface"] == interfaces[0]}
    predictions, references = aligned_inputs(gold, {q: {"answer": v["answer"], "evidence": v["evidence"]}
                                                    for q, v in mine.items()})
    qasper = hf_evaluate.load(metric_path("qasper"), keep_in_memory=True)
    all_evidence = hf_evaluate.load(metric_path("all_evidence"), keep_in_memory=True)
    scores = qasper.compute(predictions=predictions, references=references)
    coverage = all_evidence.compute(predictions=[p["evidence"] for p in predictions],
                                    references=[[r["evidence"] for r in refs] for refs in references])
    print(f"\nevaluate modules, {interfaces[0]} at K={budget}: Answer F1 {scores['Answer F1']:.3f}, "
          f"Evidence F1 {scores['Evidence F1']:.3f}, AllEvidence@K {coverage['all_evidence_one']:.3f} "
          f"({coverage['num_eligible']} of {coverage['num_questions']} questions eligible)")

    agreements = [row[b]["agreement_with_serial"] for name, row in table.items() if name == "compiled"
                  for b in row if row[b]["agreement_with_serial"] is not None]
    if agreements:
        print(f"compiled chose what serial chose in {min(agreements):.0%} of the checked rounds")
    if args.json:
        write_json({"args": vars(args), "table": table, "records": records}, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        plot_table(table, args.budgets, args.plot)
        print(f"wrote {args.plot}")
    if agreements and min(agreements) < 1.0:
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
