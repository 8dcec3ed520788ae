"""What the unbatched and the batched tree loops share: a round as callbacks see it, the token choice,
the lookup grafts of a round and what the builder learns from it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..lookup import context_continuation, graft_chain, inside_continuations
from ..speculation import Walk
from ..tree import DraftTree
from .plan import TreePlan
from .stats import TreeStats


@dataclass(frozen=True)
class TreeRound:
    """What one round did, as an ``on_round`` callback sees it (after the round's tokens are committed)."""

    start: int  # position of the round's root in the sequence (the tokens before it were committed)
    tree: DraftTree  # what was verified: the builder's nodes first, then grafted ones
    built_nodes: int  # nodes the builder made (the root and the drafter's own guesses)
    drafted: bool  # False: a plain one-token step (no drafter forward)
    walk: Walk  # the target's accepted nodes and decided tokens
    kept: int  # tokens the round emitted
    seconds: dict[str, float]  # propose, verify, walk, commit


def choose_token(scores: torch.Tensor, do_sample: bool) -> int:
    """scores (1, V) processed logits -> the token stock generate() would pick (same ops)."""
    if do_sample:
        probs = torch.nn.functional.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, num_samples=1)[0, 0])
    return int(torch.argmax(scores, dim=-1)[0])


def graft_lookup(plan: TreePlan, built: DraftTree, history: torch.Tensor) -> DraftTree:
    """``built`` with the plan's lookup continuations of ``history`` (T,) grafted on."""
    tree = graft_chain(built, context_continuation(history, plan.lookup))
    if plan.datastore is not None:
        for path in plan.datastore.continuations(history, plan.lookup, max_paths=plan.datastore_paths):
            tree = graft_chain(tree, path)
    if plan.inside:  # under the built tree's nodes: a grafted node is no drafter guess to branch from
        for node, tokens in inside_continuations(built, history, plan.inside, plan.datastore):
            tree = graft_chain(tree, tokens, under=node)
    return tree


def learn_from_round(plan: TreePlan, stats: TreeStats, tree: DraftTree, built_nodes: int,
                     accepted_nodes: list[int]) -> None:
    """The builder and the calibration learn how the drafter's own nodes fared in a draft round: the
    accepted path up to where it left them (a grafted node's token is no child of its parent in the
    built tree, so there the built tree's walk would have stopped too)."""
    own = [node for node in accepted_nodes if node < built_nodes]
    built = tree.first_nodes(built_nodes)
    stats.calibration.observe(built, own)
    plan.builder.observe(built, own)
    if plan.lookup:
        plan.builder.observe_grafts(tree.num_nodes - built_nodes, len(accepted_nodes) - len(own))
