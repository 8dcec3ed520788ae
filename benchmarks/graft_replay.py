"""Which lookup grafts pay, replayed round by round: auto's drafted trees with each choice of grafts.

    .venv/bin/python benchmarks/graft_replay.py                            # T = 0, 8 prompts a set
    .venv/bin/python benchmarks/graft_replay.py --temperatures 0,0.5,1.0 --num-prompts 4

Tree decoding emits the target's own tokens whatever the tree holds (greedy, and sampling with the same
random draws), so the text that follows a round is the same whichever grafts the round verified. This
script runs ``auto`` once per prompt, keeps each draft round's built tree and every continuation lookup
offered for it (the context copy, the datastore's continuations, the copies under the likeliest drafted
nodes), and afterwards walks each way of grafting them along the text that was committed. Every rule is
thus scored on the same rounds, exactly: tokens a round from the walk, seconds from the cost profile for
the round's rows (draft + build + verify; the built trees are those auto cut for its own grafts).

The replay itself (the rules, recording, scoring, the ladder) lives in hf_treegen/bench/graft_replay.py.

Rules: fixed sets of grafts (what the options can ask for), a ladder that verifies the set that paid
best over the recent rounds (every set is scored every round, so it needs no exploration), and, as an
upper bound no rule can reach, the set that would have paid best in each round in hindsight.
"""

from __future__ import annotations

import argparse
import statistics

import torch

import hf_treegen as htg
from hf_treegen.bench.graft_replay import LADDER, RULES, ladder_choices, record, score
from hf_treegen.bench.prompt_files import load_prompt_texts, render_chat
from hf_treegen.models import load_default_pair


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--temperatures", default="0", help="comma-separated; 0 is greedy")
    parser.add_argument("--sets", default="code,explain,chat", help="built-in prompt sets")
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per set (the first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--memories", default="0.9,1.0", help="comma-separated ladder memories")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, drafter = load_default_pair()
    profile = htg.calibrate(model, drafter)
    curve = ", ".join(f"{rows}: {1000 * profile.verify.seconds_for(rows):.1f}" for rows in (1, 5, 9, 17, 33))
    print(f"cost profile (this machine, calibrated): verify ms by rows {{{curve}}}, draft "
          f"{1000 * profile.draft_s:.2f} ms, build {1000 * profile.build_s_per_node:.3f} ms a node")
    rows = load_prompt_texts("builtin:" + args.sets, limit=args.num_prompts * len(args.sets.split(",")))
    prompts = [render_chat(tokenizer, row["prompt"]) for row in rows]
    memories = [float(m) for m in args.memories.split(",")]
    for temperature in [float(t) for t in args.temperatures.split(",")]:
        sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        torch.manual_seed(args.seed)
        per_prompt, same = [], 0
        for ids in prompts:
            if temperature == 0:
                ref = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
            out, _, rounds = record(model, drafter, ids, profile, sampling, args.max_new_tokens)
            same += int(temperature > 0 or torch.equal(out, ref))
            text = out[0].tolist()
            per_prompt.append([{name: score(r, rule, text[r.start + 1:], profile) for name, rule in RULES.items()}
                               for r in rounds])
        choices = {name: [[name] * len(table) for table in per_prompt] for name in RULES}
        for memory in memories:
            choices[f"ladder, memory {memory}"] = [ladder_choices(table, memory) for table in per_prompt]
        choices["best in hindsight"] = [[max(LADDER, key=lambda name: scores[name][0] / scores[name][1])
                                         for scores in table] for table in per_prompt]
        print(f"\nT = {temperature}: {len(prompts)} prompts x {args.max_new_tokens} new tokens, "
              f"{sum(map(len, per_prompt))} draft rounds; outputs equal to stock greedy: "
              f"{same if temperature == 0 else '-'}/{len(prompts)}")
        print(f"{'rule':<40} {'tau':>5} {'rows':>5} {'tok/s':>6} {'vs root+inside':>15} {'median':>7}")
        reference = None
        for name in ["root+inside"] + [n for n in choices if n != "root+inside"]:
            totals, rates = [0, 0.0, 0, 0], []
            for table, picked in zip(per_prompt, choices[name]):
                tokens = sum(scores[rule][0] for scores, rule in zip(table, picked))
                seconds = sum(scores[rule][1] for scores, rule in zip(table, picked))
                totals[0] += tokens
                totals[1] += seconds
                totals[2] += sum(scores[rule][2] for scores, rule in zip(table, picked))
                totals[3] += len(table)
                rates.append(tokens / seconds if seconds else 0.0)
            reference = reference or (totals[0] / totals[1], rates)
            ratio = totals[0] / totals[1] / reference[0]
            median = statistics.median(r / b for r, b in zip(rates, reference[1]) if b)
            print(f"{name:<40} {totals[0] / totals[3]:5.2f} {totals[2] / totals[3]:5.1f} "
                  f"{totals[0] / totals[1]:6.1f} {ratio:14.3f}x {median:6.3f}x")


if __name__ == "__main__":
    main()
