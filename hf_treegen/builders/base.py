"""What every tree builder shares: the written interface, resolved settings, per-depth candidates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..acceptance import DepthCalibration
from ..defaults import DEFAULT_NODE_TOPK, DEFAULT_TOP_M  # noqa: F401  (the builders import them from here)
from ..drafters.dflash import DraftBlock
from ..tree import DraftTree


class Node(NamedTuple):
    """A drafted node in a best-first list: ``parent`` is a position in that list (root = 0, the i-th
    node = i), ``score`` the node's log path probability under the builder's law."""

    parent: int
    token: int  # target token id
    depth: int  # 1 = a child of the root
    score: float


class RankNode(NamedTuple):
    """A node of DDTree's best-first order over per-depth candidate tables: the ``rank``-th candidate
    of depth ``depth_index + 1`` (look the token up in the table); ``parent`` as in :class:`Node`."""

    parent: int
    depth_index: int
    rank: int
    score: float


@dataclass(frozen=True)
class BuildSettings:
    """Everything a builder needs to know, resolved from the tree kwargs and the drafter."""

    budget: int  # drafted nodes per round (the root excluded); an upper bound for adaptive builders
    topk: int  # candidates kept per depth (or children per node)
    top_m: int  # base candidates per depth that conditional scorers may rescore
    temperature: float  # tree-scoring temperature
    max_depth: int  # deepest draft position used


def depth_candidates(block: DraftBlock, settings: BuildSettings) -> tuple[list[list[int]], list[list[float]]]:
    """A draft block's (L, Vd) logits -> per-depth top-K target token ids and log-probs at the tree
    temperature (over the block's draft vocabulary: tokens outside it are never drafted).

    Returns python lists (depth-major) because the heaps that consume them run on the host.
    """
    logits = block.logits
    depth = min(settings.max_depth, logits.shape[0])
    k = min(settings.topk, logits.shape[1])
    logp = torch.log_softmax(logits[:depth].float() / settings.temperature, dim=-1)  # (D, Vd)
    values, columns = logp.topk(k, dim=-1)  # (D, K), sorted descending
    return block.target_ids(columns).tolist(), values.tolist()


class TreeBuilder:
    """The interface of a tree builder (one per ``tree_strategy``): a draft block in, a tree out.

    Construction: ``Builder(settings, profile=None, calibration=None)``

    * ``settings``: the resolved :class:`BuildSettings`.
    * ``profile``: a :class:`~hf_treegen.costs.CostProfile`; required when ``cost_aware`` (the builder
      cuts its trees at the size that maximises expected tokens per second under it).
    * ``calibration``: a :class:`~hf_treegen.acceptance.DepthCalibration` that :meth:`observe` feeds
      (a fresh one when None); builders that re-rank nodes by acceptance read it.

    ``__call__(block, root_token)``: ``block`` holds the drafter's ``(L, Vd)`` logits (plus the Domino
    tables for a Domino drafter); returns a :class:`~hf_treegen.tree.DraftTree` rooted at
    ``root_token`` with at most ``settings.budget`` drafted nodes, parents before children, each node's
    score its log path probability under the builder's law.

    ``observe(tree, accepted_nodes)``: after verification, the nodes of ``tree`` the target walked
    (root first). A builder learns only from this, never from timings, so a fixed profile and
    calibration give identical trees for identical inputs. ``observe_grafts(rows, tokens)``: what
    lookup grafted onto the round's tree besides the builder's nodes (rows added, accepted tokens they
    supplied); builders that size trees by cost plan with it, the others ignore it.
    """

    name: str = ""
    cost_aware: bool = False  # True: needs a CostProfile (the decode loop measures or takes one)

    def __init__(self, settings: BuildSettings, *, profile=None, calibration: DepthCalibration | None = None):
        if self.cost_aware and profile is None:
            raise ValueError(f"tree_strategy={self.name!r} cuts trees by cost and needs a CostProfile "
                             f"(hf_treegen.calibrate(model, drafter) or CostProfile.from_verify_seconds).")
        self.settings, self.profile = settings, profile
        self.calibration = DepthCalibration() if calibration is None else calibration

    def __call__(self, block: DraftBlock, root_token: int) -> DraftTree:
        raise NotImplementedError

    def build_all(self, blocks: list[DraftBlock], root_tokens: list[int]) -> list[DraftTree]:
        """Trees for several blocks at once (a server's requests of one step): block i's tree is rooted
        at ``root_tokens[i]``. One call per block here; builders that can batch their work override it."""
        return [self(block, root) for block, root in zip(blocks, root_tokens)]

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        self.calibration.observe(tree, accepted_nodes)

    def observe_grafts(self, rows: int, tokens: int) -> None:
        """Rows lookup grafted onto this round's tree and the accepted tokens they supplied."""
