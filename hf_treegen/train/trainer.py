"""Distil a DFlash or Domino drafter against a frozen Hugging Face causal LM (CPU or GPU).

Pipeline of :func:`train`:

1. **Corpus** (:mod:`~hf_treegen.train.sequences`). ``(ids, response_start)`` sequences (the target's own answers, see
   :mod:`hf_treegen.train.data`), deduplicated by content, from one corpus folder or several. A
   sequence goes to the held-out split when a seeded hash of its content falls below ``val_fraction``,
   so a growing corpus keeps its split. Teacher-forced corpora (:mod:`hf_treegen.train.teacher_forced`)
   carry per-position target argmax labels; their block labels are those argmaxes, masked where the
   text left the target's greedy path (:func:`~.blocks.teacher_forced_labels`), and they are drawn with
   weight ``teacher_forced_weight``; or ``corpus_shares`` fixes the share of draws from each corpus
   folder (:func:`draw_weights`). When generated and teacher-forced sequences are mixed, the held-out
   evaluation (early stopping, ``final_val``) uses only the *generated* held-out sequences, which look
   like decoding; the teacher-forced held-out ones are not trained on and are evaluated once at the end
   (``final_val_teacher_forced``).
2. **Target features** of the drafter's ``target_layer_ids``, extracted once into an fp16 memory-mapped
   cache (:mod:`hf_treegen.train.features`); later calls extract only new sequences.
3. **Blocks.** Each step draws ``sequences_per_step`` training sequences (proportionally to their
   number of anchors) and ``anchors_per_sequence`` distinct anchors p in each response; all blocks of
   a sequence run in one drafter forward under one boolean mask (:mod:`hf_treegen.train.blocks`).
4. **Loss** (:mod:`hf_treegen.train.losses`): position-weighted cross-entropy through the target's
   frozen lm_head; for Domino the dual loss ``(1-lam) CE(base+correction) + lam CE(base)`` with lam
   decaying linearly from 1 to 0 over the first ``lam_decay_fraction`` of training. With
   ``soft_labels = w > 0`` each CE becomes ``(1-w) CE(hard labels) + w CE(target's top-k distribution)``
   (:mod:`~hf_treegen.train.target_topk`: the distributions are computed once from the cached deepest
   tapped layer and cached beside the features).
   ``loss_vocab="corpus"`` restricts the training softmax to the token ids of the training sequences
   (EAGLE-3-style draft vocabulary; much cheaper on CPU) plus ``negatives`` ids drawn afresh each step
   from outside it. The saved drafter uses the full lm_head, whose rows for unseen ids would otherwise
   never be pushed down (measured on SmolLM2: without negatives the held-out depth-2 accuracy was 0.26
   with the training vocabulary but 0.22 with the full one). A drafter with a draft vocabulary
   (:meth:`~hf_treegen.drafters.dflash.DFlashDrafter.set_draft_vocab`; ``draft_vocab=N`` chooses the N
   most frequent response tokens plus the EOS ids for a run that starts without one) drafts only those
   ids, so its softmax runs over exactly them, without negatives, and labels outside them are ignored.
5. **Optimisation.** AdamW (weight decay on matrices only), linear warmup then cosine decay to
   ``min_lr_ratio``, gradient clipping, optional bf16 autocast (fp32 master weights).
6. **Held-out evaluation** every ``eval_every`` steps on a fixed set of ``val_blocks`` blocks: top-1
   accuracy per depth and the expected accepted chain length (:class:`~.losses.ChainMetrics`); early
   stopping on the accepted length with ``patience`` evaluations, and the best state is kept.
7. **Checkpoints** (:mod:`~hf_treegen.train.checkpoints`) every ``checkpoint_every`` steps in ``out_dir/checkpoints`` (drafter, optimizer,
   schedule, RNG states, step, history); ``train(..., resume=True)`` continues from the newest one and
   reproduces an uninterrupted step-budgeted run bit for bit (same corpus, same thread count).
8. **Output.** ``out_dir/drafter`` (``save_pretrained(..., dtype=torch.bfloat16)``, released layout),
   ``out_dir/summary.json`` (settings, corpus sizes, timings, final held-out metrics with the training
   vocabulary and with the full vocabulary) and ``out_dir/log.jsonl`` (one line per evaluation).

Launched as several processes (``accelerate launch``/``torchrun``; :mod:`~hf_treegen.train.processes`),
each trains on its share of every step's sequences and the gradients are summed, so the steps are
those of one process holding the whole step; the main process extracts the features and writes every
file.

Schedules are functions of *progress*: ``step / steps`` when ``steps`` is set, else elapsed training
time / ``time_budget_s`` (the time budget covers the training loop and its evaluations, not the
one-off feature extraction). With both set, ``steps`` drives the schedule and the budget only caps
the run. Time-driven runs are not bit-reproducible (they depend on the machine's speed).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ..drafters.config import DrafterConfig
from ..drafters.dflash import DFlashDrafter
from ..drafters.vocab import check_draft_vocab, choose_draft_vocab, draft_vocab_index, eos_token_ids
from ..target import is_sharded
from .blocks import forward_blocks, prediction_rows, sample_anchors, teacher_tokens
from .checkpoints import latest_checkpoint, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from .config import AUTOCAST, TrainConfig
from .drafter_setup import init_drafter
from .features import FeatureCache, default_feature_cache_dir, extract_features
from .processes import Processes
from .losses import (IGNORE, ChainMetrics, SoftTargets, block_logits, dual_loss, map_labels, position_weights,
                     weighted_ce)
from .sequences import TrainSequence, corpus_report, draw_shares, draw_weights, load_sequences, split_corpus, val_plan
from .target_topk import default_topk_cache_dir, extract_target_topk, soft_targets


@contextlib.contextmanager
def _frozen(model):
    """Target parameters get no gradients while training; their flags are restored afterwards."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@dataclass
class TrainResult:
    drafter: DFlashDrafter
    step: int
    stop_reason: str
    losses: list[float]  # training loss per step (from step 1, resumed runs included)
    evals: list[dict]  # held-out metrics at each evaluation
    final: dict  # held-out metrics of the returned drafter (training vocabulary)
    final_full_vocab: dict | None  # the same with the full lm_head (what inference sees)
    out_dir: Path
    seconds: float
    summary: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# the data of a run

@dataclass
class _RunData:
    """The corpus of a run, split, with each training sequence's draw weight."""

    train: list[TrainSequence]
    val: list[TrainSequence]  # evaluated during training (early stopping, the best state)
    tf_val: list[TrainSequence]  # teacher-forced held-out beside a generated one: evaluated once at the end
    held_out_on: str  # "generated" or "teacher_forced": what `val` is
    weights: torch.Tensor  # (N,) float64 draw weight of each training sequence

    @classmethod
    def load(cls, corpus, cfg: TrainConfig) -> "_RunData":
        seqs = [s for s in load_sequences(corpus, cfg.include_sampled) if len(s.ids) >= 2]
        train_seqs, val_seqs, tf_val_seqs = split_corpus(seqs, cfg.val_fraction, cfg.seed)
        held_out_on = "teacher_forced" if val_seqs and all(s.labels is not None for s in val_seqs) else "generated"
        train_seqs = [s for s in train_seqs if s.num_anchors > 0]
        if not train_seqs:
            raise ValueError("The corpus has no training sequence with a response of 2+ tokens; generate data first "
                             "(hf_treegen.train.data.generate_corpus) or lower val_fraction.")
        # before the (slow) feature extraction, so bad shares fail at once
        return cls(train_seqs, val_seqs, tf_val_seqs, held_out_on, draw_weights(train_seqs, cfg))

    def all_sequences(self) -> list[TrainSequence]:
        return self.train + self.val + self.tf_val

    def response_tokens(self, part: str) -> int:
        return int(sum(len(s.ids) - s.response_start for s in getattr(self, part)))


@dataclass
class _LossVocabulary:
    """The softmax columns of the training loss.

    A drafter with a draft vocabulary only ever drafts those ids: the softmax runs over exactly them
    (no negatives: a token outside is never drafted) and labels outside them are ignored. Otherwise
    ``loss_vocab="corpus"`` uses the token ids of the training sequences plus ``negatives`` ids drawn
    afresh each step from outside them, and ``"full"`` the whole vocabulary."""

    ids: torch.Tensor | None = None  # (V',) token ids of the softmax columns; None: the full vocabulary
    remap: torch.Tensor | None = None  # (V,) token id -> its column in ids, -1 outside
    outside: torch.Tensor | None = None  # (N,) ids the per-step negatives are drawn from (empty: none)

    @classmethod
    def of(cls, drafter: DFlashDrafter, cfg: TrainConfig, train_seqs: list[TrainSequence],
           device) -> "_LossVocabulary":
        vocab_size = drafter.config.vocab_size
        if drafter.draft_vocab is not None:
            ids = check_draft_vocab(drafter.draft_vocab, vocab_size).to(device)
            return cls(ids, draft_vocab_index(ids, vocab_size), ids.new_zeros(0))
        if cfg.loss_vocab == "corpus":
            ids = torch.unique(torch.cat([s.ids for s in train_seqs])).to(device)
            remap = draft_vocab_index(ids, vocab_size)
            return cls(ids, remap, torch.nonzero(remap < 0).flatten())  # ids never seen in training
        return cls()

    def for_step(self, negatives: int, generator: torch.Generator) -> torch.Tensor | None:
        """This step's softmax ids: the vocabulary, then ``negatives`` ids from outside it. The
        negatives come after the vocabulary, so labels (which index the vocabulary part) keep their
        columns; without them the frozen lm_head's unseen rows are never pushed down and steal the
        full-vocabulary argmax at inference."""
        if self.ids is None or not negatives or not self.outside.numel():
            return self.ids
        pick = torch.randperm(self.outside.numel(), generator=generator)[:negatives]
        return torch.cat([self.ids, self.outside[pick.to(self.ids.device)]])


# --------------------------------------------------------------------------------------------------
# schedule, optimizer, evaluation

class _Schedule:
    """Warmup + cosine learning rate and the Domino lam, as functions of step and progress."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.step = 0
        self.elapsed = 0.0  # seconds of training loop, carried across resumes

    def progress(self) -> float:
        c = self.cfg
        if c.steps is not None:
            return min(self.step / c.steps, 1.0)
        return min(self.elapsed / c.time_budget_s, 1.0)

    def lr(self) -> float:
        c = self.cfg
        if self.step < c.warmup_steps:
            return c.lr * (self.step + 1) / c.warmup_steps
        cosine = 0.5 * (1.0 + math.cos(math.pi * self.progress()))
        return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine)

    def lam(self) -> float:
        f = self.cfg.lam_decay_fraction
        if f <= 0:
            return 0.0
        return max(0.0, 1.0 - self.progress() / f)

    def done(self) -> bool:
        c = self.cfg
        return ((c.steps is not None and self.step >= c.steps)
                or (c.time_budget_s is not None and self.elapsed >= c.time_budget_s))

    def state_dict(self) -> dict:
        return {"step": self.step, "elapsed": self.elapsed}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.elapsed = int(state["step"]), float(state["elapsed"])


def _optimizer(drafter, cfg: TrainConfig) -> torch.optim.AdamW:
    decay, plain = [], []
    for p in drafter.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else plain).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas))


def _features(cache: FeatureCache, seq: TrainSequence, length: int) -> torch.Tensor:
    return torch.from_numpy(np.array(cache.get(seq.key, length), dtype=np.float16))


class _Evaluator:
    """Held-out metrics of the drafter on a fixed plan of blocks; with several processes each scores
    its share of the plan and the counts are summed, so every process gets the same metrics."""

    def __init__(self, drafter, val: list[TrainSequence], plan, cache: FeatureCache, weights: torch.Tensor,
                 processes: Processes, chunk: int = 64):
        self.drafter, self.val, self.plan, self.cache = drafter, val, plan, cache
        self.weights, self.processes, self.chunk = weights, processes, chunk

    @torch.no_grad()
    def __call__(self, vocab_ids: torch.Tensor | None, remap: torch.Tensor | None) -> dict:
        d = self.drafter
        cfg = d.config
        was_training = d.training
        d.eval()
        metrics = ChainMetrics(cfg.num_draft_positions)
        for i, anchors in self.processes.share(self.plan):
            seq = self.val[i]
            for a in anchors.split(self.chunk):
                feats = _features(self.cache, seq, int(a.max()))
                hidden = forward_blocks(d, seq.ids, feats, a)
                rows = prediction_rows(d, hidden)
                device = rows.device
                labels = map_labels(seq.block_labels(a, rows.shape[1], device), remap)
                logits = block_logits(d, rows, teacher_tokens(seq.ids.to(device), a.to(device), cfg.block_size),
                                      vocab_ids)
                metrics.add(logits.final, labels)
                loss_labels = labels.masked_fill(labels < 0, IGNORE)
                n = int((loss_labels != IGNORE).sum())
                if n:
                    metrics.add_loss(float(weighted_ce(logits.final, loss_labels, self.weights.to(device))), n)
        metrics.combine(self.processes.sum)
        d.train(was_training)
        return metrics.summary()


def _state_copy(drafter) -> dict:
    return {k: v.detach().cpu().clone() for k, v in drafter.state_dict().items()}


def _improves(best: dict, metrics: dict, min_delta: float) -> bool:
    return metrics["accept_len"] > best["metric"] + min_delta


def _best_at(step: int, metrics: dict, drafter) -> dict:
    """A new best held-out state (the checkpoint keeps it as this plain dict)."""
    return {"metric": metrics["accept_len"], "step": step, "bad_evals": 0, "state": _state_copy(drafter)}


# --------------------------------------------------------------------------------------------------
# one training step

def _draw_blocks(data: _RunData, cfg: TrainConfig, generator: torch.Generator
                 ) -> list[tuple[TrainSequence, torch.Tensor]]:
    """This step's sequences (drawn by weight, without replacement), each with its sorted anchors (A,)."""
    count = min(cfg.sequences_per_step, len(data.train))
    picks = torch.multinomial(data.weights, count, replacement=False, generator=generator).tolist()
    blocks = []
    for i in picks:
        seq = data.train[i]
        blocks.append((seq, sample_anchors(len(seq.ids), seq.response_start, cfg.anchors_per_sequence, generator)))
    return blocks


def _block_logits(drafter: DFlashDrafter, blocks: list[tuple[TrainSequence, torch.Tensor]], cache: FeatureCache,
                  vocab: _LossVocabulary, negatives: int, generator: torch.Generator,
                  soft: tuple[FeatureCache, float] | None = None):
    """Logits of every drafted position of ``blocks`` over this step's softmax columns, their labels
    (R, D) as columns (IGNORE where there is none, or where a teacher-forced label is outside the
    training vocabulary), and, given ``soft`` = (target top-k cache, soft-label weight), their soft labels."""
    dcfg = drafter.config
    depths = dcfg.num_draft_positions
    device = drafter.fc.weight.device
    rows, teachers, labels, soft_columns, soft_probs = [], [], [], [], []
    for seq, anchors in blocks:
        feats = _features(cache, seq, int(anchors.max()))
        rows.append(prediction_rows(drafter, forward_blocks(drafter, seq.ids, feats, anchors)))  # (A, D, H)
        if soft is not None:
            columns, probs = soft_targets(soft[0].get(seq.key), anchors, depths, vocab.remap)  # (A, D, k) each
            soft_columns.append(columns)
            soft_probs.append(probs)
        ids, anchors = seq.ids.to(device), anchors.to(device)
        teachers.append(teacher_tokens(ids, anchors, dcfg.block_size))
        labels.append(seq.block_labels(anchors, depths, device))  # (A, D)
    columns = map_labels(torch.cat(labels), vocab.remap)
    columns = columns.masked_fill(columns < 0, IGNORE)
    teacher = torch.cat(teachers) if dcfg.is_domino or dcfg.family == "dspark" else None  # sequential heads
    targets = None
    if soft is not None:
        targets = SoftTargets(torch.cat(soft_columns).to(device), torch.cat(soft_probs).to(device), soft[1])
    return block_logits(drafter, torch.cat(rows), teacher, vocab.for_step(negatives, generator)), columns, targets


def _update(drafter, optimizer: torch.optim.Optimizer, loss: torch.Tensor, grad_clip: float | None,
            processes: Processes) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if processes.several:
        _sum_gradients(drafter, processes)
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), grad_clip)
    optimizer.step()


@torch.no_grad()
def _sum_gradients(drafter, processes: Processes) -> None:
    """Every trainable parameter's gradient summed over the processes, in one flat collective (a
    parameter this process's blocks did not reach counts as zero), so every process takes the same step."""
    params = [p for p in drafter.parameters() if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    processes.sum(flat)
    for p, grad in zip(params, flat.split([p.numel() for p in params])):
        p.grad = grad.view_as(p).clone()


def _share_of_loss(labels: torch.Tensor, weights: torch.Tensor, processes: Processes) -> torch.Tensor:
    """This process's share of the step's label weight: its loss (a weighted mean over its own labelled
    positions) times this share is its part of the weighted mean over every process's positions, so
    the summed gradients are those of one process holding the whole step."""
    mine = (weights[None, :].expand_as(labels) * (labels != IGNORE)).sum().double()  # scalar
    return mine / processes.sum(mine.clone()).clamp_min(1e-12)


@torch.no_grad()
def _depth_accuracy(final_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(D,) top-1 accuracy per drafted depth over the labelled positions."""
    valid = labels != IGNORE
    correct = (final_logits.argmax(-1) == labels) & valid
    return (correct.sum(0) / valid.sum(0).clamp_min(1)).cpu()


# --------------------------------------------------------------------------------------------------
# what a run reports

def _acc_text(acc: Sequence[float], n: int = 6) -> str:
    return " ".join(f"{a:.2f}"[1:] if a < 1 else "1.0" for a in list(acc)[:n])


# the soft labels run the target's layers after the tapped one on the main process alone
SHARDED_SOFT_LABELS = ("soft labels are not computed with a target sharded over the processes; drop --soft-labels "
                       "(soft_labels=0) or run without --shard-target.")
FAMILY_NAMES = {"dflash": "DFlash", "dflash2": "DFlash2", "domino": "Domino", "dspark": "DSpark"}


class _ProgressBar:
    """The run's tqdm bar, in steps (or in seconds for a time-driven run), with the recent loss, the
    per-depth accuracy and Domino's lam; does nothing when progress is off."""

    def __init__(self, enabled: bool, cfg: TrainConfig, schedule: _Schedule, family: str):
        self.cfg, self.is_domino, self.bar = cfg, family == "domino", None
        if enabled:
            from tqdm.auto import tqdm

            by_steps = cfg.steps is not None
            self.bar = tqdm(total=cfg.steps if by_steps else int(cfg.time_budget_s),
                            initial=schedule.step if by_steps else int(schedule.elapsed),
                            unit="step" if by_steps else "s", dynamic_ncols=True,
                            desc=f"train {FAMILY_NAMES.get(family, family)}")

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)

    def update(self, schedule: _Schedule, losses: list[float], acc_ema: torch.Tensor, lam: float) -> None:
        if self.bar is None:
            return
        cfg = self.cfg
        if cfg.steps is not None:
            self.bar.update(1)
        else:
            self.bar.update(int(schedule.elapsed) - self.bar.n)
        if schedule.step % cfg.log_every == 0 or schedule.step == 1:
            post = {"loss": f"{np.mean(losses[-cfg.log_every:]):.3f}", "acc": _acc_text(acc_ema)}
            if cfg.steps is None:
                post = {"step": schedule.step, **post}
            if self.is_domino:
                post["lam"] = f"{lam:.2f}"
            self.bar.set_postfix(post, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _final_metrics(drafter, data: _RunData, evaluator: _Evaluator, vocab: _LossVocabulary, cache: FeatureCache,
                   weights: torch.Tensor, cfg: TrainConfig) -> tuple[dict, dict | None, dict | None]:
    """Held-out metrics of the returned drafter: with the training vocabulary, with the one inference
    uses (the full lm_head, unless the drafter has a draft vocabulary), and on the teacher-forced
    held-out set when there is one."""
    if not data.val:
        final, final_full = {}, None
    else:
        final = evaluator(vocab.ids, vocab.remap)
        mapped = drafter.draft_vocab is not None  # it drafts over vocab.ids only: `final` is what inference sees
        if vocab.ids is None or mapped:
            final_full = final
        else:
            final_full = evaluator(None, None) if cfg.full_vocab_final_eval else None
    final_tf = None
    if data.tf_val:  # once, with the vocabulary inference uses when possible
        full = cfg.full_vocab_final_eval or vocab.ids is None
        tf_eval = _Evaluator(drafter, data.tf_val, val_plan(data.tf_val, cfg.val_blocks, cfg.seed), cache, weights,
                             evaluator.processes)
        final_tf = tf_eval(None, None) if full else tf_eval(vocab.ids, vocab.remap)
        final_tf["vocab"] = "full" if full else "train"
    return final, final_full, final_tf


# --------------------------------------------------------------------------------------------------
# the run

def _starting_drafter(drafter: DFlashDrafter | DrafterConfig, target, cfg: TrainConfig) -> DFlashDrafter:
    if isinstance(drafter, DrafterConfig):
        drafter = init_drafter(drafter, target, seed=cfg.seed)
    elif not isinstance(drafter, DFlashDrafter):
        raise TypeError(f"drafter must be a DFlashDrafter/DominoDrafter or a DrafterConfig, "
                        f"got {type(drafter).__name__}.")
    drafter.config.validate_against(target.config)
    device = target.get_input_embeddings().weight.device
    return drafter.to(device=device, dtype=torch.float32).attach(target)


def _extract(target, drafter: DFlashDrafter, data: _RunData, cfg: TrainConfig, feature_cache, progress: bool,
             processes: Processes):
    """The run's cached target features (and, for soft labels, the target's top-k per position): every
    process extracts its share, the main process writes them once."""
    if feature_cache is None:
        feature_cache = default_feature_cache_dir(target, drafter.config.target_layer_ids)
    with _frozen(target):
        cache = extract_features(target, [s.ids for s in data.all_sequences()], drafter.config.target_layer_ids,
                                 feature_cache, batch_tokens=cfg.extract_batch_tokens, progress=progress,
                                 processes=processes)
        topk = None
        if cfg.soft_labels > 0:  # the target's top-k per position, from the cached deepest tapped layer
            source = max(drafter.config.target_layer_ids)
            topk_dir = default_topk_cache_dir(target, source, cfg.soft_label_topk)
            with processes.main_first():  # written once; the others then find every sequence cached
                topk = extract_target_topk(target, [(s.ids, s.response_start) for s in data.train], cache, topk_dir,
                                           k=cfg.soft_label_topk, progress=progress)
    return cache, topk


class _Run:
    """One training run's state: the drafter, its data and features, the optimiser, the schedule and
    the history that a checkpoint saves."""

    def __init__(self, target, drafter: DFlashDrafter, data: _RunData, cache: FeatureCache, topk, cfg: TrainConfig,
                 out_dir: Path, processes: Processes):
        self.target, self.drafter, self.data, self.cache, self.topk, self.cfg = target, drafter, data, cache, topk, cfg
        self.out_dir, self.processes = out_dir, processes
        self.device = target.get_input_embeddings().weight.device
        if drafter.draft_vocab is None and cfg.draft_vocab:
            # a run that starts without a draft vocabulary: the most frequent response tokens, plus the EOS ids
            response = [s.ids[s.response_start:] for s in data.train]
            drafter.set_draft_vocab(choose_draft_vocab(response, cfg.draft_vocab, always=eos_token_ids(target)))
        self.dcfg = drafter.config
        self.weights = position_weights(self.dcfg.num_draft_positions, cfg.gamma_for(self.dcfg.block_size),
                                        device=self.device)  # (D,)
        self.evaluator = _Evaluator(drafter, data.val, val_plan(data.val, cfg.val_blocks, cfg.seed), cache,
                                    self.weights, processes)
        self.optimizer = _optimizer(drafter, cfg)
        self.schedule = _Schedule(cfg)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self.losses: list[float] = []
        self.evals: list[dict] = []
        self.best = {"metric": -math.inf, "step": 0, "state": None, "bad_evals": 0}
        self.stop_reason: str | None = None
        self.vocab: _LossVocabulary | None = None  # set by start(), after a resume restored the drafter's own map
        self.acc_ema: torch.Tensor | None = None

    def start(self, ckpt_path: Path | None) -> None:
        """Fresh state, or the checkpoint's; then the loss vocabulary."""
        if ckpt_path is not None:
            self._restore(load_checkpoint(ckpt_path), ckpt_path)
        self.vocab = _LossVocabulary.of(self.drafter, self.cfg, self.data.train, self.device)

    def _restore(self, ckpt: dict, path: Path) -> None:
        if ckpt["drafter_config"] != self.dcfg.to_dict():
            raise ValueError(f"{path} was trained with another drafter config; resume with the same drafter "
                             f"settings or use a new output folder.")
        self.drafter.load_state_dict(ckpt["drafter"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.schedule.load_state_dict(ckpt["schedule"])
        set_rng_state(self.generator, ckpt["rng"])
        self.losses, self.evals, self.best = ckpt["losses"], ckpt["evals"], ckpt["best"]
        # an early-stopped run stays stopped; one that ran out of steps/time continues if the budget grew
        self.stop_reason = "early_stopping" if ckpt.get("stop_reason") == "early_stopping" else None

    def checkpoint(self, reason: str | None = None) -> None:
        if not self.processes.is_main:  # one writer; every process holds the same state
            return
        state = {"drafter": _state_copy(self.drafter), "optimizer": self.optimizer.state_dict(),
                 "schedule": self.schedule.state_dict(), "rng": rng_state(self.generator), "losses": self.losses,
                 "evals": self.evals, "best": self.best, "stop_reason": reason,
                 "drafter_config": self.dcfg.to_dict(), "train_config": self.cfg.to_dict()}
        save_checkpoint(self.out_dir, self.schedule.step, state, self.cfg.keep_checkpoints)

    def evaluate(self) -> dict:
        """Held-out metrics now, appended to the history and to ``log.jsonl``."""
        schedule, cfg = self.schedule, self.cfg
        m = self.evaluator(self.vocab.ids, self.vocab.remap) if self.data.val else {}
        m["step"] = schedule.step
        self.evals.append(m)
        if not self.processes.is_main:
            return m
        train_loss = round(float(np.mean(self.losses[-cfg.eval_every:])), 5) if self.losses else None
        with open(self.out_dir / "log.jsonl", "a") as fh:
            fh.write(json.dumps({"step": schedule.step, "elapsed_s": round(schedule.elapsed, 1),
                                 "lr": schedule.lr(), "lam": schedule.lam() if self.dcfg.is_domino else None,
                                 "train_loss": train_loss, **m}) + "\n")
        return m

    def step(self, amp) -> float:
        """One optimiser step; returns Domino's lam for it (0 for DFlash)."""
        cfg, schedule = self.cfg, self.schedule
        t0 = time.perf_counter()
        lam = schedule.lam() if self.dcfg.is_domino else 0.0
        for group in self.optimizer.param_groups:
            group["lr"] = schedule.lr()
        # every process draws the whole step (the same draws, so the generator stays in step) and trains on its share
        blocks = self.processes.share(_draw_blocks(self.data, cfg, self.generator))
        with amp:
            logits, labels, soft = _block_logits(self.drafter, blocks, self.cache, self.vocab, cfg.negatives,
                                                 self.generator,
                                                 None if self.topk is None else (self.topk, cfg.soft_labels))
        loss, _ = dual_loss(logits, labels, self.weights, lam, self.dcfg.is_domino, soft)
        if self.processes.several:
            loss = loss * _share_of_loss(labels, self.weights, self.processes).to(loss.dtype)
        _update(self.drafter, self.optimizer, loss, cfg.grad_clip, self.processes)
        schedule.step += 1
        schedule.elapsed += time.perf_counter() - t0
        self.losses.append(float(self.processes.sum(loss.detach().clone())))
        acc = _depth_accuracy(logits.final, labels)
        self.acc_ema = acc if self.acc_ema is None else 0.9 * self.acc_ema + 0.1 * acc
        return lam

    def keep_if_best(self, m: dict) -> None:
        if _improves(self.best, m, self.cfg.min_delta):
            self.best = _best_at(self.schedule.step, m, self.drafter)
        else:
            self.best["bad_evals"] += 1
            if self.cfg.patience is not None and self.best["bad_evals"] >= self.cfg.patience:
                self.stop_reason = "early_stopping"

    def after_step(self, bar: _ProgressBar) -> None:
        """The step's evaluation and checkpoint, when due; they count towards a time budget too."""
        cfg, schedule = self.cfg, self.schedule
        t1 = time.perf_counter()
        if schedule.step % cfg.eval_every == 0 and self.data.val:
            m = self.evaluate()
            self.keep_if_best(m)
            best = self.best
            bar.write(f"step {schedule.step}: held-out ({self.data.held_out_on}) accept_len {m['accept_len']:.3f} "
                      f"(best {best['metric']:.3f} @ {best['step']}), acc {_acc_text(m['acc'], 8)}")
        if schedule.step % cfg.checkpoint_every == 0 or self.stop_reason is not None:
            self.checkpoint(self.stop_reason)
        schedule.elapsed += time.perf_counter() - t1

    def loop(self, progress: bool, callback) -> None:
        amp_dtype = AUTOCAST[self.cfg.autocast]
        amp = (torch.autocast(device_type=self.device.type, dtype=amp_dtype) if amp_dtype is not None
               else contextlib.nullcontext())
        bar = _ProgressBar(progress and self.processes.is_main, self.cfg, self.schedule, self.dcfg.family)
        if self.schedule.step == 0 and self.data.val and not self.evals:
            self.evaluate()  # the untrained baseline, step 0
        self.drafter.train()
        with _frozen(self.target):
            try:
                while self.stop_reason is None and not self.schedule.done():
                    lam = self.step(amp)
                    self.after_step(bar)
                    # the slowest process's clock, so a time budget stops every process at the same step
                    self.schedule.elapsed = self.processes.max(self.schedule.elapsed)
                    bar.update(self.schedule, self.losses, self.acc_ema, lam)
                    if callback is not None:
                        callback(self.schedule.step, self.losses[-1])
            finally:
                bar.close()

    def finish(self) -> None:
        """Why the run stopped, its last evaluation and checkpoint; the drafter goes back to its best state."""
        cfg, schedule = self.cfg, self.schedule
        if self.stop_reason is None:
            self.stop_reason = "steps" if cfg.steps is not None and schedule.step >= cfg.steps else "time_budget"
            if self.data.val and (not self.evals or self.evals[-1]["step"] != schedule.step):
                m = self.evaluate()
                if _improves(self.best, m, cfg.min_delta):
                    self.best = _best_at(schedule.step, m, self.drafter)
            self.checkpoint(self.stop_reason)
        if self.best["state"] is not None and self.best["step"] != schedule.step:
            self.drafter.load_state_dict(self.best["state"])
        self.drafter.eval()

    def summary(self, final: dict, final_full: dict | None, final_tf: dict | None, extract_s: float,
                seconds: float) -> dict:
        data, cache, topk, vocab, dcfg = self.data, self.cache, self.topk, self.vocab, self.dcfg
        summary = {
            "drafter": dcfg.describe(),
            "drafter_params": sum(p.numel() for p in self.drafter.parameters()),
            "train_config": self.cfg.to_dict(),
            "corpus": {"train_sequences": len(data.train), "val_sequences": len(data.val),
                       "train_response_tokens": data.response_tokens("train"),
                       "val_response_tokens": data.response_tokens("val"),
                       "loss_vocab_size": int(vocab.ids.numel()) if vocab.ids is not None else dcfg.vocab_size,
                       **corpus_report(data.train, data.val, data.tf_val, data.held_out_on),
                       "draw_shares": draw_shares(data.train, data.weights)},
            "feature_cache": {"dir": str(cache.dir), "sequences": len(cache), "bytes": cache.nbytes(),
                              "extract_seconds_this_call": round(extract_s, 1)},
            "target_topk_cache": None if topk is None else {"dir": str(topk.dir), "sequences": len(topk),
                                                            "bytes": topk.nbytes()},
            "processes": self.processes.count,
            "steps": self.schedule.step, "train_seconds": round(self.schedule.elapsed, 1),
            "total_seconds": round(seconds, 1), "stop_reason": self.stop_reason, "best_step": self.best["step"],
            "final_val": final, "final_val_full_vocab": final_full,
        }
        if final_tf is not None:
            summary["final_val_teacher_forced"] = final_tf
        return summary


def train(target, drafter: DFlashDrafter | DrafterConfig, corpus, out_dir: str | Path,
          config: TrainConfig | None = None, *, feature_cache: str | Path | None = None, resume: bool = False,
          progress: bool = True, callback: Callable[[int, float], None] | None = None,
          processes: Processes | None = None) -> TrainResult:
    """Train ``drafter`` (an instance, trained in place as fp32, or a :class:`DrafterConfig` for a fresh
    one) against the frozen ``target`` on ``corpus`` (a :func:`~hf_treegen.train.data.load_corpus`
    folder, a list of such folders, e.g. generated + teacher-forced, or ``(ids, response_start)`` pairs /
    ``(ids, response_start, labels)`` triples). ``feature_cache``: the feature cache folder (default
    ``$HF_TREEGEN_CACHE/features/<target>-<fingerprint>-L<layers>``). ``resume``: continue from the
    newest checkpoint in ``out_dir/checkpoints`` (an error if there is none). ``callback(step, loss)``
    runs after every step (tests use it to interrupt a run).

    ``processes`` (default: :meth:`Processes.current`, one unless launched as several): each process
    trains on its share of every step's sequences and the gradients are summed, so N processes take the
    steps one process would (``sequences_per_step`` is the whole step's count, at least one per
    process). The main process alone writes the features (each process extracts a share), checkpoints, logs
    and the drafter; every process returns the same drafter."""
    cfg = config or TrainConfig(steps=1000)
    processes = processes or Processes.current()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_setup = time.perf_counter()
    drafter = _starting_drafter(drafter, target, cfg)
    ckpt_path = latest_checkpoint(out_dir) if resume else None
    if resume and ckpt_path is None:
        raise FileNotFoundError(f"resume=True but {out_dir / 'checkpoints'} holds no step-*.pt checkpoint; "
                                f"start without resume (or pass the output folder of the run to continue).")
    if cfg.soft_labels > 0 and is_sharded(target):
        raise ValueError(SHARDED_SOFT_LABELS)
    data = _RunData.load(corpus, cfg)
    if min(cfg.sequences_per_step, len(data.train)) < processes.count:
        raise ValueError(f"{processes.count} processes need at least one training sequence each per step; "
                         f"sequences_per_step is {cfg.sequences_per_step} and the corpus has {len(data.train)} "
                         f"training sequences: raise sequences_per_step or run fewer processes.")
    processes.copy_from_main([p.data for p in drafter.parameters()])  # every process starts from the same weights
    progress = progress and processes.is_main
    if progress and len({s.origin for s in data.train}) > 1:
        shares = draw_shares(data.train, data.weights)
        print("draws per corpus: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()), flush=True)
    t_extract = time.perf_counter()
    cache, topk = _extract(target, drafter, data, cfg, feature_cache, progress, processes)
    extract_s = time.perf_counter() - t_extract
    run = _Run(target, drafter, data, cache, topk, cfg, out_dir, processes)
    run.start(ckpt_path)
    run.loop(progress, callback)
    run.finish()
    final, final_full, final_tf = _final_metrics(drafter, data, run.evaluator, run.vocab, cache, run.weights, cfg)
    seconds = time.perf_counter() - t_setup
    summary = run.summary(final, final_full, final_tf, extract_s, seconds)
    if processes.is_main:
        drafter.save_pretrained(out_dir / "drafter", dtype=torch.bfloat16)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    processes.wait()  # every process returns once the drafter is written
    return TrainResult(drafter=drafter, step=run.schedule.step, stop_reason=run.stop_reason, losses=list(run.losses),
                       evals=list(run.evals), final=final, final_full_vocab=final_full, out_dir=out_dir,
                       seconds=seconds, summary=summary)
