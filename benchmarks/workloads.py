"""Tree decoding per workload: SmolLM2-135M-Instruct with the shipped drafter, greedy, every request
served by stock generate() on its own and on packed kernels, transformers' prompt lookup on either, auto,
and auto with a LearningDatastore shared by the workload's stream, interleaved request by request.

    .venv/bin/python benchmarks/workloads.py --threads 2 --out docs/results/workloads.txt \
        --plot docs/results/workloads.png

Workloads (see :mod:`hf_treegen.bench.request_stream`): the built-in code, explain and chat prompts
(fresh requests, each once), repeated requests (a pool of built-in prompts asked again in a seeded
order), code edits of a given file, and RAG answers over the bundled QASPER-format papers. Each
workload starts with an empty learning store. Cells are medians of per-request ratios over stock, with
the median tau of the tree methods in brackets; the last columns put the tree methods against the
workload's fastest plain method (the highest median tok/s of the four). The cost profile ``auto`` plans
with is measured afresh at the start (a cached one may have been timed on a busy machine), so run it
on a quiet machine.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_WORKLOADS = "code,explain,chat,repeated,code-edit,rag"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="(default: %(default)s)")
    parser.add_argument("--requests", type=int, default=12,
                        help="requests per fresh prompt set (code, explain, chat) (default: %(default)s)")
    parser.add_argument("--stream-requests", type=int, default=24,
                        help="requests of the repeated, code-edit and rag streams (default: %(default)s)")
    parser.add_argument("--pool", type=int, default=8, help="distinct prompts of the repeated workload")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", help="also write the table here")
    parser.add_argument("--plot", help="write the speed-ups as grouped bars (PNG) here")
    args = parser.parse_args()

    import torch

    from hf_treegen import LearningDatastore, calibrate
    from hf_treegen.bench.machine import run_context
    from hf_treegen.bench.prompt_files import render_chat
    from hf_treegen.calibration import profile_summary
    from hf_treegen.bench.request_stream import (METHODS, PROMPT_SETS, builtin_texts, format_workloads,
                                                 plot_workloads, serve, workload)
    from hf_treegen.models import load_default_pair

    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, drafter = load_default_pair()
    try:
        loads = [workload(name, args.requests if name in PROMPT_SETS else args.stream_requests, pool=args.pool,
                          tokenizer=tokenizer) for name in names]
    except ValueError as err:
        parser.error(str(err))
    profile = profile_summary(calibrate(model, drafter, use_cache=False))
    # warm-up: packing and first-call costs stay out of the streams
    warm = [render_chat(tokenizer, text) for text in builtin_texts()[-2:]]
    serve(model, drafter, warm, [0, 1], args.max_new_tokens, LearningDatastore(), progress=False, methods=METHODS)

    streams = {}
    for load in loads:
        store = LearningDatastore(base=drafter.datastore)
        prompts = [render_chat(tokenizer, text) for text in load.texts]
        streams[load.name] = serve(model, drafter, prompts, load.order, args.max_new_tokens, store, methods=METHODS)
        print(format_workloads({load.name: streams[load.name]}), flush=True)
    text = "\n".join([
        f"Per workload, SmolLM2-135M-Instruct fp32 + shipped drafter, greedy, {args.max_new_tokens} new tokens, "
        f"{torch.get_num_threads()} threads; speed-up over stock generate() (median tau), and of the tree methods "
        f"over the workload's fastest plain method",
        *run_context(profile), "", format_workloads(streams)])
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plot:
        plot_workloads(streams, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
