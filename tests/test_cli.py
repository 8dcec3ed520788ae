"""The command line follows argparse habits: help on every option with its default, --version, and a
user mistake ends in one line on stderr with exit status 2, before any model loads."""

import argparse
from pathlib import Path

import pytest

from hf_treegen.cli import build_parser, main


def _subcommands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_option_of_every_command_has_help():
    missing = [f"{name} {action.option_strings or action.dest}" for name, command in _subcommands().items()
               for action in command._actions if not isinstance(action, argparse._HelpAction) and not action.help]
    assert not missing


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["generate", "--help"])
    assert stop.value.code == 0
    assert "(default: auto)" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("hf-treegen ")


@pytest.mark.parametrize("argv, message", [
    (["generate", "hi", "--budget", "0"], "--budget: expected a whole number >= 1"),
    (["generate", "hi", "--max-new-tokens", "0"], "--max-new-tokens: expected a whole number >= 1"),
    (["generate", "hi", "--temperature", "-1"], "--temperature: expected a number >= 0"),
    (["generate", "hi", "--strategy", "dominotree"], "--strategy: Unknown tree_strategy 'dominotree'"),
    (["generate", "hi", "--strategy", "auto+paths0"], "--strategy: unknown or malformed suffix +paths0"),
    (["generate", "hi", "--strategy", "auto+inside-2"], "--strategy: unknown or malformed suffix +inside-2"),
    (["generate", "hi", "--strategy", "auto@0"], "--strategy: a budget suffix is a positive int"),
    (["bench", "--temperatures", "0,x"], "--temperatures: expected comma-separated numbers"),
    (["choose", "q", "--labels", "a|b", "--width", "wide"], "--width: expected auto or a whole number"),
    (["choose-bench", "--k", "5,0"], "--k: expected comma-separated whole numbers >= 1"),
    (["rag-eval", "--split", "dev"], "invalid choice: 'dev'"),
    (["draft-vocab", "--drafter", "d", "--data", "c", "--out", "o", "--size", "0"], "--size: expected a whole number >= 1"),
    (["train-drafter", "--data", "x", "--out", "y", "--lr", "-1"], "--lr: expected a number >= 0"),
    (["generate", "hi", "--device", "gpu"], "--device: expected auto, cpu, cuda or cuda:N"),
    (["bench", "--device", "cuda:99"], "cuda:99: this machine has"),
    (["generate-data", "--source", "chat", "--out", "o", "--dtype", "fp8"], "invalid choice: 'fp8'"),
])
def test_argument_mistakes_stop_argparse_with_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["choose", "q", "--labels", "a|b|a"], "repeats a label"),
    (["choose", "q", "--labels", "a||b"], "an empty label"),
    (["choose", "q", "--labels", "a|b", "--num-select", "3"], "more than the 2 labels"),
    (["generate", "hi", "--drafter", "./no/such/folder"], "no such drafter folder"),
])
def test_user_mistakes_are_one_line_before_any_model_loads(capsys, monkeypatch, argv, message):
    import hf_treegen.cli as cli

    def no_loading(*_, **__):
        raise AssertionError("the model was loaded before the mistake was reported")

    monkeypatch.setattr(cli, "_load_model", no_loading)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["generate hi", "bench", "demo", "calibrate", "choose q --labels a|b"])
def test_commands_that_run_the_target_put_it_on_the_device_asked_for(monkeypatch, command):
    import hf_treegen.cli as cli

    seen = []

    def stop_at_loading(args):
        seen.append(cli.resolve_device(args.device))
        raise KeyboardInterrupt  # stops the command cleanly before any model loads

    monkeypatch.setattr(cli, "_load_model", stop_at_loading)
    assert main([*command.split(), "--device", "cpu"]) == 130
    assert main(command.split()) == 130  # auto: the GPU when there is one
    assert seen == [cli.torch.device("cpu"), cli.torch.device("cuda" if cli.torch.cuda.is_available() else "cpu")]


def test_rag_eval_quick_is_a_preset_that_options_beside_it_override(monkeypatch):
    import hf_treegen.cli as cli

    seen = []
    monkeypatch.setattr(cli, "cmd_rag_eval", lambda args: seen.append(args) or 0)
    assert main(["rag-eval", "--quick"]) == 0
    assert main(["rag-eval", "--quick", "--budgets", "800", "--interfaces", "compiled"]) == 0
    assert main(["rag-eval"]) == 0
    quick, overridden, full = seen
    assert {k: getattr(quick, k) for k in cli.RAG_QUICK_DEFAULTS} == cli.RAG_QUICK_DEFAULTS
    assert overridden.budgets == [800] and overridden.interfaces == "compiled" and overridden.limit == 2
    assert full.limit is None and full.budgets == [1000, 2000]


@pytest.mark.parametrize("native, dtype, warned", [(False, "bf16", True), (True, "bf16", False),
                                                    (False, "fp32", False)])
def test_bf16_on_a_cpu_without_native_bf16_says_it_will_be_slow(capsys, monkeypatch, native, dtype, warned):
    import hf_treegen.cli as cli
    import hf_treegen.ops

    monkeypatch.setattr(hf_treegen.ops, "native_bf16_matmuls", lambda device="cpu": native)
    monkeypatch.setattr(cli.torch.cuda, "is_available", lambda: False)
    cli._warn_emulated_bf16(dtype)
    assert ("no native bf16 matmuls" in capsys.readouterr().err) is warned


def test_datastore_refuses_corpora_that_the_target_did_not_write(capsys, monkeypatch, tmp_path):
    import hf_treegen.cli as cli

    monkeypatch.setattr(cli, "_load_model", lambda *_, **__: pytest.fail("the model was loaded before the mistake"))
    corpora = Path(__file__).resolve().parents[1] / "data" / "drafter"
    for data, message in [(corpora / "smollm2-tf", "a teacher-forced corpus holds existing text"),
                          (tmp_path / "nope", "no such corpus folder")]:
        assert main(["datastore", "--drafter", "d", "--data", str(data), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "o").exists()  # nothing written


@pytest.mark.real_model
def test_datastore_writes_a_drafter_that_loads_with_it(capsys, tmp_path):
    import hf_treegen as htg
    from hf_treegen.models import DEFAULT_DRAFTER_DIR, load_default_pair

    corpus = Path(__file__).resolve().parents[1] / "data" / "drafter" / "smollm2-chat"
    assert main(["datastore", "--drafter", str(DEFAULT_DRAFTER_DIR), "--data", str(corpus),
                 "--out", str(tmp_path / "d")]) == 0
    assert "datastore of 4657 answers" in capsys.readouterr().out
    model, _, shipped = load_default_pair()
    drafter = htg.DominoDrafter.from_pretrained(tmp_path / "d", model)
    assert drafter.datastore is not None and 0 < len(drafter.datastore) < len(shipped.datastore)
    assert (tmp_path / "d" / "model.safetensors").read_bytes() == (DEFAULT_DRAFTER_DIR / "model.safetensors").read_bytes()
