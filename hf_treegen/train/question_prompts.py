"""Short questions about computing and everyday life, for drafter distillation; written for this project.

The exercise prompts (:mod:`hf_treegen.train.exercise_prompts`) ask for Python code and Python
concepts; the chat prompts (:mod:`hf_treegen.train.chat_prompts`) fill everyday templates. Users also
ask short, plain questions between the two: what a piece of computing jargon means, what a library is
for, what an error message is telling them, how to get better at something, why something in nature
happens. This module writes those from hand-written lists, each item asked in a few phrasings
(:mod:`hf_treegen.train.families`); lists and phrasings are kept in
``hf_treegen/data/prompts/questions.json``. The answers come from the target itself, as for every
other prompt.

Held out like the exercise prompts: no built-in evaluation or demo prompt, and no item whose topic
words all appear in one of them. Items were also chosen to stay off the built-in prompts' topics
(no item about threads and processes, type hints or context managers, say), which the word test alone
would not catch. For a given seed the list is fixed, a shorter list is a prefix of a longer one, and
ids are content hashes.
"""

from __future__ import annotations

from ..prompt_data import prompt_table
from .families import Family, family_prompts
from .prompts import Prompt

_TABLES = prompt_table("questions")

#: Computing ideas beyond Python itself, each a noun phrase.
COMPUTING: tuple[str, ...] = _TABLES["computing"]
COMPUTING_TEMPLATES: tuple[str, ...] = _TABLES["computing_templates"]

#: Python modules and well-known packages, as they are written in code.
LIBRARIES: tuple[str, ...] = _TABLES["libraries"]
LIBRARY_TEMPLATES: tuple[str, ...] = _TABLES["library_templates"]

#: Python error messages, as a user pastes them.
ERRORS: tuple[str, ...] = _TABLES["errors"]
ERROR_TEMPLATES: tuple[str, ...] = _TABLES["error_templates"]

#: Things people want to get better at, each a gerund phrase.
SKILLS: tuple[str, ...] = _TABLES["skills"]
SKILL_TEMPLATES: tuple[str, ...] = _TABLES["skill_templates"]

#: Things with benefits worth asking about, each a noun phrase.
BENEFITS: tuple[str, ...] = _TABLES["benefits"]
BENEFIT_TEMPLATES: tuple[str, ...] = _TABLES["benefit_templates"]

#: Everyday "why" questions, each the end of "why ...".
WHYS: tuple[str, ...] = _TABLES["whys"]
WHY_TEMPLATES: tuple[str, ...] = _TABLES["why_templates"]

#: Everyday chores and how-tos, each the end of "how do I ...".
CHORES: tuple[str, ...] = _TABLES["chores"]
CHORE_TEMPLATES: tuple[str, ...] = _TABLES["chore_templates"]

#: (family, phrasings, fills): every item is asked in every phrasing of its family.
FAMILIES: tuple[Family, ...] = (
    ("computing", COMPUTING_TEMPLATES, tuple({"idea": idea} for idea in COMPUTING)),
    ("library", LIBRARY_TEMPLATES, tuple({"library": library} for library in LIBRARIES)),
    ("error", ERROR_TEMPLATES, tuple({"error": error} for error in ERRORS)),
    ("skill", SKILL_TEMPLATES, tuple({"skill": skill} for skill in SKILLS)),
    ("benefit", BENEFIT_TEMPLATES, tuple({"benefit": benefit} for benefit in BENEFITS)),
    ("why", WHY_TEMPLATES, tuple({"why": why} for why in WHYS)),
    ("chore", CHORE_TEMPLATES, tuple({"chore": chore} for chore in CHORES)),
)


def question_prompts(n: int | None = None, *, seed: int = 0) -> list[Prompt]:
    """``n`` short questions (all of them for None), in a seeded order.

    Every item is asked in each phrasing of its family, all once before any twice; families are dealt
    round-robin so any prefix mixes them. ``Prompt.template`` is ``question-<family>``.
    """
    return family_prompts(FAMILIES, "question", n, seed)
