"""Everyday chat prompts for drafter distillation, written for this project.

The documentation and standard-library prompts of :mod:`hf_treegen.train.prompts` teach a drafter how
the target talks about Python. Most chats are not about Python, and a drafter that never saw the
target answer "how do I ..." about a kitchen or a job interview accepts fewer tokens there. This
module fills that gap without any downloaded text: hand-written request templates, each with slots
filled from hand-written topic lists (activities, household tasks, plain-science questions, things to
write, pairs to compare, ...), all kept in ``hf_treegen/data/prompts/chat.json``. The templates cover
many everyday request shapes: how-to questions, short emails and messages, polite rewrites, dilemmas,
definitions and word meanings, well-known history, geography and travel, study, fitness and money
basics, small word problems, recommendations and brainstorming. The answers come from the target
itself, as for every other prompt.

Determinism matches :func:`hf_treegen.train.prompts.train_prompts`: for a given seed the list is fixed,
a shorter list is a prefix of a longer one, and prompt ids are content hashes. The fixed benchmark and
demo prompts (:func:`hf_treegen.prompt_data.all_eval_texts`) are never emitted.
"""

from __future__ import annotations

import itertools
import random

from ..prompt_data import prompt_table
from .prompts import Prompt, deal_round_robin

_TABLES = prompt_table("chat")

#: Slot name -> values. Every value reads naturally in each template that uses the slot.
TOPICS: dict[str, tuple[str, ...]] = _TABLES["topics"]
#: Things to compare: the ``{a}`` and ``{b}`` of a template.
PAIRS: tuple[tuple[str, str], ...] = _TABLES["pairs"]
#: Request templates. ``{slot}`` fields come from :data:`TOPICS`; ``{a}`` and ``{b}`` from one of :data:`PAIRS`.
TEMPLATES: tuple[str, ...] = _TABLES["templates"]


def _fills(template: str) -> list[dict[str, str]]:
    """Every slot assignment of ``template`` (the product of its slots' value lists)."""
    choices = [[{name: value} for value in values] for name, values in TOPICS.items() if "{" + name + "}" in template]
    if "{a}" in template:
        choices.append([{"a": a, "b": b} for a, b in PAIRS])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*choices)]


def _texts(template: str) -> list[str]:
    """The prompts one template makes, first letter capitalised."""
    texts = (template.format(**fields) for fields in _fills(template))
    return [text[0].upper() + text[1:] for text in texts]


def chat_prompts(n: int | None = None, *, seed: int = 0) -> list[Prompt]:
    """``n`` everyday chat prompts (all of them for None), in a seeded order.

    Templates with many slot combinations would dominate a plain shuffle, so prompts are dealt
    round-robin over templates (each template's own texts shuffled): any prefix covers every template.
    ``Prompt.template`` is ``chat-NN``, the index into :data:`TEMPLATES`.
    """
    rng = random.Random(f"chat:{seed}")
    by_template = []
    for number, template in enumerate(TEMPLATES):
        texts = _texts(template)
        rng.shuffle(texts)
        by_template.append([(text, f"chat-{number:02d}") for text in texts])
    rng.shuffle(by_template)
    return deal_round_robin(by_template, "chat", n)
