"""Measured round costs for cost-aware tree sizes (CaDDTree's objective, build cost included).

The verify curve ``C_v(rows)`` is measured on the running device at first use: one forward of a
``rows``-token chain over a fixed context, median of a few runs per size. It is kept per process and
on disk (``$HF_TREEGEN_CACHE/cost_models``). Draft and per-node build costs are tracked online.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field

import torch

from ..cache_dir import cache_dir

_MEMORY: dict[str, "VerifyCostModel"] = {}


@dataclass(frozen=True)
class VerifyCostModel:
    rows: tuple[int, ...]  # increasing numbers of rows in one verify forward
    seconds: tuple[float, ...]  # non-decreasing measured seconds

    def seconds_for(self, rows: int) -> float:
        """Piecewise-linear in ``rows``, extended linearly past the measured grid."""
        xs, ys = self.rows, self.seconds
        if rows <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if rows <= xs[i]:
                w = (rows - xs[i - 1]) / (xs[i] - xs[i - 1])
                return ys[i - 1] + w * (ys[i] - ys[i - 1])
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
        return ys[-1] + slope * (rows - xs[-1])

    @classmethod
    def from_measurements(cls, rows, seconds) -> "VerifyCostModel":
        """Sort by rows and make the curve non-decreasing (timing noise must not reward bigger trees)."""
        pairs = sorted(zip(rows, seconds))
        monotone, running = [], 0.0
        for _, s in pairs:
            running = max(running, s)
            monotone.append(running)
        return cls(tuple(r for r, _ in pairs), tuple(monotone))


def _model_key(model, context: int) -> str:
    cfg = model.config
    params = sum(p.numel() for p in model.parameters())
    device = next(model.parameters()).device
    return "-".join(str(x) for x in (
        cfg.model_type, params, cfg.hidden_size, cfg.num_hidden_layers, model.dtype, device.type,
        cfg._attn_implementation, torch.get_num_threads(), context,
    )).replace("/", "_").replace(".", "_")


@torch.no_grad()
def measure_verify_cost(model, max_rows: int, context: int = 128, repeats: int = 3) -> VerifyCostModel:
    """Time one chain-masked forward per size on a throwaway cache of ``context`` tokens."""
    from transformers import DynamicCache

    from ..attention import attention_implementation, keep_cache_rows, tree_forward_inputs
    from ..tree import DraftTree

    impl = attention_implementation(model)
    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    ids = torch.randint(0, model.config.vocab_size, (1, context + max_rows), device=device)
    model(input_ids=ids[:, :context], past_key_values=cache, use_cache=True, logits_to_keep=1)
    sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, max_rows} & set(range(1, max_rows + 1)))
    seconds = []
    for rows in sizes:
        tree = DraftTree.chain(int(ids[0, context]), ids[0, context + 1 : context + rows].tolist())
        inputs = tree_forward_inputs(tree, context, impl, model.dtype, device)
        runs = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            model(**inputs, past_key_values=cache, use_cache=True)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            runs.append(time.perf_counter() - t0)
            keep_cache_rows(cache, context, torch.zeros(0, dtype=torch.long))
        seconds.append(statistics.median(runs[1:]))  # the first run is a warm-up
    return VerifyCostModel.from_measurements(sizes, seconds)


def cached_verify_cost(model, max_rows: int, context: int = 128) -> VerifyCostModel:
    """Measured once per (model, device, dtype, threads) and remembered in memory and on disk."""
    key = _model_key(model, context)
    cost = _MEMORY.get(key)
    if cost is not None and cost.rows[-1] >= max_rows:
        return cost
    path = cache_dir("cost_models") / f"{key}.json"
    if path.is_file():
        data = json.loads(path.read_text())
        cost = VerifyCostModel(tuple(data["rows"]), tuple(data["seconds"]))
    if cost is None or cost.rows[-1] < max_rows:
        cost = measure_verify_cost(model, max_rows, context)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"rows": cost.rows, "seconds": cost.seconds}))
        tmp.replace(path)
    _MEMORY[key] = cost
    return cost


@dataclass
class RoundCosts:
    """Per-round cost estimates: measured verify curve plus running means of draft and build time."""

    verify: VerifyCostModel
    draft_s: float = 0.0
    build_s_per_node: float = 0.0
    _decay: float = field(default=0.8, repr=False)

    def observe(self, draft_s: float, build_s: float, nodes: int) -> None:
        d = self._decay if self.draft_s else 0.0
        self.draft_s = d * self.draft_s + (1 - d) * draft_s
        if nodes:
            per_node = build_s / nodes
            b = self._decay if self.build_s_per_node else 0.0
            self.build_s_per_node = b * self.build_s_per_node + (1 - b) * per_node

    def round_seconds(self, nodes: int) -> float:
        return self.draft_s + self.build_s_per_node * nodes + self.verify.seconds_for(nodes + 1)


def best_tree_size(masses: list[float], costs: RoundCosts) -> int:
    """The n maximising expected tokens per second (1 + sum of the first n masses) / round cost(n).

    ``masses`` are best-first node probabilities. Every n is scored (not just up to the first local
    maximum), so the choice does not rely on the verify curve being convex, which it is not on CPUs.
    """
    best_n, best_rate, total = 0, 1.0 / costs.round_seconds(0), 1.0
    for n, mass in enumerate(masses, start=1):
        total += mass
        rate = total / costs.round_seconds(n)
        if rate > best_rate and not math.isclose(rate, best_rate):
            best_n, best_rate = n, rate
    return best_n
