"""Domino drafter: the GRU head, released and legacy checkpoint layouts, and the DFlash/Domino checks."""

import json

import pytest
import torch
from safetensors.torch import save_file

import hf_treegen as htg
from tests.drafters.test_dflash import write_released_checkpoint
from tests.helpers import tiny_domino, tiny_domino_config, tiny_drafter, tiny_target


def test_gru_step_equals_torch_gru():
    model = tiny_target("qwen3", torch.float64)
    drafter = tiny_domino(model)
    tokens = torch.tensor([3, 17, 42, 99])
    state = drafter.zero_state()
    for t in tokens:
        state = drafter.gru_step(state, t[None])
    emb = drafter.embed(tokens)[None]  # (1, 4, H)
    _, h = drafter.prefix_gru(emb)
    assert torch.allclose(state, h[0], atol=1e-12)


def test_shift_label_drafts_every_row_and_corrects_after_the_prefix():
    model = tiny_target("llama", torch.float32)
    drafter = tiny_domino(model, block_size=8)
    assert drafter.config.num_draft_positions == 8 and drafter.correction_start == 1
    session = drafter.new_session()
    session.extend(torch.randn(5, drafter.config.feature_size), torch.arange(5))
    block = session.draft(7, 5)
    assert isinstance(block, htg.drafters.DominoBlock) and block.logits.shape == (8, model.config.vocab_size)
    chain = drafter.released_greedy_chain(block)
    assert chain[0] == int(block.logits[0].argmax())  # row 0 is never corrected


@pytest.mark.parametrize("legacy, architecture", [(False, "DFlashDraftModel"), (True, "DominoDraftModel"),
                                                  (False, "DominoDraftModel")])
def test_released_and_legacy_layouts_load(tmp_path, legacy, architecture):
    model = tiny_target("qwen3")
    drafter = tiny_domino(model)
    write_released_checkpoint(tmp_path, drafter)
    state = drafter.state_dict()
    head = ("prefix_gru.", "embed_proj.")
    assert {"prefix_gru.weight_ih_l0", "prefix_gru.weight_hh_l0", "embed_proj.0.weight",
            "embed_proj.2.weight"} <= set(state)
    if legacy:
        state = {("logit_head." + k if k.startswith(head) else k): v for k, v in state.items()}
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["architectures"] = [architecture]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = htg.DominoDrafter.from_pretrained(tmp_path, target=model)
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_dflash_checkpoint_loaded_as_domino_is_refused(tmp_path):
    model = tiny_target("llama")
    write_released_checkpoint(tmp_path, tiny_drafter(model))
    with pytest.raises(ValueError, match="plain DFlash checkpoint"):
        htg.DominoDrafter.from_pretrained(tmp_path, target=model)


def test_wrong_config_kind_is_refused():
    model = tiny_target("llama")
    with pytest.raises(ValueError, match="projector_type='domino'"):
        htg.DominoDrafter(htg.DrafterConfig.for_target(model.config), target=model)
    with pytest.raises(ValueError, match="DominoDrafter, not DFlashDrafter"):
        htg.DFlashDrafter(tiny_domino_config(model), target=model)
    with pytest.raises(ValueError, match="emb_dim"):
        htg.DrafterConfig.for_target(model.config, projector_type="domino", emb_dim=None)


def test_gru_input_table_matches_the_direct_product_and_tracks_weight_updates():
    model = tiny_target("llama", torch.float64)
    drafter = tiny_domino(model)
    tokens = torch.tensor([0, 5, 255, 17])
    direct = torch.nn.functional.linear(drafter.embed(tokens), drafter.prefix_gru.weight_ih_l0).detach()
    with torch.no_grad():
        assert torch.allclose(drafter.gru_inputs(tokens), direct, atol=1e-12)
        drafter.prefix_gru.weight_ih_l0.mul_(2.0)  # an in-place update (as an optimizer step) invalidates it
        assert torch.allclose(drafter.gru_inputs(tokens), 2 * direct, atol=1e-12)
