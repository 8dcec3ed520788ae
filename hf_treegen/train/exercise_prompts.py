"""Short programming requests for drafter distillation, written for this project.

The prompts of :mod:`hf_treegen.train.prompts` hand the target a passage of documentation or a stdlib
function and ask about it, so the answers lean on the text in the prompt. Most users of a small code
assistant ask short questions instead: "write a function that ...", "what is ... in Python?", "how do
I ... ?". The target then answers from what it knows, in its own habitual shape (a sentence, a code
block, a short explanation after it), and a drafter that never saw those answers accepts fewer tokens
on them. This module writes such requests from hand-written task, concept and how-to lists, each
asked in a few phrasings (lists and phrasings are kept in ``hf_treegen/data/prompts/exercises.json``).
The answers come from the target itself, as for every other prompt.

Held out from evaluation twice over: a built-in evaluation or demo prompt is never emitted
(:func:`hf_treegen.train.prompts.is_eval_prompt`), and neither is a task, concept or chore whose topic
words all appear in one of them (:func:`hf_treegen.train.families.same_topic_as_eval`), so training never
sees a rewording of a benchmark request. Determinism matches :func:`hf_treegen.train.chat_prompts.chat_prompts`:
for a given seed the list is fixed, a shorter list is a prefix of a longer one, and ids are content hashes.
"""

from __future__ import annotations

from ..prompt_data import prompt_table
from .families import Family, family_prompts
from .prompts import Prompt

_TABLES = prompt_table("exercises")

#: What a function should do, as the end of "a function that ...".
FUNCTION_TASKS: tuple[str, ...] = _TABLES["function_tasks"]
#: Functions to complete: (signature, one-line docstring).
SIGNATURES: tuple[tuple[str, str], ...] = _TABLES["signatures"]
#: Things to model as a class, with what the class should offer.
CLASSES: tuple[tuple[str, str], ...] = _TABLES["classes"]
#: Python concepts, as the object of "what is ...".
CONCEPTS: tuple[str, ...] = _TABLES["concepts"]
#: Pairs of Python things people mix up.
CONCEPT_PAIRS: tuple[tuple[str, str], ...] = _TABLES["concept_pairs"]
#: Built-in functions and common methods, as "the `...` function".
BUILTINS: tuple[str, ...] = _TABLES["builtins"]
#: Everyday Python chores, as the end of "How do I ... in Python?".
HOWTOS: tuple[str, ...] = _TABLES["howtos"]

# Phrasings; each slot names the list that fills it.
FUNCTION_TEMPLATES: tuple[str, ...] = _TABLES["function_templates"]
SIGNATURE_TEMPLATES: tuple[str, ...] = _TABLES["signature_templates"]
CLASS_TEMPLATES: tuple[str, ...] = _TABLES["class_templates"]
CONCEPT_TEMPLATES: tuple[str, ...] = _TABLES["concept_templates"]
PAIR_TEMPLATES: tuple[str, ...] = _TABLES["pair_templates"]
BUILTIN_TEMPLATES: tuple[str, ...] = _TABLES["builtin_templates"]
HOWTO_TEMPLATES: tuple[str, ...] = _TABLES["howto_templates"]

#: (template family, its phrasings, its fills). A fill maps slot names to values.
FAMILIES: tuple[Family, ...] = (
    ("function", FUNCTION_TEMPLATES, tuple({"task": task} for task in FUNCTION_TASKS)),
    ("signature", SIGNATURE_TEMPLATES, tuple({"signature": s, "doc": d} for s, d in SIGNATURES)),
    ("class", CLASS_TEMPLATES, tuple({"thing": t, "offers": o} for t, o in CLASSES)),
    ("concept", CONCEPT_TEMPLATES, tuple({"concept": concept} for concept in CONCEPTS)),
    ("pair", PAIR_TEMPLATES, tuple({"a": a, "b": b} for a, b in CONCEPT_PAIRS)),
    ("builtin", BUILTIN_TEMPLATES, tuple({"name": name} for name in BUILTINS)),
    ("howto", HOWTO_TEMPLATES, tuple({"howto": howto} for howto in HOWTOS)),
)


def exercise_prompts(n: int | None = None, *, seed: int = 0) -> list[Prompt]:
    """``n`` short programming requests (all of them for None), in a seeded order.

    Every task, concept and chore is asked in each phrasing of its family; all of them are asked once
    before any is asked twice. Families are dealt round-robin so any prefix mixes them;
    ``Prompt.template`` is ``exercise-<family>``.
    """
    return family_prompts(FAMILIES, "exercise", n, seed)
