"""Tree speculative decoding inside generate(): every tree strategy against stock generate().

    python examples/tree_generation.py                                   # offline: embedded SmolLM2 + shipped drafter
    python examples/tree_generation.py --strategies chain,conditional --prompts 6 --max-new-tokens 64
    python examples/tree_generation.py --model Qwen/Qwen3-8B --drafter z-lab/Qwen3-8B-DFlash-b16 \\
        --device cuda --dtype bf16                                       # a Hub target and its released drafter

Each prompt first runs through stock ``model.generate()`` (greedy), then through every strategy with
``assistant_model=drafter, tree_strategy=...``, interleaved prompt by prompt (hf_treegen.bench's
harness), so a slow drift of a shared machine hits all of them alike. The table gives tokens/s, the
speedup over stock (median of per-prompt ratios), tau (tokens per target forward), the tree size and
whether every greedy output equals stock's token for token. In fp32 it must: the script exits with
status 1 when one does not. In bf16 a tree verify and a one-token step round differently, so a near-tie
can flip (the table's "shared" column then says how many tokens agreed).

Offline by default: the embedded SmolLM2-135M-Instruct and the Domino drafter shipped with hf_treegen.
``--model`` and ``--drafter`` take a local folder or a Hub id (the drafter must be trained for that model:
DFlash drafters run chain / marginal / adaptive / auto; Domino drafters every strategy).
"""

from __future__ import annotations

import argparse
import os
import sys

from example_setup import one_line, resolve_device

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp64": "float64"}
DEFAULT_STRATEGIES = "chain,marginal,static_corrected,conditional,auto"


def load_pair(model_id: str | None, drafter_id: str | None, dtype_name: str, device: str):
    """(model, tokenizer, drafter): the embedded pair by default, else --model / --drafter (folder or Hub id)."""
    import torch

    import hf_treegen as htg
    from hf_treegen.drafters.auto import load_any_drafter

    dtype = getattr(torch, DTYPES[dtype_name])
    if model_id is None:
        from hf_treegen.models import load_default_pair

        model, tokenizer, drafter = load_default_pair(dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = htg.enable(AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, attn_implementation="sdpa").eval())
        tokenizer = AutoTokenizer.from_pretrained(model_id)
        drafter = load_any_drafter(drafter_id, target=model)
    model.to(device)
    drafter = drafter.to(device=device, dtype=dtype).eval()
    return model, tokenizer, drafter


def table(results) -> str:
    """The harness's measurements (StrategyResult.row()), one line per strategy; "ar" is stock generate()."""
    lines = [f"{'strategy':<18} {'tok/s':>7} {'speedup':>7} {'tau':>5} {'nodes':>5} {'same as stock':>13} "
             f"{'plain':>5}   ms/round: {'draft':>6} {'build':>6} {'verify':>7}"]
    for r in results:
        row = r.row()
        name = "stock generate()" if r.name == "ar" else r.name
        tau = f"{row['tau']:5.2f}" if r.stage_ms else f"{'1.00':>5}"
        nodes = f"{row['tree_size']:5.1f}" if r.tree_sizes else f"{'-':>5}"
        plain = f"{row['plain_share']:5.0%}" if r.rounds else f"{'-':>5}"
        stages = (f"{row['draft_ms']:6.1f} {row['build_ms']:6.1f} {row['verify_ms']:7.1f}" if r.stage_ms else "")
        lines.append(f"{name:<18} {row['tok_s']:7.2f} {row['speedup']:6.2f}x {tau} {nodes} "
                     f"{f'{r.equal}/{r.prompts}':>13} {plain}   {'':>9} {stages}".rstrip())
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="target: local folder or Hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--drafter", help="DFlash/Domino drafter for --model: folder or Hub id (default: the shipped one)")
    parser.add_argument("--strategies", default=DEFAULT_STRATEGIES,
                        help="comma-separated tree strategies, a budget per strategy as conditional@16 "
                             "(default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=3,
                        help="how many built-in prompts, 1-96 (code, explain, chat in turn) (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens per answer (default: %(default)s)")
    parser.add_argument("--budget", type=int, default=8,
                        help="tree budget, drafted nodes per round, for strategies without @N; "
                             "auto takes it as a cap (default: %(default)s)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="model dtype (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... or auto: cuda when there is one "
                                                        "(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's own, i.e. OMP_NUM_THREADS or all cores)")
    args = parser.parse_args()

    if args.prompts < 1 or args.max_new_tokens < 1 or args.budget < 1:
        parser.error("--prompts, --max-new-tokens and --budget must be at least 1")
    if args.prompts > 96:
        parser.error("--prompts: the built-in sets hold 96 prompts (32 each of code, explain, chat)")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.model is not None and args.drafter is None:
        parser.error("--model needs --drafter: a drafter trained for that model (the shipped one fits SmolLM2 only)")
    if args.drafter is not None and args.model is None:
        parser.error("--drafter needs --model: the shipped SmolLM2 drafter is used with the embedded model")

    import torch

    from hf_treegen.bench.harness import parse_tree_spec, run_strategies, strategy_name
    from hf_treegen.bench.prompts import builtin_prompts
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.builders import DFLASH_STRATEGIES, STRATEGIES

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if strategy_name(s) not in STRATEGIES]
    try:  # a malformed budget or suffix is refused before anything loads
        for s in strategies:
            if s not in unknown:
                parse_tree_spec(s, args.budget)
    except ValueError as err:
        parser.error(str(err))
    if unknown or not strategies:
        parser.error(f"--strategies: unknown {unknown or '(none given)'}; choose from {', '.join(STRATEGIES)}")
    device = resolve_device(parser, args.device)
    if args.threads:
        torch.set_num_threads(args.threads)

    try:
        model, tokenizer, drafter = load_pair(args.model, args.drafter, args.dtype, device)
    except (OSError, ValueError) as err:  # a missing folder, an offline Hub, a drafter for another model
        parser.error(f"could not load the model or drafter: {one_line(err)}")
    if not drafter.config.is_domino:
        skipped = [s for s in strategies if strategy_name(s) not in DFLASH_STRATEGIES]
        strategies = [s for s in strategies if s not in skipped]
        if skipped:
            print(f"note: {', '.join(skipped)} need a Domino drafter; skipped for this DFlash drafter", file=sys.stderr)
        if not strategies:
            parser.error("no strategy left for a DFlash drafter; use chain, marginal, adaptive or auto")

    names = ("code", "explain", "chat")
    sets = [builtin_prompts(n) for n in names]
    texts = [sets[i % 3][i // 3] for i in range(args.prompts)]
    prompts = [render_chat(tokenizer, t).to(device) for t in texts]
    print(f"target: {args.model or 'SmolLM2-135M-Instruct (embedded)'} ({args.dtype}, {device}, "
          f"{torch.get_num_threads()} threads)\ndrafter: {drafter.config.describe()}")

    # warm-up on a few tokens (first-call allocations; auto measures the machine's costs once and caches them)
    run_strategies(model, prompts[:1], drafter, strategies, max_new_tokens=4, budget=args.budget, progress=False,
                   lean=False)
    results = run_strategies(model, prompts, drafter, strategies, max_new_tokens=args.max_new_tokens,
                             budget=args.budget, progress=False, lean=False)
    print(f"\ngreedy, {len(prompts)} prompts x {args.max_new_tokens} new tokens, budget {args.budget}; "
          f"speedups are medians of per-prompt ratios, each strategy run right after stock on the same prompt")
    print(table(results))

    tree = [r for r in results if r.name != "ar"]
    same = all(r.equal == r.prompts for r in tree)
    verdict = "identical" if same else "DIFFERENT"
    print(f"\ngreedy outputs {verdict} to stock generate(): "
          + ", ".join(f"{r.name} {r.equal}/{r.prompts}" for r in tree))

    ids = prompts[0]
    last = parse_tree_spec(strategies[-1], args.budget).options
    out = model.generate(ids, assistant_model=drafter, **last.generate_kwargs(),
                         max_new_tokens=args.max_new_tokens, do_sample=False, return_dict_in_generate=True)
    print(f"\n{strategies[-1]} on: {texts[0]}\n"
          f"{tokenizer.decode(out.sequences[0, ids.shape[1]:], skip_special_tokens=True).strip()}\n"
          f"tree_stats: {out.tree_stats.summary()}")
    if not same and args.dtype != "bf16":
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
