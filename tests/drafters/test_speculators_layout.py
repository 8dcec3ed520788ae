"""The speculators layout in both directions: what we write reads back identically, folders meant for
another target or another family are refused by name. (Parity with speculators' own code runs in its
virtualenv: tests/speculators.)"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

import hf_treegen as htg
from tests.helpers import tiny_dflash2, tiny_domino, tiny_drafter, tiny_dspark, tiny_target

MAKERS = {"dflash": tiny_drafter, "dflash2": tiny_dflash2, "dspark": tiny_dspark}


def drafted(drafter, rows=6, anchor=7):
    session = drafter.new_session()
    session.extend(torch.randn(rows, drafter.config.feature_size, generator=torch.Generator().manual_seed(0)),
                   torch.arange(rows))
    return session.draft(anchor, rows)


@pytest.mark.parametrize("draft_vocab", [False, True], ids=["full_vocab", "draft_vocab"])
@pytest.mark.parametrize("family", list(MAKERS))
def test_a_speculators_folder_reads_back_as_the_drafter_that_wrote_it(tmp_path, family, draft_vocab):
    target = tiny_target("qwen3", layers=4)
    drafter = MAKERS[family](target)
    if draft_vocab and family != "dflash2":  # (speculators' DFlash2 drafts over the full vocabulary)
        drafter.set_draft_vocab(torch.arange(0, target.config.vocab_size, 3))
    drafter.save_pretrained(tmp_path, format="speculators")
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["speculators_model_type"] == family
    assert config["aux_hidden_state_layer_ids"] == [i + 1 for i in drafter.config.target_layer_ids]
    assert config["transformer_layer_config"]["hidden_act"] == "silu"  # vLLM reads it without a default
    tensors = load_file(str(tmp_path / "model.safetensors"))
    assert ("t2d" in tensors) == ("lm_head.weight" in tensors) == (drafter.draft_vocab is not None)
    loaded = htg.load_drafter(tmp_path, target=target)
    assert type(loaded) is type(drafter) and loaded.config.family == family
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert torch.equal(drafted(loaded).logits, drafted(drafter).logits)


def write_speculators(tmp_path, family="dspark", **config_changes):
    target = tiny_target("qwen3", layers=4)
    drafter = MAKERS[family](target)
    drafter.set_draft_vocab(torch.arange(0, target.config.vocab_size, 2)) if family != "dflash2" else None
    drafter.save_pretrained(tmp_path, format="speculators")
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(config_changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return target


def test_a_folder_for_another_vocabulary_is_refused(tmp_path):
    write_speculators(tmp_path)
    other = tiny_target("qwen3", layers=4, vocab=300)
    with pytest.raises(ValueError, match="drafter vocab_size=256 but the target has 300"):
        htg.load_drafter(tmp_path, target=other)


def test_a_folder_for_another_hidden_size_is_refused(tmp_path):
    write_speculators(tmp_path)
    other = tiny_target("qwen3", layers=4, hidden=32)
    with pytest.raises(ValueError, match="drafter hidden_size=64 but the target has 32"):
        htg.load_drafter(tmp_path, target=other)


def test_a_head_that_is_not_the_targets_is_refused(tmp_path):
    target = write_speculators(tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1.0
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="lm_head.weight differs from the target's"):
        htg.load_drafter(tmp_path, target=target)


def test_a_dspark_folder_loaded_as_plain_dflash_is_refused(tmp_path):
    target = write_speculators(tmp_path)
    with pytest.raises(ValueError, match="is a DSpark checkpoint.*DSparkDrafter"):
        htg.DFlashDrafter.from_pretrained(tmp_path, target=target)


@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_an_unknown_speculators_model_type_is_named(tmp_path, kind):
    target = write_speculators(tmp_path, speculators_model_type=kind)
    with pytest.raises(ValueError, match=f"speculators_model_type '{kind}' is not a drafter family"):
        htg.load_drafter(tmp_path, target=target)


def test_a_markov_head_we_do_not_implement_is_named(tmp_path):
    target = write_speculators(tmp_path, markov_head_type="rnn")
    with pytest.raises(ValueError, match="markov_head_type 'rnn' is not supported"):
        htg.load_drafter(tmp_path, target=target)


def test_taps_outside_the_layer_outputs_are_refused(tmp_path):
    target = write_speculators(tmp_path, aux_hidden_state_layer_ids=[1, 4])  # 4 = the last output before the norm
    with pytest.raises(ValueError, match="aux_hidden_state_layer_ids"):
        htg.load_drafter(tmp_path, target=target)


def test_layouts_that_cannot_say_a_drafter_are_refused(tmp_path):
    target = tiny_target("qwen3", layers=4)
    with pytest.raises(ValueError, match="no speculators layout"):
        tiny_domino(target).save_pretrained(tmp_path / "domino", format="speculators")
    with pytest.raises(ValueError, match="format must be one of"):
        tiny_drafter(target).save_pretrained(tmp_path / "x", format="vllm")
    assert not (tmp_path / "domino").exists() and not (tmp_path / "x").exists()  # nothing half-written


def test_convert_rewrites_a_folder_in_the_other_layout_and_back(tmp_path, capsys):
    from hf_treegen.cli import main

    target = tiny_target("qwen3", layers=4)
    target.save_pretrained(tmp_path / "target")
    drafter = tiny_dspark(target)
    drafter.set_draft_vocab(torch.arange(0, target.config.vocab_size, 2))
    drafter.save_pretrained(tmp_path / "zlab")
    common = ["--model", str(tmp_path / "target")]
    assert main(["convert", str(tmp_path / "zlab"), "--to", "speculators", "--out", str(tmp_path / "spec"),
                 "--verifier", "org/tiny", *common]) == 0
    config = json.loads((tmp_path / "spec" / "config.json").read_text())
    assert config["speculators_model_type"] == "dspark"
    assert config["speculators_config"]["verifier"]["name_or_path"] == "org/tiny"
    assert main(["convert", str(tmp_path / "spec"), "--to", "zlab", "--out", str(tmp_path / "back"), *common]) == 0
    back = htg.load_drafter(tmp_path / "back", target=target)
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), name
    assert main(["convert", str(tmp_path / "zlab"), "--to", "speculators", "--out", str(tmp_path / "zlab"),
                 *common]) == 2
    assert main(["convert", str(tmp_path / "zlab"), "--to", "speculators", "--out", str(tmp_path / "x"),
                 "--model", str(tmp_path / "nowhere")]) == 2
    assert "Traceback" not in capsys.readouterr().err
