"""Set-level inference over the constrained choice policy, and the interaction diagnostic.

The policy p is the greedy processor's distribution: at every output step, the softmax of the model's
logits restricted to the allowed tokens. An ordered choice pi has probability p(pi) (the product along
its tokens); a *set* S has P(S) = sum of p(pi) over the orderings of S.

``map_set`` finds argmax_S P(S) by best-first expansion of output prefixes in order of their mass,
many prefixes per forward (one tree-causal probe evaluates them all). It stops with a certificate when
the winner's explored mass is at least every rival's upper bound

    UB(S) = explored(S) + sum of the masses of open prefixes whose committed labels fit inside S

(an open prefix's mass bounds all its completions), or returns ``certified=False`` when the forward
budget runs out. ``ordering_distribution`` enumerates every ordering exactly (small k, b), which is the
oracle for tests and the basis of :func:`interaction_mass`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .grammar import ChoiceGrammar, State
from ..target import crop_to, forward_paths, new_cache, next_logits


@dataclass
class MapSetResult:
    labels: tuple[str, ...]  # the winning set, in choice order (empty if no ordering completed in budget)
    indices: tuple[int, ...]
    explored_mass: float  # probability of the winner's orderings expanded so far (a lower bound)
    rival_bound: float  # upper bound on every other set's probability
    certified: bool  # explored_mass >= rival_bound: the winner is provably the MAP set
    forwards: int
    expansions: int  # prefixes whose next-token distribution was computed
    open_mass: float  # probability mass still unexpanded
    explored: dict = field(default_factory=dict)  # frozenset(indices) -> explored mass


def _masked_log_probs(logits: torch.Tensor, allowed: tuple[int, ...]) -> list[float]:
    values = logits[list(allowed)].double()
    return torch.log_softmax(values, dim=0).tolist()


@torch.no_grad()
def map_set(model, input_ids: torch.Tensor, grammar: ChoiceGrammar, max_forwards: int = 16,
            batch: int = 64, exact_rivals_up_to: int = 5000) -> MapSetResult:
    """Order-marginalised MAP set with a branch-and-bound certificate (see the module docstring)."""
    ids = input_ids.to(model.device)
    past = ids.shape[1] - 1
    cache = new_cache(model)
    if past > 0:
        next_logits(model, ids[:, :past], cache)
    root_token = int(ids[0, -1])

    explored: dict[frozenset, float] = {}
    open_heap: list[tuple[float, int, tuple, State]] = []  # (-log mass, tie, path, state)
    counter = itertools.count()

    def push(logmass: float, path: tuple, state: State) -> None:
        # follow forced tokens at once: they carry probability 1 under the masked policy
        while not grammar.is_complete(state) and len(grammar.allowed(state)) == 1:
            token = grammar.allowed(state)[0]
            path, state = path + (token,), grammar.advance(state, token)
        if grammar.is_complete(state):
            key = frozenset(grammar.chosen(state))
            explored[key] = explored.get(key, 0.0) + math.exp(logmass)
        else:
            heapq.heappush(open_heap, (-logmass, next(counter), path, state))

    push(0.0, (), grammar.initial)
    forwards = expansions = 0
    sets = _all_sets(grammar) if math.comb(len(grammar.choices), grammar.num_select) <= exact_rivals_up_to else None
    while True:
        winner, rival = _certificate(grammar, explored, open_heap, sets)
        if open_heap == [] or explored.get(winner, 0.0) >= rival or forwards >= max_forwards:
            break
        chosen = [heapq.heappop(open_heap) for _ in range(min(batch, len(open_heap)))]
        logits = forward_paths(model, cache, past, root_token, [path for _, _, path, _ in chosen])
        crop_to(cache, past)
        forwards += 1
        for (neg, _, path, state), row_logits in zip(chosen, logits):
            allowed = grammar.allowed(state)
            for token, logp in zip(allowed, _masked_log_probs(row_logits, allowed)):
                push(-neg + logp, path + (token,), grammar.advance(state, token))
            expansions += 1
    winner, rival = _certificate(grammar, explored, open_heap, sets)
    best = explored.get(winner, 0.0)
    indices = tuple(sorted(winner))
    certified = bool(indices) and best >= rival
    return MapSetResult(tuple(grammar.choices[i] for i in indices), indices, best, rival, certified, forwards,
                        expansions, sum(math.exp(-n) for n, _, _, _ in open_heap), dict(explored))


def _all_sets(grammar: ChoiceGrammar) -> np.ndarray:
    """Bitmask of every b-subset of the k labels (for exact rival bounds)."""
    combos = itertools.combinations(range(len(grammar.choices)), grammar.num_select)
    return np.array([sum(1 << i for i in c) for c in combos], dtype=np.int64)


def _certificate(grammar, explored, open_heap, sets) -> tuple[frozenset, float]:
    """(current winner, upper bound on the probability of every other set)."""
    winner = max(explored, key=lambda s: (explored[s], tuple(-i for i in sorted(s))), default=frozenset())
    masses = np.array([math.exp(-n) for n, _, _, _ in open_heap], dtype=np.float64)
    if sets is None or masses.size == 0:
        best_other = max((m for s, m in explored.items() if s != winner), default=0.0)
        return winner, best_other + float(masses.sum())
    committed = np.array([sum(1 << i for i in grammar.committed_labels(st)) for _, _, _, st in open_heap],
                         dtype=np.int64)
    fits = (committed[None, :] & ~sets[:, None]) == 0  # (sets, open)
    bounds = fits.astype(np.float64) @ masses  # (sets,)
    win_mask = sum(1 << i for i in winner)
    rival = 0.0
    for mask, bound in zip(sets.tolist(), bounds.tolist()):
        if mask == win_mask:
            continue
        key = frozenset(i for i in range(len(grammar.choices)) if mask >> i & 1)
        rival = max(rival, explored.get(key, 0.0) + bound)
    return winner, rival


# ----------------------------------------------------------------------------- exact enumeration
@torch.no_grad()
def ordering_distribution(model, input_ids: torch.Tensor, grammar: ChoiceGrammar,
                          max_orderings: int = 5000) -> dict[tuple[int, ...], float]:
    """p(pi) for every ordered choice pi, from one probe over the whole action tree (small k, b only)."""
    count = math.perm(len(grammar.choices), grammar.num_select)
    if count > max_orderings:
        raise ValueError(f"{count} orderings is too many to enumerate (max_orderings={max_orderings}); "
                         f"use map_set() for larger k and b.")
    ids = input_ids.to(model.device)
    past = ids.shape[1] - 1
    cache = new_cache(model)
    if past > 0:
        next_logits(model, ids[:, :past], cache)
    # every decision prefix, found by walking the automaton
    decisions, stack = [], [((), grammar.initial)]
    while stack:
        path, state = stack.pop()
        if grammar.is_complete(state):
            continue
        if grammar.is_decision(state):
            decisions.append((path, state))
        for token in grammar.allowed(state):
            stack.append((path + (token,), grammar.advance(state, token)))
    logits = forward_paths(model, cache, past, int(ids[0, -1]), [p for p, _ in decisions])
    log_probs = {path: dict(zip(grammar.allowed(st), _masked_log_probs(row, grammar.allowed(st))))
                 for (path, st), row in zip(decisions, logits)}
    result: dict[tuple[int, ...], float] = {}
    stack = [((), grammar.initial, 0.0)]
    while stack:
        path, state, logmass = stack.pop()
        if grammar.is_complete(state):
            order = grammar.chosen(state)
            result[order] = result.get(order, 0.0) + math.exp(logmass)
            continue
        for token in grammar.allowed(state):
            step = log_probs[path][token] if path in log_probs else 0.0
            stack.append((path + (token,), grammar.advance(state, token), logmass + step))
    return result


def set_distribution(orderings: dict[tuple[int, ...], float]) -> dict[frozenset, float]:
    sets: dict[frozenset, float] = {}
    for order, mass in orderings.items():
        sets[frozenset(order)] = sets.get(frozenset(order), 0.0) + mass
    return sets


# ------------------------------------------------------------------------------- interactions
@dataclass
class InteractionReport:
    i_seq: float  # sum over slots t >= 2 of E_{prefix ~ P} || p_t(. | prefix) - q_t(. | prefix) ||_1
    tv: float  # total variation between the serial ordering law P and the unary shortcut's Q
    bound_holds: bool  # tv <= i_seq / 2 (chain rule of total variation)
    unary_labels: tuple[str, ...]  # top-b labels of the first-slot distribution
    first_slot: dict  # label -> p_1(label)


def interaction_mass(grammar: ChoiceGrammar, orderings: dict[tuple[int, ...], float]) -> InteractionReport:
    """Compare the sequential policy P with the unary shortcut Q = Plackett-Luce(p_1), exactly."""
    b, k = grammar.num_select, len(grammar.choices)
    prefix_mass: dict[tuple[int, ...], float] = {}
    for order, mass in orderings.items():
        for t in range(b + 1):
            prefix_mass[order[:t]] = prefix_mass.get(order[:t], 0.0) + mass
    p1 = [prefix_mass.get((i,), 0.0) for i in range(k)]

    def q_next(prefix) -> list[float]:
        rest = sum(p1[i] for i in range(k) if i not in prefix)
        return [0.0 if i in prefix or rest == 0 else p1[i] / rest for i in range(k)]

    i_seq = 0.0
    for prefix, mass in prefix_mass.items():
        if not 1 <= len(prefix) < b or mass == 0:
            continue
        p_next = [prefix_mass.get(prefix + (i,), 0.0) / mass for i in range(k)]
        i_seq += mass * sum(abs(a - c) for a, c in zip(p_next, q_next(prefix)))

    def q_of(order) -> float:
        value = 1.0
        for t, label in enumerate(order):
            value *= q_next(order[:t])[label]
        return value

    every = set(orderings) | set(itertools.permutations(range(k), b))
    tv = 0.5 * sum(abs(orderings.get(o, 0.0) - q_of(o)) for o in every)
    top = sorted(range(k), key=lambda i: (-p1[i], i))[:b]
    return InteractionReport(i_seq, tv, tv <= i_seq / 2 + 1e-12, tuple(grammar.choices[i] for i in top),
                             {grammar.choices[i]: p1[i] for i in range(k)})
