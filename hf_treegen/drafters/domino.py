"""The Domino drafter: the DFlash backbone plus a GRU logit correction along the realised path.

With ``shift_label=True`` block row i predicts the token at depth i+1 (all B rows draft). A bias-free
GRU over the target's input embeddings of the realised tokens gives a causal state

    s_0 = GRU(0, E[anchor]),   s_i = GRU(s_{i-1}, E[x_i])

and row i's logits become ``l_i + W2 . SiLU(W1 [h_i ; s_i])`` for i >= pure_draft_prefix_len (the
first rows stay uncorrected). ``W1 = [W1z | W1s]`` splits, so ``W1z h_i`` is path-independent and only
``W1s s`` depends on the path: that is what lets a tree score every node with its own path's state.

Tensor names follow the release: ``prefix_gru.weight_ih_l0`` (3G, H), ``prefix_gru.weight_hh_l0``
(3G, G), ``embed_proj.0.weight`` (r, H+G), ``embed_proj.2.weight`` (V, r); legacy checkpoints nest them
under ``logit_head.``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import DrafterConfig
from .dflash import DFlashDrafter, DraftBlock


class DominoDrafter(DFlashDrafter):
    is_domino_class = True

    def __init__(self, config: DrafterConfig, target=None):
        if not config.is_domino:
            raise ValueError(
                "DominoDrafter needs a config with projector_type='domino' (plus emb_dim and gru_hidden_dim); "
                "for a plain DFlash config use hf_treegen.DFlashDrafter."
            )
        super().__init__(config, target=target)
        h, g, r = config.hidden_size, config.gru_hidden_dim, config.emb_dim
        self.prefix_gru = nn.GRU(h, g, num_layers=1, bias=False, batch_first=True)
        self.embed_proj = nn.Sequential(nn.Linear(h + g, r, bias=False), nn.SiLU(),
                                        nn.Linear(r, config.vocab_size, bias=False))
        self._input_table: tuple | None = None  # (key, (V, 3G) table) see gru_inputs

    @staticmethod
    def remap_checkpoint_names(state: dict) -> dict:
        """Accept the legacy ``logit_head.`` prefix of early Domino checkpoints."""
        return {k.removeprefix("logit_head."): v for k, v in state.items()}

    # ------------------------------------------------------------------------------ head maths
    @property
    def correction_start(self) -> int:
        """First block row that is corrected (rows before it use the base logits only)."""
        return self.config.pure_draft_prefix_len

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(n,) token ids -> (n, H) target input embeddings in the drafter dtype."""
        return self.target_embedding(tokens.to(self.fc.weight.device)).to(self.fc.weight.dtype)

    def gru_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        """(n,) tokens -> (n, 3G) input-side gate pre-activations W_ih E[x].

        Outside autograd they come from a (V, 3G) table computed once per weight version (as the
        released runner does): a row lookup instead of a (3G x H) product per tree node.
        """
        w_ih = self.prefix_gru.weight_ih_l0
        if torch.is_grad_enabled() and w_ih.requires_grad:
            return F.linear(self.embed(tokens), w_ih)
        embed = self.target_embedding.weight
        key = (w_ih.data_ptr(), w_ih._version, embed.data_ptr(), embed._version, w_ih.dtype)
        if self._input_table is None or self._input_table[0] != key:
            with torch.no_grad():
                rows = [F.linear(chunk.to(w_ih.dtype), w_ih) for chunk in embed.split(8192)]
            self._input_table = (key, torch.cat(rows))  # (V, 3G)
        return self._input_table[1][tokens.to(w_ih.device)]

    def gru_step(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """One bias-free GRU step: states (n, G), tokens (n,) -> (n, G). PyTorch gate order r, z, n."""
        gi = self.gru_inputs(tokens)  # (n, 3G)
        gh = F.linear(states, self.prefix_gru.weight_hh_l0)  # (n, 3G)
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        reset, update = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        candidate = torch.tanh(i_n + reset * h_n)
        return (1 - update) * candidate + update * states

    def zero_state(self, n: int = 1) -> torch.Tensor:
        return self.fc.weight.new_zeros(n, self.config.gru_hidden_dim)

    def split_w1(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W1 (r, H+G) -> W1z (r, H) acting on hidden rows, W1s (r, G) acting on GRU states."""
        w1 = self.embed_proj[0].weight
        return w1[:, : self.config.hidden_size], w1[:, self.config.hidden_size :]

    @property
    def w2(self) -> torch.Tensor:
        """(V, r) low-rank vocabulary projection of the correction."""
        return self.embed_proj[2].weight

    def correction(self, hidden: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary correction W2 SiLU(W1 [h ; s]): hidden (n, H), states (n, G) -> (n, V) float32."""
        return self.embed_proj(torch.cat([hidden, states], dim=-1)).float()

    def make_block(self, hidden: torch.Tensor, anchor_token: int) -> "DominoBlock":
        return DominoBlock(logits=self.draft_logits(hidden), hidden=hidden, anchor_token=anchor_token, drafter=self)

    @torch.no_grad()
    def released_greedy_chain(self, block: "DominoBlock", length: int | None = None) -> list[int]:
        """The released Domino rollout, greedy, full vocabulary: the reference the builders must match."""
        length = length or block.logits.shape[0]
        state = self.gru_step(self.zero_state(), torch.tensor([block.anchor_token]))
        tokens = []
        for row in range(length):
            logits = block.logits[row]
            if row >= self.correction_start:
                logits = logits + self.correction(block.hidden[row : row + 1], state)[0]
            token = int(torch.argmax(logits))
            tokens.append(token)
            state = self.gru_step(state, torch.tensor([token]))
        return tokens


@dataclass
class DominoBlock(DraftBlock):
    """A draft block that can also score continuations with the path-dependent correction."""

    anchor_token: int = 0
    drafter: DominoDrafter | None = None


class CorrectionScorer:
    """Per-round tables for scoring children of any path with the Domino correction.

    Row d (predicting depth d+1) keeps its top-M base candidates ``C_d``. A node with GRU state s
    scores candidate c as ``(l_d[c] + W2[c] . SiLU(W1z h_d + W1s s)) / T``; the non-candidates keep
    their base logits, so the log-probabilities are normalised over the whole vocabulary. Two
    consequences: with M = V this is the released full-vocabulary softmax, and with the correction
    zeroed it is exactly the marginal (DDTree) distribution for any M.
    """

    def __init__(self, block: DominoBlock, top_m: int, temperature: float, max_depth: int):
        d = block.drafter
        self.drafter, self.temperature = d, temperature
        self.depth = min(max_depth, block.logits.shape[0])
        base = block.logits[: self.depth]  # (D, V) float32
        m = min(top_m, base.shape[1])
        w1z, self.w1s = d.split_w1()
        with torch.no_grad():
            self.base_c, self.cand = base.topk(m, dim=-1)  # (D, M) logits and token ids, descending
            self.rest_lse = self._rest_logsumexp(base, self.base_c, temperature)  # (D,)
            self.proj = F.linear(block.hidden[: self.depth], w1z)  # (D, r) path-independent part of W1
            self.w2_c = d.w2[self.cand].float()  # (D, M, r)
            self.root_state = d.gru_step(d.zero_state(), torch.tensor([block.anchor_token]))  # (1, G)

    @staticmethod
    def _rest_logsumexp(base: torch.Tensor, base_c: torch.Tensor, temperature: float) -> torch.Tensor:
        """(D,) log of the tempered base mass outside the candidates: log(sum_all - sum_candidates)."""
        if base_c.shape[1] == base.shape[1]:
            return base.new_full((base.shape[0],), float("-inf"))
        lse_all = torch.logsumexp(base / temperature, dim=-1)
        lse_c = torch.logsumexp(base_c / temperature, dim=-1)
        return lse_all + torch.log1p(-torch.exp((lse_c - lse_all).clamp(max=0.0)))

    @torch.no_grad()
    def child_logprobs(self, row: int, states: torch.Tensor) -> torch.Tensor:
        """states (n, G) of nodes at depth ``row`` -> (n, M) log-probs of the row's candidates."""
        scores = self.base_c[row].expand(states.shape[0], -1)  # (n, M)
        if row >= self.drafter.correction_start:
            gate = F.silu(self.proj[row] + F.linear(states, self.w1s)).float()  # (n, r)
            scores = scores + F.linear(gate, self.w2_c[row])  # (n, M)
        scores = scores / self.temperature
        total = torch.logaddexp(torch.logsumexp(scores, dim=-1), self.rest_lse[row])  # (n,)
        return scores - total[:, None]

    @torch.no_grad()
    def child_states(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.drafter.gru_step(states, tokens)
