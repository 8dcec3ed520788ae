"""Tree speculative decoding inside transformers' generate()."""

from ..speculation import Walk, walk_tree
from .loop import TreeDecoder, TreeGenerateOutput, TreeRound, choose_token, tree_decoding
from .mixin import TreeGenerationMixin, disable, enable, tree_generate
from .options import TREE_KWARGS, LookupOptions, TreeOptions
from .plan import TreePlan, plan_tree_call
from .stats import TreeStats

__all__ = ["TREE_KWARGS", "LookupOptions", "TreeDecoder", "TreeGenerateOutput", "TreeGenerationMixin", "TreeOptions",
           "TreePlan", "TreeRound", "TreeStats", "Walk", "choose_token", "disable", "enable", "plan_tree_call",
           "tree_decoding", "tree_generate", "walk_tree"]
