import copy
import json
from pathlib import Path

import pytest

from hf_treegen.rag import (
    Answer,
    Paper,
    QasperFormatError,
    Section,
    load_qasper,
    papers_from_hub_rows,
    papers_from_raw,
    papers_to_raw,
)
from hf_treegen.rag import qasper as qasper_module

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def raw():
    return json.loads((FIXTURES / "qasper_raw.json").read_text(encoding="utf-8"))


@pytest.fixture
def hub_rows():
    return json.loads((FIXTURES / "qasper_hub_rows.json").read_text(encoding="utf-8"))


def test_both_layouts_load_to_identical_papers(raw, hub_rows):
    from_raw = papers_from_raw(raw)
    from_hub = papers_from_hub_rows(hub_rows)
    assert from_raw == from_hub
    assert [paper.paper_id for paper in from_raw] == ["1909.00694", "2003.00001"]


def test_fields(raw):
    paper, old = papers_from_raw(raw)
    assert paper.title.startswith("Minimally Supervised")
    assert paper.sections[0] == Section("Introduction", tuple(raw["1909.00694"]["full_text"][0]["paragraphs"]))
    assert paper.sections[7].name == "" and paper.sections[8].name == ""  # None and "" section names
    assert paper.sections[4].paragraphs == ()
    assert paper.figures_and_tables[1] == ("5-Table1-1.png", "Table 1: Statistics of the AL, CA, and CO datasets.")
    assert old.figures_and_tables == ()  # v0.1 papers have no figures_and_tables key
    q0, q1, q2 = paper.questions
    assert q0.question_id == "753990d0b621d390ed58f20c4d9e4f065f0dc672"
    assert q0.answers[0] == Answer(
        unanswerable=False,
        extractive_spans=("a very small seed lexicon",),
        yes_no=None,
        free_form_answer="",
        evidence=("Our method requires a very small seed lexicon and a large raw corpus.",),
        highlighted_evidence=("Our method requires a very small seed lexicon and a large raw corpus.",),
        annotation_id="31e85022a847f37c15fd0415f3c450c74c8e4755",
        worker_id="c1fbdd7a261021041f75fbe00a55b4c386ebbbb4",
    )
    assert [answer.yes_no for answer in q1.answers] == [True, False]
    assert q2.answers[0].unanswerable is True
    # trailing whitespace in paragraphs is kept verbatim
    assert paper.paragraphs()[1][1].endswith("words.  ")
    assert paper.paragraphs()[0] == ("Introduction", raw["1909.00694"]["full_text"][0]["paragraphs"][0])
    assert len(paper.paragraphs()) == 11
    with pytest.raises(AttributeError):
        paper.title = "x"  # frozen


def test_to_raw_round_trip(raw, hub_rows):
    papers = papers_from_hub_rows(hub_rows)
    written = papers_to_raw(papers)
    assert papers_from_raw(json.loads(json.dumps(written))) == papers
    # what the official evaluator reads survives exactly
    for paper_id, record in raw.items():
        for question, written_question in zip(record["qas"], written[paper_id]["qas"]):
            assert written_question["question_id"] == question["question_id"]
            for answer, written_answer in zip(question["answers"], written_question["answers"]):
                assert written_answer["answer"] == answer["answer"]
        assert [s["paragraphs"] for s in written[paper_id]["full_text"]] == [s["paragraphs"] for s in record["full_text"]]
    # a None section name is written back as ""
    assert written["1909.00694"]["full_text"][7]["section_name"] == ""
    assert written["2003.00001"]["figures_and_tables"] == []


def _raises(match, fn, *args):
    with pytest.raises(QasperFormatError) as info:
        fn(*args)
    assert match in str(info.value), str(info.value)
    return str(info.value)


def test_raw_errors_name_paper_and_field(raw):
    bad = copy.deepcopy(raw)
    bad["1909.00694"]["qas"][2]["answers"][0]["answer"]["yes_no"] = "maybe"
    message = _raises("paper 1909.00694: qas[2].answers[0].answer.yes_no must be bool or null, got 'maybe'", papers_from_raw, bad)
    assert isinstance(QasperFormatError(message), ValueError)

    bad = copy.deepcopy(raw)
    bad["1909.00694"]["full_text"][3]["paragraphs"][1] = None
    _raises("paper 1909.00694: full_text[3].paragraphs[1] must be a string", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    bad["2003.00001"]["full_text"][0]["section_name"] = 3
    _raises("paper 2003.00001: full_text[0].section_name must be a string or null", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    del bad["2003.00001"]["qas"][0]["answers"][0]["answer"]["evidence"]
    _raises("paper 2003.00001: qas[0].answers[0].answer.evidence is missing", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    bad["1909.00694"]["qas"][0]["answers"][1]["answer"]["unanswerable"] = 0
    _raises("paper 1909.00694: qas[0].answers[1].answer.unanswerable must be bool", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    bad["1909.00694"]["qas"][1]["answers"][0]["answer"]["extractive_spans"] = "a span"
    _raises("paper 1909.00694: qas[1].answers[0].answer.extractive_spans must be a list", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    bad["1909.00694"]["figures_and_tables"][0]["caption"] = None
    _raises("paper 1909.00694: figures_and_tables[0].caption must be a string", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    del bad["2003.00001"]["title"]
    _raises("paper 2003.00001: title is missing", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    bad["2003.00001"]["qas"][0]["question_id"] = 17
    _raises("paper 2003.00001: qas[0].question_id must be a string", papers_from_raw, bad)

    bad = copy.deepcopy(raw)
    bad["2003.00001"]["qas"][0]["answers"][0]["worker_id"] = None
    _raises("paper 2003.00001: qas[0].answers[0].worker_id must be a string", papers_from_raw, bad)

    _raises("use papers_from_hub_rows", papers_from_raw, [])


def test_hub_errors_name_paper_and_field(hub_rows):
    bad = copy.deepcopy(hub_rows)
    bad[0]["qas"]["answers"][2]["answer"][0]["yes_no"] = "maybe"
    _raises("paper 1909.00694: qas.answers[2].answer[0].yes_no must be bool or null, got 'maybe'", papers_from_hub_rows, bad)

    bad = copy.deepcopy(hub_rows)
    bad[0]["full_text"]["paragraphs"].pop()
    _raises("paper 1909.00694: full_text columns must have one length", papers_from_hub_rows, bad)

    bad = copy.deepcopy(hub_rows)
    bad[1]["qas"]["answers"][0]["worker_id"] = []
    _raises("paper 2003.00001: qas.answers[0] columns must have one length", papers_from_hub_rows, bad)

    bad = copy.deepcopy(hub_rows)
    bad[0]["full_text"] = [{"section_name": "Intro", "paragraphs": []}]  # list of dicts, not dict of lists
    _raises("paper 1909.00694: full_text must be a dict", papers_from_hub_rows, bad)

    bad = copy.deepcopy(hub_rows)
    bad[1]["figures_and_tables"]["file"] = [1]
    bad[1]["figures_and_tables"]["caption"] = ["c"]
    _raises("paper 2003.00001: figures_and_tables.file[0] must be a string", papers_from_hub_rows, bad)

    bad = copy.deepcopy(hub_rows)
    del bad[1]["id"]
    _raises("row 1: id is missing", papers_from_hub_rows, bad)

    _raises("id appears in more than one row", papers_from_hub_rows, [hub_rows[0], hub_rows[0]])
    _raises("use papers_from_raw", papers_from_hub_rows, {"1909.00694": {}})


def test_hub_rows_without_figures_column(hub_rows):
    rows = copy.deepcopy(hub_rows)
    del rows[1]["figures_and_tables"]
    rows[0]["figures_and_tables"] = None
    papers = papers_from_hub_rows(iter(rows))
    assert papers[0].figures_and_tables == () and papers[1].figures_and_tables == ()


def test_load_qasper_from_path(tmp_path, raw):
    path = tmp_path / "qasper-dev-v0.3.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    assert load_qasper(source=str(path)) == papers_from_raw(raw)
    assert load_qasper(source=path) == papers_from_raw(raw)
    # a directory holding the release picks the file by split (validation -> dev)
    assert load_qasper("validation", source=tmp_path) == papers_from_raw(raw)
    with pytest.raises(FileNotFoundError):
        load_qasper("test", source=tmp_path)
    with pytest.raises(FileNotFoundError):
        load_qasper(source=str(tmp_path / "missing.json"))


def test_load_qasper_offline(tmp_path, monkeypatch, raw):
    monkeypatch.setattr(qasper_module, "OFFLINE_DATA_PATH", tmp_path / "pydocs_qasper.json")
    with pytest.raises(FileNotFoundError, match="scripts/build_offline_qasper.py"):
        load_qasper(source="offline")
    (tmp_path / "pydocs_qasper.json").write_text(json.dumps(raw), encoding="utf-8")
    # a single split: every split name gives it
    assert load_qasper("validation", source="offline") == load_qasper("test", source="offline") == papers_from_raw(raw)


def test_load_qasper_hub_offline_raises_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))  # nothing cached there
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    with pytest.raises(RuntimeError) as info:
        load_qasper("dev", source="hub")
    message = str(info.value)
    assert "unreachable" in message and "source='offline'" in message and "qasper-dev-v0.3.json" in message


def test_load_qasper_unknown_split():
    with pytest.raises(ValueError, match="unknown QASPER split"):
        load_qasper("eval", source="hub")


@pytest.mark.parametrize("damage", [lambda text: text[: len(text) // 2].encode(),  # a truncated download
                                    lambda text: b"\xff\xfe" + text.encode()])  # not UTF-8
def test_broken_raw_files_are_named(raw, tmp_path, damage):
    path = tmp_path / "qasper-dev-v0.3.json"
    path.write_bytes(damage(json.dumps(raw)))
    with pytest.raises(ValueError, match=str(path)):
        load_qasper("validation", source=path)


def test_field_errors_in_a_raw_file_name_the_file(raw, tmp_path):
    broken = copy.deepcopy(raw)
    next(iter(broken.values()))["qas"][0]["answers"][0]["answer"]["extractive_spans"] = "x"
    path = tmp_path / "qasper-dev-v0.3.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(ValueError, match=f"{path}.*extractive_spans"):
        load_qasper("validation", source=path)
