"""The tree kwargs of generate(): parsed once, validated, then resolved against the drafter."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..builders import STRATEGIES, BuildSettings
from ..builders.base import DEFAULT_NODE_TOPK, DEFAULT_TOP_M
from ..datastore import TokenDatastore

TREE_KWARGS = ("tree_strategy", "tree_budget", "tree_topk", "tree_top_m", "tree_temperature", "tree_max_depth",
               "tree_lookup", "tree_datastore", "tree_lookup_paths", "tree_lookup_inside")
# objects the caller owns and may share across calls: a CostProfile and a DepthCalibration
TREE_STATE_KWARGS = ("tree_costs", "tree_calibration")
MAX_TREE_BUDGET = 2048  # drafted nodes; verify cost grows with rows, so past ~100 nothing pays on any device
DEFAULT_BUDGET = {"marginal": 16, "static_corrected": 16, "conditional": 16, "adaptive": 64, "cond_adaptive": 64}
CONDITIONAL = ("conditional", "cond_adaptive")
# tokens of context lookup `auto` grafts onto each tree when tree_lookup is not given (the fixed strategies
# graft none unless asked, so they stay the named algorithms); on the built-in prompts 4, 7 and 12 tokens
# gained about the same tau (docs/results/lookup_tau.txt)
AUTO_LOOKUP = 8
# ...and when sampling, the tokens each copy grafts unless tree_lookup says otherwise: a sampled token follows
# a copy less often, so its later tokens are verified for walks that seldom reach them. Scored on the same
# auto rounds (benchmarks/graft_replay.py, 24 built-in prompts, a 2-core Zen 5 EPYC's costs), copies of 4
# tokens with lookup inside the tree ran 1.03x copies of 8 at the root only, at T = 0.5 and at T = 1.0;
# greedy, 8 stayed ahead (docs/results/graft_replay.txt)
SAMPLED_LOOKUP = 4
# datastore continuations lookup grafts per round unless tree_lookup_paths says otherwise. More paths (the
# runners-up TokenDatastore.continuations finds) raise tau but cost verify rows: on a 2-core Zen 4 with the
# shipped drafter, conditional@4+lookup8 with 1 / 4 / 8 paths kept 2.65 / 2.82 / 2.85 tokens a round over
# 9.5 / 13.1 / 17.1 rows and ran 2.63x / 2.45x / 2.34x stock (docs/results/lookup_paths.txt), so one path
# is the default; a device whose verify cost stays flat over a few more rows is where more pay
LOOKUP_PATHS = 1


def _positive_int(name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be an int >= 1 (or None for the default), got {value!r}.")


@dataclass(frozen=True)
class TreeOptions:
    strategy: str
    budget: int | None = None
    topk: int | None = None
    top_m: int | None = None
    temperature: float | None = None
    max_depth: int | None = None
    lookup: int | None = None  # tokens copied from earlier context grafted onto each tree (0: none)
    # where else lookup copies from: a TokenDatastore or its file; None/True: the drafter's own, False: none
    datastore: TokenDatastore | str | os.PathLike | bool | None = None
    lookup_paths: int | None = None  # datastore continuations grafted per round (None: LOOKUP_PATHS)
    # tokens copied under each of the likeliest drafted nodes (None: as many as lookup; 0: none)
    lookup_inside: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"Unknown tree_strategy {self.strategy!r}; valid strategies: {', '.join(STRATEGIES)}.")
        for name in ("budget", "topk", "top_m", "max_depth", "lookup_paths"):
            _positive_int(f"tree_{name}", getattr(self, name))
        if self.lookup is not None and (isinstance(self.lookup, bool) or not isinstance(self.lookup, int)
                                        or self.lookup < 0):
            raise ValueError(f"tree_lookup must be an int >= 0 (tokens copied from earlier context per round; 0 "
                             f"turns it off), got {self.lookup!r}.")
        inside = self.lookup_inside
        if inside is not None and (isinstance(inside, bool) or not isinstance(inside, int) or inside < 0):
            raise ValueError(f"tree_lookup_inside must be an int >= 0 (tokens copied under each of the drafted tree's "
                             f"likeliest nodes per round; 0 turns it off), got {inside!r}.")
        if inside and self.lookup == 0:
            raise ValueError("tree_lookup_inside copies tokens the way lookup does, but it was given with "
                             "tree_lookup=0, which turns lookup off; drop one of them.")
        if not isinstance(self.datastore, (TokenDatastore, str, os.PathLike, bool, type(None))):
            raise ValueError(f"tree_datastore must be a TokenDatastore, the path of a saved one, True (the drafter's "
                             f"own), False (none) or None (the drafter's own if it has one), got "
                             f"{type(self.datastore).__name__}.")
        if self.lookup == 0 and self._datastore_given:
            raise ValueError("tree_datastore was given with tree_lookup=0, which turns lookup off, so the datastore "
                             "would go unused; drop tree_lookup=0 (or give the tokens to graft, e.g. tree_lookup=8).")
        if self.lookup_paths is not None and (self.lookup == 0 or self.datastore is False):
            turned_off = "tree_lookup=0, which turns lookup off" if self.lookup == 0 else \
                "tree_datastore=False, which turns the datastore off"
            raise ValueError(f"tree_lookup_paths counts datastore continuations, but it was given with {turned_off}; "
                             f"drop one of them.")
        if self.budget is not None and self.budget > MAX_TREE_BUDGET:
            raise ValueError(f"tree_budget={self.budget} is past what any tree can pay for: one verify forward over "
                             f"that many rows costs far more than the tokens it could accept (and its mask alone "
                             f"needs {4 * self.budget ** 2 / 2 ** 30:.1f} GB). Use at most {MAX_TREE_BUDGET}; "
                             f"16-64 is the useful range, and tree_strategy='auto' sizes trees itself.")
        t = self.temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
            raise ValueError(f"tree_temperature must be a number > 0 (or None to follow the sampling temperature), got {t!r}.")

    @classmethod
    def from_kwargs(cls, tree_strategy, tree_budget=None, tree_topk=None, tree_top_m=None,
                    tree_temperature=None, tree_max_depth=None, tree_lookup=None, tree_datastore=None,
                    tree_lookup_paths=None, tree_lookup_inside=None) -> "TreeOptions":
        return cls(tree_strategy, tree_budget, tree_topk, tree_top_m, tree_temperature, tree_max_depth, tree_lookup,
                   tree_datastore, tree_lookup_paths, tree_lookup_inside)

    @property
    def lookup_tokens(self) -> int:
        """Tokens each lookup graft (context, datastore) may add per round: ``tree_lookup``, else
        AUTO_LOOKUP for auto or where a datastore or ``tree_lookup_inside`` asks for lookup, and 0 otherwise."""
        if self.lookup is not None:
            return self.lookup
        return AUTO_LOOKUP if self.strategy == "auto" or self._datastore_given or self.lookup_inside else 0

    @property
    def datastore_paths(self) -> int:
        """Continuations each datastore lookup may graft per round: ``tree_lookup_paths``, else LOOKUP_PATHS."""
        return LOOKUP_PATHS if self.lookup_paths is None else self.lookup_paths

    def copy_tokens(self, sampling: bool) -> int:
        """Tokens each copy at the root grafts per round: ``tree_lookup``, else :attr:`lookup_tokens`
        when decoding greedily and at most SAMPLED_LOOKUP when ``sampling``."""
        if self.lookup is not None or not sampling:
            return self.lookup_tokens
        return min(self.lookup_tokens, SAMPLED_LOOKUP)

    def inside_tokens(self, sampling: bool) -> int:
        """Tokens each round may graft under each of the drafted tree's likeliest nodes
        (:func:`hf_treegen.lookup.inside_continuations`): ``tree_lookup_inside``, else as many as each
        copy at the root (:meth:`copy_tokens`; none where lookup is off).

        Greedy, it raises tokens per round (shipped drafter, 24 built-in prompts: 2.61 -> 2.78 at budget
        4, 2.82 -> 2.97 at budget 16). Scored on the same auto rounds, it ran 1.02x the root copies alone
        greedy, and when sampling, with copies of 4 tokens, 1.03x root copies of 8 alone
        (benchmarks/graft_replay.py, docs/results/graft_replay.txt)."""
        if self.lookup_inside is not None:
            return self.lookup_inside
        return self.copy_tokens(sampling)

    @property
    def _datastore_given(self) -> bool:
        return self.datastore is not None and self.datastore is not False

    def lookup_datastore(self, drafter, vocab_size: int) -> TokenDatastore | None:
        """The datastore lookup also copies from (None: context lookup only); a saved one is read here.
        ``vocab_size``: the target's, which every id in the store must fall below."""
        if not self.lookup_tokens or self.datastore is False:
            return None
        if self.datastore is None or self.datastore is True:
            store = drafter.datastore
            if store is None and self.datastore is True:
                raise ValueError("tree_datastore=True asks for the drafter's own datastore, but this drafter has none; "
                                 "pass a TokenDatastore (or the path of a saved one), or drop tree_datastore.")
        elif isinstance(self.datastore, TokenDatastore):
            store = self.datastore
        else:
            store = TokenDatastore.load(self.datastore)
        if store is not None and store.max_token_id >= vocab_size:
            raise ValueError(f"The datastore holds token id {store.max_token_id}, but the target's vocabulary has "
                             f"{vocab_size} ids: it was built with another tokenizer. Build one from this model's "
                             f"outputs, or pass tree_datastore=False.")
        return store

    def resolve(self, draft_positions: int, vocab_size: int, generation_config, *, conditional: bool | None = None,
                default_budget: int | None = None) -> BuildSettings:
        """Fill the defaults: depth from the drafter, budget per strategy, temperature from sampling.

        ``conditional`` (default: whether the strategy is a conditional one) picks the per-node top-k;
        ``default_budget`` replaces the per-strategy default budget (``auto`` sizes it from costs)."""
        max_depth = min(self.max_depth or draft_positions, draft_positions)
        budget = self.budget or default_budget or DEFAULT_BUDGET.get(self.strategy, max_depth)
        if conditional is None:
            conditional = self.strategy in CONDITIONAL
        if self.topk:
            topk = self.topk
        elif conditional:
            topk = DEFAULT_NODE_TOPK
        else:  # an optimal best-first tree of B nodes never uses a rank beyond B at any depth (DDTree Lemma 1)
            topk = budget
        temperature = self.temperature
        if temperature is None:
            sampled = generation_config.do_sample and (generation_config.temperature or 0) > 0
            temperature = float(generation_config.temperature) if sampled else 1.0
        return BuildSettings(
            budget=budget,
            topk=min(topk, vocab_size),
            top_m=min(self.top_m or DEFAULT_TOP_M, vocab_size),
            temperature=float(temperature),
            max_depth=max_depth,
        )
