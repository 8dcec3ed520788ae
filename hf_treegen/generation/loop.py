"""The tree decoding loop: prefill, then rounds of draft -> build -> verify -> walk -> commit.

It runs as a ``custom_generate`` callable, so transformers has already prepared the generation
config, the cache, the logits processors and the stopping criteria. Invariants between rounds:

    ids      the committed sequence; its last token is the root of the next tree
    cache    target K/V for every committed token except that root (length = ids.shape[1] - 1)
    session  drafter context K/V for the same positions as the target cache
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..acceptance import DepthCalibration
from ..builders import BUILDERS, DFLASH_STRATEGIES, TreeBuilder
from ..builders.auto import AutoBuilder, tree_cap
from ..costs import CostProfile
from ..target import (FeatureTap, TreeVerifier, attention_implementation, check_cache_supports_trees, decode_prefill,
                      keep_cache_rows)
from ..tree import DraftTree
from .options import TreeOptions
from .policy import AlwaysDraft, RoundPolicy, StepFallback
from .stats import TreeStats
from .walk import Walk, choose_token, walk_tree


@dataclass
class TreeGenerateOutput(GenerateDecoderOnlyOutput):
    """``GenerateDecoderOnlyOutput`` plus what the tree rounds did."""

    tree_stats: TreeStats | None = None


def make_builder(options: TreeOptions, model, drafter, generation_config, profile: CostProfile | None = None,
                 calibration: DepthCalibration | None = None) -> tuple[TreeBuilder, RoundPolicy]:
    """The round's builder and the round policy.

    ``profile``: the :class:`~hf_treegen.costs.CostProfile` the cost-aware strategies cut trees by
    (measured by :func:`~hf_treegen.calibration.calibrate` when None; other strategies ignore it).
    ``calibration``: the caller's :class:`~hf_treegen.acceptance.DepthCalibration` (a fresh one when
    None, so a call learns only from its own rounds)."""
    if options.strategy not in DFLASH_STRATEGIES and not drafter.config.is_domino:
        raise ValueError(
            f"tree_strategy={options.strategy!r} needs a Domino drafter (hf_treegen.DominoDrafter); "
            f"a DFlash drafter supports {', '.join(DFLASH_STRATEGIES)}."
        )
    positions, vocab = drafter.config.num_draft_positions, model.config.vocab_size
    if options.strategy == "auto":
        profile = profile or _calibrate(model, drafter)
        conditional = drafter.config.is_domino
        settings = options.resolve(positions, vocab, generation_config, conditional=conditional,
                                   default_budget=tree_cap(profile))
        builder = AutoBuilder(settings, profile=profile, calibration=calibration, conditional=conditional)
        return builder, StepFallback(profile)
    settings = options.resolve(positions, vocab, generation_config)
    cls = BUILDERS[options.strategy]
    if cls.cost_aware and profile is None:
        profile = _calibrate(model, drafter, max_rows=settings.budget + 1)
    return cls(settings, profile=profile, calibration=calibration), AlwaysDraft()


def _calibrate(model, drafter, max_rows: int | None = None) -> CostProfile:
    from .. import calibration  # looked up at call time: tests pin calibration.calibrate

    rows = max(calibration.DEFAULT_MAX_ROWS, max_rows or 0)
    return calibration.calibrate(model, drafter, max_rows=rows)


class TreeDecoder:
    """One generation with tree speculative decoding (batch size 1)."""

    def __init__(self, model, drafter, options: TreeOptions, logits_processor, stopping_criteria,
                 generation_config, streamer=None, walk=walk_tree, profile=None, calibration=None):
        self.model, self.drafter, self.options = model, drafter, options
        self.logits_processor, self.stopping_criteria = logits_processor, stopping_criteria
        self.config, self.streamer, self.walk = generation_config, streamer, walk
        self.do_sample = bool(generation_config.do_sample)
        self.device = model.get_input_embeddings().weight.device
        self.builder, self.policy = make_builder(options, model, drafter, generation_config, profile, calibration)
        self.verify: TreeVerifier | None = None  # set by prefill
        self.stats = TreeStats(options.strategy)
        self.keep_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
        self.keep_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
        self.scores: list[torch.Tensor] = []
        self.raw_logits: list[torch.Tensor] = []

    # ------------------------------------------------------------------------------ token choice
    def decide(self, ids: torch.Tensor, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """ids (1, T) the node's own sequence, logits (1, V) float32 -> (token, processed scores)."""
        scores = self.logits_processor(ids, logits.clone())
        return choose_token(scores, self.do_sample), scores

    def emit(self, ids: torch.Tensor, token: int, scores: torch.Tensor, logits: torch.Tensor):
        """Append one token; returns (ids, stop) after the stopping criteria saw it, as stock generate does."""
        ids = torch.cat([ids, ids.new_tensor([[token]])], dim=-1)
        if self.keep_scores:
            self.scores.append(scores)
        if self.keep_logits:
            self.raw_logits.append(logits)
        if self.streamer is not None:
            self.streamer.put(ids[:, -1:].cpu())
        stop = self.stopping_criteria(ids, tuple(self.scores) if self.keep_scores else None)
        return ids, bool(stop.any())

    # ------------------------------------------------------------------------------ phases
    def prefill(self, ids: torch.Tensor, cache, tap: FeatureTap):
        t0 = time.perf_counter()
        logits, self.verify = decode_prefill(self.model, ids, cache)  # (1, V) float32
        session = self.drafter.new_session()
        session.extend(tap.take(), torch.arange(ids.shape[1]))
        token, scores = self.decide(ids, logits)
        self.stats.prefill_s += time.perf_counter() - t0
        return session, token, scores, logits

    def walk_round(self, tree: DraftTree, ids: torch.Tensor, logits: torch.Tensor):
        """Choose the target's token at each visited node, on that node's own path."""
        decisions: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        path_tokens = tree.tokens.to(ids.device)

        def decide(node: int) -> int:
            path = tree.path_to(node)[1:]
            node_ids = torch.cat([ids, path_tokens[path][None]], dim=-1)
            token, scores = self.decide(node_ids, logits[node : node + 1])
            decisions[node] = (scores, logits[node : node + 1])
            return token

        walk: Walk = self.walk(tree, decide)
        return walk, decisions

    # ------------------------------------------------------------------------------ the loop
    def run(self, ids: torch.Tensor, cache) -> torch.Tensor:
        with FeatureTap(self.model, self.drafter.config.target_layer_ids) as tap:
            session, token, scores, logits = self.prefill(ids, cache, tap)
            ids, stop = self.emit(ids, token, scores, logits)
            while not stop:
                ids, stop = self.round(ids, cache, session, tap)
        if self.streamer is not None:
            self.streamer.end()
        return ids

    def round(self, ids: torch.Tensor, cache, session, tap: FeatureTap):
        stats = self.stats
        start, root = ids.shape[1] - 1, int(ids[0, -1])

        t0 = time.perf_counter()
        drafting = self.policy.draft_this_round()
        if drafting:
            block = session.draft(root, start)
            t1 = time.perf_counter()
            tree = self.builder(block, root)
        else:  # a plain one-token step: the root alone
            t1 = t0
            tree = DraftTree.chain(root, [])
        t2 = time.perf_counter()
        logits = self.verify(tree, start, cache)
        t3 = time.perf_counter()
        walk, decisions = self.walk_round(tree, ids, logits)
        emitted, stop = 0, False
        for node, token in zip(walk.nodes, walk.tokens):
            ids, stop = self.emit(ids, token, *decisions[node])
            emitted += 1
            if stop:
                break
        t4 = time.perf_counter()
        # the cache keeps every emitted token but the last, i.e. the first `emitted` accepted rows
        keep = torch.tensor(walk.nodes[:emitted], dtype=torch.long)
        keep_cache_rows(cache, start, keep)
        if not stop:
            session.extend(tap.take()[keep.to(self.device)], start + torch.arange(emitted))
        t5 = time.perf_counter()

        stats.accepted_lengths.append(emitted)
        stats.tree_sizes.append(tree.num_drafted)
        stats.plain_steps += not drafting
        stats.draft_s += t1 - t0
        stats.build_s += t2 - t1
        stats.verify_s += t3 - t2
        stats.walk_s += t4 - t3
        stats.commit_s += t5 - t4
        self.policy.observe(drafting, tree.num_drafted, emitted)
        if not drafting:
            return ids, stop
        stats.calibration.observe(tree, walk.nodes)  # what the target accepted, stop or not
        self.builder.observe(tree, walk.nodes)
        return ids, stop


def check_inputs(model, input_ids: torch.Tensor, model_kwargs: dict) -> None:
    attention_implementation(model)  # refuses flash attention before any forward runs
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (1, prompt_length); got shape {tuple(input_ids.shape)}.")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"Tree speculative decoding runs one sequence at a time; got a batch of {input_ids.shape[0]}. "
            f"Call generate() per prompt (or drop tree_strategy for batched stock decoding)."
        )
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("Tree speculative decoding does not take padded inputs; pass the unpadded prompt.")
    cache = model_kwargs.get("past_key_values")
    if cache is None or not model_kwargs.get("use_cache", True):
        raise ValueError("Tree speculative decoding needs use_cache=True and a dynamic KV cache.")
    if cache.get_seq_length() != 0:
        raise ValueError(
            "Tree speculative decoding prefills the whole prompt itself (the drafter needs its features); "
            "do not pass a pre-filled past_key_values."
        )
    check_cache_supports_trees(cache)


@torch.no_grad()
def tree_decoding(model, input_ids, logits_processor, stopping_criteria, generation_config,
                  synced_gpus=False, *, drafter, options: TreeOptions, streamer=None, walk=walk_tree,
                  profile=None, calibration=None, **model_kwargs):
    """The ``custom_generate`` callable behind ``generate(..., tree_strategy=...)``."""
    check_inputs(model, input_ids, model_kwargs)
    cache = model_kwargs["past_key_values"]
    decoder = TreeDecoder(model, drafter, options, logits_processor, stopping_criteria, generation_config,
                          streamer=streamer, walk=walk, profile=profile, calibration=calibration)
    sequences = decoder.run(input_ids, cache)
    if not generation_config.return_dict_in_generate:
        return sequences
    return TreeGenerateOutput(
        sequences=sequences,
        scores=tuple(decoder.scores) if decoder.keep_scores else None,
        logits=tuple(decoder.raw_logits) if decoder.keep_logits else None,
        past_key_values=cache,
        tree_stats=decoder.stats,
    )
