"""Soft labels: the target's top-k distribution per position, computed from the cached deepest tapped
layer, and the loss that uses it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hf_treegen.target import decoder_layers
from hf_treegen.train.features import extract_features, sequence_key
from hf_treegen.train.losses import IGNORE, SoftTargets, dual_loss, BlockLogits, weighted_ce, weighted_soft_ce
from hf_treegen.train.target_topk import NO_TOKEN, extract_target_topk, soft_targets
from hf_treegen.train.trainer import TrainConfig, train
from tests.helpers import tiny_domino_config, tiny_target

VOCAB = 256


def _sequences():
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(1, VOCAB, (n,), generator=g), start) for n, start in ((9, 3), (26, 5), (14, 0), (31, 12))]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("layers", [[0, 1], [0, 2]], ids=["inner-source", "last-layer-source"])
def test_topk_from_cached_features_matches_the_full_forward(arch, layers, tmp_path):
    model = tiny_target(arch, vocab=VOCAB, layers=3, hidden=64)
    seqs = _sequences()
    layer_list = decoder_layers(model)
    features = extract_features(model, [ids for ids, _ in seqs], layers, tmp_path / "feat", progress=False)
    cache = extract_target_topk(model, seqs, features, tmp_path / "topk", k=5, batch_tokens=64, progress=False)
    assert len(cache) == len(seqs)
    # the model is left as it was: same layer list, no hook, same output
    assert decoder_layers(model) is layer_list and not any(layer._forward_pre_hooks for layer in layer_list)
    for ids, start in seqs:
        rows = np.asarray(cache.get(sequence_key(ids)))  # (T, 2k)
        assert rows.shape == (len(ids), 10)
        assert (rows[:start, :5] == NO_TOKEN).all()  # no distribution for prompt positions
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[None]).logits[0].float(), dim=-1)[start:]  # (T - start, V)
        top = logp.topk(5, dim=-1)
        # the cached source layer is fp16, so the log-probs agree to its rounding (near-ties may swap ranks):
        # the five largest log-probs, and each cached token's own log-prob under the full forward
        np.testing.assert_allclose(rows[start:, 5:], top.values.numpy(), atol=2e-2)
        cached_ids = torch.tensor(rows[start:, :5]).long()
        np.testing.assert_allclose(logp.gather(-1, cached_ids).numpy(), rows[start:, 5:], atol=2e-2)
        assert (cached_ids == top.indices).float().mean() > 0.9


def test_topk_needs_the_features_and_a_sensible_k(tmp_path):
    model = tiny_target("llama", vocab=VOCAB, layers=2)
    seqs = _sequences()
    features = extract_features(model, [ids for ids, _ in seqs[:2]], [0, 1], tmp_path / "feat", progress=False)
    with pytest.raises(ValueError, match="features of every sequence"):
        extract_target_topk(model, seqs, features, tmp_path / "topk", progress=False)
    with pytest.raises(ValueError, match="positive int"):
        extract_target_topk(model, seqs[:2], features, tmp_path / "topk", k=0, progress=False)


def test_soft_targets_gather_renormalise_and_map_columns():
    k = 3
    rows = np.zeros((5, 2 * k), dtype=np.float32)
    rows[:, :k] = NO_TOKEN
    # position 2: tokens 7, 4, 9 with probabilities .5, .3, .1; position 3: tokens 4, 8, 7
    rows[2] = [7, 4, 9, *np.log([0.5, 0.3, 0.1])]
    rows[3] = [4, 8, 7, *np.log([0.6, 0.2, 0.1])]
    anchors = torch.tensor([2])
    columns, probs = soft_targets(rows, anchors, depths=4, remap=None)
    assert columns.shape == probs.shape == (1, 4, k)
    assert columns[0, 0].tolist() == [7, 4, 9]
    torch.testing.assert_close(probs[0, 0], torch.tensor([0.5, 0.3, 0.1]) / 0.9)
    assert probs[0, 2:].abs().sum() == 0  # position 4 holds no distribution, position 5 is past the end
    remap = torch.full((16,), -1)
    remap[torch.tensor([4, 7, 8])] = torch.tensor([0, 1, 2])  # a draft vocabulary without token 9
    columns, probs = soft_targets(rows, anchors, depths=2, remap=remap)
    assert columns[0, 0].tolist()[:2] == [1, 0] and probs[0, 0, 2] == 0
    torch.testing.assert_close(probs[0, 0, :2], torch.tensor([0.5, 0.3]) / 0.8)
    torch.testing.assert_close(probs[0, 1], torch.tensor([0.6, 0.2, 0.1]) / 0.9)


def test_one_hot_soft_labels_give_the_hard_loss_and_weight_zero_changes_nothing():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=g)
    labels = torch.randint(0, 11, (3, 4), generator=g)
    labels[1, 2:] = IGNORE
    w = torch.tensor([1.0, 0.7, 0.5, 0.3])
    one_hot = SoftTargets(labels.clamp_min(0)[..., None], torch.ones(3, 4, 1), weight=1.0)
    torch.testing.assert_close(weighted_soft_ce(logits, one_hot, labels, w), weighted_ce(logits, labels, w))
    spread = SoftTargets(torch.randint(0, 11, (3, 4, 2), generator=g), torch.full((3, 4, 2), 0.5), weight=0.25)
    both = BlockLogits(logits, logits + 0.1)
    hard, _ = dual_loss(both, labels, w, 0.4, is_domino=True)
    mixed, _ = dual_loss(both, labels, w, 0.4, is_domino=True, soft=spread)
    expected = sum(share * (0.75 * weighted_ce(x, labels, w) + 0.25 * weighted_soft_ce(x, spread, labels, w))
                   for share, x in ((0.6, both.final), (0.4, both.base)))
    torch.testing.assert_close(mixed, expected)
    assert not torch.allclose(mixed, hard)
    zero = SoftTargets(spread.columns, spread.probs, weight=0.0)
    assert torch.equal(dual_loss(both, labels, w, 0.4, is_domino=True, soft=zero)[0], hard)


def test_training_with_soft_labels_caches_them_and_changes_the_loss(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path / "cache"))
    model = tiny_target("llama", vocab=VOCAB, layers=2, hidden=64)
    g = torch.Generator().manual_seed(5)
    corpus = [(torch.randint(1, VOCAB, (int(n),), generator=g), 4) for n in torch.randint(16, 30, (12,), generator=g)]
    cfg = tiny_domino_config(model, block_size=4)
    common = dict(steps=3, sequences_per_step=4, anchors_per_sequence=4, warmup_steps=1, eval_every=3,
                  checkpoint_every=3, val_fraction=0.2, val_blocks=32, autocast="none", patience=None,
                  lam_decay_fraction=0.0)
    hard = train(model, cfg, corpus, tmp_path / "hard", TrainConfig(**common), feature_cache=tmp_path / "feat",
                 progress=False)
    soft = train(model, cfg, corpus, tmp_path / "soft", TrainConfig(soft_labels=0.5, soft_label_topk=4, **common),
                 feature_cache=tmp_path / "feat", progress=False)
    assert hard.summary["target_topk_cache"] is None
    record = soft.summary["target_topk_cache"]
    assert record["sequences"] == soft.summary["corpus"]["train_sequences"]
    assert (tmp_path / "cache" / "target-topk").is_dir() and record["dir"].startswith(str(tmp_path / "cache"))
    assert json.loads((tmp_path / "soft" / "summary.json").read_text())["train_config"]["soft_labels"] == 0.5
    assert soft.losses[0] != hard.losses[0]  # same draws (same seed), another loss
