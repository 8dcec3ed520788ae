"""The DFlash2 drafter: the DFlash backbone with causal grouped convolutions in each layer, and a
candidate selector that picks each draft position given the token chosen before it.

Each decoder layer wraps its attention and its MLP in a dynamic causal convolution over the block's
rows: channel c of row t becomes ``sum_o (base[o, c] + dyn[t, o, g(c)]) * x[t - o, c]`` for offsets
``o < K`` (rows before the block's start count as zero), where ``dyn`` is a per-row, per-group kernel
projected from the layer input. The attention's context keys and values are the fused target features,
unconvolved, as in DFlash.

The selector keeps each position's top ``k`` base logits and rescores candidate ``c`` at position ``d``
after token ``p`` as ``l_d[c] + < P[p] * (W h_d), S[c] >`` with rank-r codebooks ``P`` (predecessor)
and ``S`` (successor): a first-order sequential head, which is what conditional trees score paths with
(:class:`SelectorScorer`).

Tensor names follow the reference release: ``layers.i.attention_conv.{base_kernel, kernel_projection}``,
``layers.i.mlp_conv.*`` and ``candidate_selector.{predecessor_codebook, successor_codebook,
hidden_projection}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import DrafterConfig
from .dflash import DFlashDrafter, DraftBlock, DraftLayer
from .first_order import FirstOrderScorer


class GroupedCausalConv(nn.Module):
    """The dynamic causal convolution DFlash2 puts before and after a sublayer. ``prepare`` convolves the
    sublayer's input with the first kernel and returns the dynamic part of the second, which ``finish``
    applies to the sublayer's output (both dynamic kernels come from the input)."""

    def __init__(self, hidden_size: int, kernel_size: int, group_size: int):
        super().__init__()
        self.kernel_size, self.group_size = kernel_size, group_size
        self.groups = hidden_size // group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel_size, hidden_size))
        self.kernel_projection = nn.Linear(hidden_size, 2 * kernel_size * self.groups, bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (N, B, H) blocks -> (convolved x (N, B, H), the second dynamic kernel (N, B, K, G))."""
        dynamic = self.kernel_projection(x).view(*x.shape[:2], 2, self.kernel_size, self.groups)
        return self.convolve(x, self.base_kernel[0], dynamic[:, :, 0]), dynamic[:, :, 1]

    def finish(self, x: torch.Tensor, dynamic: torch.Tensor) -> torch.Tensor:
        """x (N, B, H), dynamic (N, B, K, G) from ``prepare`` -> (N, B, H)."""
        return self.convolve(x, self.base_kernel[1], dynamic)

    def convolve(self, x: torch.Tensor, base: torch.Tensor, dynamic: torch.Tensor) -> torch.Tensor:
        """x (N, B, H), base (K, H), dynamic (N, B, K, G) -> (N, B, H), causal along B."""
        n, b, h = x.shape
        grouped = x.view(n, b, self.groups, self.group_size)  # (N, B, G, C)
        base = base.to(x.dtype).view(self.kernel_size, self.groups, self.group_size)  # (K, G, C)
        out = torch.zeros_like(grouped)
        for offset in range(min(self.kernel_size, b)):
            # row t reads row t - offset; the first ``offset`` rows read zeros
            shifted = F.pad(grouped[:, : b - offset], (0, 0, 0, 0, offset, 0))  # (N, B, G, C)
            weight = base[offset] + dynamic[:, :, offset, :, None]  # (N, B, G, C)
            out = out + weight * shifted
        return out.view(n, b, h)


class ConvDraftLayer(DraftLayer):
    """A DFlash2 decoder layer: :class:`DraftLayer` with a causal convolution around attention and MLP."""

    def __init__(self, cfg: DrafterConfig, backbone):
        super().__init__(cfg, backbone)
        self.block_size = cfg.block_size
        self.attention_conv = GroupedCausalConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
        self.mlp_conv = GroupedCausalConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)

    def _blocks(self, x: torch.Tensor) -> torch.Tensor:
        """(N*B, H) stacked block rows -> (N, B, H)."""
        return x.view(-1, self.block_size, x.shape[-1])

    def _around(self, conv: GroupedCausalConv, sublayer, x: torch.Tensor) -> torch.Tensor:
        """conv.finish(sublayer(conv.prepare(x))) over stacked blocks: x (N*B, H) -> (N*B, H)."""
        inner, dynamic = conv.prepare(self._blocks(x))
        return conv.finish(self._blocks(sublayer(inner.reshape(x.shape))), dynamic).reshape(x.shape)

    def forward(self, x, ctx_k, ctx_v, cos, sin, attn_mask=None):
        attend = lambda rows: self.self_attn(rows, ctx_k, ctx_v, cos, sin, attn_mask)  # noqa: E731
        x = x + self._around(self.attention_conv, attend, self.input_layernorm(x))
        return x + self._around(self.mlp_conv, self.mlp, self.post_attention_layernorm(x))

    def forward_sessions(self, x, contexts, cos, sin):
        attend = lambda rows: self.self_attn.forward_sessions(rows, contexts, cos, sin)  # noqa: E731
        x = x + self._around(self.attention_conv, attend, self.input_layernorm(x))
        return x + self._around(self.mlp_conv, self.mlp, self.post_attention_layernorm(x))


class CandidateSelector(nn.Module):
    """DFlash2's sequential head: rank-r predecessor and successor codebooks over the target vocabulary
    and a projection of each draft row's hidden state."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.top_k = cfg.selector_top_k
        self.predecessor_codebook = nn.Embedding(cfg.vocab_size, cfg.selector_rank)
        self.successor_codebook = nn.Embedding(cfg.vocab_size, cfg.selector_rank)
        self.hidden_projection = nn.Linear(cfg.hidden_size, cfg.selector_rank, bias=False)


@dataclass
class SelectorBlock(DraftBlock):
    """A DFlash2 draft block: the base logits and hidden rows plus the selector that rescores them."""

    anchor_token: int = 0
    drafter: "DFlash2Drafter | None" = None


class DFlash2Drafter(DFlashDrafter):
    """A DFlash2 drafter (z-lab's second release). Chains follow its candidate selector; the
    conditional strategies grow trees over the selector's path-conditional scores. Loads with
    ``DFlash2Drafter.from_pretrained(path_or_hub_id, target=model)``."""

    family = "dflash2"
    layer_class = ConvDraftLayer

    def __init__(self, config: DrafterConfig, target=None):
        if config.family != "dflash2":
            raise ValueError(f"DFlash2Drafter needs a DFlash2 config (architecture 'DFlash2DraftModel' with "
                             f"conv_* and selector_* sizes), got {config.describe()}.")
        super().__init__(config, target=target)
        self.candidate_selector = CandidateSelector(config)

    @staticmethod
    def remap_checkpoint_names(state: dict) -> dict:
        """Early DFlash2 checkpoints store the codebooks without the ``.weight`` suffix."""
        renamed = {}
        for name, tensor in state.items():
            if name in ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"):
                name += ".weight"
            renamed[name] = tensor
        return renamed

    def make_block(self, hidden: torch.Tensor, anchor_token: int, logits: torch.Tensor | None = None) -> SelectorBlock:
        logits = self.draft_logits(hidden) if logits is None else logits
        return SelectorBlock(logits=logits, hidden=hidden, token_ids=self.draft_vocab, anchor_token=anchor_token,
                             drafter=self)

    @torch.no_grad()
    def released_greedy_chain(self, block: SelectorBlock, length: int | None = None) -> list[int]:
        """The reference rollout, greedy: at each position the best of its top-k candidates after the
        token chosen before it. What ``chain`` drafts with this drafter."""
        scorer = SelectorScorer(block, temperature=1.0, max_depth=length or block.logits.shape[0])
        state, tokens = scorer.root_state, []
        for row in range(scorer.depth):
            best = int(scorer.child_logprobs(row, state)[0].argmax())
            tokens.append(scorer.candidate_ids(row)[best])
            state = scorer.state_of(torch.tensor(tokens[-1:]))
        return tokens


class SelectorScorer(FirstOrderScorer):
    """Per-round tables for scoring the children of any path with DFlash2's candidate selector.

    Row d keeps its top-``k`` base candidates ``C_d`` (k = the config's ``selector_top_k``; tokens outside
    them are never drafted, as in the reference). A node whose token is p scores candidate c as
    ``(l_d[c] + <P[p] * (W h_d), S[c]>) / T``, normalised over ``C_d``. A node's state is its token's
    predecessor code ``P[p]`` (1, r).
    """

    def __init__(self, block: SelectorBlock, temperature: float, max_depth: int):
        selector = block.drafter.candidate_selector
        self.block, self.temperature = block, temperature
        self.depth = min(max_depth, block.logits.shape[0])
        self.m = min(selector.top_k, block.logits.shape[1])
        with torch.no_grad():
            unary, columns = block.logits[: self.depth].float().topk(self.m, dim=-1)  # (D, k) each
            self.cand = block.target_ids(columns)  # (D, k) target ids, by descending base logit
            codes = selector.hidden_projection(block.hidden[: self.depth]).float()  # (D, r)
            successors = selector.successor_codebook(self.cand).float()  # (D, k, r)
            # <P[p] * (W h_d), S[c]> = P[p] . (W h_d * S[c]): one (r, k) matrix per row
            self.pair = (codes[:, :, None] * successors.transpose(1, 2)) / temperature  # (D, r, k)
            self.unary = unary / temperature  # (D, k)
        self.codebook = selector.predecessor_codebook.weight
        self.root_state = self.state_of(torch.tensor([block.anchor_token]))  # (1, r)

    def state_of(self, tokens: torch.Tensor) -> torch.Tensor:
        """(n,) tokens -> their predecessor codes (n, r) in float32."""
        return self.codebook.index_select(0, tokens.to(self.codebook.device)).float()

    @torch.no_grad()
    def child_logprobs(self, row: int, states: torch.Tensor) -> torch.Tensor:
        """states (n, r) of nodes at depth ``row`` -> (n, k) log-probs of the row's candidates."""
        return torch.log_softmax(torch.addmm(self.unary[row], states, self.pair[row]), dim=-1)
