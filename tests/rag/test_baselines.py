"""Retrieval baselines: each fills the budget as a walk does, returns the paper's own paragraphs, ranks
what it should rank first and gives the same evidence every time; rag-eval reports them beside the walks."""

import pytest

from hf_treegen.extras import MissingExtra
from hf_treegen.rag import load_qasper
from hf_treegen.rag.baselines import (
    BASELINES,
    BM25Ranker,
    DenseRanker,
    baseline_ranker,
    choose_evidence,
    paper_paragraphs,
    within_budget,
)
from hf_treegen.rag.evaluation import evaluate, format_table, parse_baselines, run_baseline_item, summarise
from tests.helpers import bpe_tokenizer, tiny_target

pytest.importorskip("bm25s")
pytest.importorskip("wordllama")


@pytest.fixture(scope="module")
def papers():
    return load_qasper(source="offline")


@pytest.fixture(scope="module")
def tokenizer():
    return bpe_tokenizer()


@pytest.fixture(scope="module")
def rankers():
    return {name: baseline_ranker(name) for name in BASELINES}


def counts(tokenizer, paragraphs):
    return [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in paragraphs]


def test_parse_baselines():
    assert parse_baselines("bm25, dos,bm25") == ["bm25", "dos"]
    assert parse_baselines("none") == parse_baselines("") == []
    with pytest.raises(ValueError, match=r"unknown baseline \['bm52'\]"):
        parse_baselines("bm25,bm52")


@pytest.mark.parametrize("budget", [1, 150, 600, 10**6])
@pytest.mark.parametrize("name", BASELINES)
def test_budget_is_filled_as_a_walk_fills_it(papers, tokenizer, rankers, name, budget):
    for paper in papers[:3]:
        paragraphs = paper_paragraphs(paper)
        tokens = counts(tokenizer, paragraphs)
        for question in paper.questions:
            chosen = choose_evidence(name, rankers[name], question.question, paragraphs, tokens, budget)
            assert len(set(chosen)) == len(chosen) and all(0 <= i < len(paragraphs) for i in chosen)
            # below the budget before the paragraph taken last; stopped only because the budget was reached
            held = sum(tokens[i] for i in chosen)
            assert held - max(tokens[i] for i in chosen) < budget
            if name in ("bm25", "dense"):  # best first: the one taken last is the last one read
                assert held - tokens[chosen[-1]] < budget
            assert held >= budget or len(chosen) == len(paragraphs)


@pytest.mark.parametrize("name", BASELINES)
def test_evidence_is_the_papers_own_paragraphs_and_deterministic(papers, tokenizer, rankers, name):
    paper = papers[1]
    paragraphs = paper_paragraphs(paper)
    texts = {text for _, text in paper.paragraphs()}
    assert set(paragraphs) == texts
    tokens = counts(tokenizer, paragraphs)
    for question in paper.questions:
        first = choose_evidence(name, rankers[name], question.question, paragraphs, tokens, 500)
        again = choose_evidence(name, baseline_ranker(name), question.question, paragraphs, tokens, 500)
        assert first == again and first


def test_rankers_put_the_matching_paragraph_first(papers):
    paragraphs = paper_paragraphs(papers[0])
    target = max(range(len(paragraphs)), key=lambda i: len(paragraphs[i]))
    words = paragraphs[target].split()
    question = " ".join(words[: min(len(words), 25)])
    for ranker in (BM25Ranker(), DenseRanker()):
        scores = ranker.scores(question, paragraphs)
        assert scores.shape == (len(paragraphs),)
        assert int(scores.argmax()) == target


def test_dos_reads_the_dense_choice_in_document_order_and_truncate_reads_from_the_start(papers, tokenizer, rankers):
    paragraphs = paper_paragraphs(papers[2])
    tokens = counts(tokenizer, paragraphs)
    for question in papers[2].questions:
        dense = choose_evidence("dense", rankers["dense"], question.question, paragraphs, tokens, 400)
        dos = choose_evidence("dos", rankers["dos"], question.question, paragraphs, tokens, 400)
        assert dos == sorted(dense)
        truncate = choose_evidence("truncate", None, question.question, paragraphs, tokens, 400)
        assert truncate == list(range(len(truncate)))


def test_within_budget_takes_the_paragraph_that_reaches_it():
    assert within_budget([2, 0, 1], [5, 5, 10], 10) == [2]
    assert within_budget([2, 0, 1], [5, 5, 10], 11) == [2, 0]
    assert within_budget([], [], 10) == []


def test_a_question_of_stopwords_matches_nothing(papers):
    paragraphs = paper_paragraphs(papers[0])
    assert not BM25Ranker().scores("is it the ... of a?", paragraphs).any()


def test_missing_package_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bm25s", None)
    with pytest.raises(MissingExtra, match=r"pip install 'hf-treegen\[rag\]'"):
        BM25Ranker()


def test_rag_eval_reports_baselines_beside_the_walks(papers, tokenizer):
    model = tiny_target("llama", vocab=320, std=0.15)
    model.config.max_position_embeddings = 8192
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    records = evaluate(model, tokenizer, papers[:2], ["unary"], k=4, b=2, budgets=[200, 400], limit=2,
                       check_against_serial=False, progress=False, baselines=["bm25", "dos"])
    assert [r["interface"] for r in records] == ["unary", "bm25", "dos"] * 2
    for record in records:
        if record["interface"] == "unary":
            continue
        row = record["budgets"]["400"]
        assert row["forwards"] == 0 and row["rounds"] == 0 and row["evidence"]
        assert set(record["budgets"]["200"]["evidence"]) <= set(row["evidence"])  # the same ranking, a smaller budget
    table = summarise(records, papers[:2], [200, 400])
    assert set(table) == {"_data", "unary", "bm25", "dos"}
    assert table["bm25"]["400"]["agreement_with_serial"] is None
    # dos holds dense's evidence, so its evidence scores equal any other run of the same ranking
    lines = format_table(table, [200, 400]).splitlines()
    bm25_line = next(line for line in lines if line.startswith("bm25"))
    assert bm25_line.split()[6:10] == ["-", "-", "-", "-"]


def test_answers_are_shared_between_methods_with_the_same_evidence(papers, tokenizer):
    model = tiny_target("llama", vocab=320, std=0.15)
    model.config.max_position_embeddings = 8192
    answers = {}
    ranker = baseline_ranker("dense")
    dense = run_baseline_item(model, tokenizer, papers[0], 0, "dense", ranker, [10**6], answers=answers)
    truncate = run_baseline_item(model, tokenizer, papers[0], 0, "truncate", None, [10**6], answers=answers)
    assert len(answers) == 2  # the whole paper, best first and in order, are different evidence
    dos = run_baseline_item(model, tokenizer, papers[0], 0, "dos", ranker, [10**6], answers=answers)
    assert dos["budgets"][str(10**6)]["evidence"] == truncate["budgets"][str(10**6)]["evidence"]
    assert len(answers) == 2 and dos["budgets"][str(10**6)]["answer"] == truncate["budgets"][str(10**6)]["answer"]
    assert sorted(dense["budgets"][str(10**6)]["evidence"]) == sorted(truncate["budgets"][str(10**6)]["evidence"])


def test_a_ranker_of_ones_own_replaces_the_built_in_one(papers, tokenizer):
    import numpy as np

    class LastFirst:  # ranks the paper backwards
        def scores(self, question, paragraphs):
            return np.arange(len(paragraphs), dtype=float)

    model = tiny_target("llama", vocab=320, std=0.15)
    model.config.max_position_embeddings = 8192
    records = evaluate(model, tokenizer, papers[:1], [], k=4, b=2, budgets=[300], limit=1, progress=False,
                       baselines=["dense", "dos"], rankers={"dense": LastFirst(), "dos": LastFirst()})
    paragraphs = paper_paragraphs(papers[0])
    dense, dos = (r["budgets"]["300"]["evidence"] for r in records)
    assert dense[0] == paragraphs[-1] and dense == list(reversed(dos))


def test_plot_shows_walks_and_baselines(papers, tokenizer, tmp_path):
    pytest.importorskip("matplotlib")
    from hf_treegen.rag.evaluation import plot_table

    model = tiny_target("llama", vocab=320, std=0.15)
    model.config.max_position_embeddings = 8192
    records = evaluate(model, tokenizer, papers[:1], ["unary"], k=4, b=2, budgets=[200], limit=1, progress=False,
                       check_against_serial=False, baselines=["truncate"])
    plot_table(summarise(records, papers[:1], [200]), [200], str(tmp_path / "rag.png"))
    assert (tmp_path / "rag.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
