"""A drafter folder loads an exact file set, and every broken file is named in the error."""

import json

import pytest
import torch
from safetensors.torch import save_file

import hf_treegen as htg
from tests.helpers import tiny_drafter, tiny_target


@pytest.fixture
def saved(tmp_path):
    model = tiny_target("llama")
    drafter = tiny_drafter(model)
    drafter.save_pretrained(tmp_path / "d")
    return model, drafter, tmp_path / "d"


def test_a_stray_safetensors_file_is_never_read(saved):
    model, drafter, folder = saved
    other = {k: torch.zeros_like(v) for k, v in drafter.state_dict().items()}
    save_file(other, str(folder / "model_old.safetensors"))
    loaded = htg.DFlashDrafter.from_pretrained(folder, target=model)
    for name, tensor in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor)  # model.safetensors, not the stray copy


def test_only_differently_named_weights_are_refused_with_their_names(saved):
    model, _, folder = saved
    (folder / "model.safetensors").rename(folder / "weights_v2.safetensors")
    with pytest.raises(FileNotFoundError, match="weights_v2.safetensors"):
        htg.DFlashDrafter.from_pretrained(folder, target=model)


def test_a_sharded_index_loads(saved):
    model, drafter, folder = saved
    state = {k: v.contiguous() for k, v in drafter.state_dict().items()}
    names = sorted(state)
    half = len(names) // 2
    shards = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(folder / shard))
    (folder / "model.safetensors").unlink()
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    loaded = htg.DFlashDrafter.from_pretrained(folder, target=model)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "config.json").write_text("{not json"), "config.json is not valid JSON"),
    (lambda f: (f / "config.json").write_bytes(b"\xff\xfe\x00"), "config.json is not valid JSON"),
    (lambda f: (f / "config.json").write_text("[1, 2]"), "config.json holds a list"),
    (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:100]),
     "model.safetensors is not a readable safetensors file"),
])
def test_broken_files_are_named(saved, damage, message):
    model, _, folder = saved
    damage(folder)
    with pytest.raises(ValueError, match=message):
        htg.DFlashDrafter.from_pretrained(folder, target=model)
