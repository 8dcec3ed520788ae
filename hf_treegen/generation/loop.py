"""The tree decoding loop: prefill, then rounds of draft -> build -> verify -> walk -> commit.

It runs as a ``custom_generate`` callable, so transformers has already prepared the generation
config, the cache, the logits processors and the stopping criteria. Invariants between rounds:

    ids      the committed sequence; its last token is the root of the next tree
    cache    target K/V for every committed token except that root (length = ids.shape[1] - 1)
    session  drafter context K/V for the same positions as the target cache
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..acceptance import DepthCalibration
from ..costs import CostProfile
from ..drafters.dflash import DraftSession
from ..lookup import context_continuation, graft_chain, inside_continuations
from ..speculation import Proposal, Walk, run_round, walk_tree
from ..target import (FeatureTap, attention_implementation, cache_in, check_cache_supports_trees, decode_prefill,
                      keep_cache_rows, packed_linears, with_cache)
from ..tree import DraftTree
from .options import TreeOptions
from .plan import TreePlan, plan_tree_call
from .policy import RoundPolicy
from .stats import TreeStats


@dataclass
class TreeGenerateOutput(GenerateDecoderOnlyOutput):
    """``GenerateDecoderOnlyOutput`` plus what the tree rounds did."""

    tree_stats: TreeStats | None = None


@dataclass(frozen=True)
class TreeRound:
    """What one round did, as an ``on_round`` callback sees it (after the round's tokens are committed)."""

    start: int  # position of the round's root in the sequence (the tokens before it were committed)
    tree: DraftTree  # what was verified: the builder's nodes first, then grafted ones
    built_nodes: int  # nodes the builder made (the root and the drafter's own guesses)
    drafted: bool  # False: a plain one-token step (no drafter forward)
    walk: Walk  # the target's accepted nodes and decided tokens
    kept: int  # tokens the round emitted
    seconds: dict[str, float]  # propose, verify, walk, commit


def choose_token(scores: torch.Tensor, do_sample: bool) -> int:
    """scores (1, V) processed logits -> the token stock generate() would pick (same ops)."""
    if do_sample:
        probs = torch.nn.functional.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, num_samples=1)[0, 0])
    return int(torch.argmax(scores, dim=-1)[0])


class DraftProposer:
    """Tree decoding's proposer: the drafter drafts a block under the last committed token and the
    plan's builder cuts it into a tree, onto which the plan's lookup grafts continuations copied from
    earlier in the sequence (:mod:`hf_treegen.lookup`), from the datastore (:mod:`hf_treegen.datastore`)
    and under each of the drafted tree's likeliest nodes; when the plan's policy says a plain step pays
    better, the root alone (no drafter forward). Records its draft and build time in ``stats``."""

    def __init__(self, session: DraftSession, plan: TreePlan, stats: TreeStats):
        self.session, self.plan, self.stats = session, plan, stats
        self.builder, self.policy = plan.builder, plan.policy
        self.drafting = False
        self.built_nodes = 0  # rows of this round's tree that the builder made; grafted ones follow them

    def propose(self, committed: torch.Tensor, cached: int) -> Proposal:
        """committed (T,) the sequence so far; cached = T - 1 (its last token is the root)."""
        root = int(committed[cached])
        self.drafting = self.policy.draft_this_round()
        if not self.drafting:  # a plain one-token step: the root alone
            self.built_nodes = 1
            return Proposal(DraftTree.chain(root, []))
        t0 = time.perf_counter()
        block = self.session.draft(root, cached)
        t1 = time.perf_counter()
        tree = self.builder(block, root)
        self.built_nodes = tree.num_nodes
        if self.plan.lookup:
            tree = self.graft(tree, committed.cpu())  # on a GPU: one copy to the host serves every lookup
        self.stats.draft_s += t1 - t0
        self.stats.build_s += time.perf_counter() - t1
        return Proposal(tree)

    def graft(self, built: DraftTree, history: torch.Tensor) -> DraftTree:
        """``built`` with the plan's lookup continuations of ``history`` (T,) grafted on."""
        plan = self.plan
        tree = graft_chain(built, context_continuation(history, plan.lookup))
        if plan.datastore is not None:
            for path in plan.datastore.continuations(history, plan.lookup, max_paths=plan.datastore_paths):
                tree = graft_chain(tree, path)
        if plan.inside:  # under the built tree's nodes: a grafted node is no drafter guess to branch from
            for node, tokens in inside_continuations(built, history, plan.inside, plan.datastore):
                tree = graft_chain(tree, tokens, under=node)
        return tree

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        self.policy.observe(self.drafting, tree.num_drafted, len(accepted_nodes))
        if not self.drafting:
            return
        # The builder and the calibration learn how the drafter's own nodes fared: the accepted path
        # up to where it left them (a grafted node's token is no child of its parent in the built tree,
        # so there the built tree's walk would have stopped too).
        own = [node for node in accepted_nodes if node < self.built_nodes]
        built = tree.first_nodes(self.built_nodes)
        self.stats.calibration.observe(built, own)
        self.builder.observe(built, own)
        if self.plan.lookup:
            self.builder.observe_grafts(tree.num_nodes - self.built_nodes, len(accepted_nodes) - len(own))


class TreeDecoder:
    """One generation with tree speculative decoding (batch size 1)."""

    def __init__(self, model, drafter, plan: TreePlan, logits_processor, stopping_criteria, generation_config,
                 streamer=None, walk=walk_tree, on_round: Callable[[TreeRound], None] | None = None):
        self.model, self.drafter, self.plan = model, drafter, plan
        self.logits_processor, self.stopping_criteria = logits_processor, stopping_criteria
        self.config, self.streamer, self.walk, self.on_round = generation_config, streamer, walk, on_round
        self.do_sample = bool(generation_config.do_sample)
        self.device = model.get_input_embeddings().weight.device
        self.builder = plan.builder
        self.stats = TreeStats(plan.strategy)
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

    # ------------------------------------------------------------------------------ the loop
    def prefill(self, ids: torch.Tensor, cache, tap: FeatureTap):
        """The prompt into the cache and the drafter's context; sets ``self.verify``. Returns (drafter
        session, first token, its processed scores (1, V), its logits (1, V))."""
        t0 = time.perf_counter()
        logits, self.verify = decode_prefill(self.model, ids, cache, self.plan.head_shortcut)  # (1, V) float32
        session = self.drafter.new_session()
        session.extend(tap.take(), torch.arange(ids.shape[1]))
        token, scores = self.decide(ids, logits)
        self.stats.prefill_s += time.perf_counter() - t0
        return session, token, scores, logits

    def run(self, ids: torch.Tensor, cache) -> torch.Tensor:
        """ids (1, P) the prompt; ``cache`` an empty dynamic cache. Returns (1, P + new)."""
        self.cache = cache
        with FeatureTap(self.model, self.drafter.config.target_layer_ids) as self.tap:
            session, token, scores, logits = self.prefill(ids, cache, self.tap)
            self.ids, self.stopped = self.emit(ids, token, scores, logits)
            self.proposer = DraftProposer(session, self.plan, self.stats)
            while not self.stopped:
                self.round()
        if self.streamer is not None:
            self.streamer.end()
        return self.ids

    def round(self) -> None:
        """One speculation round on top of ``self.ids`` (1, T); the cache holds T - 1 positions."""
        self.decisions: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # node -> (processed scores, logits)
        start = self.ids.shape[1] - 1
        done = run_round(self.proposer, self.ids[0], start, self.verify_tree, self.decide_node, self.commit,
                         walk=self.walk)
        stats = self.stats
        stats.accepted_lengths.append(done.kept)
        stats.tree_sizes.append(done.tree.num_drafted)
        stats.plain_steps += not self.proposer.drafting
        # drafted tokens emitted this round (nodes[i] carries emitted token i) that a lookup graft supplied
        stats.lookup_tokens += sum(node >= self.proposer.built_nodes for node in done.walk.nodes[1: done.kept])
        stats.verify_s += done.seconds["verify"]
        stats.walk_s += done.seconds["walk"]
        stats.commit_s += done.seconds["commit"]
        if self.on_round is not None:
            self.on_round(TreeRound(start, done.tree, self.proposer.built_nodes, self.proposer.drafting, done.walk,
                                    done.kept, done.seconds))

    def verify_tree(self, tree: DraftTree, rows) -> torch.Tensor:
        return self.verify(tree, self.ids.shape[1] - 1, self.cache)  # (N+1, V) every row

    def decide_node(self, tree: DraftTree, node: int, logits: torch.Tensor) -> int:
        """The target's token at ``node``, on the node's own sequence: the committed ids, then the
        drafted path down to the node."""
        path = tree.path_to(node)[1:]
        node_ids = torch.cat([self.ids, tree.tokens.to(self.ids.device)[path][None]], dim=-1)
        token, scores = self.decide(node_ids, logits)
        self.decisions[node] = (scores, logits)
        return token

    def commit(self, tree: DraftTree, walk: Walk) -> int:
        """Emit the walk's tokens until a stopping criterion fires; keep the emitted rows' cache and
        drafter context. Returns how many were emitted."""
        start = self.ids.shape[1] - 1
        emitted = 0
        for node, token in zip(walk.nodes, walk.tokens):
            self.ids, self.stopped = self.emit(self.ids, token, *self.decisions[node])
            emitted += 1
            if self.stopped:
                break
        # the cache keeps every emitted token but the last, i.e. the first `emitted` accepted rows
        keep = torch.tensor(walk.nodes[:emitted], dtype=torch.long)
        keep_cache_rows(self.cache, start, keep)
        if not self.stopped:
            self.proposer.session.extend(self.tap.take()[keep.to(self.device)], start + torch.arange(emitted))
        return emitted


def check_generation_config(generation_config) -> None:
    """Beam search and several sequences per prompt are other decoding methods; say so by name
    (transformers expands ``num_return_sequences`` into a batch before our loop would see it)."""
    if (generation_config.num_beams or 1) > 1:
        raise ValueError(f"num_beams={generation_config.num_beams} asks for beam search; tree speculative decoding "
                         f"speeds up greedy and sampling decoding. Drop num_beams, or drop tree_strategy and the "
                         f"drafter for stock beam search.")
    if (generation_config.num_return_sequences or 1) > 1:
        raise ValueError(f"num_return_sequences={generation_config.num_return_sequences}: tree speculative decoding "
                         f"returns one sequence per call; call generate() once per sample (seed each call for "
                         f"reproducible samples).")


def check_inputs(model, input_ids: torch.Tensor, model_kwargs: dict) -> None:
    attention_implementation(model)  # refuses flash attention before any forward runs
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (1, prompt_length); got shape {tuple(input_ids.shape)}.")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"Tree speculative decoding runs one sequence at a time; got a batch of {input_ids.shape[0]}. "
            f"Call generate() per prompt (or drop tree_strategy for batched stock decoding)."
        )
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty; tree speculative decoding needs at least one prompt token (e.g. BOS).")
    if input_ids.is_floating_point() or input_ids.is_complex():
        raise ValueError(f"input_ids must hold integer token ids; got dtype {input_ids.dtype}.")
    vocab = model.get_input_embeddings().num_embeddings
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab:
        raise ValueError(f"input_ids holds ids outside the model's vocabulary [0, {vocab}): min "
                         f"{int(input_ids.min())}, max {int(input_ids.max())}. Was it made by another tokenizer?")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("Tree speculative decoding does not take padded inputs; pass the unpadded prompt.")
    cache = cache_in(model_kwargs)
    if cache is None or not model_kwargs.get("use_cache", True):
        raise ValueError("Tree speculative decoding needs use_cache=True and a dynamic KV cache.")
    if cache.get_seq_length() != 0:
        raise ValueError(
            "Tree speculative decoding prefills the whole prompt itself (the drafter needs its features); "
            "do not pass a pre-filled cache."
        )
    check_cache_supports_trees(cache)


@torch.no_grad()
def tree_decoding(model, input_ids, logits_processor, stopping_criteria, generation_config,
                  synced_gpus=False, *, drafter, options: TreeOptions, streamer=None, walk=walk_tree,
                  profile: CostProfile | None = None, calibration: DepthCalibration | None = None,
                  policy: RoundPolicy | None = None, on_round: Callable[[TreeRound], None] | None = None,
                  **model_kwargs):
    """The ``custom_generate`` callable behind ``generate(..., tree_strategy=...)``.

    Tools that study the rounds pass it to ``generate(custom_generate=functools.partial(tree_decoding,
    drafter=..., options=..., ...))`` themselves: ``on_round`` sees every :class:`TreeRound`, ``policy``
    replaces the strategy's round policy, ``walk`` the walk (tests pass a broken one to show they notice)."""
    check_generation_config(generation_config)
    check_inputs(model, input_ids, model_kwargs)
    cache = cache_in(model_kwargs)
    # faster CPU kernels for the forwards of this call (a no-op elsewhere): the drafter's always, the
    # target's from the row count where its measured profile says they win (every forward without one)
    with packed_linears(drafter):
        plan = plan_tree_call(model, drafter, options, generation_config, profile, calibration)
        if policy is not None:
            plan = replace(plan, policy=policy)
        decoder = TreeDecoder(model, drafter, plan, logits_processor, stopping_criteria, generation_config,
                              streamer=streamer, walk=walk, on_round=on_round)
        with packed_linears(model, min_rows=plan.packed_from_rows):
            sequences = decoder.run(input_ids, cache)
    if not generation_config.return_dict_in_generate:
        return sequences
    return TreeGenerateOutput(
        sequences=sequences,
        scores=tuple(decoder.scores) if decoder.keep_scores else None,
        logits=tuple(decoder.raw_logits) if decoder.keep_logits else None,
        **with_cache(cache),
        tree_stats=decoder.stats,
    )
