"""Shared pieces of the tree builders: resolved settings and per-depth candidate tables."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..drafters.dflash import DraftBlock


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
