"""Tree-build time per round at SmolLM2 sizes (hidden 576, vocab 49,152), budget 16, block 16.

Every builder gets the same draft blocks (real SmolLM2 embedding/lm_head, a random Domino head), run
interleaved; the table prints the median build ms per round and the ratio to the marginal (DDTree)
builder. The Domino head defaults to the released sizes (GRU 1024, rank 256).

    .venv/bin/python benchmarks/build_time.py [--rounds 200] [--gru-hidden 1024] [--emb-dim 256] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import hf_treegen as htg
from hf_treegen.builders import BUILDERS
from hf_treegen.builders.base import BuildSettings
from hf_treegen.builders.conditional import ConditionalBuilder
from hf_treegen.models import load_smollm2


class ReferenceHeapBuilder(ConditionalBuilder):
    name = "conditional (reference heap)"
    reference = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--gru-hidden", type=int, default=1024)
    parser.add_argument("--emb-dim", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    device = torch.device(args.device)
    model, _ = load_smollm2(torch.float32)
    model.to(device)
    cfg = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=16, projector_type="domino",
                                       emb_dim=args.emb_dim, gru_hidden_dim=args.gru_hidden)
    torch.manual_seed(0)
    drafter = htg.DominoDrafter(cfg, target=model).to(device).eval()
    session = drafter.new_session()
    session.extend(torch.randn(200, cfg.feature_size, device=device), torch.arange(200))
    blocks = [session.draft(anchor, 200) for anchor in torch.randint(0, cfg.vocab_size, (32,)).tolist()]

    settings = {name: BuildSettings(budget=args.budget, topk=8 if "conditional" in name else args.budget, top_m=64,
                                    temperature=1.0, max_depth=16)
                for name in ("marginal", "static_corrected", "conditional", "conditional (reference heap)")}
    builders = {
        "marginal": BUILDERS["marginal"](settings["marginal"]),
        "static_corrected": BUILDERS["static_corrected"](settings["static_corrected"]),
        "conditional": BUILDERS["conditional"](settings["conditional"]),
        "conditional (reference heap)": ReferenceHeapBuilder(settings["conditional (reference heap)"]),
    }
    times = {name: [] for name in builders}
    sizes = {name: [] for name in builders}
    for r in range(args.rounds + 5):
        block = blocks[r % len(blocks)]
        for name, build in builders.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            tree = build(block, 1)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if r >= 5:  # warm-up rounds are not timed
                times[name].append(time.perf_counter() - t0)
                sizes[name].append(tree.num_drafted)

    base = statistics.median(times["marginal"])
    print(f"build time per round, device={device.type}, threads={torch.get_num_threads()}, budget {args.budget}, "
          f"hidden 576, vocab 49152, GRU {args.gru_hidden}, rank {args.emb_dim}, top-M 64, k 8, "
          f"{args.rounds} rounds (median)")
    print(f"{'builder':<30} {'ms/round':>9} {'vs marginal':>12} {'nodes':>6}")
    for name in builders:
        med = statistics.median(times[name])
        print(f"{name:<30} {1000 * med:9.3f} {med / base:12.2f} {statistics.median(sizes[name]):6.0f}")


if __name__ == "__main__":
    main()
