"""The ``hf-treegen`` command line: ``demo``, ``generate``, ``bench``, ``calibrate``, ``choose``,
``choose-bench``, ``rag-eval``, ``qasper-score``, ``generate-data``, ``train-drafter``, ``export-drafter``,
``teacher-forced-data``, ``draft-vocab``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from hf_treegen.cli_types import (device_name, float_list, int_list, non_negative_float, non_negative_int, positive_int,
                                  probe_width, resolve_device, tree_strategy, user_error)

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def _load_pair(args):
    """The target (--model, default the embedded SmolLM2), plus a drafter from --drafter or a random one."""
    import hf_treegen as htg
    from hf_treegen.drafters.auto import load_any_drafter

    _check_drafter_arg(args.drafter)
    model, tokenizer = _load_model(args)
    model = htg.enable(model)
    from hf_treegen.models import DEFAULT_DRAFTER_DIR

    dtype = htg.default_draft_dtype(model) if args.drafter_dtype == "auto" else DTYPES[args.drafter_dtype]
    if args.drafter_dtype == "bf16" and args.dtype != "bf16":
        _warn_emulated_bf16("bf16", what="a bf16 drafter drafts slower than an fp32 one", remedy="--drafter-dtype auto")
    if args.drafter:
        drafter = load_any_drafter(args.drafter, target=model, dtype=dtype)
        note = f"drafter from {args.drafter}"
    elif not getattr(args, "model", None) and (DEFAULT_DRAFTER_DIR / "model.safetensors").is_file():
        drafter = load_any_drafter(DEFAULT_DRAFTER_DIR, target=model, dtype=dtype).eval()
        note = "the shipped SmolLM2 Domino drafter (model_cards/smollm2-135m-domino.md)"
    else:
        torch.manual_seed(0)
        cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=8, projector_type="domino",
                                           emb_dim=128, gru_hidden_dim=256)
        drafter = htg.DominoDrafter(cfg, target=model).to(device=model.device, dtype=dtype).eval()
        note = ("random (untrained) Domino drafter: expect tau ~ 1, i.e. no speedup; this shows exactness, "
                "not speed (pass --drafter DIR for a trained one)")
    note += f", drafting in {DTYPE_NAMES[drafter.dtype]}"
    return model, tokenizer, drafter, note


def _check_drafter_arg(drafter: str | None, flag: str = "--drafter") -> None:
    """A drafter argument (``flag``: the option that gave it) that is neither a folder nor shaped like
    a Hub id (owner/name) is a typo: say so before any model loads."""
    if drafter is None or os.path.isdir(drafter):
        return
    parts = drafter.split("/")
    if os.path.exists(drafter) or len(parts) != 2 or not all(parts) or drafter.startswith((".", "~")):
        raise FileNotFoundError(f"{flag} {drafter}: no such drafter folder (give a folder holding config.json "
                                f"and model.safetensors, or a Hub id such as owner/name).")


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

    strategies = [s for s in args.strategies.split(",") if drafter.config.has_sequential_head or s in DFLASH_STRATEGIES]
    texts = builtin_prompts("python-qa")[:3]
    prompts = [_chat_ids(tokenizer, t).to(model.device) for t in texts]
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
    from hf_treegen.generation import TreeOptions

    model, tokenizer, drafter, note = _load_pair(args)
    ids = _chat_ids(tokenizer, args.prompt) if args.chat else tokenizer(args.prompt, return_tensors="pt").input_ids
    ids = ids.to(model.device)
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0, return_dict_in_generate=True)
    if args.temperature > 0:
        kwargs["temperature"] = args.temperature
    if args.strategy != "ar":
        kwargs.update(assistant_model=drafter, **TreeOptions.parse(args.strategy, args.budget).generate_kwargs())
    out, seconds = _timed(lambda: model.generate(ids, **kwargs))
    print(tokenizer.decode(out.sequences[0, ids.shape[1]:], skip_special_tokens=True))
    new = out.sequences.shape[1] - ids.shape[1]
    stats = getattr(out, "tree_stats", None)
    extra = (f", tau {stats.tau:.2f} over {stats.rounds} rounds ({stats.plain_steps} plain steps, "
             f"{stats.lookup_tokens} tokens from lookup)" if stats else "")
    print(f"\n[{new} tokens in {seconds:.2f} s = {new / seconds:.1f} tok/s{extra}; {note if stats else 'stock'}]",
          file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from hf_treegen.bench.run import drafter_labels, parse_strategies, plot_report, run_bench, write_json
    from hf_treegen.drafters.auto import load_any_drafter

    strategies = parse_strategies(args.strategies)
    if args.batch_size > 1:
        return _bench_batched(args, strategies)
    temperatures = args.temperatures
    for path in args.compare_drafter:
        _check_drafter_arg(path, flag="--compare-drafter")
    model, tokenizer, drafter, note = _load_pair(args)
    print(f"{drafter.config.describe()} ({note})", file=sys.stderr)
    others = {}
    for label, path in zip(drafter_labels(args.compare_drafter), args.compare_drafter):
        others[label] = load_any_drafter(path, target=model, dtype=drafter.dtype).eval()
        print(f"{label}: {others[label].config.describe()} (drafter from {path})", file=sys.stderr)
    report = run_bench(model, tokenizer, drafter, args.prompts, strategies, temperatures, args.max_new_tokens,
                       args.budget, num_prompts=args.num_prompts, lean=not args.no_lean, other_drafters=others)
    for temperature, table in report["tables"].items():
        print(f"\nT={temperature}, {report['num_prompts']} prompts from {args.prompts}, "
              f"{args.max_new_tokens} new tokens, budget {args.budget}, {args.dtype}, {report['threads']} threads")
        print(table["text"])
    if args.json:
        write_json(report, args.json)
    if args.plot:
        plot_report(report, args.plot)
    return 0


def _bench_batched(args, strategies: list[str]) -> int:
    """``bench --batch-size B``: greedy tokens/s over batches of B prompts, stock batched generate() first."""
    from hf_treegen.bench.batched import BATCH_BASELINES, format_batched, run_batched
    from hf_treegen.bench.harness import BASELINES
    from hf_treegen.bench.prompt_files import load_prompt_texts, render_chat

    unbatched = [s for s in strategies if s in BASELINES and s not in BATCH_BASELINES]
    if unbatched:
        return user_error("bench", f"--batch-size runs {', '.join(BATCH_BASELINES)} and tree strategies; drop "
                                   f"{', '.join(unbatched)} (they decode one prompt at a time).")
    if args.temperatures != [0.0] or args.compare_drafter or args.json or args.plot:
        return user_error("bench", "--batch-size measures greedy decoding with one drafter and prints its table; "
                                   "drop --temperatures, --compare-drafter, --json and --plot.")
    model, tokenizer, drafter, note = _load_pair(args)
    rows = load_prompt_texts(args.prompts, limit=args.num_prompts)[: args.num_prompts or None]
    prompts = [render_chat(tokenizer, r["prompt"]).to(model.device) for r in rows]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else model.generation_config.eos_token_id
    # warm-up: first-use costs (packing, the measurement of this batch size) stay out of the table
    run_batched(model, drafter, prompts[:args.batch_size], strategies, args.batch_size, 4, pad, progress=False)
    results = run_batched(model, drafter, prompts, strategies, args.batch_size, args.max_new_tokens, pad)
    print(f"\ngreedy, {len(prompts)} prompts from {args.prompts} in batches of {args.batch_size}, "
          f"{args.max_new_tokens} new tokens, {args.dtype}, {torch.get_num_threads()} threads ({note})")
    print(format_batched(results))
    return 0


def cmd_calibrate(args) -> int:
    import json

    from hf_treegen import calibrate
    from hf_treegen.calibration import calibration_dir, clear_calibration_cache, profile_key, profile_summary

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


def _warn_emulated_bf16(dtype: str, what: str = "expect it to be slower than fp32 and tree decoding to gain "
                                                "little or lose against stock bf16 generate()",
                        remedy: str = "--dtype fp32") -> None:
    """bf16 on a CPU without native bf16 matmuls runs, but slowly: say so before the numbers do."""
    from hf_treegen.ops import native_bf16_matmuls

    if dtype == "bf16" and not torch.cuda.is_available() and not native_bf16_matmuls("cpu"):
        print(f"note: this CPU has no native bf16 matmuls (no AVX512-BF16 or AMX), so bf16 runs on emulated "
              f"kernels: {what}. {remedy} is the fast choice here.", file=sys.stderr)


def _load_model(args):
    """(model, tokenizer): --model (a local transformers folder) or the embedded SmolLM2, on --device."""
    device = resolve_device(getattr(args, "device", "cpu"))
    if device.type == "cpu":
        _warn_emulated_bf16(args.dtype)
    if getattr(args, "model", None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype]).eval()
        tokenizer = AutoTokenizer.from_pretrained(args.model)
    else:
        from hf_treegen.models import load_smollm2

        model, tokenizer = load_smollm2(DTYPES[args.dtype])
    return model.to(device), tokenizer


def _load_target(args):
    """The target (--model or the embedded SmolLM2), tree-enabled, on --device."""
    import hf_treegen as htg

    model, tokenizer = _load_model(args)
    return htg.enable(model), tokenizer


def cmd_choose(args) -> int:
    import hf_treegen as htg

    labels = args.labels.split(args.label_sep)
    if any(not label.strip() for label in labels):
        raise ValueError(f"--labels {args.labels!r} has an empty label; separate labels with {args.label_sep!r}.")
    if len(set(labels)) != len(labels):
        raise ValueError(f"--labels repeats a label: {sorted({x for x in labels if labels.count(x) > 1})}; "
                         f"give each label once.")
    if args.num_select > len(labels):
        raise ValueError(f"--num-select {args.num_select} is more than the {len(labels)} labels given.")
    model, tokenizer = _load_target(args)
    proc = htg.CompiledChoiceProcessor(tokenizer, labels, args.num_select, separator=args.separator, width=args.width)
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
        return user_error("choose-bench", str(err))
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

    from hf_treegen.rag.evaluation import (evaluate, format_table, parse_baselines, parse_interfaces, plot_table,
                                           summarise, write_json)
    from hf_treegen.rag.qasper import load_qasper

    try:
        interfaces = parse_interfaces(args.interfaces)
        baselines = parse_baselines(args.baselines)
        if not interfaces and not baselines:
            raise ValueError("--interfaces and --baselines are both none: name at least one method to evaluate.")
        budgets = sorted(args.budgets)
        if args.b > args.k:
            raise ValueError(f"--b {args.b} is larger than --k {args.k}; a round cannot choose more than it shows.")
        papers = load_qasper(args.split, source=args.data)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        return user_error("rag-eval", str(err))
    state = PartialState()
    model, tokenizer = _load_target(args)
    model.to(state.device)
    records = evaluate(model, tokenizer, papers, interfaces, args.k, args.b, budgets, limit=args.limit,
                       check_against_serial=not args.no_serial_check,
                       corrupt_seed=args.corrupt_seed, progress=not args.no_progress, max_rounds=args.max_rounds,
                       baselines=baselines)
    if not state.is_main_process:
        return 0
    table = summarise(records, papers, budgets)
    print(f"\n{len(records) // (len(interfaces) + len(baselines))} questions from {args.data} ({args.split}), k={args.k}, b={args.b}, "
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


def _corpus_folders(data: list[str]) -> list[str] | str:
    """--data values (repeated or comma-separated) -> the corpus folders, or what is wrong with them."""
    folders = [d.strip() for arg in data for d in arg.split(",") if d.strip()]
    missing = [d for d in folders if not os.path.isdir(d)]
    if missing or not folders:
        return f"--data {', '.join(missing) or '(empty)'}: no such corpus folder."
    return folders


def _stored_drafter(path):
    """(checkpoint folder, dtype of its float tensors): commands that rewrite a drafter keep that dtype,
    so its weights are saved again without rounding."""
    from hf_treegen.drafters.loading import read_state_dict, resolve_checkpoint_dir

    directory = resolve_checkpoint_dir(path)
    return directory, next((t.dtype for t in read_state_dict(directory).values() if t.is_floating_point()), None)


def cmd_convert(args) -> int:
    """Rewrite a drafter folder in another layout (weights keep their dtype; a datastore goes along)."""
    from hf_treegen.drafters.auto import load_any_drafter

    directory, stored = _stored_drafter(args.drafter)
    if Path(args.out).resolve() == directory.resolve():
        return user_error("convert", "--out is the drafter's own folder; write the converted copy elsewhere.")
    try:
        model, _ = _target_for_vocab(args)
    except OSError as err:  # a --model folder that is not there (transformers reports it as a Hub id)
        return user_error("convert", f"cannot load the target {args.model!r}: {err}")
    drafter = load_any_drafter(directory, target=model, dtype=stored)
    if args.verifier:  # the name the speculators config records for the target (vLLM and SGLang read it)
        model.config._name_or_path = args.verifier
    drafter.save_pretrained(args.out, format=args.to)
    print(f"{drafter.config.describe()}\nwritten to {args.out} in the {args.to} layout")
    return 0


def cmd_draft_vocab(args) -> int:
    """Attach a draft vocabulary to a drafter: the --size most frequent response tokens of the corpora in
    --data, plus the target's EOS ids. Writes a copy of the drafter (same weights and dtype) to --out."""
    from hf_treegen.drafters.auto import load_any_drafter
    from hf_treegen.drafters.vocab import choose_draft_vocab, eos_token_ids, token_counts
    from hf_treegen.train.data import load_corpus

    def fail(message: str) -> int:
        return user_error("draft-vocab", message)

    folders = _corpus_folders(args.data)
    if isinstance(folders, str):
        return fail(folders)
    try:
        corpus = [item for folder in folders for item in load_corpus(folder)]
        directory, stored = _stored_drafter(args.drafter)
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


def cmd_datastore(args) -> int:
    """Give a drafter a datastore: the answers stored in the generated corpora of --data, each with the
    few tokens before it (its chat-template header, so a first round finds a match too). Writes a copy
    of the drafter (same weights and dtype) to --out."""
    from hf_treegen.datastore import LONGEST_MATCH, TokenDatastore
    from hf_treegen.drafters.auto import load_any_drafter
    from hf_treegen.train.data import load_corpus, read_manifest

    def fail(message: str) -> int:
        return user_error("datastore", message)

    folders = _corpus_folders(args.data)
    if isinstance(folders, str):
        return fail(folders)
    try:
        labelled = [d for d in folders if read_manifest(d).get("kind") == "teacher_forced"]
        if labelled:  # their tokens are the source text, not what the target wrote
            return fail(f"--data {', '.join(labelled)}: a teacher-forced corpus holds existing text, not the target's "
                        f"answers; give only corpora written by generate-data.")
        corpus = [item for folder in folders for item in load_corpus(folder)]
        directory, stored = _stored_drafter(args.drafter)
    except (OSError, ValueError) as err:
        return fail(str(err))
    answers = [ids[max(0, start - LONGEST_MATCH):] for ids, start in corpus if ids.numel() > start]
    if not answers:
        return fail(f"{', '.join(folders)} holds no answers.")
    try:
        model, _ = _target_for_vocab(args)
        drafter = load_any_drafter(directory, target=model, dtype=stored)  # the stored dtype: no rounding
    except (OSError, ValueError) as err:
        return fail(str(err))
    drafter.datastore = TokenDatastore.from_sequences(answers)
    if drafter.datastore.max_token_id >= model.config.vocab_size:
        return fail(f"the corpora hold token id {drafter.datastore.max_token_id}, past the target's vocabulary "
                    f"({model.config.vocab_size} ids): they were written with another tokenizer.")
    drafter.save_pretrained(args.out)
    print(f"{drafter.config.describe()}\ndatastore of {len(answers)} answers ({len(drafter.datastore):,} tokens) "
          f"from {', '.join(folders)}; saved to {args.out}")
    return 0


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's default in its help line; descriptions keep their line breaks."""

    def _get_help_string(self, action) -> str:
        # options whose help already says what their default means get no second "(default: None)"
        if "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


# `rag-eval --quick`: what a newcomer can run to the end in a few minutes on a laptop CPU. They are
# defaults, so any of these options given next to --quick still wins.
RAG_QUICK_DEFAULTS = dict(limit=2, interfaces="compiled,serial", baselines="bm25", budgets=[500], max_rounds=6)


def _target_args(p: argparse.ArgumentParser, drafter: bool = True, device: bool = True) -> None:
    """--model and --dtype; with ``device`` --device (commands that run the model), with ``drafter``
    --drafter and --drafter-dtype."""
    p.add_argument("--model", help="the target: a local transformers model folder (default: the embedded "
                                   "SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="the target's dtype")
    if device:
        p.add_argument("--device", type=device_name, default="auto",
                       help="where the target and the drafter run: auto (a GPU when there is one, else the CPU), "
                            "cpu, cuda or cuda:N")
    if drafter:
        p.add_argument("--drafter", help="drafter checkpoint folder or Hub id (default: the shipped SmolLM2 "
                                         "Domino drafter; a random one when --model is given)")
        p.add_argument("--drafter-dtype", choices=["auto", *sorted(DTYPES)], default="auto",
                       help="what the drafter computes in; auto: bf16 beside an fp32 target on a CPU with "
                            "native bf16 matmuls (it drafts faster; output is the same), else --dtype")


def _decoding_args(p: argparse.ArgumentParser, max_new_tokens: int = 48) -> None:
    p.add_argument("--max-new-tokens", type=positive_int, default=max_new_tokens, help="new tokens per answer")


def build_parser(rag_quick: bool = False) -> argparse.ArgumentParser:
    """The ``hf-treegen`` parser; ``rag_quick`` makes :data:`RAG_QUICK_DEFAULTS` rag-eval's defaults."""
    from hf_treegen import __version__

    parser = argparse.ArgumentParser(prog="hf-treegen", description=__doc__, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"hf-treegen {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help, formatter_class=_Formatter)

    _add_decoding_commands(command)
    _add_choice_commands(command, rag_quick)
    _add_drafter_commands(command)
    return parser


def _add_decoding_commands(command) -> None:
    """demo, generate, bench, calibrate."""

    demo = command("demo", "SmolLM2 offline: stock generate() vs tree strategies, same tokens")
    _target_args(demo)
    _decoding_args(demo)
    demo.add_argument("--strategies", default="auto,conditional,chain",
                      help="tree strategies to compare with stock generate(); the first one also streams an answer")
    demo.add_argument("--budget", type=positive_int, default=16, help="tree budget (drafted nodes per round)")
    demo.set_defaults(func=cmd_demo)

    gen = command("generate", "generate one answer (stock or tree decoding) and print it with its speed")
    _target_args(gen)
    _decoding_args(gen)
    gen.add_argument("prompt", help="the prompt (wrapped in the chat template unless --no-chat)")
    gen.add_argument("--strategy", default="auto", type=tree_strategy,
                     help="ar: stock generate(); auto: the tree for the drafter, or plain steps when no tree pays; "
                          "or any tree strategy, written as bench writes it: NAME[@BUDGET][+lookupN][+pathsN]"
                          "[+insideN][+nostore] (e.g. conditional@4+lookup8; see the Strategies guide)")
    gen.add_argument("--budget", type=positive_int, default=None,
                     help="tree budget (drafted nodes per round) where --strategy gives none (default: the "
                          "strategy's own)")
    gen.add_argument("--temperature", type=non_negative_float, default=0.0,
                     help="sampling temperature (0: greedy)")
    gen.add_argument("--no-chat", dest="chat", action="store_false", help="do not apply the chat template")
    gen.set_defaults(func=cmd_generate)

    bench = command("bench", "strategies interleaved on a prompt set: tau, tok/s, speedups, tables")
    _target_args(bench)
    _decoding_args(bench)
    bench.add_argument("--prompts", default="builtin:code,explain,chat", help="builtin:NAME[,NAME] or FILE.jsonl")
    bench.add_argument("--num-prompts", type=positive_int, default=None, help="use only the first N prompts")
    bench.add_argument("--strategies", default="ar,prompt_lookup,chain,marginal,conditional",
                       help="comma-separated: baselines (ar: stock generate(); ar_packed: stock generate() on the packed "
                            "CPU kernels tree decoding uses; prompt_lookup: transformers' prompt lookup, prompt_lookup_packed: "
                            "the same on the packed kernels; hf_dflash: transformers' DFlash route and "
                            "dflash_ref: z-lab's reference loop, both with a plain DFlash --drafter) and tree strategies, a tree strategy "
                            "optionally with its own budget and lookup (conditional@8, conditional@4+lookup8; +nostore: lookup "
                            "without the drafter's datastore, as in auto+nostore)")
    bench.add_argument("--temperatures", type=float_list, default=[0.0],
                       help="comma-separated sampling temperatures (0: greedy), e.g. 0,0.5,1")
    bench.add_argument("--budget", type=positive_int, default=None,
                       help="tree budget for every strategy (default: each strategy's own: 16 for fixed trees, a "
                            "cap from the measured costs for auto; conditional@8 gives one strategy its own)")
    bench.add_argument("--compare-drafter", action="append", default=[], metavar="DRAFTER",
                       help="another drafter folder or Hub id (repeatable): every tree strategy also runs with it, "
                            "on the same prompts, interleaved, as a row STRATEGY:NAME (NAME: the folder's name)")
    bench.add_argument("--batch-size", type=positive_int, default=1,
                       help="above 1: greedy throughput over left-padded batches of this many prompts, against stock "
                            "batched generate() (strategies: ar, ar_packed and tree strategies)")
    bench.add_argument("--no-lean", action="store_true", help="skip the lean hand-written AR baseline")
    bench.add_argument("--json", help="write the tables as JSON here")
    bench.add_argument("--plot", help="write a speedup bar chart (PNG) here")
    bench.set_defaults(func=cmd_bench)

    cal = command("calibrate", "measure (or show) the decode-cost profile the cost-aware strategies use")
    _target_args(cal)
    cal.add_argument("--remeasure", action="store_true", help="measure again even if a profile is cached")
    cal.add_argument("--clear", action="store_true", help="delete every cached profile and exit")
    cal.set_defaults(func=cmd_calibrate)


def _add_choice_commands(command, rag_quick: bool) -> None:
    """choose, choose-bench, rag-eval, qasper-score."""
    choose = command("choose", "choose b of k labels with one prefill and one tree-causal probe")
    _target_args(choose, drafter=False)
    choose.add_argument("prompt", help="the question (wrapped in the chat template)")
    choose.add_argument("--labels", required=True, help="the candidate labels, separated by --label-sep")
    choose.add_argument("--label-sep", default="|", help="what separates the labels in --labels")
    choose.add_argument("--num-select", type=positive_int, default=1, help="how many labels to choose")
    choose.add_argument("--separator", default=", ", help="what the model writes between chosen labels")
    choose.add_argument("--width", type=probe_width, default="auto",
                        help="probe width: auto (planned from the cost profile) or keep the N best labels per "
                             "decision")
    choose.set_defaults(func=cmd_choose)

    cb = command("choose-bench", "selection engines side by side on real selection prompts")
    _target_args(cb, drafter=False)
    cb.add_argument("--k", type=int_list, default=[5, 10, 20], help="candidates per prompt, e.g. 5,10,20")
    cb.add_argument("--n", type=int_list, default=[1, 2, 3, 4], help="labels selected, e.g. 1,2,3,4")
    cb.add_argument("--num-prompts", type=positive_int, default=8, help="prompts per (k, n) cell")
    cb.add_argument("--engines", default="serial,chunked,outlines,compiled,adaptive,unary",
                    help="comma-separated engines to compare (serial is always run: it is the reference)")
    cb.add_argument("--seed", type=non_negative_int, default=0, help="seed of the prompt sampler")
    cb.add_argument("--diagnostics", action="store_true",
                    help="also: MAP set with certificate and interaction mass per cell (exact; k!/(k-n)! <= 720)")
    cb.add_argument("--json", help="write the report as JSON here")
    cb.add_argument("--plot", help="write the work-depth and latency plot (PNG) here")
    cb.set_defaults(func=cmd_choose_bench)

    rag = command("rag-eval", "hierarchical RAG over QASPER-format papers: five selection interfaces against "
                              "BM25, dense, DOS RAG and truncation at the same budgets")
    _target_args(rag, drafter=False)
    rag.add_argument("--data", default="offline", help="offline (bundled Python-docs set), hub, or a raw QASPER JSON")
    rag.add_argument("--split", default="validation", choices=("train", "validation", "test"), help="QASPER split")
    rag.add_argument("--interfaces", default="compiled,serial,chunked,json,unary",
                     help="comma-separated selection interfaces to compare, or none")
    rag.add_argument("--baselines", default="bm25,dense,dos,truncate",
                     help="comma-separated retrieval baselines filling the same budgets (bm25, dense, dos: dense "
                          "read in document order, truncate: the paper from the start), or none")
    rag.add_argument("--k", type=positive_int, default=6, help="entries shown per round")
    rag.add_argument("--b", type=positive_int, default=2, help="entries chosen per round")
    rag.add_argument("--budgets", type=int_list, default=[1000, 2000], help="evidence token budgets K, comma-separated")
    rag.add_argument("--limit", type=positive_int, default=None, help="only the first N questions")
    rag.add_argument("--max-rounds", type=positive_int, default=32, help="selection rounds per question at most")
    rag.add_argument("--corrupt-seed", type=non_negative_int, default=None,
                     help="ablation: evaluate on a falsely nested tree")
    rag.add_argument("--no-serial-check", action="store_true", help="skip the per-round agreement check with serial")
    rag.add_argument("--json", help="write the table and per-question records here")
    rag.add_argument("--plot", help="write AllEvidence@K and latency bars (PNG) here")
    rag.add_argument("--no-progress", action="store_true", help="no progress bar")
    quick = ", ".join(f"--{name.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
                      for name, v in RAG_QUICK_DEFAULTS.items())
    rag.add_argument("--quick", action="store_true",
                     help=f"a first run that ends in a few minutes: {quick} (options given beside it win)")
    rag.set_defaults(func=cmd_rag_eval)
    if rag_quick:
        rag.set_defaults(**RAG_QUICK_DEFAULTS)

    from hf_treegen.metrics import cli as metrics_cli

    score = command("qasper-score", "the official QASPER metrics on a gold file and predictions")
    metrics_cli.add_arguments(score)
    score.set_defaults(func=metrics_cli.run)


def _add_drafter_commands(command) -> None:
    """train-drafter, export-drafter, convert, draft-vocab, datastore, generate-data, teacher-forced-data."""
    from hf_treegen.train import cli as train_cli

    train = command("train-drafter", "distil a DFlash or Domino drafter from the target's own outputs")
    train_cli.add_arguments(train)
    train.set_defaults(func=train_cli.run)

    export = command("export-drafter", "write one train-drafter checkpoint's drafter in the released layout")
    train_cli.add_export_arguments(export)
    export.set_defaults(func=train_cli.run_export)

    convert = command("convert", "rewrite a drafter folder in another layout: zlab (z-lab DFlash/Domino releases) or "
                                 "speculators (what vLLM and SGLang read)")
    convert.add_argument("drafter", help="drafter folder or Hub id, in either layout")
    convert.add_argument("--to", required=True, choices=("zlab", "speculators"), help="the layout to write")
    convert.add_argument("--out", required=True, help="the folder to write")
    convert.add_argument("--verifier", default=None,
                         help="the target's Hub id to record in a speculators config (default: the --model path)")
    _target_args(convert, drafter=False, device=False)
    convert.set_defaults(func=cmd_convert)

    vocab = command("draft-vocab", "give a drafter a reduced draft vocabulary (its corpus's most frequent tokens): "
                                   "a cheaper draft head, same output")
    vocab.add_argument("--drafter", required=True, help="drafter checkpoint folder or Hub id")
    vocab.add_argument("--data", required=True, action="append",
                       help="corpus folder(s) from hf_treegen.train.data (repeat or comma-separate)")
    vocab.add_argument("--size", type=positive_int, default=8192, help="token ids kept (the EOS ids are added)")
    vocab.add_argument("--out", required=True, help="where to write the drafter with its draft vocabulary")
    _target_args(vocab, drafter=False, device=False)
    vocab.set_defaults(func=cmd_draft_vocab)

    store = command("datastore", "give a drafter a datastore of the target's earlier answers: lookup grafts what "
                                 "followed the current context there onto each tree (same output)")
    store.add_argument("--drafter", required=True, help="drafter checkpoint folder or Hub id")
    store.add_argument("--data", required=True, action="append",
                       help="corpus folder(s) written by generate-data (repeat or comma-separate)")
    store.add_argument("--out", required=True, help="where to write the drafter with its datastore")
    _target_args(store, drafter=False, device=False)
    store.set_defaults(func=cmd_datastore)

    from hf_treegen.train import data_cli

    generate_data = command("generate-data", "answer many prompts with the target: the data a drafter learns from")
    data_cli.add_arguments(generate_data)
    generate_data.set_defaults(func=data_cli.run)

    from hf_treegen.train import teacher_forced

    tf = command("teacher-forced-data", "label existing text (stdlib, Python docs, a folder) with the target's "
                                        "argmax for drafters")
    teacher_forced.add_arguments(tf)
    tf.set_defaults(func=teacher_forced.run)


# What a user can cause by what they type (a missing file, a mismatched drafter, a bad label set, a
# missing extra): one line on stderr and exit status 2. Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def main(argv=None) -> int:
    from hf_treegen.extras import MissingExtra

    args = build_parser().parse_args(argv)
    if getattr(args, "quick", False):  # the preset as defaults, so that options given with it still win
        args = build_parser(rag_quick=True).parse_args(argv)
    try:
        return args.func(args)
    except (MissingExtra, *USER_ERRORS) as err:
        if os.environ.get("HF_TREEGEN_DEBUG"):
            raise
        message = str(err).strip() or type(err).__name__
        return user_error(args.command, f"{message} (HF_TREEGEN_DEBUG=1 shows the traceback)")
    except KeyboardInterrupt:
        print(f"hf-treegen {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
