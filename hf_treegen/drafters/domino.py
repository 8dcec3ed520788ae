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

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import weights_key
from .config import DrafterConfig
from .dflash import DFlashDrafter, DraftBlock


class DominoDrafter(DFlashDrafter):
    """A DFlash drafter plus Domino's GRU head, which corrects each depth's draft logits given the tokens
    chosen above it (needed by ``static_corrected``, ``conditional`` and ``cond_adaptive``). Loads
    with ``DominoDrafter.from_pretrained(path_or_hub_id, target=model)``."""

    family = "domino"

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
        self._input_table: tuple | None = None  # (key, (V, 3G) table) see input_table
        self._scoring_tables: tuple | None = None  # (key, ScoringTables) see scoring_tables

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
        return self.input_table()[tokens.to(w_ih.device)].to(w_ih.dtype)

    def input_table(self) -> torch.Tensor:
        """(V, 3G) W_ih E[x] for every token, in float32 at least (tree scoring reads it, see
        scoring_tables), rebuilt when W_ih or the embedding changes."""
        w_ih, embed = self.prefix_gru.weight_ih_l0, self.target_embedding.weight
        dtype = torch.promote_types(w_ih.dtype, torch.float32)
        key = weights_key(w_ih, embed)  # (it includes W_ih's dtype)
        if self._input_table is None or self._input_table[0] != key:
            with torch.no_grad():
                rows = [F.linear(chunk.to(dtype), w_ih.to(dtype)) for chunk in embed.split(8192)]
            self._input_table = (key, torch.cat(rows))
        return self._input_table[1]

    def gru_step(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """One bias-free GRU step: states (n, G), tokens (n,) -> (n, G). PyTorch gate order r, z, n."""
        return gru_combine(self.gru_inputs(tokens), F.linear(states, self.prefix_gru.weight_hh_l0), states)

    def scoring_tables(self) -> "ScoringTables":
        """Weights rearranged for tree scoring, made once per weight version (see ScoringTables), in
        float32 at least: a build runs a few rows per depth through small products, where bf16 costs a
        CPU more than fp32 does, and a round reads only a few rows of the large input table."""
        table, w_hh = self.input_table(), self.prefix_gru.weight_hh_l0
        dtype = table.dtype
        (w1z, w1s), w2 = self.split_w1(), self.w2
        key = weights_key(table, w_hh, w1s, w2)
        if self._scoring_tables is None or self._scoring_tables[0] != key:
            with torch.no_grad():
                tables = ScoringTables(
                    input_table=table,
                    w1s_t=w1s.t().to(dtype).contiguous(),
                    whh_t=w_hh.t().to(dtype).contiguous(),
                    w1z=w1z.to(dtype).contiguous(),
                    w2_padded=torch.cat([w2.float(), w2.new_zeros(1, w2.shape[1], dtype=torch.float32)]),
                    rank=w1s.shape[0],
                )
            self._scoring_tables = (key, tables)
        return self._scoring_tables[1]

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

    def correction(self, hidden: torch.Tensor, states: torch.Tensor,
                   token_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The correction W2 SiLU(W1 [h ; s]): hidden (n, H), states (n, G) -> (n, V) float32, or (n, Vd)
        for the W2 rows of the target ids ``token_ids`` (Vd,) only (a draft vocabulary)."""
        if token_ids is None:
            return self.embed_proj(torch.cat([hidden, states], dim=-1)).float()
        gate = self.embed_proj[1](self.embed_proj[0](torch.cat([hidden, states], dim=-1)))  # (n, r)
        return F.linear(gate, self.w2.index_select(0, token_ids)).float()

    def make_block(self, hidden: torch.Tensor, anchor_token: int, logits: torch.Tensor | None = None) -> "DominoBlock":
        logits = self.draft_logits(hidden) if logits is None else logits
        return DominoBlock(logits=logits, hidden=hidden, token_ids=self.draft_vocab, anchor_token=anchor_token,
                           drafter=self)

    @torch.no_grad()
    def released_greedy_chain(self, block: "DominoBlock", length: int | None = None) -> list[int]:
        """The released Domino rollout, greedy, over the block's whole (draft) vocabulary: the reference
        the builders must match."""
        length = length or block.logits.shape[0]
        state = self.gru_step(self.zero_state(), torch.tensor([block.anchor_token]))
        tokens = []
        for row in range(length):
            logits = block.logits[row]  # (Vd,)
            if row >= self.correction_start:
                logits = logits + self.correction(block.hidden[row : row + 1], state, block.token_ids)[0]
            token = int(block.target_ids(torch.argmax(logits)))
            tokens.append(token)
            state = self.gru_step(state, torch.tensor([token]))
        return tokens


def gru_combine(gi: torch.Tensor, gh: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """The GRU update from its two pre-activations: gi = W_ih x (n, 3G), gh = W_hh s (n, 3G), s (n, G).

    Fused ops (one sigmoid for both gates, addcmul, lerp): tree builders run it once per depth on a
    few rows, where the number of ops is the cost."""
    g = states.shape[-1]
    gates = torch.sigmoid(gi[:, : 2 * g] + gh[:, : 2 * g])  # (n, 2G): reset | update
    candidate = torch.tanh(torch.addcmul(gi[:, 2 * g :], gates[:, :g], gh[:, 2 * g :]))  # (n, G)
    update = gates[:, g:]
    if candidate.dtype != states.dtype:  # mixed precision (training under autocast): let the product promote
        return (1 - update) * candidate + update * states
    return torch.lerp(candidate, states, update)  # (1 - update) * candidate + update * state


ROOT_CACHE_SIZE = 4096  # root states kept per drafter (one (1, G) row per anchor token)


@dataclass
class ScoringTables:
    """Drafter weights laid out for scoring trees (no autograd)."""

    input_table: torch.Tensor  # (V, 3G) W_ih E[x] for every token
    w1s_t: torch.Tensor  # (G, r) W1s^T: a state's input to the correction
    whh_t: torch.Tensor  # (G, 3G) W_hh^T: a state's input to the next GRU step
    w1z: torch.Tensor  # (r, H) the part of W1 acting on hidden rows
    w2_padded: torch.Tensor  # (V + 1, r) float32 W2 with a zero row at index V
    rank: int  # r
    _roots: dict = field(default_factory=dict)
    _vocabulary: dict = field(default_factory=dict)  # (draft vocabulary, temperature) -> (r, Vd+1) W2^T / T

    @property
    def zero_row(self) -> int:
        """Index of W2's zero row in ``w2_padded`` (V): the column of "every other token"."""
        return self.w2_padded.shape[0] - 1

    def root_state(self, anchor_token: int) -> torch.Tensor:
        """(1, G) the GRU state after the anchor token from a zero state (W_hh 0 = 0), per token."""
        state = self._roots.get(anchor_token)
        if state is None:
            gi = self.input_table[anchor_token][None]  # (1, 3G)
            zero = gi.new_zeros(1, gi.shape[1] // 3)
            state = gru_combine(gi, zero.repeat(1, 3), zero)
            if len(self._roots) >= ROOT_CACHE_SIZE:
                self._roots.clear()
            self._roots[anchor_token] = state
        return state

    def vocabulary_w2_t(self, token_ids: torch.Tensor | None, vocab: int, temperature: float) -> torch.Tensor:
        """(r, Vd+1) W2 rows of the whole (draft) vocabulary / T, transposed, then a zero column (the
        empty "rest"): what every row of a whole-vocabulary scoring shares. ``token_ids`` (Vd,) the draft
        vocabulary's target ids, or None for the first ``vocab`` ids."""
        key = (None if token_ids is None else weights_key(token_ids), vocab, temperature)
        table = self._vocabulary.get(key)
        if table is None:
            self._vocabulary.clear()  # one draft vocabulary and temperature at a time
            ids = torch.arange(vocab, device=self.w2_padded.device) if token_ids is None else token_ids
            rows = torch.cat([ids, ids.new_tensor([self.zero_row])])  # (Vd+1,)
            table = (self.w2_padded[rows] / temperature).t().contiguous()  # (r, Vd+1)
            self._vocabulary[key] = table
        return table


@dataclass
class DominoBlock(DraftBlock):
    """A draft block that can also score continuations with the path-dependent correction."""

    anchor_token: int = 0
    drafter: DominoDrafter | None = None


@dataclass
class CandidateRows:
    """Scoring tables of some block rows (leading dim R): their top-M base candidates, plus one extra
    column standing for every other token, so that one softmax over M + 1 entries is normalised over
    the whole vocabulary."""

    base_ext: torch.Tensor  # (R, M+1) tempered base log-probs of the candidates, then of all the rest
    cand: torch.Tensor  # (R, M) candidate target token ids, by descending base logit
    proj: torch.Tensor  # (R, r) W1z h_row: the path-independent part of the correction's input
    w2_ext_t: torch.Tensor  # (R, r, M+1) W2 rows of the candidates / T, transposed; the rest's column is 0

    def at(self, i: int) -> "CandidateRows":
        return CandidateRows(self.base_ext[i], self.cand[i], self.proj[i], self.w2_ext_t[i])


@torch.no_grad()
def candidate_rows(block: DraftBlock, logits: torch.Tensor, hidden: torch.Tensor, m: int, temperature: float,
                   w: "ScoringTables") -> CandidateRows:
    """The scoring tables of R block rows: logits (R, Vd) and hidden (R, H) of ``block`` (or of blocks
    of the same drafter, stacked), their top ``m`` candidates at ``temperature``; ``w`` the drafter's
    :meth:`DominoDrafter.scoring_tables`."""
    # Softmax is shift-invariant, so the candidates can enter as base log-probs rather than logits:
    # score_c = (l_c + corr_c) / T = log p_T(c) + corr_c / T + const, and the rest of the
    # vocabulary enters as one entry log p_T(rest).
    tempered = logits if temperature == 1.0 else logits / temperature
    log_probs = torch.log_softmax(tempered, dim=-1)  # (R, Vd): one fused pass
    proj = F.linear(hidden.to(w.w1z.dtype), w.w1z)  # (R, r)
    if m >= logits.shape[1]:
        return whole_vocabulary_rows(block, log_probs, proj, temperature, w)
    base_c, columns = log_probs.topk(m, dim=-1)  # (R, M)
    cand = block.target_ids(columns)  # (R, M) target ids
    rest = torch.log1p(-base_c.exp().sum(-1, keepdim=True).clamp_(max=1.0))  # (R, 1)
    cand_ext = torch.cat([cand, cand.new_full((cand.shape[0], 1), w.zero_row)], dim=1)  # (R, M+1)
    w2_ext_t = w.w2_padded[cand_ext].transpose(1, 2)  # (R, r, M+1)
    if temperature != 1.0:
        w2_ext_t = w2_ext_t / temperature
    return CandidateRows(torch.cat([base_c, rest], dim=1), cand, proj, w2_ext_t)


def whole_vocabulary_rows(block: DraftBlock, log_probs: torch.Tensor, proj: torch.Tensor, temperature: float,
                          w: "ScoringTables") -> CandidateRows:
    """Every (draft) vocabulary token a candidate, in column order: the released softmax over the whole
    vocabulary. The rows share one W2 table (no per-row gather) and their "rest" is empty.
    log_probs (R, Vd) tempered base log-probs, proj (R, r)."""
    rows, vocab = log_probs.shape
    token_ids = block.token_ids
    cand = torch.arange(vocab, device=log_probs.device) if token_ids is None else token_ids  # (Vd,)
    rest = log_probs.new_full((rows, 1), float("-inf"))
    w2_ext_t = w.vocabulary_w2_t(token_ids, vocab, temperature)  # (r, Vd+1)
    return CandidateRows(torch.cat([log_probs, rest], dim=1), cand.expand(rows, -1), proj,
                         w2_ext_t.expand(rows, -1, -1))


class CorrectionScorer:
    """Per-round tables for scoring children of any path with the Domino correction.

    Row d (predicting depth d+1) keeps its top-M base candidates ``C_d``. A node with GRU state s
    scores candidate c as ``(l_d[c] + W2[c] . SiLU(W1z h_d + W1s s)) / T``; the non-candidates keep
    their base logits, so the log-probabilities are normalised over the whole vocabulary. Two
    consequences: with M = V this is the released full-vocabulary softmax, and with the correction
    zeroed it is exactly the marginal (DDTree) distribution for any M.

    With a draft vocabulary the block's logits have Vd columns: "the vocabulary" above is the draft
    vocabulary (tokens outside it are never drafted), and candidates are mapped to target ids once, when
    a row's tables are made, so W2 rows, GRU inputs and tree tokens are all indexed by target id.

    A row's tables cost a pass over the vocabulary, so they are made when a builder first reaches that
    depth, a few rows at a time (``row(d)``): a bushy tree of depth 2 never pays for rows 5 to 8.
    ``tables()`` makes all of them at once, for builders with fixed shapes.
    """

    def __init__(self, block: DominoBlock, top_m: int, temperature: float, max_depth: int):
        d = block.drafter
        self.drafter, self.block, self.temperature = d, block, temperature
        self.depth = min(max_depth, block.logits.shape[0])
        self.logits, self.hidden = block.logits[: self.depth], block.hidden[: self.depth]  # (D, Vd), (D, H)
        self.m = min(top_m, block.logits.shape[1])
        self.weights = d.scoring_tables()
        self.correction_start = d.correction_start
        self.root_state = self.weights.root_state(block.anchor_token)  # (1, G)
        self._rows: list[CandidateRows | None] = [None] * self.depth
        self._made = 0  # rows [0, _made) have tables
        self._all: CandidateRows | None = None
        self._cand_lists: dict[int, list[int]] = {}

    def _candidate_rows(self, rows: slice) -> CandidateRows:
        return candidate_rows(self.block, self.logits[rows], self.hidden[rows], self.m, self.temperature, self.weights)

    def candidate_ids(self, r: int) -> list[int]:
        """Row ``r``'s candidate token ids as a Python list (for builders that select on the host)."""
        key = -1 if self.m == self.logits.shape[1] else r  # scored over the whole vocabulary: one list
        ids = self._cand_lists.get(key)
        if ids is None:
            ids = self._cand_lists[key] = self.row(r).cand.tolist()
        return ids

    def row(self, r: int) -> CandidateRows:
        """Row ``r``'s tables (leading dim dropped), made on first use: rows come in chunks that double
        (2, 2, 4, ...) because one pass over several rows costs less than several passes."""
        table = self._rows[r]
        if table is None:
            if self._all is not None:
                table = self._rows[r] = self._all.at(r)
                return table
            start = self._made
            end = min(self.depth, max(r + 1, start + max(2, start)))
            chunk = self._candidate_rows(slice(start, end))
            for i in range(end - start):
                self._rows[start + i] = chunk.at(i)
            self._made = end
            table = self._rows[r]
        return table

    def tables(self) -> CandidateRows:
        """Every row's tables, stacked (D, ...)."""
        if self._all is None:
            self._all = self._candidate_rows(slice(0, self.depth))
            self._rows = [None] * self.depth
        return self._all

    # ------------------------------------------------------------------ scoring children
    @torch.no_grad()
    def child_logprobs(self, row: int, states: torch.Tensor) -> torch.Tensor:
        """states (n, G) of nodes at depth ``row`` -> (n, M) log-probs of the row's candidates (the
        softmax runs over M + 1 entries, the rest of the vocabulary last, and drops that one)."""
        t = self.row(row)
        if row < self.correction_start:
            log_probs = t.base_ext.expand(states.shape[0], -1)  # already normalised
        else:
            gate = F.silu(torch.addmm(t.proj, states, self.weights.w1s_t).float())  # (n, r)
            log_probs = torch.log_softmax(torch.addmm(t.base_ext, gate, t.w2_ext_t), dim=-1)  # (n, M+1)
        return log_probs[:, : self.m]

    def top_children(self, row: int, states: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best children of each node: (n, k) log-probs and (n, k) candidate indices, best first."""
        return self.child_logprobs(row, states).topk(k, dim=-1)

    @torch.no_grad()
    def advance(self, parents: torch.Tensor, owner: list[int], tokens: torch.Tensor) -> torch.Tensor:
        """Child states (c, G) from the parents' states (n, G), each child's parent row ``owner`` (c,)
        and the child tokens (c,). W_hh is applied once per distinct parent: a depth-synchronous
        builder grows only some of the nodes it scored."""
        distinct = sorted(set(owner))
        if len(distinct) == parents.shape[0]:
            states = parents
        else:
            states = parents[torch.tensor(distinct, device=parents.device)]
        position = {p: i for i, p in enumerate(distinct)}
        pick = torch.tensor([position[p] for p in owner], device=parents.device)
        hidden_maps = states @ self.weights.whh_t  # (d, 3G)
        return gru_combine(self.weights.input_table[tokens], hidden_maps[pick], states[pick])

    @torch.no_grad()
    def child_states(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """One GRU step on the scoring tables: states (n, G), tokens (n,) -> (n, G), as ``gru_step``."""
        w = self.weights
        return gru_combine(w.input_table[tokens.to(states.device)], states @ w.whh_t, states)
