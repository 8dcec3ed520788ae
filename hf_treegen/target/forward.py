"""Every forward of the target model that tree decoding and compiled choice run, in one place.

Decoding (the tree loop, calibration):

    decode_prefill     the prompt into the cache, as generate() prefills it: float32 logits of the last
                       token, and the TreeVerifier for the rest of the call
    TreeVerifier       one forward over a draft tree on top of the cache: float32 logits of every row

Compiled choice (logits in :func:`logit_dtype`: float64 for fp64 models, so margins keep the model's
precision; float32 otherwise):

    prefill            the prompt, plus any forced output tokens, into a fresh cache
    tree_logits        chosen rows of a tree on top of the cache (the cache is cropped back)
    fused_tree_logits  the prompt and a tree under its last token in one forward, no cache
    chunk_forward      tokens appended causally in one forward (jump-forward); logits of the last
    serial_logits      one token per forward, exactly as generate() computes them
    forward_paths      the logits after each of several paths, in one tree forward

and :func:`stock_generate`, transformers' own generate() of a model, also when it was ``enable()``d.
"""

from __future__ import annotations

import torch

from ..ops import linear_rows
from ..tree import DraftTree
from .cache import crop_to, new_cache
from .compat import cache_of, with_cache
from .hooks import LastHidden
from .masks import attention_implementation, prefix_tree_attention_mask, tree_forward_inputs
from .packed import linears_for_rows, runs_packed


def logit_dtype(model) -> torch.dtype:
    """float32 logits, or float64 for fp64 models (decisions and masses keep the model's precision)."""
    return torch.float64 if model.dtype == torch.float64 else torch.float32


def stock_generate(model):
    """``model.generate`` as transformers defines it, bound to ``model``. enable() swaps the model's
    class for a subclass that records the original one as ``_tree_base`` (see generation/mixin.py)."""
    cls = type(model)
    return vars(cls).get("_tree_base", cls).generate.__get__(model)


# ------------------------------------------------------------------------------------------ decoding
class HeadShortcut:
    """A verify forward that applies the target's LM head itself, as ``linear_rows`` does (on a CPU,
    (V, H) @ (H, N) is 2-4x faster than F.linear for a few rows: 20-40 ms of a 250 ms verify on
    SmolLM2). The decoder (``get_decoder()``) gives the final hidden rows.

    Used only where that is exactly what the model computes: a bias-free ``nn.Linear`` head on a CPU,
    and the model's own prefill logits equal to the head applied to the prefill's last hidden row (a
    model that soft-caps or scales its logits fails that check and keeps its own forward)."""

    def __init__(self, model):
        self.head = model.get_output_embeddings()
        self.decoder, self.weight = model.get_decoder(), self.head.weight

    def pays(self, rows: int) -> bool:
        """Whether the shortcut beats the model's own head for ``rows`` rows: not where the head runs
        packed (inside :func:`~hf_treegen.target.packed_linears`, from its ``min_rows`` on)."""
        return not runs_packed(self.head, rows)

    @classmethod
    def if_exact(cls, model, last_hidden: torch.Tensor | None, logits: torch.Tensor) -> "HeadShortcut | None":
        """last_hidden (1, H) the prefill's final hidden row, logits (1, V) the model's own."""
        head = model.get_output_embeddings()
        if last_hidden is None or last_hidden.device.type != "cpu" or not isinstance(head, torch.nn.Linear) \
                or head.bias is not None:
            return None
        ours = linear_rows(last_hidden, head.weight)
        scale = float(logits.abs().max()) + 1.0
        return cls(model) if bool(torch.allclose(ours, logits, rtol=0.0, atol=1e-4 * scale)) else None

    def __call__(self, inputs: dict, cache) -> torch.Tensor:
        hidden = self.decoder(**inputs, **with_cache(cache), use_cache=True).last_hidden_state[0]  # (N+1, H)
        return linear_rows(hidden, self.weight)  # (N+1, V) float32


class TreeVerifier:
    """The verify forwards of one generation: a tree on top of the cache -> float32 logits of every
    row, (N+1, V), as stock generate() would compute each row's logits (float32, whatever the model's
    dtype). Made by :func:`decode_prefill`, which checks whether the LM-head shortcut is exact."""

    def __init__(self, model, head: HeadShortcut | None = None):
        self.model, self.head = model, head
        self.impl = attention_implementation(model)
        self.device = model.get_input_embeddings().weight.device

    def __call__(self, tree: DraftTree, past: int, cache) -> torch.Tensor:
        inputs = tree_forward_inputs(tree, past, self.impl, self.model.dtype, self.device)
        with linears_for_rows(self.model, tree.num_nodes):
            if self.head is not None and self.head.pays(tree.num_nodes):
                return self.head(inputs, cache)  # (N+1, V)
            out = self.model(**inputs, **with_cache(cache), use_cache=True)
        return out.logits[0].to(torch.float32)  # (N+1, V)


def decode_prefill(model, input_ids: torch.Tensor, cache,
                   head_shortcut: bool = True) -> tuple[torch.Tensor, TreeVerifier]:
    """input_ids (1, P) into ``cache`` -> (logits (1, V) float32 of the last token, the call's verifier).
    ``head_shortcut=False``: the verifier always runs the model's own head (a cost profile says which
    is faster on this machine, ``CostProfile.head_shortcut``)."""
    with LastHidden(model) as last:
        out = model(input_ids=input_ids, **with_cache(cache), use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1].to(dtype=torch.float32, copy=True)  # (1, V), as generate() copies them
    head = HeadShortcut.if_exact(model, last.row, logits) if head_shortcut else None
    return logits, TreeVerifier(model, head)


def next_logits(model, input_ids: torch.Tensor, cache) -> torch.Tensor:
    """Append ``input_ids`` (1, T) to ``cache`` causally -> the last token's logits (V,), as the model
    returns them (a plain decode step, or a prefill)."""
    out = model(input_ids=input_ids, **with_cache(cache), use_cache=True, logits_to_keep=1)
    return out.logits[0, -1]


# ------------------------------------------------------------------------------------------ choice
@torch.no_grad()
def prefill(model, input_ids: torch.Tensor, forced: tuple[int, ...] = ()):
    """Root prefill as generate() runs it, with any ``forced`` output tokens appended to the prompt.
    Returns (logits (V,) after the last token, cache)."""
    if forced:
        input_ids = torch.cat([input_ids, torch.tensor([forced], dtype=input_ids.dtype, device=input_ids.device)], 1)
    cache = new_cache(model)
    out = model(input_ids=input_ids, **with_cache(cache), use_cache=True, logits_to_keep=1)
    return out.logits[0, -1].to(logit_dtype(model)), cache_of(out)


@torch.no_grad()
def fused_tree_logits(model, input_ids: torch.Tensor, tree: DraftTree, rows: tuple[int, ...]) -> torch.Tensor:
    """One forward over the prompt and ``tree`` rooted at the prompt's last token: prompt rows causal,
    tree rows ancestor-only. Logits (len(rows), V) of the tree rows ``rows``, in that order (the LM head
    skips the others)."""
    impl = attention_implementation(model)
    prefix = input_ids.shape[1] - 1
    ids = torch.cat([input_ids[:, :prefix], tree.tokens.to(input_ids.device)[None]], dim=1)  # (1, prefix+N)
    positions = torch.cat([torch.arange(prefix), tree.position_ids(prefix)]).to(input_ids.device)[None]
    mask = prefix_tree_attention_mask(tree.ancestor_mask(), prefix, impl, model.dtype, model.device)
    keep = torch.tensor(rows, device=input_ids.device) + prefix
    out = model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=False, logits_to_keep=keep)
    return out.logits[0].to(logit_dtype(model))


@torch.no_grad()
def tree_logits(model, cache, past: int, tree: DraftTree, rows: tuple[int, ...], crop: bool = True) -> torch.Tensor:
    """Logits (len(rows), V) of the tree rows ``rows``, in that order (the LM head skips the others),
    for ``tree`` on top of a cache holding ``past`` positions. ``crop``: crop the cache back to
    ``past`` afterwards (False: the tree's rows stay appended, for the caller to keep some with
    :func:`~hf_treegen.target.keep_cache_rows`; on an error they are dropped either way)."""
    impl = attention_implementation(model)
    inputs = tree_forward_inputs(tree, past, impl, model.dtype, model.device)
    keep = torch.tensor(rows, device=model.device)
    try:
        out = model(**inputs, **with_cache(cache), use_cache=True, logits_to_keep=keep)
    except BaseException:
        crop_to(cache, past)
        raise
    if crop:
        crop_to(cache, past)
    return out.logits[0].to(logit_dtype(model))


@torch.no_grad()
def serial_logits(model, cache, past: int, path: tuple[int, ...]) -> torch.Tensor:
    """Logits (V,) after ``path`` computed the serial way (one token per forward, as generate() does);
    the cache is cropped back to ``past`` afterwards."""
    try:
        logits = None
        for i, token in enumerate(path):
            ids = torch.tensor([[token]], device=model.device)
            position = torch.tensor([[past + i]], device=model.device)
            out = model(input_ids=ids, position_ids=position, **with_cache(cache), use_cache=True)
            logits = out.logits[0, -1]
    finally:
        crop_to(cache, past)
    return logits.to(logit_dtype(model))


@torch.no_grad()
def chunk_forward(model, cache, start: int, tokens: tuple[int, ...]) -> torch.Tensor:
    """Append ``tokens`` causally in one forward (jump-forward over a forced span); logits of the last one."""
    ids = torch.tensor([tokens], device=model.device)
    positions = torch.arange(start, start + len(tokens), device=model.device)[None]
    out = model(input_ids=ids, position_ids=positions, **with_cache(cache), use_cache=True, logits_to_keep=1)
    return out.logits[0, -1].to(logit_dtype(model))


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
        out = model(**inputs, **with_cache(cache), use_cache=True)
    finally:
        crop_to(cache, past)
    return out.logits[0, rows].to(logit_dtype(model))
