"""DFlash drafter: config layouts, checkpoint loading by released tensor names, and the draft itself."""

import json

import pytest
import torch
from safetensors.torch import save_file

import hf_treegen as htg
from hf_treegen.drafters.config import default_target_layer_ids
from tests.helpers import tiny_drafter, tiny_target


def released_config(drafter_config, nested=True) -> dict:
    """A config.json the way z-lab ships it (drafter fields nested or at the top level)."""
    cfg = drafter_config.to_dict()
    if not nested:
        cfg.update(cfg.pop("dflash_config"))
    return cfg


def write_released_checkpoint(path, drafter, nested=True, prefix=""):
    path.mkdir(parents=True, exist_ok=True)
    tensors = {prefix + k: v.contiguous() for k, v in drafter.state_dict().items()}
    # the released layout has no embedding and no lm_head, and these exact names:
    assert "fc.weight" in drafter.state_dict() and "layers.0.self_attn.q_norm.weight" in drafter.state_dict()
    assert not any("embed_tokens" in k or "lm_head" in k for k in tensors)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(released_config(drafter.config, nested)))


def test_default_target_layers_follow_the_released_rule():
    assert default_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)  # the Qwen3 b16 drafters
    assert default_target_layer_ids(30, 1) == (15,)


def test_config_round_trips_through_the_released_layout():
    model = tiny_target("qwen3")
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=2, block_size=16)
    for nested in (True, False):
        again = htg.DrafterConfig.from_dict(released_config(cfg, nested))
        assert again == cfg
    assert cfg.num_draft_positions == 15  # DFlash: rows 1..15 predict themselves


@pytest.mark.parametrize("nested, prefix", [(True, ""), (False, ""), (True, "model.")])
def test_from_pretrained_reads_the_released_layout(tmp_path, nested, prefix):
    model = tiny_target("llama")
    drafter = tiny_drafter(model, block_size=8, layers=2)
    write_released_checkpoint(tmp_path / "ckpt", drafter, nested, prefix)
    loaded = htg.DFlashDrafter.from_pretrained(tmp_path / "ckpt", target=model)
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    a, b = drafter.new_session(), loaded.new_session()
    feats = torch.randn(6, drafter.config.feature_size)
    a.extend(feats, torch.arange(6))
    b.extend(feats, torch.arange(6))
    assert torch.equal(a.draft(5, 6).logits, b.draft(5, 6).logits)


def test_save_pretrained_round_trip(tmp_path):
    model = tiny_target("qwen3")
    drafter = tiny_drafter(model)
    drafter.save_pretrained(tmp_path / "d")
    loaded = htg.DFlashDrafter.from_pretrained(tmp_path / "d", target=model)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in drafter.state_dict().items())


def test_incremental_context_equals_one_shot_context():
    """Feeding committed features round by round gives the same draft as feeding them at once."""
    model = tiny_target("qwen3", torch.float64)
    drafter = tiny_drafter(model)
    feats = torch.randn(12, drafter.config.feature_size, dtype=torch.float64)
    once, pieces = drafter.new_session(), drafter.new_session()
    once.extend(feats, torch.arange(12))
    for lo, hi in ((0, 5), (5, 6), (6, 12)):
        pieces.extend(feats[lo:hi], torch.arange(lo, hi))
    assert torch.allclose(once.draft(3, 12).logits, pieces.draft(3, 12).logits, atol=1e-12)


def test_draft_rows_see_the_whole_block_and_only_the_context():
    """Bidirectional block: changing the anchor changes every row; rows depend on context features."""
    model = tiny_target("llama", torch.float64)
    drafter = tiny_drafter(model)
    feats = torch.randn(8, drafter.config.feature_size, dtype=torch.float64)
    s = drafter.new_session()
    s.extend(feats, torch.arange(8))
    base = s.draft(3, 8)
    assert base.logits.shape == (drafter.config.num_draft_positions, model.config.vocab_size)
    other = s.draft(4, 8)
    assert (base.logits - other.logits).abs().amax(dim=-1).min() > 0
    s2 = drafter.new_session()
    s2.extend(feats * 2, torch.arange(8))
    assert not torch.allclose(s2.draft(3, 8).logits, base.logits)


@pytest.mark.parametrize("drafter_class", ["dflash", "domino"])
def test_sessions_drafted_together_draft_what_each_drafts_alone(drafter_class):
    """draft_all: one forward for several requests, each with its own context length, anchor and start."""
    from hf_treegen.drafters.dflash import DraftSession
    from tests.helpers import tiny_domino

    model = tiny_target("llama", torch.float64)
    drafter = tiny_drafter(model, layers=2) if drafter_class == "dflash" else tiny_domino(model)
    lengths, anchors = (5, 12, 9), (3, 7, 11)
    together, alone = [], []
    for length in lengths:
        feats = torch.randn(length, drafter.config.feature_size, dtype=torch.float64)
        for sessions in (together, alone):
            sessions.append(drafter.new_session())
            sessions[-1].extend(feats, torch.arange(length))
    blocks = DraftSession.draft_all(together, list(anchors), list(lengths))
    for block, session, anchor, length in zip(blocks, alone, anchors, lengths):
        single = session.draft(anchor, length)
        assert torch.allclose(block.logits, single.logits, atol=1e-10)
        assert torch.allclose(block.hidden, single.hidden, atol=1e-10)
        assert getattr(block, "anchor_token", anchor) == anchor
    shallow = DraftSession.draft_all(together, list(anchors), list(lengths), depth=3)
    for block, full in zip(shallow, blocks):
        assert block.logits.shape[0] == 3 and torch.allclose(block.logits, full.logits[:3], atol=1e-10)
    # the block was written after each context, not into it: drafting again gives the same
    again = DraftSession.draft_all(together, list(anchors), list(lengths))
    assert all(torch.equal(a.logits, b.logits) for a, b in zip(blocks, again))


def test_a_long_context_projects_as_its_rows_one_by_one():
    """Long pending contexts are projected in padded stretches (kernel shapes that recur); every real
    row's keys and values are what it gets projected alone, and no padding row reaches the context."""
    from hf_treegen.drafters import dflash

    model = tiny_target("llama", torch.float64)
    drafter = tiny_drafter(model, layers=2)
    length = dflash.PROJECTION_STRETCH + dflash.PROJECTION_QUANTUM + 3  # two stretches, both padded
    feats = torch.randn(length, drafter.config.feature_size, dtype=torch.float64)
    long, rows = drafter.new_session(), drafter.new_session()
    long.extend(feats, torch.arange(length))
    for position in range(length):
        rows.extend(feats[position:position + 1], torch.tensor([position]))
        rows.project_pending()
    for padded, single in zip(long.context, rows.context):
        assert padded.length == single.length == length
        assert torch.allclose(padded.keys[:, :length], single.keys[:, :length], atol=1e-10)
        assert torch.allclose(padded.values[:, :length], single.values[:, :length], atol=1e-10)
    assert torch.allclose(long.draft(5, length).logits, rows.draft(5, length).logits, atol=1e-10)


def test_draft_all_refuses_mismatched_requests():
    from hf_treegen.drafters.dflash import DraftSession

    model = tiny_target("llama")
    first, second = tiny_drafter(model), tiny_drafter(model)
    a, b = first.new_session(), second.new_session()
    for s in (a, b):
        s.extend(torch.randn(4, first.config.feature_size), torch.arange(4))
    with pytest.raises(ValueError, match="one anchor token and one start per session"):
        DraftSession.draft_all([a], [1, 2], [4])
    with pytest.raises(ValueError, match="one drafter"):
        DraftSession.draft_all([a, b], [1, 2], [4, 4])


@pytest.mark.parametrize("field, change", [("vocab_size", 300), ("hidden_size", 96), ("num_hidden_layers", 3)])
def test_drafter_that_does_not_fit_the_target_is_refused(field, change):
    model = tiny_target("llama")
    other = tiny_target("llama", **({"vocab": change} if field == "vocab_size" else
                                    {"hidden": change} if field == "hidden_size" else {"layers": change}))
    drafter = tiny_drafter(other)
    name = "num_target_layers" if field == "num_hidden_layers" else field
    with pytest.raises(ValueError, match=name):
        model.generate(torch.tensor([[1, 2, 3]]), assistant_model=drafter, tree_strategy="chain", max_new_tokens=4)
    with pytest.raises(ValueError, match=name):
        htg.DFlashDrafter(drafter.config, target=model)


def test_domino_checkpoint_loaded_as_dflash_is_refused(tmp_path):
    model = tiny_target("llama")
    drafter = tiny_drafter(model)
    write_released_checkpoint(tmp_path / "domino", drafter)
    # a Domino checkpoint: same backbone, plus the GRU head and projector_type in its config
    cfg = json.loads((tmp_path / "domino" / "config.json").read_text())
    cfg["dflash_config"].update(projector_type="domino", emb_dim=16, gru_hidden_dim=16, shift_label=True,
                                pure_draft_prefix_len=1)
    (tmp_path / "domino" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="Domino checkpoint"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "domino", target=model)
    # the head tensors alone give it away too, even with a DFlash-looking config
    write_released_checkpoint(tmp_path / "legacy", drafter)
    extra = {k: v for k, v in drafter.state_dict().items()}
    extra["logit_head.prefix_gru.weight_ih_l0"] = torch.zeros(48, 64)
    save_file(extra, str(tmp_path / "legacy" / "model.safetensors"))
    with pytest.raises(ValueError, match="Domino checkpoint"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "legacy", target=model)


@pytest.mark.parametrize("override, message", [
    (dict(block_size=1), "block_size"),
    (dict(target_layer_ids=(5,)), "target_layer_ids"),
    (dict(mask_token_id=10_000), "mask_token_id"),
    (dict(projector_type="mystery"), "projector_type"),
    (dict(pure_draft_prefix_len=2), "pure_draft_prefix_len"),
])
def test_bad_drafter_configs_name_the_field(override, message):
    model = tiny_target("llama")
    with pytest.raises(ValueError, match=message):
        htg.DrafterConfig.for_target(model.config, **override)


def test_missing_or_mismatched_checkpoint_tensors_are_reported(tmp_path):
    model = tiny_target("llama")
    drafter = tiny_drafter(model)
    write_released_checkpoint(tmp_path / "c", drafter)
    state = dict(drafter.state_dict())
    state.pop("norm.weight")
    save_file(state, str(tmp_path / "c" / "model.safetensors"))
    with pytest.raises(ValueError, match="missing.*norm.weight"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "c", target=model)
    with pytest.raises(OSError, match="Could not find a drafter"):
        htg.DFlashDrafter.from_pretrained(tmp_path / "nope", target=model, local_files_only=True)
