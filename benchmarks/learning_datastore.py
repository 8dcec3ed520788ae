"""A LearningDatastore over a stream of requests: SmolLM2-135M-Instruct with the shipped drafter,
greedy, each request served by stock generate() on packed kernels, by auto (the drafter's datastore)
and by auto with a LearningDatastore shared by the stream, interleaved request by request.

    .venv/bin/python benchmarks/learning_datastore.py --threads 2 --max-new-tokens 64 \
        --out docs/results/learning_datastore.txt --plot docs/results/learning_datastore.png

    .venv/bin/python benchmarks/learning_datastore.py --threads 2 --max-new-tokens 64 \
        --workloads rag,code-edit --out docs/results/learning_datastore_workloads.txt

Workloads: "fresh" serves every built-in prompt once; "repeated" serves a pool of 24 of them, each
five times in a seeded order; "rag" answers every question of the bundled QASPER-format papers from
its BM25 evidence, paper by paper; "code-edit" asks for one edit of a given file per request (see
:mod:`hf_treegen.bench.request_stream`). Each workload starts with an empty learning store.
Speed-ups are medians of per-request ratios over packed stock.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="fresh,repeated", help="(default: %(default)s)")
    parser.add_argument("--fresh-requests", type=int, default=96, help="(default: %(default)s)")
    parser.add_argument("--repeated-requests", type=int, default=120, help="(default: %(default)s)")
    parser.add_argument("--rag-requests", type=int, default=None, help="(default: every question)")
    parser.add_argument("--code-edit-requests", type=int, default=None, help="(default: every edit)")
    parser.add_argument("--pool", type=int, default=24, help="distinct prompts of the repeated workload")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="the learning store's memory bound (default: LearningDatastore's)")
    parser.add_argument("--block", type=int, default=20, help="requests per table row (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", help="also write the tables here")
    parser.add_argument("--plot", help="write speed-up against request number (PNG) here")
    args = parser.parse_args()

    import torch

    from hf_treegen import LearningDatastore, calibrate
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.bench.request_stream import builtin_texts, format_stream, plot_streams, serve, workload
    from hf_treegen.defaults import LEARNED_DATASTORE_TOKENS
    from hf_treegen.models import load_default_pair

    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    requests = {"fresh": args.fresh_requests, "repeated": args.repeated_requests, "rag": args.rag_requests,
                "code-edit": args.code_edit_requests}
    if args.threads:
        torch.set_num_threads(args.threads)
    max_tokens = args.max_tokens or LEARNED_DATASTORE_TOKENS
    model, tokenizer, drafter = load_default_pair()
    try:
        loads = [workload(name, requests.get(name), pool=args.pool, tokenizer=tokenizer) for name in names]
    except ValueError as err:
        parser.error(str(err))
    calibrate(model, drafter, use_cache=False)  # a cached profile may have been timed on a busy machine
    # warm-up: packing and first-call costs stay out of the stream
    warm = [render_chat(tokenizer, text) for text in builtin_texts()[:2]]
    serve(model, drafter, warm, [0, 1], args.max_new_tokens, LearningDatastore(), progress=False)

    lines = [f"LearningDatastore over a request stream, SmolLM2-135M-Instruct fp32 + shipped drafter, greedy, "
             f"{args.max_new_tokens} new tokens, {torch.get_num_threads()} threads, {platform.machine()} "
             f"{os.cpu_count()} cores",
             f"command: {' '.join(['.venv/bin/python', *sys.argv])}", ""]
    streams = {}
    for load in loads:
        store = LearningDatastore(base=drafter.datastore, max_tokens=max_tokens)
        prompts = [render_chat(tokenizer, text) for text in load.texts]
        streams[load.name] = serve(model, drafter, prompts, load.order, args.max_new_tokens, store)
        lines += [format_stream(load.name, streams[load.name], args.block, max_tokens), ""]
        print("\n".join(lines[-2:]), flush=True)
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plot:
        plot_streams(streams, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
