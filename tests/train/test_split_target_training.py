"""Drafter data and training on a target split with accelerate's device_map (a layer on disk): the
features, and so the training, are those of the whole target; the commands take --device-map."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from hf_treegen.bench.offload import disk_offload_map, offload_layers
from hf_treegen.train.drafter_setup import init_drafter
from hf_treegen.train.features import extract_features, target_fingerprint
from hf_treegen.train.processes import Processes
from hf_treegen.train.trainer import train
from tests.train.distributed_setup import pattern_corpus, train_config, train_drafter_config, train_target

pytest.importorskip("accelerate")


@pytest.fixture(scope="module")
def split_target(tmp_path_factory):
    return offload_layers(train_target(), (-1,), tmp_path_factory.mktemp("offload"))


def test_features_of_a_split_target_are_the_whole_targets(split_target, tmp_path):
    whole = train_target()
    sequences = [ids for ids, _ in pattern_corpus(6)]
    assert target_fingerprint(split_target)  # offloaded weights (on "meta" until a forward) are left out
    layers = [0, 1]
    a = extract_features(whole, sequences, layers, tmp_path / "whole", progress=False)
    b = extract_features(split_target, sequences, layers, tmp_path / "split", progress=False)
    for key in a.index:
        np.testing.assert_allclose(np.asarray(a.get(key), np.float32), np.asarray(b.get(key), np.float32), atol=2e-3)


def test_a_drafter_trains_on_a_split_target_as_on_the_whole_one(split_target, tmp_path):
    config = dataclasses.replace(train_config(), steps=6, eval_every=3, checkpoint_every=6)
    runs = []
    for name, target in (("whole", train_target()), ("split", split_target)):
        drafter = init_drafter(train_drafter_config(target), target, seed=0)
        runs.append(train(target, drafter, pattern_corpus(), tmp_path / name, config,
                          feature_cache=tmp_path / f"features-{name}", progress=False, processes=Processes()))
    np.testing.assert_allclose(runs[1].losses, runs[0].losses, rtol=1e-3)


def test_train_drafter_loads_the_target_with_a_device_map(tmp_path, capsys, caplog):
    from hf_treegen.train.cli import train_drafter_main
    from hf_treegen.train.data import generate_corpus
    from tests.train.distributed_setup import data_target

    model, tokenizer, prompts = data_target()
    generate_corpus(model, tokenizer, prompts, tmp_path / "corpus", batch_size=4, max_new_tokens=12,
                    max_prompt_tokens=None, progress=False, processes=Processes())
    model.save_pretrained(tmp_path / "target")
    (tmp_path / "map.json").write_text(json.dumps(disk_offload_map(model, (-1,))))
    common = ["--model", str(tmp_path / "target"), "--data", str(tmp_path / "corpus"), "--steps", "2",
              "--sequences", "2", "--anchors", "4", "--eval-every", "2", "--block-size", "4", "--emb-dim", "8",
              "--gru-hidden", "8", "--val-fraction", "0.2", "--threads", "1", "--no-progress"]
    out = tmp_path / "run"
    assert train_drafter_main(common + ["--out", str(out), "--device-map", str(tmp_path / "map.json"),
                                        "--offload-folder", str(tmp_path / "offload"),
                                        "--feature-cache", str(tmp_path / "features")]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert "offloaded to the" in caplog.text and "disk" in caplog.text  # accelerate: the layer went to disk
    with pytest.raises(SystemExit):
        train_drafter_main(common + ["--out", str(tmp_path / "bad"), "--device-map", str(tmp_path / "none.json")])
    assert "no such file" in capsys.readouterr().err


def test_a_strategy_map_for_the_embedded_model_is_a_user_error(tmp_path, capsys):
    from hf_treegen.train.data_cli import main

    assert main(["--source", "chat", "--out", str(tmp_path / "c"), "--num-prompts", "2", "--device-map", "auto",
                 "--no-progress"]) == 2
    assert "give it a {module: device} map" in capsys.readouterr().err
