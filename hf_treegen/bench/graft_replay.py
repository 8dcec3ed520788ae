"""Grafting choices replayed on recorded rounds (what ``benchmarks/graft_replay.py`` prints tables of).

Tree decoding emits the target's own tokens whatever the tree holds (greedy, and sampling with the same
random draws), so the text that follows a round is the same whichever grafts the round verified.
:func:`record` runs ``auto`` once and keeps each draft round's built tree with every continuation lookup
offered for it (the context copy, the datastore's continuations, the copies under the likeliest drafted
nodes); :func:`score` then walks one way of grafting them (a :class:`Rule`) along the text that was
committed: tokens a round from the walk, seconds from the cost profile for the round's rows. Every rule
is thus scored on the same rounds, exactly. :func:`ladder_choices` is the rule that verifies, each
round, the set of :data:`LADDER` that paid best over the recent rounds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..generation import LookupOptions, TreeOptions, TreeRound, tree_decoding
from ..lookup import (INSIDE_LOOKUP_FROM, INSIDE_LOOKUP_NODES, context_continuation, graft_chain,
                      inside_continuations, likely_nodes)
from ..speculation import walk_tree
from ..tree import DraftTree

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


def record(model, drafter, ids, profile, sampling: dict, max_new_tokens: int,
           tree_lookup: LookupOptions | int | bool | None = None):
    """Run auto once; return its output (1, T), its TreeStats and its draft rounds. ``tree_lookup``: as
    ``generate(..., tree_lookup=...)`` (e.g. another datastore); the rounds are offered copies from the
    datastore that run used."""
    options = TreeOptions.from_kwargs("auto", tree_lookup=tree_lookup)
    store = options.lookup_datastore(drafter, model.config.vocab_size)
    rounds: list[TreeRound] = []
    loop = functools.partial(tree_decoding, drafter=drafter, options=options, profile=profile,
                             on_round=rounds.append)
    out = model.generate(ids, custom_generate=loop, max_new_tokens=max_new_tokens, return_dict_in_generate=True,
                         **sampling)
    sequence = out.sequences[0].cpu()
    drafted = []
    for done in rounds:
        if done.drafted:
            built = done.tree.first_nodes(done.built_nodes)
            history = sequence[: done.start + 1]  # what the round's lookups saw: the text up to its root
            drafted.append(DraftRound(built, done.start, offers_for(built, history, store)))
    return out.sequences, out.tree_stats, drafted


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
