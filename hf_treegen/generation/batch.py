"""Tree decoding of a batch: one drafter forward and one target forward per round for every sequence
still running, each sequence with its own tree, its own accepted tokens and its own stop.

Each sequence is decided exactly as it would be alone (:class:`~hf_treegen.generation.loop.TreeDecoder`):
its tokens are the target's own decisions on its own prefix, its cache holds its committed tokens only
(:mod:`hf_treegen.target.batch`), and the logits processors and stopping criteria see the row as stock
batched generate() shows it (left padding, prompt, tokens so far). Sequences that stop leave the batch;
the output is padded on the right with the pad token, as stock generate() pads finished rows.

Per round, for the sequences still running:

    policy            one decision for the batch: draft, or a plain one-token step for every sequence
    draft_all         one drafter forward over every sequence's block; the plan's builder cuts each tree
    verify            one target forward over all trees (batch_tree_inputs: padding, context, ancestors)
    walk, commit      per sequence, as the unbatched loop does; the cache keeps each one's accepted rows
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..drafters.dflash import DraftSession
from ..speculation import Walk, walk_tree
from ..target import FeatureTap, attention_implementation, with_cache
from ..target.batch import batch_prefill_mask, batch_tree_inputs, keep_batch_rows, select_sequences
from ..tree import DraftTree
from .rounds import TreeRound, choose_token, graft_lookup, learn_from_round
from .plan import TreePlan
from .stats import TreeStats


@dataclass
class Sequence:
    """One row of the batch while it runs."""

    row: int  # its row in the caller's batch
    ids: torch.Tensor  # (1, P + t): left padding, prompt, emitted tokens (the row as stock generate() sees it)
    pad: int  # left padding tokens
    session: DraftSession  # the drafter's context of its committed tokens
    stopped: bool = False
    # this round: node -> its processed scores; the tree; rows the builder made; the walk
    decisions: dict[int, torch.Tensor] = field(default_factory=dict)
    tree: DraftTree | None = None
    built_nodes: int = 0

    @property
    def committed(self) -> torch.Tensor:
        """(T,) the prompt without padding and every emitted token; the last is the next tree's root."""
        return self.ids[0, self.pad:]

    @property
    def cached(self) -> int:
        """Committed tokens in the target cache: all but the root."""
        return self.ids.shape[1] - self.pad - 1


class BatchTreeDecoder:
    """One batched generation with tree speculative decoding (see the module docstring)."""

    def __init__(self, model, drafter, plan: TreePlan, logits_processor, stopping_criteria, generation_config,
                 walk=walk_tree, on_round: Callable[[TreeRound], None] | None = None):
        self.model, self.drafter, self.plan = model, drafter, plan
        self.logits_processor, self.stopping_criteria = logits_processor, stopping_criteria
        self.do_sample = bool(generation_config.do_sample)
        self.pad_token = _pad_token(generation_config)
        self.walk, self.on_round = walk, on_round
        self.impl = attention_implementation(model)
        self.device = model.get_input_embeddings().weight.device
        self.stats = TreeStats(plan.strategy)
        self.finished: dict[int, torch.Tensor] = {}  # row -> (1, P + t) its final ids

    # ------------------------------------------------------------------------------ the loop
    def run(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache) -> torch.Tensor:
        """ids (B, P) left-padded prompts, mask (B, P) 1 on prompt tokens, positions (B, P) as stock
        generate() computes them; ``cache`` an empty dynamic cache. Returns (B, P + new), right-padded."""
        self.cache, self.valid = cache, mask.bool().to(self.device)  # valid: (B, L) slots holding committed tokens
        with FeatureTap(self.model, self.drafter.config.target_layer_ids) as self.tap:
            self.running = self.prefill(ids, mask, positions)
            while self.running:
                self.round()
        rows = [self.finished[b] for b in range(ids.shape[0])]
        width = max(r.shape[1] for r in rows)
        out = ids.new_full((len(rows), width), self.pad_token)
        for b, r in enumerate(rows):
            out[b, :r.shape[1]] = r[0]
        return out

    def final_rows(self) -> list[torch.Tensor]:
        """After :meth:`run`: each row's (1, P + t) ids up to its stop, in the caller's order."""
        return [self.finished[b] for b in range(len(self.finished))]

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> list[Sequence]:
        """Every prompt into the cache and its drafter context; each sequence's first token."""
        t0 = time.perf_counter()
        attend = batch_prefill_mask(mask, self.impl, self.model.dtype, self.device)
        out = self.model(input_ids=ids, attention_mask=attend, position_ids=positions, **with_cache(self.cache),
                         use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1].to(dtype=torch.float32, copy=True)  # (B, V)
        features = self.tap.take_all()  # (B, P, k*H)
        sequences = []
        for b in range(ids.shape[0]):
            pad = int((mask[b] == 0).sum())
            session = self.drafter.new_session()
            session.extend(features[b, pad:], torch.arange(ids.shape[1] - pad))
            sequence = Sequence(b, ids[b:b + 1], pad, session)
            token, scores = self.decide(sequence.ids, logits[b:b + 1])
            self.emit(sequence, token, scores)
            sequences.append(sequence)
        self.stats.prefill_s += time.perf_counter() - t0
        return self.drop_stopped(sequences)

    def round(self) -> None:
        """One round for every running sequence: propose, one verify forward, walk and commit each."""
        t0 = time.perf_counter()
        drafting = self.propose(self.running)
        t1 = time.perf_counter()
        length = self.valid.shape[1]
        inputs = batch_tree_inputs([s.tree for s in self.running], self.valid, [s.cached for s in self.running],
                                   self.impl, self.model.dtype, self.device)
        logits = self.model(**inputs, **with_cache(self.cache), use_cache=True).logits  # (B, W, V)
        t2 = time.perf_counter()
        walks = [self.walk(s.tree, self._decider(s, logits[b])) for b, s in enumerate(self.running)]
        t3 = time.perf_counter()
        kept = [self.commit(s, w) for s, w in zip(self.running, walks)]
        self.keep_rows(length, walks, kept)
        t4 = time.perf_counter()
        self.observe(drafting, walks, kept)
        seconds = {"propose": t1 - t0, "verify": t2 - t1, "walk": t3 - t2, "commit": t4 - t3}
        self.record(drafting, walks, kept, seconds)
        self.running = self.drop_stopped(self.running)

    # ------------------------------------------------------------------------------ the parts
    def propose(self, sequences: list[Sequence]) -> bool:
        """Each sequence's tree for this round (``sequence.tree``); returns whether the round drafts."""
        drafting = self.plan.policy.draft_this_round()
        roots = [int(s.committed[-1]) for s in sequences]
        if not drafting:  # a plain one-token step for every sequence
            for s, root in zip(sequences, roots):
                s.tree, s.built_nodes = DraftTree.chain(root, []), 1
            return False
        t0 = time.perf_counter()
        sessions, starts = [s.session for s in sequences], [s.cached for s in sequences]
        if all(isinstance(session, DraftSession) for session in sessions):
            blocks = DraftSession.draft_all(sessions, roots, starts)
        else:  # a drafter with sessions of its own kind drafts them one by one
            blocks = [session.draft(root, start) for session, root, start in zip(sessions, roots, starts)]
        t1 = time.perf_counter()
        for s, tree in zip(sequences, self.plan.builder.build_all(blocks, roots)):
            s.built_nodes = tree.num_nodes
            s.tree = graft_lookup(self.plan, tree, s.committed.cpu()) if self.plan.lookup else tree
        self.stats.draft_s += t1 - t0
        self.stats.build_s += time.perf_counter() - t1
        return True

    def _decider(self, sequence: Sequence, logits: torch.Tensor) -> Callable[[int], int]:
        """decide(node) for the walk of ``sequence``'s tree; logits (W, V) its rows of the verify."""
        sequence.decisions = {}
        tokens = sequence.tree.tokens.to(sequence.ids.device)

        def decide(node: int) -> int:
            path = sequence.tree.path_to(node)[1:]
            node_ids = torch.cat([sequence.ids, tokens[path][None]], dim=-1)  # the node's own row, padded as stock's
            token, scores = self.decide(node_ids, logits[node:node + 1].to(torch.float32))
            sequence.decisions[node] = scores
            return token

        return decide

    def decide(self, ids: torch.Tensor, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """ids (1, T) the row's own sequence, logits (1, V) float32 -> (token, processed scores)."""
        scores = self.logits_processor(ids, logits.clone())
        return choose_token(scores, self.do_sample), scores

    def emit(self, sequence: Sequence, token: int, scores: torch.Tensor) -> None:
        """Append one token to ``sequence``; it stops where a stopping criterion fires on its row."""
        sequence.ids = torch.cat([sequence.ids, sequence.ids.new_tensor([[token]])], dim=-1)
        sequence.stopped = bool(self.stopping_criteria(sequence.ids, None).any())

    def commit(self, sequence: Sequence, walk: Walk) -> int:
        """Emit the walk's tokens until the sequence stops; returns how many were emitted."""
        emitted = 0
        for node, token in zip(walk.nodes, walk.tokens):
            self.emit(sequence, token, sequence.decisions[node])
            emitted += 1
            if sequence.stopped:
                break
        return emitted

    def keep_rows(self, length: int, walks: list[Walk], kept: list[int]) -> None:
        """Each sequence's cache keeps its emitted tokens but the last (its first ``kept`` accepted rows);
        the drafter context of a running one gets their features."""
        rows = [w.nodes[:k] for w, k in zip(walks, kept)]
        features = self.tap.take_all()  # (B, W, k*H)
        self.valid = torch.cat([self.valid, keep_batch_rows(self.cache, length, rows).to(self.device)], dim=1)
        for b, (s, nodes) in enumerate(zip(self.running, rows)):
            if not s.stopped:
                at = torch.tensor(nodes, device=features.device)
                s.session.extend(features[b, at], s.cached - len(nodes) + torch.arange(len(nodes)))

    def observe(self, drafting: bool, walks: list[Walk], kept: list[int]) -> None:
        """The policy learns from the batch's mean round; the builder from each sequence's tree."""
        count = len(walks)
        nodes = sum(s.tree.num_drafted for s in self.running) / count
        self.plan.policy.observe(drafting, nodes, sum(len(w.nodes) for w in walks) / count)
        if drafting:
            for s, w in zip(self.running, walks):
                learn_from_round(self.plan, self.stats, s.tree, s.built_nodes, w.nodes)

    def record(self, drafting: bool, walks: list[Walk], kept: list[int], seconds: dict[str, float]) -> None:
        stats = self.stats
        for s, w, k in zip(self.running, walks, kept):
            stats.accepted_lengths.append(k)
            stats.tree_sizes.append(s.tree.num_drafted)
            stats.lookup_tokens += sum(node >= s.built_nodes for node in w.nodes[1:k])
            if self.on_round is not None:
                self.on_round(TreeRound(s.cached - k, s.tree, s.built_nodes, drafting, w, k, seconds))
        stats.plain_steps += not drafting
        stats.verify_s += seconds["verify"]
        stats.walk_s += seconds["walk"]
        stats.commit_s += seconds["commit"]

    def drop_stopped(self, sequences: list[Sequence]) -> list[Sequence]:
        """The sequences still running; the cache and ``valid`` keep only their rows."""
        for s in sequences:
            if s.stopped:
                self.finished[s.row] = s.ids
        running = [i for i, s in enumerate(sequences) if not s.stopped]
        if len(running) < len(sequences) and running:
            keep = torch.tensor(running)
            select_sequences(self.cache, keep)
            self.valid = self.valid[keep.to(self.device)]
        return [sequences[i] for i in running]


def _pad_token(generation_config) -> int:
    """The token stock generate() writes after a finished row. generate() resolves it into the private
    ``_pad_token_tensor`` (falling back to EOS with a warning); no public field holds the resolved value."""
    resolved = getattr(generation_config, "_pad_token_tensor", None)
    if resolved is not None:
        return int(resolved.reshape(-1)[0])
    if generation_config.pad_token_id is not None:
        return int(generation_config.pad_token_id)
    return 0
