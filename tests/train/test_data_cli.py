"""hf-treegen generate-data: a prompt file answered by a local model, resumable, and clear user errors."""

from __future__ import annotations

import json

import pytest

from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.cli import main as cli_main
from hf_treegen.train.data import load_corpus, read_manifest
from tests.helpers import byte_tokenizer, tiny_target


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("target")
    tiny_target("llama", vocab=272, layers=2, hidden=64).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def _prompt_file(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def _generate(target_dir, source, out, *extra):
    return cli_main(["generate-data", "--source", str(source), "--out", str(out), "--model", str(target_dir),
                     "--max-new-tokens", "6", "--batch-size", "2", "--threads", "1", "--no-progress", *extra])


def test_a_prompt_file_is_answered_without_the_evaluation_prompts_and_resumes(target_dir, tmp_path, capsys):
    own = ["Name a fruit.", "Say hello to a friend.", "Count to three.", "Describe a cloud."]
    evaluation = builtin_prompts("chat")[0]
    source = _prompt_file(tmp_path / "prompts.jsonl", own[:2] + [evaluation] + own[2:])
    out = tmp_path / "corpus"
    assert _generate(target_dir, source, out, "--num-prompts", "3") == 0
    assert "3 prompts from" in capsys.readouterr().out
    assert read_manifest(out)["num_sequences"] == 3 and read_manifest(out)["model"] == target_dir.name
    # a larger prompt count later appends the rest; prompts already answered are not asked again
    assert _generate(target_dir, source, out) == 0
    printed = capsys.readouterr().out
    assert "4 prompts from" in printed and "; 1 built-in evaluation prompt left out" in printed
    report = json.loads(printed.split("\n", 2)[2])
    assert report["this_run"]["sequences"] == 1 and report["corpus"]["num_sequences"] == 4
    corpus = load_corpus(out)
    assert len(corpus) == 4 and all(len(ids) > start for ids, start in corpus)


@pytest.mark.parametrize("problem", ["missing", "not_json", "only_eval"])
def test_a_bad_source_is_one_line_and_writes_nothing(target_dir, tmp_path, capsys, problem):
    source = {"missing": tmp_path / "nope.jsonl",
              "not_json": _prompt_file(tmp_path / "p.jsonl", []),
              "only_eval": _prompt_file(tmp_path / "p.jsonl", builtin_prompts("code")[:2])}[problem]
    if problem == "not_json":
        source.write_text("Name a fruit.\n")
    out = tmp_path / "corpus"
    assert _generate(target_dir, source, out) == 2
    err = capsys.readouterr().err
    assert err.startswith("hf-treegen generate-data: error:") and err.count("\n") == 1
    assert {"missing": "not python, chat, exercises, questions or an existing JSONL file", "not_json": "not valid JSON",
            "only_eval": "no prompts left"}[problem] in err
    assert not out.exists()


def test_a_model_without_chat_template_is_refused(tmp_path, capsys):
    folder = tmp_path / "base"
    tiny_target("llama", vocab=272, layers=2, hidden=64).save_pretrained(folder)
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = None
    tokenizer.save_pretrained(folder)
    out = tmp_path / "corpus"
    assert _generate(folder, _prompt_file(tmp_path / "p.jsonl", ["Name a fruit."]), out) == 2
    assert "has no chat template" in capsys.readouterr().err and not out.exists()


def test_a_missing_model_is_one_line(tmp_path, capsys):
    code = _generate(tmp_path / "no-model", _prompt_file(tmp_path / "p.jsonl", ["Name a fruit."]), tmp_path / "c")
    assert code == 2 and capsys.readouterr().err.startswith("hf-treegen generate-data: error: --model")
