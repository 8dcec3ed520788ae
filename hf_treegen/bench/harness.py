"""Run decoding strategies interleaved on the same prompts and summarise them.

Per prompt, stock greedy generate() runs first (the reference output and the AR baseline), then every
strategy in turn, so slow drifts of a shared machine hit all methods alike. Reported per strategy:
median tokens/s, speedup over stock generate() (median of per-prompt ratios), tau, tree size, stage
milliseconds per round, and how many outputs equal the reference.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm


@dataclass
class StrategyResult:
    name: str
    tokens_per_s: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)
    taus: list[float] = field(default_factory=list)
    tree_sizes: list[float] = field(default_factory=list)
    stage_ms: list[dict] = field(default_factory=list)
    equal: int = 0
    prompts: int = 0

    def row(self) -> dict:
        med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
        stages = {k: med([s[k] for s in self.stage_ms]) for k in ("draft", "build", "verify", "walk", "commit")}
        return {"strategy": self.name, "tok_s": med(self.tokens_per_s), "speedup": med(self.speedups),
                "tau": med(self.taus), "tree_size": med(self.tree_sizes), "equal": f"{self.equal}/{self.prompts}",
                **{f"{k}_ms": v for k, v in stages.items()}}


def _timed_generate(model, ids, **kwargs):
    t0 = time.perf_counter()
    out = model.generate(ids, **kwargs)
    return out, time.perf_counter() - t0


@torch.no_grad()
def run_strategies(model, prompts: list[torch.Tensor], drafter, strategies: list[str], max_new_tokens: int = 64,
                   budget: int | None = None, progress: bool = True, **generate_kwargs) -> list[StrategyResult]:
    """Greedy by default; pass do_sample/temperature in ``generate_kwargs`` for sampling."""
    generate_kwargs.setdefault("do_sample", False)
    results = {name: StrategyResult(name) for name in ["ar", *strategies]}
    for ids in tqdm(prompts, desc="prompts", disable=not progress):
        ref, ar_s = _timed_generate(model, ids, max_new_tokens=max_new_tokens, **generate_kwargs)
        new = ref.shape[1] - ids.shape[1]
        ar = results["ar"]
        ar.tokens_per_s.append(new / ar_s)
        ar.speedups.append(1.0)
        ar.taus.append(1.0)
        ar.equal += 1
        ar.prompts += 1
        for name in strategies:
            out, seconds = _timed_generate(model, ids, assistant_model=drafter, tree_strategy=name,
                                           tree_budget=budget, max_new_tokens=max_new_tokens,
                                           return_dict_in_generate=True, **generate_kwargs)
            r, stats = results[name], out.tree_stats
            produced = out.sequences.shape[1] - ids.shape[1]
            r.tokens_per_s.append(produced / seconds)
            r.speedups.append(ar_s / new * produced / seconds)
            r.taus.append(stats.tau)
            r.tree_sizes.append(sum(stats.tree_sizes) / max(len(stats.tree_sizes), 1))
            r.stage_ms.append(stats.per_round_ms())
            r.equal += int(torch.equal(out.sequences, ref))
            r.prompts += 1
    return list(results.values())


def format_table(results: list[StrategyResult]) -> str:
    header = (f"{'strategy':<17} {'tok/s':>7} {'speedup':>8} {'tau':>6} {'nodes':>6} {'equal':>7}"
              f"  ms/round: {'draft':>6} {'build':>6} {'verify':>7} {'walk':>5} {'commit':>6}")
    lines = [header]
    for r in results:
        row = r.row()
        stages = "" if r.name == "ar" else (
            f"            {row['draft_ms']:6.2f} {row['build_ms']:6.2f} {row['verify_ms']:7.2f} "
            f"{row['walk_ms']:5.2f} {row['commit_ms']:6.2f}")
        lines.append(f"{r.name:<17} {row['tok_s']:7.2f} {row['speedup']:8.2f} {row['tau']:6.2f} "
                     f"{row['tree_size']:6.1f} {row['equal']:>7}{stages}")
    return "\n".join(lines)
