"""Real selection prompts: section headings of the Python documentation and a question about one.

Each prompt lists ``k`` section headings of one documentation page (Debian ``python3.11-doc``, PSF
licence) as labelled candidates ``[1] .. [k]`` and asks which ``b`` sections hold a passage quoted from
one of them, the task a hierarchical-RAG controller faces at every level.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from ..corpora import parse_rst, python_docs_dir, title_text

MIN_SENTENCE = 50


@dataclass(frozen=True)
class SelectionPrompt:
    page: str  # doc page, e.g. "library/json"
    document: str  # page title
    headings: tuple[str, ...]  # the k candidates, in page order
    passage: str  # a sentence from one candidate's body
    target: int  # index of that candidate

    def labels(self) -> list[str]:
        return [f"[{i + 1}]" for i in range(len(self.headings))]

    def text(self, num_select: int) -> str:
        listing = "\n".join(f"[{i + 1}] {h}" for i, h in enumerate(self.headings))
        noun = "label" if num_select == 1 else f"{num_select} labels"
        return (f"Document: {self.document}\nSections:\n{listing}\n\n"
                f"Which sections contain this passage: \"{self.passage}\"?\n"
                f"Reply with the {noun} of the most relevant section{'s' if num_select > 1 else ''}, "
                f"most relevant first, separated by commas.")


def _first_sentence(lines: list[str]) -> str | None:
    for block in "\n".join(lines).split("\n\n"):
        block = block.strip()
        if not block or block.startswith((".", ":", "*", "-", ">>>", "|", "+")) or block.startswith(" "):
            continue
        text = re.sub(r"\s+", " ", title_text(block))
        sentence = re.split(r"(?<=[.!?])\s", text)[0]
        if len(sentence) >= MIN_SENTENCE and not sentence.endswith("::"):
            return sentence[:240]
    return None


def _page_sections(path: Path) -> tuple[str, list[tuple[str, str | None]]]:
    sections = [(t, b) for t, b in parse_rst(path.read_text(errors="replace")) if t]
    if not sections:
        return "", []
    title = title_text(sections[0][0])
    seen, out = set(), []
    for heading, body in sections[1:]:
        heading = title_text(heading)
        if heading and heading not in seen and len(heading) <= 80:
            seen.add(heading)
            out.append((heading, _first_sentence(body)))
    return title, out


def selection_prompts(k: int, count: int, seed: int = 0, docs_dir: Path | None = None) -> list[SelectionPrompt]:
    """``count`` prompts with ``k`` candidate headings each, from pages with at least ``k`` sections."""
    root = Path(docs_dir) if docs_dir else python_docs_dir()
    pages = sorted(p for sub in ("library", "howto", "tutorial", "reference") for p in (root / sub).glob("*.rst.txt"))
    rng = random.Random(seed)
    rng.shuffle(pages)
    prompts = []
    for path in pages:
        title, sections = _page_sections(path)
        if len(sections) < k:
            continue
        picked = sorted(rng.sample(range(len(sections)), k))
        with_text = [i for i, j in enumerate(picked) if sections[j][1]]
        if not with_text:
            continue
        target = rng.choice(with_text)
        page = str(path.relative_to(root)).removesuffix(".rst.txt")
        prompts.append(SelectionPrompt(page, title, tuple(sections[j][0] for j in picked),
                                       sections[picked[target]][1], target))
        if len(prompts) == count:
            break
    if len(prompts) < count:
        raise ValueError(f"only {len(prompts)} documentation pages have {k} or more sections; ask for fewer prompts.")
    return prompts
