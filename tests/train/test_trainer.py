"""Drafter distillation: training blocks and mask, feature cache, learning, Domino dual loss, resume, save/load."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import hf_treegen as htg
from hf_treegen.target import FeatureTap
from hf_treegen.train.blocks import (block_labels, block_mask, forward_blocks, prediction_rows, sample_anchors,
                                     teacher_tokens)
from hf_treegen.train.features import FeatureCache, extract_features, sequence_key, target_meta
from hf_treegen.train.losses import ChainMetrics, block_logits, dual_loss, position_weights, weighted_ce
from hf_treegen.train.checkpoints import drafter_from_checkpoint
from hf_treegen.train.drafter_setup import copy_target_layer, grow_drafter, init_drafter, with_new_head
from hf_treegen.train.sequences import TrainSequence, draw_shares, draw_weights
from hf_treegen.train.trainer import TrainConfig, train
from tests.helpers import (greedy_reference, tiny_dflash2, tiny_domino, tiny_domino_config, tiny_drafter,
                           tiny_dspark, tiny_dspark_config, tiny_target)
from tests.train.distributed_setup import pattern_corpus as make_pattern_corpus

VOCAB = 256


@pytest.fixture(scope="module")
def model():
    return tiny_target("llama", vocab=VOCAB, layers=2, hidden=64)


@pytest.fixture(scope="module")
def pattern_corpus():
    return make_pattern_corpus(48, 32)


def fast_config(**kw) -> TrainConfig:
    base = dict(steps=40, sequences_per_step=4, anchors_per_sequence=8, lr=3e-3, warmup_steps=10, eval_every=20,
                checkpoint_every=20, val_fraction=0.15, val_blocks=256, autocast="none", patience=None)
    base.update(kw)
    return TrainConfig(**base)


def tap_features(model, ids: torch.Tensor, layer_ids) -> torch.Tensor:
    with torch.no_grad(), FeatureTap(model, layer_ids) as tap:
        model(ids[None])
        return tap.take()


# --------------------------------------------------------------------------------------------------
# blocks and mask

def test_block_mask_sees_exactly_context_before_anchor_and_own_block():
    ctx, b = 10, 4
    anchors = torch.tensor([3, 7, 9])
    mask = block_mask(ctx, anchors, b)
    assert mask.shape == (3 * b, ctx + 3 * b) and mask.dtype == torch.bool
    for row in range(3 * b):
        a = row // b
        seen_ctx = set(torch.nonzero(mask[row, :ctx]).flatten().tolist())
        seen_blk = set(torch.nonzero(mask[row, ctx:]).flatten().tolist())
        assert seen_ctx == set(range(int(anchors[a])))
        assert seen_blk == set(range(a * b, (a + 1) * b))


def test_labels_and_teacher_tokens():
    ids = torch.arange(100, 112)  # positions 0..11
    anchors = torch.tensor([4, 9])
    labels = block_labels(ids, anchors, depths=4)
    assert labels.tolist() == [[105, 106, 107, 108], [110, 111, -100, -100]]
    assert teacher_tokens(ids, anchors, 4).tolist() == [[104, 105, 106, 107], [109, 110, 111, 111]]
    g = torch.Generator().manual_seed(0)
    a = sample_anchors(12, 5, 100, g)
    assert a.tolist() == list(range(5, 11))  # response_start .. len-2, all of them when fewer than asked
    a = sample_anchors(40, 5, 8, g)
    assert len(set(a.tolist())) == 8 and a.min() >= 5 and a.max() <= 38 and torch.equal(a, a.sort().values)


@pytest.mark.parametrize("kind", ["dflash", "domino", "dspark"])
def test_training_forward_equals_inference_draft(model, kind):
    """Packed training blocks (one forward, one mask) give the rows and logits the inference session gives."""
    drafter = {"dflash": lambda: tiny_drafter(model, block_size=4),
               "domino": lambda: tiny_domino(model, block_size=4, std=0.1),
               "dspark": lambda: tiny_dspark(model, block_size=4, std=0.1)}[kind]()
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(1, VOCAB, (30,), generator=g)
    feats = tap_features(model, ids, drafter.config.target_layer_ids)
    anchors = torch.tensor([5, 12, 20, 27])
    with torch.no_grad():
        rows = prediction_rows(drafter, forward_blocks(drafter, ids, feats, anchors))
        logits = block_logits(drafter, rows, teacher_tokens(ids, anchors, 4))
        vocab = torch.tensor([3, 7, 50, 200, 255])
        sub = block_logits(drafter, rows, teacher_tokens(ids, anchors, 4), vocab_ids=vocab)
    torch.testing.assert_close(sub.final, logits.final[..., vocab], rtol=1e-5, atol=1e-5)
    for a, p in enumerate(anchors.tolist()):
        session = drafter.new_session()
        session.extend(feats[:p], torch.arange(p))
        block = session.draft(int(ids[p]), p)
        torch.testing.assert_close(rows[a], block.hidden, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(logits.base[a], block.logits, rtol=1e-4, atol=1e-4)
        if kind == "domino":  # the released rollout's maths along the realised tokens
            state = drafter.gru_step(drafter.zero_state(), ids[p:p + 1])
            for row in range(block.logits.shape[0]):
                if p + row + 1 >= len(ids):  # no label: the training state there is never used
                    break
                expect = block.logits[row]
                if row >= drafter.correction_start:
                    expect = expect + drafter.correction(block.hidden[row:row + 1], state)[0]
                torch.testing.assert_close(logits.final[a, row], expect, rtol=1e-4, atol=1e-4)
                state = drafter.gru_step(state, ids[p + row + 1: p + row + 2])
        if kind == "dspark":  # row k's bias reads the realised token before it (the anchor for row 0)
            head = drafter.markov_head
            for row in range(block.logits.shape[0]):
                if p + row + 1 >= len(ids):  # no label: never used
                    break
                code = head.codes(block.hidden[row:row + 1], ids[p + row: p + row + 1])
                expect = block.logits[row] + head.markov_w2(code)[0]
                torch.testing.assert_close(logits.final[a, row], expect, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------------
# feature cache

def test_feature_cache_matches_tap_and_is_incremental(model, tmp_path):
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(1, VOCAB, (n,), generator=g) for n in (7, 19, 12, 30, 5)]
    layers = [0, 1]
    cache = extract_features(model, seqs[:3], layers, tmp_path, batch_tokens=40, progress=False)
    assert len(cache) == 3 and len(cache.chunks) == 1
    for s in seqs[:3]:
        got = torch.from_numpy(np.array(cache.get(sequence_key(s)), dtype=np.float32))
        assert got.shape == (len(s), 2 * 64)
        torch.testing.assert_close(got, tap_features(model, s, layers), rtol=2e-3, atol=2e-3)
    cache = extract_features(model, seqs, layers, tmp_path, progress=False)  # only the two new ones
    assert len(cache) == 5 and len(cache.chunks) == 2
    keys = json.loads((tmp_path / "chunk-00001.json").read_text())["keys"]
    assert sorted(keys) == sorted([sequence_key(seqs[3]), sequence_key(seqs[4])])
    assert isinstance(cache.get(sequence_key(seqs[3])), np.memmap)
    with pytest.raises(ValueError, match="another target or layer set"):
        FeatureCache(tmp_path, target_meta(model, [1]))


def test_features_on_packed_kernels_match_the_default_path(tmp_path, monkeypatch):
    from hf_treegen.train import features

    wide = tiny_target("llama", hidden=256, vocab=512, std=0.1)  # layers large enough to be packed
    seqs = [torch.randint(1, 512, (n,), generator=torch.Generator().manual_seed(n)) for n in (9, 23)]
    entered = []
    real = features.packed_linears
    monkeypatch.setattr(features, "packed_linears", lambda *models: entered.append(models) or real(*models))
    default = extract_features(wide, seqs, [0, 1], tmp_path / "default", packed=False, progress=False)
    packed = extract_features(wide, seqs, [0, 1], tmp_path / "packed", progress=False)
    assert entered == [(wide,)]
    extract_features(wide, seqs, [0, 1], tmp_path / "packed", progress=False)  # all cached: nothing to pack for
    assert entered == [(wide,)]
    for s in seqs:
        a, b = (np.asarray(c.get(sequence_key(s)), dtype=np.float32) for c in (default, packed))
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3)  # fp16 storage; the kernels differ by rounding


# --------------------------------------------------------------------------------------------------
# losses

def test_domino_zero_w2_loss_equals_base_loss(model, pattern_corpus, tmp_path):
    cfg = tiny_domino_config(model, block_size=4)
    drafter = init_drafter(cfg, model, seed=0)
    assert torch.count_nonzero(drafter.w2) == 0
    ids, start = pattern_corpus[0]
    anchors = torch.tensor([start, start + 5, start + 11])
    feats = tap_features(model, ids, cfg.target_layer_ids)
    rows = prediction_rows(drafter, forward_blocks(drafter, ids, feats, anchors))
    logits = block_logits(drafter, rows, teacher_tokens(ids, anchors, 4))
    assert torch.equal(logits.final, logits.base)
    labels = block_labels(ids, anchors, rows.shape[1])
    w = position_weights(rows.shape[1], 1.5)
    base = weighted_ce(logits.base, labels, w)
    for lam in (0.0, 1.0):
        assert torch.equal(dual_loss(logits, labels, w, lam, is_domino=True)[0], base)
    torch.testing.assert_close(dual_loss(logits, labels, w, 0.3, is_domino=True)[0], base, rtol=1e-6, atol=0)
    # and the trainer's first step: pure final-logit loss (lam=0) == pure base loss (lam=1)
    runs = [train(model, cfg, pattern_corpus, tmp_path / f"r{f}", fast_config(steps=1, lam_decay_fraction=f),
                  feature_cache=tmp_path / "feat", progress=False) for f in (0.0, 1.0)]
    assert runs[0].losses == runs[1].losses


def test_chain_metrics():
    m = ChainMetrics(3)
    labels = torch.tensor([[1, 2, 3], [1, 2, 3], [1, 2, -100]])
    logits = torch.full((3, 3, 5), -1.0)
    for a, preds in enumerate([[1, 2, 3], [1, 0, 3], [0, 2, -1]]):
        for d, p in enumerate(preds):
            if p >= 0:
                logits[a, d, p] = 1.0
    m.add(logits, labels)
    s = m.summary()
    assert s["acc"] == [round(2 / 3, 4), round(2 / 3, 4), 1.0]
    assert s["cond_acc"] == [round(2 / 3, 4), 0.5, 1.0]  # depth 3: one block reached it with a label, right
    assert s["accept_len"] == pytest.approx(2 / 3 + 2 / 3 * 0.5 + 2 / 3 * 0.5 * 1.0, abs=1e-4)
    assert s["tau"] == pytest.approx(1 + s["accept_len"])


# --------------------------------------------------------------------------------------------------
# learning

def dspark_training_config(model, head: str = "vanilla"):
    """A DSpark config as train-drafter --projector markov makes it (no confidence head: it is not trained)."""
    return dataclasses.replace(tiny_dspark_config(model, block_size=4, head=head), confidence_head=False,
                               confidence_head_with_markov=False)


@pytest.mark.parametrize("kind", ["dflash", "domino", "dspark"])
def test_drafter_learns_pattern(model, pattern_corpus, tmp_path, kind):
    cfg = {"dflash": lambda: htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=4),
           "domino": lambda: tiny_domino_config(model, block_size=4),
           "dspark": lambda: dspark_training_config(model)}[kind]()
    result = train(model, cfg, pattern_corpus, tmp_path / "out", fast_config(steps=250, eval_every=50),
                   feature_cache=tmp_path / "feat", progress=False)
    start, final = result.evals[0], result.final_full_vocab
    assert start["step"] == 0 and start["acc"][0] < 0.05  # untrained: about chance
    assert final["acc"][0] > 0.5, final
    assert final["accept_len"] > 0.9 and final["accept_len"] > 10 * max(start["accept_len"], 0.01), (start, final)
    assert result.losses[-1] < 0.5 * result.losses[0]
    assert (tmp_path / "out" / "drafter" / "model.safetensors").is_file()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["final_val_full_vocab"]["acc"] == final["acc"]


def test_a_trained_dspark_drafter_loads_and_decodes_exactly(model, pattern_corpus, tmp_path):
    from hf_treegen.drafters.auto import load_any_drafter

    result = train(model, dspark_training_config(model, head="gated"), pattern_corpus, tmp_path / "out",
                   fast_config(steps=120, eval_every=60), feature_cache=tmp_path / "feat", progress=False)
    drafter = load_any_drafter(tmp_path / "out" / "drafter", model, dtype=torch.float32)
    assert isinstance(drafter, htg.DSparkDrafter) and drafter.config == result.drafter.config
    assert drafter.markov_head.markov_w2.weight.abs().sum() > 0  # the bias trained away from its zero start
    assert result.final_full_vocab["accept_len"] > 0.9  # and it learned the corpus's walk
    for prompt, start in pattern_corpus[-3:]:  # (the random target itself continues otherwise)
        prompt = prompt[: start + 4][None]
        ref = greedy_reference(model, prompt, 16)
        for strategy in ("chain", "conditional", "auto"):
            out = model.generate(prompt, assistant_model=drafter, tree_strategy=strategy, max_new_tokens=16,
                                 do_sample=False)
            assert torch.equal(out, ref), strategy


# --------------------------------------------------------------------------------------------------
# resume and checkpoints

class _Crash(Exception):
    pass


def test_resume_is_bit_identical(model, pattern_corpus, tmp_path):
    cfg = tiny_domino_config(model, block_size=4)
    tc = fast_config(steps=40, checkpoint_every=20, eval_every=10, lam_decay_fraction=0.5)
    full = train(model, cfg, pattern_corpus, tmp_path / "full", tc, feature_cache=tmp_path / "feat", progress=False)

    def crash(step, loss):
        if step == 27:
            raise _Crash

    with pytest.raises(_Crash):
        train(model, cfg, pattern_corpus, tmp_path / "part", tc, feature_cache=tmp_path / "feat", progress=False,
              callback=crash)
    resumed = train(model, cfg, pattern_corpus, tmp_path / "part", tc, feature_cache=tmp_path / "feat",
                    progress=False, resume=True)
    assert resumed.losses == full.losses
    assert [e["accept_len"] for e in resumed.evals] == [e["accept_len"] for e in full.evals]
    for (name, a), (_, b) in zip(full.drafter.state_dict().items(), resumed.drafter.state_dict().items()):
        assert torch.equal(a, b), name
    with pytest.raises(FileNotFoundError, match="holds no"):
        train(model, cfg, pattern_corpus, tmp_path / "empty", tc, feature_cache=tmp_path / "feat", resume=True,
              progress=False)


def test_save_load_round_trip(model, pattern_corpus, tmp_path):
    cfg = tiny_domino_config(model, block_size=4)
    result = train(model, cfg, pattern_corpus, tmp_path / "out", fast_config(steps=5), feature_cache=tmp_path / "f",
                   progress=False)
    loaded = htg.DominoDrafter.from_pretrained(tmp_path / "out" / "drafter", target=model)
    assert loaded.config == result.drafter.config
    trained = result.drafter.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, trained[name].to(torch.bfloat16).to(tensor.dtype)), name
    assert json.loads((tmp_path / "out" / "drafter" / "config.json").read_text())["dflash_config"]["shift_label"]


def test_any_kept_checkpoint_exports_as_a_drafter(model, pattern_corpus, tmp_path, capsys):
    from hf_treegen.cli import main

    cfg = tiny_domino_config(model, block_size=4)
    train(model, cfg, pattern_corpus, tmp_path / "out", fast_config(steps=30, checkpoint_every=10, keep_checkpoints=3),
          feature_cache=tmp_path / "f", progress=False)
    checkpoints = sorted((tmp_path / "out" / "checkpoints").glob("step-*.pt"))
    assert [p.name for p in checkpoints] == ["step-0000010.pt", "step-0000020.pt", "step-0000030.pt"]

    assert main(["export-drafter", str(checkpoints[0]), "--out", str(tmp_path / "step10"), "--dtype", "fp32"]) == 0
    exported = htg.DominoDrafter.from_pretrained(tmp_path / "step10", target=model, dtype=torch.float32)
    saved = torch.load(checkpoints[0], weights_only=True)
    assert exported.config.to_dict() == saved["drafter_config"]
    for name, tensor in exported.state_dict().items():
        assert torch.equal(tensor, saved["drafter"][name]), name
    later = drafter_from_checkpoint(checkpoints[-1]).state_dict()
    assert not all(torch.equal(t, later[n]) for n, t in exported.state_dict().items())  # a step apart: trained on

    not_a_checkpoint = tmp_path / "notes.pt"
    not_a_checkpoint.write_text("not a checkpoint")
    foreign = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, foreign)
    for path, message in [(tmp_path / "missing.pt", "no such checkpoint"), (not_a_checkpoint, "not a train-drafter"),
                          (foreign, "not a train-drafter")]:
        capsys.readouterr()
        assert main(["export-drafter", str(path), "--out", str(tmp_path / "bad")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()  # nothing half-written


def test_a_grown_drafter_drafts_exactly_as_before_and_its_new_layer_trains(model, pattern_corpus, tmp_path):
    drafter = tiny_domino(model, block_size=4, std=0.1)
    drafter.set_draft_vocab(torch.arange(0, VOCAB, 2))
    grown = grow_drafter(drafter, 1, model)
    assert grown.config.num_hidden_layers == drafter.config.num_hidden_layers + 1 and len(grown.layers) == 2
    assert torch.equal(grown.draft_vocab, drafter.draft_vocab)
    ids = pattern_corpus[0][0]
    feats = tap_features(model, ids, drafter.config.target_layer_ids)
    blocks = []
    for d in (drafter, grown):
        session = d.new_session()
        session.extend(feats[:12], torch.arange(12))
        blocks.append(session.draft(int(ids[12]), 12))
    assert torch.equal(blocks[0].logits, blocks[1].logits)  # the new layer adds exact zeros
    result = train(model, grown, pattern_corpus, tmp_path / "out", fast_config(steps=5), feature_cache=tmp_path / "f",
                   progress=False)
    assert result.drafter.layers[1].self_attn.o_proj.weight.abs().sum() > 0  # training moved it
    loaded = htg.DominoDrafter.from_pretrained(tmp_path / "out" / "drafter", target=model)
    assert loaded.config.num_hidden_layers == 2
    with pytest.raises(ValueError, match="positive int"):
        grow_drafter(drafter, 0, model)


def test_a_new_head_keeps_the_backbone_and_starts_neutral(model, pattern_corpus, tmp_path):
    """with_new_head: a Domino drafter's backbone under a DSpark head drafts as the backbone alone (zero
    bias), and the head then trains."""
    drafter = tiny_domino(model, block_size=4, std=0.1)
    drafter.set_draft_vocab(torch.arange(0, VOCAB, 2))
    markov = with_new_head(drafter, dict(architecture="DSparkDraftModel", markov_rank=8, markov_head_type="gated"),
                           model)
    plain = with_new_head(drafter, {}, model)
    assert isinstance(markov, htg.DSparkDrafter) and type(plain) is htg.DFlashDrafter
    assert markov.config.family == "dspark" and not markov.config.is_domino
    assert torch.equal(markov.draft_vocab, drafter.draft_vocab)
    assert markov.markov_head.markov_w2.weight.shape[0] == drafter.draft_vocab.numel()
    assert markov.markov_head.markov_w2.weight.abs().sum() == 0
    for name, tensor in drafter.state_dict().items():
        if name.split(".")[0] in ("fc", "hidden_norm", "layers", "norm"):
            assert torch.equal(markov.state_dict()[name], tensor), name
    ids = pattern_corpus[0][0]
    feats = tap_features(model, ids, drafter.config.target_layer_ids)
    blocks = []
    for d in (drafter, markov, plain):
        session = d.new_session()
        session.extend(feats[:12], torch.arange(12))
        blocks.append(session.draft(int(ids[12]), 12))
    assert torch.equal(blocks[0].logits, blocks[1].logits) and torch.equal(blocks[1].logits, blocks[2].logits)
    backbone_argmax = blocks[2].target_ids(blocks[2].logits.argmax(-1)).tolist()
    assert markov.released_greedy_chain(blocks[1]) == backbone_argmax  # zero bias: the backbone's own choices
    result = train(model, markov, pattern_corpus, tmp_path / "out", fast_config(steps=5), feature_cache=tmp_path / "f",
                   progress=False)
    assert result.drafter.markov_head.markov_w2.weight.abs().sum() > 0
    dflash2 = tiny_dflash2(model)
    with pytest.raises(ValueError, match="DFlash2"):
        with_new_head(dflash2, {}, model)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_drafter_started_from_a_target_layer_computes_that_layers_context(arch):
    """copy_target_layer: the decoder layer is the target layer's, and the fused context is that layer's
    normed input (the deepest tapped layer's output), so the context keys are the target layer's own."""
    model = tiny_target(arch, vocab=VOCAB, layers=3, hidden=64)
    config = tiny_domino_config(model, block_size=4)
    deepest = max(config.target_layer_ids)
    layer_id = min(deepest + 1, 2)  # the layer that reads the deepest tap (or the last one)
    source = model.model.layers[layer_id]
    drafter = copy_target_layer(init_drafter(config, model), model, layer_id)
    for name, value in source.state_dict().items():
        assert torch.equal(drafter.layers[0].state_dict()[name], value), name
    assert torch.equal(drafter.norm.weight, model.model.norm.weight)
    ids = torch.randint(0, VOCAB, (10,), generator=torch.Generator().manual_seed(1))
    feats = tap_features(model, ids, config.target_layer_ids)  # (T, k*H)
    slot = list(config.target_layer_ids).index(deepest)
    with torch.no_grad():
        expected = source.input_layernorm(feats[:, slot * 64:(slot + 1) * 64])
        torch.testing.assert_close(drafter.fuse(feats), expected)
    with pytest.raises(ValueError, match="layers 0..2"):
        copy_target_layer(drafter, model, 3)


def test_a_target_layer_that_does_not_fit_the_drafter_is_refused(model):
    drafter = init_drafter(tiny_domino_config(model, block_size=4), model)
    biased = tiny_target("llama", vocab=VOCAB, layers=2, hidden=64)
    biased.model.layers[1].self_attn.q_proj = torch.nn.Linear(64, 64, bias=True)  # as Qwen2's projections are
    with pytest.raises(ValueError, match="q_proj.bias"):
        copy_target_layer(drafter, biased, 1)


def test_train_config_validation():
    with pytest.raises(ValueError, match="steps=N or time_budget_s"):
        TrainConfig()
    with pytest.raises(ValueError, match="lr must be > 0"):
        TrainConfig(steps=10, lr=0)
    with pytest.raises(ValueError, match="loss_vocab"):
        TrainConfig(steps=10, loss_vocab="tiny")
    with pytest.raises(ValueError, match="lam_decay_fraction"):
        TrainConfig(steps=10, lam_decay_fraction=2.0)
    assert TrainConfig(steps=1).gamma_for(16) == 7.5 and TrainConfig(steps=1, gamma=4).gamma_for(8) == 4.0


def _seq(origin: str, anchors: int, labelled: bool = False) -> TrainSequence:
    ids = torch.arange(anchors + 2)  # response_start 1: anchors + 2 tokens give `anchors` valid anchors
    seq = TrainSequence(f"{origin}{anchors}", ids, 1, ids.clone() if labelled else None, origin)
    assert seq.num_anchors == anchors
    return seq


def test_draw_weights_follow_anchors_by_default_and_shares_when_given():
    seqs = [_seq("a", 10), _seq("a", 30), _seq("b", 20, labelled=True)]
    assert draw_weights(seqs, TrainConfig(steps=1)).tolist() == [10, 30, 20]
    assert draw_weights(seqs, TrainConfig(steps=1, teacher_forced_weight=0.5)).tolist() == [10, 30, 10]
    shared = draw_weights(seqs, TrainConfig(steps=1, corpus_shares={"a": 1.0, "./b": 3.0}))  # paths normalised
    assert torch.allclose(shared, torch.tensor([0.0625, 0.1875, 0.75], dtype=torch.float64))
    assert draw_shares(seqs, shared) == {"a": 0.25, "b": 0.75}
    assert draw_shares(seqs, draw_weights(seqs, TrainConfig(steps=1))) == {"a": 0.6667, "b": 0.3333}
    with pytest.raises(ValueError, match=r"no share for \['b'\]"):
        draw_weights(seqs, TrainConfig(steps=1, corpus_shares={"a": 1.0}))
    with pytest.raises(ValueError, match=r"without training sequences: \['c'\]"):
        draw_weights(seqs, TrainConfig(steps=1, corpus_shares={"a": 1.0, "b": 1.0, "c": 1.0}))
    with pytest.raises(ValueError, match="not both"):
        TrainConfig(steps=1, corpus_shares={"a": 1.0}, teacher_forced_weight=0.5)
    with pytest.raises(ValueError, match="share > 0"):
        TrainConfig(steps=1, corpus_shares={"a": 0.0})


def test_cli_mix_needs_one_share_per_corpus(tmp_path, capsys):
    from hf_treegen.train.cli import train_drafter_main

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    common = ["--data", f"{tmp_path / 'a'},{tmp_path / 'b'}", "--out", str(tmp_path / "r"), "--steps", "1"]
    assert train_drafter_main(common + ["--mix", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "--mix gives 1 shares for 2 --data corpora" in err and "Traceback" not in err
    assert train_drafter_main(common + ["--mix", "0.5,0.5", "--tf-weight", "0.5"]) == 2
    assert "give --mix or --tf-weight, not both" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse rejects a share <= 0 itself (exit 2, usage message)
        train_drafter_main(common + ["--mix", "0.5,0"])
    assert "shares > 0" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # nothing written for a rejected command
    assert train_drafter_main(common[:-2] + ["--steps", "1", "--add-layers", "1"]) == 2
    assert "--add-layers grows the --init drafter" in capsys.readouterr().err
    assert train_drafter_main(common + ["--init", "somewhere", "--copy-target-layer", "27"]) == 2
    assert "--copy-target-layer starts a new drafter" in capsys.readouterr().err
    assert train_drafter_main(common + ["--gamma", "0"]) == 2
    assert "gamma must be > 0" in capsys.readouterr().err
    assert train_drafter_main(common + ["--soft-labels", "1.5"]) == 2
    assert "soft_labels must be in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_trains_from_a_corpus_folder(model, pattern_corpus, tmp_path, capsys):
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
                     "--steps", "6"]
    assert train_drafter_main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["corpus"]["train_sequences"] + summary["corpus"]["val_sequences"] == 24
    assert train_drafter_main(common + ["--steps", "8", "--resume"]) == 0  # the drafter shape comes from the checkpoint
    assert json.loads((out / "summary.json").read_text())["steps"] == 8
    # a starting drafter's datastore holds its own corpora's answers: not carried over, and said so
    from hf_treegen.datastore import TokenDatastore

    TokenDatastore.from_sequences([seqs[0].tolist()]).save(out / "drafter" / "datastore.safetensors")
    continued = ["--out", str(tmp_path / "continued"), "--init", str(out / "drafter"), "--steps", "2"]
    assert train_drafter_main(common[:2] + continued + common[4:]) == 0
    assert "its datastore is not carried over" in capsys.readouterr().out
    assert not (tmp_path / "continued" / "drafter" / "datastore.safetensors").exists()
    copied = ["--out", str(tmp_path / "copied"), "--copy-target-layer", "1"]
    assert train_drafter_main(common[:2] + copied + common[4:] + argv[len(common):]) == 0
    assert (tmp_path / "copied" / "drafter" / "config.json").is_file()
    markov = ["--out", str(tmp_path / "markov"), "--projector", "markov", "--markov-head", "gated", "--emb-dim", "8",
              "--block-size", "4", "--steps", "3", "--draft-vocab", "64"]
    assert train_drafter_main(common[:2] + markov + common[4:]) == 0
    saved = json.loads((tmp_path / "markov" / "drafter" / "config.json").read_text())
    assert saved["architectures"] == ["DSparkDraftModel"], saved
    from hf_treegen.drafters.auto import load_any_drafter

    drafter = load_any_drafter(tmp_path / "markov" / "drafter", model)
    assert drafter.config.markov_rank == 8 and drafter.config.markov_head_type == "gated"
    assert drafter.draft_vocab.numel() == drafter.markov_head.markov_w2.weight.shape[0] <= 64 + 2
    # --init with another --projector: the Domino run's backbone under a new Markov head, said so
    traded = ["--out", str(tmp_path / "traded"), "--init", str(out / "drafter"), "--projector", "markov",
              "--emb-dim", "8", "--steps", "2"]
    capsys.readouterr()
    assert train_drafter_main(common[:2] + traded + common[4:]) == 0
    assert "keeps its backbone" in capsys.readouterr().out
    drafter = load_any_drafter(tmp_path / "traded" / "drafter", model)
    assert drafter.config.family == "dspark" and drafter.config.block_size == 4  # the --init drafter's shape


def test_autocast_auto_uses_bf16_only_where_it_is_native(monkeypatch):
    from hf_treegen.train.config import resolve_autocast

    assert resolve_autocast("none") == "none" and resolve_autocast("bf16") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert resolve_autocast("auto") == "none"  # emulated bf16 GEMMs are many times slower than fp32
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert resolve_autocast("auto") == "bf16"
