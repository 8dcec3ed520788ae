"""Tree decoding's round costs on a GPU, against stock greedy ``generate()`` on the same device.

    python benchmarks/gpu_speed.py --model PATH            # a real transformers checkpoint
    python benchmarks/gpu_speed.py --random-config CONFIG  # random weights of that config: costs only

With ``--random-config`` the target has the shape of a real model but random weights, so it takes no
download: every forward costs what the real model's would, but the shipped drafter cannot predict it
and the tau it reaches means nothing. What does carry over is the cost of a round. The last column,
**break-even tau** = tau / speedup = (seconds per round) x (stock tokens per second), is the tokens a
round must accept to match stock decoding on this device. A drafter whose measured tau (on any device:
it does not depend on timing) is above that number gains about tau / break-even over stock.

Per dtype it prints the calibrated cost profile (one step and verify forwards of growing width) and a
bench table: random prompts of ``--prompt-length`` tokens, ``--max-new-tokens`` new tokens (EOS is
ignored, so every run emits all of them), strategies interleaved prompt by prompt, greedy outputs
compared token for token with stock. Context lookup is off (``+lookup0``): on random weights it would
only find the loops that random models fall into.
"""

from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoConfig, AutoModelForCausalLM

import hf_treegen as htg
from hf_treegen.bench import run_strategies
from hf_treegen.bench.harness import format_table
from hf_treegen import calibrate
from hf_treegen.calibration import profile_summary
from hf_treegen.models import DEFAULT_DRAFTER_DIR

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
STRATEGIES = "ar,conditional@4+lookup0,conditional@16+lookup0,conditional@64+lookup0,auto+lookup0"


def load_target(args, dtype: torch.dtype, device: str):
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    else:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.random_config), dtype=dtype)
    model.generation_config.eos_token_id = None  # every run emits max_new_tokens: equal work per strategy
    model.generation_config.pad_token_id = 0
    return htg.enable(model.eval().to(device))


def break_even_rows(results) -> list[str]:
    lines = [f"{'strategy':<24} {'speedup':>8} {'tau':>6} {'break-even tau':>15}"]
    for r in results:
        row = r.row()
        if r.taus and r.name != "ar":
            lines.append(f"{r.name:<24} {row['speedup']:8.2f} {row['tau']:6.2f} {row['tau'] / row['speedup']:15.2f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a local transformers model folder (the shipped drafter must fit it)")
    source.add_argument("--random-config", help="a config.json: random weights of that shape")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--strategies", default=STRATEGIES)
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--prompt-length", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
    for name in args.dtypes.split(","):
        model = load_target(args, DTYPES[name], args.device)
        drafter = htg.DominoDrafter.from_pretrained(DEFAULT_DRAFTER_DIR, target=model).eval()
        print(f"\n== {name} target on {args.device}, drafter in {next(drafter.parameters()).dtype} ==")
        print(json.dumps(profile_summary(calibrate(model, drafter, use_cache=False, progress=False))))
        generator = torch.Generator().manual_seed(1)
        vocab = model.config.vocab_size
        prompts = [torch.randint(vocab, (1, args.prompt_length), generator=generator).to(args.device)
                   for _ in range(args.num_prompts)]
        results = run_strategies(model, prompts, drafter, args.strategies.split(","),
                                 max_new_tokens=args.max_new_tokens, eos_token_ids=[], lean=False, progress=False)
        print(format_table(results))
        print("\n".join(break_even_rows(results)))
        del model, drafter
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
