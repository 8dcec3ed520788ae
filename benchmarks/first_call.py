"""What a new user waits for on the first call: each case runs as the first call of a fresh process
with an empty calibration cache, on the embedded SmolLM2-135M-Instruct.

    .venv/bin/python benchmarks/first_call.py                 # 4 prompts, interleaved
    .venv/bin/python benchmarks/first_call.py --repeats 2

Generation (greedy, 128 new tokens, the built-in programming requests): stock generate() against generate() with the shipped drafter
(auto, the default), whose first call measures the machine briefly; then auto's second call in the same
process (the profile cached), and auto's first call with a fully measured profile already cached (what
the brief measurement costs in tree quality). Selection (k = 20 section headings, b = 4): serial
constrained decoding against CompiledChoiceProcessor at its default width, which measures the forward
costs at the prompt's context size on first use. Every case reports wall seconds of the call alone
(model loading excluded) and whether its output equals the reference's. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEW_TOKENS = 128
K, B = 20, 4
CASES = ("stock", "auto", "auto (full profile cached)", "serial", "compiled")


def one_case(case: str, prompt_index: int) -> dict:
    """Runs in the child process: load, then time the first call (and for auto the second)."""
    import torch

    import hf_treegen as htg
    from hf_treegen.bench.choice_prompts import selection_prompts
    from hf_treegen.bench.prompts import builtin_prompts
    from hf_treegen.models import load_default_pair

    torch.set_num_threads(2)
    model, tokenizer, drafter = load_default_pair()
    if case in ("serial", "compiled"):
        prompt = selection_prompts(K, prompt_index + 1)[prompt_index]
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt.text(B)}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        proc = htg.CompiledChoiceProcessor(tokenizer, choices=prompt.labels(), num_select=B, separator=", ")
        start = time.perf_counter()
        result = proc.select(model, ids, engine=case)
        return {"seconds": time.perf_counter() - start, "output": list(result.labels)}
    text = builtin_prompts("code")[prompt_index]  # programming requests: answers run past 128 tokens
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False)
    if case != "stock":
        kwargs["assistant_model"] = drafter
    start = time.perf_counter()
    out = model.generate(ids, **kwargs)
    seconds = time.perf_counter() - start
    report = {"seconds": seconds, "output": out[0].tolist()}
    if case == "auto":
        start = time.perf_counter()
        model.generate(ids, **kwargs)
        report["second_call_seconds"] = time.perf_counter() - start
    return report


def run_child(case: str, prompt_index: int, cache: Path) -> dict:
    env = {**os.environ, "HF_TREEGEN_CACHE": str(cache)}
    done = subprocess.run([sys.executable, __file__, "--child", case, str(prompt_index)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fresh_cache(root: Path, name: str, models: Path, calibration: Path | None = None) -> Path:
    """A cache folder sharing the converted model, with an empty (or the given) calibration folder."""
    cache = root / name
    cache.mkdir()
    (cache / "models").symlink_to(models)
    if calibration is not None:
        (cache / "calibration").symlink_to(calibration)
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1, help="runs of every case per prompt")
    args = parser.parse_args()
    from hf_treegen.cache_dir import cache_dir
    from hf_treegen.models import smollm2_dir

    smollm2_dir()  # converted once, before anything is timed
    models = cache_dir("models")
    rows: dict[str, list[dict]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        full = fresh_cache(root, "full", models)  # a full profile, measured once for the third case
        subprocess.run([sys.executable, "-m", "hf_treegen.cli", "calibrate"], check=True,
                       env={**os.environ, "HF_TREEGEN_CACHE": str(full)}, capture_output=True)
        runs = 0
        for prompt_index in range(args.prompts):
            for _ in range(args.repeats):
                for case in CASES:
                    runs += 1
                    calibration = full / "calibration" if case == "auto (full profile cached)" else None
                    cache = fresh_cache(root, f"run{runs}", models, calibration)
                    result = run_child(case, prompt_index, cache)
                    rows[case].append({"prompt": prompt_index, **result})
                    print(f"  prompt {prompt_index}: {case}: {result['seconds']:.2f} s", file=sys.stderr, flush=True)
    print_table(rows, args)


def print_table(rows: dict[str, list[dict]], args) -> None:
    print(f"First call in a fresh process, empty calibration cache, embedded SmolLM2-135M-Instruct fp32, 2 threads; "
          f"{args.prompts} prompts x {args.repeats}, medians")
    print(f"{'case':<28} {'first call s':>12} {'vs reference':>13} {'second call s':>14} {'same output':>12}")
    for case in CASES:
        reference = "stock" if case in CASES[:3] else "serial"
        seconds = statistics.median(r["seconds"] for r in rows[case])
        base = statistics.median(r["seconds"] for r in rows[reference])
        second = [r["second_call_seconds"] for r in rows[case] if "second_call_seconds" in r]
        second_text = f"{statistics.median(second):.2f}" if second else ""
        expected = {r["prompt"]: r["output"] for r in rows[reference]}
        same = all(r["output"] == expected[r["prompt"]] for r in rows[case])
        print(f"{case:<28} {seconds:>12.2f} {seconds / base:>12.2f}x {second_text:>14} {'yes' if same else 'NO':>12}")
    print(f"generation: {NEW_TOKENS} new tokens, greedy, reference stock generate(); selection: k = {K} section "
          f"headings, b = {B}, reference serial constrained decoding")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(one_case(sys.argv[2], int(sys.argv[3]))))
    else:
        main()
