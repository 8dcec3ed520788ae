"""QASPER metrics: the official Answer F1 / Evidence F1, AllEvidence@K, and their ``evaluate`` modules.

``evaluate.load(metric_path("qasper"))`` and ``evaluate.load(metric_path("all_evidence"))`` load the
bundled modules by absolute path, so they work offline and from any working directory.
"""

from __future__ import annotations

from pathlib import Path

from hf_treegen.metrics.qasper_official import (
    ANSWER_TYPES,
    aligned_inputs,
    all_evidence,
    all_evidence_rates,
    eligible,
    evaluate_predictions,
    gold_from_papers,
    normalize_answer,
    paragraph_f1,
    read_predictions_jsonl,
    references_for,
    token_f1,
)

METRICS = ("qasper", "all_evidence")


def metric_path(name: str) -> str:
    """Absolute path of the bundled ``evaluate`` module folder ``name`` (one of :data:`METRICS`)."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; available: {', '.join(METRICS)}")
    return str(Path(__file__).resolve().parent / name)


__all__ = [
    "ANSWER_TYPES", "METRICS", "aligned_inputs", "all_evidence", "all_evidence_rates", "eligible",
    "evaluate_predictions", "gold_from_papers", "metric_path", "normalize_answer", "paragraph_f1",
    "read_predictions_jsonl", "references_for", "token_f1",
]
