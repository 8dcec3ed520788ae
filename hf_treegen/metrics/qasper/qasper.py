"""QASPER Answer F1 / Evidence F1 as a Hugging Face ``evaluate`` module (official evaluator semantics).

Load it offline by absolute path::

    import evaluate
    from hf_treegen.metrics import metric_path
    qasper = evaluate.load(metric_path("qasper"), keep_in_memory=True)
    qasper.compute(predictions=[{"answer": "yes", "evidence": []}],
                   references=[[{"answer": "Yes", "evidence": ["p"], "type": "boolean"}]])

One row per gold question: ``predictions[i]`` is ``{"answer": str, "evidence": [str]}`` and
``references[i]`` the list of that question's references ``{"answer", "evidence", "type"}`` (as built
by ``hf_treegen.metrics.references_for``). A row whose predicted answer is ``None`` is a *missing
prediction* (0 and 0, counted in "Missing predictions"), so feeding every gold question (e.g. through
``hf_treegen.metrics.aligned_inputs``) reproduces the official numbers exactly.
``text_evidence_only=True`` drops "FLOAT SELECTED" strings from the reference evidence, like the
official ``--text_evidence_only`` flag.

The scoring itself lives in ``hf_treegen.metrics.qasper_official``.
"""

import datasets
import evaluate

from hf_treegen.metrics.qasper_official import FLOAT_MARKER, evaluate_predictions

_CITATION = """\
@inproceedings{dasigi2021qasper,
  title={A Dataset of Information-Seeking Questions and Answers Anchored in Research Papers},
  author={Dasigi, Pradeep and Lo, Kyle and Beltagy, Iz and Cohan, Arman and Smith, Noah A. and Gardner, Matt},
  booktitle={NAACL-HLT},
  year={2021}
}
"""

_DESCRIPTION = """\
Answer F1 (SQuAD token F1, max over references, credited to the type of the first best reference) and
Evidence F1 (paragraph F1 by exact string equality, max over references) of the official QASPER
evaluator (allenai/qasper-led-baseline scripts/evaluator.py).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"answer": str or None, "evidence": list of str}, one per gold question;
        answer None marks a missing prediction.
    references: list (one per question) of lists of {"answer": str, "evidence": list of str,
        "type": one of "extractive", "abstractive", "boolean", "none"}.
    text_evidence_only: drop reference evidence strings containing "FLOAT SELECTED" (default False).
Returns:
    {"Answer F1": float, "Answer F1 by type": {"extractive", "abstractive", "boolean", "none"},
     "Evidence F1": float, "Missing predictions": int}
"""


class Qasper(evaluate.Metric):
    """Official QASPER Answer F1 and Evidence F1."""

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": {"answer": datasets.Value("string"), "evidence": [datasets.Value("string")]},
                "references": [{"answer": datasets.Value("string"), "evidence": [datasets.Value("string")],
                                "type": datasets.Value("string")}],
            }),
            reference_urls=["https://github.com/allenai/qasper-led-baseline/blob/main/scripts/evaluator.py"],
        )

    def _compute(self, predictions, references, text_evidence_only=False):
        gold, predicted = {}, {}
        for index, (prediction, refs) in enumerate(zip(predictions, references)):
            key = str(index)
            gold[key] = [
                {"answer": r["answer"] or "", "type": r["type"],
                 "evidence": [e for e in (r["evidence"] or []) if not (text_evidence_only and FLOAT_MARKER in e)]}
                for r in refs
            ]
            if prediction["answer"] is not None:
                predicted[key] = {"answer": prediction["answer"], "evidence": prediction["evidence"] or []}
        return evaluate_predictions(gold, predicted)
