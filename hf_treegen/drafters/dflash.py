"""The DFlash block-diffusion drafter, written from the released description.

One draft forward per round: the block ``[anchor, MASK, ..., MASK]`` (length B) at positions
``start .. start+B-1`` runs through a few Qwen3-style decoder layers whose attention also sees the
fused target features of every committed position as extra keys/values ("KV injection"). The block
attends bidirectionally; the target's embedding and lm_head are borrowed, never stored.

Parameter names follow the released z-lab layout (``fc``, ``hidden_norm``, ``layers.i.self_attn.*``,
``layers.i.mlp.*``, ``norm``), so :meth:`DFlashDrafter.from_pretrained` loads those checkpoints by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding, rotate_half

from ..acceptance import DepthCalibration
from ..datastore import TokenDatastore
from ..ops import linear_rows, weights_key
from ..target.packed import packed_matmul
from .config import DrafterConfig
from .vocab import check_draft_vocab

# The attention kernels the drafter may use on CUDA: all but cuDNN's. The drafter's key length grows
# every round, and cuDNN's attention pays a set-up per new shape: on an H200 in bf16 a calibration's
# draft rounds took 41 ms each with it and 2.5 ms without (a 135M target's whole step is about 20 ms).
CUDA_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (heads, T, D); cos/sin (T, D)."""
    return x * cos[None] + rotate_half(x) * sin[None]


class DraftAttention(nn.Module):
    """Queries from the block; keys/values from [target context ; block] through the same projections."""

    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)

    def queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (B, H) -> rotated queries (heads, B, D)."""
        b = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(b, self.num_heads, self.head_dim)).transpose(0, 1)
        return _rope(q, cos, sin)

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x (T, H) -> rotated keys and values, each (kv_heads, T, D)."""
        t = x.shape[0]
        k = self.k_norm(self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)).transpose(0, 1)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim).transpose(0, 1)
        return _rope(k, cos, sin), v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask=None) -> torch.Tensor:
        """q (heads, B, D), k/v (kv_heads, S, D) -> (B, H)."""
        return self.o_proj(self.mix(q, k, v, attn_mask))

    @staticmethod
    def mix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask=None) -> torch.Tensor:
        """Attention before the output projection: q (heads, B, D), k/v (kv_heads, S, D) -> (B, heads*D).
        Grouped-query attention without repeating the keys per query head (4-D inputs also let the CPU
        use its fused attention kernel)."""
        with sdpa_kernel(CUDA_ATTENTION_BACKENDS) if q.is_cuda else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=attn_mask, enable_gqa=True)[0]
        return out.transpose(0, 1).reshape(q.shape[1], -1)  # out (heads, B, D)

    def forward(self, x, ctx_k, ctx_v, cos, sin, attn_mask=None):
        """x (B, H) block rows; ctx_k/ctx_v (kv_heads, T, D) -> (B, H).

        ``attn_mask`` (B, T+B) bool is only used in training; inference attends to everything.
        """
        k, v = self.keys_values(x, cos, sin)
        return self.attend(self.queries(x, cos, sin), torch.cat([ctx_k, k], dim=1), torch.cat([ctx_v, v], dim=1),
                           attn_mask)

    def forward_sessions(self, x, contexts: list["ContextKV"], cos, sin):
        """Inference for several sessions at once: x (R*B, H) holds R blocks of B rows, block i drafting
        under ``contexts[i]``; cos/sin (R*B, D) -> (R*B, H). The projections run once over every row (on
        a CPU each reads its weight once, whatever the row count); attention runs per block, its keys and
        values written after its session's context instead of concatenated to a copy of it."""
        q, (k, v) = self.queries(x, cos, sin), self.keys_values(x, cos, sin)  # (heads|kv_heads, R*B, D)
        rows = x.shape[0] // len(contexts)
        mixed = []
        for i, context in enumerate(contexts):
            block = slice(i * rows, (i + 1) * rows)
            keys, values = context.with_block(k[:, block], v[:, block])  # (kv_heads, T_i+B, D) each
            mixed.append(self.mix(q[:, block], keys, values))  # (B, heads*D)
        return self.o_proj(torch.cat(mixed))


class DraftLayer(nn.Module):
    """One Qwen3-style decoder layer of the drafter. Its rows come in whole blocks of
    ``cfg.block_size`` (several blocks stacked), which DFlash2's per-block convolutions rely on."""

    def __init__(self, cfg: DrafterConfig, backbone: Qwen3Config):
        super().__init__()
        self.self_attn = DraftAttention(cfg)
        self.mlp = Qwen3MLP(backbone)
        self.input_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, x, ctx_k, ctx_v, cos, sin, attn_mask=None):
        x = x + self.self_attn(self.input_layernorm(x), ctx_k, ctx_v, cos, sin, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_sessions(self, x, contexts: list["ContextKV"], cos, sin):
        """x (R*B, H): R blocks, block i under contexts[i] (see DraftAttention.forward_sessions)."""
        x = x + self.self_attn.forward_sessions(self.input_layernorm(x), contexts, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


@dataclass
class DraftBlock:
    """What one draft forward gives the tree builders."""

    logits: torch.Tensor  # (L, Vd) float32 draft logits; row d-1 predicts the token at depth d
    hidden: torch.Tensor  # (L, H) final-norm hidden rows behind those logits
    token_ids: torch.Tensor | None = None  # (Vd,) target id of each logits column; None: column j is id j

    def target_ids(self, columns: torch.Tensor) -> torch.Tensor:
        """Logits columns (any shape) -> target token ids: the one place the draft vocabulary is applied."""
        return columns if self.token_ids is None else self.token_ids[columns]


class DFlashDrafter(nn.Module):
    """DFlash drafter. ``target`` lends its input embedding and lm_head (it is not stored).

    ``draft_vocab`` (read-only; change it with :meth:`set_draft_vocab`) is the drafter's draft
    vocabulary: None for the full target vocabulary, else a sorted (Vd,) int64 buffer of target ids, and
    the draft head then scores only those lm_head rows (column j = target id ``draft_vocab[j]``).

    ``datastore`` (a :class:`~hf_treegen.datastore.TokenDatastore` or None) holds text the target wrote
    before; tree decoding's lookup grafts what followed the current context there onto each tree. It is
    saved beside the weights (``datastore.safetensors``) and loaded with them.

    ``depth_calibration`` (a :class:`~hf_treegen.acceptance.DepthCalibration` or None) is what the target
    accepted of this drafter's trees, per depth. None (the default): each ``generate()`` call starts a
    fresh one, so two identical calls build identical trees. Set one to let every call start from, and
    add to, what the earlier calls learned (the cost-aware strategies re-rank nodes by it).
    """

    family = "dflash"  # the DrafterConfig.family this class builds (checkpoints must match)
    layer_class = DraftLayer

    def __init__(self, config: DrafterConfig, target=None):
        super().__init__()
        if type(self) is DFlashDrafter and config.family != "dflash":
            wanted = {"domino": "DominoDrafter", "dflash2": "DFlash2Drafter", "dspark": "DSparkDrafter"}[config.family]
            raise ValueError(f"This DrafterConfig describes a {config.family} drafter ({config.describe()}); "
                             f"build it with hf_treegen.{wanted}, not DFlashDrafter.")
        self.config = config
        self.backbone_config = Qwen3Config(
            hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
            num_attention_heads=config.num_attention_heads, num_key_value_heads=config.num_key_value_heads,
            head_dim=config.head_dim, rms_norm_eps=config.rms_norm_eps, vocab_size=config.vocab_size,
            max_position_embeddings=config.max_position_embeddings, num_hidden_layers=config.num_hidden_layers,
            rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        )
        self.fc = nn.Linear(config.feature_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(self.layer_class(config, self.backbone_config)
                                    for _ in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # (Vd,) target ids; built from a config that names a draft_vocab_size, it is unset (-1) until the
        # checkpoint's map is loaded into it (see loading.load_drafter)
        size = config.draft_vocab_size
        self.register_buffer("draft_vocab", None if size is None else torch.full((size,), -1, dtype=torch.long))
        self._draft_head: tuple | None = None  # (key, (Vd, H) lm_head rows, (Vd,) bias or None, packed), see _gathered_head
        self._rope_table: tuple | None = None  # (key, cos, sin) each (N, D) for positions 0..N-1, see rope
        self._borrowed: tuple = ()
        self.target_config = None  # the attached target's config
        # text the target wrote before, which lookup copies continuations from (saved beside the weights)
        self.datastore: TokenDatastore | None = None
        self.depth_calibration: DepthCalibration | None = None  # shared by calls only where the caller sets one
        if target is not None:
            self.attach(target)

    def __setattr__(self, name, value):
        if name == "draft_vocab":
            raise AttributeError("draft_vocab is read-only: use set_draft_vocab(ids), or set_draft_vocab(None) "
                                 "for the full vocabulary.")
        super().__setattr__(name, value)

    # ------------------------------------------------------------------------------ the target
    def attach(self, target) -> "DFlashDrafter":
        """Validate against ``target`` and borrow its embedding and lm_head."""
        self.config.validate_against(target.config)
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        if embed is None or head is None:
            raise ValueError("The target must expose get_input_embeddings() and get_output_embeddings().")
        self._borrowed = (embed, head)
        self.target_config = target.config  # read when saving in a layout that names the target
        return self

    def is_attached_to(self, target) -> bool:
        """Whether this drafter borrows ``target``'s own embedding and LM head right now."""
        return bool(self._borrowed) and self._borrowed[0] is target.get_input_embeddings() \
            and self._borrowed[1] is target.get_output_embeddings()

    @property
    def target_embedding(self) -> nn.Module:
        self._require_target()
        return self._borrowed[0]

    @property
    def target_lm_head(self) -> nn.Module:
        self._require_target()
        return self._borrowed[1]

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the drafter computes in (its weights' dtype; inputs from the target are cast to it)."""
        return self.fc.weight.dtype

    def _require_target(self) -> None:
        if not self._borrowed:
            raise RuntimeError("This drafter has no target yet: pass target= when building it, or call attach(target).")

    # ------------------------------------------------------------------------------ draft vocabulary
    def set_draft_vocab(self, ids) -> "DFlashDrafter":
        """Draft over ``ids`` only (1-D distinct target token ids, stored sorted), or over the full
        vocabulary with None. The map is saved with the drafter and its size goes into the config."""
        if ids is None:
            vocab = None
        else:
            vocab = check_draft_vocab(ids, self.config.vocab_size).to(self.fc.weight.device)
        self.register_buffer("draft_vocab", vocab)  # the same call replaces an existing buffer
        self.config = dataclasses.replace(self.config, draft_vocab_size=None if vocab is None else vocab.numel())
        self._draft_head = None
        return self

    def draft_head(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The lm_head rows the drafter scores, (Vd, H), and their bias (Vd,) or None.

        Without a draft vocabulary these are the target's own tensors. With one, the rows are gathered
        once, in the drafter's own dtype, and kept until the head weight (data_ptr, in-place version,
        dtype), the map or the drafter's dtype changes."""
        head = self.target_lm_head
        if not isinstance(head, nn.Linear):
            raise TypeError(f"Drafting needs the target's output embedding to be an nn.Linear, got {type(head).__name__}.")
        vocab = self.draft_vocab
        if vocab is None:
            return head.weight, head.bias
        return self._gathered_head()[1:3]

    def _gathered_head(self) -> tuple:
        """(key, rows (Vd, H), bias (Vd,) or None, the packed product or None) for the draft vocabulary."""
        head, vocab = self.target_lm_head, self.draft_vocab
        w, dtype = head.weight, self.dtype
        key = (weights_key(w, vocab), dtype)
        if self._draft_head is None or self._draft_head[0] != key:
            ids = check_draft_vocab(vocab, self.config.vocab_size).to(w.device)
            with torch.no_grad():
                # a copy anyway, so in the dtype the drafter computes in: a bf16 drafter beside an fp32
                # target reads half the bytes each round (the head is the largest matrix it reads)
                rows = w.index_select(0, ids).to(dtype).contiguous()  # (Vd, H)
                bias = None if head.bias is None else head.bias.index_select(0, ids).to(dtype)
            # on a CPU, oneDNN's packed kernel scores a block's 8 rows ~4x faster than BLAS does
            self._draft_head = (key, rows, bias, packed_matmul(rows, bias))
        return self._draft_head

    # ------------------------------------------------------------------------------ forward pieces
    def rope(self, positions: torch.Tensor):
        """positions (T,) -> cos, sin each (T, D) in the drafter dtype.

        Rows of a table for positions 0..N-1 (N doubles as needed), kept per (dtype, device), computed
        as Qwen3's rotary embedding computes them, from float32 inverse frequencies made from the config.
        Not from the module's buffer: ``.to(torch.bfloat16)`` rounds buffers too, and a rounded frequency
        puts the angle at position p off by p times the rounding."""
        anchor = self.fc.weight
        need = int(positions.max()) + 1 if positions.numel() else 1
        key = (anchor.dtype, anchor.device)
        table = self._rope_table
        if table is None or table[0] != key or table[1].shape[0] < need:
            size = max(need, 2 * table[1].shape[0] if table is not None and table[0] == key else 0, 256)
            inv_freq, _ = Qwen3RotaryEmbedding.compute_default_rope_parameters(self.backbone_config)  # (D/2,) fp32
            freqs = torch.arange(size, device=anchor.device, dtype=torch.float32)[:, None] * inv_freq.to(anchor.device)
            angles = torch.cat([freqs, freqs], dim=-1)  # (N, D)
            table = self._rope_table = (key, angles.cos().to(anchor.dtype), angles.sin().to(anchor.dtype))
        positions = positions.to(anchor.device)
        return table[1].index_select(0, positions), table[2].index_select(0, positions)

    def embed_block(self, ids: torch.Tensor) -> torch.Tensor:
        """Block token ids (N,) -> their target input embeddings (N, H) in the drafter dtype, scaled by
        the config's ``input_embedding_scale``."""
        x = self.target_embedding(ids).to(self.fc.weight.dtype)
        scale = self.config.input_embedding_scale
        return x if scale == 1.0 else x * scale

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """features (T, k*H) concatenated target layer outputs -> fused context (T, H)."""
        return self.hidden_norm(self.fc(features.to(self.fc.weight.dtype)))

    def block_ids(self, anchor_token: int) -> torch.Tensor:
        ids = torch.full((self.config.block_size,), self.config.mask_token_id, dtype=torch.long)
        ids[0] = anchor_token
        return ids.to(self.fc.weight.device)

    def prediction_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, H) -> (L, H): with shift_label row i predicts token i+1; otherwise mask row j predicts itself."""
        return hidden if self.config.shift_label else hidden[1:]

    def draft_logits(self, rows: torch.Tensor) -> torch.Tensor:
        """(L, H) -> (L, Vd) float32 base logits of the draft vocabulary (Vd = V without one) through
        the target's lm_head rows."""
        weight, bias = self.draft_head()  # (Vd, H), (Vd,) or None
        packed = None if self.draft_vocab is None else self._gathered_head()[3]
        if packed is not None and not rows.requires_grad:  # (the packed kernel has no backward)
            return self.shape_logits(packed(rows.to(weight.dtype)).float())
        return self.shape_logits(linear_rows(rows, weight, bias))

    def shape_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The config's output multiplier and soft cap on raw head logits (identity by default)."""
        cfg = self.config
        if cfg.output_multiplier != 1.0:
            logits = logits * cfg.output_multiplier
        cap = cfg.final_logit_softcapping
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def make_block(self, hidden: torch.Tensor, anchor_token: int, logits: torch.Tensor | None = None) -> DraftBlock:
        """Final-norm prediction rows (L, H) -> what the builders consume; ``logits`` (L, Vd) when the
        caller has scored the rows already (several blocks through the head at once)."""
        logits = self.draft_logits(hidden) if logits is None else logits
        return DraftBlock(logits=logits, hidden=hidden, token_ids=self.draft_vocab)

    def new_session(self) -> "DraftSession":
        return DraftSession(self)

    # ------------------------------------------------------------------------------ checkpoints
    @staticmethod
    def remap_checkpoint_names(state: dict) -> dict:
        """Checkpoint tensor names -> this class's names (the released DFlash names are already ours)."""
        return state

    @classmethod
    def from_pretrained(cls, path, target, dtype: torch.dtype | None = None, **hub_kwargs):
        """The drafter saved at ``path`` (a folder or Hub id), attached to ``target`` and on its device.
        ``dtype``: what the drafter computes in; by default :func:`~hf_treegen.default_draft_dtype`
        (bf16 beside an fp32 target on a CPU with native bf16 matmuls, else the target's dtype)."""
        from .loading import load_drafter

        return load_drafter(cls, path, target, dtype=dtype, **hub_kwargs)

    def save_pretrained(self, path, dtype: torch.dtype | None = None, format: str = "zlab") -> None:
        """Write the drafter to ``path``: ``format="zlab"`` (the released DFlash/Domino layout, read by
        z-lab's reference and by hf_treegen) or ``"speculators"`` (read by vLLM, SGLang and speculators)."""
        from .loading import save_drafter

        save_drafter(self, path, dtype=dtype, format=format)


class ContextKV:
    """One drafter layer's keys and values of the committed positions, (kv_heads, capacity, D) each.

    Rows ``[0, length)`` hold the context; at least ``room`` rows after them stay free, so a draft block
    is written there instead of concatenated to a copy of the context. Capacity doubles when it runs out.
    """

    def __init__(self, room: int):
        self.room = room
        self.keys: torch.Tensor | None = None  # (kv_heads, capacity, D)
        self.values: torch.Tensor | None = None
        self.length = 0

    def _reserve(self, rows: int, like: torch.Tensor) -> None:
        """Make room for ``rows`` rows in total (``like`` (kv_heads, *, D) gives dtype and device)."""
        capacity = 0 if self.keys is None else self.keys.shape[1]
        if rows <= capacity:
            return
        capacity = max(rows, 2 * capacity)
        keys = like.new_empty(like.shape[0], capacity, like.shape[2])
        values = like.new_empty(like.shape[0], capacity, like.shape[2])
        if self.length:
            keys[:, : self.length] = self.keys[:, : self.length]
            values[:, : self.length] = self.values[:, : self.length]
        self.keys, self.values = keys, values

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Commit k, v (kv_heads, T, D) after the context."""
        end = self.length + k.shape[1]
        self._reserve(end + self.room, k)
        self.keys[:, self.length : end] = k
        self.values[:, self.length : end] = v
        self.length = end

    def with_block(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (kv_heads, length + B, D) of [context ; block], for block k, v (kv_heads, B, D).
        The block goes into the free rows after the context: nothing is committed."""
        end = self.length + k.shape[1]
        self._reserve(end, k)
        self.keys[:, self.length : end] = k
        self.values[:, self.length : end] = v
        return self.keys[:, :end], self.values[:, :end]


# A CPU matmul library builds a kernel for each row count it first meets (about 10 ms a shape with
# bf16 on AMX), and every prompt length is a new one: a prompt's context is projected in stretches of
# at most PROJECTION_STRETCH rows, each padded to a multiple of PROJECTION_QUANTUM, so every length
# reuses a handful of shapes. A few rows (the tokens of a round) go as they are: those counts recur.
PROJECTION_STRETCH = 512
PROJECTION_QUANTUM = 64
UNPADDED_ROWS = 16


def _project_stretch(drafter, features: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """features (T, k*H), positions (T,) -> per drafter layer (keys, values), each (kv_heads, T, D).
    Rows are independent here, so the padding rows (zeros at position 0) change nothing but the shape."""
    rows = features.shape[0]
    if rows > UNPADDED_ROWS and rows % PROJECTION_QUANTUM:
        pad = PROJECTION_QUANTUM - rows % PROJECTION_QUANTUM
        features = torch.cat([features, features.new_zeros(pad, features.shape[1])])
        positions = torch.cat([positions, positions.new_zeros(pad)])
    fused = drafter.fuse(features)  # (T', H)
    cos, sin = drafter.rope(positions)  # (T', D) each
    kept = []
    for layer in drafter.layers:
        keys, values = layer.self_attn.keys_values(fused, cos, sin)  # (kv_heads, T', D) each
        kept.append((keys[:, :rows], values[:, :rows]))
    return kept


class DraftSession:
    """Per-generation drafter state: the context keys/values of every committed position, per layer.

    :meth:`extend` only queues the new positions' features; their keys and values are computed when
    they are first needed (the next draft, or reading :attr:`context`). A run of plain one-token steps,
    which never drafts, thus pays for one batched projection when drafting resumes instead of one per
    token (the fused projection reads a (H, k*H) weight, costing as much for one row as for a dozen)."""

    def __init__(self, drafter: DFlashDrafter):
        self.drafter = drafter
        self._context = [ContextKV(room=drafter.config.block_size) for _ in drafter.layers]
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (features (T, k*H), positions (T,))
        self.length = 0  # committed positions, queued ones included

    def extend(self, features: torch.Tensor, positions: torch.Tensor) -> None:
        """Add committed positions: features (T, k*H) from the target taps, positions (T,)."""
        self._pending.append((features, positions))
        self.length += features.shape[0]

    @property
    def context(self) -> list[ContextKV]:
        """Each layer's keys and values of every committed position."""
        self.project_pending()
        return self._context

    def project_pending(self) -> None:
        """Compute the keys and values of the queued positions now (the next draft would otherwise)."""
        DraftSession.project_all([self])

    def draft(self, anchor_token: int, start: int) -> DraftBlock:
        """Run the block ``[anchor, MASK...]`` at positions ``start..start+B-1``."""
        return DraftSession.draft_all([self], [anchor_token], [start])[0]

    # ------------------------------------------------------------------ several sessions at once
    # A server drafts for many requests per step. On a CPU the drafter's cost at a few rows is reading
    # its weights, so one pass over every request's rows costs little more than one request's pass.

    @staticmethod
    @torch.no_grad()
    def project_all(sessions: list["DraftSession"]) -> None:
        """:meth:`project_pending` for several sessions of one drafter, in one projection pass."""
        queued = [s for s in sessions if s._pending]
        if not queued:
            return
        drafter = _common_drafter(queued)
        pieces = [(torch.cat([f for f, _ in s._pending]), torch.cat([p for _, p in s._pending])) for s in queued]
        for s in queued:
            s._pending.clear()
        sizes = [f.shape[0] for f, _ in pieces]
        features = torch.cat([f for f, _ in pieces])  # (sum T_i, k*H)
        positions = torch.cat([p for _, p in pieces])  # (sum T_i,)
        per_layer = [[] for _ in drafter.layers]  # each: (keys, values) of one stretch of rows
        for start in range(0, features.shape[0], PROJECTION_STRETCH):
            stretch = _project_stretch(drafter, features[start:start + PROJECTION_STRETCH],
                                       positions[start:start + PROJECTION_STRETCH])
            for collected, kv in zip(per_layer, stretch):
                collected.append(kv)
        for index, collected in enumerate(per_layer):
            keys, values = collected[0] if len(collected) == 1 else (  # (kv_heads, sum T_i, D) each
                torch.cat([k for k, _ in collected], dim=1), torch.cat([v for _, v in collected], dim=1))
            for session, k, v in zip(queued, keys.split(sizes, dim=1), values.split(sizes, dim=1)):
                session._context[index].append(k, v)

    @staticmethod
    @torch.no_grad()
    def draft_all(sessions: list["DraftSession"], anchor_tokens: list[int], starts: list[int],
                  depth: int | None = None) -> list[DraftBlock]:
        """:meth:`draft` for several sessions of one drafter (one block each) in one forward: block i is
        ``[anchor_tokens[i], MASK...]`` at positions ``starts[i]..starts[i]+B-1`` under session i's
        context. Alone, a session drafts exactly what it drafts here beside others, up to the rounding of
        products over more rows.

        ``depth``: score only the first ``depth`` prediction rows (the blocks then have ``depth`` rows).
        The whole block still runs, since its rows attend to each other; only the draft head, the
        largest product, is spared for rows nobody reads (a server verifying chains of k < L tokens)."""
        if not sessions or not len(sessions) == len(anchor_tokens) == len(starts):
            raise ValueError(f"draft_all needs one anchor token and one start per session, got {len(sessions)} "
                             f"session(s), {len(anchor_tokens)} anchor(s) and {len(starts)} start(s).")
        d = _common_drafter(sessions)
        if depth is not None and depth < 1:
            raise ValueError(f"draft_all: depth must be at least 1 (rows to score), got {depth}.")
        if any(s.length == 0 for s in sessions):
            raise RuntimeError("DraftSession.draft needs the committed context first (call extend).")
        DraftSession.project_all(sessions)
        size = d.config.block_size
        ids = torch.cat([d.block_ids(anchor) for anchor in anchor_tokens])  # (R*B,)
        normed = DraftSession.run_blocks(sessions, d.embed_block(ids), starts)  # (R*B, H)
        hidden = [d.prediction_rows(block)[:depth] for block in normed.split(size)]  # R x (L, H)
        logits = d.draft_logits(torch.cat(hidden)).split(hidden[0].shape[0])  # R x (L, Vd)
        return [d.make_block(h, anchor, lg) for h, anchor, lg in zip(hidden, anchor_tokens, logits)]


    @staticmethod
    @torch.no_grad()
    def run_blocks(sessions: list["DraftSession"], x: torch.Tensor, starts: list[int]) -> torch.Tensor:
        """The drafter's layers and final norm over R embedded blocks: x (R*B, H), block i at positions
        ``starts[i]..`` under session i's context -> (R*B, H) final-norm rows of every block row."""
        d = _common_drafter(sessions)
        DraftSession.project_all(sessions)
        size = d.config.block_size
        cos, sin = d.rope(torch.cat([torch.arange(start, start + size) for start in starts]))  # (R*B, D) each
        contexts = [s._context for s in sessions]
        for index, layer in enumerate(d.layers):
            x = layer.forward_sessions(x, [c[index] for c in contexts], cos, sin)
        return d.norm(x)


def _common_drafter(sessions: list[DraftSession]) -> DFlashDrafter:
    drafter = sessions[0].drafter
    if any(s.drafter is not drafter for s in sessions):
        raise ValueError("Sessions drafted together must belong to one drafter.")
    return drafter
