"""The data stage of drafter distillation: the target's own answers to many prompts, in resumable shards.

A drafter is trained to predict what the *target* will say, so its training text is the target's own
generations (self-distillation), not human text. :func:`generate_corpus` runs stock, batched
``model.generate`` (no tree, no drafter) over chat-formatted prompts and stores, per prompt, the token
ids of prompt + response concatenated; :func:`load_corpus` hands them to the trainer.

Greedy vs sampled. By default 80% of prompts are answered greedily and 20% by sampling at T=0.8,
top-p 0.95 (``sample_fraction``; the choice is a hash of prompt id and seed, so it does not depend on
order or batch size):

* The drafter is evaluated (and mostly used) under greedy decoding, where a draft token is accepted
  only if it equals the target's argmax. On greedy text every next token *is* the target's argmax, so
  the training labels are exactly what verification accepts, and the contexts are exactly those
  greedy decoding visits.
* Greedy answers to similar prompts are repetitive, and greedy-only data under-covers the contexts met
  under sampled decoding (which hf_treegen also supports). A minority of sampled answers adds diverse
  contexts; their labels are samples rather than argmaxes, which a trainer can keep, down-weight, or
  relabel with target argmaxes when it extracts features (the ``sampled`` flag is stored per sequence).

Batching. Prompts are taken in the given order in windows of ``sort_window``; within a window they are
split by mode, sorted by length and cut into batches of ``batch_size`` with left padding, so padding
stays small while a time-limited run still covers a representative prefix of the prompt list (sorting
the whole list would do all short prompts first). Batches are formed from the whole window, done or
not, and done prompts are dropped afterwards, so a resumed run reproduces the batches of an
uninterrupted one (greedy outputs can depend on the batch through padding numerics; this keeps them
identical). Results of batched fp32 greedy decoding equal unbatched greedy decoding up to those
numerics.

Storage (``out_dir``):

* ``shard-00000.safetensors``, ...: ``tokens`` (uint16 when the vocab fits, else uint32; all sequences
  concatenated), ``offsets`` (int64, n+1), ``response_start`` (int32, index of the first response
  token within each sequence), ``sampled`` and ``finished`` (uint8: sampled answer; ended with EOS
  rather than the token cap). Optionally ``labels`` (same dtype and layout as ``tokens``): ``labels[i]``
  is the target's argmax prediction for position ``i+1`` of the sequence, for ``i`` in the response
  region, and :func:`label_sentinel` (the dtype's max value) where there is none. Teacher-forced corpora
  (:mod:`hf_treegen.train.teacher_forced`) carry it; generated shards without it load as before (on
  greedy answers the labels would just repeat ``tokens[i+1]``). The safetensors metadata holds the
  prompt ids and the settings, so shards are self-describing. A shard holds up to ``shard_sequences``
  sequences (~2 bytes per token: about 2 MB per million tokens; labels double it) and is rewritten,
  atomically (tmp + rename), after every batch.
* ``manifest.json``: model name, settings, shard list, done prompt ids, token totals and per-sitting
  throughput; also rewritten atomically after every batch. It is a summary: on start the shards are
  authoritative and the manifest is rebuilt from them, so a crash between the two writes is harmless.

A crash mid-batch loses at most that batch; re-running with the same prompts and settings skips every
prompt already stored. Changing a setting that alters the text (model, max_new_tokens, temperature,
top_p, sample_fraction, seed) on an existing ``out_dir`` raises instead of mixing corpora.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ..files import publish
from ..target import is_sharded, packed_linears
from .processes import Processes, Rounds

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SHARD_PATTERN = "shard-{:05d}.safetensors"
#: Settings that change the generated text; an existing corpus must match them to be extended.
TEXT_SETTINGS = ("model", "max_new_tokens", "temperature", "top_p", "sample_fraction", "seed", "chat_template")
#: In-memory value of a position without a label (on disk: :func:`label_sentinel` of the token dtype).
NO_LABEL = -1


def label_sentinel(token_dtype) -> int:
    """The on-disk "no label" value of a ``labels`` array: the max value of the token dtype (never a token id)."""
    return int(np.iinfo(np.dtype(token_dtype)).max)


# --------------------------------------------------------------------------------------------------
# prompts and chat formatting

def _normalise(prompts: Iterable) -> list[tuple[str, str]]:
    """``(id, text)`` pairs from Prompt objects, ``(id, text)`` tuples or plain strings."""
    from .prompts import prompt_id

    out, seen = [], set()
    for p in prompts:
        if isinstance(p, str):
            pid, text = prompt_id(p), p
        elif isinstance(p, tuple):
            pid, text = p
        else:
            pid, text = p.id, p.text
        if pid in seen:
            continue
        seen.add(pid)
        out.append((str(pid), text))
    return out


def chat_ids(tokenizer, text: str) -> list[int]:
    """Token ids of a one-turn user chat with the generation prompt appended (no system message: the
    template adds its default one, as in the benchmarks)."""
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=False)
    return tokenizer(rendered, add_special_tokens=False).input_ids


def is_sampled(prompt_id: str, seed: int, sample_fraction: float) -> bool:
    """Whether a prompt is answered by sampling (a hash of id and seed, independent of order)."""
    h = int(hashlib.sha1(f"{seed}:{prompt_id}".encode()).hexdigest()[:8], 16)
    return h < sample_fraction * 0x100000000


# --------------------------------------------------------------------------------------------------
# shards and manifest

@dataclass
class Shard:
    index: int
    ids: list[str] = field(default_factory=list)
    seqs: list[np.ndarray] = field(default_factory=list)
    response_start: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    # per sequence: None, or int64 (len,) target argmax for position i+1 (NO_LABEL where there is none)
    labels: list[np.ndarray | None] = field(default_factory=list)

    @property
    def path_name(self) -> str:
        return SHARD_PATTERN.format(self.index)

    def append(self, prompt_id: str, seq: np.ndarray, response_start: int, *, sampled: bool = False,
               finished: bool = False, labels: np.ndarray | None = None) -> None:
        self.labels.extend([None] * (len(self.seqs) - len(self.labels)))  # shards read without labels
        self.ids.append(prompt_id)
        self.seqs.append(seq)
        self.response_start.append(int(response_start))
        self.sampled.append(int(sampled))
        self.finished.append(int(finished))
        self.labels.append(labels)

    def tokens(self) -> int:
        return int(sum(len(s) for s in self.seqs))

    def response_tokens(self) -> int:
        return int(sum(len(s) - r for s, r in zip(self.seqs, self.response_start)))

    def write(self, out_dir: Path, settings: dict, token_dtype) -> None:
        from safetensors.numpy import save_file

        lengths = np.array([len(s) for s in self.seqs], dtype=np.int64)
        tensors = {
            "tokens": (np.concatenate(self.seqs) if self.seqs else np.zeros(0)).astype(token_dtype),
            "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "response_start": np.array(self.response_start, dtype=np.int32),
            "sampled": np.array(self.sampled, dtype=np.uint8),
            "finished": np.array(self.finished, dtype=np.uint8),
        }
        if any(lab is not None for lab in self.labels):
            sentinel = label_sentinel(token_dtype)
            parts = []
            for seq, lab in zip(self.seqs, self.labels + [None] * (len(self.seqs) - len(self.labels))):
                lab = np.full(len(seq), NO_LABEL, dtype=np.int64) if lab is None else np.asarray(lab, dtype=np.int64)
                if len(lab) != len(seq):
                    raise ValueError(f"labels of length {len(lab)} for a sequence of length {len(seq)}")
                parts.append(np.where(lab < 0, sentinel, lab))
            tensors["labels"] = np.concatenate(parts).astype(token_dtype)
        metadata = {"format": str(FORMAT_VERSION), "prompt_ids": json.dumps(self.ids),
                    "settings": json.dumps(settings, sort_keys=True)}
        final = out_dir / self.path_name
        tmp = final.with_name(final.name + ".tmp")
        save_file(tensors, str(tmp), metadata=metadata)
        publish(tmp, final)

    @classmethod
    def read(cls, path: Path) -> tuple["Shard", dict]:
        from safetensors import safe_open

        with safe_open(str(path), "np") as f:
            meta = f.metadata() or {}
            arrays = {k: f.get_tensor(k) for k in f.keys()}
        index = int(path.name[len("shard-"): -len(".safetensors")])
        shard = cls(index)
        shard.ids = json.loads(meta["prompt_ids"])
        off = arrays["offsets"]
        shard.seqs = [arrays["tokens"][off[i]: off[i + 1]].astype(np.int64) for i in range(len(off) - 1)]
        shard.response_start = arrays["response_start"].astype(int).tolist()
        shard.sampled = arrays["sampled"].astype(int).tolist()
        shard.finished = arrays["finished"].astype(int).tolist()
        shard.labels = [None] * len(shard.seqs)
        if "labels" in arrays:
            sentinel = label_sentinel(arrays["labels"].dtype)
            for i in range(len(shard.seqs)):
                lab = arrays["labels"][off[i]: off[i + 1]].astype(np.int64)
                lab[lab == sentinel] = NO_LABEL
                shard.labels[i] = lab if (lab >= 0).any() else None
        return shard, json.loads(meta.get("settings", "{}"))


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=False) + "\n")
    publish(tmp, path)


def shard_paths(out_dir: Path) -> list[Path]:
    return sorted(p for p in out_dir.glob("shard-*.safetensors") if p.name[6:11].isdigit())


def read_manifest(out_dir: str | Path) -> dict:
    """The manifest of a corpus folder ({} if there is none yet)."""
    path = Path(out_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def corpus_summary(shards: list[Shard]) -> dict:
    seqs = sum(len(s.ids) for s in shards)
    return {
        "num_sequences": seqs,
        "total_tokens": sum(s.tokens() for s in shards),
        "response_tokens": sum(s.response_tokens() for s in shards),
        "sampled_sequences": sum(sum(s.sampled) for s in shards),
        "finished_sequences": sum(sum(s.finished) for s in shards),
    }


def check_settings(found: dict, wanted: dict, where: Path, keys: Sequence[str] = TEXT_SETTINGS) -> None:
    diff = {k: (found.get(k), wanted.get(k)) for k in keys if k in found and found.get(k) != wanted.get(k)}
    if diff:
        raise ValueError(f"{where} was generated with different settings {diff} (found, requested); "
                         f"use another output folder or the same settings")


def _kind_name(settings: dict) -> str:
    return "teacher-forced" if settings.get("kind") == "teacher_forced" else "generated"


class CorpusAppender:
    """A corpus folder opened to add sequences, shared by generation and teacher-forced labelling.

    Opening it deletes leftovers of an interrupted write (``*.tmp``), reads every shard (the shards are
    authoritative; the manifest is a summary rebuilt from them) and refuses a folder of another kind or
    made with other ``settings`` (the keys in ``compare``). ``done``: prompt ids already stored;
    ``previous``: the manifest found (``{}`` for a new folder). :meth:`add_batch` rewrites the last
    shard atomically and :meth:`write_manifest` the manifest, so a crash loses at most one batch."""

    def __init__(self, out_dir: str | Path, settings: dict, token_dtype, *, compare: Sequence[str],
                 shard_sequences: int):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.settings, self.token_dtype, self.shard_sequences = settings, token_dtype, shard_sequences
        for stale in self.out_dir.glob("*.tmp"):
            stale.unlink()
        self.shards: list[Shard] = []
        for path in shard_paths(self.out_dir):
            shard, found = Shard.read(path)
            self._check(found, path, compare)
            self.shards.append(shard)
        self.previous = read_manifest(self.out_dir)
        if self.previous:
            self._check(self.previous.get("settings", {}), self.out_dir / MANIFEST, compare)
        self.done = {pid for s in self.shards for pid in s.ids}

    def _check(self, found: dict, where: Path, compare: Sequence[str]) -> None:
        if found and found.get("kind") != self.settings.get("kind"):
            raise ValueError(f"{where} is not a {_kind_name(self.settings)} corpus (it is a {_kind_name(found)} one); "
                             f"use another output folder")
        check_settings(found, self.settings, where, compare)

    def add_batch(self, records: Sequence[dict]) -> Shard:
        """Append one batch (``Shard.append`` keyword dicts) to the last shard, or to a new one when the
        last is full, and rewrite that shard."""
        if not self.shards or len(self.shards[-1].ids) >= self.shard_sequences:
            self.shards.append(Shard(self.shards[-1].index + 1 if self.shards else 0))
        shard = self.shards[-1]
        for record in records:
            shard.append(**record)
            self.done.add(record["prompt_id"])
        shard.write(self.out_dir, self.settings, self.token_dtype)
        return shard

    def write_manifest(self, header: dict, fields: dict, run: dict) -> dict:
        """Write and return ``manifest.json``: ``header`` (what the corpus is), the shard list and totals,
        ``fields`` (the kind's own totals), the sittings (earlier ones, then ``run``) and the done ids."""
        manifest = {
            "format": FORMAT_VERSION,
            **header,
            "settings": self.settings,
            "token_dtype": np.dtype(self.token_dtype).name,
            "shards": [{"file": s.path_name, "sequences": len(s.ids), "tokens": s.tokens(),
                        "response_tokens": s.response_tokens()} for s in self.shards],
            **corpus_summary(self.shards),
            **fields,
            "sittings": list(self.previous.get("sittings", [])) + [run],
            "done": [pid for s in self.shards for pid in s.ids],
        }
        write_json(self.out_dir / MANIFEST, manifest)
        return manifest


class Sitting:
    """One call's share of a corpus: its statistics (one entry of the manifest's ``sittings``) and
    whether another batch may start."""

    def __init__(self, batch_size: int, counters: Sequence[str], **extra):
        self.run = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "sequences": 0, **dict.fromkeys(counters, 0),
                    "seconds": 0.0, "batch_size": batch_size, "threads": torch.get_num_threads(),
                    "host": platform.node(), "torch": torch.__version__, **extra}
        self.t_start = time.perf_counter()
        self.batches = 0
        self._batch_start = self.t_start
        self._last_batch_s = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def stop_reason(self, max_batches: int | None, time_budget_s: float | None,
                    other: tuple[bool, str] = (False, "")) -> str | None:
        """Why no further batch starts (``other``: the caller's own reason, checked before the budget),
        or None. A batch is not started that would, judging by the previous one, end after the budget."""
        if max_batches is not None and self.batches >= max_batches:
            return "max_batches"
        if other[0]:
            return other[1]
        if time_budget_s is not None and self.elapsed() + self._last_batch_s > time_budget_s:
            return "time_budget"
        return None

    def allowed_batches(self, count: int, max_batches: int | None, time_budget_s: float | None,
                        other: tuple[bool, str] = (False, "")) -> tuple[int, str | None]:
        """How many of the next ``count`` batches (one round) may start, and why none may (see
        :meth:`stop_reason`)."""
        stop = self.stop_reason(max_batches, time_budget_s, other)
        if stop is not None:
            return 0, stop
        return (count if max_batches is None else min(count, max_batches - self.batches)), None

    def batch_started(self) -> None:
        self._batch_start = time.perf_counter()

    def batch_done(self, sequences: int, **counts: int) -> None:
        """Count a stored batch: its sequences and the sitting's ``counters``."""
        self._last_batch_s = time.perf_counter() - self._batch_start
        self.batches += 1
        self.run["sequences"] += sequences
        for key, value in counts.items():
            self.run[key] += value
        self.run["seconds"] = round(self.elapsed(), 1)
        self.run["ended"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    def rate(self, counter: str) -> float:
        """``counter`` per second of this sitting so far."""
        return round(self.run[counter] / max(self.elapsed(), 1e-9), 1)

    def finish(self, stop_reason: str) -> dict:
        self.run["stop_reason"] = stop_reason
        self.run["seconds"] = round(self.elapsed(), 1)
        return self.run


# --------------------------------------------------------------------------------------------------
# generation

def generate_corpus(model, tokenizer, prompts: Sequence, out_dir: str | Path, *, batch_size: int = 16,
                    max_new_tokens: int = 128, temperature: float = 0.8, top_p: float = 0.95,
                    sample_fraction: float = 0.2, seed: int = 0, sort_window: int = 512,
                    shard_sequences: int = 1024, max_prompt_tokens: int | None = 512,
                    time_budget_s: float | None = None, max_batches: int | None = None,
                    model_name: str | None = None, packed: bool = True, progress: bool = True,
                    processes: Processes | None = None) -> dict:
    """Answer ``prompts`` with ``model`` and append prompt+response token ids to shards in ``out_dir``.

    ``prompts``: :class:`~hf_treegen.train.prompts.Prompt` objects, ``(id, text)`` pairs or strings
    (id = content hash). Prompts whose chat-formatted length exceeds ``max_prompt_tokens`` are skipped
    (and listed in the manifest). ``time_budget_s``: no batch is started that would, judging by the
    previous batch, end after the budget; ``max_batches`` caps the batches of this call. ``packed``:
    generate inside :func:`~hf_treegen.target.packed_linears` (oneDNN's blocked weight layout on a CPU,
    a no-op elsewhere): the same products summed in another order, so the answers are the target's up
    to float rounding and batches run faster; each sitting records which kernels it used. Returns the
    updated manifest (plus ``"this_run"`` statistics).

    ``processes`` (default: :meth:`~.processes.Processes.current`): launched as several, each process
    answers one batch of every round and the main process stores them in order, so the corpus is the
    one a single process would write; the other processes return ``{}``.
    """
    processes = processes or Processes.current()
    items = _normalise(prompts)
    settings = _generation_settings(model, tokenizer, model_name, max_new_tokens=max_new_tokens,
                                    temperature=temperature, top_p=top_p, sample_fraction=sample_fraction, seed=seed)
    vocab = max(len(tokenizer), int(model.config.vocab_size))
    token_dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    corpus = None
    if processes.is_main:  # the one writer; the others learn from it which prompts are done
        corpus = CorpusAppender(out_dir, settings, token_dtype, compare=TEXT_SETTINGS, shard_sequences=shard_sequences)
    done = processes.from_main(corpus.done if corpus is not None else None)
    tokenized, todo = _prompt_batches(items, tokenizer, done, batch_size=batch_size, sort_window=sort_window,
                                      seed=seed, sample_fraction=sample_fraction, max_prompt_tokens=max_prompt_tokens)
    answer = _Answerer(model, tokenizer, tokenized, seed=seed, max_new_tokens=max_new_tokens, temperature=temperature,
                       top_p=top_p)
    packed = packed and not is_sharded(model)  # (sharded weights are gathered anew for each forward)
    if corpus is None:
        with packed_linears(model) if packed else contextlib.nullcontext():
            for _ in Rounds(processes, None, answer.idle).over(todo, answer):
                pass  # the main process stores the rounds
        return {}
    skipped = set(corpus.previous.get("skipped_too_long", []))
    seconds_before = float(corpus.previous.get("generation_seconds", 0.0))
    if max_prompt_tokens is not None:
        skipped |= {pid for pid, ids in tokenized.items() if len(ids) > max_prompt_tokens}
    sitting = Sitting(batch_size, ("response_tokens",), packed_linears=bool(packed))

    def save_manifest() -> dict:
        return corpus.write_manifest(
            {"model": settings["model"], "vocab_size": vocab},
            {"generation_seconds": round(seconds_before + sitting.run["seconds"], 1),
             "skipped_too_long": sorted(skipped)},
            sitting.run)

    save_manifest()
    bar = _progress_bar(progress, total=sum(len(ids) for _, ids in todo), unit="prompt", dynamic_ncols=True,
                        desc=f"generate ({len(corpus.done)} done)")
    # faster CPU kernels for every generate() of this sitting (a no-op on other devices)
    with packed_linears(model) if packed else contextlib.nullcontext():
        try:
            stop_reason = _answer_batches(todo, answer, processes, corpus, sitting, save_manifest, bar,
                                          max_batches=max_batches, time_budget_s=time_budget_s, idle=answer.idle)
        finally:
            if bar is not None:
                bar.close()
    sitting.finish(stop_reason)
    manifest = save_manifest()
    manifest["this_run"] = sitting.run
    return manifest


class _Answerer:
    """What every process does to a batch ``(sampled, prompt ids)``: one left-padded ``generate`` call,
    seeded per batch (from its first prompt) so that its samples do not depend on the batches before it.
    A target sharded over the processes generates in step with the others (``synced_gpus``), and
    :attr:`idle` answers a one-token prompt on a process without a batch meanwhile (None otherwise)."""

    def __init__(self, model, tokenizer, tokenized: dict[str, list[int]], *, seed: int, max_new_tokens: int,
                 temperature: float, top_p: float):
        eos_set, pad = _eos_and_pad(model, tokenizer)
        sharded = is_sharded(model)
        self.generate = functools.partial(_generate_batch, model, pad=pad, eos_set=eos_set,
                                          max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                          synced=sharded)
        self.tokenized, self.seed = tokenized, seed
        self.idle = functools.partial(self.generate, [[pad]], False, seed=0, max_new_tokens=1) if sharded else None

    def __call__(self, batch: tuple[bool, list[str]]) -> list[tuple[np.ndarray, int, bool]]:
        sampled, ids = batch
        return self.generate([self.tokenized[pid] for pid in ids], sampled,
                             seed=int(hashlib.sha1(f"{self.seed}:{ids[0]}".encode()).hexdigest()[:8], 16))


def _generation_settings(model, tokenizer, model_name: str | None, *, max_new_tokens: int, temperature: float,
                         top_p: float, sample_fraction: float, seed: int) -> dict:
    """The corpus settings of :func:`generate_corpus` (those in :data:`TEXT_SETTINGS` must match to resume)."""
    name = model_name or Path(str(getattr(model.config, "_name_or_path", "") or type(model).__name__)).name
    template_hash = hashlib.sha1(str(getattr(tokenizer, "chat_template", "")).encode()).hexdigest()[:12]
    return {"model": name, "max_new_tokens": int(max_new_tokens), "temperature": float(temperature),
            "top_p": float(top_p), "sample_fraction": float(sample_fraction), "seed": int(seed),
            "chat_template": template_hash, "dtype": str(model.dtype).replace("torch.", "")}


def _eos_and_pad(model, tokenizer) -> tuple[set[int], int]:
    """The ids that end an answer (the generation config's, else the tokenizer's) and the pad id (the
    tokenizer's, else the smallest EOS id, else 0)."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    eos_set = set([eos] if isinstance(eos, int) else (eos or []))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (min(eos_set) if eos_set else 0)
    return eos_set, pad


def _prompt_batches(items: list[tuple[str, str]], tokenizer, done: set[str], *, batch_size: int, sort_window: int,
                    seed: int, sample_fraction: float, max_prompt_tokens: int | None
                    ) -> tuple[dict[str, list[int]], list[tuple[bool, list[str]]]]:
    """Chat ids of every prompt, and the ``(sampled, prompt ids)`` batches still to answer.

    Batches are formed over the whole prompt list, done or not, and done prompts are dropped
    afterwards: a resumed run then answers the same batches as an uninterrupted one."""
    tokenized: dict[str, list[int]] = {}
    batches: list[tuple[bool, list[str]]] = []
    for w in range(0, len(items), sort_window):
        window = items[w: w + sort_window]
        for pid, text in window:
            tokenized[pid] = chat_ids(tokenizer, text)
        for mode in (False, True):
            group = [(len(tokenized[pid]), k, pid) for k, (pid, _) in enumerate(window)
                     if is_sampled(pid, seed, sample_fraction) == mode
                     and (max_prompt_tokens is None or len(tokenized[pid]) <= max_prompt_tokens)]
            group.sort()
            for b in range(0, len(group), batch_size):
                batches.append((mode, [pid for _, _, pid in group[b: b + batch_size]]))
    todo = [(mode, [pid for pid in ids if pid not in done]) for mode, ids in batches]
    return tokenized, [(mode, ids) for mode, ids in todo if ids]


def _answer_batches(todo: list[tuple[bool, list[str]]], answer, processes: Processes, corpus: CorpusAppender,
                    sitting: Sitting, save_manifest, bar, *, max_batches: int | None,
                    time_budget_s: float | None, idle=None) -> str:
    """Answer (``answer(batch)``, one batch per process a round; ``idle()`` where a process has none) and
    store the ``todo`` batches until the sitting's limits stop it; returns the stop reason."""
    rounds = Rounds(processes, functools.partial(sitting.allowed_batches, processes.count, max_batches, time_budget_s),
                    idle)
    for answered in rounds.over(todo, answer):
        for (sampled, ids), seqs in answered:
            shard = _store_answers(corpus, sitting, ids, sampled, seqs)
        manifest = save_manifest()
        if bar is not None:
            bar.update(sum(len(ids) for (_, ids), _ in answered))
            bar.set_postfix(tok_s=f"{sitting.run['tokens_per_second']:.0f}",
                            tokens=manifest["response_tokens"], shard=shard.index)
        sitting.batch_started()
    return rounds.stop_reason or "finished"


def _store_answers(corpus: CorpusAppender, sitting: Sitting, ids: list[str], sampled: bool,
                   seqs: list[tuple[np.ndarray, int, bool]]) -> Shard:
    """Append one answered batch (:func:`_generate_batch`'s triples for prompts ``ids``) to the corpus
    and count it in the sitting; returns the shard it went to."""
    shard = corpus.add_batch([{"prompt_id": pid, "seq": seq, "response_start": start,
                               "sampled": sampled, "finished": finished}
                              for pid, (seq, start, finished) in zip(ids, seqs)])
    sitting.batch_done(len(ids), response_tokens=sum(len(seq) - start for seq, start, _ in seqs))
    sitting.run["tokens_per_second"] = sitting.rate("response_tokens")
    return shard


def _progress_bar(enabled: bool, **kwargs):
    """A tqdm bar with ``kwargs``, or None when ``enabled`` is false (tqdm is then not imported)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(**kwargs)


def _generate_batch(model, prompts: list[list[int]], sampled: bool, *, pad: int, eos_set: set[int],
                    max_new_tokens: int, temperature: float, top_p: float, seed: int, synced: bool = False
                    ) -> list[tuple[np.ndarray, int, bool]]:
    """One left-padded ``generate`` call; returns (prompt+response ids, response start, ended with EOS)
    per prompt, the response cut just after its first EOS. ``synced``: every process takes part in each
    forward until all are done (``synced_gpus``), as a target sharded over them needs."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, p in enumerate(prompts):
        input_ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
        attention[r, width - len(p):] = 1
    kwargs: dict[str, Any] = dict(attention_mask=attention, max_new_tokens=max_new_tokens,
                                  pad_token_id=pad, eos_token_id=sorted(eos_set) or None, synced_gpus=synced)
    if sampled:
        kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    else:
        kwargs.update(do_sample=False)
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.manual_seed(seed)
        out = model.generate(input_ids, **kwargs)
    new = out[:, width:].tolist()
    results = []
    for p, row in zip(prompts, new):
        finished = False
        for k, tok in enumerate(row):
            if tok in eos_set:
                row, finished = row[: k + 1], True
                break
        results.append((np.array(p + row, dtype=np.int64), len(p), finished))
    return results


# --------------------------------------------------------------------------------------------------
# reading

def load_corpus(out_dir: str | Path, *, include_sampled: bool = True, with_labels: bool = False) -> list[tuple]:
    """``(ids, response_start)`` per stored sequence, in shard order: ``ids`` a 1-D int64 tensor of
    prompt+response token ids, ``response_start`` the index of the first response token.

    ``with_labels=True`` returns ``(ids, response_start, labels)`` triples instead: ``labels`` None for
    a sequence without stored labels, else a 1-D int64 tensor like ``ids`` whose entry i is the target's
    argmax prediction for position i+1 (:data:`NO_LABEL` = -1 where there is none)."""
    out = []
    for path in shard_paths(Path(out_dir)):
        shard, _ = Shard.read(path)
        for seq, start, sampled, labels in zip(shard.seqs, shard.response_start, shard.sampled, shard.labels):
            if sampled and not include_sampled:
                continue
            if with_labels:
                out.append((torch.from_numpy(seq), int(start), None if labels is None else torch.from_numpy(labels)))
            else:
                out.append((torch.from_numpy(seq), int(start)))
    return out


def load_corpus_records(out_dir: str | Path) -> list[dict]:
    """Like :func:`load_corpus` with the per-sequence metadata: ``prompt_id``, ``ids``,
    ``response_start``, ``sampled``, ``finished`` and ``labels`` (None, or as in :func:`load_corpus`)."""
    out = []
    for path in shard_paths(Path(out_dir)):
        shard, _ = Shard.read(path)
        for pid, seq, start, sampled, finished, labels in zip(shard.ids, shard.seqs, shard.response_start,
                                                              shard.sampled, shard.finished, shard.labels):
            out.append({"prompt_id": pid, "ids": torch.from_numpy(seq), "response_start": int(start),
                        "sampled": bool(sampled), "finished": bool(finished),
                        "labels": None if labels is None else torch.from_numpy(labels)})
    return out
