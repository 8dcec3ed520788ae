"""The hand-written prompt tables, read from the JSON files in ``hf_treegen/data/prompts/``.

One file per module that uses them: ``eval.json`` (the built-in evaluation prompt sets,
:mod:`hf_treegen.bench.prompts`), ``hub.json`` (the paper benchmarks' datasets,
:mod:`hf_treegen.bench.hub_prompts`), ``chat.json``, ``exercises.json``, ``questions.json``,
``train.json`` and ``families.json`` (the modules of the same names in :mod:`hf_treegen.train`). Those
modules keep their constants (``TOPICS = _TABLES["topics"]``), so editing a prompt means editing the
JSON file.

JSON has no tuples, so :func:`prompt_table` turns every list back into a tuple (a list of pairs into a
tuple of tuples); objects stay dicts, in file order.

The evaluation prompts are read here rather than in :mod:`hf_treegen.bench` so that the benchmarks and
the training data, which must never emit them, share one list without :mod:`hf_treegen.train`
importing the benchmark package.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


def _frozen(value: Any) -> Any:
    """``value`` with every list turned into a tuple, at any depth."""
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    if isinstance(value, dict):
        return {key: _frozen(item) for key, item in value.items()}
    return value


@functools.cache
def prompt_table(name: str) -> dict[str, Any]:
    """The tables of ``hf_treegen/data/prompts/<name>.json``, lists as tuples.

    Cached: every call returns the same dict, so treat it as read-only."""
    path = resources.files("hf_treegen") / "data" / "prompts" / f"{name}.json"
    return _frozen(json.loads(path.read_text(encoding="utf-8")))


def eval_prompt_sets() -> dict[str, tuple[str, ...]]:
    """The built-in evaluation prompt sets (``builtin:NAME``): set name -> its prompts."""
    return prompt_table("eval")["sets"]


def all_eval_texts() -> frozenset[str]:
    """Every built-in evaluation prompt; training never emits one of them."""
    return frozenset(text for texts in eval_prompt_sets().values() for text in texts)
