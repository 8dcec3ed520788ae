"""Distil a DFlash or Domino drafter against a frozen Hugging Face causal LM (CPU or GPU).

Pipeline of :func:`train`:

1. **Corpus.** ``(ids, response_start)`` sequences (the target's own answers, see
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
   decaying linearly from 1 to 0 over the first ``lam_decay_fraction`` of training.
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
7. **Checkpoints** every ``checkpoint_every`` steps in ``out_dir/checkpoints`` (drafter, optimizer,
   schedule, RNG states, step, history); ``train(..., resume=True)`` continues from the newest one and
   reproduces an uninterrupted step-budgeted run bit for bit (same corpus, same thread count).
8. **Output.** ``out_dir/drafter`` (``save_pretrained(..., dtype=torch.bfloat16)``, released layout),
   ``out_dir/summary.json`` (settings, corpus sizes, timings, final held-out metrics with the training
   vocabulary and with the full vocabulary) and ``out_dir/log.jsonl`` (one line per evaluation).

Schedules are functions of *progress*: ``step / steps`` when ``steps`` is set, else elapsed training
time / ``time_budget_s`` (the time budget covers the training loop and its evaluations, not the
one-off feature extraction). With both set, ``steps`` drives the schedule and the budget only caps
the run. Time-driven runs are not bit-reproducible (they depend on the machine's speed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import pickle
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ..drafters.config import DrafterConfig
from ..drafters.dflash import DFlashDrafter
from ..drafters.domino import DominoDrafter
from ..drafters.vocab import check_draft_vocab, choose_draft_vocab, draft_vocab_index, eos_token_ids
from ..ops import native_bf16_matmuls
from ..target import decoder_layers
from .blocks import (block_labels, forward_blocks, prediction_rows, sample_anchors, teacher_forced_labels,
                     teacher_tokens, valid_anchor_range)
from .features import FeatureCache, default_feature_cache_dir, extract_features, sequence_key
from .losses import IGNORE, ChainMetrics, block_logits, dual_loss, map_labels, position_weights, weighted_ce

CHECKPOINT_PATTERN = "step-{:07d}.pt"
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


# --------------------------------------------------------------------------------------------------
# configuration

@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run. Give ``steps``, ``time_budget_s`` or both."""

    steps: int | None = None
    time_budget_s: float | None = None
    sequences_per_step: int = 8
    anchors_per_sequence: int = 16
    lr: float = 8e-4
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float | None = 1.0
    gamma: float | None = None  # position-weight decay; None: (block_size - 1) / 2 (7.5 for B=16, 3.5 for B=8)
    lam_decay_fraction: float = 0.3  # Domino: lam goes 1 -> 0 over this first fraction of training
    seed: int = 0
    val_fraction: float = 0.05
    val_blocks: int = 512
    eval_every: int = 100
    patience: int | None = 5  # evaluations without improvement before stopping; None = never stop early
    min_delta: float = 0.0  # improvement of the held-out accepted length that resets the patience
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    loss_vocab: str = "corpus"  # "corpus": token ids of the training sequences; "full": the whole vocab
    negatives: int = 1024  # with loss_vocab="corpus": ids from outside it drawn into each step's softmax
    draft_vocab: int | None = None  # a drafter without a draft vocabulary gets this many ids (see train)
    autocast: str = "bf16"  # "bf16", "fp16" or "none"
    include_sampled: bool = True  # train on sampled (non-greedy) answers too
    teacher_forced_weight: float = 1.0  # draw weight of a labelled (teacher-forced) sequence, per anchor
    corpus_shares: dict[str, float] | None = None  # corpus folder -> its share of the drawn sequences
    extract_batch_tokens: int = 8192
    full_vocab_final_eval: bool = True
    log_every: int = 10

    def __post_init__(self) -> None:
        def bad(msg):
            raise ValueError(f"TrainConfig: {msg}")

        if self.steps is None and self.time_budget_s is None:
            bad("give steps=N or time_budget_s=SECONDS (or both) so the run knows when to stop.")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            bad(f"steps must be a positive int, got {self.steps!r}.")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            bad(f"time_budget_s must be > 0 seconds, got {self.time_budget_s!r}.")
        for name in ("sequences_per_step", "anchors_per_sequence", "val_blocks", "eval_every", "checkpoint_every",
                     "keep_checkpoints", "extract_batch_tokens", "log_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                bad(f"{name} must be a positive int, got {value!r}.")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            bad(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}.")
        if not self.lr > 0:
            bad(f"lr must be > 0, got {self.lr!r}.")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            bad(f"betas must be two numbers in [0, 1), got {self.betas!r}.")
        if not 0 <= self.min_lr_ratio <= 1:
            bad(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}.")
        if self.weight_decay < 0:
            bad(f"weight_decay must be >= 0, got {self.weight_decay!r}.")
        if self.grad_clip is not None and not self.grad_clip > 0:
            bad(f"grad_clip must be > 0 or None (no clipping), got {self.grad_clip!r}.")
        if self.gamma is not None and not self.gamma > 0:
            bad(f"gamma must be > 0 or None (block-size default), got {self.gamma!r}.")
        if not 0 <= self.lam_decay_fraction <= 1:
            bad(f"lam_decay_fraction must be in [0, 1] (0 = no base-anchored curriculum), "
                f"got {self.lam_decay_fraction!r}.")
        if not 0 <= self.val_fraction < 1:
            bad(f"val_fraction must be in [0, 1), got {self.val_fraction!r}.")
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 1):
            bad(f"patience must be a positive int or None (no early stopping), got {self.patience!r}.")
        if not isinstance(self.negatives, int) or self.negatives < 0:
            bad(f"negatives must be an int >= 0, got {self.negatives!r}.")
        if self.draft_vocab is not None and (isinstance(self.draft_vocab, bool) or not isinstance(self.draft_vocab, int)
                                             or self.draft_vocab < 1):
            bad(f"draft_vocab must be a positive int (draft token ids) or None, got {self.draft_vocab!r}.")
        if self.loss_vocab not in ("corpus", "full"):
            bad(f"loss_vocab must be 'corpus' or 'full', got {self.loss_vocab!r}.")
        if self.autocast not in AUTOCAST:
            bad(f"autocast must be one of {sorted(AUTOCAST)}, got {self.autocast!r}.")
        if not self.teacher_forced_weight > 0:
            bad(f"teacher_forced_weight must be > 0, got {self.teacher_forced_weight!r}.")
        if self.corpus_shares is not None:
            if not self.corpus_shares or not all(isinstance(v, (int, float)) and v > 0
                                                 for v in self.corpus_shares.values()):
                bad(f"corpus_shares must map each corpus folder to a share > 0, got {self.corpus_shares!r}.")
            if self.teacher_forced_weight != 1.0:
                bad("give corpus_shares or teacher_forced_weight, not both: the shares already fix how often "
                    "the teacher-forced corpus is drawn.")

    def gamma_for(self, block_size: int) -> float:
        return float(self.gamma) if self.gamma is not None else max((block_size - 1) / 2.0, 1.0)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d


# --------------------------------------------------------------------------------------------------
# drafters

def drafter_class(config: DrafterConfig) -> type[DFlashDrafter]:
    """The class that builds a drafter of ``config``: DominoDrafter for a Domino projector, else DFlashDrafter."""
    return DominoDrafter if config.is_domino else DFlashDrafter


def init_drafter(config: DrafterConfig, target, seed: int = 0) -> DFlashDrafter:
    """A freshly initialised fp32 drafter for ``target``; a Domino W2 starts at zero (neutral correction)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        drafter = drafter_class(config)(config)
    if config.is_domino:
        with torch.no_grad():
            drafter.w2.zero_()
    device = target.get_input_embeddings().weight.device
    return drafter.to(device=device, dtype=torch.float32).attach(target)


def grow_drafter(drafter: DFlashDrafter, extra_layers: int, target) -> DFlashDrafter:
    """A copy of ``drafter`` (fp32, attached to ``target``) with ``extra_layers`` decoder layers
    appended, initialised so that it drafts exactly as before: each new layer starts as a copy of the
    last one with its two output projections (attention ``o_proj``, MLP ``down_proj``) at zero, so it
    adds nothing to the residual stream until training moves them. Continued training can then use
    the extra depth without first losing what the drafter already knows."""
    if isinstance(extra_layers, bool) or not isinstance(extra_layers, int) or extra_layers < 1:
        raise ValueError(f"extra_layers must be a positive int, got {extra_layers!r}.")
    config = dataclasses.replace(drafter.config, num_hidden_layers=drafter.config.num_hidden_layers + extra_layers)
    grown = type(drafter)(config)
    state = drafter.state_dict()
    last = drafter.config.num_hidden_layers - 1
    for new in range(drafter.config.num_hidden_layers, config.num_hidden_layers):
        for key, value in drafter.layers[last].state_dict().items():
            state[f"layers.{new}.{key}"] = value.clone()
        state[f"layers.{new}.self_attn.o_proj.weight"].zero_()
        state[f"layers.{new}.mlp.down_proj.weight"].zero_()
    if drafter.draft_vocab is not None:
        grown.set_draft_vocab(drafter.draft_vocab)
    grown.load_state_dict(state)
    return grown.to(device=drafter.fc.weight.device, dtype=torch.float32).attach(target)


def copy_target_layer(drafter: DFlashDrafter, target, layer_id: int) -> DFlashDrafter:
    """Start ``drafter`` (in place) from target layer ``layer_id`` instead of random weights, so that
    training begins from a layer that already reads the target's hidden states:

    * each decoder layer gets a copy of the target layer's projections, MLP and norms (the drafter's
      own per-head query/key norms, which a Llama layer lacks, keep their initialisation);
    * ``fc`` passes on the features of the deepest tapped layer alone, and ``hidden_norm`` takes the
      copied layer's input norm, so the context keys and values are the ones that layer computes from
      them (pick ``layer_id`` = deepest tapped layer + 1 for the layer that reads them in the target);
    * the final norm is the target's.

    A target layer whose weights do not fit the drafter's (another width or head count, biases the
    drafter has no place for) is refused."""
    layers = decoder_layers(target)
    if isinstance(layer_id, bool) or not isinstance(layer_id, int) or not 0 <= layer_id < len(layers):
        raise ValueError(f"target layer {layer_id!r} does not exist: the target has layers 0..{len(layers) - 1}.")
    source = layers[layer_id].state_dict()
    for layer in drafter.layers:
        own = layer.state_dict()
        misfits = sorted(name for name, value in source.items() if name not in own or own[name].shape != value.shape)
        if misfits:
            raise ValueError(f"target layer {layer_id} does not fit the drafter's decoder layer "
                             f"(no place or another shape for {', '.join(misfits)}); train from a random start.")
        # weights the target layer lacks keep theirs; misfits were refused above
        layer.load_state_dict(source, strict=False)
    hidden, taps = drafter.config.hidden_size, list(drafter.config.target_layer_ids)
    deepest = taps.index(max(taps))
    with torch.no_grad():
        drafter.fc.weight.zero_()  # (H, k*H): the deepest tap's block is the identity
        drafter.fc.weight[:, deepest * hidden:(deepest + 1) * hidden] = torch.eye(hidden)
        drafter.hidden_norm.weight.copy_(source["input_layernorm.weight"])
        drafter.norm.weight.copy_(target.get_decoder().norm.weight)  # Llama-family decoders name it norm
    return drafter


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


# --------------------------------------------------------------------------------------------------
# corpus and split

@dataclass
class TrainSequence:
    """One corpus sequence: content key, token ids, index of the first response token, and for a
    teacher-forced sequence ``labels`` (target argmax for position i+1, -1 where none; else None)."""

    key: str
    ids: torch.Tensor
    response_start: int
    labels: torch.Tensor | None = None
    origin: str = ""  # the corpus folder it came from ("" for in-memory corpora)

    @property
    def num_anchors(self) -> int:
        lo, hi = valid_anchor_range(len(self.ids), self.response_start)
        return hi - lo

    def block_labels(self, anchors: torch.Tensor, depths: int, device=None) -> torch.Tensor:
        """(A, depths) full-vocabulary labels of the blocks at ``anchors``: the text's next tokens, or for
        a teacher-forced sequence the greedy-consistent target argmaxes."""
        ids, anchors = self.ids.to(device), anchors.to(device)
        if self.labels is None:
            return block_labels(ids, anchors, depths)
        return teacher_forced_labels(ids, self.labels.to(device), anchors, depths)


def _corpus_folders(corpus) -> list | None:
    """The folders of ``corpus`` when it names one (str/PathLike) or several (a list of them)."""
    if isinstance(corpus, (str, os.PathLike)):
        return [corpus]
    if isinstance(corpus, (list, tuple)) and corpus and all(isinstance(c, (str, os.PathLike)) for c in corpus):
        return list(corpus)
    return None


def _load_sequences(corpus, include_sampled: bool) -> list[TrainSequence]:
    """Sequences of one or more corpus folders, or of in-memory ``(ids, response_start[, labels])``
    items, deduplicated by content (first occurrence wins)."""
    folders = _corpus_folders(corpus)
    if folders is not None:
        from .data import load_corpus

        items = [(*item, str(folder)) for folder in folders
                 for item in load_corpus(folder, include_sampled=include_sampled, with_labels=True)]
    else:
        items = [(item[0], item[1], item[2] if len(item) > 2 else None, "") for item in corpus]
    out, seen = [], set()
    for ids, start, labels, origin in items:
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
        key = sequence_key(ids)
        if key in seen:
            continue
        seen.add(key)
        if labels is not None:
            labels = torch.as_tensor(labels, dtype=torch.long).reshape(-1)
            if labels.shape != ids.shape:
                raise ValueError(f"labels of shape {tuple(labels.shape)} for ids of shape {tuple(ids.shape)}")
        out.append(TrainSequence(key, ids, int(start), labels, origin))
    return out


def split_corpus(seqs: list[TrainSequence], val_fraction: float, seed: int
                 ) -> tuple[list[TrainSequence], list[TrainSequence], list[TrainSequence]]:
    """(train, held-out evaluated during training, teacher-forced held-out kept for a final report).

    Generated (unlabelled) and teacher-forced (labelled) sequences are split separately by
    :func:`split_sequences`, so each keeps the split it has alone. With both present, the generated
    held-out drives evaluation and the teacher-forced held-out is neither trained on nor used for early
    stopping; with one kind only, its held-out is the evaluation set (the third list is empty)."""
    plain = [s for s in seqs if s.labels is None]
    labelled = [s for s in seqs if s.labels is not None]
    if not labelled or not plain:
        train_seqs, val = split_sequences(seqs, val_fraction, seed)
        return train_seqs, val, []
    _, val = split_sequences(plain, val_fraction, seed)
    _, tf_val = split_sequences(labelled, val_fraction, seed)
    held = {s.key for s in val} | {s.key for s in tf_val}
    if not val:  # too few generated sequences for a held-out set: evaluate on the teacher-forced one
        val, tf_val = tf_val, []
    return [s for s in seqs if s.key not in held], val, tf_val


def split_sequences(seqs: list[TrainSequence], val_fraction: float, seed: int) -> tuple[list[TrainSequence], list[TrainSequence]]:
    """Held-out = sequences whose seeded content hash is below ``val_fraction`` (at least one when
    ``val_fraction > 0`` and there are two or more sequences)."""
    if val_fraction <= 0 or len(seqs) < 2:
        return list(seqs), []

    def u(s):
        return int(hashlib.sha1(f"{seed}:{s.key}".encode()).hexdigest()[:12], 16) / 16 ** 12

    val = [s for s in seqs if u(s) < val_fraction]
    if not val:
        val = [min(seqs, key=u)]
    val_keys = {s.key for s in val}
    return [s for s in seqs if s.key not in val_keys], val


def _corpus_report(train_seqs: list[TrainSequence], val_seqs: list[TrainSequence],
                   tf_val_seqs: list[TrainSequence], held_out_on: str) -> dict:
    """Summary entries on the corpus mix: which held-out set was evaluated, and sizes per source."""
    labelled = [s for s in train_seqs if s.labels is not None]
    report = {"held_out_on": held_out_on,
              "train_teacher_forced_sequences": len(labelled),
              "train_teacher_forced_response_tokens": int(sum(len(s.ids) - s.response_start for s in labelled)),
              "teacher_forced_val_sequences": len(tf_val_seqs)}
    origins: dict[str, dict] = {}
    for part, group in (("train", train_seqs), ("val", val_seqs), ("val", tf_val_seqs)):
        for s in group:
            o = origins.setdefault(s.origin or "<memory>", {"train_sequences": 0, "val_sequences": 0,
                                                             "teacher_forced": s.labels is not None})
            o[f"{part}_sequences"] += 1
    report["sources"] = origins
    return report


def draw_weights(train_seqs: list[TrainSequence], cfg: TrainConfig) -> torch.Tensor:
    """(N,) float64 draw weight of each training sequence; a step draws sequences in proportion to it.

    By default a sequence weighs its number of anchors (times ``teacher_forced_weight`` for a
    teacher-forced one), so every anchor is about equally likely and a larger corpus is drawn more.
    With ``corpus_shares`` each corpus folder gets its share of the draws whatever its size, spread
    over its sequences by their anchors; every folder trained on needs a share."""
    anchors = torch.tensor([s.num_anchors for s in train_seqs], dtype=torch.float64)
    if cfg.corpus_shares is None:
        scale = [cfg.teacher_forced_weight if s.labels is not None else 1.0 for s in train_seqs]
        return anchors * torch.tensor(scale, dtype=torch.float64)
    shares = {os.path.normpath(str(k)): float(v) for k, v in cfg.corpus_shares.items()}
    origins = [os.path.normpath(s.origin) if s.origin else "<memory>" for s in train_seqs]
    missing, unused = sorted(set(origins) - set(shares)), sorted(set(shares) - set(origins))
    if missing or unused:
        raise ValueError(f"corpus_shares must name exactly the corpus folders trained on: no share for "
                         f"{missing or 'none'}; shares for folders without training sequences: {unused or 'none'}.")
    total = dict.fromkeys(shares, 0.0)
    for origin, count in zip(origins, anchors.tolist()):
        total[origin] += count
    share_sum = sum(shares.values())
    return torch.tensor([shares[o] / share_sum * count / total[o] for o, count in zip(origins, anchors.tolist())],
                        dtype=torch.float64)


def draw_shares(train_seqs: list[TrainSequence], weights: torch.Tensor) -> dict[str, float]:
    """Each corpus folder's share of the draws under ``weights`` (the summary reports it)."""
    shares: dict[str, float] = {}
    for s, w in zip(train_seqs, weights.tolist()):
        key = s.origin or "<memory>"
        shares[key] = shares.get(key, 0.0) + w
    total = sum(shares.values()) or 1.0
    return {k: round(v / total, 4) for k, v in shares.items()}


def _val_plan(val: list[TrainSequence], blocks: int, seed: int) -> list[tuple[int, torch.Tensor]]:
    """A fixed set of held-out blocks: ``blocks`` anchors drawn uniformly from all held-out anchors."""
    pool = [(i, p) for i, s in enumerate(val) for p in range(*valid_anchor_range(len(s.ids), s.response_start))]
    g = torch.Generator().manual_seed(seed + 7919)
    pick = torch.randperm(len(pool), generator=g)[:blocks].tolist() if pool else []
    by_seq: dict[int, list[int]] = {}
    for j in pick:
        i, p = pool[j]
        by_seq.setdefault(i, []).append(p)
    return [(i, torch.tensor(sorted(ps), dtype=torch.long)) for i, ps in sorted(by_seq.items())]


# --------------------------------------------------------------------------------------------------
# the run

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
    def __init__(self, drafter, val: list[TrainSequence], plan, cache: FeatureCache, weights: torch.Tensor,
                 chunk: int = 64):
        self.drafter, self.val, self.plan, self.cache = drafter, val, plan, cache
        self.weights, self.chunk = weights, chunk

    @torch.no_grad()
    def __call__(self, vocab_ids: torch.Tensor | None, remap: torch.Tensor | None) -> dict:
        d = self.drafter
        cfg = d.config
        was_training = d.training
        d.eval()
        metrics = ChainMetrics(cfg.num_draft_positions)
        for i, anchors in self.plan:
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
        d.train(was_training)
        return metrics.summary()


def _rng_state(generator: torch.Generator) -> dict:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    # plain tensors and numbers only, so checkpoints load with torch.load(weights_only=True)
    numpy_state = {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "gauss": float(gauss)}
    state = {"sampler": generator.get_state(), "torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": numpy_state}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(generator: torch.Generator, state: dict) -> None:
    generator.set_state(state["sampler"])
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def resolve_autocast(choice: str) -> str:
    """``auto`` -> "bf16" where bf16 matmuls run natively (a CUDA GPU, or a CPU whose oneDNN has bf16
    kernels), else "none": emulated bf16 GEMMs are far slower than fp32 ones (measured 20x and more on an
    AVX2-only CPU). Other choices pass through."""
    if choice != "auto":
        return choice
    return "bf16" if native_bf16_matmuls("cuda" if torch.cuda.is_available() else "cpu") else "none"


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    ckpts = sorted(Path(out_dir, "checkpoints").glob("step-*.pt"))
    return ckpts[-1] if ckpts else None


def drafter_from_checkpoint(path: str | Path) -> DFlashDrafter:
    """The fp32 drafter a training checkpoint (``out_dir/checkpoints/step-*.pt``) holds, unattached.

    ``train`` writes only the best held-out state to ``out_dir/drafter``; this gives any other step, e.g. to
    compare checkpoints by how much they are accepted in trees, which the held-out blocks do not always
    rank the same way."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file (train-drafter writes them to OUT/checkpoints).")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # tensors and plain data: no code runs
    except (RuntimeError, pickle.UnpicklingError, EOFError) as err:  # what torch raises for a file that is not one
        raise ValueError(f"{path} is not a train-drafter checkpoint ({type(err).__name__}: {err}).") from err
    if not isinstance(ckpt, dict) or not {"drafter", "drafter_config"} <= ckpt.keys():
        raise ValueError(f"{path} is not a train-drafter checkpoint (it has no drafter and drafter_config).")
    config = DrafterConfig.from_dict(ckpt["drafter_config"])
    drafter = drafter_class(config)(config)
    drafter.load_state_dict(ckpt["drafter"])
    return drafter.float().eval()


def _acc_text(acc: Sequence[float], n: int = 6) -> str:
    return " ".join(f"{a:.2f}"[1:] if a < 1 else "1.0" for a in list(acc)[:n])


def train(target, drafter: DFlashDrafter | DrafterConfig, corpus, out_dir: str | Path,
          config: TrainConfig | None = None, *, feature_cache: str | Path | None = None, resume: bool = False,
          progress: bool = True, callback: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train ``drafter`` (an instance, trained in place as fp32, or a :class:`DrafterConfig` for a fresh
    one) against the frozen ``target`` on ``corpus`` (a :func:`~hf_treegen.train.data.load_corpus`
    folder, a list of such folders, e.g. generated + teacher-forced, or ``(ids, response_start)`` pairs /
    ``(ids, response_start, labels)`` triples). ``feature_cache``: the feature cache folder (default
    ``$HF_TREEGEN_CACHE/features/<target>-<fingerprint>-L<layers>``). ``resume``: continue from the
    newest checkpoint in ``out_dir/checkpoints`` (an error if there is none). ``callback(step, loss)``
    runs after every step (tests use it to interrupt a run)."""
    cfg = config or TrainConfig(steps=1000)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_setup = time.perf_counter()

    if isinstance(drafter, DrafterConfig):
        drafter = init_drafter(drafter, target, seed=cfg.seed)
    elif not isinstance(drafter, DFlashDrafter):
        raise TypeError(f"drafter must be a DFlashDrafter/DominoDrafter or a DrafterConfig, "
                        f"got {type(drafter).__name__}.")
    dcfg = drafter.config
    dcfg.validate_against(target.config)
    device = target.get_input_embeddings().weight.device
    drafter.to(device=device, dtype=torch.float32).attach(target)

    ckpt_path = latest_checkpoint(out_dir) if resume else None
    if resume and ckpt_path is None:
        raise FileNotFoundError(f"resume=True but {out_dir / 'checkpoints'} holds no step-*.pt checkpoint; "
                                f"start without resume (or pass the output folder of the run to continue).")

    # ---- corpus, split, features
    seqs = _load_sequences(corpus, cfg.include_sampled)
    seqs = [s for s in seqs if len(s.ids) >= 2]
    train_seqs, val_seqs, tf_val_seqs = split_corpus(seqs, cfg.val_fraction, cfg.seed)
    held_out_on = "teacher_forced" if val_seqs and all(s.labels is not None for s in val_seqs) else "generated"
    train_seqs = [s for s in train_seqs if s.num_anchors > 0]
    if not train_seqs:
        raise ValueError("The corpus has no training sequence with a response of 2+ tokens; generate data first "
                         "(hf_treegen.train.data.generate_corpus) or lower val_fraction.")
    # before the (slow) feature extraction, so bad shares fail at once
    sequence_weights = draw_weights(train_seqs, cfg)  # (N,) how often each training sequence is drawn
    if progress and len({s.origin for s in train_seqs}) > 1:
        shares = draw_shares(train_seqs, sequence_weights)
        print("draws per corpus: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()), flush=True)
    if feature_cache is None:
        feature_cache = default_feature_cache_dir(target, dcfg.target_layer_ids)
    t_extract = time.perf_counter()
    with _frozen(target):
        cache = extract_features(target, [s.ids for s in train_seqs + val_seqs + tf_val_seqs], dcfg.target_layer_ids,
                                 feature_cache, batch_tokens=cfg.extract_batch_tokens, progress=progress)
    extract_s = time.perf_counter() - t_extract

    if drafter.draft_vocab is None and cfg.draft_vocab:
        # a run that starts without a draft vocabulary: the most frequent response tokens, plus the EOS ids
        response = [s.ids[s.response_start:] for s in train_seqs]
        drafter.set_draft_vocab(choose_draft_vocab(response, cfg.draft_vocab, always=eos_token_ids(target)))
        dcfg = drafter.config

    depths = dcfg.num_draft_positions
    weights = position_weights(depths, cfg.gamma_for(dcfg.block_size), device=device)
    evaluator = _Evaluator(drafter, val_seqs, _val_plan(val_seqs, cfg.val_blocks, cfg.seed), cache, weights)

    # ---- optimisation state
    optimizer = _optimizer(drafter, cfg)
    schedule = _Schedule(cfg)
    generator = torch.Generator().manual_seed(cfg.seed)
    losses: list[float] = []
    evals: list[dict] = []
    best = {"metric": -math.inf, "step": 0, "state": None, "bad_evals": 0}
    stop_reason = None
    if ckpt_path is not None:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)  # tensors and plain data only: no code runs
        if ckpt["drafter_config"] != dcfg.to_dict():
            raise ValueError(f"{ckpt_path} was trained with another drafter config; resume with the same drafter "
                             f"settings or use a new output folder.")
        drafter.load_state_dict(ckpt["drafter"])
        optimizer.load_state_dict(ckpt["optimizer"])
        schedule.load_state_dict(ckpt["schedule"])
        _set_rng_state(generator, ckpt["rng"])
        losses, evals, best = ckpt["losses"], ckpt["evals"], ckpt["best"]
        # an early-stopped run stays stopped; one that ran out of steps/time continues if the budget grew
        stop_reason = "early_stopping" if ckpt.get("stop_reason") == "early_stopping" else None

    # ---- the training vocabulary (after a resume has restored the drafter's own map)
    vocab_ids = remap = outside = None  # (V',) softmax ids; (V,) id -> softmax column (-1 outside); negatives
    if drafter.draft_vocab is not None:
        # the drafter only ever drafts its draft vocabulary: the softmax runs over exactly that (no
        # negatives: a token outside it is never drafted) and labels outside it (-1) are ignored
        vocab_ids = check_draft_vocab(drafter.draft_vocab, dcfg.vocab_size).to(device)
        remap = draft_vocab_index(vocab_ids, dcfg.vocab_size)
        outside = vocab_ids.new_zeros(0)
    elif cfg.loss_vocab == "corpus":
        vocab_ids = torch.unique(torch.cat([s.ids for s in train_seqs])).to(device)
        remap = draft_vocab_index(vocab_ids, dcfg.vocab_size)
        outside = torch.nonzero(remap < 0).flatten()  # ids never seen in training: sampled as negatives

    amp_dtype = AUTOCAST[cfg.autocast]
    amp = (torch.autocast(device_type=device.type, dtype=amp_dtype) if amp_dtype is not None
           else contextlib.nullcontext())

    def checkpoint(reason: str | None = None) -> None:
        folder = out_dir / "checkpoints"
        folder.mkdir(exist_ok=True)
        state = {"drafter": {k: v.detach().cpu().clone() for k, v in drafter.state_dict().items()},
                 "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(), "rng": _rng_state(generator),
                 "losses": losses, "evals": evals, "best": best, "stop_reason": reason,
                 "drafter_config": dcfg.to_dict(), "train_config": cfg.to_dict()}
        path = folder / CHECKPOINT_PATTERN.format(schedule.step)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        for old in sorted(folder.glob("step-*.pt"))[: -cfg.keep_checkpoints]:
            old.unlink()

    def evaluate() -> dict:
        m = evaluator(vocab_ids, remap) if val_seqs else {}
        m["step"] = schedule.step
        evals.append(m)
        with open(out_dir / "log.jsonl", "a") as fh:
            fh.write(json.dumps({"step": schedule.step, "elapsed_s": round(schedule.elapsed, 1),
                                 "lr": schedule.lr(), "lam": schedule.lam() if dcfg.is_domino else None,
                                 "train_loss": round(float(np.mean(losses[-cfg.eval_every:])), 5) if losses else None,
                                 **m}) + "\n")
        return m

    # ---- the loop
    bar = None
    if progress:
        from tqdm.auto import tqdm

        total = cfg.steps if cfg.steps is not None else int(cfg.time_budget_s)
        bar = tqdm(total=total, initial=schedule.step if cfg.steps is not None else int(schedule.elapsed),
                   unit="step" if cfg.steps is not None else "s", dynamic_ncols=True,
                   desc=f"train {'Domino' if dcfg.is_domino else 'DFlash'}")
    acc_ema = None
    if schedule.step == 0 and val_seqs and not evals:
        evaluate()  # the untrained baseline, step 0
    drafter.train()
    with _frozen(target):
        try:
            while stop_reason is None and not schedule.done():
                t0 = time.perf_counter()
                lr = schedule.lr()
                lam = schedule.lam() if dcfg.is_domino else 0.0
                for group in optimizer.param_groups:
                    group["lr"] = lr
                picks = torch.multinomial(sequence_weights, min(cfg.sequences_per_step, len(train_seqs)),
                                          replacement=False, generator=generator).tolist()
                rows, teachers, labels = [], [], []
                with amp:
                    for i in picks:
                        seq = train_seqs[i]
                        anchors = sample_anchors(len(seq.ids), seq.response_start, cfg.anchors_per_sequence, generator)
                        feats = _features(cache, seq, int(anchors.max()))
                        rows.append(prediction_rows(drafter, forward_blocks(drafter, seq.ids, feats, anchors)))
                        ids, anchors = seq.ids.to(device), anchors.to(device)
                        teachers.append(teacher_tokens(ids, anchors, dcfg.block_size))
                        labels.append(seq.block_labels(anchors, depths, device))
                    rows_t, labels_t = torch.cat(rows), map_labels(torch.cat(labels), remap)
                    # a teacher-forced label outside the training vocabulary (-1) cannot be trained on
                    labels_t = labels_t.masked_fill(labels_t < 0, IGNORE)
                    step_vocab = vocab_ids
                    if vocab_ids is not None and cfg.negatives and outside.numel():
                        # negatives after the vocabulary (labels index the vocabulary part only): without
                        # them the frozen lm_head's unseen rows are never pushed down and steal the
                        # full-vocab argmax at inference
                        pick = torch.randperm(outside.numel(), generator=generator)[: cfg.negatives]
                        step_vocab = torch.cat([vocab_ids, outside[pick.to(device)]])
                    logits = block_logits(drafter, rows_t, torch.cat(teachers) if dcfg.is_domino else None, step_vocab)
                loss, parts = dual_loss(logits, labels_t, weights, lam, dcfg.is_domino)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(drafter.parameters(), cfg.grad_clip)
                optimizer.step()
                schedule.step += 1
                schedule.elapsed += time.perf_counter() - t0
                value = float(loss.detach())
                losses.append(value)

                with torch.no_grad():
                    valid = labels_t != IGNORE
                    correct = (logits.final.argmax(-1) == labels_t) & valid
                    acc = (correct.sum(0) / valid.sum(0).clamp_min(1)).cpu()
                    acc_ema = acc if acc_ema is None else 0.9 * acc_ema + 0.1 * acc

                t1 = time.perf_counter()
                if schedule.step % cfg.eval_every == 0 and val_seqs:
                    m = evaluate()
                    if m["accept_len"] > best["metric"] + cfg.min_delta:
                        best = {"metric": m["accept_len"], "step": schedule.step, "bad_evals": 0,
                                "state": {k: v.detach().cpu().clone() for k, v in drafter.state_dict().items()}}
                    else:
                        best["bad_evals"] += 1
                        if cfg.patience is not None and best["bad_evals"] >= cfg.patience:
                            stop_reason = "early_stopping"
                    if bar is not None:
                        bar.write(f"step {schedule.step}: held-out ({held_out_on}) accept_len {m['accept_len']:.3f} "
                                  f"(best {best['metric']:.3f} @ {best['step']}), acc {_acc_text(m['acc'], 8)}")
                if schedule.step % cfg.checkpoint_every == 0 or stop_reason is not None:
                    checkpoint(stop_reason)
                schedule.elapsed += time.perf_counter() - t1

                if bar is not None:
                    if cfg.steps is not None:
                        bar.update(1)
                    else:
                        bar.update(int(schedule.elapsed) - bar.n)
                    if schedule.step % cfg.log_every == 0 or schedule.step == 1:
                        post = {"loss": f"{np.mean(losses[-cfg.log_every:]):.3f}", "acc": _acc_text(acc_ema)}
                        if cfg.steps is None:
                            post = {"step": schedule.step, **post}
                        if dcfg.is_domino:
                            post["lam"] = f"{lam:.2f}"
                        bar.set_postfix(post, refresh=False)
                if callback is not None:
                    callback(schedule.step, value)
        finally:
            if bar is not None:
                bar.close()
    if stop_reason is None:
        stop_reason = "steps" if cfg.steps is not None and schedule.step >= cfg.steps else "time_budget"
        if val_seqs and (not evals or evals[-1]["step"] != schedule.step):
            m = evaluate()
            if m["accept_len"] > best["metric"] + cfg.min_delta:
                best = {"metric": m["accept_len"], "step": schedule.step, "bad_evals": 0,
                        "state": {k: v.detach().cpu().clone() for k, v in drafter.state_dict().items()}}
        checkpoint(stop_reason)

    # ---- the returned drafter: the best held-out state
    if best["state"] is not None and best["step"] != schedule.step:
        drafter.load_state_dict(best["state"])
    drafter.eval()
    final = evaluator(vocab_ids, remap) if val_seqs else {}
    final_full = None
    mapped = drafter.draft_vocab is not None  # it drafts over vocab_ids only: `final` is what inference sees
    if val_seqs and cfg.full_vocab_final_eval and vocab_ids is not None and not mapped:
        final_full = evaluator(None, None)
    elif val_seqs and (vocab_ids is None or mapped):
        final_full = final
    final_tf = None
    if tf_val_seqs:  # the teacher-forced held-out, once, with the vocabulary inference uses when possible
        tf_eval = _Evaluator(drafter, tf_val_seqs, _val_plan(tf_val_seqs, cfg.val_blocks, cfg.seed), cache, weights)
        final_tf = tf_eval(None, None) if cfg.full_vocab_final_eval or vocab_ids is None else tf_eval(vocab_ids, remap)
        final_tf["vocab"] = "full" if cfg.full_vocab_final_eval or vocab_ids is None else "train"
    drafter.save_pretrained(out_dir / "drafter", dtype=torch.bfloat16)
    seconds = time.perf_counter() - t_setup
    summary = {
        "drafter": dcfg.describe(),
        "drafter_params": sum(p.numel() for p in drafter.parameters()),
        "train_config": cfg.to_dict(),
        "corpus": {"train_sequences": len(train_seqs), "val_sequences": len(val_seqs),
                   "train_response_tokens": int(sum(len(s.ids) - s.response_start for s in train_seqs)),
                   "val_response_tokens": int(sum(len(s.ids) - s.response_start for s in val_seqs)),
                   "loss_vocab_size": int(vocab_ids.numel()) if vocab_ids is not None else dcfg.vocab_size,
                   **_corpus_report(train_seqs, val_seqs, tf_val_seqs, held_out_on),
                   "draw_shares": draw_shares(train_seqs, sequence_weights)},
        "feature_cache": {"dir": str(cache.dir), "sequences": len(cache), "bytes": cache.nbytes(),
                          "extract_seconds_this_call": round(extract_s, 1)},
        "steps": schedule.step, "train_seconds": round(schedule.elapsed, 1), "total_seconds": round(seconds, 1),
        "stop_reason": stop_reason, "best_step": best["step"],
        "final_val": final, "final_val_full_vocab": final_full,
    }
    if final_tf is not None:
        summary["final_val_teacher_forced"] = final_tf
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return TrainResult(drafter=drafter, step=schedule.step, stop_reason=stop_reason, losses=list(losses),
                       evals=list(evals), final=final, final_full_vocab=final_full, out_dir=out_dir,
                       seconds=seconds, summary=summary)
