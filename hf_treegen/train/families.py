"""Request families: fills asked in several phrasings, held out from evaluation by topic.

A family is ``(name, phrasings, fills)``: phrasings are templates with ``{slot}`` fields, fills map
slot names to values, and every fill is asked in every phrasing of its family. The hand-written
request lists (:mod:`hf_treegen.train.exercise_prompts`, :mod:`hf_treegen.train.question_prompts`,
kept in ``hf_treegen/data/prompts/``) are built this way.

Two guards keep the built-in evaluation prompts out of training: a built-in prompt is never emitted
(:func:`hf_treegen.train.prompts.deal_round_robin` skips them), and neither is a fill whose topic
words all appear in one built-in prompt (:func:`same_topic_as_eval`), so training never sees a
rewording of a benchmark request.
"""

from __future__ import annotations

import functools
import random
import re

from ..prompt_data import all_eval_texts, prompt_table
from .prompts import Prompt, deal_round_robin

Family = tuple[str, tuple[str, ...], tuple[dict[str, str], ...]]

#: Words that say nothing about a request's topic (kept in ``hf_treegen/data/prompts/families.json``).
STOPWORDS = frozenset(prompt_table("families")["stopwords"])

_WORD = re.compile(r"[a-z0-9_]+")


def _stem(word: str) -> str:
    """Crude plural and third-person folding ("removes" -> "remove", "lists" -> "list")."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text: str) -> frozenset[str]:
    return frozenset(_stem(word) for word in _WORD.findall(text.lower()))


def topic_words(text: str) -> frozenset[str]:
    """The words of ``text`` that carry its topic: lowercase and folded, three characters or more, no stopwords."""
    return frozenset(w for w in _words(text) if len(w) >= 3 and w not in STOPWORDS)


@functools.lru_cache(maxsize=1)
def _eval_word_sets() -> tuple[frozenset[str], ...]:
    return tuple(_words(text) for text in all_eval_texts())


def same_topic_as_eval(fill: dict[str, str]) -> bool:
    """True if one built-in evaluation prompt holds every topic word of ``fill``'s values.

    That makes the request a rewording of a benchmark prompt ("returns the square of a number" asked
    as "computes the square of a number"); a neighbouring task ("the cube root of a number") is kept."""
    words = topic_words(" ".join(fill.values()))
    return bool(words) and any(words <= other for other in _eval_word_sets())


def family_texts(templates: tuple[str, ...], fills: tuple[dict[str, str], ...], rng: random.Random) -> list[str]:
    """Every fill in every phrasing, in passes: each pass asks every fill once, in a phrasing it has not
    had yet (drawn at random), so a prefix of the list covers many fills before it repeats one."""
    orders = [rng.sample(range(len(templates)), len(templates)) for _ in fills]
    texts = []
    for pass_ in range(len(templates)):
        batch = [templates[order[pass_]].format(**fill) for fill, order in zip(fills, orders)
                 if not same_topic_as_eval(fill)]
        rng.shuffle(batch)
        texts.extend(batch)
    return texts


def family_prompts(families: tuple[Family, ...], source: str, n: int | None, seed: int) -> list[Prompt]:
    """``n`` prompts (all of them for None) from ``families``, in an order fixed by ``seed``.

    Families are dealt round-robin so any prefix mixes them, and a shorter list is a prefix of a longer
    one; ``Prompt.source`` is ``source`` and ``Prompt.template`` is ``<source>-<family>``."""
    rng = random.Random(f"{source}:{seed}")
    by_family = [[(text, f"{source}-{family}") for text in family_texts(templates, fills, rng)]
                 for family, templates, fills in families]
    return deal_round_robin(by_family, source, n)
