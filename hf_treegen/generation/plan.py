"""The plan of one tree-decoded call: every option resolved against the drafter, the target and the
machine's cost profile before the prefill. The decoder and its proposer only consume it.

    plan = plan_tree_call(model, drafter, options, generation_config)   # may calibrate, reads a datastore
    TreeDecoder(model, drafter, plan, ...).run(ids, cache)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..acceptance import DepthCalibration
from ..builders import BUILDERS, DFLASH_STRATEGIES, TreeBuilder
from ..builders.auto import AutoBuilder, tree_cap
from ..costs import CostProfile
from ..datastore import Datastore
from .options import LookupOptions, TreeOptions
from .policy import AlwaysDraft, RoundPolicy, StepFallback


@dataclass
class TreePlan:
    """What each round of one call does, decided once."""

    strategy: str
    builder: TreeBuilder  # cuts each drafted block into a tree (and learns from what the target accepts)
    policy: RoundPolicy  # whether a round drafts or takes a plain one-token step
    lookup: int  # tokens each copy at the root grafts per round (0: no lookup)
    datastore: Datastore | None  # where lookup also copies from (None: the context only)
    datastore_paths: int  # datastore continuations grafted per round
    inside: int  # tokens copied under each of the drafted tree's likeliest nodes (0: none)
    packed_from_rows: int  # target forwards of at least this many rows run on packed kernels
    head_shortcut: bool  # whether the prefill computes the LM head for its last row only


def plan_tree_call(model, drafter, options: TreeOptions, generation_config, profile: CostProfile | None = None,
                   calibration: DepthCalibration | None = None, batch_size: int = 1,
                   fixed_costs=None) -> TreePlan:
    """Resolve ``options`` for one call. ``profile``: the cost profile the cost-aware strategies cut
    trees by (a quick calibration when None and one is needed); ``calibration``: the per-depth
    acceptance to start from and add to (default: the drafter's ``depth_calibration``; where that is
    None too, a fresh one, so the call learns only from its own rounds); ``batch_size``: sequences decoded
    together, which share each forward's cost (:meth:`CostProfile.per_sequence`); ``fixed_costs``: what a
    quick calibration times a round's fixed costs with (the decode loop's timer)."""
    sampling = bool(generation_config.do_sample)
    if calibration is None:
        calibration = drafter.depth_calibration
    builder, policy = make_builder(options, model, drafter, generation_config, profile, calibration, batch_size,
                                   fixed_costs)
    profile = builder.profile
    lookup, inside = options.copy_tokens(sampling), options.inside_tokens(sampling)
    if options.strategy == "auto" and batch_size > 1 and options.lookup_options == LookupOptions():
        # in a batch every copied token is a verify row in a forward the batch's rows already fill, and
        # on the CPUs measured the copies cost more than they bring: auto copies only where asked to
        lookup = inside = 0
    return TreePlan(
        strategy=options.strategy,
        builder=builder,
        policy=policy,
        lookup=lookup,
        datastore=options.lookup_datastore(drafter, model.config.vocab_size),
        datastore_paths=options.datastore_paths,
        inside=inside,
        packed_from_rows=1 if profile is None else profile.packed_from_rows,
        head_shortcut=True if profile is None else profile.head_shortcut,
    )


def make_builder(options: TreeOptions, model, drafter, generation_config, profile: CostProfile | None = None,
                 calibration: DepthCalibration | None = None, batch_size: int = 1,
                 fixed_costs=None) -> tuple[TreeBuilder, RoundPolicy]:
    """The call's tree builder and round policy (see :func:`plan_tree_call` for ``profile`` and ``calibration``)."""
    if options.strategy not in DFLASH_STRATEGIES and not drafter.config.has_sequential_head:
        raise ValueError(
            f"tree_strategy={options.strategy!r} needs a drafter with a sequential head (hf_treegen.DominoDrafter "
            f"or hf_treegen.DFlash2Drafter); a plain DFlash drafter supports {', '.join(DFLASH_STRATEGIES)}."
        )
    positions, vocab = drafter.config.num_draft_positions, model.config.vocab_size
    if options.strategy == "auto":
        profile = profile.per_sequence(batch_size) if profile else \
            _calibrate(model, drafter, batch_size=batch_size, fixed_costs=fixed_costs)
        conditional = drafter.config.has_sequential_head
        settings = options.resolve(positions, vocab, generation_config, conditional=conditional,
                                   default_budget=tree_cap(profile))
        builder = AutoBuilder(settings, profile=profile, calibration=calibration, conditional=conditional)
        return builder, StepFallback(profile)
    settings = options.resolve(positions, vocab, generation_config)
    cls = BUILDERS[options.strategy]
    if cls.cost_aware:
        profile = profile.per_sequence(batch_size) if profile else \
            _calibrate(model, drafter, max_rows=settings.budget + 1, batch_size=batch_size, fixed_costs=fixed_costs)
    return cls(settings, profile=profile, calibration=calibration), AlwaysDraft()


def _calibrate(model, drafter, max_rows: int | None = None, batch_size: int = 1, fixed_costs=None) -> CostProfile:
    """The machine's costs, measured briefly on first use and cached; for a batch, what each sequence pays
    (a user's own profile is scaled instead: :meth:`CostProfile.per_sequence`)."""
    from .. import calibration  # looked up at call time: tests pin calibration.calibrate

    rows = max(calibration.DEFAULT_MAX_ROWS, max_rows or 0)
    return calibration.calibrate(model, drafter, max_rows=rows, quick=True, batch_size=batch_size,
                                 fixed_costs=fixed_costs)
