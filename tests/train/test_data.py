"""The drafter-distillation data stage: offline prompts with an eval hold-out, resumable corpus shards."""

from __future__ import annotations

import contextlib
import json
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_treegen.train import data, prompts
from tests.helpers import byte_tokenizer, tiny_target

# --------------------------------------------------------------------------------------------------
# fixtures: a byte-level tokenizer with a ChatML template, a tiny random target, small fake corpora

@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="module")
def model():
    return tiny_target("llama", vocab=272, layers=2, hidden=64)


RST_TRAIN = """\
:mod:`jsonish` --- A JSON-like encoder
======================================

.. module:: jsonish
   :synopsis: Encode things.

.. index:: single: JSON

The :mod:`jsonish` module turns Python objects into text. It supports ``dict`` and ``list``
objects and follows :pep:`8`. See :ref:`the tutorial <tut-json>` for more.

.. function:: dumps(obj, *, indent=None, \\
                    sort_keys=False)

   Serialize *obj* to a string. Use :func:`~jsonish.loads` to go back.

   .. versionadded:: 3.11

.. class:: Encoder(indent=None)

   An encoder object.

   .. method:: encode(obj)

      Return the text of *obj*.

Examples
--------

Some examples of what the module can do, written to be long enough for one chunk of text here::

   >>> dumps([1, 2, 3])
   '[1, 2, 3]'

The end of this example section explains nothing new but pads the text for the chunker.
"""

RST_EVAL_MODULE = """\
:mod:`textwrap` --- Text wrapping
=================================

.. module:: textwrap

.. function:: wrap(text, width=70)

   Wraps the single paragraph in *text* so every line is at most *width* characters long,
   which is a long enough sentence to form a chunk when the chunker needs two hundred chars.
"""

RST_EVAL_PAGE = """\
Sorting HOW TO
**************

Python lists have a built-in :meth:`list.sort` method that modifies the list in place. There is
also a :func:`sorted` built-in function that builds a new sorted list from an iterable, and this
sentence makes the paragraph long enough for a chunk.
"""

RST_TUTORIAL = """\
An Informal Introduction
************************

Numbers
=======

The interpreter acts as a simple calculator: you can type an expression at it and it will write
the value. Expression syntax is straightforward: the operators ``+``, ``-``, ``*`` and ``/`` work
just like in most other languages. Parentheses can be used for grouping. A heapq mention here
must remove this chunk from training because heapq is reserved for evaluation.

Strings
=======

Besides numbers, Python can also manipulate strings, which can be expressed in several ways. They
can be enclosed in single quotes or double quotes with the same result, and backslashes escape.
"""

PY_TRAIN = '''\
"""Small helpers used to exercise the prompt builder on ordinary code, with a module docstring."""

import os


def join_parts(parts, sep="/"):
    """Join the non-empty parts with sep, stripping separators at the joins."""
    cleaned = [p.strip(sep) for p in parts if p]
    return sep.join(cleaned)


def uses_reserved(items):
    import heapq
    heapq.heapify(items)
    return items


class Counter:
    """Count things."""

    def __init__(self):
        self.counts = {}

    def add(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n
        return self.counts[key]
'''

PY_EVAL = '''\
def wrap(text, width=70):
    """Wrap text to the given width, returning a list of lines without final newlines."""
    words = text.split()
    lines, cur = [], ""
    for w in words:
        if len(cur) + len(w) + 1 > width:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w).strip()
    return lines + [cur]
'''


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    docs, lib = root / "docs", root / "lib"
    files = {
        docs / "library/jsonish.rst.txt": RST_TRAIN,
        docs / "library/textwrap.rst.txt": RST_EVAL_MODULE,
        docs / "howto/sorting.rst.txt": RST_EVAL_PAGE,
        docs / "tutorial/introduction.rst.txt": RST_TUTORIAL,
        lib / "helpers.py": PY_TRAIN,
        lib / "pkg/__init__.py": PY_TRAIN.replace("join_parts", "join_bits"),
        lib / "textwrap.py": PY_EVAL,
        lib / "test/test_helpers.py": PY_TRAIN.replace("join_parts", "from_tests"),
        lib / "site-packages/thirdparty.py": PY_TRAIN.replace("join_parts", "third_party"),
    }
    real = Path(sysconfig.get_paths()["stdlib"])
    for name in ("colorsys.py", "fractions.py"):  # real code: one eval module, one training module
        if (real / name).is_file():
            files[lib / name] = (real / name).read_text()
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return docs, lib


# --------------------------------------------------------------------------------------------------
# prompts

def test_prompts_deterministic_prefix_and_seeded(corpora):
    docs, lib = corpora
    a = prompts.train_prompts(seed=3, docs_dir=docs, stdlib_root=lib)
    prompts._all_units.cache_clear()
    b = prompts.train_prompts(seed=3, docs_dir=docs, stdlib_root=lib)
    assert a == b and len(a) >= 15
    assert prompts.train_prompts(7, seed=3, docs_dir=docs, stdlib_root=lib) == a[:7]
    c = prompts.train_prompts(seed=4, docs_dir=docs, stdlib_root=lib)
    assert [p.text for p in c] != [p.text for p in a]
    assert len({p.id for p in a}) == len(a)
    assert all(p.id == prompts.prompt_id(p.text) for p in a)
    assert {p.source.split(":")[0] for p in a} == {"doc", "py"}
    assert len({p.template for p in a}) >= 6


def test_train_prompts_exclude_eval_sources(corpora):
    docs, lib = corpora
    train = prompts.train_prompts(seed=0, docs_dir=docs, stdlib_root=lib)
    sources = {p.source for p in train}
    assert not any(prompts.is_eval_source(s) for s in sources)
    assert not any(prompts.is_eval_prompt(p.text) for p in train)
    for banned in ("doc:library/textwrap", "doc:howto/sorting", "py:textwrap", "py:colorsys"):
        assert banned not in sources
    # skipped folders never contribute; reserved-module mentions are filtered inside training sources
    text = "\n".join(p.text for p in train)
    assert "from_tests" not in text and "third_party" not in text
    assert "heapq" not in text and "uses_reserved" not in text
    assert "py:helpers" in sources and "py:pkg" in sources and "doc:library/jsonish" in sources
    # reST markup is turned into plain text
    assert ":func:" not in text and ":mod:" not in text and ".. index" not in text
    assert any("`jsonish.dumps`" in p.text for p in train)
    assert any("`jsonish.Encoder.encode`" in p.text for p in train)

    held_out = prompts.eval_prompts(100, docs_dir=docs, stdlib_root=lib)
    assert held_out and all(prompts.is_eval_source(p.source) for p in held_out)
    assert {p.source for p in held_out} >= {"doc:library/textwrap", "doc:howto/sorting", "py:textwrap"}
    assert not {p.id for p in held_out} & {p.id for p in train}
    assert prompts.eval_prompts(3, docs_dir=docs, stdlib_root=lib) == held_out[:3]
    assert prompts.is_eval_prompt("Summarise what the os.path module is for.")
    assert prompts.is_eval_prompt("Explain textwrap.wrap") and not prompts.is_eval_prompt("Explain os.walk")


def test_docs_fetch_needs_apt(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))
    from hf_treegen import corpora

    monkeypatch.setattr(corpora.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get"):
        corpora.python_docs_dir()
    with pytest.raises(FileNotFoundError):
        corpora.python_docs_dir(download=False)


# --------------------------------------------------------------------------------------------------
# generation

TEXTS = [f"Question {i}: explain item {i}" + " more" * (i % 7) for i in range(22)]
KW = dict(batch_size=4, max_new_tokens=12, sample_fraction=0.3, seed=1, sort_window=8, shard_sequences=6,
          progress=False, model_name="tiny")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, model, tokenizer):
    out = tmp_path_factory.mktemp("full")
    manifest = data.generate_corpus(model, tokenizer, TEXTS, out, **KW)
    return out, manifest


def _records(out):
    return [(r["prompt_id"], r["ids"].tolist(), r["response_start"], r["sampled"], r["finished"])
            for r in data.load_corpus_records(out)]


def test_generation_writes_small_shards_and_manifest(full_run, tokenizer):
    out, manifest = full_run
    shards = sorted(out.glob("shard-*.safetensors"))
    assert len(shards) == 4 and [s["file"] for s in manifest["shards"]] == [p.name for p in shards]
    assert not list(out.glob("*.tmp"))
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["num_sequences"] == len(TEXTS) == len(set(on_disk["done"]))
    assert on_disk["settings"]["max_new_tokens"] == 12 and on_disk["model"] == "tiny"
    assert on_disk["token_dtype"] == "uint16"
    assert 0 < on_disk["sampled_sequences"] < len(TEXTS)
    from safetensors.numpy import load_file

    arrays = load_file(str(shards[0]))
    assert arrays["tokens"].dtype == np.uint16 and arrays["offsets"][-1] == arrays["tokens"].size
    total = sum(p.stat().st_size for p in shards)
    assert total < 2.2 * on_disk["total_tokens"] + 4096 * len(shards)  # ~2 bytes per token
    by_id = {prompts.prompt_id(t): t for t in TEXTS}
    for pid, ids, start, sampled, _ in _records(out):
        assert ids[:start] == data.chat_ids(tokenizer, by_id[pid])
        assert 1 <= len(ids) - start <= 12
        assert sampled == data.is_sampled(pid, 1, 0.3)
    assert on_disk["total_tokens"] == sum(len(r[1]) for r in _records(out))


def test_greedy_batched_matches_unbatched_generate(full_run, model, tokenizer):
    out, _ = full_run
    greedy = [r for r in data.load_corpus_records(out) if not r["sampled"]][:3]
    for r in greedy:
        prompt = r["ids"][: r["response_start"]].unsqueeze(0)
        ref = model.generate(prompt, max_new_tokens=12, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        ref = ref[0].tolist()
        if tokenizer.eos_token_id in ref[prompt.shape[1]:]:
            ref = ref[: ref.index(tokenizer.eos_token_id, prompt.shape[1]) + 1]
        assert r["ids"].tolist() == ref


def test_packed_kernels_are_entered_once_and_recorded(full_run, tmp_path, model, tokenizer, monkeypatch):
    out, manifest = full_run
    assert manifest["sittings"][-1]["packed_linears"] is True  # the default
    entered = []
    real = data.packed_linears

    @contextlib.contextmanager
    def spy(*models):
        entered.append(models)
        with real(*models):
            yield

    monkeypatch.setattr(data, "packed_linears", spy)
    packed = data.generate_corpus(model, tokenizer, TEXTS, tmp_path / "packed", **KW)
    plain = data.generate_corpus(model, tokenizer, TEXTS, tmp_path / "plain", packed=False, **KW)
    assert entered == [(model,)]  # one block around the whole sitting, none without packing
    assert packed["sittings"][-1]["packed_linears"] is True and plain["sittings"][-1]["packed_linears"] is False
    assert _records(tmp_path / "packed") == _records(tmp_path / "plain") == _records(out)


def test_resume_skips_done_and_matches_uninterrupted(full_run, tmp_path, model, tokenizer):
    out, _ = full_run
    part = data.generate_corpus(model, tokenizer, TEXTS, tmp_path, max_batches=2, **KW)
    assert part["this_run"]["stop_reason"] == "max_batches" and part["num_sequences"] == 8
    rest = data.generate_corpus(model, tokenizer, TEXTS, tmp_path, **KW)
    assert rest["this_run"]["sequences"] == len(TEXTS) - 8
    assert _records(tmp_path) == _records(out)
    again = data.generate_corpus(model, tokenizer, TEXTS, tmp_path, **KW)
    assert again["this_run"]["sequences"] == 0 and again["num_sequences"] == len(TEXTS)
    assert len(again["sittings"]) == 3


def test_crash_mid_batch_loses_only_that_batch(full_run, tmp_path, model, tokenizer, monkeypatch):
    out, _ = full_run
    real = data._generate_batch
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("power cut")
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "_generate_batch", flaky)
    with pytest.raises(RuntimeError, match="power cut"):
        data.generate_corpus(model, tokenizer, TEXTS, tmp_path, **KW)
    assert len(data.load_corpus(tmp_path)) == 12
    monkeypatch.setattr(data, "_generate_batch", real)
    (tmp_path / "shard-00001.safetensors.tmp").write_bytes(b"half-written")  # a torn write is ignored
    (tmp_path / "manifest.json").unlink()  # the shards alone are enough to resume
    data.generate_corpus(model, tokenizer, TEXTS, tmp_path, **KW)
    assert _records(tmp_path) == _records(out)


def test_settings_change_is_refused(full_run, model, tokenizer, tmp_path):
    out, _ = full_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    with pytest.raises(ValueError, match="max_new_tokens"):
        data.generate_corpus(model, tokenizer, TEXTS, copy, **{**KW, "max_new_tokens": 20})


def test_load_corpus_round_trip(full_run):
    out, manifest = full_run
    corpus = data.load_corpus(out)
    records = data.load_corpus_records(out)
    assert len(corpus) == len(records) == len(TEXTS)
    for (ids, start), r in zip(corpus, records):
        assert ids.dtype == torch.int64 and ids.dim() == 1
        assert torch.equal(ids, r["ids"]) and start == r["response_start"]
    assert sum(len(ids) for ids, _ in corpus) == manifest["total_tokens"]
    assert sum(len(ids) - s for ids, s in corpus) == manifest["response_tokens"]
    greedy = data.load_corpus(out, include_sampled=False)
    assert len(greedy) == len(TEXTS) - manifest["sampled_sequences"]


def test_prompt_objects_and_long_prompts(model, tokenizer, tmp_path):
    items = [prompts.Prompt("a1", "short one", "doc:x", "t"), prompts.Prompt("b2", "long " * 200, "doc:x", "t")]
    m = data.generate_corpus(model, tokenizer, items, tmp_path, **{**KW, "max_prompt_tokens": 100})
    assert m["done"] == ["a1"] and m["skipped_too_long"] == ["b2"]
