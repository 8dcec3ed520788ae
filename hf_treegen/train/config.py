"""The settings of one training run (:class:`TrainConfig`), checked when they are made."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..ops import native_bf16_matmuls

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}


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
    soft_labels: float = 0.0  # share of the target's top-k distribution (soft labels) in each CE; 0 = hard only
    soft_label_topk: int = 16  # tokens per position kept from the target's distribution
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
        if not 0 <= self.soft_labels <= 1:
            bad(f"soft_labels must be in [0, 1] (the soft-label share of the loss), got {self.soft_labels!r}.")
        if isinstance(self.soft_label_topk, bool) or not isinstance(self.soft_label_topk, int) \
                or self.soft_label_topk < 1:
            bad(f"soft_label_topk must be a positive int, got {self.soft_label_topk!r}.")
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


def resolve_autocast(choice: str) -> str:
    """``auto`` -> "bf16" where bf16 matmuls run natively (a CUDA GPU, or a CPU whose oneDNN has bf16
    kernels), else "none": emulated bf16 GEMMs are far slower than fp32 ones (measured 20x and more on an
    AVX2-only CPU). Other choices pass through."""
    if choice != "auto":
        return choice
    return "bf16" if native_bf16_matmuls("cuda" if torch.cuda.is_available() else "cpu") else "none"
