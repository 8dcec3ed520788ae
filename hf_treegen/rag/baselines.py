"""Retrieval baselines for ``rag-eval``: the evidence a user would gather without the hierarchical walk.

    bm25      BM25 over the paper's paragraphs (bm25s, English stopwords), best first
    dense     cosine similarity of WordLlama sentence embeddings (static, weights bundled in its
              wheel, so it runs offline), best first
    dos       DOS RAG: the dense choice, read in the paper's order
    truncate  the paper from its first paragraph on

Each fills the same budget as a walk: paragraphs are taken in the baseline's order while the evidence
holds fewer than K tokens of the target's tokenizer, so the paragraph that reaches K is kept, as a walk
keeps it. Ties in a ranking go to the earlier paragraph, which makes every baseline deterministic.

    ranker = baseline_ranker("bm25")
    paragraphs = paper_paragraphs(paper)
    chosen = choose_evidence("bm25", ranker, question, paragraphs, token_counts, budget_tokens=1000)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ..extras import require
from .qasper import Paper

BASELINES = ("bm25", "dense", "dos", "truncate")
# which ranking each baseline reads its evidence from (None: no ranking, the paper in order)
RANKING = {"bm25": "bm25", "dense": "dense", "dos": "dense", "truncate": None}
# baselines that read the chosen paragraphs back in the paper's order rather than best first
DOCUMENT_ORDER = {"dos", "truncate"}


def paper_paragraphs(paper: Paper) -> list[str]:
    """The paper's paragraph texts in reading order, each text once (the walk's evidence is texts too)."""
    return list(dict.fromkeys(text for _, text in paper.paragraphs()))


class Ranker(Protocol):
    def scores(self, question: str, paragraphs: Sequence[str]) -> np.ndarray:
        """(len(paragraphs),) relevance of each paragraph to the question; higher is more relevant."""


class BM25Ranker:
    """Okapi BM25 (bm25s defaults: k1 1.5, b 0.75) over one paper's paragraphs, indexed per question."""

    def __init__(self):
        self._bm25s = require("bm25s", "rag", "the bm25 baseline of rag-eval")

    def scores(self, question: str, paragraphs: Sequence[str]) -> np.ndarray:
        bm25s = self._bm25s
        index = bm25s.BM25()
        index.index(bm25s.tokenize(list(paragraphs), stopwords="en", show_progress=False), show_progress=False)
        query = bm25s.tokenize([question], stopwords="en", return_ids=False, show_progress=False)[0]
        if not query:  # a question of stopwords only matches nothing
            return np.zeros(len(paragraphs))
        return np.asarray(index.get_scores(query), dtype=np.float64)


class DenseRanker:
    """Cosine similarity of WordLlama embeddings (256 dimensions)."""

    def __init__(self):
        wordllama = require("wordllama", "rag", "the dense baselines of rag-eval")
        # the wheel carries the default model; pointing the cache at the package makes load() read those
        # files instead of looking for the tokenizer online (its own lookup misses the bundled copy)
        self._model = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)

    def scores(self, question: str, paragraphs: Sequence[str]) -> np.ndarray:
        vectors = self._model.embed([question, *paragraphs], norm=True)  # (1 + P, 256), unit rows
        return np.asarray(vectors[1:] @ vectors[0], dtype=np.float64)


def baseline_ranker(name: str) -> Ranker | None:
    """The ranker ``name`` reads its evidence from, or None for ``truncate``."""
    kind = RANKING[name]
    return {"bm25": BM25Ranker, "dense": DenseRanker, None: lambda: None}[kind]()


def rank(scores: np.ndarray) -> list[int]:
    """Paragraph indices best first; equal scores keep the paper's order."""
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def within_budget(order: Sequence[int], token_counts: Sequence[int], budget_tokens: int) -> list[int]:
    """The first paragraphs of ``order`` taken while the evidence holds fewer than ``budget_tokens`` tokens."""
    taken, used = [], 0
    for i in order:
        if used >= budget_tokens:
            break
        taken.append(i)
        used += token_counts[i]
    return taken


def reading_order(ranker: Ranker | None, question: str, paragraphs: Sequence[str]) -> list[int]:
    """Paragraph indices in the order a baseline takes them: best first, or the paper's order without a ranker."""
    return list(range(len(paragraphs))) if ranker is None else rank(ranker.scores(question, paragraphs))


def evidence_at(name: str, order: Sequence[int], token_counts: Sequence[int], budget_tokens: int) -> list[int]:
    """Baseline ``name``'s paragraphs at ``budget_tokens`` from its ``order``, in the order the reader sees them."""
    chosen = within_budget(order, token_counts, budget_tokens)
    return sorted(chosen) if name in DOCUMENT_ORDER else chosen


def choose_evidence(name: str, ranker: Ranker | None, question: str, paragraphs: Sequence[str],
                    token_counts: Sequence[int], budget_tokens: int) -> list[int]:
    """Indices into ``paragraphs`` of baseline ``name``'s evidence at ``budget_tokens``, as the reader sees them."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(BASELINES)}.")
    return evidence_at(name, reading_order(ranker, question, paragraphs), token_counts, budget_tokens)
