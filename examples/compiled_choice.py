"""Compiled finite choice: pick n of k labels with one prefill and one tree-causal probe.

    python examples/compiled_choice.py                         # offline: embedded SmolLM2, k=6, n=1,2, 3 prompts
    python examples/compiled_choice.py --k 6,10 --n 1,2,3 --prompts 8 --engines serial,chunked,compiled
    python examples/compiled_choice.py --model HuggingFaceTB/SmolLM2-1.7B-Instruct --device cuda --dtype bf16

The prompts are real retrieval-control decisions: a question from hf_treegen's bundled QASPER-format set
(Python documentation pages) and k section headings of its page, ``[1] .. [k]``; the model names the n
sections it would read, most relevant first, separated by ", ". Every engine answers every prompt,
interleaved prompt by prompt (``hf_treegen.bench.choice_bench``):

    serial     stock generate() with SerialChoiceProcessor: one forward per output token (the reference)
    chunked    one forward per decision (forced spans appended together)
    outlines   stock generate() with outlines' regex processor over every ordering (needs outlines)
    compiled   CompiledChoiceProcessor: the prefill plus one tree-causal probe
    adaptive   compiled with the probe width planned from the measured cost curve
    unary      top-n labels of the first slot's scores only (history ignored; may disagree)

The script exits with status 1 if compiled picks differ from serial's on any prompt. Then it shows the
same decision as a logits processor inside ``model.generate()``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from dataclasses import dataclass

from example_setup import one_line, resolve_device

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp64": "float64"}
ENGINES = ("serial", "chunked", "outlines", "compiled", "adaptive", "unary")


@dataclass(frozen=True)
class SectionPrompt:
    """One control decision: a question about a documentation page and k of the page's section headings."""

    document: str
    question: str
    headings: tuple[str, ...]

    def text(self, num_select: int) -> str:
        listing = "\n".join(f"[{i + 1}] {h}" for i, h in enumerate(self.headings))
        noun = "label" if num_select == 1 else f"{num_select} labels"
        return (f"Document: {self.document}\nSections:\n{listing}\n\nQuestion: {self.question}\n"
                f"Which section{'s' if num_select > 1 else ''} would you read to answer it? Reply with the {noun} "
                f"of the most relevant section{'s' if num_select > 1 else ''}, most relevant first, separated by commas.")


def section_prompts(papers, k: int, count: int, seed: int = 0) -> list[SectionPrompt]:
    """``count`` prompts: a question with textual evidence and k headings of its paper, the evidence's among them."""
    rng = random.Random(seed)
    pool = []
    for paper in papers:
        headings = list(dict.fromkeys(s.name.split(" ::: ")[-1].strip() for s in paper.sections if s.name.strip()))
        where = {p: s.name.split(" ::: ")[-1].strip() for s in paper.sections for p in s.paragraphs}
        for question in paper.questions:
            gold = [where[e] for a in question.answers for e in a.evidence if e in where]
            if gold and len(headings) >= k:
                pool.append((paper.title, question.question, headings, gold[0]))
    rng.shuffle(pool)
    prompts = []
    for title, question, headings, gold in pool[:count]:
        others = rng.sample([h for h in headings if h != gold], k - 1)
        picked = set(others) | {gold}
        prompts.append(SectionPrompt(title, question, tuple(h for h in headings if h in picked)))
    if len(prompts) < count:
        raise ValueError(f"only {len(prompts)} questions have a page with {k} or more sections; ask for fewer.")
    return prompts


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="target: local folder or Hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--k", type=int_list, default=[6], help="candidates per prompt, comma-separated (default: 6)")
    parser.add_argument("--n", type=int_list, default=[1, 2], help="labels chosen, comma-separated (default: 1,2)")
    parser.add_argument("--prompts", type=int, default=3, help="prompts per (k, n) cell (default: %(default)s)")
    parser.add_argument("--engines", default="serial,chunked,outlines,compiled,unary",
                        help=f"comma-separated, from {', '.join(ENGINES)}; serial always runs (default: %(default)s)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="model dtype (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... or auto: cuda when there is one "
                                                        "(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt sampler (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    args = parser.parse_args()

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        parser.error(f"--engines: unknown {unknown or '(none given)'}; choose from {', '.join(ENGINES)}")
    if "serial" not in engines:
        engines.insert(0, "serial")
    if args.prompts < 1:
        parser.error("--prompts must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    if any(n > k for k in args.k for n in args.n):
        parser.error(f"every --n must be at most every --k (got --k {args.k} --n {args.n})")
    if "outlines" in engines:
        import importlib.util

        if importlib.util.find_spec("outlines") is None:
            print("note: outlines is not installed (pip install 'hf-treegen[outlines]'); its column is skipped",
                  file=sys.stderr)
            engines.remove("outlines")

    import torch

    import hf_treegen as htg
    from hf_treegen.bench.choice_bench import bench_config, format_tables
    from hf_treegen.rag import load_qasper

    device = resolve_device(parser, args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, DTYPES[args.dtype])
    papers = load_qasper("validation", source="offline")
    try:
        cells = {k: section_prompts(papers, k, args.prompts, args.seed) for k in args.k}
    except ValueError as err:
        parser.error(str(err))
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
          f"{torch.get_num_threads()} threads); engines: {', '.join(engines)}", flush=True)

    report = {"engines": engines, "cells": []}
    for k, prompts in cells.items():
        for n in args.n:
            report["cells"].append(bench_config(model, tokenizer, k, n, prompts, engines))
    print(f"\n{args.prompts} prompts per (k, n) cell; latency is the median control time of one decision, "
          f"agreement is with serial's labels")
    print(format_tables(report))

    compiled_agree = all(c["engines"][e]["agreement"] == 1.0 for c in report["cells"]
                         for e in ("compiled", "adaptive") if e in c["engines"])
    print(f"\ncompiled picks {'identical to' if compiled_agree else 'DIFFER from'} serial constrained decoding "
          f"on every prompt" + ("" if compiled_agree else "s listed above"))

    # the same decision inside generate(): compiled as its custom_generate, serially as a plain logits processor
    k, n = args.k[0], max(args.n)
    prompt = cells[k][0]
    labels = [f"[{i + 1}]" for i in range(k)]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt.text(n)}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"].to(device)
    proc = htg.CompiledChoiceProcessor(tokenizer, choices=labels, num_select=n, separator=", ")
    compiled_ids = model.generate(ids, logits_processor=[proc], custom_generate=proc.compiled_generate,
                                  max_new_tokens=32)
    serial = htg.SerialChoiceProcessor(tokenizer, choices=labels, num_select=n, separator=", ")
    serial_ids = model.generate(ids, logits_processor=[serial], max_new_tokens=32)
    answer = tokenizer.decode(compiled_ids[0, ids.shape[1]:], skip_special_tokens=True)
    chosen = [prompt.headings[labels.index(x.strip())] for x in answer.split(",") if x.strip() in labels]
    print(f"\nQ: {prompt.question}\ngenerate(logits_processor=[CompiledChoiceProcessor]) -> {answer!r} "
          f"= {chosen}; same token ids as SerialChoiceProcessor: {compiled_ids.equal(serial_ids)}")
    if not compiled_agree or not compiled_ids.equal(serial_ids):
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
