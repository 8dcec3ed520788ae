"""Training sequences: loaded from corpus folders, split into train and held-out, drawn by weight.

* :func:`load_sequences` reads one or more corpus folders (or in-memory items) into
  :class:`TrainSequence` objects, deduplicated by content.
* :func:`split_corpus` puts a sequence in the held-out split when a seeded hash of its content falls
  below ``val_fraction``, so a growing corpus keeps its split; generated and teacher-forced sequences
  are split separately.
* :func:`draw_weights` gives each training sequence its share of a step's draws (by anchors, or by
  fixed per-corpus shares), and :func:`val_plan` fixes the held-out blocks evaluated during a run.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import torch

from .blocks import block_labels, teacher_forced_labels, valid_anchor_range
from .config import TrainConfig
from .features import sequence_key


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


def corpus_folders(corpus) -> list | None:
    """The folders of ``corpus`` when it names one (str/PathLike) or several (a list of them)."""
    if isinstance(corpus, (str, os.PathLike)):
        return [corpus]
    if isinstance(corpus, (list, tuple)) and corpus and all(isinstance(c, (str, os.PathLike)) for c in corpus):
        return list(corpus)
    return None


def load_sequences(corpus, include_sampled: bool) -> list[TrainSequence]:
    """Sequences of one or more corpus folders, or of in-memory ``(ids, response_start[, labels])``
    items, deduplicated by content (first occurrence wins)."""
    folders = corpus_folders(corpus)
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


def corpus_report(train_seqs: list[TrainSequence], val_seqs: list[TrainSequence],
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


def val_plan(val: list[TrainSequence], blocks: int, seed: int) -> list[tuple[int, torch.Tensor]]:
    """A fixed set of held-out blocks: ``blocks`` anchors drawn uniformly from all held-out anchors."""
    pool = [(i, p) for i, s in enumerate(val) for p in range(*valid_anchor_range(len(s.ids), s.response_start))]
    g = torch.Generator().manual_seed(seed + 7919)
    pick = torch.randperm(len(pool), generator=g)[:blocks].tolist() if pool else []
    by_seq: dict[int, list[int]] = {}
    for j in pick:
        i, p = pool[j]
        by_seq.setdefault(i, []).append(p)
    return [(i, torch.tensor(sorted(ps), dtype=torch.long)) for i, ps in sorted(by_seq.items())]
