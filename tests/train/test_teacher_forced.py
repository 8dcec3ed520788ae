"""Teacher-forced drafter data: argmax labels on existing text, the greedy-consistency mask, mixed training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_treegen.train import data, teacher_forced as tf
from hf_treegen.train.blocks import block_labels, teacher_forced_labels
from hf_treegen.train.trainer import TrainConfig, train
from tests.helpers import byte_tokenizer, tiny_domino_config, tiny_target

VOCAB = 272  # >= the byte tokenizer's 259 ids


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_target("llama", vocab=VOCAB, layers=2, hidden=64)


CODE = "".join(f"def helper_{i}(x):\n    return x * {i} + {i % 3}\n\n" for i in range(12))
PROSE = "".join(f"Line {i}: the quick brown fox jumps over {i} lazy dogs.\n" for i in range(9))
TEXTS = [("py:pkg.helpers", CODE), ("notes/prose.txt", PROSE), ("doc:library/thing", "A short page.\n" * 6),
         ("notes/heap.txt", "We use heapq here.\n" * 3)]  # mentions an eval-reserved module: skipped
KW = dict(batch_size=3, chunk_tokens=48, window_items=5, shard_sequences=7, progress=False, model_name="tiny")


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory, model, tokenizer):
    out = tmp_path_factory.mktemp("tf")
    manifest = tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, out, **KW)
    return out, manifest


def _records(out):
    return [(r["prompt_id"], r["ids"].tolist(), r["response_start"], r["labels"].tolist())
            for r in data.load_corpus_records(out)]


# --------------------------------------------------------------------------------------------------
# the greedy-consistency mask

def _brute_labels(ids, target_next, anchors, depths, ignore=-100):
    n = len(ids)
    out = []
    for p in anchors:
        row = []
        for d in range(1, depths + 1):
            pos = p + d - 1
            ok = pos < n and target_next[pos] >= 0 and all(ids[p + j] == target_next[p + j - 1] for j in range(1, d))
            row.append(target_next[pos] if ok else ignore)
        out.append(row)
    return out


def test_mask_by_hand():
    #        pos: 0  1  2  3  4  5  6
    ids = torch.tensor([9, 9, 1, 2, 3, 4, 5])
    tn = torch.tensor([-1, -1, 2, 3, 7, 5, 6])  # argmax after ids[:i+1]; the text leaves the path at 5 (4 != 7)
    labels = teacher_forced_labels(ids, tn, torch.tensor([2, 4, 5, 6]), depths=4)
    assert labels.tolist() == [[2, 3, 7, -100],  # depths 1-3 follow the path; depth 4 needs ids[5] == tn[4]
                               [7, -100, -100, -100],  # depth 1 always; ids[5]=4 != 7 cuts the rest
                               [5, 6, -100, -100],  # ids[6] == tn[5]; then the text ends
                               [6, -100, -100, -100]]  # past-the-end label of the last position
    assert block_labels(ids, torch.tensor([2]), 4).tolist() == [[2, 3, 4, 5]]  # the text's tokens, unmasked


def test_mask_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    for trial in range(60):
        n = int(torch.randint(2, 14, (1,), generator=g))
        start = int(torch.randint(0, n, (1,), generator=g))
        ids = torch.randint(0, 3, (n,), generator=g)  # 3 symbols: agreements are frequent
        tn = torch.randint(0, 3, (n,), generator=g)
        tn[:start] = -1
        if trial % 5 == 0 and n > 3:
            tn[n // 2] = -1  # a hole inside the response
        anchors = torch.arange(start, n)
        depths = int(torch.randint(1, 7, (1,), generator=g))
        got = teacher_forced_labels(ids, tn, anchors, depths)
        assert got.shape == (len(anchors), depths)
        assert got.tolist() == _brute_labels(ids.tolist(), tn.tolist(), anchors.tolist(), depths), (ids, tn)


def test_mask_on_greedy_text_equals_block_labels():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (20,), generator=g)
    tn = torch.full((20,), -1)
    tn[5:19] = ids[6:]  # greedy text: the target's argmax is the next token; no label past the end
    anchors = torch.arange(5, 19)
    assert torch.equal(teacher_forced_labels(ids, tn, anchors, 6), block_labels(ids, anchors, 6))


# --------------------------------------------------------------------------------------------------
# the builder

def test_labels_are_the_model_argmax(tf_run, model, tokenizer):
    out, manifest = tf_run
    recs = data.load_corpus_records(out)
    assert len(recs) == manifest["num_sequences"] >= 6
    for r in recs:
        ids, start, labels = r["ids"], r["response_start"], r["labels"]
        assert labels.dtype == torch.int64 and labels.shape == ids.shape
        with torch.no_grad():
            argmax = model(ids[None]).logits[0].argmax(-1)
        assert torch.equal(labels[start:], argmax[start:])  # every response position, padding and batching aside
        assert (labels[:start] == data.NO_LABEL).all()
        assert 1 <= len(ids) - start <= KW["chunk_tokens"]
    assert manifest["labelled_tokens"] == sum(len(r["ids"]) - r["response_start"] for r in recs)
    assert manifest["sittings"][-1]["tokens_per_second"] > 0 and manifest["kind"] == "teacher_forced"
    assert manifest["label_survival"]["1"] == 1.0
    from safetensors.numpy import load_file

    arrays = load_file(str(sorted(out.glob("shard-*.safetensors"))[0]))
    assert arrays["labels"].dtype == arrays["tokens"].dtype == np.uint16
    assert (arrays["labels"] == data.label_sentinel(np.uint16)).sum() > 0


def test_items_are_chat_answers_that_cover_the_text(tf_run, tokenizer):
    out, manifest = tf_run
    by_id = {r["prompt_id"]: r for r in data.load_corpus_records(out)}
    doc = tf.Document("py:pkg.helpers", "pkg.helpers", text=CODE)
    items = tf.document_items(doc, tokenizer, chunk_tokens=KW["chunk_tokens"], seed=0)
    assert len(items) > 3 and [t for it in items for t in it.response] == tokenizer(CODE).input_ids
    assert items[0].user == tf.instruction(doc, 0, "", 0) and "`pkg.helpers`" in items[0].user
    assert items[1].user == "Show part 2 of the source of the Python module `pkg.helpers`."
    assert all(tokenizer.decode(it.response).endswith("\n") for it in items[:-1])  # cut at line ends
    for it in items:
        r = by_id[it.id]
        assert r["ids"].tolist() == data.chat_ids(tokenizer, it.user) + list(it.response)
        assert r["response_start"] == len(data.chat_ids(tokenizer, it.user))
    # the eval-mention filter: the chunk naming heapq is left out and listed
    heap = tf.document_items(tf.Document("file:notes/heap.txt", "notes/heap.txt", text=TEXTS[3][1]), tokenizer,
                             chunk_tokens=KW["chunk_tokens"], seed=0)
    assert {it.id for it in heap} <= set(manifest["skipped_eval_mentions"]) and not set(by_id) & {it.id for it in heap}


def test_resume_skips_done_items(tf_run, tmp_path, model, tokenizer):
    out, _ = tf_run
    part = tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, tmp_path, max_batches=2, **KW)
    assert part["this_run"]["stop_reason"] == "max_batches" and part["num_sequences"] <= 6
    rest = tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, tmp_path, **KW)
    assert rest["this_run"]["sequences"] == rest["num_sequences"] - part["num_sequences"] > 0
    assert _records(tmp_path) == _records(out)  # same items, batches and labels as an uninterrupted run
    again = tf.build_teacher_forced_corpus(model, tokenizer, list(reversed(TEXTS)), tmp_path, **KW)
    assert again["this_run"]["sequences"] == 0 and len(again["sittings"]) == 3
    capped = tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, tmp_path / "cap", max_tokens=60, **KW)
    assert capped["this_run"]["stop_reason"] == "max_tokens" and 60 <= capped["labelled_tokens"] < 60 + 3 * 48


def test_label_changing_settings_are_refused(tf_run, tmp_path, model, tokenizer):
    out, _ = tf_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    with pytest.raises(ValueError, match="chunk_tokens"):
        tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, copy, **{**KW, "chunk_tokens": 64})
    with pytest.raises(ValueError, match="model"):
        tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, copy, **{**KW, "model_name": "other"})
    gen = tmp_path / "gen"
    data.generate_corpus(model, tokenizer, ["hello"], gen, max_new_tokens=4, progress=False, model_name="tiny")
    with pytest.raises(ValueError, match="not a teacher-forced corpus"):
        tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, gen, **KW)
    # and generated answers never go into a teacher-forced folder, whatever the settings
    with pytest.raises(ValueError, match="not a generated corpus"):
        data.generate_corpus(model, tokenizer, ["hello"], copy, max_new_tokens=4, seed=0, progress=False,
                             model_name="tiny")


def test_sources_and_eval_hygiene(tmp_path):
    docs, lib, notes = tmp_path / "docs", tmp_path / "lib", tmp_path / "notes"
    files = {docs / "library/jsonish.rst.txt": "JSON-ish\n========\n\nThe :mod:`jsonish` module.\n",
             docs / "howto/sorting.rst.txt": "Sorting\n=======\n\nReserved for evaluation.\n",
             lib / "helpers.py": "def f():\n    return 1\n", lib / "textwrap.py": "def wrap():\n    pass\n",
             lib / "test/test_helpers.py": "def test():\n    pass\n",
             notes / "a.md": "# Notes\n\nSome text.\n", notes / ".hidden/b.txt": "hidden\n", notes / "empty.txt": ""}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (notes / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    assert [d.source for d in tf.stdlib_documents(lib)] == ["py:helpers"]
    pages = tf.python_docs_documents(docs)
    assert [(d.source, d.title) for d in pages] == [("doc:library/jsonish", "JSON-ish")]
    text, marks = pages[0].read()
    assert text.startswith("## JSON-ish") and ":mod:" not in text and marks == [(0, "JSON-ish")]
    assert [d.source for d in tf.source_documents([notes])] == ["file:a.md"]
    for bad, match in (("stdlb", "unknown source"), (str(tmp_path / "nope"), "does not exist"),
                       (str(lib / "helpers.py"), "is a file")):
        with pytest.raises(tf.SourceError, match=match):
            tf.source_documents([bad])
    order = tf.shuffled(tf.source_documents([notes, lib]), seed=3)
    assert order == tf.shuffled(list(reversed(order)), seed=3)


def test_cli_user_errors_exit_2(tmp_path, capsys):
    for argv, match in ((["--source", "stdlb"], "unknown source 'stdlb'"),
                        (["--source", str(tmp_path / "missing/dir")], "does not exist"),
                        (["--source", "stdlib", "--max-tokens", "0"], "--max-tokens must be >= 1")):
        assert tf.main(argv + ["--out", str(tmp_path / "out"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1 and "Traceback" not in err
    from hf_treegen.train.cli import train_drafter_main

    assert train_drafter_main(["--data", f"{tmp_path / 'nope'},{tmp_path}", "--out", str(tmp_path / "r"),
                               "--steps", "1"]) == 2
    assert "no such corpus folder" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# storage and training

def _write_corpus(folder: Path, seqs, starts, labels=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shard = data.Shard(0)
    for i, (ids, start) in enumerate(zip(seqs, starts)):
        shard.append(f"s{i}", np.asarray(ids, dtype=np.int64), start, finished=True,
                     labels=None if labels is None else labels[i])
    shard.write(folder, {}, np.uint16)
    return folder


@pytest.fixture(scope="module")
def pattern_corpus():
    """As in test_trainer: random prompts, responses walking a fixed cycle (so the drafter can learn)."""
    g = torch.Generator().manual_seed(0)
    succ = torch.arange(256)
    cycle = torch.randperm(63, generator=g) + 1
    succ[cycle] = cycle.roll(-1)
    corpus = []
    for _ in range(40):
        prompt = torch.randint(64, 256, (int(torch.randint(4, 9, (1,), generator=g)),), generator=g)
        walk = [int(torch.randint(1, 64, (1,), generator=g))]
        for _ in range(23):
            walk.append(int(succ[walk[-1]]))
        corpus.append((torch.cat([prompt, torch.tensor(walk)]), len(prompt)))
    return corpus


def fast_config(**kw) -> TrainConfig:
    base = dict(steps=6, sequences_per_step=3, anchors_per_sequence=6, lr=3e-3, warmup_steps=2, eval_every=3,
                checkpoint_every=3, val_fraction=0.2, val_blocks=64, autocast="none", patience=None)
    base.update(kw)
    return TrainConfig(**base)


def test_load_corpus_labels_api(tmp_path, pattern_corpus):
    seqs = [ids.numpy() for ids, _ in pattern_corpus[:3]]
    starts = [s for _, s in pattern_corpus[:3]]
    plain = _write_corpus(tmp_path / "plain", seqs, starts)
    labs = [np.where(np.arange(len(s)) >= st, (s + 1) % 256, data.NO_LABEL) for s, st in zip(seqs, starts)]
    labelled = _write_corpus(tmp_path / "lab", seqs, starts, [labs[0], None, labs[2]])
    assert [len(x) for x in data.load_corpus(plain)] == [2, 2, 2]  # the old API is unchanged
    assert all(x[2] is None for x in data.load_corpus(plain, with_labels=True))
    got = data.load_corpus(labelled, with_labels=True)
    assert np.array_equal(got[0][2].numpy(), labs[0]) and got[1][2] is None and np.array_equal(got[2][2], labs[2])
    assert [r["labels"] is None for r in data.load_corpus_records(labelled)] == [False, True, False]


def test_unlabelled_corpus_trains_as_before(model, pattern_corpus, tmp_path):
    """Pairs, a shard folder and a one-folder list train bit-identically; and a corpus whose labels are
    the greedy text's own next tokens trains exactly like the unlabelled one."""
    cfg = tiny_domino_config(model, block_size=4)
    seqs = [ids.numpy() for ids, _ in pattern_corpus]
    starts = [s for _, s in pattern_corpus]
    folder = _write_corpus(tmp_path / "plain", seqs, starts)
    greedy = [np.where(np.arange(len(s)) >= st, np.append(s[1:], data.NO_LABEL), data.NO_LABEL)
              for s, st in zip(seqs, starts)]
    labelled = _write_corpus(tmp_path / "greedy", seqs, starts, greedy)
    runs = {name: train(model, cfg, corpus, tmp_path / name, fast_config(), feature_cache=tmp_path / "feat",
                        progress=False)
            for name, corpus in (("pairs", pattern_corpus), ("folder", str(folder)), ("list", [folder]),
                                 ("greedy", str(labelled)))}
    ref = runs["pairs"]
    for name, r in runs.items():
        assert r.losses == ref.losses, name
        assert [e["accept_len"] for e in r.evals] == [e["accept_len"] for e in ref.evals], name
    assert runs["greedy"].summary["corpus"]["held_out_on"] == "teacher_forced"
    assert ref.summary["corpus"]["held_out_on"] == "generated" and "final_val_teacher_forced" not in ref.summary


def test_trainer_on_mixed_corpus(model, tokenizer, tf_run, tmp_path):
    out_tf, _ = tf_run
    gen = tmp_path / "gen"
    data.generate_corpus(model, tokenizer, [f"Question {i}: explain item {i}" for i in range(14)], gen,
                         batch_size=7, max_new_tokens=10, sample_fraction=0.0, progress=False, model_name="tiny")
    cfg = tiny_domino_config(model, block_size=4)
    config = fast_config(val_fraction=0.3, teacher_forced_weight=2.0)
    result = train(model, cfg, [gen, out_tf], tmp_path / "run", config, feature_cache=tmp_path / "feat", progress=False)
    corpus = result.summary["corpus"]
    assert result.step == 6 and all(np.isfinite(result.losses))
    assert corpus["held_out_on"] == "generated" and corpus["train_teacher_forced_sequences"] > 0
    n_tf = len(data.load_corpus(out_tf))
    assert corpus["sources"][str(out_tf)]["val_sequences"] == corpus["teacher_forced_val_sequences"] >= 1
    assert corpus["sources"][str(out_tf)]["train_sequences"] + corpus["teacher_forced_val_sequences"] == n_tf
    assert corpus["val_sequences"] == corpus["sources"][str(gen)]["val_sequences"] >= 1
    assert result.summary["final_val_teacher_forced"]["blocks"] > 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["corpus"]["held_out_on"] == "generated"

    # the same corpora drawn at fixed shares: the summary reports them, and the run trains
    mixed = train(model, cfg, [gen, out_tf], tmp_path / "mixed", fast_config(val_fraction=0.3, steps=3,
                  corpus_shares={str(gen): 0.25, str(out_tf): 0.75}), feature_cache=tmp_path / "feat", progress=False)
    assert mixed.summary["corpus"]["draw_shares"] == {str(gen): 0.25, str(out_tf): 0.75}
    assert mixed.step == 3 and all(np.isfinite(mixed.losses))
    assert corpus["draw_shares"][str(out_tf)] > 0  # the default: by size, teacher-forced anchors weigh 2


def test_features_from_the_labelling_forward_equal_a_separate_extraction(tmp_path, monkeypatch, model, tokenizer):
    """feature_layers keeps the tapped layers of the labelling forward in the trainer's default cache;
    they equal what the trainer's own extraction pass computes (fp16 storage)."""
    from hf_treegen.train.features import default_feature_cache_dir, extract_features

    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "tf"
    tf.build_teacher_forced_corpus(model, tokenizer, TEXTS, out, feature_layers=[0, 1], **KW)
    seqs = [ids for ids, _ in data.load_corpus(out)]
    cached = default_feature_cache_dir(model, [0, 1])
    from hf_treegen.train.features import FeatureCache, sequence_key, target_meta

    kept = FeatureCache(cached, target_meta(model, [0, 1]))
    assert all(sequence_key(s) in kept for s in seqs)
    fresh = extract_features(model, seqs, [0, 1], tmp_path / "fresh", progress=False)
    for s in seqs:
        a = kept.get(sequence_key(s)).astype(np.float32)
        b = fresh.get(sequence_key(s)).astype(np.float32)
        assert a.shape == b.shape == (len(s), 2 * model.config.hidden_size)
        np.testing.assert_allclose(a, b, atol=2e-2, rtol=1e-2)
