"""The official QASPER metrics (Answer F1, Evidence F1) and AllEvidence@K, as plain functions.

Answer F1 and Evidence F1 follow the official evaluator of the QASPER release
(``allenai/qasper-led-baseline``, ``scripts/evaluator.py``, shipped as ``qasper_evaluator.py`` with the
v0.3 test set) number for number:

* references come from each annotation in list order: unanswerable first (answer ``"Unanswerable"``,
  evidence forced to ``[]``, type ``none``), then the first of extractive spans (joined by ``", "``),
  free-form answer (``abstractive``), yes/no (``"Yes"``/``"No"``, ``boolean``);
* answers are compared with the SQuAD v1.1 token F1 (0 when nothing is in common, even when both sides
  normalize to the empty string); evidence with a paragraph F1 by exact string equality whose precision
  divides by the length of the predicted *list* (duplicates lower it) and which is 1.0 when both the
  prediction and the reference are empty;
* per question the best reference is taken; a question without prediction scores 0 and 0 and is
  counted in ``"Missing predictions"``; predictions for unknown question ids are ignored.

The module is written from the description of the algorithm (no code copied). It has no dependency
beyond the standard library.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

ANSWER_TYPES = ("extractive", "abstractive", "boolean", "none")
FLOAT_MARKER = "FLOAT SELECTED"

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

# --------------------------------------------------------------------------------------------------
# answer and evidence scores


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalization: lowercase, delete every ``string.punctuation`` character, replace the
    whole words ``a``/``an``/``the`` by a space, collapse whitespace.

    >>> normalize_answer("The F1-score, (an) A/B test!")
    'f1score ab test'
    """
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(pred: str, gold: str) -> float:
    """SQuAD token F1 of two answer strings after :func:`normalize_answer`.

    Tokens are compared as multisets. Returns 0 when no token is shared, which includes the case where
    both strings normalize to nothing (the official QASPER evaluator does not treat empty/empty as a
    match, unlike SQuAD v2)."""
    pred_tokens = normalize_answer(pred).split()
    gold_tokens = normalize_answer(gold).split()
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def paragraph_f1(pred_list: Sequence[str], gold_list: Sequence[str]) -> float:
    """Evidence F1 of a predicted paragraph list against one reference's evidence list.

    Both empty -> 1.0 (an empty prediction matches an unanswerable reference). Otherwise the number of
    distinct strings in common (exact equality) is divided by ``len(pred_list)`` for precision and by
    ``len(gold_list)`` for recall, so duplicated predictions lower the precision."""
    if not pred_list and not gold_list:
        return 1.0
    common = len(set(pred_list) & set(gold_list))
    if common == 0:
        return 0.0
    precision = common / len(pred_list)
    recall = common / len(gold_list)
    return 2 * precision * recall / (precision + recall)


# --------------------------------------------------------------------------------------------------
# gold references


def _inner_answer(annotation: Mapping[str, Any]) -> Mapping[str, Any]:
    """Raw QASPER wraps each annotation as ``{"answer": {...}, "annotation_id", "worker_id"}``; an
    already unwrapped answer dict (one with an ``unanswerable`` key) is accepted as well."""
    if "answer" in annotation and isinstance(annotation["answer"], Mapping):
        return annotation["answer"]
    return annotation


def references_for(question: Mapping[str, Any], text_evidence_only: bool = False) -> list[dict]:
    """The official references of one raw QASPER question (an entry of a paper's ``"qas"`` list).

    One reference ``{"answer": str, "evidence": [str], "type": str}`` per annotation, in order:

    * ``unanswerable`` true -> ``"Unanswerable"``, evidence ``[]`` (even if some was annotated), ``none``;
    * else non-empty ``extractive_spans`` -> spans joined by ``", "``, ``extractive``;
    * else non-empty ``free_form_answer`` -> it, ``abstractive``;
    * else ``yes_no`` true -> ``"Yes"``; ``yes_no`` false -> ``"No"``; both ``boolean``;
    * else ``ValueError`` naming the question id.

    With ``text_evidence_only`` every evidence string containing ``"FLOAT SELECTED"`` (figures and
    tables) is dropped, so a figure-only reference ends up with ``[]``."""
    qid = question.get("question_id", "<unknown>")
    references = []
    for index, annotation in enumerate(question.get("answers", [])):
        answer = _inner_answer(annotation)
        if answer.get("unanswerable"):
            references.append({"answer": "Unanswerable", "evidence": [], "type": "none"})
            continue
        spans = answer.get("extractive_spans") or []
        free_form = answer.get("free_form_answer") or ""
        yes_no = answer.get("yes_no")
        if spans:
            text, kind = ", ".join(spans), "extractive"
        elif free_form:
            text, kind = free_form, "abstractive"
        elif yes_no is not None:
            text, kind = ("Yes" if yes_no else "No"), "boolean"
        else:
            raise ValueError(f"question {qid}: annotation {index} contains no answer "
                             "(not unanswerable, no extractive span, no free-form answer, no yes/no)")
        evidence = list(answer.get("evidence") or [])
        if text_evidence_only:
            evidence = [e for e in evidence if FLOAT_MARKER not in e]
        references.append({"answer": text, "evidence": evidence, "type": kind})
    return references


def gold_from_papers(raw: Mapping[str, Any], text_evidence_only: bool = False) -> dict[str, list[dict]]:
    """``{question_id: references}`` for a raw QASPER JSON file loaded as a dict
    (``paper_id -> {"title", ..., "qas": [{"question_id", "answers": [{"answer": {...}}]}]}``).
    A question id that appears twice keeps its last occurrence, as in the official script."""
    gold: dict[str, list[dict]] = {}
    for paper in raw.values():
        for question in paper.get("qas", []):
            gold[question["question_id"]] = references_for(question, text_evidence_only)
    return gold


# --------------------------------------------------------------------------------------------------
# predictions and aggregation


def _prediction_fields(prediction: Mapping[str, Any]) -> tuple[str, Sequence[str]]:
    """(answer, evidence) of a prediction given as ``{"answer", "evidence"}`` or as a predictions-file
    record ``{"predicted_answer", "predicted_evidence"}``."""
    if "answer" in prediction:
        return prediction["answer"], prediction.get("evidence") or []
    return prediction["predicted_answer"], prediction.get("predicted_evidence") or []


def evaluate_predictions(gold: Mapping[str, Sequence[Mapping[str, Any]]],
                         predictions: Mapping[str, Mapping[str, Any]]) -> dict:
    """The official aggregate scores.

    ``gold``: ``{question_id: references}`` (from :func:`gold_from_papers`). ``predictions``:
    ``{question_id: {"answer": str, "evidence": [str]}}`` (from :func:`read_predictions_jsonl`; the
    file's own ``predicted_answer``/``predicted_evidence`` keys are accepted too). Predictions for ids
    not in ``gold`` are ignored.

    Per gold question: no prediction -> answer 0 and evidence 0, counted in ``"Missing predictions"``
    and added to no per-type list. Otherwise the answer score is the max token F1 over the references,
    credited to the type of the *first* reference reaching that max; the evidence score is the max
    paragraph F1 over the references, independently of which reference won the answer.

    Returns ``{"Answer F1": mean, "Answer F1 by type": {extractive, abstractive, boolean, none}
    (0.0 for an empty bucket), "Evidence F1": mean, "Missing predictions": int}``; fractions, not
    percents; all means are 0.0 when ``gold`` is empty."""
    answer_scores: list[float] = []
    evidence_scores: list[float] = []
    by_type: dict[str, list[float]] = {kind: [] for kind in ANSWER_TYPES}
    missing = 0
    for qid, references in gold.items():
        if qid not in predictions:
            missing += 1
            answer_scores.append(0.0)
            evidence_scores.append(0.0)
            continue
        if not references:
            raise ValueError(f"question {qid} has no reference answer")
        answer, evidence = _prediction_fields(predictions[qid])
        best, best_type = None, None
        for reference in references:  # strict '>' keeps the first reference reaching the max
            score = token_f1(answer, reference["answer"])
            if best is None or score > best:
                best, best_type = score, reference["type"]
        if best_type not in by_type:
            raise ValueError(f"question {qid}: unknown answer type {best_type!r}")
        answer_scores.append(best)
        by_type[best_type].append(best)
        evidence_scores.append(max(paragraph_f1(evidence, reference["evidence"]) for reference in references))

    return {
        "Answer F1": _mean(answer_scores),
        "Answer F1 by type": {kind: _mean(scores) for kind, scores in by_type.items()},
        "Evidence F1": _mean(evidence_scores),
        "Missing predictions": missing,
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def read_predictions_jsonl(path) -> dict[str, dict]:
    """Read a predictions file: one JSON object per line with ``question_id`` (str),
    ``predicted_answer`` (str) and ``predicted_evidence`` (list of str). Returns
    ``{question_id: {"answer": ..., "evidence": [...]}}``; the last line wins for a repeated id; blank
    lines are skipped. A malformed line raises ``ValueError`` naming the file and line number; an
    unreadable file raises ``OSError``."""
    predictions: dict[str, dict] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}: line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object")
            missing = [k for k in ("question_id", "predicted_answer", "predicted_evidence") if k not in record]
            if missing:
                raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
            answer, evidence = record["predicted_answer"], record["predicted_evidence"]
            if not isinstance(answer, str):
                raise ValueError(f"{where}: predicted_answer must be a string")
            if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
                raise ValueError(f"{where}: predicted_evidence must be a list of strings")
            predictions[str(record["question_id"])] = {"answer": answer, "evidence": evidence}
    return predictions


def aligned_inputs(gold: Mapping[str, Sequence[Mapping[str, Any]]],
                   predictions: Mapping[str, Mapping[str, Any]]) -> tuple[list[dict], list[list[dict]]]:
    """``(predictions, references)`` lists, one entry per gold question in gold order, in the layout of
    the ``qasper`` evaluate module. A missing prediction becomes ``{"answer": None, "evidence": []}``,
    which that module scores as missing, so its result equals :func:`evaluate_predictions`."""
    preds, refs = [], []
    for qid, references in gold.items():
        if qid in predictions:
            answer, evidence = _prediction_fields(predictions[qid])
            preds.append({"answer": answer, "evidence": list(evidence)})
        else:
            preds.append({"answer": None, "evidence": []})
        refs.append([{"answer": r["answer"], "evidence": list(r["evidence"]), "type": r["type"]}
                     for r in references])
    return preds, refs


# --------------------------------------------------------------------------------------------------
# AllEvidence@K


def _evidence_sets(references: Iterable[Mapping[str, Any]]) -> list[set[str]]:
    return [set(r["evidence"]) for r in references if r["evidence"]]


def eligible(references: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a question counts for AllEvidence@K: at least one reference has non-empty evidence.

    References whose evidence is empty (unanswerable annotations, whose evidence the official
    extraction forces to ``[]``; annotations without evidence; and, when the references were built with
    ``text_evidence_only=True``, annotations whose evidence was only figures/tables) are ignored by
    :func:`all_evidence`; a question where every reference is like that is not eligible and should be
    left out of the denominator (report the eligible count). Build the references with
    ``text_evidence_only=True`` when the retrieved units are text paragraphs, since a
    ``FLOAT SELECTED`` string can never be retrieved. Stricter cohorts (e.g. every annotation
    answerable with mappable text evidence) are a caller's choice made before calling this."""
    return bool(_evidence_sets(references))


def all_evidence(retrieved_paragraphs: Iterable[str], references: Iterable[Mapping[str, Any]],
                 mode: str = "one") -> int:
    """AllEvidence@K of one question: 1 when the retrieved paragraphs (those inside the first K tokens
    of the context, chosen by the caller) cover the gold evidence, else 0. Exact string equality.

    * ``mode="one"`` (recommended): some annotator's non-empty evidence set lies wholly inside the
      retrieved set.
    * ``mode="union"``: the union of all annotators' non-empty evidence sets lies inside it (harder).

    Questions that are not :func:`eligible` score 0 in both modes; leave them out of the average."""
    if mode not in ("one", "union"):
        raise ValueError(f"mode must be 'one' or 'union', got {mode!r}")
    retrieved = set(retrieved_paragraphs)
    sets = _evidence_sets(references)
    if not sets:
        return 0
    if mode == "one":
        return int(any(s <= retrieved for s in sets))
    return int(set().union(*sets) <= retrieved)


def all_evidence_rates(retrieved: Sequence[Iterable[str]],
                       references: Sequence[Iterable[Mapping[str, Any]]]) -> dict:
    """AllEvidence@K over questions (``retrieved[i]`` and ``references[i]`` belong to question i).

    Returns ``{"all_evidence_one": rate, "all_evidence_union": rate, "num_eligible": int,
    "num_questions": int}``, rates over the eligible questions only (0.0 when none is eligible)."""
    if len(retrieved) != len(references):
        raise ValueError(f"{len(retrieved)} retrieved lists for {len(references)} questions")
    one = union = count = 0
    for paragraphs, refs in zip(retrieved, references):
        refs = list(refs)
        if not eligible(refs):
            continue
        paragraphs = list(paragraphs)
        count += 1
        one += all_evidence(paragraphs, refs, "one")
        union += all_evidence(paragraphs, refs, "union")
    return {
        "all_evidence_one": one / count if count else 0.0,
        "all_evidence_union": union / count if count else 0.0,
        "num_eligible": count,
        "num_questions": len(references),
    }
