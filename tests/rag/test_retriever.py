"""The hierarchical retriever on a tiny model: interfaces agree, json failures are counted, budgets nest."""

import json
import subprocess
import sys

import pytest
import torch

from hf_treegen.rag import build_tree, load_qasper
from hf_treegen.rag.evaluation import evaluate, summarise
from hf_treegen.rag.retriever import HierarchicalRetriever, parse_json_selection
from tests.helpers import bpe_tokenizer, tiny_target


@pytest.fixture(scope="module")
def setup():
    tok = bpe_tokenizer()
    model = tiny_target("llama", vocab=320, std=0.15)
    model.config.max_position_embeddings = 8192
    model.generation_config.eos_token_id = tok.eos_token_id
    papers = load_qasper(source="offline")[:2]
    return tok, model, papers


def test_compiled_selections_equal_serial_every_round(setup):
    tok, model, papers = setup
    tree = build_tree(papers[0])
    for question in papers[0].questions[:3]:
        walks = {}
        for interface in ("compiled", "serial", "chunked"):
            retriever = HierarchicalRetriever(model, tok, interface=interface, k=4, b=2, budget_tokens=300,
                                              preview_chars=40, check_against_serial=interface != "serial")
            seen = []
            walks[interface] = retriever.retrieve(tree, question.question, on_round=lambda n, r: seen.append((n, r)))
            assert seen == list(enumerate(walks[interface].rounds, start=1))  # progress hears of every round
        assert [r.chosen for r in walks["compiled"].rounds] == [r.chosen for r in walks["serial"].rounds]
        assert walks["compiled"].evidence == walks["serial"].evidence
        for r in walks["compiled"].rounds:
            assert r.serial_chosen in (None, r.chosen)
        decided = [r for r in walks["compiled"].rounds if r.forwards]
        assert decided and all(r.forwards <= 2 for r in decided)


def test_json_failures_are_counted_not_fatal(setup):
    tok, model, papers = setup
    records = evaluate(model, tok, papers[:1], ["json", "unary"], k=4, b=2, budgets=[200, 400], limit=3,
                       check_against_serial=False, progress=False)
    table = summarise(records, papers[:1], [200, 400])
    assert table["json"]["400"]["protocol_failures"] >= 1  # a random model does not write valid JSON
    assert set(table["json"]["400"]["failure_classes"]) <= {"syntax", "unknown identifier", "wrong cardinality"}
    assert table["unary"]["400"]["protocol_failures"] == 0


@pytest.mark.parametrize("text, numbers, failure", [
    ('{"sections": [2, 3]}', [2, 3], None),
    ('sure! {"sections": ["[1]", 4]} done', [1, 4], None),
    ('{"sections": [2]}', [2], "wrong cardinality"),
    ('{"sections": [2, 2]}', [2], "wrong cardinality"),
    ('{"sections": [9, 1]}', [1], "unknown identifier"),
    ('{"sections": [1, 3', [], "syntax"),
    ("I pick 1 and 2", [], "syntax"),
])
def test_parse_json_selection(text, numbers, failure):
    assert parse_json_selection(text, k=4, b=2) == (numbers, failure)


def test_smaller_budget_is_a_prefix_walk(setup):
    tok, model, papers = setup
    tree = build_tree(papers[1])
    question = papers[1].questions[0].question
    big = HierarchicalRetriever(model, tok, k=4, b=2, budget_tokens=600, preview_chars=40).retrieve(tree, question)
    small = HierarchicalRetriever(model, tok, k=4, b=2, budget_tokens=250, preview_chars=40).retrieve(tree, question)
    cut = big.within(250)
    assert cut.evidence == small.evidence
    assert [r.chosen for r in cut.rounds] == [r.chosen for r in small.rounds]


def test_b_larger_than_k_is_refused(setup):
    tok, model, _ = setup
    with pytest.raises(ValueError, match="larger than k"):
        HierarchicalRetriever(model, tok, k=2, b=3)


def test_two_processes_equal_one(setup, tmp_path):
    tok, model, _ = setup
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    common = ["rag-eval", "--model", str(tmp_path / "model"), "--interfaces", "compiled,unary", "--k", "4", "--b", "2",
              "--budgets", "200,400", "--limit", "4", "--no-progress", "--no-serial-check"]
    one = tmp_path / "one.json"
    two = tmp_path / "two.json"
    env = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    subprocess.run([sys.executable, "-m", "hf_treegen.cli", *common, "--json", str(one)], check=True, env=env,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2",
                    "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                    "-m", "hf_treegen.cli", *common, "--json", str(two)], check=True, env=env, capture_output=True)
    a, b = json.loads(one.read_text()), json.loads(two.read_text())
    strip = lambda recs: [{k: v for k, v in r.items() if k not in ("rounds",)} | {
        "budgets": {bk: {x: y for x, y in bv.items() if x != "control_seconds"} for bk, bv in r["budgets"].items()}}
        for r in recs]
    assert strip(a["records"]) == strip(b["records"])
    assert len(a["records"]) == 4 * (2 + 4)  # 4 questions x (2 interfaces + the 4 baselines, on by default)


def test_unmapped_evidence_is_reported(setup):
    import dataclasses

    from hf_treegen.rag.evaluation import unmapped_evidence

    _, _, papers = setup
    paper = papers[0]
    q = paper.questions[0]
    broken_answer = dataclasses.replace(q.answers[0], unanswerable=False, evidence=("a paragraph that is not there",))
    broken = dataclasses.replace(paper, questions=(dataclasses.replace(q, answers=(broken_answer,)),) + paper.questions[1:])
    ids = {x.question_id for x in paper.questions}
    assert unmapped_evidence([paper], ids) == []
    assert unmapped_evidence([broken], ids) == [q.question_id]
