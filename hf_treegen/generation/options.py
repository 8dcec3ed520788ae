"""The tree kwargs of generate(): parsed once, validated, then resolved against the drafter."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..builders import STRATEGIES, BuildSettings
from ..defaults import AUTO_LOOKUP, DEFAULT_BUDGET, DEFAULT_NODE_TOPK, DEFAULT_TOP_M, LOOKUP_PATHS, SAMPLED_LOOKUP
from ..datastore import Datastore, TokenDatastore
from ..learning_datastore import LearningDatastore, check_vocabulary

TREE_KWARGS = ("tree_strategy", "tree_budget", "tree_topk", "tree_top_m", "tree_temperature", "tree_max_depth",
               "tree_lookup")
# kwargs that became fields of LookupOptions: a call that still passes one is told the new form
RETIRED_LOOKUP_KWARGS = {"tree_datastore": "datastore", "tree_lookup_paths": "paths", "tree_lookup_inside": "inside"}
# an object the caller owns and may share across calls: a CostProfile
TREE_STATE_KWARGS = ("tree_costs",)
# "+nameN" suffixes of a written strategy ("conditional@4+lookup8"): the TreeOptions field each sets and the
# least N it takes; "+nostore" turns the datastore off
COUNT_SUFFIXES = {"lookup": ("lookup", 0), "paths": ("lookup_paths", 1), "inside": ("lookup_inside", 0)}
NO_DATASTORE = "nostore"
MAX_TREE_BUDGET = 2048  # drafted nodes; verify cost grows with rows, so past ~100 nothing pays on any device
CONDITIONAL = ("conditional", "cond_adaptive")


@dataclass(frozen=True)
class LookupOptions:
    """What lookup grafts onto each drafted tree (``generate(..., tree_lookup=LookupOptions(...))``; an int
    there is ``LookupOptions(tokens=int)`` and False turns lookup off). Every field left None takes the
    strategy's default (see the Strategies guide).

    * ``tokens``: tokens each copy grafts (0: lookup off).
    * ``datastore``: where else to copy from besides the context: a TokenDatastore or the path of a saved
      one, or a LearningDatastore (which learns each call's output); True: the drafter's own (an error if
      it has none); False: none; None: the drafter's own if any.
    * ``paths``: datastore continuations grafted per round (>= 1).
    * ``inside``: tokens copied under each of the drafted tree's likeliest nodes (0: none).
    """

    tokens: int | None = None
    datastore: TokenDatastore | str | os.PathLike | bool | None = None
    paths: int | None = None
    inside: int | None = None

    @classmethod
    def of(cls, value) -> "LookupOptions":
        """The ``tree_lookup`` kwarg as LookupOptions: None, an int, False or LookupOptions itself."""
        if value is None or isinstance(value, LookupOptions):
            return value or cls()
        if value is False:
            return cls(tokens=0)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(tokens=value)
        raise ValueError(f"tree_lookup must be an int >= 0 (tokens per copy), False (off), or "
                         f"hf_treegen.LookupOptions(tokens=, datastore=, paths=, inside=), got {value!r}.")


def retired_kwargs(kwargs: dict) -> None:
    """Refuse the kwargs that moved elsewhere, naming the new form."""
    if "tree_calibration" in kwargs:
        raise ValueError("tree_calibration is now the drafter's: set drafter.depth_calibration = "
                         "hf_treegen.DepthCalibration() once, and every call with that drafter shares it.")
    old = [name for name in RETIRED_LOOKUP_KWARGS if name in kwargs]
    if old:
        fields = ", ".join(f"{RETIRED_LOOKUP_KWARGS[name]}=..." for name in old)
        raise ValueError(f"{', '.join(old)} are now fields of tree_lookup: pass "
                         f"tree_lookup=hf_treegen.LookupOptions({fields}) instead.")


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
    # where else lookup copies from: a TokenDatastore or its file, or a LearningDatastore (which learns each
    # call's output); None/True: the drafter's own, False: none
    datastore: TokenDatastore | LearningDatastore | str | os.PathLike | bool | None = None
    lookup_paths: int | None = None  # datastore continuations grafted per round (None: LOOKUP_PATHS)
    # tokens copied under each of the likeliest drafted nodes (None: as many as lookup; 0: none)
    lookup_inside: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"Unknown tree_strategy {self.strategy!r}; valid strategies: {', '.join(STRATEGIES)}.")
        for name in ("budget", "topk", "top_m", "max_depth"):
            _positive_int(f"tree_{name}", getattr(self, name))
        _positive_int("LookupOptions.paths", self.lookup_paths)
        if self.lookup is not None and (isinstance(self.lookup, bool) or not isinstance(self.lookup, int)
                                        or self.lookup < 0):
            raise ValueError(f"tree_lookup must be an int >= 0 (LookupOptions.tokens: tokens each copy grafts per "
                             f"round; 0 turns lookup off), got {self.lookup!r}.")
        inside = self.lookup_inside
        if inside is not None and (isinstance(inside, bool) or not isinstance(inside, int) or inside < 0):
            raise ValueError(f"LookupOptions.inside must be an int >= 0 (tokens copied under each of the drafted "
                             f"tree's likeliest nodes per round; 0 turns it off), got {inside!r}.")
        if inside and self.lookup == 0:
            raise ValueError("LookupOptions.inside copies tokens the way lookup does, but it was given with "
                             "tokens=0, which turns lookup off; drop one of them.")
        if not isinstance(self.datastore, (TokenDatastore, LearningDatastore, str, os.PathLike, bool, type(None))):
            raise ValueError(f"LookupOptions.datastore must be a TokenDatastore, a LearningDatastore, the path of a "
                             f"saved datastore, True (the drafter's own), False (none) or None (the drafter's own if "
                             f"it has one), got {type(self.datastore).__name__}.")
        if self.lookup == 0 and self._datastore_given:
            raise ValueError("LookupOptions.datastore was given with tokens=0, which turns lookup off, so the "
                             "datastore would go unused; drop tokens=0 (or give the tokens to graft, e.g. tokens=8).")
        if self.lookup_paths is not None and (self.lookup == 0 or self.datastore is False):
            turned_off = "tokens=0, which turns lookup off" if self.lookup == 0 else \
                "datastore=False, which turns the datastore off"
            raise ValueError(f"LookupOptions.paths counts datastore continuations, but it was given with "
                             f"{turned_off}; drop one of them.")
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
                    tree_temperature=None, tree_max_depth=None, tree_lookup=None) -> "TreeOptions":
        lookup = LookupOptions.of(tree_lookup)
        return cls(tree_strategy, tree_budget, tree_topk, tree_top_m, tree_temperature, tree_max_depth, lookup.tokens,
                   lookup.datastore, lookup.paths, lookup.inside)

    @classmethod
    def parse(cls, text: str, budget: int | None = None) -> "TreeOptions":
        """A strategy as written on the command line and in vLLM's settings: ``"conditional@4+lookup8"``
        is ``TreeOptions("conditional", budget=4, lookup=8)``. After the name, ``@N`` its budget (else
        ``budget``), then ``+`` suffixes in any order: ``+lookupN`` (``tree_lookup`` tokens), ``+pathsN``
        (``LookupOptions.paths``), ``+insideN`` (``LookupOptions.inside``) and ``+nostore`` (lookup copies
        from the context only)."""
        head, *suffixes = text.split("+")
        strategy, _, own = head.partition("@")
        if own and not (own.isdigit() and int(own) >= 1):
            raise ValueError(f"a budget suffix is a positive int ('{strategy}@8'), got {text!r}.")
        fields = {"datastore": None}
        for suffix in suffixes:
            word = suffix.rstrip("0123456789")
            count = suffix[len(word):]
            if suffix == NO_DATASTORE:
                fields["datastore"] = False
            elif word in COUNT_SUFFIXES and count and int(count) >= COUNT_SUFFIXES[word][1]:
                fields[COUNT_SUFFIXES[word][0]] = int(count)
            else:
                raise ValueError(f"unknown or malformed suffix +{suffix} in {text!r}; the suffixes are +lookupN "
                                 f"(tokens, >= 0), +pathsN (datastore continuations, >= 1), +insideN (tokens, >= 0) "
                                 f"and +nostore, e.g. 'conditional@4+lookup8+paths2'.")
        return cls(strategy, budget=int(own) if own else budget, **fields)

    @property
    def lookup_options(self) -> LookupOptions:
        """The ``tree_lookup`` these options stand for."""
        return LookupOptions(self.lookup, self.datastore, self.lookup_paths, self.lookup_inside)

    def generate_kwargs(self) -> dict:
        """The ``generate()`` kwargs that give these options (``TreeOptions.from_kwargs`` reads them back)."""
        return dict(tree_strategy=self.strategy, tree_budget=self.budget, tree_topk=self.topk, tree_top_m=self.top_m,
                    tree_temperature=self.temperature, tree_max_depth=self.max_depth,
                    tree_lookup=self.lookup_options)

    @property
    def lookup_tokens(self) -> int:
        """Tokens each lookup graft (context, datastore) may add per round: ``tree_lookup``, else
        AUTO_LOOKUP for auto or where a datastore or ``LookupOptions.inside`` asks for lookup, and 0 otherwise."""
        if self.lookup is not None:
            return self.lookup
        return AUTO_LOOKUP if self.strategy == "auto" or self._datastore_given or self.lookup_inside else 0

    @property
    def datastore_paths(self) -> int:
        """Continuations each datastore lookup may graft per round: ``LookupOptions.paths``, else LOOKUP_PATHS."""
        return LOOKUP_PATHS if self.lookup_paths is None else self.lookup_paths

    def copy_tokens(self, sampling: bool) -> int:
        """Tokens each copy at the root grafts per round: ``tree_lookup``, else :attr:`lookup_tokens`
        when decoding greedily and at most SAMPLED_LOOKUP when ``sampling``."""
        if self.lookup is not None or not sampling:
            return self.lookup_tokens
        return min(self.lookup_tokens, SAMPLED_LOOKUP)

    def inside_tokens(self, sampling: bool) -> int:
        """Tokens each round may graft under each of the drafted tree's likeliest nodes
        (:func:`hf_treegen.lookup.inside_continuations`): ``LookupOptions.inside``, else as many as each
        copy at the root (:meth:`copy_tokens`; none where lookup is off)."""
        if self.lookup_inside is not None:
            return self.lookup_inside
        return self.copy_tokens(sampling)

    @property
    def _datastore_given(self) -> bool:
        return self.datastore is not None and self.datastore is not False

    def lookup_datastore(self, drafter, vocab_size: int) -> Datastore | None:
        """The datastore lookup also copies from (None: context lookup only); a saved one is read here.
        ``vocab_size``: the target's, which every id in the store must fall below."""
        if not self.lookup_tokens or self.datastore is False:
            return None
        if self.datastore is None or self.datastore is True:
            store = drafter.datastore
            if store is None and self.datastore is True:
                raise ValueError("LookupOptions(datastore=True) asks for the drafter's own datastore, but this drafter "
                                 "has none; pass a TokenDatastore (or the path of a saved one), or drop datastore.")
        elif isinstance(self.datastore, (TokenDatastore, LearningDatastore)):
            store = self.datastore
        else:
            store = TokenDatastore.load(self.datastore)
        if isinstance(store, LearningDatastore):
            check_vocabulary(vocab_size)
        if store is not None and store.max_token_id >= vocab_size:
            raise ValueError(f"The datastore holds token id {store.max_token_id}, but the target's vocabulary has "
                             f"{vocab_size} ids: it was built with another tokenizer. Build one from this model's "
                             f"outputs, or pass LookupOptions(datastore=False).")
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
