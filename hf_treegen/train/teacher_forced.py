"""Teacher-forced drafter data: existing text, labelled with the target's own argmax at every position.

Generating answers (:mod:`hf_treegen.train.data`) costs one target step per token (~150 tokens/s for
SmolLM2-135M on 2 CPU threads). A teacher-forced pass over existing text costs one batched forward per
sequence and yields a label per position at 3-6x that rate. The drafter must predict what the
*target* would say, so the stored label of position i is the target's argmax next token after
``ids[:i+1]``, not the text's next token; the trainer keeps a label only while the text between the
block anchor and the label followed the target's greedy path
(:func:`hf_treegen.train.blocks.teacher_forced_labels`).

Items. Each source document is cut into chunks of at most ``chunk_tokens`` tokens (at line ends when
possible), and each chunk becomes the assistant turn of a one-turn chat whose user turn is a short
instruction naming the source ("Show the source of the Python module `json.decoder`.", "Explain this
part of the Python documentation: JSON encoder and decoder: Basic Usage", "Show the contents of the
file `notes/todo.txt`."), so the contexts look like the chat contexts the drafter meets at inference.
The prompt is :func:`hf_treegen.train.data.chat_ids` of that instruction, exactly as for generated
answers, and ``response_start`` is the first chunk token. Sources:

* ``stdlib``: the running interpreter's standard library ``.py`` files
  (:func:`hf_treegen.corpora.stdlib_modules`: no site-packages, no test suites);
* ``python-docs``: the Python 3.11 reST documentation sources of Debian ``python3.11-doc``
  (:func:`hf_treegen.corpora.python_docs_dir`, fetched once), turned into plain text by the same
  cleaner the prompt builder uses, with ``## section`` headings;
* any folder: every UTF-8 text file under it (hidden entries, binary and empty files skipped).

Evaluation hygiene is that of :func:`~hf_treegen.train.prompts.train_prompts`: sources reserved for
evaluation (:func:`~hf_treegen.train.prompts.is_eval_source`) are left out, and so is every chunk whose
text mentions a reserved module (:func:`~hf_treegen.train.prompts.is_eval_prompt`; counted in the
manifest as ``skipped_eval_mentions``).

Order and resumption. Documents are put in a seeded shuffle (a function of the document names and
``seed`` only) and chunked lazily; items are taken in windows of ``window_items``, sorted by length
within the window and cut into right-padded batches of ``batch_size``; batches are formed from the
whole window, done or not, and done items are dropped afterwards, so a resumed run reproduces the
batches of an uninterrupted one. Item ids are content hashes. Storage is that of
:func:`~hf_treegen.train.data.generate_corpus` (shards rewritten atomically after every batch, plus
``manifest.json``), with the per-token ``labels`` array; a crash loses at most one batch, re-running
skips every stored item, and settings that change the labels (model, dtype, chat template,
``chunk_tokens``, ``seed``) on an existing folder raise. The manifest records labelled tokens/s per
sitting and the share of positions whose depth-d labels survive the greedy-consistency mask.

Command line: ``hf-treegen teacher-forced-data``:

    hf-treegen teacher-forced-data --source stdlib --source python-docs --out data/drafter/smollm2-tf \\
        --max-tokens 2000000 --time-budget-min 60 --threads 2
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch

from ..cli_types import add_placement_arguments, seconds_left, user_error
from ..target import FeatureTap, is_sharded

from .features import FeatureCache, default_feature_cache_dir, sequence_key, target_meta
from .data import NO_LABEL, CorpusAppender, Sitting, chat_ids
from .processes import Processes, Rounds

KIND = "teacher_forced"
TEMPLATE_VERSION = 1
#: Settings that change the items or their labels; an existing corpus must match them to be extended.
LABEL_SETTINGS = ("kind", "model", "dtype", "chat_template", "chunk_tokens", "seed", "template_version")
#: Named sources; anything else must be an existing folder.
SOURCES = ("stdlib", "python-docs")
#: Depths whose greedy-consistency survival the manifest reports (depth d needs d-1 agreeing steps).
SURVIVAL_DEPTHS = 8
MIN_CHUNK_TOKENS = 8


# --------------------------------------------------------------------------------------------------
# documents

@dataclass(frozen=True)
class Document:
    """One source text. ``source``: ``py:<module>``, ``doc:<page>`` or ``file:<relative path>`` (the
    instruction templates depend on the prefix); ``title``: the module, page title or path named in the
    instruction; the text is ``text`` or read from ``path`` on first use."""

    source: str
    title: str
    path: Path | None = None
    text: str | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        kind = self.source.partition(":")[0]
        return kind if kind in ("py", "doc") else "file"

    def read(self) -> tuple[str, list[tuple[int, str]]]:
        """(text, section marks): marks are ``(char offset, section title)``, sorted (docs only)."""
        raw = self.text if self.text is not None else Path(self.path).read_text(encoding="utf-8", errors="replace")
        if self.kind == "doc" and self.text is None:
            return _doc_text(raw)
        return raw, []


def _doc_text(raw: str) -> tuple[str, list[tuple[int, str]]]:
    """A reST page as plain text (the prompt builder's cleaner) with ``## title`` section headings."""
    from ..corpora import clean_section, parse_rst, title_text

    context: dict = {"module": None}
    parts: list[str] = []
    marks: list[tuple[int, str]] = []
    offset = 0
    for title, body in parse_rst(raw):
        clean, _ = clean_section(body, context)
        clean = clean.strip("\n")
        heading = title_text(title) if title else ""
        block = (f"## {heading}\n\n{clean}" if clean.strip() else f"## {heading}") if heading else clean
        if not block.strip():
            continue
        marks.append((offset, heading))
        parts.append(block)
        offset += len(block) + 2
    return "\n\n".join(parts), marks


def stdlib_documents(root: str | Path | None = None) -> list[Document]:
    """The standard library's modules (no tests, no site-packages), eval-reserved modules excluded."""
    from ..corpora import stdlib_modules
    from .prompts import is_eval_source

    return [Document(f"py:{module}", module, path) for module, path in stdlib_modules(root)
            if not is_eval_source(f"py:{module}")]


def python_docs_documents(root: str | Path | None = None) -> list[Document]:
    """The Python 3.11 documentation pages (fetched once when ``root`` is None), eval-reserved pages
    excluded. The title is the page's first heading."""
    from ..corpora import doc_pages, parse_rst, python_docs_dir, title_text
    from .prompts import is_eval_source

    root = python_docs_dir() if root is None else Path(root)
    out = []
    for page, path in doc_pages(root):
        if is_eval_source(f"doc:{page}"):
            continue
        title = ""
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
        title = next((title_text(t) for t, _ in parse_rst(head) if t), "") or page.rsplit("/", 1)[-1]
        out.append(Document(f"doc:{page}", title, path))
    return out


def folder_documents(root: str | Path) -> list[Document]:
    """Every non-empty UTF-8 text file under ``root`` (hidden files and folders, binaries skipped)."""
    root = Path(root)
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        try:
            with open(path, "rb") as fh:
                head = fh.read(8192)
        except OSError:
            continue
        if not head.strip() or b"\0" in head or not _utf8(head):
            continue
        out.append(Document(f"file:{rel.as_posix()}", rel.as_posix(), path))
    return out


def _utf8(head: bytes) -> bool:
    for cut in range(4):  # the 8 KiB head may end inside a multi-byte character
        try:
            head[: len(head) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


class SourceError(ValueError):
    """A source name that is neither known nor an existing folder, or a folder without text files."""


def source_documents(sources: Sequence[str | Path]) -> list[Document]:
    """Documents of ``stdlib``, ``python-docs`` and/or folders. Raises :class:`SourceError` for an
    unknown name, a missing or empty folder; RuntimeError if the Python docs cannot be fetched."""
    out: list[Document] = []
    for src in sources:
        name = str(src)
        if name == "stdlib":
            out.extend(stdlib_documents())
        elif name == "python-docs":
            out.extend(python_docs_documents())
        else:
            path = Path(name).expanduser()
            if not path.is_dir():
                if path.exists():
                    raise SourceError(f"source {name!r} is a file; give a folder of text files")
                if "/" in name or name.startswith((".", "~")):
                    raise SourceError(f"source folder {name!r} does not exist")
                raise SourceError(f"unknown source {name!r}: use {', '.join(SOURCES)} or an existing folder")
            docs = folder_documents(path)
            if not docs:
                raise SourceError(f"source folder {name!r} holds no text files")
            out.extend(docs)
    return out


def _normalise_documents(texts: Iterable) -> list[Document]:
    out, seen = [], set()
    for t in texts:
        if isinstance(t, Document):
            doc = t
        elif isinstance(t, tuple):
            source, text = t
            source = str(source)
            if ":" not in source:
                source = f"file:{source}"
            doc = Document(source, source.partition(":")[2], text=text)
        else:
            source = "file:" + hashlib.sha1(str(t).encode()).hexdigest()[:12]
            doc = Document(source, "notes.txt", text=str(t))
        if doc.source in seen:
            continue
        seen.add(doc.source)
        out.append(doc)
    return out


def shuffled(documents: Sequence[Document], seed: int) -> list[Document]:
    """The documents sorted by source and shuffled with ``seed`` (independent of the input order)."""
    docs = sorted(documents, key=lambda d: d.source)
    random.Random(f"teacher-forced:{seed}").shuffle(docs)
    return docs


# --------------------------------------------------------------------------------------------------
# items: chunks as chat answers

PY_TEMPLATES = ("Show the source of the Python module `{title}`.",
                "Show me the implementation of the `{title}` module from the Python standard library.",
                "Print the code of the standard library module `{title}`.")
PY_PART = "Show part {part} of the source of the Python module `{title}`."
DOC_TEMPLATES = ("Explain this part of the Python documentation: {topic}",
                 "What does the Python documentation say about {topic}?",
                 "Show the Python documentation on {topic}.")
FILE_TEMPLATES = ("Show the contents of the file `{title}`.", "Print the file `{title}`.")
FILE_PART = "Show part {part} of the file `{title}`."


@dataclass(frozen=True)
class Item:
    """One teacher-forced sequence: the chat prompt of ``user`` (:meth:`prompt_ids`) + a chunk of source
    tokens as the answer. ``id`` is a content hash of source, part, instruction and chunk tokens."""

    id: str
    source: str
    user: str
    response: tuple[int, ...]
    text: str  # the chunk, decoded (for the eval-mention filter)

    def prompt_ids(self, tokenizer) -> list[int]:
        return chat_ids(tokenizer, self.user)


def instruction(doc: Document, part: int, section: str, seed: int) -> str:
    """The user turn of chunk ``part`` (0-based) of ``doc``."""
    rng = random.Random(f"{seed}:{doc.source}:{part}")
    if doc.kind == "py":
        template = rng.choice(PY_TEMPLATES) if part == 0 else PY_PART
        return template.format(title=doc.title, part=part + 1)
    if doc.kind == "doc":
        topic = doc.title
        if section and section != doc.title:
            topic = f"{doc.title}: {section}" if doc.title else section
        return rng.choice(DOC_TEMPLATES).format(topic=topic)
    template = rng.choice(FILE_TEMPLATES) if part == 0 else FILE_PART
    return template.format(title=doc.title, part=part + 1)


def chunk_spans(tokenizer, text: str, chunk_tokens: int) -> tuple[list[int], list[tuple[int, int, int]]]:
    """Token ids of ``text`` and ``(start, end, char offset)`` spans of at most ``chunk_tokens`` tokens,
    cut after a token holding a line break when one lies in the second half of the window."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), list(enc["offset_mapping"])
    breaks = [i for i, (a, b) in enumerate(offsets) if "\n" in text[a:b]]
    spans, start = [], 0
    while start < len(ids):
        end = min(start + chunk_tokens, len(ids))
        if end < len(ids):
            k = bisect.bisect_left(breaks, end) - 1  # last break token < end
            if k >= 0 and breaks[k] >= start + chunk_tokens // 2:
                end = breaks[k] + 1
        spans.append((start, end, offsets[start][0] if offsets else 0))
        start = end
    return ids, spans


def document_items(doc: Document, tokenizer, *, chunk_tokens: int, seed: int) -> list[Item]:
    """The chat items of one document, in text order."""
    text, marks = doc.read()
    if not text.strip():
        return []
    ids, spans = chunk_spans(tokenizer, text, chunk_tokens)
    mark_offsets = [m[0] for m in marks]
    items = []
    for part, (a, b, char) in enumerate(spans):
        response = ids[a:b]
        chunk_text = tokenizer.decode(response)
        if b - a < MIN_CHUNK_TOKENS or not chunk_text.strip():
            continue
        section = ""
        if marks:
            k = bisect.bisect_right(mark_offsets, char) - 1
            section = marks[max(k, 0)][1]
        user = instruction(doc, part, section, seed)
        h = hashlib.sha1(f"{doc.source}\0{part}\0{user}\0".encode())
        h.update(np.asarray(response, dtype=np.int64).tobytes())
        items.append(Item(h.hexdigest()[:16], doc.source, user, tuple(response), chunk_text))
    return items


def _windows(docs: Sequence[Document], tokenizer, *, chunk_tokens: int, seed: int, window_items: int
             ) -> Iterator[list[Item]]:
    window: list[Item] = []
    for doc in docs:
        window.extend(document_items(doc, tokenizer, chunk_tokens=chunk_tokens, seed=seed))
        while len(window) >= window_items:
            yield window[:window_items]
            window = window[window_items:]
    if window:
        yield window


# --------------------------------------------------------------------------------------------------
# the forward

@torch.no_grad()
def argmax_labels(model, seqs: Sequence[Sequence[int]], starts: Sequence[int], pad_token_id: int = 0,
                  head_rows: int = 512) -> list[np.ndarray]:
    """One right-padded forward over ``seqs``: per sequence an int64 array like it, entry i the
    target's argmax next token after ``seq[:i+1]`` for ``i >= start``, :data:`NO_LABEL` before.

    The lm_head runs only on those rows, ``head_rows`` at a time (no (batch, T, V) logits tensor). It is
    applied to the decoder's final hidden states (``model.get_decoder()``); argmax-preserving output
    transforms (logit soft-capping, positive scaling) are skipped; models without ``get_decoder`` fall
    back to the full logits."""
    device = model.get_input_embeddings().weight.device
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        input_ids[r, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        attention[r, : len(s)] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    decoder = getattr(model, "get_decoder", lambda: None)()
    head = model.get_output_embeddings()
    out = []
    if decoder is not None and head is not None:
        hidden = decoder(input_ids=input_ids, attention_mask=attention, use_cache=False).last_hidden_state
        for r, (s, start) in enumerate(zip(seqs, starts)):
            rows = hidden[r, start: len(s)]
            best = torch.cat([head(rows[k: k + head_rows]).argmax(-1) for k in range(0, rows.shape[0], head_rows)]) \
                if rows.shape[0] else torch.zeros(0, dtype=torch.long, device=device)
            lab = np.full(len(s), NO_LABEL, dtype=np.int64)
            lab[start:] = best.cpu().numpy()
            out.append(lab)
        return out
    logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits
    for r, (s, start) in enumerate(zip(seqs, starts)):
        lab = np.full(len(s), NO_LABEL, dtype=np.int64)
        lab[start:] = logits[r, start: len(s)].argmax(-1).cpu().numpy()
        out.append(lab)
    return out


def survival_counts(ids: np.ndarray, labels: np.ndarray, start: int, depths: int = SURVIVAL_DEPTHS
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per depth d = 1..depths: (anchors p >= start whose depth-d label position p+d-1 exists, those of
    them whose text followed the target's argmax at p+1..p+d-1), i.e. the labels that survive the mask
    of :func:`~hf_treegen.train.blocks.teacher_forced_labels` (sequence-end cuts not counted as lost)."""
    n = len(ids)
    total, kept = np.zeros(depths, dtype=np.int64), np.zeros(depths, dtype=np.int64)
    if n - start <= 0:
        return total, kept
    agree = np.zeros(n, dtype=bool)
    agree[:-1] = (ids[1:] == labels[:-1]) & (labels[:-1] >= 0)
    run = np.zeros(n, dtype=np.int64)  # run[k]: consecutive agreements starting at k
    for k in range(n - 2, -1, -1):
        run[k] = run[k + 1] + 1 if agree[k] else 0
    p = np.arange(start, n)
    for d in range(1, depths + 1):
        has = p + d - 1 <= n - 1
        total[d - 1] = int(has.sum())
        kept[d - 1] = int((has & (run[p] >= d - 1)).sum())
    return total, kept


# --------------------------------------------------------------------------------------------------
# the corpus

def build_teacher_forced_corpus(model, tokenizer, texts: Iterable, out_dir: str | Path, *, batch_size: int = 8,
                                chunk_tokens: int = 512, seed: int = 0, window_items: int = 64,
                                shard_sequences: int = 512, max_tokens: int | None = None,
                                time_budget_s: float | None = None, max_batches: int | None = None,
                                model_name: str | None = None, progress: bool = True,
                                feature_layers: Sequence[int] | None = None,
                                processes: Processes | None = None) -> dict:
    """Label chunks of ``texts`` with ``model``'s argmax and append them to shards in ``out_dir``.

    ``texts``: :class:`Document` objects (:func:`source_documents`), ``(source, text)`` pairs (a source
    without ``py:``/``doc:`` prefix is a file name) or plain strings. ``max_tokens``: stop once the
    corpus holds that many labelled (response) tokens; ``time_budget_s``: no batch is started that
    would, judging by the previous batch, end after the budget; ``max_batches`` caps the batches of
    this call. Returns the updated manifest plus ``"this_run"`` statistics.

    ``feature_layers``: also keep the outputs of these target layers from the same forward, in the
    trainer's default feature cache (:func:`~hf_treegen.train.features.default_feature_cache_dir`), so
    that training a drafter that taps them needs no second pass over this corpus (fp32 targets only:
    features must be what the fp32 target gives at inference).

    ``processes`` (default: :meth:`~.processes.Processes.current`): launched as several, each process
    labels one batch of every round and the main process stores the labels (and features) in order,
    so the corpus is the one a single process would write; the other processes return ``{}``.
    """
    processes = processes or Processes.current()
    if chunk_tokens < MIN_CHUNK_TOKENS:
        raise ValueError(f"chunk_tokens must be >= {MIN_CHUNK_TOKENS}, got {chunk_tokens}")
    if batch_size < 1 or window_items < 1:
        raise ValueError("batch_size and window_items must be >= 1")
    docs = shuffled(_normalise_documents(texts), seed)
    settings = _label_settings(model, tokenizer, model_name, chunk_tokens, seed)
    vocab = max(len(tokenizer), int(model.config.vocab_size))
    token_dtype = np.uint16 if vocab < 1 << 16 else np.uint32  # the max value is the "no label" sentinel
    _check_feature_layers(model, feature_layers)  # before the corpus folder is opened: a refusal leaves none
    labeller = _Labeller(model, tokenizer, feature_layers)
    run = None
    if processes.is_main:  # the one writer
        corpus = CorpusAppender(out_dir, settings, token_dtype, compare=LABEL_SETTINGS,
                                shard_sequences=shard_sequences)
        features = None if feature_layers is None else \
            FeatureCache(default_feature_cache_dir(model, feature_layers), target_meta(model, feature_layers))
        run = _LabellingRun(corpus, docs, vocab, batch_size, features)
        run.save_manifest()
    # the others learn from the main process which items are stored or skipped already (the main
    # process keeps its own sets, which grow as it stores)
    done, skipped = processes.from_main((run.corpus.done, run.skipped) if run is not None else None)
    windows = _windows(docs, tokenizer, chunk_tokens=chunk_tokens, seed=seed, window_items=window_items)
    batches = _batches_to_label(windows, batch_size, done, skipped)
    if run is None:
        for _ in Rounds(processes, None, labeller.idle).over(batches, labeller):
            pass  # the main process stores the rounds
        return {}
    bar = run.progress_bar(max_tokens) if progress else None
    try:
        stop_reason = run.label(batches, labeller, processes, max_tokens=max_tokens, max_batches=max_batches,
                                time_budget_s=time_budget_s, bar=bar)
    finally:
        if bar is not None:
            bar.close()
    run.sitting.finish(stop_reason)
    manifest = run.save_manifest()
    manifest["this_run"] = run.sitting.run
    return manifest


def _label_settings(model, tokenizer, model_name: str | None, chunk_tokens: int, seed: int) -> dict:
    """The corpus settings (those in :data:`LABEL_SETTINGS` must match to extend an existing corpus)."""
    name = model_name or Path(str(getattr(model.config, "_name_or_path", "") or type(model).__name__)).name
    template_hash = hashlib.sha1(str(getattr(tokenizer, "chat_template", "")).encode()).hexdigest()[:12]
    return {"kind": KIND, "model": name, "dtype": str(model.dtype).replace("torch.", ""),
            "chat_template": template_hash, "chunk_tokens": int(chunk_tokens), "seed": int(seed),
            "template_version": TEMPLATE_VERSION}


def _check_feature_layers(model, feature_layers: Sequence[int] | None) -> None:
    """Features are kept from fp32 targets only: they must be what the target gives at inference."""
    if feature_layers is not None and model.dtype != torch.float32:
        raise ValueError(f"feature_layers needs the fp32 target (features must match inference); got {model.dtype}.")


def _length_sorted_batches(items: list[Item], batch_size: int) -> list[list[Item]]:
    """``items`` sorted by answer length (ties in input order) and cut into batches of ``batch_size``."""
    order = sorted(range(len(items)), key=lambda k: (len(items[k].response), k))
    return [[items[k] for k in order[b: b + batch_size]] for b in range(0, len(order), batch_size)]


def _batches_to_label(windows: Iterable[list[Item]], batch_size: int, done: set[str], skipped: set[str]
                      ) -> Iterator[list[Item]]:
    """The batches still to label, window after window: batches are cut from the whole window, done
    or not (a resumed run makes the same batches), then done items are dropped. Items that mention an
    evaluation-reserved module are left out and join ``skipped``."""
    from .prompts import is_eval_prompt

    for window in windows:
        kept = []
        for item in window:
            if item.id in skipped or is_eval_prompt(item.text) or is_eval_prompt(item.user):
                skipped.add(item.id)
            else:
                kept.append(item)
        for batch in _length_sorted_batches(kept, batch_size):
            batch = [it for it in batch if it.id not in done]
            if batch:
                yield batch


@dataclass
class _Labelled:
    """One labelled batch: prompt + chunk ids per item, the target's labels per item (int64, NO_LABEL
    over the prompt), and, when features are kept, ``(sequence key, (len, k*H) fp16 features)`` per item."""

    prompts: list[list[int]]
    seqs: list[list[int]]
    labels: list[np.ndarray]
    features: list[tuple[str, np.ndarray]] | None


class _Labeller:
    """What every process does to a batch: one target forward, its argmax labels (and the tapped
    layers' outputs of that same forward when ``feature_layers`` are kept)."""

    def __init__(self, model, tokenizer, feature_layers: Sequence[int] | None):
        self.model, self.tokenizer, self.feature_layers = model, tokenizer, feature_layers
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # a process without a batch runs a one-token forward beside the others where the target is
        # sharded over them (each of its forwards needs every process)
        self.idle = self._one_token_forward if is_sharded(model) else None

    def _one_token_forward(self) -> None:
        argmax_labels(self.model, [[self.pad]], [0], pad_token_id=self.pad)

    def __call__(self, batch: list[Item]) -> _Labelled:
        prompts = [it.prompt_ids(self.tokenizer) for it in batch]
        seqs = [p + list(it.response) for p, it in zip(prompts, batch)]
        starts = [len(p) for p in prompts]
        if self.feature_layers is None:
            return _Labelled(prompts, seqs, argmax_labels(self.model, seqs, starts, pad_token_id=self.pad), None)
        with FeatureTap(self.model, self.feature_layers) as tap:
            labels = argmax_labels(self.model, seqs, starts, pad_token_id=self.pad)
            taken = tap.take_all().to(torch.float16).cpu().numpy()  # (b, T, k*H)
        features = [(sequence_key(torch.as_tensor(seq)), np.ascontiguousarray(taken[r, : len(seq)]))
                    for r, seq in enumerate(seqs)]
        return _Labelled(prompts, seqs, labels, features)


class _LabellingRun:
    """The main process's side of one :func:`build_teacher_forced_corpus` call: the corpus opened for
    appending, the manifest's running totals (survival, skipped ids, sources) and this sitting."""

    def __init__(self, corpus: CorpusAppender, docs: Sequence[Document], vocab: int, batch_size: int,
                 features: FeatureCache | None):
        self.corpus, self.vocab, self.features = corpus, vocab, features
        self.seconds_before = float(corpus.previous.get("forward_seconds", 0.0))
        self.skipped = set(corpus.previous.get("skipped_eval_mentions", []))
        self.sources = sorted(set(corpus.previous.get("sources", []))
                              | {d.source.partition(":")[0] if d.kind != "file" else "file" for d in docs})
        self.survival = _Survival()
        for shard in corpus.shards:
            for seq, start, labels in zip(shard.seqs, shard.response_start, shard.labels):
                if labels is not None:
                    self.survival.add(seq, labels, start)
        # created last: the sitting's clock (time budget, tokens/s) starts once the stored shards are read
        self.sitting = Sitting(batch_size, ("labelled_tokens", "tokens"))

    def labelled_tokens(self) -> int:
        """Labelled (response) tokens the corpus holds now."""
        return sum(s.response_tokens() for s in self.corpus.shards)

    def save_manifest(self) -> dict:
        """Write and return the manifest with this sitting's statistics so far."""
        return self.corpus.write_manifest(
            {"kind": KIND, "model": self.corpus.settings["model"], "sources": self.sources, "vocab_size": self.vocab},
            {"labelled_tokens": self.labelled_tokens(), "label_survival": self.survival.shares(),
             "forward_seconds": round(self.seconds_before + self.sitting.run["seconds"], 1),
             "skipped_eval_mentions": sorted(self.skipped)},
            self.sitting.run)

    def progress_bar(self, max_tokens: int | None):
        """A tqdm bar of labelled tokens, starting at those already stored."""
        from tqdm.auto import tqdm

        return tqdm(total=max_tokens, initial=self.labelled_tokens(), unit="tok", unit_scale=True, dynamic_ncols=True,
                    desc=f"teacher-forced labels ({len(self.corpus.done)} done)")

    def label(self, batches: Iterable[list[Item]], labeller: _Labeller, processes: Processes, *,
              max_tokens: int | None, max_batches: int | None, time_budget_s: float | None, bar) -> str:
        """Label (one batch per process a round) and store ``batches`` until a limit stops it; returns
        the stop reason."""
        def decide() -> tuple[int, str | None]:
            full = max_tokens is not None and self.labelled_tokens() >= max_tokens
            return self.sitting.allowed_batches(processes.count, max_batches, time_budget_s, (full, "max_tokens"))

        rounds = Rounds(processes, decide, labeller.idle)
        for labelled in rounds.over(batches, labeller):
            for batch, result in labelled:
                self._store(batch, result, bar)
            self.sitting.batch_started()
        return rounds.stop_reason or "finished"

    def _store(self, batch: list[Item], labelled: _Labelled, bar) -> None:
        """One labelled batch stored as a new batch of the corpus (its features in the feature cache)."""
        if self.features is not None:
            self.features.write_chunk(labelled.features)
        records = []
        for it, prompt, seq, lab in zip(batch, labelled.prompts, labelled.seqs, labelled.labels):
            arr = np.asarray(seq, dtype=np.int64)
            records.append({"prompt_id": it.id, "seq": arr, "response_start": len(prompt), "labels": lab})
            self.survival.add(arr, lab, len(prompt))
        shard = self.corpus.add_batch(records)
        new_tokens = sum(len(it.response) for it in batch)
        self.sitting.batch_done(len(batch), labelled_tokens=new_tokens,
                                tokens=sum(len(seq) for seq in labelled.seqs))
        self.sitting.run["tokens_per_second"] = self.sitting.rate("labelled_tokens")  # labelled (response) tokens
        self.sitting.run["forward_tokens_per_second"] = self.sitting.rate("tokens")  # prompt + response
        manifest = self.save_manifest()
        if bar is not None:
            bar.update(new_tokens)
            bar.set_postfix(tok_s=f"{self.sitting.run['tokens_per_second']:.0f}", seqs=manifest["num_sequences"],
                            d2=manifest["label_survival"]["2"], shard=shard.index)


class _Survival:
    """Running counts of how many depth-d labels survive the greedy-consistency mask (the manifest
    reports the share per depth)."""

    def __init__(self):
        self.total = np.zeros(SURVIVAL_DEPTHS, np.int64)
        self.kept = np.zeros(SURVIVAL_DEPTHS, np.int64)

    def add(self, seq: np.ndarray, labels: np.ndarray, start: int) -> None:
        total, kept = survival_counts(seq, labels, start)
        self.total += total
        self.kept += kept

    def shares(self) -> dict[str, float]:
        return {str(d + 1): round(float(self.kept[d] / max(self.total[d], 1)), 4) for d in range(SURVIVAL_DEPTHS)}


# --------------------------------------------------------------------------------------------------
# command line

DTYPES = ("fp32", "bf16", "fp16")
PROG = "hf-treegen teacher-forced-data"


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--source", action="append", required=True,
                   help="stdlib, python-docs or a folder of text files; repeat or comma-separate for several")
    p.add_argument("--out", required=True, help="corpus folder (shards + manifest.json); re-running resumes it")
    p.add_argument("--max-tokens", type=int, default=None, help="stop once the corpus holds N labelled tokens")
    p.add_argument("--time-budget-min", type=float, default=None,
                   help="stop cleanly before this many minutes (counted from start, loading included)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--batch-size", type=int, default=8, help="chunks per target forward")
    p.add_argument("--chunk-tokens", type=int, default=512, help="answer tokens per sequence at most")
    p.add_argument("--window", type=int, default=64, help="items sorted by length together (batching window)")
    p.add_argument("--seed", type=int, default=0, help="document shuffle and instruction choice")
    p.add_argument("--model", default=None, help="target: a local HF causal-LM folder (default: embedded SmolLM2)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="target dtype of the labelling forward")
    add_placement_arguments(p)
    p.add_argument("--feature-layers", default=None,
                   help="comma-separated target layers (e.g. 2,10,18,26) whose outputs are kept from the same "
                        "forward for train-drafter, so training needs no second pass (fp32 only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0]))


def run(args) -> int:
    from hf_treegen.train.processes import Processes

    status = _run(args)
    Processes.current().close()  # every process got here: leave the process group before exiting
    return status


def _run(args) -> int:
    t_start = time.time()

    def fail(msg: str) -> int:
        return user_error("teacher-forced-data", msg)

    if args.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
        torch.set_num_threads(args.threads)
    for name, value in (("--max-tokens", args.max_tokens), ("--batch-size", args.batch_size),
                        ("--window", args.window), ("--threads", args.threads)):
        if value is not None and value < 1:
            return fail(f"{name} must be >= 1, got {value}")
    if args.chunk_tokens < MIN_CHUNK_TOKENS:
        return fail(f"--chunk-tokens must be >= {MIN_CHUNK_TOKENS}, got {args.chunk_tokens}")
    if args.time_budget_min is not None and not args.time_budget_min > 0:
        return fail(f"--time-budget-min must be > 0, got {args.time_budget_min}")
    try:
        feature_layers = None if args.feature_layers is None else [int(x) for x in args.feature_layers.split(",") if x]
    except ValueError:
        return fail(f"--feature-layers takes comma-separated layer ids such as 2,10,18,26, got {args.feature_layers!r}")
    sources = [s.strip() for arg in args.source for s in arg.split(",") if s.strip()]
    if not sources:
        return fail("give at least one --source (stdlib, python-docs or a folder)")
    try:
        docs = source_documents(sources)
    except (SourceError, RuntimeError, OSError) as err:
        return fail(str(err).splitlines()[0])
    processes = Processes.current()
    say = print if processes.is_main else (lambda *a, **k: None)
    say(f"{len(docs)} documents from {', '.join(sources)}, {time.time() - t_start:.0f} s", flush=True)

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    if args.model and not Path(args.model).is_dir():
        return fail(f"--model {args.model!r} is not a folder")
    from hf_treegen.models import load_target

    if args.shard_target:
        from hf_treegen.train.sharded_target import load_sharded_target, sharding_problem

        problem = sharding_problem(processes, args.device_map)
        if problem is not None:
            return fail(problem)
        model, tokenizer, model_name = load_sharded_target(args.model, dtype, processes)
    else:
        if args.device_map is not None and processes.several:
            return fail("--device-map splits one target over this machine's devices for one process; run it "
                        "without accelerate launch / torchrun, or give --shard-target instead.")
        try:
            model, tokenizer, model_name = load_target(args.model, dtype, device_map=args.device_map,
                                                       offload_folder=args.offload_folder)
        except ValueError as err:  # a device map that does not fit the model
            return fail(f"--device-map: {str(err).splitlines()[0]}")
        if processes.device is not None:  # under a launcher: this process's own GPU
            model = model.to(processes.device)
    say(f"model loaded, {torch.get_num_threads()} threads x {processes.count} process(es), "
        f"{time.time() - t_start:.0f} s", flush=True)
    try:
        manifest = build_teacher_forced_corpus(
            model, tokenizer, docs, args.out, batch_size=args.batch_size, chunk_tokens=args.chunk_tokens,
            seed=args.seed, window_items=args.window, max_tokens=args.max_tokens,
            time_budget_s=seconds_left(args.time_budget_min, t_start),
            model_name=model_name, progress=not args.no_progress and processes.is_main,
            feature_layers=feature_layers, processes=processes)
    except ValueError as err:  # settings differ from the existing corpus in --out
        return fail(str(err))
    except KeyboardInterrupt:
        print("interrupted; every finished batch is stored, re-run the same command to resume", file=sys.stderr)
        return 130
    if not processes.is_main:
        return 0
    this_run = manifest.pop("this_run")
    keys = ("num_sequences", "total_tokens", "labelled_tokens", "label_survival", "forward_seconds")
    corpus = {k: manifest[k] for k in keys}
    corpus["skipped_eval_mentions"] = len(manifest["skipped_eval_mentions"])
    print(json.dumps({"this_run": this_run, "corpus": corpus}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
