"""Train a drafter for your own model, then decode with it: the whole loop, small.

    python examples/train_drafter.py                          # offline, tiny: ~8 prompts, 20 steps, 1-3 minutes
    python examples/train_drafter.py --prompts 2000 --max-new-tokens 128 --steps 3000 --out runs/my-drafter
    python examples/train_drafter.py --model Qwen/Qwen3-0.6B --device cuda --prompts 5000 --steps 20000
    python examples/train_drafter.py --init shipped           # continue the shipped SmolLM2 drafter instead

Three steps, all with hf_treegen's own training code (``hf_treegen.train``):

1. **Data**: the target answers training prompts (``train.prompts.train_prompts``: built from the CPython
   standard library, offline; evaluation sources held out) and ``train.data.generate_corpus`` stores
   prompt + answer token ids in resumable shards. A drafter learns the target's own continuations.
2. **Training**: ``train.trainer.train`` caches the tapped target layers once, then trains DFlash-style
   blocks (``--projector domino`` adds Domino's GRU correction) and writes ``OUT/run/drafter`` (released
   layout, bf16) plus ``OUT/run/summary.json``.
3. **Use**: the saved folder is loaded back like any released drafter and drives tree decoding; greedy output
   equals stock ``generate()`` whatever the drafter's quality, which only sets the speed (tau).

The default run is a smoke test: a drafter trained for seconds on a handful of answers drafts poorly
(tau near 1). The shipped drafter (model_cards/smollm2-135m-domino.md) took hours of CPU on ~40k answers.
``--model`` takes a local folder or a Hub id (any causal LM transformers loads).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from example_setup import one_line, resolve_device

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
QUICK_PROMPTS = (  # --prompt-source quick: no corpus indexing at all (used by the tests)
    "Write a Python function that returns the cube of a number.",
    "Explain what a Python list comprehension is.",
    "Write a function that returns the minimum of a list without using min().",
    "What does the `with` statement do in Python?",
    "Write a function that counts vowels in a string.",
    "Explain the difference between a tuple and a list.",
    "Write a function that checks whether a number is even.",
    "What is a Python dictionary used for?",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="target: local folder or Hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--out", help="output folder: data/, run/ (with run/drafter), features/ "
                                      "(default: a new temporary folder, kept and printed)")
    parser.add_argument("--prompt-source", choices=("stdlib", "quick"), default="stdlib",
                        help="stdlib: hf_treegen's training prompts from the CPython standard library (indexing it "
                             "takes ~20 s); quick: 8 fixed prompts (default: %(default)s)")
    parser.add_argument("--prompts", type=int, default=8, help="training prompts the target answers (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="answer length per prompt (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--projector", choices=("domino", "none"), default="domino",
                        help="domino: DFlash backbone + GRU correction (every tree strategy); none: plain DFlash "
                             "(default: %(default)s)")
    parser.add_argument("--block-size", type=int, default=8, help="drafted block: anchor + B-1 masks (default: %(default)s)")
    parser.add_argument("--init", help="start from this drafter (folder, Hub id, or 'shipped' for hf_treegen's SmolLM2 "
                                       "drafter) instead of a random one (default: random)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                        help="target dtype; the drafter trains in fp32 (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... or auto: cuda when there is one (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    args = parser.parse_args()

    if min(args.prompts, args.max_new_tokens, args.steps) < 1:
        parser.error("--prompts, --max-new-tokens and --steps must be at least 1")
    if args.prompts < 2:
        parser.error("--prompts must be at least 2 (one answer is held out for evaluation)")
    if args.block_size < 2:
        parser.error("--block-size must be at least 2 (an anchor and one drafted position)")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.init == "shipped" and args.model:
        parser.error("--init shipped is the SmolLM2 drafter; it fits only the embedded model (drop --model)")
    if args.prompt_source == "quick" and args.prompts > len(QUICK_PROMPTS):
        parser.error(f"--prompt-source quick has {len(QUICK_PROMPTS)} prompts; use stdlib for more")

    import torch

    import hf_treegen as htg
    from hf_treegen.drafters.auto import load_any_drafter
    from hf_treegen.train.data import generate_corpus
    from hf_treegen.train.prompts import train_prompts
    from hf_treegen.train.trainer import TrainConfig, train

    device = resolve_device(parser, args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="hf_treegen-drafter-"))
    if (out / "run" / "checkpoints").is_dir():
        parser.error(f"--out {out} already holds a training run; give a new folder")
    dtype = getattr(torch, DTYPES[args.dtype])
    try:
        if args.model is None:
            from hf_treegen.models import load_smollm2

            model, tokenizer = load_smollm2(dtype)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="sdpa").eval()
            tokenizer = AutoTokenizer.from_pretrained(args.model)
    except (OSError, ValueError) as err:
        parser.error(f"could not load --model {args.model}: {one_line(err)}")
    model = model.to(device)
    print(f"target: {args.model or 'SmolLM2-135M-Instruct (embedded)'} ({args.dtype}, {device}, "
          f"{torch.get_num_threads()} threads); output: {out}", flush=True)

    # the drafter to train: checked before any answer is generated
    if args.init:
        from hf_treegen.models import DEFAULT_DRAFTER_DIR

        source = DEFAULT_DRAFTER_DIR if args.init == "shipped" else args.init
        try:
            drafter = load_any_drafter(source, target=model, dtype=torch.float32)
        except (OSError, ValueError) as err:
            parser.error(f"--init {args.init}: {one_line(err)}")
    else:
        extra = dict(projector_type="domino", emb_dim=128, gru_hidden_dim=128) if args.projector == "domino" else {}
        drafter = htg.DrafterConfig.for_target(model.config, num_hidden_layers=1, block_size=args.block_size, **extra)

    # 1. data: the target's own answers to training prompts
    t0 = time.perf_counter()
    if args.prompt_source == "quick":
        prompts = list(QUICK_PROMPTS[: args.prompts])
    else:
        prompts = train_prompts(args.prompts, docs_dir=False)  # the stdlib only: no download
    manifest = generate_corpus(model, tokenizer, prompts, out / "data", batch_size=4, max_new_tokens=args.max_new_tokens,
                               max_prompt_tokens=256, progress=False)
    print(f"1. data: {len(prompts)} prompts answered, {manifest['response_tokens']}"
          f" response tokens, {time.perf_counter() - t0:.1f} s -> {out / 'data'}", flush=True)

    # 2. training
    config = TrainConfig(steps=args.steps, sequences_per_step=4, anchors_per_sequence=8, warmup_steps=min(30, args.steps // 4),
                         val_fraction=0.2, val_blocks=64, eval_every=max(args.steps // 2, 1),
                         checkpoint_every=args.steps, negatives=256, autocast="none" if device == "cpu" else "bf16",
                         log_every=max(args.steps // 4, 1))
    result = train(model, drafter, out / "data", out / "run", config, feature_cache=out / "features", progress=False)
    final = result.final_full_vocab or result.final
    print(f"2. training: {result.step} steps in {result.summary['train_seconds']} s (stop: {result.stop_reason}); "
          f"held-out: {json.dumps({k: final[k] for k in final if not isinstance(final[k], list)})}", flush=True)

    # 3. load the saved folder like any released drafter and decode with it
    enabled = htg.enable(model)
    trained = load_any_drafter(out / "run" / "drafter", target=enabled).to(device=device, dtype=dtype).eval()
    print(f"3. loaded {out / 'run' / 'drafter'}: {trained.config.describe()}")
    text = "Write a Python function that reverses a string."
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"].to(device)
    strategy = "conditional" if trained.config.is_domino else "marginal"
    tree = enabled.generate(ids, assistant_model=trained, tree_strategy=strategy, tree_budget=8,
                            max_new_tokens=args.max_new_tokens, do_sample=False, return_dict_in_generate=True)
    stock = enabled.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
    same = tree.sequences.equal(stock)
    print(f"   {strategy}: {tokenizer.decode(tree.sequences[0, ids.shape[1]:], skip_special_tokens=True).strip()!r}\n"
          f"   tau {tree.tree_stats.tau:.2f} over {tree.tree_stats.rounds} rounds; greedy output "
          f"{'identical' if same else 'DIFFERENT'} to stock generate()")
    print(f"\nuse it: DominoDrafter.from_pretrained({str(out / 'run' / 'drafter')!r}, target=model) "
          f"(or hf_treegen.drafters.auto.load_any_drafter)")
    if not same and args.dtype == "fp32":
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
