"""The ``hf-treegen`` command line: ``demo``, ``generate``, ``bench``, ``calibrate``, ``choose``,
``choose-bench``, ``train-drafter``, ``teacher-forced-data``, ``draft-vocab``."""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}


def _load_pair(args):
    """The target (--model, default the embedded SmolLM2), plus a drafter from --drafter or a random one."""
    import hf_treegen as htg
    from hf_treegen.drafters.auto import load_any_drafter

    model, tokenizer = _load_model(args)
    model = htg.enable(model)
    from hf_treegen.models import DEFAULT_DRAFTER_DIR

    if args.drafter:
        drafter = load_any_drafter(args.drafter, target=model)
        note = f"drafter from {args.drafter}"
    elif not getattr(args, "model", None) and (DEFAULT_DRAFTER_DIR / "model.safetensors").is_file():
        drafter = load_any_drafter(DEFAULT_DRAFTER_DIR, target=model).to(model.dtype).eval()
        note = "the shipped SmolLM2 Domino drafter (model_cards/smollm2-135m-domino.md)"
    else:
        torch.manual_seed(0)
        cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=8, projector_type="domino",
                                           emb_dim=128, gru_hidden_dim=256)
        drafter = htg.DominoDrafter(cfg, target=model).to(model.dtype).eval()
        note = ("random (untrained) Domino drafter: expect tau ~ 1, i.e. no speedup; this shows exactness, "
                "not speed (pass --drafter DIR for a trained one)")
    return model, tokenizer, drafter, note


def _chat_ids(tokenizer, text: str) -> torch.Tensor:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)["input_ids"]


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def cmd_demo(args) -> int:
    from transformers import TextStreamer

    from hf_treegen.bench import format_table, run_strategies
    from hf_treegen.bench.prompts import builtin_prompts

    model, tokenizer, drafter, note = _load_pair(args)
    print(f"target: SmolLM2-135M-Instruct ({args.dtype}), {drafter.config.describe()}")
    print(f"note: {note}\n")
    from hf_treegen.builders import DFLASH_STRATEGIES

    strategies = [s for s in args.strategies.split(",") if drafter.config.is_domino or s in DFLASH_STRATEGIES]
    texts = builtin_prompts("python-qa")[:3]
    prompts = [_chat_ids(tokenizer, t) for t in texts]
    eos = model.generation_config.eos_token_id
    results = run_strategies(model, prompts, drafter, strategies, max_new_tokens=args.max_new_tokens,
                             budget=args.budget, eos_token_ids=[eos] if isinstance(eos, int) else eos)
    print(f"greedy, {len(prompts)} prompts x {args.max_new_tokens} new tokens, budget {args.budget} "
          f"(speedups are medians of per-prompt ratios, measured side by side)")
    print(format_table(results))
    strategy = strategies[0]
    print(f"\nstreaming one {strategy} answer to: {texts[1]}\n")
    model.generate(prompts[1], assistant_model=drafter, tree_strategy=strategy, tree_budget=args.budget,
                   max_new_tokens=args.max_new_tokens, do_sample=False,
                   streamer=TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True))
    print()
    return 0


def cmd_generate(args) -> int:
    from hf_treegen.builders import STRATEGIES

    if args.strategy not in ("ar", *STRATEGIES):
        print(f"generate: unknown --strategy {args.strategy!r}; choose ar or one of {', '.join(STRATEGIES)}.",
              file=sys.stderr)
        return 2
    model, tokenizer, drafter, note = _load_pair(args)
    ids = _chat_ids(tokenizer, args.prompt) if args.chat else tokenizer(args.prompt, return_tensors="pt").input_ids
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0, return_dict_in_generate=True)
    if args.temperature > 0:
        kwargs["temperature"] = args.temperature
    if args.strategy != "ar":
        kwargs.update(assistant_model=drafter, tree_strategy=args.strategy, tree_budget=args.budget)
    out, seconds = _timed(lambda: model.generate(ids, **kwargs))
    print(tokenizer.decode(out.sequences[0, ids.shape[1]:], skip_special_tokens=True))
    new = out.sequences.shape[1] - ids.shape[1]
    stats = getattr(out, "tree_stats", None)
    extra = f", tau {stats.tau:.2f} over {stats.rounds} rounds ({stats.plain_steps} plain steps)" if stats else ""
    print(f"\n[{new} tokens in {seconds:.2f} s = {new / seconds:.1f} tok/s{extra}; {note if stats else 'stock'}]",
          file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from hf_treegen.bench.run import parse_strategies, plot_report, run_bench, write_json

    strategies = parse_strategies(args.strategies)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    model, tokenizer, drafter, note = _load_pair(args)
    print(f"{drafter.config.describe()} ({note})", file=sys.stderr)
    report = run_bench(model, tokenizer, drafter, args.prompts, strategies, temperatures, args.max_new_tokens,
                       args.budget, num_prompts=args.num_prompts, lean=not args.no_lean)
    for temperature, table in report["tables"].items():
        print(f"\nT={temperature}, {report['num_prompts']} prompts from {args.prompts}, "
              f"{args.max_new_tokens} new tokens, budget {args.budget}, {args.dtype}, {report['threads']} threads")
        print(table["text"])
    if args.json:
        write_json(report, args.json)
    if args.plot:
        plot_report(report, args.plot)
    return 0


def cmd_calibrate(args) -> int:
    import json

    from hf_treegen.calibration import calibrate, calibration_dir, clear_calibration_cache, profile_key, profile_summary

    if args.clear:
        removed = clear_calibration_cache()
        print(f"removed {len(removed)} cached profile(s) from {calibration_dir()}")
        return 0
    model, _, drafter, note = _load_pair(args)
    path = calibration_dir() / f"{profile_key(model, drafter)}.json"
    profile = calibrate(model, drafter, use_cache=not args.remeasure)
    print(json.dumps(profile_summary(profile), indent=1))
    print(f"profile: {path} (drafter: {note}); `hf-treegen calibrate --clear` deletes it")
    return 0


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 5,10,20, got {text!r}") from err


def _load_model(args):
    """(model, tokenizer): --model (a local transformers folder) or the embedded SmolLM2, on the CPU."""
    if getattr(args, "model", None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype]).eval()
        return model, AutoTokenizer.from_pretrained(args.model)
    from hf_treegen.models import load_smollm2

    return load_smollm2(DTYPES[args.dtype])


def _load_target(args):
    """The target (--model or the embedded SmolLM2), tree-enabled, on the GPU when there is one."""
    import hf_treegen as htg

    model, tokenizer = _load_model(args)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return htg.enable(model), tokenizer


def cmd_choose(args) -> int:
    import hf_treegen as htg

    model, tokenizer = _load_target(args)
    proc = htg.CompiledChoiceProcessor(tokenizer, args.labels.split(args.label_sep), args.num_select,
                                       separator=args.separator, width=args.width)
    ids = _chat_ids(tokenizer, args.prompt).to(model.device)
    result = proc.select(model, ids)
    print(", ".join(result.labels))
    print(f"forwards {result.forwards}, probe rows {result.probe_rows}, probe tokens {result.probe_tokens}, "
          f"fallbacks {result.fallbacks}, guarded {result.guarded}, margins "
          f"{', '.join(f'{m:.3f}' for m in result.margins)}, {1000 * result.seconds:.0f} ms", file=sys.stderr)
    return 0


def cmd_choose_bench(args) -> int:
    from hf_treegen.bench.choice_bench import format_tables, parse_engines, plot_report, run_choice_bench, write_json

    try:
        engines = parse_engines(args.engines)
    except ValueError as err:
        print(f"choose-bench: {err}", file=sys.stderr)
        return 2
    model, tokenizer = _load_target(args)
    report = run_choice_bench(model, tokenizer, args.k, args.n, args.num_prompts, engines, seed=args.seed,
                              diagnostics=args.diagnostics)
    print(f"\n{args.num_prompts} prompts per cell, {args.dtype}, {report['threads']} threads")
    print(format_tables(report))
    if report.get("diagnostics"):
        from hf_treegen.bench.choice_bench import format_diagnostics

        print("\n" + format_diagnostics(report["diagnostics"]))
    if args.json:
        write_json(report, args.json)
    if args.plot:
        plot_report(report, args.plot)
    return 0


def cmd_rag_eval(args) -> int:
    from hf_treegen.extras import require

    PartialState = require("accelerate", "rag", "rag-eval").PartialState

    from hf_treegen.rag.evaluation import evaluate, format_table, parse_interfaces, plot_table, summarise, write_json
    from hf_treegen.rag.qasper import load_qasper

    try:
        interfaces = parse_interfaces(args.interfaces)
        budgets = sorted(_int_list(args.budgets))
        if args.b > args.k:
            raise ValueError(f"--b {args.b} is larger than --k {args.k}; a round cannot choose more than it shows.")
        papers = load_qasper(args.split, source=args.data)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"rag-eval: {err}", file=sys.stderr)
        return 2
    state = PartialState()
    model, tokenizer = _load_target(args)
    model.to(state.device)
    records = evaluate(model, tokenizer, papers, interfaces, args.k, args.b, budgets, limit=args.limit,
                       check_against_serial=not args.no_serial_check,
                       corrupt_seed=args.corrupt_seed, progress=not args.no_progress, max_rounds=args.max_rounds)
    if not state.is_main_process:
        return 0
    table = summarise(records, papers, budgets)
    print(f"\n{len(records) // len(interfaces)} questions from {args.data} ({args.split}), k={args.k}, b={args.b}, "
          f"{state.num_processes} process(es), {torch.get_num_threads()} thread(s) each"
          + (f", corrupted hierarchy (seed {args.corrupt_seed})" if args.corrupt_seed is not None else ""))
    print(format_table(table, budgets))
    if args.json:
        write_json({"args": vars(args) | {"func": None}, "table": table, "records": records}, args.json)
    if args.plot:
        plot_table(table, budgets, args.plot)
    return 0


def _target_for_vocab(args):
    """(model, tokenizer or None): --model (a local folder, whose tokenizer is optional) or SmolLM2."""
    if not args.model:
        return _load_model(args)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype])
    try:
        return model, AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError):  # no tokenizer files: the model's configs still name the EOS ids
        return model, None


def cmd_draft_vocab(args) -> int:
    """Attach a draft vocabulary to a drafter: the --size most frequent response tokens of the corpora in
    --data, plus the target's EOS ids. Writes a copy of the drafter (same weights and dtype) to --out."""
    from hf_treegen.drafters.auto import load_any_drafter
    from hf_treegen.drafters.loading import read_state_dict, resolve_checkpoint_dir
    from hf_treegen.drafters.vocab import choose_draft_vocab, eos_token_ids, token_counts
    from hf_treegen.train.data import load_corpus

    def fail(message: str) -> int:
        print(f"draft-vocab: {message}", file=sys.stderr)
        return 2

    if args.size < 1:
        return fail(f"--size must be a positive number of token ids, got {args.size}.")
    folders = [d.strip() for arg in args.data for d in arg.split(",") if d.strip()]
    missing = [d for d in folders if not os.path.isdir(d)]
    if missing or not folders:
        return fail(f"--data {', '.join(missing) or '(empty)'}: no such corpus folder.")
    try:
        corpus = [item for folder in folders for item in load_corpus(folder)]
        directory = resolve_checkpoint_dir(args.drafter)
        stored = next((t.dtype for t in read_state_dict(directory).values() if t.is_floating_point()), None)
    except (OSError, ValueError) as err:
        return fail(str(err))
    response = [ids[start:] for ids, start in corpus]
    counts = token_counts(response)
    if not counts:
        return fail(f"{', '.join(folders)} holds no response tokens to count.")
    try:
        model, tokenizer = _target_for_vocab(args)
        drafter = load_any_drafter(directory, target=model, dtype=stored)  # the stored dtype: no rounding
        drafter.set_draft_vocab(choose_draft_vocab(counts, args.size, always=eos_token_ids(model, tokenizer)))
    except (OSError, ValueError) as err:
        return fail(str(err))
    drafter.save_pretrained(args.out)
    kept = set(drafter.draft_vocab.tolist())
    covered = sum(c for t, c in counts.items() if t in kept) / sum(counts.values())
    print(f"{drafter.config.describe()}\ndraft vocabulary of {len(kept)} ids covers {100 * covered:.1f}% of the "
          f"{sum(counts.values())} response tokens in {', '.join(folders)}; saved to {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-treegen", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--drafter", help="drafter checkpoint dir or Hub id (default: the shipped SmolLM2 Domino "
                                         "drafter; a random one with --model)")
        p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
        p.add_argument("--max-new-tokens", type=int, default=48)

    demo = sub.add_parser("demo", help="SmolLM2 offline: stock generate() vs tree strategies, same tokens")
    common(demo)
    demo.add_argument("--strategies", default="auto,conditional,chain",
                      help="tree strategies to compare with stock generate(); the first one also streams an answer")
    demo.add_argument("--budget", type=int, default=16)
    demo.set_defaults(func=cmd_demo)

    gen = sub.add_parser("generate", help="generate one answer with the embedded SmolLM2 model")
    common(gen)
    gen.add_argument("prompt")
    gen.add_argument("--strategy", default="auto",
                     help="auto (default: the tree for the drafter, or plain steps when no tree pays), ar (stock), "
                          "or any tree_strategy: chain, marginal, adaptive, static_corrected, conditional, cond_adaptive")
    gen.add_argument("--budget", type=int, default=None)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--no-chat", dest="chat", action="store_false", help="do not apply the chat template")
    gen.set_defaults(func=cmd_generate)

    bench = sub.add_parser("bench", help="strategies interleaved on a prompt set: tau, tok/s, speedups, tables")
    common(bench)
    bench.add_argument("--model", help="a local transformers model dir (default: the embedded SmolLM2)")
    bench.add_argument("--prompts", default="builtin:code,explain,chat", help="builtin:NAME[,NAME] or FILE.jsonl")
    bench.add_argument("--num-prompts", type=int, default=None, help="use only the first N prompts")
    bench.add_argument("--strategies", default="ar,prompt_lookup,chain,marginal,conditional")
    bench.add_argument("--temperatures", default="0")
    bench.add_argument("--budget", type=int, default=None,
                       help="tree budget for every strategy (default: each strategy's own: 16 for fixed trees, a "
                            "cap from the measured costs for auto; conditional@8 gives one strategy its own)")
    bench.add_argument("--no-lean", action="store_true", help="skip the lean hand-written AR baseline")
    bench.add_argument("--json", help="write the tables as JSON here")
    bench.add_argument("--plot", help="write a speedup bar chart (PNG) here")
    bench.set_defaults(func=cmd_bench)

    cal = sub.add_parser("calibrate", help="measure (or show) the decode-cost profile that tree_strategy='auto' uses")
    common(cal)
    cal.add_argument("--remeasure", action="store_true", help="measure again even if a profile is cached")
    cal.add_argument("--clear", action="store_true", help="delete every cached profile and exit")
    cal.set_defaults(func=cmd_calibrate)

    choose = sub.add_parser("choose", help="choose b of k labels with one prefill and one tree-causal probe")
    choose.add_argument("prompt")
    choose.add_argument("--labels", required=True, help="the candidate labels, separated by --label-sep")
    choose.add_argument("--label-sep", default="|")
    choose.add_argument("--num-select", type=int, default=1)
    choose.add_argument("--separator", default=", ")
    choose.add_argument("--width", default=None, type=lambda w: w if w in (None, "auto") else int(w))
    choose.add_argument("--model", help="a local transformers model dir (default: the embedded SmolLM2)")
    choose.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    choose.set_defaults(func=cmd_choose)

    cb = sub.add_parser("choose-bench", help="selection engines side by side on real selection prompts")
    cb.add_argument("--k", type=_int_list, default=[5, 10, 20], help="candidates per prompt, e.g. 5,10,20")
    cb.add_argument("--n", type=_int_list, default=[1, 2, 3, 4], help="labels selected, e.g. 1,2,3,4")
    cb.add_argument("--num-prompts", type=int, default=8, help="prompts per (k, n) cell")
    cb.add_argument("--engines", default="serial,chunked,outlines,compiled,adaptive,unary")
    cb.add_argument("--model", help="a local transformers model dir (default: the embedded SmolLM2)")
    cb.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    cb.add_argument("--seed", type=int, default=0)
    cb.add_argument("--diagnostics", action="store_true",
                    help="also: MAP set with certificate and interaction mass per cell (exact; k!/(k-n)! <= 720)")
    cb.add_argument("--json", help="write the report as JSON here")
    cb.add_argument("--plot", help="write the work-depth and latency plot (PNG) here")
    cb.set_defaults(func=cmd_choose_bench)

    rag = sub.add_parser("rag-eval", help="hierarchical RAG over QASPER-format papers: five selection interfaces")
    rag.add_argument("--data", default="offline", help="offline (bundled Python-docs set), hub, or a raw QASPER JSON")
    rag.add_argument("--split", default="validation")
    rag.add_argument("--interfaces", default="compiled,serial,chunked,json,unary")
    rag.add_argument("--k", type=int, default=6, help="entries shown per round")
    rag.add_argument("--b", type=int, default=2, help="entries chosen per round")
    rag.add_argument("--budgets", default="1000,2000", help="evidence token budgets K, comma-separated")
    rag.add_argument("--limit", type=int, default=None, help="only the first N questions")
    rag.add_argument("--max-rounds", type=int, default=32, help="selection rounds per question at most")
    rag.add_argument("--corrupt-seed", type=int, default=None, help="ablation: evaluate on a falsely nested tree")
    rag.add_argument("--no-serial-check", action="store_true", help="skip the per-round agreement check with serial")
    rag.add_argument("--model", help="a local transformers model dir (default: the embedded SmolLM2)")
    rag.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    rag.add_argument("--json", help="write the table and per-question records here")
    rag.add_argument("--plot", help="write AllEvidence@K and latency bars (PNG) here")
    rag.add_argument("--no-progress", action="store_true")
    rag.set_defaults(func=cmd_rag_eval)

    from hf_treegen.metrics import cli as metrics_cli

    score = sub.add_parser("qasper-score", help="the official QASPER metrics on a gold file and predictions")
    metrics_cli.add_arguments(score)
    score.set_defaults(func=metrics_cli.run)

    from hf_treegen.train import cli as train_cli

    train = sub.add_parser("train-drafter", help="distil a DFlash or Domino drafter from the target's own outputs")
    train_cli.add_arguments(train)
    train.set_defaults(func=train_cli.run)

    vocab = sub.add_parser("draft-vocab", help="give a drafter a reduced draft vocabulary (its corpus's most frequent "
                                               "tokens): a cheaper draft head, same output")
    vocab.add_argument("--drafter", required=True, help="drafter checkpoint dir or Hub id")
    vocab.add_argument("--data", required=True, action="append",
                       help="corpus folder(s) from hf_treegen.train.data (repeat or comma-separate)")
    vocab.add_argument("--size", type=int, default=8192, help="token ids kept (the EOS ids are added)")
    vocab.add_argument("--out", required=True, help="where to write the drafter with its draft vocabulary")
    vocab.add_argument("--model", help="the drafter's target: a local transformers model dir (default: SmolLM2)")
    vocab.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="target dtype while loading")
    vocab.set_defaults(func=cmd_draft_vocab)

    from hf_treegen.train import teacher_forced

    tf = sub.add_parser("teacher-forced-data",
                        help="label existing text (stdlib, Python docs, a folder) with the target's argmax for drafters")
    teacher_forced.add_arguments(tf)
    tf.set_defaults(func=teacher_forced.run)
    return parser


def main(argv=None) -> int:
    from hf_treegen.extras import MissingExtra

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except MissingExtra as err:  # an install choice, not a bug: one line, no traceback
        print(f"hf-treegen: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
