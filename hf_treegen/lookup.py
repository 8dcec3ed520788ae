"""Context lookup: continuations copied from earlier in the sequence, grafted onto a draft tree.

Generated text repeats itself and its prompt: code reuses names, answers quote the question, lists
repeat their frame. When the last few committed tokens occurred before, the tokens that followed
them then are a free guess at what follows now ("prompt lookup decoding"). Grafting that guess onto
the drafter's tree as one extra branch costs a few verify rows and no drafter work; since every
emitted token is still the target's own decision, output is unchanged (greedy and sampling alike).

The same copy also works inside the drafted tree (``LookupOptions.inside``): under a drafted node the
target likely reaches, what followed the committed text plus the drafted path to that node is a guess
at how the text goes on from there. Where it disagrees with the drafter's next token it is a second
branch at that point; where it agrees it follows the drafted path and continues it past its end, where
a round that accepts the drafter's whole guess would otherwise stop (:func:`inside_continuations`).
"""

from __future__ import annotations

import math

import torch

from .datastore import Datastore
from .defaults import CONTEXT_LONGEST_MATCH as LONGEST_MATCH
from .defaults import CONTEXT_SHORTEST_MATCH as SHORTEST_MATCH
from .defaults import DRAFTER_KEEPS_CHAIN_FROM, INSIDE_LOOKUP_FROM, INSIDE_LOOKUP_NODES
from .tree import DraftTree


def context_continuation(sequence: torch.Tensor, max_tokens: int, longest: int = LONGEST_MATCH,
                         shortest: int = SHORTEST_MATCH) -> list[int]:
    """sequence (T,) token ids -> up to ``max_tokens`` ids that followed the most recent earlier
    occurrence of its last n tokens, for the largest n in [shortest, longest] that occurred; [] if none.

    One vectorised comparison per n over all windows of the sequence, so a round costs microseconds
    even on long prompts, and nothing is kept between calls."""
    sequence = sequence.reshape(-1).cpu()  # on a GPU: one copy to the host instead of a sync per n tried
    length = sequence.numel()
    for n in range(min(longest, length - 1), shortest - 1, -1):
        suffix = sequence[length - n:]  # (n,)
        windows = sequence[: length - 1].unfold(0, n, 1)  # (T - n, n): every earlier n-gram but the suffix
        starts = torch.nonzero((windows == suffix).all(dim=1)).flatten()
        if starts.numel():
            follow = int(starts[-1]) + n  # the most recent occurrence: nearby text is the likelier repeat
            return sequence[follow: follow + max_tokens].tolist()
    return []


def graft_chain(tree: DraftTree, tokens: list[int], under: int = 0) -> DraftTree:
    """``tree`` with the path under -> tokens[0] -> tokens[1] -> ... merged in (``under``: a node of
    ``tree``, the root by default): the path follows existing children while their tokens agree and
    appends the rest as new nodes after all of the tree's own, so every node of ``tree`` keeps its
    index. New nodes score -inf: they are no drafter guess, so nothing that ranks by score
    (``best_path``, :func:`likely_nodes`) prefers them."""
    node, new = under, []
    for i, token in enumerate(tokens):
        child = tree.child(node, token)
        if child is None:
            new = tokens[i:]
            break
        node = child
    if not new:
        return tree
    first = tree.num_nodes
    parents = [node] + list(range(first, first + len(new) - 1))
    return DraftTree(
        torch.cat([tree.tokens, torch.tensor(new, dtype=torch.long)]),
        torch.cat([tree.parents, torch.tensor(parents, dtype=torch.long)]),
        torch.cat([tree.scores, torch.full((len(new),), float("-inf"))]),
    )


def likely_nodes(tree: DraftTree, min_probability: float, limit: int) -> list[int]:
    """Up to ``limit`` drafted nodes (the root excluded) to which the tree gives a path probability of at
    least ``min_probability``, likeliest first (so a node comes before its children)."""
    scores = tree.scores[1:]  # (N,) log path probabilities of the drafted nodes
    order = torch.argsort(scores, descending=True, stable=True)[:limit]
    return [int(i) + 1 for i in order if math.exp(float(scores[i])) >= min_probability]


def inside_continuations(tree: DraftTree, history: torch.Tensor, max_tokens: int,
                         datastore: Datastore | None = None, min_probability: float | None = None,
                         max_nodes: int | None = None) -> list[tuple[int, list[int]]]:
    """[(node, tokens)] for the drafted ``tree``'s likeliest nodes (:func:`likely_nodes`; None:
    INSIDE_LOOKUP_FROM and INSIDE_LOOKUP_NODES, read at call time so that
    ``benchmarks/drafter_tau.py --inside-gates`` can set them): up to ``max_tokens`` ids copied
    (:func:`copied_continuation`) after ``history`` (T,) followed by the drafted path down to the node.
    Nodes where nothing was found are left out."""
    gate = INSIDE_LOOKUP_FROM if min_probability is None else min_probability
    limit = INSIDE_LOOKUP_NODES if max_nodes is None else max_nodes
    history = history.reshape(-1)
    found = []
    for node in likely_nodes(tree, gate, limit):
        path = tree.tokens[tree.path_to(node)[1:]]  # (depth,) the drafted tokens down to the node
        tokens = copied_continuation(torch.cat([history, path]), max_tokens, datastore)
        if tokens:
            found.append((node, tokens))
    return found


def choose_chain(drafted: list[int], first_probability: float, looked_up: list[int],
                 keep_from: float = DRAFTER_KEEPS_CHAIN_FROM) -> list[int]:
    """The one chain a chain-only engine (vLLM) verifies, from the drafter's best path ``drafted``
    (whose first token the drafter gives ``first_probability``) and a lookup continuation
    ``looked_up`` (context, else datastore; [] if none).

    Where both start with the same token they agree on the likeliest next token, and the longer one
    is the better bet past it; where they disagree, the drafter keeps the slot only if it is fairly
    sure of its first token (``keep_from``): lookup continuations are right more often than an unsure
    drafter."""
    if not looked_up:
        return drafted
    if drafted and drafted[0] == looked_up[0]:
        return looked_up if len(looked_up) >= len(drafted) else drafted
    return drafted if drafted and first_probability >= keep_from else looked_up


def copied_continuation(history: torch.Tensor, max_tokens: int, datastore: Datastore | None = None) -> list[int]:
    """history (T,) -> up to ``max_tokens`` ids copied from its own earlier text or, where its last
    tokens do not repeat there, from what followed them in ``datastore``; [] if neither has them."""
    copied = context_continuation(history, max_tokens)
    if not copied and datastore is not None:
        copied = datastore.continuation(history, max_tokens)
    return copied


def lookup_chain(tree: DraftTree, drafted: list[int], history: torch.Tensor, max_tokens: int,
                 datastore: Datastore | None = None, keep_from: float = DRAFTER_KEEPS_CHAIN_FROM) -> list[int]:
    """For a chain-only engine: ``drafted`` (the best path of ``tree``) or a continuation of up to
    ``max_tokens`` copied by :func:`copied_continuation`, as :func:`choose_chain` decides with the
    probability the tree's scores give the drafted first token."""
    first = tree.child(0, drafted[0]) if drafted else None
    probability = math.exp(float(tree.scores[first])) if first is not None else 0.0
    return choose_chain(drafted, probability, copied_continuation(history, max_tokens, datastore), keep_from)
