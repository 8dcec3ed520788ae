"""The tree decoding loop: prefill, then rounds of draft -> build -> verify -> walk -> commit.
A batch of several sequences runs :class:`~hf_treegen.generation.batch.BatchTreeDecoder` instead.

It runs as a ``custom_generate`` callable, so transformers has already prepared the generation
config, the cache, the logits processors and the stopping criteria. Invariants between rounds:

    ids      the committed sequence; its last token is the root of the next tree
    cache    target K/V for every committed token except that root (length = ids.shape[1] - 1)
    session  drafter context K/V for the same positions as the target cache
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..acceptance import DepthCalibration
from ..costs import CostProfile
from ..drafters.dflash import DraftSession
from ..speculation import Proposal, Walk, run_round, walk_tree
from ..target import (FeatureTap, stock_generate, attention_implementation, cache_in, check_cache_supports_trees,
                      decode_prefill, default_linears, grouped_tree_attention, keep_cache_rows, packed_linears,
                      with_cache)
from ..tree import DraftTree
from ..learning_datastore import LearningDatastore
from .options import TreeOptions
from .batch import BatchTreeDecoder
from .plan import TreePlan, plan_tree_call
from .policy import RoundPolicy
from .rounds import TreeRound, choose_token, graft_lookup, learn_from_round
from .stats import TreeStats


@dataclass
class TreeGenerateOutput(GenerateDecoderOnlyOutput):
    """``GenerateDecoderOnlyOutput`` plus what the tree rounds did."""

    tree_stats: TreeStats | None = None


class DraftProposer:
    """Tree decoding's proposer: the drafter drafts a block under the last committed token and the
    plan's builder cuts it into a tree, onto which the plan's lookup grafts continuations copied from
    earlier in the sequence (:mod:`hf_treegen.lookup`), from the datastore (:mod:`hf_treegen.datastore`)
    and under each of the drafted tree's likeliest nodes; when the plan's policy says a plain step pays
    better, or the call has one token left to make, the root alone (no drafter forward). Records its
    draft and build time in ``stats``."""

    def __init__(self, session: DraftSession, plan: TreePlan, stats: TreeStats, max_length: int | None = None):
        self.session, self.plan, self.stats = session, plan, stats
        self.max_length = max_length  # the call's length limit, prompt included (None: no limit)
        self.builder, self.policy = plan.builder, plan.policy
        self.drafting = False
        self.built_nodes = 0  # rows of this round's tree that the builder made; grafted ones follow them

    def propose(self, committed: torch.Tensor, cached: int) -> Proposal:
        """committed (T,) the sequence so far; cached = T - 1 (its last token is the root)."""
        root = int(committed[cached])
        # with one token left to make, a tree could only cost more: the root alone gives that token
        last_token = self.max_length is not None and self.max_length - committed.shape[0] <= 1
        self.drafting = not last_token and self.policy.draft_this_round()
        if not self.drafting:  # a plain one-token step: the root alone
            self.built_nodes = 1
            return Proposal(DraftTree.chain(root, []))
        t0 = time.perf_counter()
        block = self.session.draft(root, cached)
        t1 = time.perf_counter()
        tree = self.builder(block, root)
        self.built_nodes = tree.num_nodes
        if self.plan.lookup:
            tree = graft_lookup(self.plan, tree, committed.cpu())  # on a GPU: one host copy serves every lookup
        self.stats.draft_s += t1 - t0
        self.stats.build_s += time.perf_counter() - t1
        return Proposal(tree)

    def observe(self, tree: DraftTree, accepted_nodes: list[int]) -> None:
        self.policy.observe(self.drafting, tree.num_drafted, len(accepted_nodes))
        if self.drafting:
            learn_from_round(self.plan, self.stats, tree, self.built_nodes, accepted_nodes)


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
        # a prompt is a product of many rows, where the default kernels are at their best (packing pays for
        # the few rows of a decode step) and compute the first token as stock generate() does
        with default_linears(self.model):
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
            self.proposer = DraftProposer(session, self.plan, self.stats, self.config.max_length)
            while not self.stopped:
                self.round()
        if self.streamer is not None:
            self.streamer.end()
        return self.ids

    def final_rows(self) -> list[torch.Tensor]:
        """After :meth:`run`: the one row's (1, P + new) ids."""
        return [self.ids]

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
    if (generation_config.num_return_sequences or 1) > 1 and not generation_config.do_sample:
        raise ValueError(f"num_return_sequences={generation_config.num_return_sequences} without sampling returns "
                         f"the same greedy sequence each time; pass do_sample=True for several samples.")


def prompts_and_outputs(input_ids: torch.Tensor, mask: torch.Tensor | None,
                        rows: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each row's prompt without its left padding and its new tokens, from ``rows`` (the decoder's
    final (1, P + t) ids of each row, without the padding a batch adds after a stop)."""
    prompt_length = input_ids.shape[1]
    prompts = [input_ids[b] if mask is None else input_ids[b][mask[b].bool()] for b in range(input_ids.shape[0])]
    return prompts, [row[0, prompt_length:] for row in rows]


def check_inputs(model, input_ids: torch.Tensor, model_kwargs: dict) -> None:
    attention_implementation(model)  # refuses flash attention before any forward runs
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (batch, prompt_length); got shape {tuple(input_ids.shape)}.")
    if input_ids.shape[1] == 0:
        raise ValueError("input_ids is empty; tree speculative decoding needs at least one prompt token (e.g. BOS).")
    if input_ids.is_floating_point() or input_ids.is_complex():
        raise ValueError(f"input_ids must hold integer token ids; got dtype {input_ids.dtype}.")
    vocab = model.get_input_embeddings().num_embeddings
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab:
        raise ValueError(f"input_ids holds ids outside the model's vocabulary [0, {vocab}): min "
                         f"{int(input_ids.min())}, max {int(input_ids.max())}. Was it made by another tokenizer?")
    mask = model_kwargs.get("attention_mask")
    if mask is not None:
        check_left_padding(input_ids, mask)
    cache = cache_in(model_kwargs)
    if cache is None or not model_kwargs.get("use_cache", True):
        raise ValueError("Tree speculative decoding needs use_cache=True and a dynamic KV cache.")
    if cache.get_seq_length() != 0:
        raise ValueError(
            "Tree speculative decoding prefills the whole prompt itself (the drafter needs its features); "
            "do not pass a pre-filled cache."
        )
    check_cache_supports_trees(cache)


def check_left_padding(input_ids: torch.Tensor, mask: torch.Tensor) -> None:
    """A batch's attention mask: the shape of input_ids, 0s only before each row's prompt, none empty."""
    if mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(mask.shape)} but input_ids has {tuple(input_ids.shape)}; "
                         f"pass the mask the tokenizer returned with these ids.")
    ones = mask.long()
    if bool((ones[:, 1:] < ones[:, :-1]).any()):
        raise ValueError("attention_mask has padding after a prompt token (right padding, or a hole): tree "
                         "speculative decoding, like stock generate(), needs left padding; set "
                         "tokenizer.padding_side = 'left' before tokenizing the batch.")
    if bool((ones[:, -1] == 0).any()):
        raise ValueError("attention_mask has a row with no prompt token; give every row at least one token.")


def check_batch(generation_config, streamer, input_ids: torch.Tensor) -> None:
    """What a batch of several sequences cannot do here, said before any forward runs."""
    if input_ids.shape[0] == 1:
        return
    if streamer is not None:
        raise ValueError(f"A streamer takes one sequence; got a batch of {input_ids.shape[0]}. Drop the streamer, "
                         f"or call generate() per prompt to stream each answer (stock generate() refuses this too).")
    if generation_config.return_dict_in_generate and (generation_config.output_scores
                                                      or generation_config.output_logits):
        raise ValueError("output_scores and output_logits are given for one sequence at a time in tree decoding; "
                         "drop them for a batch, or call generate() per prompt.")


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
    check_batch(generation_config, streamer, input_ids)
    cache = cache_in(model_kwargs)
    mask = model_kwargs.get("attention_mask")
    batched = input_ids.shape[0] > 1 or (mask is not None and not bool(mask.all()))
    if batched and attention_implementation(model) == "flex_attention":
        # a per-sequence BlockMask on the CPU gave the most padded rows wrong tokens, differently each run
        raise ValueError("Batched tree decoding runs with sdpa or eager attention; this model uses flex_attention. "
                         "Load the target with attn_implementation='sdpa' for batches (one prompt at a time, "
                         "flex_attention works).")
    # faster CPU kernels for the forwards of this call (a no-op elsewhere): the drafter's always, the
    # target's from the row count where its measured profile says they win (every forward without one),
    # and tree attention on the cache's grouped heads without copying them
    with packed_linears(drafter):
        plan = plan_tree_call(model, drafter, options, generation_config, profile, calibration,
                              batch_size=input_ids.shape[0], fixed_costs=measure_fixed_costs)
        if policy is not None:
            plan = replace(plan, policy=policy)
        with packed_linears(model, min_rows=plan.packed_from_rows), grouped_tree_attention(model):
            if batched:
                decoder = BatchTreeDecoder(model, drafter, plan, logits_processor, stopping_criteria,
                                           generation_config, walk=walk, on_round=on_round)
                sequences = decoder.run(input_ids, *prompt_mask_and_positions(input_ids, model_kwargs), cache)
            else:
                decoder = TreeDecoder(model, drafter, plan, logits_processor, stopping_criteria, generation_config,
                                      streamer=streamer, walk=walk, on_round=on_round)
                sequences = decoder.run(input_ids, cache)
    if isinstance(plan.datastore, LearningDatastore):
        plan.datastore.learn_call(*prompts_and_outputs(input_ids, mask, decoder.final_rows()))
    if not generation_config.return_dict_in_generate:
        return sequences
    return TreeGenerateOutput(
        sequences=sequences,
        scores=tuple(decoder.scores) if not batched and decoder.keep_scores else None,
        logits=tuple(decoder.raw_logits) if not batched and decoder.keep_logits else None,
        # a batch's cache keeps unused slots between accepted rows and drops finished sequences: not
        # the cache stock generate() would return, so none is returned
        **with_cache(None if batched else cache),
        tree_stats=decoder.stats,
    )


def prompt_mask_and_positions(input_ids: torch.Tensor, model_kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's attention mask (B, P) and the prompt positions stock generate() gives it: each row
    counts its own tokens from 0, padding at 0."""
    mask = model_kwargs.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(input_ids)
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return mask, positions


# ------------------------------------------------------------------ a round's fixed costs (for calibration)
def repeating_prompt(ids: torch.Tensor, period: int = 16, length: int = 96) -> torch.Tensor:
    """(1, length): the first ``period`` of ``ids`` over and over. A target continues the pattern and
    lookup finds it, so timed rounds accept several tokens and graft, as on real text."""
    return ids[:, :period].repeat(1, -(-length // period))[:, :length]


class _Alternate:
    """A round policy that drafts every other round (so both kinds are timed under the same conditions)."""

    def __init__(self):
        self.next_drafts = True

    def draft_this_round(self) -> bool:
        self.next_drafts = not self.next_drafts
        return not self.next_drafts

    def observe(self, drafted: bool, nodes: int, emitted: int) -> None:
        pass


@torch.no_grad()
def measure_fixed_costs(model, drafter, profile: CostProfile, ids: torch.Tensor,
                        rounds: int) -> tuple[float, float]:
    """``(round_s, step_s)``: the seconds an ``auto`` draft round pays besides its verify forward and what
    ``profile`` prices for the draft and the build (its lookup grafts, walk and commit and the loop's own
    work), and what a plain step pays besides its one-row forward. Medians over ``rounds`` of each,
    alternating, while decoding :func:`repeating_prompt` of ``ids`` (1, T); each round is timed from the end of
    the one before (the first, which holds the prefill, is not counted); never below 0. Leaving these out
    priced a draft round a few milliseconds low on a CPU, which tipped ``auto`` towards drafting where it did
    not pay."""
    device = model.get_input_embeddings().weight.device
    ends: list[float] = []
    unpriced: dict[bool, list[float]] = {True: [], False: []}  # drafted? -> seconds each round left unpriced

    def on_round(done) -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ends.append(time.perf_counter())
        if len(ends) > 1:  # the forward as it ran this time, so its timing noise stays out of the fixed cost
            priced = done.seconds["verify"]
            if done.drafted:
                priced += profile.draft_s + profile.build_s_per_node * done.tree.num_drafted
            unpriced[done.drafted].append(ends[-1] - ends[-2] - priced)

    ids = repeating_prompt(ids)
    loop = functools.partial(tree_decoding, drafter=drafter, options=TreeOptions("auto"), profile=profile,
                             policy=_Alternate(), on_round=on_round)
    new = 16 * (2 * rounds + 1)  # a bound: the rounds end it
    eos = model.generation_config.eos_token_id
    pad = eos[0] if isinstance(eos, list) else eos
    stock_generate(model)(ids.to(device), custom_generate=loop, do_sample=False, max_new_tokens=new,
                          min_new_tokens=new, pad_token_id=pad, attention_mask=torch.ones_like(ids, device=device),
                          stopping_criteria=StoppingCriteriaList([_AfterRounds(ends, 2 * rounds + 1)]))
    return tuple(max(0.0, statistics.median(unpriced[kind])) if unpriced[kind] else 0.0 for kind in (True, False))


class _AfterRounds(StoppingCriteria):
    """Ends a generation once ``timed`` holds ``rounds`` entries (one per round)."""

    def __init__(self, timed: list, rounds: int):
        self.timed, self.rounds = timed, rounds

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        done = len(self.timed) >= self.rounds
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)
