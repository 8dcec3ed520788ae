"""Offline replay of lookup policies on recorded drafts: tokens per round of ways to combine the
drafter's tree with context and datastore lookup, without running the target once per policy.

    .venv/bin/python benchmarks/lookup_replay.py       # records once into runs/lookup_replay (about 5 minutes), then replays
    .venv/bin/python benchmarks/lookup_replay.py --num-prompts 2

Recording: stock greedy outputs of the built-in prompts (the first N of each set, 128 new tokens); the
target's tapped features over prompt + output in one forward; and at every output position, the
shipped drafter's block under that token, cut by the conditional builder at several budgets and by the
chain builder. Replay:
a policy turns (committed tokens, recorded trees) into the tree (or chain) a round verifies; the round
keeps the longest path that matches the recorded output, plus the target's own next token, and the
next round starts after it. Greedy acceptance depends only on tokens, so this is what real runs give,
up to the float difference between one-forward features and decoding's incremental ones (with 7
lookup tokens, budgets 4 / 8 / 16 replay at 2.37 / 2.48 / 2.63 tokens a round; real runs gave 2.36 /
2.46 / 2.62, docs/results/datastore_tau.txt).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Callable

import torch
from transformers import GenerationConfig

from hf_treegen.bench.prompt_files import render_chat
from hf_treegen.bench.prompts import BUILTIN_PROMPTS
from hf_treegen.builders import BUILDERS
from hf_treegen.datastore import TokenDatastore
from hf_treegen.generation.options import TreeOptions
from hf_treegen.lookup import context_continuation, copied_continuation, graft_chain, lookup_chain
from hf_treegen.models import load_default_pair
from hf_treegen.speculation import walk_tree
from hf_treegen.target import FeatureTap
from hf_treegen.tree import DraftTree

BUDGETS = (4, 8, 16, 64)
LOOKUP = 7  # tokens per lookup graft, as docs/results/datastore_tau.txt ran
SETS = ("code", "explain", "chat")
CHAIN = "chain"  # key of the recorded chain-builder tree (the others are keyed by conditional budget)

# (committed token ids, {budget or CHAIN: drafter tree}) -> what the round verifies
Policy = Callable[[list[int], dict[int, DraftTree]], DraftTree]


# ---------------------------------------------------------------------------------------- recording
@torch.no_grad()
def record(model, tokenizer, drafter, num_prompts: int, max_new_tokens: int) -> list[dict]:
    """Per prompt: its ids, stock greedy output, and the drafter trees at every output position."""
    def builder(strategy: str, budget: int):
        settings = TreeOptions(strategy, budget=budget).resolve(
            drafter.config.num_draft_positions, model.config.vocab_size, GenerationConfig())
        return BUILDERS[strategy](settings)

    builders = {budget: builder("conditional", budget) for budget in BUDGETS}
    builders[CHAIN] = builder("chain", drafter.config.num_draft_positions)  # what a chain engine drafts by default
    runs = []
    for name in SETS:
        for text in BUILTIN_PROMPTS[name][:num_prompts]:
            ids = render_chat(tokenizer, text)  # (1, P)
            output = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)[0, ids.shape[1]:].tolist()
            prompt = ids[0].tolist()
            with FeatureTap(model, drafter.config.target_layer_ids) as tap:
                model(torch.tensor([prompt + output]))
                features = tap.take()  # (P + N, k*H)
            session = drafter.new_session()
            session.extend(features[: len(prompt)], torch.arange(len(prompt)))
            trees = []  # trees[p][key]: drafted under output[p] (at position P + p), guessing output[p + 1:]
            for p, root in enumerate(output):
                start = len(prompt) + p
                if p:
                    session.extend(features[start - 1: start], torch.tensor([start - 1]))
                block = session.draft(root, start)
                trees.append({budget: builder(block, root) for budget, builder in builders.items()})
            runs.append({"set": name, "prompt": prompt, "output": output, "trees": trees})
            print(f"recorded {name} prompt {len(runs)}", file=sys.stderr, flush=True)
    return runs


# ---------------------------------------------------------------------------------------- replaying
def accepted(tree: DraftTree, truth: list[int]) -> int:
    """Drafted tokens a greedy round keeps: the walk the target would take, its tokens being ``truth``."""
    depths = tree.depths.tolist()
    walk = walk_tree(tree, lambda node: truth[depths[node]] if depths[node] < len(truth) else None)
    return len(walk.nodes) - 1


def replay(runs: list[dict], policy: Policy) -> tuple[float, float]:
    """(tokens per round, verified rows per round, root included) of ``policy`` over every recorded run."""
    rounds = tokens = rows = 0
    for run in runs:
        prompt, output = run["prompt"], run["output"]
        p = 0  # output[p] is the root: the last committed token, its target logits not computed yet
        while p < len(output) - 1:
            tree = policy(prompt + output[: p + 1], run["trees"][p])
            kept = accepted(tree, output[p + 1:])
            rounds, tokens, rows = rounds + 1, tokens + kept + 1, rows + tree.num_nodes
            p += kept + 1
    return tokens / rounds, rows / rounds


def grafted(budget: int, store: TokenDatastore | None, lookup: int = LOOKUP, min_share: float | None = None) -> Policy:
    """What generate() verifies: the drafter's tree, a context graft and a datastore graft."""
    def policy(committed, trees):
        history = torch.tensor(committed)
        tree = graft_chain(trees[budget], context_continuation(history, lookup))
        if store is not None:
            share = {} if min_share is None else {"min_share": min_share}
            tree = graft_chain(tree, store.continuation(history, lookup, **share))
        return tree
    return policy


def chain_engine(k: int, store: TokenDatastore, rule: str, keep_from: float = 0.5) -> Policy:
    """One chain of at most k tokens, as vLLM verifies with the chain strategy: the drafter's chain
    (rule 'drafter'), the copied continuation whenever there is one ('lookup'), or lookup_chain, as
    the vLLM proposer chooses ('choose')."""
    def policy(committed, trees):
        root, drafted = committed[-1], trees[CHAIN].best_path(k)
        if rule == "drafter":
            return DraftTree.chain(root, drafted)
        history = torch.tensor(committed)
        if rule == "lookup":
            return DraftTree.chain(root, copied_continuation(history, k, store) or drafted)
        return DraftTree.chain(root, lookup_chain(trees[CHAIN], drafted, history, k, store, keep_from))
    return policy


def subsample(store: TokenDatastore, fraction: float, seed: int = 0) -> TokenDatastore:
    """A datastore of a random ``fraction`` of ``store``'s sequences."""
    ends = torch.nonzero(store.tokens == -1).flatten().tolist()
    starts = [0] + [end + 1 for end in ends[:-1]]
    sequences = [store.tokens[s:e].tolist() for s, e in zip(starts, ends)]
    random.Random(seed).shuffle(sequences)
    return TokenDatastore.from_sequences(sequences[: int(len(sequences) * fraction)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-prompts", type=int, default=8, help="prompts per built-in set (the first N)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--cache", default="runs/lookup_replay", help="folder the recording is kept in")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, drafter = load_default_pair()
    path = Path(args.cache) / f"record-v2-{args.num_prompts}x{args.max_new_tokens}.pt"
    if path.is_file():
        runs = torch.load(path, weights_only=False)
    else:
        runs = record(model, tokenizer, drafter, args.num_prompts, args.max_new_tokens)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(runs, path)
    store = drafter.datastore

    policies: dict[str, Policy] = {}
    for budget in BUDGETS:
        policies[f"conditional@{budget}, no lookup"] = lambda c, t, b=budget: t[b]
        policies[f"conditional@{budget} + context {LOOKUP}"] = grafted(budget, None)
        policies[f"conditional@{budget} + context {LOOKUP} + datastore {LOOKUP}"] = grafted(budget, store)
    policies["conditional@64 + context 16 + datastore 16 (share >= 0.02)"] = grafted(64, store, 16, 0.02)
    for fraction in (0.25, 0.5):
        smaller = subsample(store, fraction)
        for budget in (4, 16):
            policies[f"conditional@{budget} + context {LOOKUP} + {fraction:.0%} of the datastore"] = grafted(budget, smaller)
    for k in (4, 8):
        policies[f"chain k={k}: the drafter's chain"] = chain_engine(k, store, "drafter")
        policies[f"chain k={k}: lookup whenever found"] = chain_engine(k, store, "lookup")
        for keep_from in (0.3, 0.5, 0.7):
            policies[f"chain k={k}: choose_chain, keep_from {keep_from}"] = chain_engine(k, store, "choose", keep_from)

    print(f"lookup replay: shipped drafter, {args.num_prompts} built-in prompts per set, {args.max_new_tokens} new tokens, "
          f"greedy; tau = tokens per round, rows = verified rows per round (root included)")
    width = max(len(name) for name in policies)
    print(f"{'policy':<{width}} {'tau':>6} {'rows':>6}")
    for name, policy in policies.items():
        tau, rows = replay(runs, policy)
        print(f"{name:<{width}} {tau:6.3f} {rows:6.1f}", flush=True)


if __name__ == "__main__":
    main()
