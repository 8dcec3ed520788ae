"""The speculative-decoding papers' benchmark prompts, loaded with ``datasets`` from the Hub.

    hf-treegen bench --prompts hub:gsm8k,humaneval --num-prompts 32

Each name maps to a dataset, split and the field holding the prompt. Loading needs the Hub (or a
populated ``datasets`` cache); when neither is there the error says so and points at the offline
``builtin:`` sets and JSONL files.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HubPromptSet:
    dataset: str
    config: str | None
    split: str
    field: str
    category: str

    def text(self, row: dict) -> str:
        value = row[self.field]
        if isinstance(value, list):  # multi-turn sets: the first user turn
            value = value[0]
        if self.field == "instruction" and row.get("input"):
            value = f"{value}\n\n{row['input']}"
        return str(value)


HUB_SETS = {
    "gsm8k": HubPromptSet("openai/gsm8k", "main", "test", "question", "math"),
    "math500": HubPromptSet("HuggingFaceH4/MATH-500", None, "test", "problem", "math"),
    "aime": HubPromptSet("HuggingFaceH4/aime_2024", None, "train", "problem", "math"),
    "humaneval": HubPromptSet("openai/openai_humaneval", None, "test", "prompt", "code"),
    "mbpp": HubPromptSet("google-research-datasets/mbpp", "full", "test", "text", "code"),
    "livecodebench": HubPromptSet("livecodebench/code_generation_lite", None, "test", "question_content", "code"),
    "mtbench": HubPromptSet("HuggingFaceH4/mt_bench_prompts", None, "train", "prompt", "chat"),
    "alpaca": HubPromptSet("tatsu-lab/alpaca", None, "train", "instruction", "chat"),
}


def hub_prompts(name: str, limit: int | None = None) -> list[dict]:
    """Rows ``{"prompt", "category"}`` of one paper benchmark; RuntimeError when the Hub is unreachable."""
    if name not in HUB_SETS:
        raise ValueError(f"unknown Hub prompt set {name!r}; choose from {', '.join(HUB_SETS)}.")
    spec = HUB_SETS[name]
    from ..extras import require

    datasets = require("datasets", "rag", f"the Hub prompt set {name!r}")
    try:
        split = spec.split if limit is None else f"{spec.split}[:{limit}]"
        data = datasets.load_dataset(spec.dataset, spec.config, split=split)
    except Exception as err:  # offline, DNS failure, missing cache: datasets raises many types
        raise RuntimeError(
            f"could not load {spec.dataset} ({name}) from the Hugging Face Hub: {type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}. This machine may be offline; use the offline sets "
            f"(--prompts builtin:code,explain,chat) or a JSONL file of {{\"prompt\": ...}} lines."
        ) from err
    return [{"prompt": spec.text(row), "category": f"{name}/{spec.category}"} for row in data]
