"""Built-in evaluation prompt sets (``builtin:NAME``), written for this project and held out from
training: ``hf_treegen.train.prompts`` never emits any text listed here.

``code``: write or complete a function; ``explain``: explain a Python concept; ``chat``: everyday
questions. ``python-qa`` is a short mixed set used by the demo and the quick benchmarks.

The prompts are kept in ``hf_treegen/data/prompts/eval.json`` and read by :mod:`hf_treegen.prompt_data`,
which :mod:`hf_treegen.train` reads too (:func:`all_eval_texts` lives there).
"""

from __future__ import annotations

from ..prompt_data import all_eval_texts, eval_prompt_sets  # noqa: F401 (all_eval_texts: re-exported)

#: Set name -> prompts; the sets are kept in ``hf_treegen/data/prompts/eval.json``.
BUILTIN_PROMPTS: dict[str, tuple[str, ...]] = eval_prompt_sets()
CODE = BUILTIN_PROMPTS["code"]
EXPLAIN = BUILTIN_PROMPTS["explain"]
CHAT = BUILTIN_PROMPTS["chat"]


def builtin_prompts(name: str) -> tuple[str, ...]:
    try:
        return BUILTIN_PROMPTS[name]
    except KeyError:
        raise ValueError(f"Unknown builtin prompt set {name!r}; available: {', '.join(BUILTIN_PROMPTS)}.") from None
