"""The released DFlash/DFlash2/Domino behaviour: one path. DFlash takes the draft argmax per depth;
Domino follows its corrected argmax, DFlash2 its candidate selector and DSpark its Markov-biased argmax,
each step conditioned on the token(s) chosen before it.

The rollout runs for several blocks at once (:meth:`ChainBuilder.build_all`): a server drafting for R
requests pays one small op per depth for all of them instead of R (at these sizes the number of ops,
not their size, is the cost)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..drafters.dflash import DraftBlock
from ..drafters.dflash2 import SelectorBlock, SelectorScorer
from ..drafters.dspark import MarkovBlock, MarkovScorer
from ..drafters.domino import DominoBlock, candidate_rows, gru_combine
from ..tree import DraftTree
from .base import TreeBuilder


def corrected_argmax_chains(blocks: list[DominoBlock], top_m: int, temperature: float,
                            length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Domino's greedy rollout, ``length`` tokens deep, for R blocks of one drafter: per depth the
    corrected argmax over each row's top-M candidates (the first of equal maxima) and its corrected
    log-prob at ``temperature``. Returns tokens (R, D) target ids and log-probs (R, D)."""
    drafter, count = blocks[0].drafter, len(blocks)
    w = drafter.scoring_tables()
    logits = torch.cat([b.logits[:length] for b in blocks])  # (R*D, Vd)
    hidden = torch.cat([b.hidden[:length] for b in blocks])  # (R*D, H)
    m = min(top_m, logits.shape[1])
    rows = candidate_rows(blocks[0], logits, hidden, m, temperature, w)  # leading dim R*D
    base_ext = rows.base_ext.view(count, length, m + 1)  # (R, D, M+1) log-probs, the rest last
    cand = rows.cand.view(count, length, m)  # (R, D, M)
    proj = rows.proj.view(count, length, -1)  # (R, D, r)
    w2_ext_t = rows.w2_ext_t.view(count, length, *rows.w2_ext_t.shape[1:])  # (R, D, r, M+1)
    states = torch.cat([w.root_state(b.anchor_token) for b in blocks])  # (R, G)
    tokens, logps = [], []
    for row in range(length):
        if row < drafter.correction_start:
            log_probs = base_ext[:, row]  # (R, M+1) already normalised
        else:
            gate = F.silu(torch.addmm(proj[:, row], states, w.w1s_t).float())  # (R, r)
            corrected = base_ext[:, row, None] + torch.bmm(gate[:, None], w2_ext_t[:, row])  # (R, 1, M+1)
            log_probs = torch.log_softmax(corrected[:, 0], dim=-1)
        logp, best = log_probs[:, :m].max(dim=-1)  # (R,)
        token = cand[:, row].gather(1, best[:, None])[:, 0]  # (R,)
        tokens.append(token)
        logps.append(logp)
        if row + 1 < length:
            states = gru_combine(w.input_table[token], states @ w.whh_t, states)
    return torch.stack(tokens, dim=1), torch.stack(logps, dim=1)


def argmax_chains(blocks: list[DraftBlock], temperature: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """DFlash's rollout for R blocks: each depth's draft argmax and its log-prob at ``temperature``.
    Returns tokens (R, D) target ids and log-probs (R, D)."""
    logits = torch.stack([b.logits[:length] for b in blocks]).float()  # (R, D, Vd)
    logp, columns = torch.log_softmax(logits / temperature, dim=-1).max(dim=-1)  # (R, D)
    return blocks[0].target_ids(columns), logp


def head_chains(blocks: list, temperature: float, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rollout of a first-order head (DFlash2's selector, DSpark's Markov head over its whole draft
    vocabulary) for R blocks: per depth the best token after the one chosen before it, and its log-prob at
    ``temperature``. Returns tokens (R, D) target ids and log-probs (R, D)."""
    tokens, logps = [], []
    for block in blocks:
        if isinstance(block, SelectorBlock):
            scorer = SelectorScorer(block, temperature, length)
        else:
            scorer = MarkovScorer(block, block.logits.shape[1], temperature, length)
        state, path, scores = scorer.root_state, [], []
        for row in range(length):
            logp, best = scorer.child_logprobs(row, state)[0].max(dim=-1)
            path.append(scorer.candidate_ids(row)[int(best)])
            scores.append(float(logp))
            state = scorer.child_states(state, torch.tensor(path[-1:]))
        tokens.append(path)
        logps.append(scores)
    return torch.tensor(tokens), torch.tensor(logps)


class ChainBuilder(TreeBuilder):
    name = "chain"

    def __call__(self, block, root_token: int) -> DraftTree:
        return self.build_all([block], [root_token])[0]

    def build_all(self, blocks: list, root_tokens: list[int]) -> list[DraftTree]:
        s = self.settings
        length = min(s.max_depth, s.budget, *(b.logits.shape[0] for b in blocks))
        if all(isinstance(b, DominoBlock) for b in blocks):
            tokens, logps = corrected_argmax_chains(blocks, s.top_m, s.temperature, length)
        elif all(isinstance(b, (SelectorBlock, MarkovBlock)) for b in blocks):
            tokens, logps = head_chains(blocks, s.temperature, length)
        else:
            tokens, logps = argmax_chains(blocks, s.temperature, length)
        scores = logps.cumsum(dim=1).tolist()  # (R, D) log path probabilities
        return [DraftTree.chain(root, path, path_scores)
                for root, path, path_scores in zip(root_tokens, tokens.tolist(), scores)]
