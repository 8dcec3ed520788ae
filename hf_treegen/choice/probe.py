"""Probe trees over the choice grammar and the forwards that evaluate them.

A probe is a :class:`~hf_treegen.tree.DraftTree` whose root is the first output token (decided by the
prefill) and whose other nodes are output tokens reachable from it. Evaluated in one forward on top of
the prompt's KV cache with ancestor-only attention and ``position_ids = P + depth``, every row's logits
are the logits serial decoding would compute after that row's path (the prefix-state argument: each
row sees exactly the keys, values and positions it would see serially).

Only rows that lead to a decision are worth a place in the probe: a forced tail (one allowed token at
every step until the end) needs no logits, so :func:`build_probe` leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..attention import attention_implementation, tree_forward_inputs
from ..tree import DraftTree
from .grammar import ChoiceGrammar, State

# keep_child(state, token, depth) -> bool: width policy for speculative probes (None keeps every child)
ChildFilter = Callable[[State, int, int], bool]


@dataclass(frozen=True)
class Probe:
    tree: DraftTree
    states: tuple  # states[i]: grammar state after row i's token
    rows: dict  # path tuple (output tokens) -> row index
    decision_rows: tuple[int, ...]  # rows whose next token is a decision: the only logits a walk needs

    @property
    def num_tokens(self) -> int:
        return self.tree.num_nodes

    @property
    def num_decisions(self) -> int:
        return len(self.decision_rows)

    def logit_index(self) -> dict[int, int]:
        """Tree row -> row of the logits that :func:`run_probe` and :func:`fused_forward` return."""
        return {row: i for i, row in enumerate(self.decision_rows)}


def build_probe(grammar: ChoiceGrammar, path: tuple[int, ...], keep_child: ChildFilter | None = None,
                max_rows: int | None = None, cached: int = 0, root_token: int | None = None) -> Probe | None:
    """The probe below ``path`` (verified output tokens): ``path[cached:]`` as a chain (the first
    ``cached`` tokens are already in the KV cache; at least one token must remain), then every node under
    its end that leads to a decision (filtered by ``keep_child``). With ``root_token`` (the prompt's last
    token, for a probe fused into the prefill) row 0 is that token, keyed by the empty path, and the whole
    of ``path`` hangs under it.

    Returns None when nothing after ``path`` needs a decision. ``max_rows`` caps the subtree (rows past
    the cap are dropped breadth-last, so the probe stays a valid tree; the walk falls back past it).
    """
    tokens, parents, states = [], [], []
    rows: dict[tuple[int, ...], int] = {}
    state = grammar.initial
    if root_token is not None:
        if cached:
            raise ValueError("a fused probe (root_token given) keeps its whole path in the tree: cached must be 0")
        rows[()] = 0
        tokens.append(root_token)
        parents.append(-1)
        states.append(state)
    elif not 0 <= cached < len(path):
        raise ValueError(f"build_probe needs an uncached path token to root the probe (path {len(path)}, cached {cached}).")
    for i, token in enumerate(path):
        state = grammar.advance(state, token)
        if i < cached:
            continue
        rows[path[: i + 1]] = len(tokens)
        tokens.append(token)
        parents.append(len(tokens) - 2)
        states.append(state)

    needs = _needs_decision_fn(grammar)
    if not needs(state):
        return None
    # Breadth-first, so a row cap keeps the shallow (most certainly needed) part of the tree.
    frontier = [(len(tokens) - 1, path, state)]
    depth = 0
    while frontier:
        depth += 1
        nxt = []
        for row, prefix, st in frontier:
            for token in grammar.allowed(st):
                child_state = grammar.advance(st, token)
                if not needs(child_state):
                    continue
                if grammar.is_decision(st) and keep_child is not None and not keep_child(st, token, depth):
                    continue
                if max_rows is not None and len(tokens) >= max_rows:
                    break
                child_path = prefix + (token,)
                rows[child_path] = len(tokens)
                tokens.append(token)
                parents.append(row)
                states.append(child_state)
                nxt.append((len(tokens) - 1, child_path, child_state))
        frontier = nxt
    tree = DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.zeros(len(tokens)))
    decision_rows = tuple(row for row, s in enumerate(states) if grammar.is_decision(s))
    return Probe(tree, tuple(states), rows, decision_rows)


def _needs_decision_fn(grammar: ChoiceGrammar):
    """needs(state): is there a decision at ``state`` or anywhere below it? (memoised per grammar)"""
    cache = grammar.__dict__.setdefault("_needs_decision_cache", {})

    def needs(state: State) -> bool:
        if state in cache:
            return cache[state]
        if grammar.is_complete(state):
            result = False
        elif grammar.is_decision(state):
            result = True
        else:
            (token,) = grammar.allowed(state)
            result = needs(grammar.advance(state, token))
        cache[state] = result
        return result

    return needs


# ------------------------------------------------------------------------------------ forwards
def _logit_dtype(model) -> torch.dtype:
    """float32 logits, or float64 for fp64 models (decisions and masses keep the model's precision)."""
    return torch.float64 if model.dtype == torch.float64 else torch.float32


def crop_to(cache, length: int) -> None:
    """Drop every cached position from ``length`` on (transformers' crop takes a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


@torch.no_grad()
def prefill(model, input_ids: torch.Tensor, forced: tuple[int, ...] = ()):
    """Root prefill as generate() runs it, with any ``forced`` output tokens appended to the prompt.
    Returns (logits (V,) after the last token, cache)."""
    from transformers import DynamicCache

    if forced:
        input_ids = torch.cat([input_ids, torch.tensor([forced], dtype=input_ids.dtype, device=input_ids.device)], 1)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1].to(_logit_dtype(model)), out.past_key_values


@torch.no_grad()
def fused_forward(model, input_ids: torch.Tensor, probe: Probe) -> torch.Tensor:
    """One forward over the prompt and a probe rooted at the prompt's last token (``root_token``):
    prompt rows causal, probe rows ancestor-only. Logits (D, V) of the probe's decision rows, in
    ``probe.decision_rows`` order (the LM head skips the rest)."""
    from ..attention import prefix_tree_attention_mask

    impl = attention_implementation(model)
    prefix = input_ids.shape[1] - 1
    tree = probe.tree
    ids = torch.cat([input_ids[:, :prefix], tree.tokens.to(input_ids.device)[None]], dim=1)  # (1, prefix+N)
    positions = torch.cat([torch.arange(prefix), tree.position_ids(prefix)]).to(input_ids.device)[None]
    mask = prefix_tree_attention_mask(tree.ancestor_mask(), prefix, impl, model.dtype, model.device)
    keep = torch.tensor(probe.decision_rows, device=input_ids.device) + prefix
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=False, logits_to_keep=keep)
    return out.logits[0].to(_logit_dtype(model))


@torch.no_grad()
def run_probe(model, cache, past: int, probe: Probe) -> torch.Tensor:
    """Logits (D, V) of the probe's decision rows, in ``probe.decision_rows`` order (the LM head skips the
    rest); the cache is cropped back to ``past`` afterwards."""
    impl = attention_implementation(model)
    inputs = tree_forward_inputs(probe.tree, past, impl, model.dtype, model.device)
    keep = torch.tensor(probe.decision_rows, device=model.device)
    try:
        out = model(**inputs, past_key_values=cache, use_cache=True, logits_to_keep=keep)
    finally:
        crop_to(cache, past)
    return out.logits[0].to(_logit_dtype(model))


@torch.no_grad()
def serial_logits(model, cache, past: int, path: tuple[int, ...]) -> torch.Tensor:
    """Logits (V,) after ``path`` computed the serial way (one token per forward, as generate() does);
    the cache is cropped back to ``past`` afterwards."""
    try:
        logits = None
        for i, token in enumerate(path):
            ids = torch.tensor([[token]], device=model.device)
            position = torch.tensor([[past + i]], device=model.device)
            out = model(input_ids=ids, position_ids=position, past_key_values=cache, use_cache=True)
            logits = out.logits[0, -1]
    finally:
        crop_to(cache, past)
    return logits.to(_logit_dtype(model))


@torch.no_grad()
def chunk_forward(model, cache, start: int, tokens: tuple[int, ...]) -> torch.Tensor:
    """Append ``tokens`` causally in one forward (jump-forward over a forced span); logits of the last one."""
    ids = torch.tensor([tokens], device=model.device)
    positions = torch.arange(start, start + len(tokens), device=model.device)[None]
    out = model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1].to(_logit_dtype(model))


def paths_tree(root_token: int, paths: list[tuple[int, ...]]) -> tuple[DraftTree, list[int]]:
    """The union trie of ``root + path`` for every path, and each path's row."""
    tokens, parents = [root_token], [-1]
    rows: dict[tuple[int, ...], int] = {(): 0}
    for path in paths:
        for i in range(1, len(path) + 1):
            if path[:i] not in rows:
                rows[path[:i]] = len(tokens)
                tokens.append(path[i - 1])
                parents.append(rows[path[: i - 1]])
    tree = DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.zeros(len(tokens)))
    return tree, [rows[path] for path in paths]


@torch.no_grad()
def forward_paths(model, cache, past: int, root_token: int, paths: list[tuple[int, ...]]) -> torch.Tensor:
    """Logits (len(paths), V) after ``root_token + path`` for each path, in one tree forward on top of a
    cache holding ``past`` positions (the root sits at position ``past``); the cache is cropped back."""
    tree, rows = paths_tree(root_token, paths)
    impl = attention_implementation(model)
    inputs = tree_forward_inputs(tree, past, impl, model.dtype, model.device)
    try:
        out = model(**inputs, past_key_values=cache, use_cache=True)
    finally:
        crop_to(cache, past)
    return out.logits[0, rows].to(_logit_dtype(model))
