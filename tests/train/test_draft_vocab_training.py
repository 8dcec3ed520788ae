"""Training a drafter with a draft vocabulary: the softmax runs over exactly the map, labels outside it
are ignored, the map is chosen from the corpus when asked, saved with the drafter, and kept on resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import hf_treegen as htg
from hf_treegen.train import trainer as trainer_module
from hf_treegen.train.trainer import TrainConfig, train
from tests.helpers import tiny_domino_config
from tests.train.test_trainer import fast_config, model, pattern_corpus  # noqa: F401 (fixtures)


def response_counts(corpus) -> dict[int, int]:
    counts: dict[int, int] = {}
    for ids, start in corpus:
        for t in ids[start:].tolist():
            counts[t] = counts.get(t, 0) + 1
    return counts


def test_draft_vocab_is_chosen_from_the_corpus_and_is_the_whole_softmax(model, pattern_corpus, tmp_path,  # noqa: F811
                                                                         monkeypatch):
    seen = []
    original = trainer_module.block_logits

    def spy(drafter, rows, teacher, vocab_ids=None):
        seen.append(vocab_ids)
        return original(drafter, rows, teacher, vocab_ids)

    monkeypatch.setattr(trainer_module, "block_logits", spy)
    cfg = tiny_domino_config(model, block_size=4)
    result = train(model, cfg, pattern_corpus, tmp_path / "out", fast_config(steps=4, draft_vocab=40),
                   feature_cache=tmp_path / "feat", progress=False)
    vocab = result.drafter.draft_vocab
    # 40 of the 63 response ids (the training split's most frequent ones), never a prompt-only id
    assert vocab.numel() == 40 and set(vocab.tolist()) <= set(response_counts(pattern_corpus))
    assert result.drafter.config.draft_vocab_size == 40
    assert all(v is not None and torch.equal(v, vocab) for v in seen)  # no negatives, no other ids
    assert result.summary["corpus"]["loss_vocab_size"] == 40
    loaded = htg.DominoDrafter.from_pretrained(tmp_path / "out" / "drafter", target=model)
    assert torch.equal(loaded.draft_vocab, vocab) and loaded.draft_vocab.dtype == torch.int64


def test_a_mapped_drafter_learns_the_pattern(model, pattern_corpus, tmp_path):  # noqa: F811
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=4)
    result = train(model, cfg, pattern_corpus, tmp_path / "out", fast_config(steps=150, eval_every=50, draft_vocab=63),
                   feature_cache=tmp_path / "feat", progress=False)
    start, final = result.evals[0], result.final
    assert set(result.drafter.draft_vocab.tolist()) == set(response_counts(pattern_corpus))
    assert final["acc"][0] > 0.5 and final["accept_len"] > 10 * max(start["accept_len"], 0.01), (start, final)


def test_train_config_checks_draft_vocab():
    with pytest.raises(ValueError, match="draft_vocab must be a positive int"):
        TrainConfig(steps=1, draft_vocab=0)


def test_cli_draft_vocab_survives_resume(model, pattern_corpus, tmp_path):  # noqa: F811
    from safetensors.numpy import save_file

    from hf_treegen.train.cli import train_drafter_main

    model.save_pretrained(tmp_path / "target")
    seqs = [ids.numpy() for ids, _ in pattern_corpus[:24]]
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    data = tmp_path / "corpus"
    data.mkdir()
    save_file({"tokens": np.concatenate(seqs).astype(np.uint16),
               "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
               "response_start": np.array([r for _, r in pattern_corpus[:24]], dtype=np.int32),
               "sampled": np.zeros(24, dtype=np.uint8), "finished": np.zeros(24, dtype=np.uint8)},
              str(data / "shard-00000.safetensors"),
              metadata={"format": "1", "prompt_ids": json.dumps([f"p{i}" for i in range(24)]), "settings": "{}"})
    out = tmp_path / "run"
    common = ["--data", str(data), "--out", str(out), "--model", str(tmp_path / "target"), "--eval-every", "3",
              "--sequences", "2", "--anchors", "4", "--feature-cache", str(tmp_path / "feat"), "--no-progress",
              "--threads", "1"]
    argv = common + ["--projector", "domino", "--block-size", "4", "--emb-dim", "8", "--gru-hidden", "8",
                     "--steps", "4", "--draft-vocab", "30"]
    assert train_drafter_main(argv) == 0
    first = htg.DominoDrafter.from_pretrained(out / "drafter", target=model).draft_vocab
    assert first.numel() == 30
    # the resumed drafter is rebuilt from the checkpoint's config (a map of 30, unset) and gets the
    # checkpoint's map back before the training vocabulary is derived from it
    assert train_drafter_main(common + ["--steps", "6", "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["corpus"]["loss_vocab_size"] == 30
    assert torch.equal(htg.DominoDrafter.from_pretrained(out / "drafter", target=model).draft_vocab, first)
    # continued training of that drafter one layer deeper keeps its map; a resume keeps the grown shape
    deeper = ["--data", str(data), "--out", str(tmp_path / "deeper"), *common[4:], "--init", str(out / "drafter"),
              "--add-layers", "1", "--steps", "2"]
    assert train_drafter_main(deeper) == 0
    assert train_drafter_main(deeper[:-1] + ["3", "--resume"]) == 0
    grown = htg.DominoDrafter.from_pretrained(tmp_path / "deeper" / "drafter", target=model)
    assert grown.config.num_hidden_layers == 2 and torch.equal(grown.draft_vocab, first)
    assert json.loads((tmp_path / "deeper" / "summary.json").read_text())["steps"] == 3


class _Crash(Exception):
    pass


def test_resume_with_a_chosen_draft_vocab_is_bit_identical(model, pattern_corpus, tmp_path):  # noqa: F811
    cfg = tiny_domino_config(model, block_size=4)
    tc = fast_config(steps=8, checkpoint_every=4, eval_every=4, draft_vocab=40)
    full = train(model, cfg, pattern_corpus, tmp_path / "full", tc, feature_cache=tmp_path / "feat", progress=False)

    def crash(step, loss):
        if step == 6:
            raise _Crash

    with pytest.raises(_Crash):
        train(model, cfg, pattern_corpus, tmp_path / "part", tc, feature_cache=tmp_path / "feat", progress=False,
              callback=crash)
    resumed = train(model, cfg, pattern_corpus, tmp_path / "part", tc, feature_cache=tmp_path / "feat",
                    progress=False, resume=True)
    assert resumed.losses == full.losses
    for (name, a), (_, b) in zip(full.drafter.state_dict().items(), resumed.drafter.state_dict().items()):
        assert torch.equal(a, b), name
    assert torch.equal(resumed.drafter.draft_vocab, full.drafter.draft_vocab)
