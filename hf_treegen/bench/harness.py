"""Run decoding strategies interleaved on the same prompts and summarise them.

Per prompt, the two baselines run first (stock generate() and a lean hand-written AR loop), then every
strategy in turn, so slow drifts of a shared machine hit all methods alike. Reported per strategy:
median tokens/s, speedups over stock generate() and over the lean loop (medians of per-prompt
ratios), tau, tree size, stage milliseconds per round, and (greedy) how many outputs equal stock's.
With the ``ar_packed`` baseline (stock generate() on the packed CPU kernels tree decoding runs) in the
list, a "vs packed" column shows each strategy's speedup over it: what the trees add beyond the kernels.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from ..acceptance import DepthCalibration
from ..generation.options import TreeOptions
from ..integrations.transformers_dflash import TransformersDFlashAssistant
from ..target import packed_linears
from .lean_ar import lean_generate
from .peers import PEERS, ReferenceLoop, hf_dflash_generate

# stock generate(); stock generate() on the packed CPU kernels tree decoding runs (how much of a tree
# strategy's speedup the kernels alone give); stock prompt-lookup decoding; and the peers that run a
# plain DFlash drafter as a chain: transformers' DFlash route and z-lab's reference loop (bench/peers.py)
BASELINES = ("ar", "ar_packed", "prompt_lookup", "prompt_lookup_packed", *PEERS)
PROMPT_LOOKUP_TOKENS = 10


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


@dataclass
class StrategyResult:
    name: str
    tokens_per_s: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)  # over stock generate()
    lean_speedups: list[float] = field(default_factory=list)  # over the lean AR loop
    packed_speedups: list[float] = field(default_factory=list)  # over ar_packed, when it ran
    taus: list[float] = field(default_factory=list)
    tree_sizes: list[float] = field(default_factory=list)
    stage_ms: list[dict] = field(default_factory=list)
    equal: int = 0
    shared_prefix: list[int] = field(default_factory=list)  # new tokens equal to stock's before the first difference
    new_tokens: list[int] = field(default_factory=list)  # new tokens of stock's output on the same prompt
    plain_steps: int = 0  # auto's one-token rounds
    prompts: int = 0
    rounds: int = 0
    calibration: DepthCalibration = field(default_factory=DepthCalibration, repr=False)

    def calibration_rows(self) -> list[dict]:
        """Per depth over every prompt: drafter-predicted mass per round vs nodes the target accepted."""
        cal, rounds = self.calibration, max(self.rounds, 1)
        return [{"depth": d, "predicted": cal.predicted[d] / rounds, "accepted": cal.accepted.get(d, 0.0) / rounds}
                for d in sorted(cal.predicted)]

    def row(self) -> dict:
        stages = {k: _median([s[k] for s in self.stage_ms]) for k in ("draft", "build", "verify", "walk", "commit")}
        return {"strategy": self.name, "tok_s": _median(self.tokens_per_s), "speedup": _median(self.speedups),
                "speedup_vs_lean": _median(self.lean_speedups),
                "speedup_vs_packed": _median(self.packed_speedups) if self.packed_speedups else None,
                "tau": _median(self.taus),
                "tree_size": _median(self.tree_sizes), "equal": self.equal, "prompts": self.prompts,
                "shared_prefix_min": min(self.shared_prefix, default=0),
                "shared_prefix_median": _median(self.shared_prefix), "new_tokens_median": _median(self.new_tokens),
                "plain_share": self.plain_steps / self.rounds if self.rounds else 0.0,
                **{f"{k}_ms": v for k, v in stages.items()}}


class TreeSpec(NamedTuple):
    """A bench strategy name, parsed (see :func:`parse_tree_spec`)."""
    options: TreeOptions
    drafter: str | None = None  # the label of another drafter to run it with (None: the main one)


DRAFTER_SEPARATOR = ":"


def strategy_name(name: str) -> str:
    """``"conditional@8+lookup7:2layers"`` -> ``"conditional"``: the strategy or baseline a bench name runs."""
    return name.partition(DRAFTER_SEPARATOR)[0].split("+")[0].partition("@")[0]


def parse_tree_spec(name: str, budget: int | None) -> TreeSpec:
    """``"conditional@8+lookup7"``: a strategy as :meth:`TreeOptions.parse` reads it (``budget`` the shared
    budget of names without their own), and a last ``:label`` (``auto:2layers``) to run it with the
    drafter of that label (see :func:`run_strategies`' ``other_drafters``)."""
    written, separator, label = name.partition(DRAFTER_SEPARATOR)
    if separator and not label:
        raise ValueError(f"a drafter suffix names a drafter ('auto:2layers'), got {name!r}.")
    return TreeSpec(TreeOptions.parse(written, budget), label or None)


def shared_prefix_length(out: torch.Tensor, ref: torch.Tensor, prompt_length: int) -> int:
    """How many new tokens ``out`` (1, T) shares with ``ref`` (1, T') before the first difference."""
    a, b = out[0, prompt_length:], ref[0, prompt_length:]
    n = min(a.numel(), b.numel())
    differ = torch.nonzero(a[:n] != b[:n])
    return int(differ[0, 0]) if differ.numel() else n


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_initialized():  # CUDA work is queued: the clock stops when the device is done
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


@torch.no_grad()
def run_strategies(model, prompts: list[torch.Tensor], drafter, strategies: list[str], max_new_tokens: int = 64,
                   budget: int | None = None, temperature: float = 0.0, progress: bool = True,
                   eos_token_ids=None, lean: bool = True,
                   other_drafters: Mapping[str, object] | None = None) -> list[StrategyResult]:
    """Greedy when ``temperature`` is 0, sampling otherwise (then outputs are not compared).
    ``eos_token_ids`` (for the lean loop) default to the model's generation config, as stock's do.
    ``lean=False`` skips the lean AR loop (its "vs lean" column then repeats "vs AR").
    ``other_drafters``: drafters by label, for strategies named ``strategy:label`` (two drafters
    compared on the same prompts, interleaved)."""
    other_drafters = dict(other_drafters or {})
    specs = _tree_specs(strategies, budget, other_drafters)
    if eos_token_ids is None:
        eos = model.generation_config.eos_token_id
        eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])
    names = ["ar"] + [s for s in strategies if s != "ar"]
    bench = _InterleavedRun(model, drafter, specs, other_drafters, max_new_tokens, temperature, eos_token_ids,
                            lean, names)
    for ids in tqdm(prompts, desc=f"prompts (T={temperature})", disable=not progress):
        bench.prompt(ids)
    return list(bench.results.values())


def _tree_specs(strategies: list[str], budget: int | None, other_drafters: dict) -> dict[str, TreeSpec]:
    """The parsed spec of every strategy that is not a baseline; refuses a ``:label`` naming no drafter given."""
    specs = {name: parse_tree_spec(name, budget) for name in strategies if name not in BASELINES}
    for name, spec in specs.items():
        if spec.drafter is not None and spec.drafter not in other_drafters:
            raise ValueError(f"strategy {name!r} names drafter {spec.drafter!r}, but the drafters given are "
                             f"{sorted(other_drafters) or 'none'}.")
    return specs


class _InterleavedRun:
    """One :func:`run_strategies` call: its settings and results; :meth:`prompt` runs the baselines and
    every strategy on one prompt, in the order given, and records them."""

    def __init__(self, model, drafter, specs: dict[str, TreeSpec], other_drafters: dict, max_new_tokens: int,
                 temperature: float, eos_token_ids: list[int], lean: bool, names: list[str]):
        self.model, self.drafter, self.specs, self.other_drafters = model, drafter, specs, other_drafters
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.eos_token_ids, self.lean = eos_token_ids, lean
        self.sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        self.names = names
        self.results = {name: StrategyResult(name) for name in (["lean_ar"] if lean else []) + names}
        self.reference = ReferenceLoop(drafter) if "dflash_ref" in names else None
        if "hf_dflash" in names:  # a drafter the route cannot run is refused before anything is timed
            TransformersDFlashAssistant(drafter)

    def prompt(self, ids: torch.Tensor) -> None:
        """Run and record the baselines, then every strategy, on ``ids`` (1, T)."""
        ref, ar_rate, lean_rate = self._baselines(ids)
        for name in self.names[1:]:
            out, seconds, rounds = self._run_strategy(name, ids)
            r = self.results[name]
            rate = (out.sequences.shape[1] - ids.shape[1]) / seconds
            if rounds:
                r.taus.append(sum(rounds) / len(rounds))
            r.tokens_per_s.append(rate)
            r.speedups.append(rate / ar_rate)
            r.lean_speedups.append(rate / lean_rate)
            stats = getattr(out, "tree_stats", None)
            if stats is not None:
                _record_tree_stats(r, stats)
            self._record_output(r, out.sequences, ref, ids)
        packed = self.results.get("ar_packed")
        if packed is not None:  # speedups over the same kernels: what the trees themselves add
            for r in self.results.values():
                r.packed_speedups.append(r.tokens_per_s[-1] / packed.tokens_per_s[-1])

    def _baselines(self, ids: torch.Tensor) -> tuple[torch.Tensor, float, float]:
        """Stock generate() and (with ``lean``) the lean AR loop on ``ids``, recorded; returns stock's
        output (1, T') and both rates in tokens/s (the lean one is stock's without ``lean``)."""
        ref, ar_s = _timed(lambda: self.model.generate(ids, max_new_tokens=self.max_new_tokens, **self.sampling))
        ar_rate = (ref.shape[1] - ids.shape[1]) / ar_s
        baselines = [("ar", ref, ar_rate)]
        lean_rate = ar_rate
        if self.lean:
            out, lean_s = _timed(lambda: lean_generate(self.model, ids, self.max_new_tokens, self.eos_token_ids,
                                                       self.temperature))
            lean_rate = (out.shape[1] - ids.shape[1]) / lean_s
            baselines.append(("lean_ar", out, lean_rate))
        for name, out, rate in baselines:
            r = self.results[name]
            r.tokens_per_s.append(rate)
            r.speedups.append(rate / ar_rate)
            r.lean_speedups.append(rate / lean_rate)
            r.taus.append(1.0)
            self._record_output(r, out, ref, ids)
        return ref, ar_rate, lean_rate

    def _run_strategy(self, name: str, ids: torch.Tensor):
        """Time strategy ``name`` on ``ids``: (its output with ``.sequences``, seconds, a peer's tokens
        per round or None)."""
        kwargs = dict(max_new_tokens=self.max_new_tokens, return_dict_in_generate=True, **self.sampling)
        kernels = contextlib.nullcontext()
        if name.startswith("prompt_lookup"):
            kwargs["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS
        elif name not in PEERS and name != "ar_packed":
            spec = self.specs[name]
            kwargs.update(assistant_model=self.other_drafters.get(spec.drafter, self.drafter),
                          **spec.options.generate_kwargs())
        if name.endswith("_packed"):
            kernels = packed_linears(self.model)
        rounds = None  # a peer's tokens per round
        with kernels:
            if name == "hf_dflash":
                (sequences, rounds), seconds = _timed(lambda: hf_dflash_generate(
                    self.model, self.drafter, ids, max_new_tokens=self.max_new_tokens, **self.sampling))
                out = _Output(sequences)
            elif name == "dflash_ref":
                (sequences, rounds), seconds = _timed(lambda: self.reference.generate(
                    self.model, ids, self.max_new_tokens, self.eos_token_ids, self.temperature))
                out = _Output(sequences)
            else:
                out, seconds = _timed(lambda: self.model.generate(ids, **kwargs))
        return out, seconds, rounds

    def _record_output(self, r: StrategyResult, out: torch.Tensor, ref: torch.Tensor, ids: torch.Tensor) -> None:
        """Compare ``out`` (1, T) with stock's ``ref`` (1, T') and count the prompt."""
        r.equal += int(self.temperature > 0 or torch.equal(out, ref))
        r.shared_prefix.append(shared_prefix_length(out, ref, ids.shape[1]))
        r.new_tokens.append(ref.shape[1] - ids.shape[1])
        r.prompts += 1


def _record_tree_stats(r: StrategyResult, stats) -> None:
    """Add one tree-decoding run's statistics (tau, tree size, stage times, rounds, calibration) to ``r``."""
    r.taus.append(stats.tau)
    r.tree_sizes.append(sum(stats.tree_sizes) / max(len(stats.tree_sizes), 1))
    r.stage_ms.append(stats.per_round_ms())
    r.rounds += stats.rounds
    r.plain_steps += stats.plain_steps
    r.calibration.merge(stats.calibration)


class _Output(NamedTuple):
    """A peer loop's output ids, read like generate()'s dict output."""
    sequences: torch.Tensor


def _name_width(names) -> int:
    """The first column's width: 17 characters, or the longest strategy name (``conditional@16+lookup8``)."""
    return max([17, *map(len, names)])


def format_table(results: list[StrategyResult], greedy: bool = True) -> str:
    """One row per strategy. Greedy runs add "same as AR" (outputs equal to stock's) and "shared"
    (min / median new tokens equal to stock's before the first difference: all of them in fp32,
    fewer where bf16 rounding flips a near-tie); "plain" is the share of auto's one-token rounds."""
    same_head = f"{'same as AR':>10} {'shared':>9}" if greedy else ""
    with_packed = any(r.packed_speedups for r in results)  # a "vs packed" column when ar_packed ran
    packed_head = f" {'vs packed':>9}" if with_packed else ""
    width = _name_width(r.name for r in results)
    header = (f"{'strategy':<{width}} {'tok/s':>7} {'vs AR':>6} {'vs lean':>7}{packed_head} {'tau':>6} {'nodes':>6} {same_head} "
              f"{'plain':>5}  ms/round: {'draft':>6} {'build':>6} {'verify':>7} {'walk':>5} {'commit':>6}")
    lines = [header]
    for r in results:
        row = r.row()
        same = f"{r.equal:>4}/{r.prompts:<5} {row['shared_prefix_min']:>3}/{row['shared_prefix_median']:<5.0f}" if greedy else ""
        stages = "" if not r.stage_ms else (
            f"            {row['draft_ms']:6.2f} {row['build_ms']:6.2f} {row['verify_ms']:7.2f} "
            f"{row['walk_ms']:5.2f} {row['commit_ms']:6.2f}")
        tau = f"{row['tau']:6.2f}" if r.taus else f"{'-':>6}"
        nodes = f"{row['tree_size']:6.1f}" if r.tree_sizes else f"{'-':>6}"
        plain = f"{row['plain_share']:5.2f}" if r.rounds else f"{'-':>5}"
        packed = f" {row['speedup_vs_packed']:9.2f}" if with_packed else ""
        lines.append(f"{r.name:<{width}} {row['tok_s']:7.2f} {row['speedup']:6.2f} {row['speedup_vs_lean']:7.2f}{packed} "
                     f"{tau} {nodes} {same} {plain}{stages}")
    return "\n".join(lines)


def category_speedups(results: list[StrategyResult], categories: list[str]) -> dict[str, dict[str, float]]:
    """Median speedup over stock per strategy and prompt category (``categories[i]`` is prompt i's)."""
    table: dict[str, dict[str, float]] = {}
    for r in results:
        by_cat: dict[str, list[float]] = {}
        for cat, speedup in zip(categories, r.speedups):
            by_cat.setdefault(cat, []).append(speedup)
        table[r.name] = {cat: _median(v) for cat, v in by_cat.items()}
    return table


def format_categories(table: dict[str, dict[str, float]]) -> str:
    cats = sorted({c for row in table.values() for c in row})
    width = _name_width(table)
    lines = [f"{'vs AR by category':<{width}} " + " ".join(f"{c:>8}" for c in cats)]
    for name, row in table.items():
        if name in ("ar", "lean_ar"):
            continue
        lines.append(f"{name:<{width}} " + " ".join(f"{row.get(c, float('nan')):8.2f}" for c in cats))
    return "\n".join(lines)


def format_calibration(results: list[StrategyResult]) -> str:
    """Per depth and strategy: predicted mass / accepted nodes per round, and their ratio."""
    depths = sorted({row["depth"] for r in results for row in r.calibration_rows()})
    lines = [f"{'depth':>5} " + " ".join(f"{r.name:>24}" for r in results)]
    for depth in depths:
        cells = []
        for r in results:
            row = next((x for x in r.calibration_rows() if x["depth"] == depth), None)
            if row is None or not row["predicted"]:
                cells.append(f"{'-':>24}")
            else:
                ratio = row["accepted"] / row["predicted"]
                cells.append(f"{row['predicted']:7.3f} /{row['accepted']:7.3f} ({ratio:4.2f})".rjust(24))
        lines.append(f"{depth:>5} " + " ".join(cells))
    return "\n".join(lines)


def report_strategies(model, prompts: list[torch.Tensor], drafter, strategies: list[str], header: str,
                      max_new_tokens: int = 64, budget: int | None = None) -> list[StrategyResult]:
    """A greedy comparison as the benchmark scripts print it: a short warm-up on the first prompt
    (cost curves, allocator growth, and cond_adaptive's learned calibration, as in a serving process),
    the interleaved run, then its table and the per-depth calibration of every tree strategy."""
    run_strategies(model, prompts[:1], drafter, strategies, max_new_tokens=8, budget=budget, progress=False)
    results = run_strategies(model, prompts, drafter, strategies, max_new_tokens=max_new_tokens, budget=budget)
    print(f"{header}, {torch.get_num_threads()} threads, {len(prompts)} prompts x {max_new_tokens} new tokens, greedy")
    print(format_table(results))
    print("\ncalibration per depth over all rounds: predicted mass / accepted nodes per round (ratio)")
    print(format_calibration([r for r in results if r.rounds]))
    return results
