"""Tree decoding on a model that is NOT enable()d: transformers' ``custom_generate`` route.

    python examples/custom_generate_hub.py                                  # offline: embedded SmolLM2, shipped drafter
    python examples/custom_generate_hub.py --strategy marginal --max-new-tokens 64
    python examples/custom_generate_hub.py --custom-generate OWNER/REPO     # a Hub repo holding custom_generate/

transformers (>= 4.56) runs a repository's ``custom_generate/generate.py`` in place of its own generate()
loop when asked to, and hf_treegen ships that folder (``hf_treegen/hub/custom_generate``; the repo-style
root that holds it is ``hf_treegen.hub.CUSTOM_GENERATE_DIR``). Two ways to use it, both shown here on a plain
``AutoModelForCausalLM`` that hf_treegen never touched:

1. **Per call**: ``model.generate(ids, custom_generate=<folder or Hub repo id>, trust_remote_code=True,
   assistant_model=drafter, tree_strategy=...)``. ``custom_generate`` names a folder (or Hub repo) that
   *contains* ``custom_generate/generate.py``; a local folder works offline.
2. **Shipped with the model**: copy ``custom_generate/`` into the model's repo (here: a temporary folder with
   the model's files linked in). ``from_pretrained(repo, trust_remote_code=True)`` then replaces the model's
   ``generate`` with it, so every plain ``model.generate(..., assistant_model=drafter, tree_strategy=...)`` is
   tree decoding, and a call without ``tree_strategy`` stays stock transformers.

Either way the greedy output equals stock ``generate()`` token for token; the script checks it and exits with
status 1 if not. ``trust_remote_code=True`` is needed because generate.py is code that runs on your machine:
read it first (it is 16 lines). ``--model`` / ``--drafter`` take local folders or Hub ids.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from example_setup import one_line, resolve_device

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp64": "float64"}
STRATEGIES = ("chain", "marginal", "adaptive", "static_corrected", "conditional", "cond_adaptive", "auto")


def model_repo_with_custom_generate(model_dir: Path, custom_generate_root: Path, into: Path) -> Path:
    """A model repo layout in ``into``: the files of ``model_dir`` (symlinked, no copy of the weights) plus a
    copy of ``custom_generate/``, exactly what you would push to the Hub."""
    for item in model_dir.iterdir():
        if item.is_file():
            (into / item.name).symlink_to(item.resolve())
    shutil.copytree(custom_generate_root / "custom_generate", into / "custom_generate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="target: local folder or Hub id (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--drafter", help="DFlash/Domino drafter for --model: folder or Hub id (default: the shipped one)")
    parser.add_argument("--custom-generate",
                        help="folder or Hub repo id that contains custom_generate/generate.py "
                             "(default: hf_treegen.hub.CUSTOM_GENERATE_DIR, the copy inside the installed package)")
    parser.add_argument("--strategy", default="conditional", choices=STRATEGIES,
                        help="tree_strategy (DFlash drafters: chain, marginal, adaptive, auto) (default: %(default)s)")
    parser.add_argument("--budget", type=int, default=8, help="tree_budget (default: %(default)s)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="new tokens (default: %(default)s)")
    parser.add_argument("--prompt", default="Write a Python function that checks whether a number is prime.",
                        help="user message (default: %(default)s)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="model dtype (default: %(default)s)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... or auto: cuda when there is one (default: %(default)s)")
    parser.add_argument("--skip-repo", action="store_true", help="skip route 2 (the model repo with custom_generate/)")
    args = parser.parse_args()

    if args.budget < 1 or args.max_new_tokens < 1:
        parser.error("--budget and --max-new-tokens must be at least 1")
    if args.model is not None and args.drafter is None:
        parser.error("--model needs --drafter: a drafter trained for that model (the shipped one fits SmolLM2 only)")
    if args.drafter is not None and args.model is None:
        parser.error("--drafter needs --model: the shipped SmolLM2 drafter is used with the embedded model")
    cg = args.custom_generate
    if cg is not None and os.path.isdir(cg) and not os.path.isfile(os.path.join(cg, "custom_generate", "generate.py")):
        parser.error(f"--custom-generate {cg}: that folder has no custom_generate/generate.py (give the folder that "
                     f"contains custom_generate/, not custom_generate/ itself)")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_treegen import TreeGenerationMixin
    from hf_treegen.drafters.auto import load_any_drafter
    from hf_treegen.hub import CUSTOM_GENERATE_DIR

    device = resolve_device(parser, args.device)
    dtype = getattr(torch, DTYPES[args.dtype])
    custom_generate = cg or CUSTOM_GENERATE_DIR
    if args.model is None:
        from hf_treegen.models import DEFAULT_DRAFTER_DIR, smollm2_dir

        model_source, drafter_source = str(smollm2_dir()), DEFAULT_DRAFTER_DIR
    else:
        model_source, drafter_source = args.model, args.drafter
    try:
        # a plain transformers model: no hf_treegen.enable() anywhere in this script
        model = AutoModelForCausalLM.from_pretrained(model_source, dtype=dtype, attn_implementation="sdpa").to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_source)
        drafter = load_any_drafter(drafter_source, target=model).to(device=device, dtype=dtype).eval()
    except (OSError, ValueError) as err:
        parser.error(f"could not load the model or drafter: {one_line(err)}")
    if not drafter.config.is_domino and args.strategy in ("static_corrected", "conditional", "cond_adaptive"):
        parser.error(f"--strategy {args.strategy} needs a Domino drafter; this DFlash one runs chain, marginal, "
                     f"adaptive or auto")
    print(f"target: {args.model or 'SmolLM2-135M-Instruct (embedded)'} ({type(model).__name__}, {args.dtype}, {device}); "
          f"enable()d: {isinstance(model, TreeGenerationMixin)}")
    print(f"custom_generate: {custom_generate}")

    ids = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"].to(device)
    t0 = time.perf_counter()
    stock = model.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)
    stock_s = time.perf_counter() - t0

    # route 1: per call
    t0 = time.perf_counter()
    try:
        out = model.generate(ids, custom_generate=custom_generate, trust_remote_code=True, assistant_model=drafter,
                             tree_strategy=args.strategy, tree_budget=args.budget, max_new_tokens=args.max_new_tokens,
                             do_sample=False, return_dict_in_generate=True)
    except OSError as err:  # not a folder with custom_generate/, or a Hub repo that cannot be reached
        parser.error(f"--custom-generate {custom_generate}: {one_line(err)}")
    tree_s = time.perf_counter() - t0
    same = out.sequences.equal(stock)
    new = stock.shape[1] - ids.shape[1]
    print(f"\n1. model.generate(ids, custom_generate=..., trust_remote_code=True, assistant_model=drafter, "
          f"tree_strategy={args.strategy!r}, tree_budget={args.budget})")
    print(tokenizer.decode(out.sequences[0, ids.shape[1]:], skip_special_tokens=True).strip())
    print(f"   stock {new / stock_s:.1f} tok/s, custom_generate {(out.sequences.shape[1] - ids.shape[1]) / tree_s:.1f} "
          f"tok/s (first call includes loading generate.py), tau {out.tree_stats.tau:.2f}; "
          f"greedy output {'identical' if same else 'DIFFERENT'} to stock generate()")

    # route 2: custom_generate/ shipped inside the model repo
    same_repo = True
    if args.skip_repo or not os.path.isdir(model_source):
        print("\n2. skipped" + ("" if args.skip_repo else f": --model {args.model} is a Hub id; copy custom_generate/ "
                                                         f"into your model repo and push it to try this route"))
    else:
        with tempfile.TemporaryDirectory(prefix="hf_treegen-repo-") as tmp:
            local = custom_generate if os.path.isdir(custom_generate) else CUSTOM_GENERATE_DIR
            repo = model_repo_with_custom_generate(Path(model_source), Path(local), Path(tmp))
            shipped = AutoModelForCausalLM.from_pretrained(repo, dtype=dtype, attn_implementation="sdpa",
                                                           trust_remote_code=True).to(device).eval()
            tree = shipped.generate(ids, assistant_model=drafter, tree_strategy=args.strategy, tree_budget=args.budget,
                                    max_new_tokens=args.max_new_tokens, do_sample=False)
            plain = shipped.generate(ids, max_new_tokens=args.max_new_tokens, do_sample=False)  # no tree_strategy: stock
            same_repo = tree.equal(stock) and plain.equal(stock)
            print(f"\n2. repo {sorted(p.name for p in repo.iterdir())}\n"
                  f"   from_pretrained(repo, trust_remote_code=True).generate(ids, assistant_model=drafter, "
                  f"tree_strategy={args.strategy!r}): greedy output {'identical' if tree.equal(stock) else 'DIFFERENT'} "
                  f"to stock generate(); without tree_strategy: {'identical' if plain.equal(stock) else 'DIFFERENT'}")
    if not (same and same_repo) and args.dtype != "bf16":
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
