"""Throughput of batched decoding: stock batched generate() (default and packed kernels) against tree
strategies on the same left-padded batches, interleaved batch by batch.

Per batch, every method runs once in the order given; a method's tokens/s is the real new tokens of
all rows (right padding after a finished row excluded) over its seconds. Reported per method: median
tokens/s over the batches, median per-batch speedups over stock and over stock on packed kernels,
tau (tokens per sequence per round), rows whose tokens equal stock's (greedy), and the peak resident
memory a call added (sampled while it ran).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from ..generation.options import TreeOptions
from ..target import packed_linears
from .harness import _timed

BATCH_BASELINES = ("ar", "ar_packed")


@dataclass
class BatchResult:
    name: str
    tokens_per_s: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # over stock batched generate()
    packed_speedups: list[float] = field(default_factory=list)  # over stock on packed kernels
    taus: list[float] = field(default_factory=list)
    equal_rows: int = 0
    rows: int = 0
    peak_mb: list[float] = field(default_factory=list)

    def row(self) -> dict:
        def median(xs):
            return statistics.median(xs) if xs else float("nan")
        return {"method": self.name, "tok_s": median(self.tokens_per_s), "speedup": median(self.speedups),
                "speedup_vs_packed": median(self.packed_speedups), "tau": median(self.taus),
                "equal_rows": self.equal_rows, "rows": self.rows, "peak_mb": max(self.peak_mb, default=0.0)}


def left_pad(prompts: list[torch.Tensor], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """prompts: (1, T_i) each -> (B, max T_i) ids with each prompt at the right end, and the attention mask."""
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long, device=prompts[0].device)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - p.shape[1]:], mask[b, width - p.shape[1]:] = p[0], 1
    return ids, mask


def new_rows(sequences: torch.Tensor, width: int, pad_token_id: int, eos: set[int]) -> list[list[int]]:
    """Each row's new tokens up to and including its first EOS (stock pads the rest)."""
    rows = []
    for row in sequences[:, width:].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        rows.append(row[:cut])
    return rows


class PeakMemory:
    """Context manager: the most this process's resident memory rose above its level at entry while the
    body ran, in MB (sampled every few milliseconds from /proc; 0 where /proc is absent)."""

    def __enter__(self) -> "PeakMemory":
        self.start = self.peak = _resident_bytes()
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, _resident_bytes())
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, _resident_bytes())

    @property
    def added_mb(self) -> float:
        return (self.peak - self.start) / 2 ** 20


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def run_batched(model, drafter, prompts: list[torch.Tensor], methods: list[str], batch_size: int,
                max_new_tokens: int, pad_token_id: int, progress: bool = True) -> list[BatchResult]:
    """Greedy decoding of ``prompts`` in batches of ``batch_size``; ``methods``: ``ar``, ``ar_packed`` and
    tree strategies as :meth:`TreeOptions.parse` reads them. ``ar`` always runs first on each batch."""
    methods = ["ar"] + [m for m in methods if m != "ar"]
    options = {m: TreeOptions.parse(m) for m in methods if m not in BATCH_BASELINES}
    eos = model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or [])
    results = {m: BatchResult(m) for m in methods}
    batches = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]
    for batch in tqdm(batches, desc=f"batches of {batch_size}", disable=not progress):
        ids, mask = left_pad(batch, pad_token_id)
        rates, reference = {}, None
        for method in methods:
            out, seconds, peak = _timed_generate(model, drafter, ids, mask, method, options.get(method),
                                                 max_new_tokens, pad_token_id)
            rows = new_rows(out.sequences, ids.shape[1], pad_token_id, eos)
            reference = rows if reference is None else reference
            rates[method] = sum(len(r) for r in rows) / seconds
            r = results[method]
            r.tokens_per_s.append(rates[method])
            r.speedups.append(rates[method] / rates["ar"])
            if "ar_packed" in rates:
                r.packed_speedups.append(rates[method] / rates["ar_packed"])
            stats = getattr(out, "tree_stats", None)
            if stats is not None:
                r.taus.append(stats.tau)
            r.equal_rows += sum(a == b for a, b in zip(rows, reference))
            r.rows += len(rows)
            r.peak_mb.append(peak)
    return list(results.values())


def _timed_generate(model, drafter, ids, mask, method, options, max_new_tokens, pad_token_id):
    kwargs = dict(attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id,
                  return_dict_in_generate=True)
    if options is not None:
        kwargs.update(assistant_model=drafter, **options.generate_kwargs())
    kernels = packed_linears(model) if method == "ar_packed" else contextlib.nullcontext()
    with kernels, PeakMemory() as memory:
        out, seconds = _timed(lambda: model.generate(ids, **kwargs))
    return out, seconds, memory.added_mb


def format_batched(results: list[BatchResult]) -> str:
    width = max(len(r.name) for r in results) + 1
    lines = [f"{'method':<{width}} {'tok/s':>7} {'vs stock':>8} {'vs packed':>9} {'tau':>5} {'same rows':>10} "
             f"{'peak MB':>8}"]
    for r in results:
        row = r.row()
        tau = f"{row['tau']:5.2f}" if r.taus else f"{'-':>5}"
        packed = f"{row['speedup_vs_packed']:9.2f}" if r.packed_speedups else f"{'-':>9}"
        lines.append(f"{r.name:<{width}} {row['tok_s']:7.1f} {row['speedup']:8.2f} {packed} {tau} "
                     f"{r.equal_rows:>4}/{r.rows:<5} {row['peak_mb']:8.0f}")
    return "\n".join(lines)
