"""``tree_strategy="auto"``: the best tree family for the drafter, cut by measured cost and acceptance.

Two decisions, both made on a :class:`~hf_treegen.costs.CostProfile` (measured costs) and on
what the target accepted so far (never on live timings, so identical calls build identical trees):

* **Which tree, how big** (:class:`AutoBuilder`). A drafter with a sequential head (Domino, DFlash2, DSpark)
  gets the path-conditional tree (DominoTree), a plain DFlash drafter the best-first tree over
  per-depth marginals (DDTree). Node masses
  are rescaled per depth by the accepted/predicted ratio learned so far (a drafter's own
  probabilities under- or over-state acceptance), re-ranked, and cut at the size that maximises
  expected tokens per second; the cap on the size comes from the verify curve (:func:`tree_cap`).
* **Draft at all?** (:class:`StepFallback` in :mod:`hf_treegen.generation.policy`). When draft rounds
  have been delivering fewer tokens per second than plain one-token steps would, the loop takes plain
  steps (no drafter forward) and probes with a draft round again after a growing wait.
"""

from __future__ import annotations

from ..costs import CostProfile, best_tree_size
from ..defaults import CANDIDATE_GROWTH, CAP_COST_RATIO, GRAFT_MEMORY
from ..tree import DraftTree
from .base import DEFAULT_NODE_TOPK, DEFAULT_TOP_M, BuildSettings, Node, TreeBuilder, depth_candidates
from .cond_adaptive import calibrated_order
from .conditional import ConditionalBuilder, tree_from_conditional
from .marginal import best_first_nodes

MIN_CAP, MAX_CAP = 4, 64


def tree_cap(profile, limit: int = MAX_CAP) -> int:
    """The largest tree (drafted nodes) whose verify forward costs at most ``CAP_COST_RATIO`` single
    steps, within [MIN_CAP, limit]: about 16 on a 2-core CPU, the full ``limit`` on a GPU where the
    curve is flat. Building nodes past it is wasted: the cost-aware cut would never keep them."""
    step = profile.step_seconds()
    cap = MIN_CAP
    for nodes in range(MIN_CAP, limit + 1):
        if profile.verify.seconds_for(nodes + 1) <= CAP_COST_RATIO * step:
            cap = nodes
    return cap


def marginal_nodes(block, settings: BuildSettings, budget: int) -> list[Node]:
    """DDTree's best-first nodes in the conditional builders' node format (parent, token, depth, score)."""
    ids, logp = depth_candidates(block, settings)
    return [Node(parent, ids[d][rank], d + 1, score)
            for parent, d, rank, score in best_first_nodes(logp, budget)]


class AutoBuilder(TreeBuilder):
    name = "auto"
    cost_aware = True

    def __init__(self, settings: BuildSettings, *, conditional: bool, **kwargs):
        super().__init__(settings, **kwargs)
        self.conditional = conditional
        self._conditional = ConditionalBuilder(settings) if conditional else None
        self.last_cut: int | None = None  # drafted nodes kept last round (None before the first)
        # running means of what lookup grafts add per round (rows verified, accepted tokens supplied):
        # the cut plans for them, since they are verified in the same forward
        self.graft_rows, self.graft_tokens = 0.0, 0.0

    @property
    def family(self) -> str:
        return "conditional" if self.conditional else "marginal"

    def candidate_budget(self) -> int:
        """How many candidates to build this round: the full cap in the first round, then room to grow
        to ``CANDIDATE_GROWTH`` times the last cut plus ``MIN_CAP``. Building a 64-node tree to keep 4
        of it costs more than a millisecond a round on a CPU; a cut that wants to grow gets more
        candidates the next round."""
        if self.last_cut is None:
            return self.settings.budget
        return min(self.settings.budget, CANDIDATE_GROWTH * self.last_cut + MIN_CAP)

    def candidate_nodes(self, block, budget: int) -> list[Node]:
        """Up to ``budget`` nodes, best first under the drafter's own law."""
        if self._conditional is not None:
            return self._conditional.nodes(block, budget)
        return marginal_nodes(block, self.settings, budget)

    def __call__(self, block, root_token: int) -> DraftTree:
        candidates = self.candidate_nodes(block, self.candidate_budget())
        nodes, masses = calibrated_order(candidates, self.calibration.ratio)
        self.last_cut = best_tree_size(masses, self.profile, self.graft_rows, self.graft_tokens)
        return tree_from_conditional(root_token, nodes[: self.last_cut])

    def observe_grafts(self, rows: int, tokens: int) -> None:
        self.graft_rows += GRAFT_MEMORY * (rows - self.graft_rows)
        self.graft_tokens += GRAFT_MEMORY * (tokens - self.graft_tokens)


def auto_settings(drafter, vocab_size: int, budget: int, temperature: float = 1.0) -> BuildSettings:
    """What ``auto`` builds with for ``drafter`` (used by :func:`hf_treegen.calibration.calibrate`)."""
    positions = drafter.config.num_draft_positions
    topk = DEFAULT_NODE_TOPK if drafter.config.has_sequential_head else budget
    return BuildSettings(budget=budget, topk=min(topk, vocab_size), top_m=min(DEFAULT_TOP_M, vocab_size),
                         temperature=temperature, max_depth=positions)


def default_auto_builder(drafter, model, budget: int = 16) -> AutoBuilder:
    """An AutoBuilder with a flat cost profile, for timing the build (its cut does not matter there)."""
    flat = CostProfile.from_verify_seconds({1: 1.0, MAX_CAP + 1: 1.0})
    settings = auto_settings(drafter, model.config.vocab_size, budget)
    return AutoBuilder(settings, profile=flat, conditional=drafter.config.has_sequential_head)
