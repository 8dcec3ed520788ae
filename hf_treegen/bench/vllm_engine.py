"""Run one vLLM engine on the CPU and print what it did, as JSON on the last line.

    echo '{"model": ..., "proposer": ..., "batches": [...], ...}' | python -m hf_treegen.bench.vllm_engine

Each engine runs in its own process (vLLM keeps process-wide state), in-process mode so the
proposer object can be read back. ``batches``: lists of requests run one ``generate`` call each;
a request is {"prompt_token_ids": [...], "max_tokens": n, "temperature": t, "seed": s}. ``proposer``
names a custom proposer class (ours, :class:`FixedProposer` or a test's), ``k`` its tokens a step and
``settings`` its ``additional_config["hf_treegen"]``; ``speculative_config`` instead picks one of vLLM's
own. Each batch reports its outputs, its wall time, vLLM's spec-decode counters and the proposer's
round counts. tests/vllm/test_vllm_engine.py and benchmarks/vllm_serving.py both run engines through
this; it needs vLLM (``make install-vllm``).

This file imports nothing from hf_treegen at module level (our proposer is read where a batch is
reported), so benchmarks/vllm_serving.py can run it against another checkout's hf_treegen.
"""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace


class FixedProposer:
    """A proposer with no model: it drafts token 7 at every position for every request (to measure how
    vLLM's verifier treats proposals, independently of any drafter). As a vLLM ``custom_class``:
    ``{"proposer": "hf_treegen.bench.vllm_engine.FixedProposer", "k": 3}``."""

    def __init__(self, vllm_config):
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.stats = SimpleNamespace(rounds=0, round_tokens=0, lost_contexts=0, lookup_chains=0, steps=0,
                                     propose_seconds=0.0, undrafted_steps=0)  # what _counts reads

    def load_model(self, target_model) -> None:
        pass

    def propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None):
        return [[7] * self.k if sampled else [] for sampled in sampled_token_ids]


def proposer_of(llm):
    """The engine's proposer object (a reach into vLLM's in-process engine internals)."""
    core = llm.llm_engine.engine_core.engine_core
    return core.model_executor.driver_worker.worker.model_runner.drafter


def main(spec: dict) -> dict:
    # the engine in this process, so its proposer is readable; set before vLLM is imported
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    kwargs = dict(model=spec["model"], dtype="float32", enforce_eager=True, enable_prefix_caching=False,
                  max_model_len=spec.get("max_model_len", 512), max_num_seqs=spec.get("max_num_seqs", 4),
                  max_num_batched_tokens=spec.get("max_num_batched_tokens", 512), seed=spec.get("seed", 0),
                  skip_tokenizer_init=True, disable_log_stats=False)
    if spec.get("proposer"):
        kwargs["speculative_config"] = {"method": "custom_class", "model": spec["proposer"],
                                        "num_speculative_tokens": spec.get("k", 7)}
        kwargs["additional_config"] = {"hf_treegen": spec.get("settings", {})}
    elif spec.get("speculative_config"):  # one of vLLM's own proposers, e.g. {"method": "dflash", "model": ...}
        kwargs["speculative_config"] = spec["speculative_config"]
    llm = LLM(**kwargs)
    results = []
    for batch in spec["batches"]:
        before = _counts(llm, spec)
        start = time.perf_counter()
        params = [SamplingParams(max_tokens=r["max_tokens"], temperature=r.get("temperature", 0.0),
                                 seed=r.get("seed"), ignore_eos=r.get("ignore_eos", False), detokenize=False)
                  for r in batch]
        outputs = llm.generate([{"prompt_token_ids": r["prompt_token_ids"]} for r in batch], params, use_tqdm=False)
        seconds = time.perf_counter() - start
        after = _counts(llm, spec)
        results.append({"outputs": [list(o.outputs[0].token_ids) for o in outputs], "seconds": seconds,
                        **{k: after[k] - before[k] for k in after}, **cut_report(llm, spec)})
    return {"batches": results}


def _counts(llm, spec) -> dict:
    """vLLM's own spec-decode counters, and our proposer's round counts."""
    counts = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "rounds": 0, "round_tokens": 0, "lost": 0,
              "undrafted_steps": 0, "propose_seconds": 0.0}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:spec_decode_num_")
        if name in counts and metric.name.startswith("vllm:spec_decode_num_"):
            counts[name] = metric.value
    if spec.get("proposer"):
        stats = proposer_of(llm).stats
        # a field an older proposer lacks (benchmarks/vllm_serving.py --base) reads 0
        ours = dict(rounds="rounds", round_tokens="round_tokens", lost="lost_contexts", lookup_chains="lookup_chains",
                    steps="steps", propose_seconds="propose_seconds", undrafted_steps="undrafted_steps")
        counts.update({key: getattr(stats, field, 0) for key, field in ours.items()})
    return counts


def cut_report(llm, spec) -> dict:
    """The path-probability cut the proposer drafted with last, and with "auto" what it measured."""
    from hf_treegen.integrations.vllm import TreegenProposer

    proposer = proposer_of(llm) if spec.get("proposer") else None
    if not isinstance(proposer, TreegenProposer):  # no proposer, or one that is not ours
        return {}
    report = {"min_path_prob": getattr(proposer.stats, "min_path_prob", None)}
    cutoff = getattr(proposer, "path_cutoff", None)
    if cutoff is not None:
        report.update(row_seconds=cutoff.row_seconds, calibration=cutoff.calibration,
                      measured_cutoff=cutoff.measured_cutoff(), decode_steps=cutoff.observed)
    return report


if __name__ == "__main__":
    print(json.dumps(main(json.load(sys.stdin))))
