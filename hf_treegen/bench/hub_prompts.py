"""The speculative-decoding papers' benchmark prompts, loaded with ``datasets`` from the Hub.

    hf-treegen bench --prompts hub:gsm8k,humaneval --num-prompts 32

Each name maps to a dataset, split and the field holding the prompt (kept in
``hf_treegen/data/prompts/hub.json``). Loading needs the Hub (or a populated ``datasets`` cache); when
neither is there the error says so and points at the offline ``builtin:`` sets and JSONL files.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..prompt_data import prompt_table


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


#: Name -> its dataset, config, split, prompt field and category (``hf_treegen/data/prompts/hub.json``).
HUB_SETS = {name: HubPromptSet(**spec) for name, spec in prompt_table("hub")["sets"].items()}


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
