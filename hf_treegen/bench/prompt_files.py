"""Prompt sources for benchmarks: ``builtin:NAME``, ``hub:NAME`` (paper benchmarks via ``datasets``)
or a JSONL file of {"prompt": ..., "category": ...}."""

from __future__ import annotations

import json
from pathlib import Path

from .prompts import builtin_prompts


def load_prompt_texts(spec: str, limit: int | None = None) -> list[dict]:
    """``builtin:code`` / ``hub:gsm8k`` (comma-separated names allowed) or a path to a JSONL file."""
    if spec.startswith("hub:"):
        from .hub_prompts import hub_prompts

        return [row for name in spec[len("hub:"):].split(",") for row in hub_prompts(name.strip(), limit)]
    if spec.startswith("builtin:"):
        names = spec[len("builtin:"):].split(",")
        per_set = None if limit is None else -(-limit // len(names))  # an even share of each set
        rows = []
        for name in names:
            rows += [{"prompt": text, "category": name} for text in builtin_prompts(name)[:per_set]]
        return rows
    path = Path(spec)
    if not path.is_file():
        raise FileNotFoundError(f"--prompts {spec!r}: no such file (or use builtin:code|explain|chat|python-qa, or hub:gsm8k|humaneval|...).")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not valid JSON ({err.msg}); each line must be "
                             f'{{"prompt": "...", "category": "..."}}.') from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ValueError(f'{path}:{number}: each line needs a string "prompt" field.')
        rows.append({"prompt": row["prompt"], "category": str(row.get("category", "default"))})
    if not rows:
        raise ValueError(f"{path}: no prompts found.")
    return rows


def render_chat(tokenizer, text: str):
    """Token ids (1, T) of one user turn with the generation prompt, or the plain text without a template."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             return_tensors="pt", return_dict=True)["input_ids"]
    return tokenizer(text, return_tensors="pt").input_ids
