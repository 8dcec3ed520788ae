"""Tree-build time per round at SmolLM2 sizes (hidden 576, vocab 49,152), budget 16.

Every builder gets the same draft blocks and runs interleaved; the table prints the median build ms
per round and the ratio to the marginal (DDTree) builder. Two drafters:

* ``--drafter shipped`` (default): the Domino drafter that ships for SmolLM2 (block 8, GRU 256, rank
  256), on the draft blocks of real greedy decoding rounds of the built-in prompts, so trees have the
  shapes they have in use.
* ``--drafter random``: a random Domino head at the released sizes (block 16, GRU 1024, rank 256) on
  random features: the worst case for the conditional builder (deep, bushy trees).

    .venv/bin/python benchmarks/build_time.py [--drafter shipped|random] [--rounds 200] [--device cpu|cuda]

On CUDA the conditional builder replays a captured CUDA graph; "conditional (frontier)" is the eager
CPU builder on the same device, and "conditional (reference heap)" the per-pop oracle.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import hf_treegen as htg
from hf_treegen.bench.prompt_files import render_chat
from hf_treegen.bench.prompts import builtin_prompts
from hf_treegen.builders import BUILDERS
from hf_treegen.builders.base import BuildSettings
from hf_treegen.builders.conditional import ConditionalBuilder
from hf_treegen.models import load_default_pair, load_smollm2


class ReferenceHeapBuilder(ConditionalBuilder):
    name = "conditional (reference heap)"
    reference = True


class EagerFrontierBuilder(ConditionalBuilder):
    name = "conditional (frontier)"
    use_cuda_graph = False


@torch.no_grad()
def real_blocks(model, tokenizer, drafter, count: int):
    """The draft blocks of real decoding rounds: greedy conditional decoding of the built-in prompts,
    with the builder recording every block it is given (so trees have the shapes they have in use)."""
    blocks = []

    class Recording(ConditionalBuilder):
        def __call__(self, block, root_token):
            blocks.append(block)
            return super().__call__(block, root_token)

    original = BUILDERS["conditional"]
    BUILDERS["conditional"] = Recording  # for this script only; restored below
    try:
        for kind in ("code", "explain", "chat"):
            for text in builtin_prompts(kind)[:2]:
                ids = render_chat(tokenizer, text).to(model.device)
                model.generate(ids, assistant_model=drafter, tree_strategy="conditional", max_new_tokens=48,
                               do_sample=False)
    finally:
        BUILDERS["conditional"] = original
    step = max(1, len(blocks) // count)
    return blocks[::step][:count]


def random_blocks(model, device, count: int):
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=16, projector_type="domino",
                                       emb_dim=256, gru_hidden_dim=1024)
    torch.manual_seed(0)
    drafter = htg.DominoDrafter(cfg, target=model).to(device).eval()
    session = drafter.new_session()
    session.extend(torch.randn(200, cfg.feature_size, device=device), torch.arange(200, device=device))
    return drafter, [session.draft(anchor, 200) for anchor in torch.randint(0, cfg.vocab_size, (count,)).tolist()]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drafter", choices=("shipped", "random"), default="shipped")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    device = torch.device(args.device)
    if args.drafter == "shipped":
        model, tokenizer, drafter = load_default_pair()
        model.to(device), drafter.to(device)
        blocks = real_blocks(model, tokenizer, drafter, 64)
    else:
        model, _ = load_smollm2(torch.float32)
        model.to(device)
        drafter, blocks = random_blocks(model, device, 32)
    depth = blocks[0].logits.shape[0]
    settings = {name: BuildSettings(budget=args.budget, topk=8 if "conditional" in name else args.budget, top_m=64,
                                    temperature=1.0, max_depth=depth)
                for name in ("marginal", "static_corrected", "conditional", "conditional (frontier)",
                             "conditional (reference heap)")}
    builders = {
        "marginal": BUILDERS["marginal"](settings["marginal"]),
        "static_corrected": BUILDERS["static_corrected"](settings["static_corrected"]),
        "conditional": BUILDERS["conditional"](settings["conditional"]),
        "conditional (reference heap)": ReferenceHeapBuilder(settings["conditional (reference heap)"]),
    }
    if device.type == "cuda":
        builders["conditional (frontier)"] = EagerFrontierBuilder(settings["conditional (frontier)"])
    times = {name: [] for name in builders}
    sizes = {name: [] for name in builders}
    depths = {name: [] for name in builders}
    for r in range(args.rounds + 5):
        block = blocks[r % len(blocks)]
        for name, build in builders.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            tree = build(block, 1)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if r >= 5:  # warm-up rounds (graph capture, input tables) are not timed
                times[name].append(time.perf_counter() - t0)
                sizes[name].append(tree.num_drafted)
                depths[name].append(int(tree.depths.max()))

    base = statistics.median(times["marginal"])
    cfg = drafter.config
    print(f"build time per round, {args.drafter} drafter, device={device.type}, threads={torch.get_num_threads()}, "
          f"budget {args.budget}, hidden {cfg.hidden_size}, vocab {cfg.vocab_size}, block {depth}, "
          f"GRU {cfg.gru_hidden_dim}, rank {cfg.emb_dim}, top-M 64, k 8, {args.rounds} rounds (median)")
    print(f"{'builder':<30} {'ms/round':>9} {'vs marginal':>12} {'nodes':>6} {'depth':>6}")
    for name in builders:
        med = statistics.median(times[name])
        print(f"{name:<30} {1000 * med:9.3f} {med / base:12.2f} {statistics.median(sizes[name]):6.0f} "
              f"{statistics.mean(depths[name]):6.1f}")


if __name__ == "__main__":
    main()
