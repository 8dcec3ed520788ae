"""The official QASPER metrics: research-doc test vectors and a hand-scored constructed gold file."""

from __future__ import annotations

import json

import pytest

from hf_treegen.metrics import (
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

T1 = "FLOAT SELECTED: Table 1: results"
F1_FIG = "FLOAT SELECTED: Figure 1: architecture"
F2_FIG = "FLOAT SELECTED: Figure 2: x"


def _ans(unanswerable=False, spans=(), free_form="", yes_no=None, evidence=()):
    return {"answer": {"unanswerable": unanswerable, "extractive_spans": list(spans), "yes_no": yes_no,
                       "free_form_answer": free_form, "evidence": list(evidence), "highlighted_evidence": []},
            "annotation_id": "a", "worker_id": "w"}


def _q(qid, *answers):
    return {"question": f"question {qid}?", "question_id": qid, "nlp_background": "", "topic_background": "",
            "paper_read": "", "search_query": "", "question_writer": "", "answers": list(answers)}


# A raw-layout gold file with the edge cases; every score below is worked out by hand.
RAW = {
    "p1": {"title": "t1", "abstract": "", "full_text": [], "figures_and_tables": [], "qas": [
        # two answer types; duplicated predicted evidence
        _q("q1", _ans(spans=["BERT", "ELMo"], evidence=["P1", "P2"]), _ans(free_form="they use BERT", evidence=["P1"])),
        # unanswerable annotation (its annotated evidence is forced to []) next to a boolean "No"
        _q("q2", _ans(unanswerable=True, evidence=["P3"]), _ans(yes_no=False, evidence=["P3"])),
        # table-only evidence and mixed text + figure evidence
        _q("q3", _ans(yes_no=True, evidence=[T1]), _ans(spans=["accuracy"], evidence=["P4", F2_FIG])),
        # abstractive answer with empty evidence
        _q("q4", _ans(free_form="A large corpus of tweets.")),
        # no prediction for this one
        _q("q5", _ans(spans=["foo"], evidence=["P5"])),
    ]},
    "p2": {"title": "t2", "abstract": "", "full_text": [], "figures_and_tables": [], "qas": [
        # a tie between answer types; evidence max comes from the reference that lost the answer tie
        _q("q6", _ans(free_form="red cats", evidence=["P6"]), _ans(spans=["red dogs"], evidence=["P7"])),
        # figure-only evidence, empty predicted evidence
        _q("q7", _ans(yes_no=True, evidence=[F1_FIG])),
    ]},
}

PREDICTIONS = [
    {"question_id": "q1", "predicted_answer": "BERT", "predicted_evidence": ["P1", "P1"]},
    {"question_id": "q2", "predicted_answer": "unanswerable", "predicted_evidence": []},
    {"question_id": "q3", "predicted_answer": "accuracy", "predicted_evidence": ["P4"]},
    {"question_id": "q4", "predicted_answer": "tweets corpus", "predicted_evidence": []},
    {"question_id": "q6", "predicted_answer": "wrong", "predicted_evidence": []},
    {"question_id": "q6", "predicted_answer": "red", "predicted_evidence": ["P7"]},  # last line wins
    {"question_id": "q7", "predicted_answer": "yes", "predicted_evidence": []},
    {"question_id": "qX", "predicted_answer": "ignored", "predicted_evidence": ["P1"]},  # not in gold
]

# Per question (answer F1 / credited type / evidence F1 default / evidence F1 text-only):
# q1: "BERT" vs "BERT, ELMo" -> tokens [bert] vs [bert, elmo]: P=1, R=1/2 -> 2/3 (extractive);
#     vs "they use BERT": P=1, R=1/3 -> 2*(1/3)/(4/3) = 1/2. Max 2/3, extractive.
#     evidence [P1,P1] vs [P1,P2]: common 1, P=1/2, R=1/2 -> 1/2; vs [P1]: P=1/2, R=1 -> 2/3. Max 2/3 (both modes).
# q2: "unanswerable" vs "Unanswerable" -> 1 (none); vs "No" -> 0. Evidence [] vs [] (forced) -> 1.
# q3: "accuracy" vs "Yes" -> 0; vs "accuracy" -> 1 (extractive).
#     default: [P4] vs [T1] -> 0; vs [P4, F2] -> P=1, R=1/2 -> 2/3. Max 2/3.
#     text only: [P4] vs [] -> 0 (prediction not empty); vs [P4] -> 1. Max 1.
# q4: "tweets corpus" vs "large corpus of tweets" (article and '.' removed): common 2, P=1, R=2/4 -> 2/3
#     (abstractive). Evidence [] vs [] -> 1.
# q5: missing -> 0 and 0, not in any type bucket.
# q6: "red" vs "red cats" and "red dogs": P=1, R=1/2 -> 2/3 each; tie -> first reference, abstractive.
#     evidence [P7] vs [P6] -> 0; vs [P7] -> 1. Max 1 (from the extractive reference).
# q7: "yes" vs "Yes" -> 1 (boolean). default: [] vs [F1_FIG] -> 0; text only: [] vs [] -> 1.
# Answer F1 = (2/3 + 1 + 1 + 2/3 + 0 + 2/3 + 1) / 7 = 5/7
# by type: extractive (q1, q3) = (2/3 + 1)/2 = 5/6; abstractive (q4, q6) = 2/3; boolean (q7) = 1; none (q2) = 1
# Evidence F1 default = (2/3 + 1 + 2/3 + 1 + 0 + 1 + 0) / 7 = (13/3)/7 = 13/21
# Evidence F1 text only = (2/3 + 1 + 1 + 1 + 0 + 1 + 1) / 7 = (17/3)/7 = 17/21
EXPECTED_BY_TYPE = {"extractive": 5 / 6, "abstractive": 2 / 3, "boolean": 1.0, "none": 1.0}


def _write_predictions(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _check(result, answer, by_type, evidence, missing):
    assert list(result) == ["Answer F1", "Answer F1 by type", "Evidence F1", "Missing predictions"]
    assert list(result["Answer F1 by type"]) == ["extractive", "abstractive", "boolean", "none"]
    assert result["Answer F1"] == pytest.approx(answer)
    for kind, value in by_type.items():
        assert result["Answer F1 by type"][kind] == pytest.approx(value), kind
    assert result["Evidence F1"] == pytest.approx(evidence)
    assert result["Missing predictions"] == missing


# --------------------------------------------------------------------------------------------------
# test vectors from the research notes (section 2.4)


def test_normalize_answer():
    assert normalize_answer("The F1-score, (an) A/B test!") == "f1score ab test"
    assert normalize_answer("  Theater  anthem a ") == "theater anthem"  # only whole-word articles


def test_token_f1_vectors():
    assert token_f1("", "") == 0
    assert token_f1("the", "a") == 0  # both normalize to empty: still 0
    assert token_f1("unanswerable.", "Unanswerable") == 1.0
    assert token_f1("cat cat dog", "cat dog dog") == pytest.approx(2 / 3)  # multiset: common 2 of 3 each
    assert token_f1("x", "y") == 0


def test_paragraph_f1_vectors():
    assert paragraph_f1(["p1", "p1"], ["p1"]) == pytest.approx(2 / 3)
    assert paragraph_f1([], []) == 1.0
    assert paragraph_f1(["p"], []) == 0.0
    assert paragraph_f1([], ["p"]) == 0.0
    assert paragraph_f1(["p "], ["p"]) == 0.0  # exact string equality, no whitespace normalization
    # P = 1/3 (list length), R = 1/2 -> 2*(1/6)/(5/6) = 2/5
    assert paragraph_f1(["a", "x", "y"], ["a", "b"]) == pytest.approx(0.4)


def test_yes_none_tie_credited_to_boolean():
    gold = {"q": [{"answer": "Yes", "evidence": ["a"], "type": "boolean"},
                  {"answer": "yes", "evidence": [], "type": "none"}]}
    result = evaluate_predictions(gold, {"q": {"answer": "yes", "evidence": []}})
    # both references give answer F1 1.0; the first (boolean) is credited; evidence [] vs [] -> 1.0
    _check(result, 1.0, {"boolean": 1.0, "none": 0.0, "extractive": 0.0, "abstractive": 0.0}, 1.0, 0)


def test_text_evidence_only_drops_float_selected():
    question = _q("q", _ans(yes_no=True, evidence=["FLOAT SELECTED: Table 1: x"]))
    assert references_for(question) == [{"answer": "Yes", "evidence": ["FLOAT SELECTED: Table 1: x"],
                                         "type": "boolean"}]
    assert references_for(question, text_evidence_only=True) == [{"answer": "Yes", "evidence": [],
                                                                  "type": "boolean"}]


# --------------------------------------------------------------------------------------------------
# references


def test_reference_precedence():
    q = _q("qq",
           _ans(unanswerable=True, spans=["s"], yes_no=True, evidence=["e"]),  # unanswerable wins, evidence []
           _ans(spans=["a", "b"], free_form="ff", yes_no=True, evidence=["e"]),  # extractive before free form
           _ans(free_form="ff", yes_no=False),  # free form before yes/no
           _ans(yes_no=False, evidence=["e2"]))
    assert references_for(q) == [
        {"answer": "Unanswerable", "evidence": [], "type": "none"},
        {"answer": "a, b", "evidence": ["e"], "type": "extractive"},
        {"answer": "ff", "evidence": [], "type": "abstractive"},
        {"answer": "No", "evidence": ["e2"], "type": "boolean"},
    ]


def test_reference_without_answer_names_question():
    with pytest.raises(ValueError, match="question q-empty"):
        references_for(_q("q-empty", _ans()))


def test_gold_from_papers_layout():
    gold = gold_from_papers(RAW)
    assert list(gold) == ["q1", "q2", "q3", "q4", "q5", "q6", "q7"]
    assert gold["q2"][0] == {"answer": "Unanswerable", "evidence": [], "type": "none"}
    assert gold["q3"][1]["evidence"] == ["P4", F2_FIG]
    assert gold_from_papers(RAW, text_evidence_only=True)["q3"][1]["evidence"] == ["P4"]


# --------------------------------------------------------------------------------------------------
# aggregation on the constructed file


def test_constructed_file_default(tmp_path):
    predictions = read_predictions_jsonl(_write_predictions(tmp_path / "p.jsonl", PREDICTIONS))
    assert predictions["q6"] == {"answer": "red", "evidence": ["P7"]}
    result = evaluate_predictions(gold_from_papers(RAW), predictions)
    _check(result, 5 / 7, EXPECTED_BY_TYPE, 13 / 21, 1)


def test_constructed_file_text_evidence_only(tmp_path):
    predictions = read_predictions_jsonl(_write_predictions(tmp_path / "p.jsonl", PREDICTIONS))
    result = evaluate_predictions(gold_from_papers(RAW, text_evidence_only=True), predictions)
    _check(result, 5 / 7, EXPECTED_BY_TYPE, 17 / 21, 1)


def test_missing_predictions_and_empty_buckets():
    gold = {"a": [{"answer": "x", "evidence": ["e"], "type": "extractive"}],
            "b": [{"answer": "y", "evidence": [], "type": "abstractive"}]}
    # only "a" predicted: answer (1 + 0)/2, evidence (1 + 0)/2; "b" not in the abstractive bucket
    result = evaluate_predictions(gold, {"a": {"answer": "x", "evidence": ["e"]}, "zzz": {"answer": "y"}})
    _check(result, 0.5, {"extractive": 1.0, "abstractive": 0.0, "boolean": 0.0, "none": 0.0}, 0.5, 1)
    _check(evaluate_predictions(gold, {}), 0.0, {k: 0.0 for k in EXPECTED_BY_TYPE}, 0.0, 2)
    _check(evaluate_predictions({}, {}), 0.0, {k: 0.0 for k in EXPECTED_BY_TYPE}, 0.0, 0)


def test_file_record_keys_accepted():
    gold = {"a": [{"answer": "x", "evidence": ["e"], "type": "extractive"}]}
    record = {"question_id": "a", "predicted_answer": "x", "predicted_evidence": ["e"]}
    assert evaluate_predictions(gold, {"a": record})["Evidence F1"] == 1.0


# --------------------------------------------------------------------------------------------------
# predictions file


def test_malformed_line_names_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(PREDICTIONS[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        read_predictions_jsonl(path)
    path.write_text("\n" + json.dumps({"question_id": "q", "predicted_answer": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: missing key.*predicted_evidence"):
        read_predictions_jsonl(path)
    path.write_text(json.dumps({"question_id": "q", "predicted_answer": "x", "predicted_evidence": "P1"}) + "\n")
    with pytest.raises(ValueError, match="line 1: predicted_evidence"):
        read_predictions_jsonl(path)


# --------------------------------------------------------------------------------------------------
# AllEvidence@K


def test_all_evidence_one_vs_union():
    refs = [{"answer": "a", "evidence": ["P1"], "type": "extractive"},
            {"answer": "b", "evidence": ["P1", "P2"], "type": "extractive"},
            {"answer": "Unanswerable", "evidence": [], "type": "none"}]
    assert eligible(refs)
    assert all_evidence(["P1", "P9"], refs, mode="one") == 1  # annotator 1's set {P1} is covered
    assert all_evidence(["P1", "P9"], refs, mode="union") == 0  # P2 is missing from the union
    assert all_evidence(["P2", "P1"], refs, mode="union") == 1
    assert all_evidence(["P2"], refs, mode="one") == 0
    with pytest.raises(ValueError):
        all_evidence([], refs, mode="all")


def test_all_evidence_eligibility_and_rates():
    unanswerable = [{"answer": "Unanswerable", "evidence": [], "type": "none"}]
    figure_only = references_for(_q("f", _ans(yes_no=True, evidence=[F1_FIG])), text_evidence_only=True)
    assert not eligible(unanswerable) and not eligible(figure_only)
    assert all_evidence(["anything"], unanswerable) == 0
    two = [{"evidence": ["P1"]}, {"evidence": ["P1", "P2"]}]
    rates = all_evidence_rates([["P1"], ["P1", "P2"], [], ["P3"]],
                               [two, two, unanswerable, [{"evidence": ["P4"]}]])
    # eligible: questions 0, 1, 3. one-set hits: q0, q1 -> 2/3; union hits: q1 -> 1/3
    assert rates == {"all_evidence_one": pytest.approx(2 / 3), "all_evidence_union": pytest.approx(1 / 3),
                     "num_eligible": 3, "num_questions": 4}
    assert all_evidence_rates([[]], [unanswerable])["all_evidence_one"] == 0.0
