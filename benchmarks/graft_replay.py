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

Rules: fixed sets of grafts (what the options can ask for), a ladder that verifies the set that paid
best over the recent rounds (every set is scored every round, so it needs no exploration), and, as an
upper bound no rule can reach, the set that would have paid best in each round in hindsight.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from unittest import mock

import torch

import hf_treegen as htg
from hf_treegen.bench.prompt_files import load_prompt_texts, render_chat
from hf_treegen.generation import loop
from hf_treegen.lookup import (INSIDE_LOOKUP_FROM, INSIDE_LOOKUP_NODES, context_continuation, graft_chain,
                               inside_continuations, likely_nodes)
from hf_treegen.models import load_default_pair
from hf_treegen.speculation import walk_tree
from hf_treegen.tree import DraftTree

LOOKUP_TOKENS = 8  # what auto copies per continuation when greedy
MAX_PATHS = 4
# copies inside the tree are recorded under the 3 likeliest drafted nodes down to this path probability;
# a rule keeps those its own gate and node count would have looked up (see Rule)
RECORD_INSIDE_FROM, RECORD_INSIDE_NODES = 0.1, 3


@dataclass
class Offer:
    """One continuation lookup offered a round: ``tokens`` under ``node`` of the built tree."""
    kind: str  # "context", "store" (the likeliest datastore continuation), "runner-up", "inside"
    node: int
    tokens: list[int]
    probability: float = 1.0  # the path probability the tree gives ``node``
    rank: int = 0  # inside: 0 under the likeliest drafted node, 1 under the next, ...


@dataclass
class DraftRound:
    built: DraftTree
    start: int  # position of the round's root in the committed text
    offers: list[Offer]


@dataclass(frozen=True)
class Rule:
    """Which offers a round grafts, and at most how many tokens of each. ``drafter_keeps_from``: a copy
    at the root whose first token differs from the drafter's likeliest first token is left out when the
    drafter gives that token at least this probability (None: never)."""
    kinds: frozenset
    tokens: int = LOOKUP_TOKENS
    drafter_keeps_from: float | None = None
    inside_from: float = INSIDE_LOOKUP_FROM  # copies inside the tree: the least path probability of the node
    inside_nodes: int = INSIDE_LOOKUP_NODES  # ... and under how many of the likeliest nodes


RULES = {
    "none": Rule(frozenset()),
    "context": Rule(frozenset({"context"})),
    "root": Rule(frozenset({"context", "store"})),
    "root+inside": Rule(frozenset({"context", "store", "inside"})),
    "root+inside+paths4": Rule(frozenset({"context", "store", "inside", "runner-up"})),
    "root+inside, 4 tokens": Rule(frozenset({"context", "store", "inside"}), tokens=4),
    **{f"root+inside, drafter keeps {p}": Rule(frozenset({"context", "store", "inside"}), drafter_keeps_from=p)
       for p in (0.5, 0.7, 0.9)},
    **{f"root+inside, gate {gate}{', 3 nodes' if nodes == 3 else ''}{', 4 tokens' if tokens == 4 else ''}":
       Rule(frozenset({"context", "store", "inside"}), tokens=tokens, inside_from=gate, inside_nodes=nodes)
       for tokens in (8, 4) for gate, nodes in ((0.2, 2), (0.5, 2), (0.2, 3))},
}
LADDER = ["none", "root", "root+inside", "root+inside+paths4"]  # what the measured ladder chooses from


def offers_for(built: DraftTree, history: torch.Tensor, store) -> list[Offer]:
    offers = [Offer("context", 0, context_continuation(history, LOOKUP_TOKENS))]
    if store is not None:
        first = store.continuations(history, LOOKUP_TOKENS, max_paths=1)
        offers += [Offer("store", 0, path) for path in first]
        offers += [Offer("runner-up", 0, path) for path in store.continuations(history, LOOKUP_TOKENS,
                                                                                max_paths=MAX_PATHS)[1:]]
    ranks = {node: rank for rank, node in enumerate(likely_nodes(built, RECORD_INSIDE_FROM, RECORD_INSIDE_NODES))}
    offers += [Offer("inside", node, tokens, math.exp(float(built.scores[node])), ranks[node])
               for node, tokens in inside_continuations(built, history, LOOKUP_TOKENS, store,
                                                        RECORD_INSIDE_FROM, RECORD_INSIDE_NODES)]
    return [offer for offer in offers if offer.tokens]


def walked_tokens(tree: DraftTree, following: list[int]) -> int:
    """Tokens a round with ``tree`` emits (bonus included) when ``following`` is the text after its root:
    the loop's own walk, with the target's token at each node read from that text."""
    depths = tree.depths.tolist()
    walk = walk_tree(tree, lambda node: following[depths[node]] if depths[node] < len(following) else None)
    return len(walk.nodes)  # the root's row emits the first token, each node walked to one more


def score(round_: DraftRound, rule: Rule, following: list[int], profile) -> tuple[int, float, int]:
    """(tokens, modelled seconds, rows) of the round with the rule's grafts."""
    tree = round_.built
    first = (tree.best_path(limit=1) or [None])[0]  # the drafter's likeliest first token
    probability = math.exp(float(tree.scores[tree.child(0, first)])) if first is not None else 0.0
    for offer in round_.offers:
        if offer.kind not in rule.kinds:
            continue
        if (rule.drafter_keeps_from is not None and offer.node == 0 and offer.tokens[0] != first
                and probability >= rule.drafter_keeps_from):
            continue
        if offer.kind == "inside" and (offer.probability < rule.inside_from or offer.rank >= rule.inside_nodes):
            continue
        tree = graft_chain(tree, offer.tokens[: rule.tokens], under=offer.node)
    built = round_.built.num_nodes
    seconds = profile.round_seconds(built - 1, tree.num_nodes - built)
    return walked_tokens(tree, following), seconds, tree.num_nodes


def record(model, drafter, ids, profile, sampling: dict, max_new_tokens: int, **tree_kwargs):
    """Run auto once; return its output (1, T), its TreeStats and its draft rounds."""
    rounds: list[DraftRound] = []
    propose = loop.DraftProposer.propose

    def recording(self, committed, cached):
        proposal = propose(self, committed, cached)
        if self.drafting:
            built = proposal.tree.first_nodes(self.built_nodes)
            history = committed.cpu()
            rounds.append(DraftRound(built, cached, offers_for(built, history, self.datastore)))
        return proposal

    with mock.patch.object(loop.DraftProposer, "propose", recording):
        out = model.generate(ids, assistant_model=drafter, tree_strategy="auto", tree_costs=profile,
                             max_new_tokens=max_new_tokens, return_dict_in_generate=True, **sampling, **tree_kwargs)
    return out.sequences, out.tree_stats, rounds


def ladder_choices(table: list[dict[str, tuple[int, float, int]]], memory: float) -> list[str]:
    """Per round, the ladder rule with the most tokens per second over the earlier rounds (decayed by
    ``memory``; ties to the cheaper rule; "root" before anything is known)."""
    tokens = dict.fromkeys(LADDER, 0.0)
    seconds = dict.fromkeys(LADDER, 0.0)
    choices = []
    for scores in table:
        if not any(seconds.values()):
            choices.append("root")
        else:
            choices.append(max(LADDER, key=lambda name: (tokens[name] / seconds[name], -LADDER.index(name))))
        for name in LADDER:
            tokens[name] = memory * tokens[name] + scores[name][0]
            seconds[name] = memory * seconds[name] + scores[name][1]
    return choices


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
