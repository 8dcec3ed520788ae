"""The DSpark drafter: the DFlash backbone (every block row drafting, like Domino's ``shift_label``) plus
a low-rank Markov head that biases each row's logits by the token chosen before it, and a confidence
head that predicts whether each row is accepted.

Row k's logits over the draft vocabulary are ``U_k + W2 g_k(e)`` with ``e = W1[p]`` the rank-r code of the
previous token p (the anchor for row 0) and ``g_k(e) = e`` ("vanilla") or ``sigmoid(G [h_k ; e] + b) * e``
("gated"). The head is first order: a path's score at depth k depends on the path only through its last
token, which is what conditional trees need (:class:`MarkovScorer`).

Tensor names follow the speculators release: ``markov_head.markov_w1`` (V, r) indexed by target id,
``markov_head.markov_w2`` (Vd, r) over the draft vocabulary, ``markov_head.gate_proj`` (gated only),
``confidence_head.proj`` (1, H [+ r]).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import DrafterConfig
from .dflash import DFlashDrafter, DraftBlock
from .first_order import FirstOrderScorer


class MarkovHead(nn.Module):
    """DSpark's sequential logit bias ``W2 g(W1[prev])`` (see the module docstring)."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        draft_vocab = cfg.draft_vocab_size or cfg.vocab_size
        self.head_type = cfg.markov_head_type
        self.markov_w1 = nn.Embedding(cfg.vocab_size, cfg.markov_rank)
        self.markov_w2 = nn.Linear(cfg.markov_rank, draft_vocab, bias=False)
        if self.head_type == "gated":
            self.gate_proj = nn.Linear(cfg.hidden_size + cfg.markov_rank, cfg.markov_rank)

    def codes(self, hidden: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        """hidden (n, H) rows, previous (n,) target ids -> the rank-r inputs of W2 (n, r)."""
        e = self.markov_w1(previous.to(self.markov_w1.weight.device))  # (n, r)
        if self.head_type == "gated":
            return torch.sigmoid(self.gate_proj(torch.cat([hidden.to(e.dtype), e], dim=-1))) * e
        return e


class ConfidenceHead(nn.Module):
    """A per-row logit of the probability that the row's draft is accepted given its prefix was."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        extra = cfg.markov_rank if cfg.confidence_head_with_markov else 0
        self.proj = nn.Linear(cfg.hidden_size + extra, 1)


@dataclass
class MarkovBlock(DraftBlock):
    """A DSpark draft block: base logits and hidden rows plus the Markov head that biases them."""

    anchor_token: int = 0
    drafter: "DSparkDrafter | None" = None


class DSparkDrafter(DFlashDrafter):
    """A DSpark drafter (the speculators ``dspark`` type). Chains follow the Markov-biased argmax; the
    conditional strategies grow trees over the biased, path-conditional scores."""

    family = "dspark"

    def __init__(self, config: DrafterConfig, target=None):
        if config.family != "dspark":
            raise ValueError(f"DSparkDrafter needs a DSpark config (markov_rank, markov_head_type), got "
                             f"{config.describe()}.")
        super().__init__(config, target=target)
        self.markov_head = MarkovHead(config)
        self.confidence_head = ConfidenceHead(config) if config.confidence_head else None

    def set_draft_vocab(self, ids) -> "DSparkDrafter":
        """As for DFlash, and the Markov head's W2 keeps the rows of the new draft vocabulary (which must
        lie inside the one it was built for)."""
        vocab = self.config.vocab_size
        had = torch.arange(vocab) if self.draft_vocab is None else self.draft_vocab.cpu()
        super().set_draft_vocab(ids)
        wants = torch.arange(vocab) if self.draft_vocab is None else self.draft_vocab.cpu()
        row_of = torch.full((vocab,), -1, dtype=torch.long)
        row_of[had] = torch.arange(had.numel())
        rows = row_of[wants]
        if (rows < 0).any():
            missing = wants[rows < 0][:8].tolist()
            super().set_draft_vocab(None if had.numel() == vocab else had)  # leave the drafter as it was
            raise ValueError(f"The Markov head has no W2 row for target ids {missing}...: a DSpark drafter's draft "
                             f"vocabulary can only shrink.")
        w2 = self.markov_head.markov_w2
        w2.weight = nn.Parameter(w2.weight.detach()[rows.to(w2.weight.device)].clone())
        w2.out_features = rows.numel()
        return self

    def make_block(self, hidden: torch.Tensor, anchor_token: int, logits: torch.Tensor | None = None) -> MarkovBlock:
        logits = self.draft_logits(hidden) if logits is None else logits
        return MarkovBlock(logits=logits, hidden=hidden, token_ids=self.draft_vocab, anchor_token=anchor_token,
                           drafter=self)

    @torch.no_grad()
    def released_greedy_chain(self, block: MarkovBlock, length: int | None = None) -> list[int]:
        """The reference rollout, greedy over the whole draft vocabulary: at row k the argmax of
        ``U_k + bias(previous token)``, the anchor before row 0."""
        head, tokens, previous = self.markov_head, [], block.anchor_token
        for row in range(length or block.logits.shape[0]):
            code = head.codes(block.hidden[row : row + 1], torch.tensor([previous]))  # (1, r)
            scores = block.logits[row].float() + head.markov_w2(code)[0].float()  # (Vd,)
            previous = int(block.target_ids(scores.argmax()))
            tokens.append(previous)
        return tokens


class MarkovScorer(FirstOrderScorer):
    """Per-round tables for scoring the children of any path with DSpark's Markov head.

    Row d keeps its top-M base candidates; a node whose token is p scores candidate c as
    ``(U_d[c] + W2[c] . g_d(W1[p])) / T`` and every other draft-vocabulary token with its base logit, so
    the softmax runs over the whole draft vocabulary (one extra column holds the rest's mass). With M = Vd
    it is exactly the head's law. A node's state is its token id (1,).
    """

    def __init__(self, block: MarkovBlock, top_m: int, temperature: float, max_depth: int):
        head = block.drafter.markov_head
        self.block, self.head, self.temperature = block, head, temperature
        self.depth = min(max_depth, block.logits.shape[0])
        self.m = min(top_m, block.logits.shape[1])
        with torch.no_grad():
            log_probs = torch.log_softmax(block.logits[: self.depth].float() / temperature, dim=-1)  # (D, Vd)
            if self.m == log_probs.shape[1]:  # every column a candidate (chains): no sort over the vocabulary
                base = log_probs
                columns = torch.arange(self.m, device=base.device).expand(self.depth, -1)  # (D, Vd)
                rest = base.new_full((self.depth, 1), float("-inf"))
            else:
                base, columns = log_probs.topk(self.m, dim=-1)  # (D, M) each
                rest = torch.log1p(-base.exp().sum(-1, keepdim=True).clamp(max=1.0))  # (D, 1)
            self.base_ext = torch.cat([base, rest], dim=1)  # (D, M+1)
            self.cand = block.target_ids(columns)  # (D, M) target ids
            self.w2 = head.markov_w2.weight[columns].float() / temperature  # (D, M, r)
        self.root_state = self.state_of(torch.tensor([block.anchor_token]))

    def state_of(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.reshape(-1)

    @torch.no_grad()
    def child_logprobs(self, row: int, states: torch.Tensor) -> torch.Tensor:
        """states (n,) token ids of nodes at depth ``row`` -> (n, M) log-probs of the row's candidates."""
        hidden = self.block.hidden[row : row + 1].expand(states.shape[0], -1)  # (n, H)
        codes = self.head.codes(hidden, states).float()  # (n, r)
        bias = codes @ self.w2[row].T  # (n, M)
        scores = self.base_ext[row].expand(states.shape[0], -1).clone()  # (n, M+1)
        scores[:, : self.m] += bias
        return torch.log_softmax(scores, dim=-1)[:, : self.m]


def confidence_logits(block: MarkovBlock, path: list[int]) -> torch.Tensor:
    """The confidence head's logits (len(path),) for a drafted path (target ids), row by row: row k reads
    its hidden row and, with ``confidence_head_with_markov``, the code of the token before it."""
    drafter = block.drafter
    rows = block.hidden[: len(path)]  # (k, H)
    inputs = rows
    if drafter.config.confidence_head_with_markov:
        previous = torch.tensor([block.anchor_token, *path[:-1]])
        inputs = torch.cat([rows, drafter.markov_head.markov_w1(previous.to(rows.device)).to(rows.dtype)], dim=-1)
    return F.linear(inputs, drafter.confidence_head.proj.weight, drafter.confidence_head.proj.bias)[:, 0]
