"""Run one vLLM engine on the CPU and print what the tests compare, as JSON on the last line.

    echo '{"model": ..., "proposer": ..., "batches": [...], ...}' | python -m tests.vllm.engine_run

Each engine runs in its own process (vLLM keeps process-wide state), in-process mode so the
proposer object can be read back. ``batches``: lists of requests run one ``generate`` call each;
a request is {"prompt_token_ids": [...], "max_tokens": n, "temperature": t, "seed": s}. ``proposer``
names a custom proposer class (ours or a test's); ``speculative_config`` instead picks one of vLLM's own. Each batch
reports its outputs, its wall time, vLLM's spec-decode counters and the proposer's round counts
(the tests and benchmarks/vllm_serving.py both run engines through this).
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its proposer is readable
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def proposer_of(llm):
    """The engine's proposer object (test-only reach into vLLM's in-process engine internals)."""
    core = llm.llm_engine.engine_core.engine_core
    return core.model_executor.driver_worker.worker.model_runner.drafter


def main(spec: dict) -> dict:
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
        counts.update(rounds=stats.rounds, round_tokens=stats.round_tokens, lost=stats.lost_contexts,
                      lookup_chains=stats.lookup_chains, steps=stats.steps, propose_seconds=stats.propose_seconds,
                      undrafted_steps=stats.undrafted_steps)
    return counts


def cut_report(llm, spec) -> dict:
    """The path-probability cut the proposer drafted with last, and with "auto" what it measured."""
    from hf_treegen.integrations.vllm import TreegenProposer

    proposer = proposer_of(llm) if spec.get("proposer") else None
    if not isinstance(proposer, TreegenProposer):  # no proposer, or a test-only one
        return {}
    report = {"min_path_prob": proposer.stats.min_path_prob}
    cutoff = proposer.path_cutoff
    if cutoff is not None:
        report.update(row_seconds=cutoff.row_seconds, calibration=cutoff.calibration,
                      measured_cutoff=cutoff.measured_cutoff(), decode_steps=cutoff.observed)
    return report


if __name__ == "__main__":
    print(json.dumps(main(json.load(sys.stdin))))
