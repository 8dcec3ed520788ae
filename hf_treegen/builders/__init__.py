"""Tree builders by strategy name: each turns one draft block into a DraftTree (see
:class:`~hf_treegen.builders.base.TreeBuilder` for the interface they share)."""

from __future__ import annotations

from .adaptive import AdaptiveBuilder
from .base import BuildSettings, TreeBuilder
from .chain import ChainBuilder
from .cond_adaptive import CondAdaptiveBuilder
from .conditional import ConditionalBuilder
from .marginal import MarginalBuilder
from .static_corrected import StaticCorrectedBuilder

BUILDERS = {
    "chain": ChainBuilder,
    "marginal": MarginalBuilder,
    "adaptive": AdaptiveBuilder,
    "static_corrected": StaticCorrectedBuilder,
    "conditional": ConditionalBuilder,
    "cond_adaptive": CondAdaptiveBuilder,
}
STRATEGIES = (*BUILDERS, "auto")  # auto: the family that fits the drafter, cut by cost (builders/auto.py)
DFLASH_STRATEGIES = ("chain", "marginal", "adaptive", "auto")  # the ones that need no Domino head

__all__ = ["BUILDERS", "DFLASH_STRATEGIES", "STRATEGIES", "BuildSettings", "TreeBuilder", "AdaptiveBuilder", "ChainBuilder",
           "CondAdaptiveBuilder", "ConditionalBuilder", "MarginalBuilder", "StaticCorrectedBuilder"]
