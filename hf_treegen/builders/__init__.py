"""Tree builders by strategy name: each turns one draft block into a DraftTree."""

from __future__ import annotations

from .adaptive import AdaptiveBuilder
from .base import BuildSettings
from .chain import ChainBuilder
from .marginal import MarginalBuilder

BUILDERS = {
    "chain": ChainBuilder,
    "marginal": MarginalBuilder,
    "adaptive": AdaptiveBuilder,
}
STRATEGIES = tuple(BUILDERS)

__all__ = ["BUILDERS", "STRATEGIES", "BuildSettings", "ChainBuilder", "MarginalBuilder", "AdaptiveBuilder"]
