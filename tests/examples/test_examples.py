"""The scripts in examples/ run as a user runs them: --help, the smallest real run, and user mistakes
refused with one line (exit status 2, no traceback)."""

from __future__ import annotations

import pytest

from tests.examples.conftest import EXAMPLES, run_example

SCRIPTS = ("tree_generation.py", "compiled_choice.py", "qasper_rag.py", "train_drafter.py", "custom_generate_hub.py",
           "vllm_serving.py")


def test_every_script_is_listed_in_the_readme():
    readme = (EXAMPLES / "README.md").read_text()
    on_disk = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert on_disk == sorted(SCRIPTS + ("example_setup.py",))  # the scripts and the module they share
    assert "`example_setup.py`" in readme
    for name in SCRIPTS:
        assert f"`{name}`" in readme, name


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    result = run_example(script, "--help", timeout=120, pinned_costs=False)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "--model" in result.stdout
    assert "default" in result.stdout


def _ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.real_model
def test_tree_generation_smallest():
    out = _ok(run_example("tree_generation.py", "--prompts", "1", "--max-new-tokens", "8",
                          "--strategies", "chain,conditional,auto"))
    assert "greedy outputs identical to stock generate(): chain 1/1, conditional 1/1, auto 1/1" in out
    assert "stock generate()" in out and "tau" in out


@pytest.mark.real_model
def test_compiled_choice_smallest():
    out = _ok(run_example("compiled_choice.py", "--prompts", "1", "--n", "2", "--engines", "serial,chunked,compiled"))
    assert "compiled picks identical to serial constrained decoding on every prompt" in out
    assert "same token ids as SerialChoiceProcessor: True" in out


@pytest.mark.real_model
def test_qasper_rag_smallest(tmp_path):
    out = _ok(run_example("qasper_rag.py", "--questions", "1", "--max-rounds", "1", "--json", str(tmp_path / "rag.json")))
    assert "AllEv@K" in out and "evaluate modules, compiled at K=500: Answer F1" in out
    assert "compiled chose what serial chose in 100% of the checked rounds" in out
    assert (tmp_path / "rag.json").is_file()


@pytest.mark.real_model
def test_train_drafter_smallest(tmp_path):
    out = _ok(run_example("train_drafter.py", "--prompt-source", "quick", "--prompts", "4", "--max-new-tokens", "12",
                          "--steps", "2", "--out", str(tmp_path / "run")))
    assert "2. training: 2 steps" in out
    assert "greedy output identical to stock generate()" in out
    assert (tmp_path / "run" / "run" / "drafter" / "model.safetensors").is_file()


@pytest.mark.real_model
def test_custom_generate_hub_smallest():
    out = _ok(run_example("custom_generate_hub.py", "--max-new-tokens", "8"))
    assert "enable()d: False" in out
    assert "tree_strategy='conditional', tree_budget=8)" in out
    assert out.count("greedy output identical to stock generate()") == 2
    assert "without tree_strategy: identical" in out


MISTAKES = [
    ("tree_generation.py", ["--strategies", "chain,nope"], "unknown ['nope']"),
    ("tree_generation.py", ["--model", "some/model"], "--model needs --drafter"),
    ("tree_generation.py", ["--prompts", "0"], "must be at least 1"),
    ("tree_generation.py", ["--device", "tpu-ish"], "--device tpu-ish"),
    ("compiled_choice.py", ["--k", "6", "--n", "7"], "every --n must be at most every --k"),
    ("compiled_choice.py", ["--engines", "serial,magic"], "unknown ['magic']"),
    ("compiled_choice.py", ["--k", "x"], "expected comma-separated integers"),
    ("qasper_rag.py", ["--b", "7"], "--b 7 is larger than --k 6"),
    ("qasper_rag.py", ["--data", "/nonexistent/qasper.json"], "--data /nonexistent/qasper.json"),
    ("qasper_rag.py", ["--interfaces", "compiled,psychic"], "unknown ['psychic']"),
    ("train_drafter.py", ["--prompts", "1"], "--prompts must be at least 2"),
    ("train_drafter.py", ["--init", "shipped", "--model", "x/y"], "--init shipped"),
    ("custom_generate_hub.py", ["--custom-generate", "/tmp"], "has no custom_generate/generate.py"),
    ("custom_generate_hub.py", ["--drafter", "x/y"], "--drafter needs --model"),
    # a Hub id that cannot be fetched (the tests run with HF_HUB_OFFLINE=1): transformers' several lines become one
    ("tree_generation.py", ["--model", "someone/no-model", "--drafter", "someone/no-drafter"],
     "could not load the model or drafter"),
    ("train_drafter.py", ["--init", "someone/no-drafter", "--prompt-source", "quick"], "--init someone/no-drafter"),
]


@pytest.mark.parametrize("script,args,message", MISTAKES, ids=[f"{s}:{' '.join(a)}" for s, a, _ in MISTAKES])
def test_user_mistakes_get_one_line(script, args, message):
    result = run_example(script, *args, timeout=300, pinned_costs=False)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr
