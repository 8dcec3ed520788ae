"""auto's plain-step fallback on the embedded SmolLM2: modelled speed per prompt set for several memories.

    .venv/bin/python benchmarks/auto_fallback.py                       # memories 0.8 and 0.95, 8 prompts a set
    .venv/bin/python benchmarks/auto_fallback.py --memories 0.8,0.9,0.95 --num-prompts 4

``auto`` decides every round whether to draft or take a plain one-token step (StepFallback in
hf_treegen.generation.policy), from the tokens draft rounds emitted and what a cost profile says they
cost. Both are fixed here: the profile is given as numbers (default: the packed-kernel profile of
docs/results/profile.txt) and the seconds of each call are modelled from its rounds (a plain step, or a
draft round of n nodes: draft + build + an (n + 1)-row verify, plus --overhead-ms for walk and commit).
So the table depends only on tokens, never on live timings, and runs on a busy machine too. Speed is
given against plain one-token steps on the same costs; conditional@4 and @8 (a tree every round) are
the references. Every output is checked against stock greedy generate().
"""

from __future__ import annotations

import argparse
import functools

import torch

from hf_treegen.bench.prompt_files import render_chat
from hf_treegen.bench.prompts import BUILTIN_PROMPTS
from hf_treegen.costs import CostProfile
from hf_treegen.generation import TreeOptions, tree_decoding
from hf_treegen.generation.policy import StepFallback
from hf_treegen.models import load_default_pair

PACKED_PROFILE_MS = "1:52.91,5:63.36,9:69.81,17:83.06,33:118.96"  # docs/results/profile.txt (2 threads, packed)


def modelled_seconds(stats, profile: CostProfile, overhead_s: float) -> float:
    """Seconds the call's rounds cost under ``profile``. Every plain step has tree size 0; the other
    size-0 rounds drafted and then kept no node (they pay the drafter forward)."""
    empty = sum(1 for n in stats.tree_sizes if n == 0)
    seconds = stats.plain_steps * profile.step_seconds() + (empty - stats.plain_steps) * profile.round_seconds(0)
    seconds += sum(profile.round_seconds(n) for n in stats.tree_sizes if n > 0)
    return seconds + overhead_s * stats.rounds


def run_variant(model, drafter, prompts, references, options: TreeOptions, profile, overhead_s, memory=None):
    """(tokens, modelled seconds, rounds, plain steps, outputs equal to stock) over ``prompts``. ``memory``:
    auto's StepFallback with that memory in place of its default one (None: the strategy's own policy)."""
    tokens = seconds = rounds = plain = same = 0
    for ids, ref in zip(prompts, references):
        policy = StepFallback(profile, memory=memory) if memory is not None else None
        loop = functools.partial(tree_decoding, drafter=drafter, options=options, profile=profile, policy=policy)
        out = model.generate(ids, custom_generate=loop, do_sample=False, max_new_tokens=ref.shape[0],
                             return_dict_in_generate=True)
        stats = out.tree_stats
        tokens += stats.new_tokens
        seconds += modelled_seconds(stats, profile, overhead_s)
        rounds += stats.rounds
        plain += stats.plain_steps
        same += int(torch.equal(out.sequences[0, ids.shape[1]:], ref))
    return tokens, seconds, rounds, plain, same


def parse_profile(verify_ms: str, draft_ms: float, build_ms: float) -> CostProfile:
    pairs = [item.split(":") for item in verify_ms.split(",") if item.strip()]
    return CostProfile.from_verify_seconds({int(r): float(ms) / 1000 for r, ms in pairs}, draft_ms / 1000,
                                           build_ms / 1000)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", default="0.8,0.95", help="comma-separated StepFallback memories")
    parser.add_argument("--sets", default="code,explain,chat", help="built-in prompt sets")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per set (the first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--verify-ms", default=PACKED_PROFILE_MS, help="rows:ms pairs of the verify curve")
    parser.add_argument("--draft-ms", type=float, default=3.96, help="one drafter forward")
    parser.add_argument("--build-ms-per-node", type=float, default=0.2)
    parser.add_argument("--overhead-ms", type=float, default=2.5, help="walk + commit per round")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    profile = parse_profile(args.verify_ms, args.draft_ms, args.build_ms_per_node)
    overhead_s = args.overhead_ms / 1000
    step_rate = 1.0 / (profile.step_seconds() + overhead_s)

    model, tokenizer, drafter = load_default_pair()
    variants = [(f"auto, memory {m}", TreeOptions("auto"), float(m)) for m in args.memories.split(",")]
    variants += [(f"conditional@{b}", TreeOptions("conditional", budget=b), None) for b in (4, 8)]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    print(f"greedy, SmolLM2-135M-Instruct fp32 + the shipped drafter, {args.num_prompts} prompts per set, "
          f"{args.max_new_tokens} new tokens; modelled speed over plain one-token steps (step "
          f"{1000 * profile.step_seconds():.1f} ms + {args.overhead_ms} ms a round), tau, share of plain rounds")
    header = f"{'variant':<20}" + "".join(f"{s + ' x':>10} {'tau':>5} {'plain':>5}" for s in sets) + f"{'same':>7}"
    print(header)
    prompts = {s: [render_chat(tokenizer, p) for p in BUILTIN_PROMPTS[s][: args.num_prompts]] for s in sets}
    references = {s: [model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)[0, ids.shape[1]:]
                      for ids in prompts[s]] for s in sets}
    for name, options, memory in variants:
        cells, same, total = "", 0, 0
        for s in sets:
            tokens, seconds, rounds, plain, equal = run_variant(model, drafter, prompts[s], references[s], options,
                                                                profile, overhead_s, memory)
            cells += f"{tokens / seconds / step_rate:10.2f} {tokens / rounds:5.2f} {plain / rounds:5.2f}"
            same, total = same + equal, total + len(prompts[s])
        print(f"{name:<20}{cells}{f'{same}/{total}':>7}", flush=True)


if __name__ == "__main__":
    main()
