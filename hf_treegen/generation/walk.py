"""Walking a verified tree: how many drafted tokens the target's own choices accept.

At each node the target chooses its next token exactly as autoregressive decoding would (argmax, or
a sample from its processed distribution). If that token is a child, the walk moves there; if not,
the token is the round's bonus. Every emitted token is therefore the target's own choice on its
true prefix, which is why greedy output is identical and sampling is lossless whenever the tree
does not depend on the target's sampling randomness (docs/design.md, "Exactness").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..tree import DraftTree


@dataclass(frozen=True)
class Walk:
    nodes: list[int]  # accepted nodes, root first; nodes[i] is at depth i
    tokens: list[int]  # emitted tokens: tokens[i] was chosen at nodes[i]; the last is the bonus


def walk_tree(tree: DraftTree, decide: Callable[[int], int]) -> Walk:
    """``decide(node)`` returns the target's token at ``node``; follow it while it is a child."""
    nodes, tokens = [0], []
    while True:
        token = decide(nodes[-1])
        tokens.append(token)
        child = tree.child(nodes[-1], token)
        if child is None:
            return Walk(nodes, tokens)
        nodes.append(child)


def choose_token(scores: torch.Tensor, do_sample: bool) -> int:
    """scores (1, V) processed logits -> the token stock generate() would pick (same ops)."""
    if do_sample:
        probs = torch.nn.functional.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, num_samples=1)[0, 0])
    return int(torch.argmax(scores, dim=-1)[0])
