"""AllEvidence@K as a Hugging Face ``evaluate`` module.

Load it offline by absolute path::

    import evaluate
    from hf_treegen.metrics import metric_path
    metric = evaluate.load(metric_path("all_evidence"), keep_in_memory=True)
    metric.compute(predictions=[["p1", "p2"]], references=[[["p1"], ["p1", "p3"]]])

One row per question: ``predictions[i]`` is the list of paragraphs retrieved within the first K tokens
(the caller picks K), ``references[i]`` the list of the annotators' evidence lists (e.g.
``[r["evidence"] for r in references_for(q, text_evidence_only=True)]``). Strings match exactly.

A question is eligible when at least one annotator's evidence list is non-empty; only eligible
questions enter the rates. "one": some annotator's non-empty set is wholly retrieved; "union": the
union of all non-empty sets is. The scoring lives in ``hf_treegen.metrics.qasper_official``.
"""

import datasets
import evaluate

from hf_treegen.metrics.qasper_official import all_evidence_rates

_DESCRIPTION = """\
AllEvidence@K: fraction of eligible questions whose gold evidence paragraphs all lie inside the
retrieved context, for one annotator's set ("one") or the union of the annotators' sets ("union").
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list (one per question) of retrieved paragraph strings.
    references: list (one per question) of lists (one per annotator) of evidence paragraph strings.
Returns:
    {"all_evidence_one": float, "all_evidence_union": float, "num_eligible": int, "num_questions": int}
"""


class AllEvidence(evaluate.Metric):
    """AllEvidence@K (one-set and union forms)."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": [datasets.Value("string")],
                "references": [[datasets.Value("string")]],
            }),
        )

    def _compute(self, predictions, references):
        refs = [[{"evidence": evidence or []} for evidence in annotators] for annotators in references]
        return all_evidence_rates([p or [] for p in predictions], refs)
