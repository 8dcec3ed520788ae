"""DrafterConfig: the released DFlash / DFlash2 / Domino drafter fields, frozen and validated.

The released checkpoints store a Qwen3-style ``config.json`` with the drafter fields either at the top
level or inside ``dflash_config``. :meth:`DrafterConfig.from_dict` reads both layouts and
:meth:`DrafterConfig.to_dict` writes the released one. A field that changes the draft forward and that
hf_treegen does not implement is refused by name rather than ignored: ignoring it would keep the output
exact but quietly draft badly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

DOMINO_PROJECTORS = ("domino", "causal_v5")
ARCHITECTURES = ("DFlashDraftModel", "DFlash2DraftModel", "DSparkDraftModel", "DominoDraftModel")
MARKOV_HEAD_TYPES = ("vanilla", "gated")  # DSpark's "rnn" head is not implemented (refused by name)
# DFlash2's convolution and candidate-selector sizes (all present in a DFlash2 config, absent otherwise)
DFLASH2_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
# DSpark's Markov and confidence heads (a DSpark config names markov_rank and markov_head_type)
DSPARK_FIELDS = ("markov_rank", "markov_head_type", "confidence_head", "confidence_head_with_markov")
# drafter fields the released configs keep inside ``dflash_config`` (anything else there is refused)
DRAFTER_FIELDS = ("mask_token_id", "target_layer_ids", "block_size", "num_target_layers", "shift_label",
                  "pure_draft_prefix_len", "projector_type", "emb_dim", "gru_hidden_dim", "draft_vocab_size",
                  "input_embedding_scale", "output_multiplier", "final_logit_softcapping", *DFLASH2_FIELDS,
                  *DSPARK_FIELDS)


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """The released rule: one middle layer for a 1-layer drafter, else evenly from 1 to L-3."""
    if num_draft_layers == 1:
        return (num_target_layers // 2,)
    last = max(num_target_layers - 3, 1)
    step = (last - 1) / (num_draft_layers - 1)
    return tuple(int(round(1 + i * step)) for i in range(num_draft_layers))


# top-level keys that from_dict reads itself or that to_dict writes anew (not kept in ``extra``)
READ_ELSEWHERE = ("dflash_config", "attention_bias", "layer_types")


def _refuse_causal_layers(cfg: dict) -> None:
    """The reference drafter makes a block causal in sliding-window layers or under ``is_causal``; hf_treegen
    drafts with bidirectional full-attention blocks only, so such a config is refused by name."""
    kinds = sorted(set(cfg.get("layer_types") or ["full_attention"]) - {"full_attention"})
    if kinds:
        raise ValueError(f"drafter layer_types {kinds} are not supported: hf_treegen drafts with "
                         f"full-attention layers only.")
    if cfg.get("is_causal"):
        raise ValueError("drafter is_causal=True (causal draft blocks) is not supported: hf_treegen drafts "
                         "with bidirectional blocks.")


def _rope_theta(cfg: dict) -> float:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    return float(cfg.get("rope_theta") or params.get("rope_theta") or 1_000_000.0)


@dataclass(frozen=True)
class DrafterConfig:
    """A drafter's configuration with the released checkpoints' fields: the Qwen3-style backbone
    shape, the draft block size, mask token and tapped target layers, and for Domino the GRU head's
    sizes. ``from_dict`` reads a released ``config.json``."""

    # backbone shape (Qwen3-style decoder layers)
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 32768
    # drafter fields, as released
    block_size: int = 16
    mask_token_id: int = 0
    target_layer_ids: tuple[int, ...] = (1,)
    num_target_layers: int = 2
    shift_label: bool = False
    pure_draft_prefix_len: int = 0
    projector_type: str | None = None
    emb_dim: int | None = None
    gru_hidden_dim: int | None = None
    architecture: str = "DFlashDraftModel"
    draft_vocab_size: int | None = None  # size of the draft vocabulary map (None: the full target vocabulary)
    attention_bias: bool = False  # q/k/v/o projections carry biases (Qwen3's attention_bias)
    input_embedding_scale: float = 1.0  # the block's token embeddings are multiplied by this
    output_multiplier: float = 1.0  # draft logits are multiplied by this ...
    final_logit_softcapping: float | None = None  # ... then soft-capped: c * tanh(logits / c)
    # DFlash2 (architecture "DFlash2DraftModel"): causal grouped convolutions around attention and MLP,
    # and a candidate selector rescoring each position's top ``selector_top_k`` with a rank-r codebook
    conv_kernel_size: int | None = None
    conv_group_size: int | None = None
    selector_rank: int | None = None
    selector_top_k: int | None = None
    # DSpark (architecture "DSparkDraftModel"): a rank-r Markov logit bias and a confidence head
    markov_rank: int | None = None
    markov_head_type: str | None = None
    confidence_head: bool = False
    confidence_head_with_markov: bool = False
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_layer_ids", tuple(int(i) for i in self.target_layer_ids))
        positive = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "head_dim", "vocab_size", "num_target_layers")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DrafterConfig.{name} must be a positive int, got {value!r}.")
        if self.block_size < 2:
            raise ValueError(f"DrafterConfig.block_size must be at least 2 (anchor + masks), got {self.block_size}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"DrafterConfig.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})."
            )
        if not self.target_layer_ids:
            raise ValueError("DrafterConfig.target_layer_ids must name at least one target layer.")
        bad = [i for i in self.target_layer_ids if not 0 <= i < self.num_target_layers]
        if bad:
            raise ValueError(
                f"DrafterConfig.target_layer_ids {list(self.target_layer_ids)} has ids outside "
                f"[0, num_target_layers={self.num_target_layers}): {bad}."
            )
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"DrafterConfig.mask_token_id {self.mask_token_id} is outside the vocab ({self.vocab_size}).")
        if not isinstance(self.shift_label, bool):
            raise ValueError(f"DrafterConfig.shift_label must be a bool, got {self.shift_label!r}.")
        if self.pure_draft_prefix_len not in (0, 1):
            raise ValueError(
                f"DrafterConfig.pure_draft_prefix_len must be 0 or 1 (as released), got {self.pure_draft_prefix_len}."
            )
        if self.projector_type is not None:
            if self.projector_type not in DOMINO_PROJECTORS:
                raise ValueError(
                    f"DrafterConfig.projector_type must be None (DFlash) or one of {DOMINO_PROJECTORS}, "
                    f"got {self.projector_type!r}."
                )
            for name in ("emb_dim", "gru_hidden_dim"):
                value = getattr(self, name)
                if not isinstance(value, int) or value < 1:
                    raise ValueError(f"A Domino DrafterConfig needs a positive int {name}, got {value!r}.")
        if self.draft_vocab_size is not None and (
                isinstance(self.draft_vocab_size, bool) or not isinstance(self.draft_vocab_size, int)
                or not 1 <= self.draft_vocab_size <= self.vocab_size):
            raise ValueError(f"DrafterConfig.draft_vocab_size must be None (full vocabulary) or an int in "
                             f"[1, vocab_size={self.vocab_size}], got {self.draft_vocab_size!r}.")
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"DrafterConfig.architecture must be one of {ARCHITECTURES}, got {self.architecture!r}.")
        for name in ("input_embedding_scale", "output_multiplier"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"DrafterConfig.{name} must be a positive number, got {value!r}.")
        cap = self.final_logit_softcapping
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap < 0):
            raise ValueError(f"DrafterConfig.final_logit_softcapping must be None or a number >= 0 (0: off), got {cap!r}.")
        self._check_dflash2_fields()
        self._check_dspark_fields()

    def _check_dspark_fields(self) -> None:
        if self.architecture != "DSparkDraftModel":
            if self.markov_rank is not None or self.markov_head_type is not None or self.confidence_head:
                raise ValueError(f"DrafterConfig fields {list(DSPARK_FIELDS)} belong to a DSpark drafter, but the "
                                 f"architecture is {self.architecture!r}; set architecture='DSparkDraftModel'.")
            return
        if self.is_domino:
            raise ValueError("A DSpark drafter has no Domino head (projector_type=None).")
        rank = self.markov_rank
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"A DSpark DrafterConfig needs a positive int markov_rank (a DSpark drafter without "
                             f"its Markov head is plain DFlash), got {rank!r}.")
        if self.markov_head_type not in MARKOV_HEAD_TYPES:
            raise ValueError(f"DSpark markov_head_type {self.markov_head_type!r} is not supported; hf_treegen "
                             f"implements {list(MARKOV_HEAD_TYPES)}.")

    def _check_dflash2_fields(self) -> None:
        given = {name: getattr(self, name) for name in DFLASH2_FIELDS if getattr(self, name) is not None}
        if self.architecture != "DFlash2DraftModel":
            if given:
                raise ValueError(f"DrafterConfig fields {sorted(given)} belong to a DFlash2 drafter, but the "
                                 f"architecture is {self.architecture!r}; set architecture='DFlash2DraftModel'.")
            return
        if self.is_domino or self.shift_label:
            raise ValueError("A DFlash2 drafter has no Domino head and predicts with its mask rows "
                             "(projector_type=None, shift_label=False).")
        for name in DFLASH2_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"A DFlash2 DrafterConfig needs a positive int {name}, got {value!r}.")
        if self.hidden_size % self.conv_group_size:
            raise ValueError(f"DrafterConfig.conv_group_size ({self.conv_group_size}) must divide hidden_size "
                             f"({self.hidden_size}).")

    # ------------------------------------------------------------------------------- derived
    @property
    def is_domino(self) -> bool:
        return self.projector_type is not None

    @property
    def family(self) -> str:
        """"dflash", "dflash2", "dspark" or "domino": which drafter class builds this config."""
        if self.is_domino:
            return "domino"
        return {"DFlash2DraftModel": "dflash2", "DSparkDraftModel": "dspark"}.get(self.architecture, "dflash")

    @property
    def has_sequential_head(self) -> bool:
        """Whether the drafter scores depth d given the token chosen at depth d-1 (Domino's GRU, DFlash2's
        candidate selector, DSpark's Markov head): the conditional strategies need one."""
        return self.family != "dflash"

    @property
    def num_draft_positions(self) -> int:
        """Draft tokens per round: with shift_label row i predicts token i+1, so all B rows draft."""
        return self.block_size if self.shift_label else self.block_size - 1

    @property
    def feature_size(self) -> int:
        """Width of the fused target features: one hidden state per tapped layer."""
        return self.hidden_size * len(self.target_layer_ids)

    # ------------------------------------------------------------------------------- construction
    @classmethod
    def for_target(
        cls,
        target_config,
        num_hidden_layers: int = 1,
        block_size: int = 8,
        projector_type: str | None = None,
        target_layer_ids: tuple[int, ...] | None = None,
        mask_token_id: int | None = None,
        **overrides,
    ) -> "DrafterConfig":
        """A config shaped for ``target_config`` (random drafters, training). ``projector_type=None`` is DFlash."""
        t = target_config.to_dict() if hasattr(target_config, "to_dict") else dict(target_config)
        num_target_layers = t["num_hidden_layers"]
        heads = t["num_attention_heads"]
        fields = dict(
            hidden_size=t["hidden_size"],
            intermediate_size=t["intermediate_size"],
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=t.get("num_key_value_heads") or heads,
            head_dim=t.get("head_dim") or t["hidden_size"] // heads,
            vocab_size=t["vocab_size"],
            rms_norm_eps=float(t.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(t),
            max_position_embeddings=t.get("max_position_embeddings", 32768),
            block_size=block_size,
            mask_token_id=t["vocab_size"] - 1 if mask_token_id is None else mask_token_id,
            target_layer_ids=target_layer_ids or default_target_layer_ids(num_target_layers, num_hidden_layers),
            num_target_layers=num_target_layers,
        )
        if projector_type is not None:
            fields.update(projector_type=projector_type, emb_dim=256, gru_hidden_dim=256, shift_label=True,
                          pure_draft_prefix_len=1, architecture="DominoDraftModel")
        fields.update(overrides)
        return cls(**fields)

    @classmethod
    def from_dict(cls, cfg: dict) -> "DrafterConfig":
        """Read a released ``config.json`` (drafter fields at the top level or in ``dflash_config``)."""
        inner = dict(cfg.get("dflash_config") or {})
        unknown = sorted(set(inner) - set(DRAFTER_FIELDS))
        if unknown:
            raise ValueError(f"dflash_config names fields hf_treegen does not implement: {unknown}; it reads "
                             f"{list(DRAFTER_FIELDS)}.")
        _refuse_causal_layers(cfg)
        merged = {**cfg, **inner}

        def need(name):
            if name not in merged:
                raise ValueError(f"drafter config.json is missing the field {name!r}.")
            return merged[name]

        heads = need("num_attention_heads")
        archs = cfg.get("architectures") or ["DFlashDraftModel"]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(
            hidden_size=need("hidden_size"),
            intermediate_size=need("intermediate_size"),
            num_hidden_layers=need("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=merged.get("num_key_value_heads") or heads,
            head_dim=merged.get("head_dim") or need("hidden_size") // heads,
            vocab_size=need("vocab_size"),
            rms_norm_eps=float(merged.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(merged),
            max_position_embeddings=merged.get("max_position_embeddings", 32768),
            block_size=need("block_size"),
            mask_token_id=need("mask_token_id"),
            target_layer_ids=tuple(need("target_layer_ids")),
            num_target_layers=need("num_target_layers"),
            shift_label=merged.get("shift_label", False),
            pure_draft_prefix_len=merged.get("pure_draft_prefix_len", 0),
            projector_type=merged.get("projector_type"),
            emb_dim=merged.get("emb_dim"),
            gru_hidden_dim=merged.get("gru_hidden_dim"),
            architecture=archs[0],
            draft_vocab_size=merged.get("draft_vocab_size"),
            attention_bias=bool(merged.get("attention_bias", False)),
            input_embedding_scale=merged.get("input_embedding_scale", 1.0),
            output_multiplier=merged.get("output_multiplier", 1.0),
            final_logit_softcapping=merged.get("final_logit_softcapping"),
            **{name: merged.get(name) for name in DFLASH2_FIELDS},
            markov_rank=merged.get("markov_rank"),
            markov_head_type=merged.get("markov_head_type"),
            confidence_head=bool(merged.get("confidence_head", False)),
            confidence_head_with_markov=bool(merged.get("confidence_head_with_markov", False)),
            extra={k: v for k, v in cfg.items() if k not in known and k not in READ_ELSEWHERE},
        )

    def to_dict(self) -> dict:
        """The released layout: Qwen3 fields on top, drafter fields in ``dflash_config``."""
        out = dict(self.extra)
        out.update(
            architectures=[self.architecture],
            model_type="qwen3",
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            vocab_size=self.vocab_size,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
            max_position_embeddings=self.max_position_embeddings,
            layer_types=["full_attention"] * self.num_hidden_layers,
            tie_word_embeddings=False,
            attention_bias=self.attention_bias,
            block_size=self.block_size,
            num_target_layers=self.num_target_layers,
            dflash_config={
                "mask_token_id": self.mask_token_id,
                "target_layer_ids": list(self.target_layer_ids),
            },
        )
        if self.is_domino:
            out["emb_dim"] = self.emb_dim
            out["dflash_config"].update(
                projector_type=self.projector_type,
                emb_dim=self.emb_dim,
                gru_hidden_dim=self.gru_hidden_dim,
                pure_draft_prefix_len=self.pure_draft_prefix_len,
                shift_label=self.shift_label,
            )
        elif self.shift_label:
            out["dflash_config"]["shift_label"] = True
        if self.draft_vocab_size is not None:  # absent from released checkpoints: the full vocabulary
            out["dflash_config"]["draft_vocab_size"] = self.draft_vocab_size
        for name, default in (("input_embedding_scale", 1.0), ("output_multiplier", 1.0),
                              ("final_logit_softcapping", None)):
            if getattr(self, name) != default:
                out["dflash_config"][name] = getattr(self, name)
        for name in DFLASH2_FIELDS:
            if getattr(self, name) is not None:
                out["dflash_config"][name] = getattr(self, name)
        if self.family == "dspark":
            out["dflash_config"].update({name: getattr(self, name) for name in DSPARK_FIELDS})
            out["dflash_config"]["shift_label"] = self.shift_label
        return out

    def validate_against(self, target_config) -> None:
        """Raise a ValueError naming the field when this drafter cannot serve ``target_config``."""
        checks = (
            ("hidden_size", self.hidden_size, target_config.hidden_size),
            ("vocab_size", self.vocab_size, target_config.vocab_size),
            ("num_target_layers", self.num_target_layers, target_config.num_hidden_layers),
        )
        for name, mine, theirs in checks:
            if mine != theirs:
                raise ValueError(
                    f"Drafter does not fit the target: drafter {name}={mine} but the target has {theirs}. "
                    f"Use a drafter trained for this target (or DrafterConfig.for_target(target.config))."
                )

    def describe(self) -> str:
        kind = {"domino": f"Domino({self.projector_type})", "dflash2": "DFlash2", "dspark": "DSpark",
                "dflash": "DFlash"}[self.family]
        vocab = f", draft vocabulary {self.draft_vocab_size}" if self.draft_vocab_size is not None else ""
        return (f"{kind} drafter: {self.num_hidden_layers} layer(s), block {self.block_size}, "
                f"{self.num_draft_positions} draft positions, target layers {list(self.target_layer_ids)}{vocab}")
