"""What ``auto`` costs on short answers: stock generate() against ``auto`` by the number of new tokens a
call may make, on the bundled RAG questions and the built-in chat prompts, greedy, interleaved request
by request (SmolLM2-135M-Instruct fp32 with the shipped drafter).

    .venv/bin/python benchmarks/short_answers.py --threads 2 --out docs/results/short_answers.txt

Every call of ``auto`` pays its setup (the plan, hooks that read the target's features for the
drafter), and its first draft rounds are judged only as they come, so over a few tokens there is little
time to win them back. Cells: the median per-request speed-up over stock, median ms per call of each,
and how many outputs equal stock's. The cost profile is measured afresh at the start; run it on a quiet
machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def timed(call) -> tuple[object, float]:
    started = time.perf_counter()
    out = call()
    return out, time.perf_counter() - started


def measure(model, drafter, prompts, limit: int) -> dict:
    """One row: every prompt served by stock and by auto with ``max_new_tokens=limit``, the order
    alternating from prompt to prompt."""
    import torch

    greedy = dict(max_new_tokens=limit, do_sample=False)
    stock_s, auto_s, ratios, lengths, same = [], [], [], [], 0
    for i, ids in enumerate(prompts):
        runs = {}
        for method in (("stock", "auto") if i % 2 == 0 else ("auto", "stock")):
            extra = {} if method == "stock" else {"assistant_model": drafter, "tree_strategy": "auto"}
            runs[method] = timed(lambda: model.generate(ids, **extra, **greedy))
        (reference, s_stock), (ours, s_auto) = runs["stock"], runs["auto"]
        stock_s.append(s_stock)
        auto_s.append(s_auto)
        ratios.append(s_stock / s_auto)
        lengths.append(reference.shape[1] - ids.shape[1])
        same += bool(torch.equal(reference, ours))
    return {"new tokens": statistics.median(lengths), "stock ms": 1000 * statistics.median(stock_s),
            "auto ms": 1000 * statistics.median(auto_s), "speed-up": statistics.median(ratios),
            "same": f"{same}/{len(prompts)}"}


def format_rows(rows: list[tuple[str, int, dict]]) -> str:
    lines = [f"{'workload':<9} {'max new':>7} {'made':>5} {'stock ms':>9} {'auto ms':>8} {'auto':>6} {'same':>6}"]
    for name, limit, row in rows:
        lines.append(f"{name:<9} {limit:>7} {row['new tokens']:>5.0f} {row['stock ms']:>9.1f} {row['auto ms']:>8.1f} "
                     f"{row['speed-up']:>5.2f}x {row['same']:>6}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="rag,chat", help="(default: %(default)s)")
    parser.add_argument("--limits", default="1,2,4,8,16", help="max_new_tokens values (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=8, help="requests per workload (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", help="also write the table here")
    args = parser.parse_args()
    try:
        limits = [int(v) for v in args.limits.split(",")]
    except ValueError:
        parser.error(f"--limits {args.limits!r}: give whole numbers separated by commas, e.g. 1,2,4,8")
    if min(limits) < 1:
        parser.error("--limits: every call makes at least one new token")

    import torch

    from hf_treegen import calibrate
    from hf_treegen.bench.machine import run_context
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.bench.request_stream import workload
    from hf_treegen.calibration import profile_summary
    from hf_treegen.models import load_default_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, drafter = load_default_pair()
    try:
        loads = [workload(name.strip(), args.requests, tokenizer=tokenizer) for name in args.workloads.split(",")]
    except ValueError as err:
        parser.error(str(err))
    profile = profile_summary(calibrate(model, drafter, use_cache=False))
    rows = []
    for load in loads:
        prompts = [render_chat(tokenizer, text) for text in load.texts][:args.requests]
        measure(model, drafter, prompts[:2], max(limits))  # warm-up: first-use costs stay out of the rows
        for limit in limits:
            rows.append((load.name, limit, measure(model, drafter, prompts, limit)))
            print(format_rows(rows[-1:]).splitlines()[-1], flush=True)
    text = "\n".join([
        f"Short answers, SmolLM2-135M-Instruct fp32 + shipped drafter, greedy, {torch.get_num_threads()} threads; "
        f"made = median new tokens (answers may end before the limit); auto = median per-request speed-up over stock",
        *run_context(profile), "", format_rows(rows)])
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
