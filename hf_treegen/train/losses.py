"""Losses and held-out metrics for drafter distillation (DFlash, Domino and DSpark).

* Logits come from the target's frozen lm_head. ``vocab_ids`` restricts them (and the Domino W2 rows)
  to a draft vocabulary, e.g. the token ids that occur in the training corpus: on CPU this makes the
  head 10x+ cheaper. It changes only the training softmax; the saved drafter keeps the full lm_head
  and the full W2 (rows outside the vocabulary stay at their initial value, zero for W2), and the
  final evaluation of :func:`~hf_treegen.train.trainer.train` uses the full vocabulary.
* Position weights ``w_d = exp(-(d-1)/gamma)`` for depth d = 1..L (DFlash).
* Domino: the GRU is teacher-forced on the realised block tokens (``s_0 = GRU(0, E[x_p])``,
  ``s_i = GRU(s_{i-1}, E[x_{p+i}])``); prediction row i >= ``pure_draft_prefix_len`` adds
  ``W2 SiLU(W1 [h_i ; s_i])``, the maths of :meth:`DominoDrafter.released_greedy_chain`. The dual loss
  is ``(1-lam) CE(base + correction) + lam CE(base)``.
* DSpark: row i's logits add the Markov bias ``W2 g(W1[x_{p+i}])`` of the realised token before it
  (teacher-forced like Domino's GRU); the loss is ``CE(base + bias)``.
* :class:`ChainMetrics`: per-depth top-1 accuracy ``acc_d``, the conditional acceptance ``cond_acc_d``
  (depth d right given depths 1..d-1 right) and the expected accepted chain length
  ``sum_k prod_{j<=k} cond_acc_j``. It is teacher-forced, and exact for greedy chain acceptance on the
  corpus text: on an accepted prefix the drafts equal the realised tokens. Blocks cut by the sequence
  end count at the depths they have. ``accept_len_product`` is the same sum over the marginal
  ``acc_j`` (an independence approximation, reported for comparison).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ..drafters.vocab import draft_vocab_index

IGNORE = -100


def position_weights(depths: int, gamma: float, device=None) -> torch.Tensor:
    """(L,) ``exp(-(d-1)/gamma)`` for d = 1..L."""
    d = torch.arange(depths, dtype=torch.float32, device=device)
    return torch.exp(-d / float(gamma))


def teacher_states(drafter, tokens: torch.Tensor) -> torch.Tensor:
    """(A, B) realised tokens -> (A, B, G) GRU states; state i has consumed tokens 0..i."""
    state = drafter.zero_state(tokens.shape[0])
    states = []
    for i in range(tokens.shape[1]):
        state = drafter.gru_step(state, tokens[:, i])
        states.append(state)
    return torch.stack(states, dim=1)


def head_logits(drafter, rows: torch.Tensor, vocab_ids: torch.Tensor | None) -> torch.Tensor:
    """(..., H) -> (..., V') base logits through the target lm_head (rows ``vocab_ids`` only if given)."""
    head = drafter.target_lm_head
    weight = head.weight.detach()
    bias = None if getattr(head, "bias", None) is None else head.bias.detach()
    if vocab_ids is not None:
        weight = weight.index_select(0, vocab_ids)
        bias = None if bias is None else bias.index_select(0, vocab_ids)
    # a target split over devices may keep its head elsewhere: the rows go to it, the logits come back
    return F.linear(rows.to(weight.device, weight.dtype), weight, bias).to(rows.device)


def correction_logits(drafter, rows: torch.Tensor, states: torch.Tensor,
                      vocab_ids: torch.Tensor | None) -> torch.Tensor:
    """``W2 SiLU(W1 [h ; s])`` for (..., H) rows and (..., G) states -> (..., V')."""
    if vocab_ids is None:
        return drafter.embed_proj(torch.cat([rows, states], dim=-1))
    gate = drafter.embed_proj[1](drafter.embed_proj[0](torch.cat([rows, states], dim=-1)))
    return F.linear(gate, drafter.w2.index_select(0, vocab_ids))


def markov_bias(drafter, rows: torch.Tensor, previous: torch.Tensor, vocab_ids: torch.Tensor | None) -> torch.Tensor:
    """DSpark's ``W2 g(W1[previous])`` for (A, L, H) rows after the (A, L) tokens before them -> (A, L, V'):
    the maths of :meth:`DSparkDrafter.released_greedy_chain`."""
    head = drafter.markov_head
    codes = head.codes(rows.reshape(-1, rows.shape[-1]), previous.reshape(-1))  # (A*L, r)
    w2 = head.markov_w2.weight  # (Vd, r): rows over the draft vocabulary where the drafter has one
    if vocab_ids is not None:
        columns = vocab_ids if drafter.draft_vocab is None else \
            draft_vocab_index(drafter.draft_vocab, drafter.config.vocab_size)[vocab_ids]
        w2 = w2.index_select(0, columns)
    return F.linear(codes, w2).view(*rows.shape[:-1], -1)


@dataclass
class BlockLogits:
    base: torch.Tensor  # (A, L, V') float32
    final: torch.Tensor  # (A, L, V') float32: base + correction (Domino) or Markov bias (DSpark), else base


def block_logits(drafter, rows: torch.Tensor, teacher: torch.Tensor | None,
                 vocab_ids: torch.Tensor | None = None) -> BlockLogits:
    """Prediction rows (A, L, H) (+ the realised block tokens (A, B) for Domino) -> logits."""
    base = head_logits(drafter, rows, vocab_ids).float()
    if getattr(drafter, "family", None) == "dspark":
        previous = teacher[:, : rows.shape[1]]  # row i follows the realised token x_{p+i}
        return BlockLogits(base, base + markov_bias(drafter, rows, previous, vocab_ids).float())
    if not getattr(drafter.config, "is_domino", False):
        return BlockLogits(base, base)
    start = drafter.correction_start
    states = teacher_states(drafter, teacher)[:, : rows.shape[1]]  # prediction row i uses s_i
    corr = correction_logits(drafter, rows[:, start:], states[:, start:], vocab_ids).float()
    final = torch.cat([base[:, :start], base[:, start:] + corr], dim=1)
    return BlockLogits(base, final)


def weighted_ce(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean of ``w_d * CE`` over valid (block, depth) pairs, normalised by the sum of their weights."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE,
                         reduction="none").view(labels.shape)
    return _weighted_mean(ce, labels, weights)


def _weighted_mean(ce: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(A, L) per-position losses -> their mean weighted by ``w_d`` over the positions with a label."""
    w = weights[None, :].expand_as(labels) * (labels != IGNORE)
    return (ce * w).sum() / w.sum().clamp_min(1e-12)


@dataclass
class SoftTargets:
    """The target's top-k distribution at each drafted position, as soft labels (see
    :func:`~hf_treegen.train.target_topk.soft_targets`)."""

    columns: torch.Tensor  # (A, L, k) long: softmax column of each kept token
    probs: torch.Tensor  # (A, L, k) float: its probability, renormalised over the kept tokens (0: none)
    weight: float  # share of the soft term in the loss: (1 - weight) hard CE + weight soft CE


def weighted_soft_ce(logits: torch.Tensor, soft: SoftTargets, labels: torch.Tensor, weights: torch.Tensor
                     ) -> torch.Tensor:
    """``-sum_j q_j log p(column_j)`` per (block, depth), weighted and normalised like
    :func:`weighted_ce` over the positions that have a hard label (the soft labels are the target's view
    of the same positions, so a position excluded from the hard loss is excluded here too)."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (A, L, V')
    ce = -(soft.probs.to(logp.device) * logp.gather(-1, soft.columns.to(logp.device))).sum(-1)  # (A, L)
    return _weighted_mean(ce, labels, weights)


def distill_ce(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor,
               soft: SoftTargets | None) -> torch.Tensor:
    """Hard-label CE, mixed with the soft-label CE when ``soft`` is given."""
    hard = weighted_ce(logits, labels, weights)
    if soft is None or soft.weight <= 0:
        return hard
    return (1.0 - soft.weight) * hard + soft.weight * weighted_soft_ce(logits, soft, labels, weights)


def dual_loss(logits: BlockLogits, labels: torch.Tensor, weights: torch.Tensor, lam: float, is_domino: bool,
              soft: SoftTargets | None = None):
    """Domino: ``(1-lam) CE(final) + lam CE(base)``; DFlash: ``CE(base)``; DSpark: ``CE(final)`` (the
    Markov bias trains with the backbone from the start). Each CE mixes in the soft labels when ``soft``
    is given (:func:`distill_ce`). Returns (loss, parts)."""
    if not is_domino and logits.final is not logits.base:  # DSpark
        final = distill_ce(logits.final, labels, weights, soft)
        with torch.no_grad():  # reported only
            base = distill_ce(logits.base, labels, weights, soft)
        return final, {"base": float(base), "final": float(final.detach())}
    base = distill_ce(logits.base, labels, weights, soft)
    if not is_domino:
        return base, {"base": float(base.detach())}
    if lam >= 1.0:
        final = distill_ce(logits.final.detach(), labels, weights, soft)
        return base, {"base": float(base.detach()), "final": float(final)}
    final = distill_ce(logits.final, labels, weights, soft)
    loss = (1.0 - lam) * final + lam * base if lam > 0 else final
    return loss, {"base": float(base.detach()), "final": float(final.detach())}


def map_labels(labels: torch.Tensor, remap: torch.Tensor | None) -> torch.Tensor:
    """Full-vocab labels -> indices into the draft vocabulary (-1 = outside it: never predicted)."""
    if remap is None:
        return labels
    valid = labels != IGNORE
    out = torch.full_like(labels, IGNORE)
    out[valid] = remap[labels[valid]]
    return out


class ChainMetrics:
    """Accumulates top-1 correctness per depth over blocks; see :meth:`summary`."""

    def __init__(self, depths: int):
        self.depths = depths
        self.valid = torch.zeros(depths, dtype=torch.float64)
        self.correct = torch.zeros(depths, dtype=torch.float64)
        self.run = torch.zeros(depths, dtype=torch.float64)  # depth d valid and depths 1..d right
        self.reached = torch.zeros(depths, dtype=torch.float64)  # depth d valid and depths 1..d-1 right
        self.loss_sum = 0.0
        self.loss_n = 0

    def add(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """logits (A, L, V'), labels (A, L) in the same index space (IGNORE = no label; -1 = unreachable)."""
        valid = labels != IGNORE
        correct = (logits.argmax(dim=-1) == labels) & valid
        run = torch.cumprod(correct.to(torch.int64), dim=1).bool() & valid
        reached = torch.cat([torch.ones_like(run[:, :1]), run[:, :-1]], dim=1) & valid
        self.valid += valid.sum(0).double().cpu()
        self.correct += correct.sum(0).double().cpu()
        self.run += run.sum(0).double().cpu()
        self.reached += reached.sum(0).double().cpu()

    def add_loss(self, value: float, n: int = 1) -> None:
        self.loss_sum += float(value) * n
        self.loss_n += n

    def combine(self, total: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace the counts by ``total(counts)``, e.g. their sum over the processes that each scored a
        part of the held-out blocks (the counts are whole numbers in float64, so the sum is exact)."""
        depths = self.depths
        counts = torch.cat([self.valid, self.correct, self.run, self.reached,
                            torch.tensor([self.loss_sum, self.loss_n], dtype=torch.float64)])  # (4D+2,)
        counts = total(counts)
        self.valid, self.correct, self.run, self.reached = counts[: 4 * depths].view(4, depths).clone()
        self.loss_sum, self.loss_n = float(counts[-2]), int(counts[-1])

    def summary(self) -> dict:
        acc = (self.correct / self.valid.clamp_min(1)).tolist()
        # P(depth d right | depths 1..d-1 right), among blocks whose depth d has a label
        cond = (self.run / self.reached.clamp_min(1)).tolist()
        accept = sum(math.prod(cond[: k + 1]) for k in range(self.depths))
        product = sum(math.prod(acc[: k + 1]) for k in range(self.depths))
        out = {
            "acc": [round(a, 4) for a in acc],
            "cond_acc": [round(c, 4) for c in cond],
            "accept_len": round(accept, 4),  # expected accepted drafts per round: sum_k prod_{j<=k} cond_acc_j
            "accept_len_product": round(product, 4),  # sum_k prod_{j<=k} acc_j (independence approximation)
            "tau": round(1.0 + accept, 4),  # + the bonus token
            "blocks": int(self.valid[0]),
        }
        if self.loss_n:
            out["loss"] = round(self.loss_sum / self.loss_n, 5)
        return out
