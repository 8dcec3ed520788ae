"""``hf-treegen train-drafter``: distil a DFlash, Domino or DSpark drafter from a generated corpus.

    hf-treegen train-drafter --data data/drafter/smollm2 --out out/drafter-domino \\
        --projector domino --layers 1 --block-size 8 --time-budget-min 10 --threads 1

``--data`` takes several corpus folders (``--data A,B`` or repeated): generated answers and
teacher-forced corpora (``hf-treegen teacher-forced-data``) train together; the held-out evaluation
then stays on the generated corpus's held-out sequences (``summary.json``: ``corpus.held_out_on``),
and the teacher-forced held-out is reported once as ``final_val_teacher_forced``.

The target is the embedded SmolLM2-135M-Instruct (:func:`hf_treegen.models.load_smollm2`) unless
``--model`` names a local Hugging Face causal-LM folder. ``--resume`` continues the newest checkpoint
in ``--out`` with the drafter shape stored there (the architecture flags are then ignored). ``--init``
starts from a trained drafter; with a ``--projector`` other than its own it keeps the drafter's backbone
and starts a new head. The trained drafter is written to ``OUT/drafter`` (bf16, released layout) and the
metrics to ``OUT/summary.json``.

``hf-treegen export-drafter OUT/checkpoints/step-N.pt --out DIR`` writes any kept checkpoint (``--keep-checkpoints``)
as a drafter. Use :func:`add_arguments` + :func:`run` to mount train-drafter as a subcommand
(:func:`add_export_arguments` + :func:`run_export` for export-drafter), or :func:`train_drafter_main`.
"""

from __future__ import annotations

import argparse
import json
import os

from ..cli_types import add_placement_arguments, fraction, non_negative_int, positive_float, positive_int, user_error

DTYPES = ("fp32", "bf16", "fp16")
PROJECTORS = ("domino", "markov", "none")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated layer ids such as 2,10,18,26, got {text!r}") from err


def _share_list(text: str) -> tuple[float, ...]:
    try:
        shares = tuple(float(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        shares = ()
    if not shares or not all(x > 0 for x in shares):
        raise argparse.ArgumentTypeError(f"expected comma-separated shares > 0 such as 0.6,0.25,0.15, got {text!r}")
    return shares


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--data", required=True, action="append",
                   help="corpus folder (shards + manifest) from hf_treegen.train.data or .teacher_forced; repeat or "
                        "comma-separate to mix corpora (held-out evaluation then uses the generated ones)")
    p.add_argument("--tf-weight", type=float, default=1.0,
                   help="draw weight of teacher-forced sequences relative to generated ones (per anchor)")
    p.add_argument("--mix", type=_share_list, default=None, metavar="S1,S2,...",
                   help="share of the training draws from each --data corpus, in the order given (e.g. 0.6,0.25,0.15; "
                        "normalised to sum to 1). Default: in proportion to each corpus's size")
    p.add_argument("--out", required=True, help="output folder: checkpoints/, drafter/, summary.json, log.jsonl")
    p.add_argument("--model", default=None, help="target: a local HF causal-LM folder (default: embedded SmolLM2)")
    p.add_argument("--dtype", choices=DTYPES, default="fp32", help="target dtype (the drafter trains in fp32)")
    add_placement_arguments(p)
    p.add_argument("--projector", choices=PROJECTORS, default=None,
                   help="domino (default): DFlash backbone + GRU logit correction (shift_label); markov: DFlash "
                        "backbone + DSpark's rank-r logit bias from the token before each row (shift_label); none: "
                        "plain DFlash. With --init: another head than the init drafter's keeps its backbone and "
                        "starts a new head")
    p.add_argument("--markov-head", choices=("vanilla", "gated"), default="vanilla",
                   help="with --projector markov: the bias reads the previous token's code alone (vanilla) or "
                        "gated by the row's hidden state (gated)")
    p.add_argument("--layers", type=int, default=1, help="drafter decoder layers")
    p.add_argument("--block-size", type=int, default=8, help="block size B (anchor + B-1 masks)")
    p.add_argument("--target-layers", type=_int_list, default=None,
                   help="comma-separated target layer ids to tap (default: the released rule for --layers)")
    p.add_argument("--emb-dim", type=int, default=256, help="correction rank r (Domino's W1/W2, the Markov bias's)")
    p.add_argument("--gru-hidden", type=int, default=256, help="Domino GRU hidden size G")
    p.add_argument("--time-budget-min", type=float, default=None, help="training-loop time budget in minutes")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (drives the schedule when given)")
    p.add_argument("--lr", type=positive_float, default=8e-4, help="peak learning rate (AdamW, cosine schedule)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the initialisation and data order")
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--init", default=None,
                   help="start from this drafter checkpoint (a folder or Hub id; its config wins over the shape "
                        "flags) instead of a random initialisation, e.g. to continue training a shipped drafter")
    p.add_argument("--add-layers", type=positive_int, default=None, metavar="K",
                   help="with --init: append K decoder layers that start as copies of the last one with zero "
                        "output projections, so the drafter drafts exactly as before and training uses the depth "
                        "(--resume keeps the checkpoint's shape)")
    p.add_argument("--copy-target-layer", type=non_negative_int, default=None, metavar="L",
                   help="without --init: start the decoder layers as copies of target layer L, fc passing on the "
                        "deepest tapped layer's features and the final norm the target's, instead of random "
                        "weights (L = deepest tapped layer + 1 is the layer that reads those features)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--sequences", type=int, default=8, help="sequences per step")
    p.add_argument("--anchors", type=int, default=16, help="anchors (blocks) per sequence per step")
    p.add_argument("--eval-every", type=positive_int, default=100, help="optimizer steps between held-out evaluations")
    p.add_argument("--checkpoint-every", type=positive_int, default=200,
                   help="optimizer steps between resumable checkpoints")
    p.add_argument("--keep-checkpoints", type=positive_int, default=2, metavar="N",
                   help="how many of the newest checkpoints to keep (export any of them with hf-treegen export-drafter)")
    p.add_argument("--patience", type=int, default=5, help="evaluations without improvement before stopping (0: never)")
    p.add_argument("--val-fraction", type=fraction, default=0.05,
                   help="share of the generated sequences held out for evaluation")
    p.add_argument("--val-blocks", type=positive_int, default=512, help="blocks scored per held-out evaluation")
    p.add_argument("--gamma", type=float, default=None,
                   help="position weights exp(-(d-1)/gamma) of the loss over block depths d (default: "
                        "(block size - 1) / 2; smaller puts more weight on the first drafted tokens)")
    p.add_argument("--lam-decay-fraction", type=float, default=0.3,
                   help="Domino: the base-loss weight lam decays 1 -> 0 over this first fraction of training")
    p.add_argument("--full-vocab-loss", action="store_true",
                   help="train over the whole vocabulary (default: only token ids seen in the training corpus)")
    p.add_argument("--negatives", type=int, default=1024,
                   help="ids from outside the corpus vocabulary added to each step's softmax (0: none)")
    p.add_argument("--draft-vocab", type=int, default=None, metavar="N",
                   help="give a drafter that has none a draft vocabulary: the N most frequent response tokens of "
                        "the training corpus plus the EOS ids (saved with it; it then drafts and trains over "
                        "exactly those ids). A drafter from --init or --resume keeps its own map")
    p.add_argument("--autocast", choices=("auto", "bf16", "fp16", "none"), default="auto",
                   help="mixed precision of the drafter's forward (master weights stay fp32); auto: bf16 on a GPU or "
                        "a CPU with native bf16 matmuls, else none (bf16 is many times slower where it is emulated)")
    p.add_argument("--soft-labels", type=float, default=0.0, metavar="W",
                   help="share W of the target's top-k next-token distribution (soft labels) in the loss, 0-1 "
                        "(computed once from the cached features and cached beside them; default 0: hard labels)")
    p.add_argument("--soft-label-topk", type=positive_int, default=16, metavar="K",
                   help="tokens kept per position of the target's distribution for --soft-labels")
    p.add_argument("--feature-cache", default=None, help="feature cache folder (default: under $HF_TREEGEN_CACHE)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="hf-treegen train-drafter", description=__doc__.split("\n")[0]))


def _torch_dtype(name: str):
    """"fp32" | "bf16" | "fp16" -> the torch dtype (torch is imported here, so --help stays fast)."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _load_target(args, processes):
    """The target: split over devices by ``--device-map``, else whole on this process's device."""
    import torch

    dtype = _torch_dtype(args.dtype)
    if args.shard_target:
        return _load_sharded_target(args, dtype, processes)
    if args.device_map is not None:
        if processes.several:
            raise _FlagError("--device-map splits one target over this machine's devices for one process; run "
                             "it without accelerate launch / torchrun, or give --shard-target instead.")
        return _load_split_target(args, dtype)
    if args.model:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    else:
        from hf_treegen.models import load_smollm2

        model, _ = load_smollm2(dtype)
    device = processes.device  # under a launcher: this process's own GPU
    if device is None and torch.cuda.is_available():
        device = "cuda"
    return (model.to(device) if device is not None else model).eval()


def _load_sharded_target(args, dtype, processes):
    from hf_treegen.train.sharded_target import load_sharded_target, sharding_problem

    problem = sharding_problem(processes, args.device_map)
    if problem is not None:
        raise _FlagError(problem)
    try:
        return load_sharded_target(args.model, dtype, processes, tokenizer=False)[0]
    except OSError as err:  # no such folder, a Hub id that cannot be reached
        raise _FlagError(f"--model {args.model}: {str(err).splitlines()[0]}") from None


def _load_split_target(args, dtype):
    placement = dict(device_map=args.device_map, offload_folder=args.offload_folder)
    try:
        if args.model:  # a folder may hold no tokenizer: load the model alone
            from transformers import AutoModelForCausalLM

            return AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **placement).eval()
        from hf_treegen.models import load_target

        return load_target(None, dtype, **placement)[0]
    except ValueError as err:  # a map that names no module of this model, a strategy for the embedded one
        raise _FlagError(f"--device-map: {err}") from None


class _FlagError(Exception):
    """A mistake in the train-drafter flags; :func:`run` reports it as one line (exit status 2)."""


def run(args) -> int:
    from hf_treegen.train.processes import Processes

    status = _run(args)
    Processes.current().close()  # every process got here: leave the process group before exiting
    return status


def _run(args) -> int:
    if args.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from hf_treegen.train.trainer import train

    from hf_treegen.train.processes import Processes

    processes = Processes.current()
    try:
        config = _train_config(args)
        if args.shard_target and config.soft_labels > 0:
            from hf_treegen.train.trainer import SHARDED_SOFT_LABELS

            raise _FlagError(SHARDED_SOFT_LABELS)
        _check_corpora(args)
        config = _with_corpus_mix(config, args)
        target = _load_target(args, processes)
        drafter, drafter_config = _starting_drafter(args, target, config)
    except _FlagError as err:
        return user_error("train-drafter", str(err))
    if processes.is_main:
        print(f"{drafter_config.describe()}; {config.steps or '-'} steps, {config.time_budget_s or '-'} s budget, "
              f"{torch.get_num_threads()} threads x {processes.count} process(es)", flush=True)
    result = train(target, drafter if drafter is not None else drafter_config, args.data, args.out, config,
                   feature_cache=args.feature_cache, resume=args.resume, progress=not args.no_progress,
                   processes=processes)
    if not processes.is_main:
        return 0
    keys = ("steps", "train_seconds", "stop_reason", "best_step", "corpus", "feature_cache", "final_val",
            "final_val_full_vocab", "final_val_teacher_forced")
    print(json.dumps({k: result.summary[k] for k in keys if k in result.summary}, indent=1))
    print(f"drafter saved to {result.out_dir / 'drafter'}")
    return 0


def _train_config(args):
    """The TrainConfig the flags ask for; raises _FlagError for contradicting or invalid flags."""
    from hf_treegen.train.config import resolve_autocast
    from hf_treegen.train.trainer import TrainConfig

    if args.steps is None and args.time_budget_min is None:
        raise _FlagError("give --steps N or --time-budget-min M (or both).")
    if args.copy_target_layer is not None and (args.init or args.resume):
        raise _FlagError("--copy-target-layer starts a new drafter; drop --init/--resume, or "
                         "drop --copy-target-layer to continue the existing one.")
    if args.add_layers and not args.init:
        raise _FlagError("--add-layers grows the --init drafter; give --init DIR too.")
    try:
        return TrainConfig(
            steps=args.steps, time_budget_s=None if args.time_budget_min is None else args.time_budget_min * 60,
            sequences_per_step=args.sequences, anchors_per_sequence=args.anchors, lr=args.lr, seed=args.seed,
            val_fraction=args.val_fraction, val_blocks=args.val_blocks, eval_every=args.eval_every,
            checkpoint_every=args.checkpoint_every, keep_checkpoints=args.keep_checkpoints,
            patience=args.patience or None,
            lam_decay_fraction=args.lam_decay_fraction, gamma=args.gamma,
            loss_vocab="full" if args.full_vocab_loss else "corpus",
            negatives=args.negatives, autocast=resolve_autocast(args.autocast),
            draft_vocab=args.draft_vocab, soft_labels=args.soft_labels, soft_label_topk=args.soft_label_topk)
    except ValueError as err:
        raise _FlagError(str(err)) from None


def _check_corpora(args) -> None:
    """Split ``args.data`` into one folder per corpus (in place) and check them against ``--mix``."""
    args.data = [d.strip() for arg in args.data for d in arg.split(",") if d.strip()]
    missing = [d for d in args.data if not os.path.isdir(d)]
    if missing or not args.data:
        raise _FlagError(f"--data {', '.join(missing) or '(empty)'}: no such corpus folder.")
    if args.mix is not None and len(args.mix) != len(args.data):
        raise _FlagError(f"--mix gives {len(args.mix)} shares for {len(args.data)} --data corpora; "
                         f"give one share per corpus, in the same order.")
    if args.mix is not None and len(set(args.data)) != len(args.data):
        raise _FlagError("--mix needs each --data corpus once.")


def _with_corpus_mix(config, args):
    """``config`` with the ``--tf-weight`` and ``--mix`` draw weights (unchanged at their defaults)."""
    if args.tf_weight == 1.0 and args.mix is None:
        return config
    import dataclasses

    shares = dict(zip(args.data, args.mix)) if args.mix is not None else None
    try:
        return dataclasses.replace(config, teacher_forced_weight=args.tf_weight, corpus_shares=shares)
    except ValueError as err:
        raise _FlagError(str(err).replace("corpus_shares", "--mix").replace(
            "teacher_forced_weight", "--tf-weight")) from None


def _starting_drafter(args, target, config):
    """(drafter or None, its config) to train from: the newest checkpoint's shape (``--resume``), the
    ``--init`` drafter, or a new one from the shape flags (None: the trainer initialises it)."""
    import torch

    from hf_treegen.drafters.config import DrafterConfig
    from hf_treegen.train.checkpoints import latest_checkpoint

    ckpt = latest_checkpoint(args.out) if args.resume else None
    if args.resume and ckpt is None:
        raise _FlagError(f"--resume but {args.out}/checkpoints has no checkpoint.")
    if ckpt is not None:
        state = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)  # tensors and plain data only: no code runs
        drafter_config = DrafterConfig.from_dict(state["drafter_config"])
        del state
        return None, drafter_config
    if args.init:
        drafter = _init_drafter(args, target)
        return drafter, drafter.config
    return _new_drafter(args, target, config)


def _init_drafter(args, target):
    """The ``--init`` drafter in fp32, without its datastore, grown by ``--add-layers``."""
    import torch

    from hf_treegen.drafters.auto import load_any_drafter

    try:
        drafter = load_any_drafter(args.init, target, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise _FlagError(f"--init {args.init}: {err}") from None
    if drafter.datastore is not None:  # built from the --init drafter's corpora, not this run's
        drafter.datastore = None
        print(f"--init {args.init}: its datastore is not carried over to the new weights; give them one with "
              f"`hf-treegen datastore --drafter {os.path.join(args.out, 'drafter')} --data ... --out ...`.")
    if args.projector is not None and args.projector != _projector_of(drafter.config):
        drafter = _trade_head(args, drafter, target)
    if args.add_layers:
        from hf_treegen.train.drafter_setup import grow_drafter

        drafter = grow_drafter(drafter, args.add_layers, target)
    return drafter


def _projector_of(config) -> str | None:
    """The --projector value that builds a drafter of ``config``'s family (None for DFlash2)."""
    return {"domino": "domino", "dspark": "markov", "dflash": "none"}.get(config.family)


def _head_fields(args) -> dict:
    """The DrafterConfig fields of the sequential head --projector asks for (none for plain DFlash)."""
    if args.projector == "markov":
        return dict(architecture="DSparkDraftModel", markov_rank=args.emb_dim, markov_head_type=args.markov_head,
                    shift_label=True)
    if args.projector == "none":
        return {}
    return dict(projector_type="domino", emb_dim=args.emb_dim, gru_hidden_dim=args.gru_hidden)


def _trade_head(args, drafter, target):
    """The --init drafter's backbone under a new --projector head."""
    from hf_treegen.train.drafter_setup import with_new_head

    try:
        traded = with_new_head(drafter, _head_fields(args), target, seed=args.seed)
    except ValueError as err:
        raise _FlagError(f"--init {args.init} --projector {args.projector}: {err}") from None
    print(f"--init {args.init}: keeps its backbone (decoder layers, fc, norms, draft vocabulary) under a new "
          f"{args.projector} head (the {_projector_of(drafter.config) or drafter.config.family} head is dropped).")
    return traded


def _new_drafter(args, target, config):
    """(drafter or None, config) of a new drafter from the shape flags: None leaves the random
    initialisation to the trainer; ``--copy-target-layer`` starts it from a target layer."""
    from hf_treegen.drafters.config import DrafterConfig

    extra = _head_fields(args)
    try:
        drafter_config = DrafterConfig.for_target(target.config, num_hidden_layers=args.layers,
                                                  block_size=args.block_size, target_layer_ids=args.target_layers,
                                                  **extra)
    except ValueError as err:
        raise _FlagError(str(err)) from None
    if args.copy_target_layer is None:
        return None, drafter_config
    from hf_treegen.train.drafter_setup import copy_target_layer, init_drafter

    try:
        drafter = copy_target_layer(init_drafter(drafter_config, target, seed=config.seed), target,
                                    args.copy_target_layer)
    except ValueError as err:
        raise _FlagError(f"--copy-target-layer {args.copy_target_layer}: {err}") from None
    return drafter, drafter_config


def add_export_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("checkpoint", help="a training checkpoint: OUT/checkpoints/step-NNNNNNN.pt of a train-drafter run")
    p.add_argument("--out", required=True, help="folder to write the drafter to (config.json + model.safetensors)")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                   help="dtype of the saved weights (train-drafter saves bf16, like the released drafters)")
    return p


def run_export(args) -> int:
    """``hf-treegen export-drafter``: one checkpoint's drafter in the released layout, loadable as --drafter."""
    from hf_treegen.train.checkpoints import drafter_from_checkpoint

    drafter = drafter_from_checkpoint(args.checkpoint)  # a missing or foreign file is a user error (main)
    drafter.save_pretrained(args.out, dtype=_torch_dtype(args.dtype))
    print(f"{drafter.config.describe()}\ndrafter saved to {args.out}")
    return 0


def train_drafter_main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(train_drafter_main())
