"""The choice grammar: "b distinct labels out of k, separated, then terminated", at token level.

The output for the ordered choice (i1, ..., ib) is the text ``label_i1 + sep + ... + sep + label_ib +
terminator`` (EOS instead of a terminator when there is none), tokenized *in context*: BPE merges
across the boundaries (SmolLM2 spells ``"[1], [2]"`` as ``[ 1 ], ␣[ 2 ]``, so ``"]"`` alone never
appears in the middle). We cut the separator once, ``sep = sep_head + sep_tail``, at the first point
where the tokenizer never merges across it, and spell every label by its slot:

    only (b = 1)   tok(label + terminator)
    first          tok(label + sep_head)
    middle         tok(sep_tail + label + sep_head)
    last           tok(sep_tail + label + terminator)        (+ EOS when terminator is None)

The constructor checks, on every ordered pair of labels, that these spellings concatenate to the
tokenization of the joined text, and says what to change when no cut works.

The grammar is a small nondeterministic automaton. A *hypothesis* is one ordered partial choice and a
position inside the spelling of its last label; a *state* is the frozen set of hypotheses consistent
with the tokens emitted so far. Sets are needed because one spelling may be a prefix of another
(``"A"`` and ``"AB"``): after ``A`` both stay possible. Every function here is pure and memoised, so the
serial processor, the compiled probe and the set-inference code walk the same automaton.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# (labels started so far, tokens consumed of the last label's spelling)
Hypothesis = tuple[tuple[int, ...], int]
State = frozenset  # frozenset[Hypothesis]

SLOT_KINDS = ("only", "first", "middle", "last")


@dataclass(frozen=True)
class Spellings:
    """Token ids of every label in every slot kind, computed once from the tokenizer."""

    by_kind: dict  # kind -> tuple of token-id tuples, one per label
    sep_head: str
    sep_tail: str


class ChoiceGrammar:
    """Token-level automaton for choosing ``num_select`` distinct labels from ``choices``."""

    def __init__(self, tokenizer, choices, num_select: int, separator: str = ", ", terminator: str | None = None):
        self.choices = validate_choices(choices, num_select)
        self.num_select = int(num_select)
        self.separator, self.terminator = separator, terminator
        self.eos_token_id = _single_eos(tokenizer)
        if terminator is None and self.eos_token_id is None:
            raise ValueError(
                "terminator=None ends the choice with the EOS token, but this tokenizer has no eos_token_id. "
                "Pass terminator='\\n' (or any string), or set tokenizer.eos_token."
            )
        if terminator is not None and not terminator:
            raise ValueError("terminator must be a non-empty string or None (None: end with the EOS token).")
        if self.num_select > 1 and not separator:
            raise ValueError("separator must be a non-empty string when num_select > 1.")
        self.spellings = spell_in_context(tokenizer, self.choices, separator, terminator, self.eos_token_id,
                                          self.num_select)
        self.vocab_size = len(tokenizer)

    # ------------------------------------------------------------------------------ automaton
    @functools.cached_property
    def initial(self) -> State:
        return frozenset(((i,), 0) for i in range(len(self.choices)))

    def spelling(self, labels: tuple[int, ...]) -> tuple[int, ...]:
        """Tokens of the last label in ``labels``, spelled for its slot."""
        slot, b = len(labels) - 1, self.num_select
        kind = "only" if b == 1 else "first" if slot == 0 else "last" if slot == b - 1 else "middle"
        return self.spellings.by_kind[kind][labels[-1]]

    def _done(self, labels, pos) -> bool:
        return len(labels) == self.num_select and pos == len(self.spelling(labels))

    def _closure(self, hyps) -> State:
        """Open the next slot for every hypothesis that finished spelling a label (not the last one)."""
        out, todo = set(), list(hyps)
        while todo:
            labels, pos = todo.pop()
            if pos < len(self.spelling(labels)) or len(labels) == self.num_select:
                out.add((labels, pos))
            else:
                todo.extend((labels + (j,), 0) for j in range(len(self.choices)) if j not in labels)
        return frozenset(out)

    @functools.lru_cache(maxsize=None)
    def allowed(self, state: State) -> tuple[int, ...]:
        """Sorted token ids that keep the output valid; after completion only EOS (when there is one)."""
        tokens = {self.spelling(labels)[pos] for labels, pos in state if pos < len(self.spelling(labels))}
        if self.is_complete(state) and self.eos_token_id is not None:
            tokens.add(self.eos_token_id)
        return tuple(sorted(tokens))

    @functools.lru_cache(maxsize=None)
    def advance(self, state: State, token: int) -> State:
        nxt = [(labels, pos + 1) for labels, pos in state
               if pos < len(self.spelling(labels)) and self.spelling(labels)[pos] == token]
        if not nxt:
            raise ValueError(f"token {token} leaves the choice grammar here (allowed: {self.allowed(state)[:10]}).")
        return self._closure(nxt)

    @functools.lru_cache(maxsize=None)
    def is_complete(self, state: State) -> bool:
        return any(self._done(labels, pos) for labels, pos in state)

    def is_decision(self, state: State) -> bool:
        """A node whose next token needs the model: more than one allowed token, output not complete."""
        return not self.is_complete(state) and len(self.allowed(state)) > 1

    def committed_labels(self, state: State) -> frozenset[int]:
        """Labels every consistent ordering has already started: any completion's set contains them."""
        return frozenset.intersection(*(frozenset(labels) for labels, _ in state))

    def chosen(self, state: State) -> tuple[int, ...]:
        """The ordered label indices of a complete state."""
        for labels, pos in state:
            if self._done(labels, pos):
                return labels
        raise ValueError("the choice output is not complete yet")

    def slot(self, state: State) -> int:
        """0-based index of the label slot being spelled."""
        return min(len(labels) - 1 for labels, _ in state)

    def walk(self, tokens) -> State:
        """The state after emitting ``tokens`` from the start (tokens after completion are ignored)."""
        state = self.initial
        for token in tokens:
            if self.is_complete(state):
                break
            state = self.advance(state, int(token))
        return state

    def output_tokens(self, order: tuple[int, ...]) -> tuple[int, ...]:
        """Token ids of the output for the ordered choice ``order`` (without a trailing EOS)."""
        return tuple(t for n in range(1, len(order) + 1) for t in self.spelling(tuple(order[:n])))

    @property
    def appends_eos(self) -> bool:
        """generate() emits one EOS after a string terminator (when the tokenizer has one)."""
        return self.terminator is not None and self.eos_token_id is not None


# ------------------------------------------------------------------------------------- helpers
def validate_choices(choices, num_select) -> tuple[str, ...]:
    if isinstance(choices, str):
        raise TypeError("choices must be a list of label strings, not one string.")
    labels = tuple(choices)
    if not labels:
        raise ValueError("choices is empty: give at least one label to choose from.")
    for label in labels:
        if not isinstance(label, str) or not label:
            raise ValueError(f"every choice must be a non-empty string; got {label!r}.")
    seen = set()
    for label in labels:
        if label in seen:
            raise ValueError(f"duplicate choice {label!r}: labels must be distinct.")
        seen.add(label)
    if not isinstance(num_select, int) or num_select < 1:
        raise ValueError(f"num_select must be a positive integer, got {num_select!r}.")
    if num_select > len(labels):
        raise ValueError(f"num_select={num_select} is more than the {len(labels)} choices; lower num_select (b <= k).")
    return labels


def _single_eos(tokenizer):
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return eos


def _encode(tokenizer, texts: list[str]) -> list[tuple[int, ...]]:
    return [tuple(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def spell_in_context(tokenizer, choices, separator, terminator, eos_token_id, num_select) -> Spellings:
    """Per-slot spellings with the first separator cut that the tokenizer never merges across."""
    term = terminator or ""
    eos = (eos_token_id,) if terminator is None else ()
    cuts = range(len(separator) + 1) if num_select > 1 else [0]
    for cut in cuts:
        head, tail = separator[:cut], separator[cut:]
        by_kind = {
            "only": [ids + eos for ids in _encode(tokenizer, [c + term for c in choices])],
            "first": _encode(tokenizer, [c + head for c in choices]),
            "middle": _encode(tokenizer, [tail + c + head for c in choices]),
            "last": [ids + eos for ids in _encode(tokenizer, [tail + c + term for c in choices])],
        }
        spellings = Spellings({k: tuple(v) for k, v in by_kind.items()}, head, tail)
        if num_select == 1 or _composes(tokenizer, choices, separator, term, spellings, num_select):
            for kind in SLOT_KINDS:
                for label, ids in zip(choices, spellings.by_kind[kind]):
                    if not ids:
                        raise ValueError(f"choice {label!r} tokenizes to no tokens; use a visible label.")
            return spellings
    raise ValueError(
        f"the tokenizer merges labels with the separator {separator!r} in a way that depends on the "
        f"neighbouring label, so a label has no stable spelling in context. Use a separator that starts "
        f"new tokens (e.g. ', ' or '\\n') or labels such as '[1]'."
    )


def _composes(tokenizer, choices, separator, term, sp: Spellings, num_select) -> bool:
    """Every ordered pair, in every pair of adjacent slot kinds, tokenizes as the spellings joined."""
    k = len(choices)
    pairs = [(a, b) for a in range(k) for b in range(k) if a != b]
    eos_tail = lambda ids, kind: ids[:-1] if (kind in ("only", "last") and term == "" and ids) else ids
    joins = [("first", "last", "", term)]
    if num_select > 2:
        joins += [("first", "middle", "", sp.sep_head), ("middle", "middle", sp.sep_tail, sp.sep_head),
                  ("middle", "last", sp.sep_tail, term)]
    for left, right, before, after in joins:
        texts = [before + choices[a] + separator + choices[b] + after for a, b in pairs]
        for (a, b), ids in zip(pairs, _encode(tokenizer, texts)):
            want = sp.by_kind[left][a] + eos_tail(sp.by_kind[right][b], right)
            if ids != want:
                return False
    return True
