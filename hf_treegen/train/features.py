"""Target context features for drafter training: extracted once, cached on disk as fp16 memory maps.

The drafter's context at position t is the concatenation of the outputs of the target layers
``target_layer_ids`` at t (what :class:`~hf_treegen.target.FeatureTap` records during
generation). :func:`extract_features` runs the frozen target over the corpus sequences in right-padded,
length-sorted batches with a ``FeatureTap`` on exactly those layers; it never asks for all hidden
states, never computes the lm_head (the decoder stops right after the deepest tapped layer), and
never builds a KV cache.

Cache layout (one folder per target + layer set):

* ``meta.json``: the target's identity (name, layer count, hidden size, dtype, a weight fingerprint)
  and the tapped layer ids; a folder made for another target or other layers is refused.
* ``chunk-00000.npy``, ...: fp16 arrays ``(tokens, k*H)``, all sequences of the chunk concatenated;
  opened with ``numpy.load(mmap_mode="r")`` so training reads only the rows it uses.
* ``chunk-00000.json``: the chunk's sequence keys with their row offsets and lengths. Written after
  its ``.npy`` (both atomically), so a chunk without an index is an interrupted write and is deleted.

Sequences are addressed by a content hash of their token ids, so a growing corpus (or several corpora)
share one cache and a later call extracts only sequences it has not seen.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..target import FeatureTap, decoder_layers, is_sharded, packed_linears
from .processes import Processes, Rounds

FORMAT_VERSION = 1
FINGERPRINT_ATTRIBUTE = "treegen_fingerprint"


def sequence_key(ids) -> str:
    """Content hash of a token id sequence (the cache key)."""
    arr = np.ascontiguousarray(torch.as_tensor(ids).reshape(-1).cpu().numpy().astype(np.int64))
    return hashlib.sha1(arr.tobytes()).hexdigest()[:20]


def target_fingerprint(model) -> str:
    """A cheap hash of a few target weights: tells two random targets with the same config apart.
    Weights offloaded by accelerate (on the ``meta`` device until a forward loads them) are left out.
    A target sharded over processes carries its whole weights' fingerprint, taken before sharding, as
    ``model.treegen_fingerprint`` (so it shares caches with the unsharded target)."""
    carried = getattr(model, FINGERPRINT_ATTRIBUTE, None)
    if carried is not None:
        return carried
    h = hashlib.sha1()
    tensors = [model.get_input_embeddings().weight]
    tensors += [next(layer.parameters()) for layer in decoder_layers(model)]
    for t in (t for t in tensors if t.device.type != "meta"):
        flat = t.detach().reshape(-1)[:4096].float().cpu().numpy()
        h.update(flat.tobytes())
    return h.hexdigest()[:16]


def target_name(model) -> str:
    """The target's name or path as loaded (its class name when it has none)."""
    name = getattr(model.config, "_name_or_path", "")
    if name:
        return str(name)
    # FSDP's fully_shard gives a sharded model a subclass named FSDP<class>: the target is the same
    return type(model).__name__.removeprefix("FSDP") if is_sharded(model) else type(model).__name__


def target_cache_folder(model, *parts: str) -> Path:
    """``$HF_TREEGEN_CACHE/<parts...>`` with the last part prefixed by ``<target>-<fingerprint>-``."""
    from ..cache_dir import cache_dir

    name = Path(target_name(model)).name or "target"
    return cache_dir(*parts[:-1], f"{name}-{target_fingerprint(model)}-{parts[-1]}")


def target_meta(model, layer_ids: Sequence[int]) -> dict:
    cfg = model.config
    meta = {
        "format": FORMAT_VERSION,
        "target": target_name(model),
        "num_hidden_layers": int(cfg.num_hidden_layers),
        "hidden_size": int(cfg.hidden_size),
        "dtype": str(model.dtype).replace("torch.", ""),
        "fingerprint": target_fingerprint(model),
        "layer_ids": [int(i) for i in layer_ids],
    }
    if cfg.num_hidden_layers - 1 in meta["layer_ids"]:  # that tap is the decoder's output (see FeatureTap)
        meta["last_layer"] = "after_final_norm"
    return meta


def _atomic_save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, array)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _atomic_write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


@dataclass(frozen=True)
class _Entry:
    chunk: int
    offset: int
    length: int


class FeatureCache:
    """The on-disk feature cache of one target and layer set (see the module docstring)."""

    def __init__(self, directory: str | Path, meta: dict):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        meta_path = self.dir / "meta.json"
        if meta_path.is_file():
            found = json.loads(meta_path.read_text())
            diff = {k: (found.get(k), meta[k]) for k in meta if found.get(k) != meta[k]}
            if diff:
                raise ValueError(
                    f"Feature cache {self.dir} was made for another target or layer set {diff} (found, wanted); "
                    f"pass another feature cache folder or delete this one.")
        else:
            _atomic_write_json(meta_path, meta)
        self.meta = meta
        # rows are fp16 features unless the meta names another storage (the target top-k cache: float32)
        self.storage = np.dtype(meta.get("storage", "float16"))
        self.index: dict[str, _Entry] = {}
        self._arrays: dict[int, np.ndarray] = {}
        self.chunks: list[int] = []
        self.refresh()

    def refresh(self) -> None:
        """Pick up chunks written since (by this or another process); chunks without an index are skipped."""
        for npy in sorted(self.dir.glob("chunk-*.npy")):
            number = int(npy.stem.split("-")[1])
            idx = npy.with_suffix(".json")
            if number in self.chunks or not idx.is_file():
                continue
            self._register(number, json.loads(idx.read_text()))

    @contextlib.contextmanager
    def writing(self):
        """Exclusive write access (an flock on ``.lock``), held for one chunk write: several processes
        (an extraction and a teacher-forced labelling run, say) can fill one cache at once, each
        numbering its chunk after the others'. Leftovers of an interrupted write are removed here
        (every write happens under the lock, so a ``.tmp`` seen here belongs to a dead writer)."""
        with open(self.dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                for stale in self.dir.glob("*.tmp"):
                    stale.unlink()
                for npy in self.dir.glob("chunk-*.npy"):
                    if not npy.with_suffix(".json").is_file():  # interrupted between the two writes
                        npy.unlink()
                self.refresh()
                yield self
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _register(self, number: int, index: dict) -> None:
        self.chunks.append(number)
        for key, offset, length in zip(index["keys"], index["offsets"], index["lengths"]):
            self.index.setdefault(key, _Entry(number, int(offset), int(length)))

    def __contains__(self, key: str) -> bool:
        return key in self.index

    def __len__(self) -> int:
        return len(self.index)

    def _array(self, chunk: int) -> np.ndarray:
        arr = self._arrays.get(chunk)
        if arr is None:
            arr = np.load(self.dir / f"chunk-{chunk:05d}.npy", mmap_mode="r")
            self._arrays[chunk] = arr
        return arr

    def get(self, key: str, length: int | None = None) -> np.ndarray:
        """The (T, width) memory-mapped rows of a sequence (the first ``length`` rows if given)."""
        e = self.index[key]
        n = e.length if length is None else min(length, e.length)
        return self._array(e.chunk)[e.offset: e.offset + n]

    def write_chunk(self, items: list[tuple[str, np.ndarray]]) -> None:
        if not items:
            return
        with self.writing():
            number = (max(self.chunks) + 1) if self.chunks else 0
            lengths = [int(a.shape[0]) for _, a in items]
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(int).tolist()
            npy = self.dir / f"chunk-{number:05d}.npy"
            _atomic_save_npy(npy, np.concatenate([a for _, a in items], axis=0).astype(self.storage))
            index = {"keys": [k for k, _ in items], "offsets": offsets, "lengths": lengths}
            _atomic_write_json(npy.with_suffix(".json"), index)
            self._register(number, index)

    def nbytes(self) -> int:
        return sum((self.dir / f"chunk-{c:05d}.npy").stat().st_size for c in self.chunks)


def default_feature_cache_dir(model, layer_ids: Sequence[int]) -> Path:
    """``$HF_TREEGEN_CACHE/features/<target>-<fingerprint>-L<layers>``: where the trainer looks first."""
    return target_cache_folder(model, "features", "L" + "_".join(str(int(i)) for i in layer_ids))


class _StopForward(Exception):
    """Raised by a hook after the deepest tapped layer: the rest of the target is not needed."""


def _batches(lengths: list[int], max_tokens: int, max_rows: int) -> list[list[int]]:
    """Indices sorted by length, cut so that rows * longest <= max_tokens (at least one row)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out, cur = [], []
    for i in order:
        if cur and ((len(cur) + 1) * lengths[i] > max_tokens or len(cur) >= max_rows):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


@torch.no_grad()
def extract_features(model, sequences: Sequence, layer_ids: Sequence[int], cache_dir: str | Path, *,
                     batch_tokens: int = 8192, max_batch_rows: int = 64, chunk_tokens: int = 32768,
                     pad_token_id: int = 0, packed: bool = True, progress: bool = True,
                     processes: Processes | None = None) -> FeatureCache:
    """Make sure every sequence of ``sequences`` (1-D token id tensors, or ``(ids, ...)`` tuples) has
    its features in the cache at ``cache_dir``; only missing ones are computed. Returns the cache.
    ``packed``: run the target inside :func:`~hf_treegen.target.packed_linears` (faster on a CPU; the
    features differ by float rounding, far below their fp16 storage precision).

    ``processes`` (default: this one alone): launched as several, every process calls this with the
    same sequences; each round every process extracts one batch and the main process writes them, and
    every process returns the complete cache."""
    processes = processes or Processes()
    layer_ids = [int(i) for i in layer_ids]
    meta = target_meta(model, layer_ids)
    with processes.main_first():  # the main process makes the folder and its meta.json
        cache = FeatureCache(cache_dir, meta)
    _extract_missing(model, cache, sequences, layer_ids, batch_tokens=batch_tokens, max_batch_rows=max_batch_rows,
                     chunk_tokens=chunk_tokens, pad_token_id=pad_token_id, packed=packed, progress=progress,
                     processes=processes)
    processes.wait()
    cache.refresh()  # chunks another process wrote meanwhile
    return cache


def _extract_missing(model, cache: FeatureCache, sequences: Sequence, layer_ids: list[int], *, batch_tokens: int,
                     max_batch_rows: int, chunk_tokens: int, pad_token_id: int, packed: bool, progress: bool,
                     processes: Processes) -> None:
    by_key: dict[str, torch.Tensor] = {}
    for s in sequences:
        ids = torch.as_tensor(s[0] if isinstance(s, (tuple, list)) else s).reshape(-1)
        by_key.setdefault(sequence_key(ids), ids)
    # what the main process (the writer) finds missing, so that every process works the same batches
    keys = processes.from_main([k for k in by_key if k not in cache] if processes.is_main else None)
    if not keys:
        return
    seqs = [by_key[k] for k in keys]
    batches = _batches([len(s) for s in seqs], batch_tokens, max_batch_rows)
    # a sharded target's layers are collectives: every process runs them all (no early stop), and a
    # process without a batch in the last round runs a one-token forward beside the others
    sharded = is_sharded(model)
    bar = None
    if progress and processes.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(len(s) for s in seqs), unit="tok", unit_scale=True, dynamic_ncols=True,
                   desc=f"target features ({len(cache)} cached)")
    pending: list[tuple[str, np.ndarray]] = []
    was_training = model.training
    model.eval()
    try:
        # packed only when there is something to extract: packing copies the weights
        with packed_linears(model) if packed else contextlib.nullcontext(), FeatureTap(model, layer_ids) as tap, \
                _stopping_after(tap.deepest, enabled=not sharded):

            def features(batch: list[int]) -> list[tuple[str, np.ndarray]]:
                rows = [seqs[i] for i in batch]
                _forward(model, rows, pad_token_id)
                taken = tap.take_all().to(torch.float16).cpu().numpy()  # (b, T, k*H)
                return [(keys[i], np.ascontiguousarray(taken[r, : len(rows[r])])) for r, i in enumerate(batch)]

            def idle() -> None:
                _forward(model, [seqs[0][:1]], pad_token_id)
                tap.take_all()

            for answered in Rounds(processes, None, idle=idle if sharded else None).over(batches, features):
                for _, items in answered:
                    pending += items
                    if bar is not None:
                        bar.update(sum(len(a) for _, a in items))
                if sum(len(a) for _, a in pending) >= chunk_tokens:
                    cache.write_chunk(pending)
                    pending = []
            cache.write_chunk(pending)
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()


@contextlib.contextmanager
def _stopping_after(module, *, enabled: bool):
    """While open (and ``enabled``), a forward stops right after ``module`` (the deepest tapped layer:
    the rest of the target is not needed); the hook is registered after the taps, so they run first."""
    if not enabled:
        yield
        return

    def stop(module, args, output):
        raise _StopForward

    handle = module.register_forward_hook(stop)
    try:
        yield
    finally:
        handle.remove()


def _forward(model, seqs: list[torch.Tensor], pad_token_id: int) -> None:
    """One right-padded forward over ``seqs``, for the taps to record."""
    device = model.get_input_embeddings().weight.device
    width = max(len(s) for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        input_ids[r, : len(s)] = s
        attention[r, : len(s)] = 1
    try:
        model(input_ids=input_ids.to(device), attention_mask=attention.to(device), use_cache=False, logits_to_keep=1)
    except _StopForward:
        pass
