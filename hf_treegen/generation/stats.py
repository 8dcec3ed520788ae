"""TreeStats: what one tree-decoding call did, round by round, and where the time went."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..acceptance import DepthCalibration


@dataclass
class TreeStats:
    """What the tree rounds of one generate() call did (``out.tree_stats`` with
    ``return_dict_in_generate=True``): tokens emitted and nodes drafted per round, plain steps, and the
    seconds spent in each stage; ``tau`` and ``summary()`` condense them."""

    strategy: str
    accepted_lengths: list[int] = field(default_factory=list)  # tokens emitted per round (bonus included)
    # nodes verified per round besides the root: the builder's and those lookup grafted onto its tree
    tree_sizes: list[int] = field(default_factory=list)
    plain_steps: int = 0  # rounds without a draft (auto's one-token steps); counted in rounds
    lookup_tokens: int = 0  # accepted tokens that came from context lookup (tree_lookup), not the drafter
    prefill_s: float = 0.0
    draft_s: float = 0.0
    build_s: float = 0.0
    verify_s: float = 0.0  # the target forward over the tree
    walk_s: float = 0.0  # logits processors and token choices along the walk
    commit_s: float = 0.0  # KV-cache compaction and drafter context update
    calibration: DepthCalibration = field(default_factory=DepthCalibration, repr=False)

    @property
    def rounds(self) -> int:
        return len(self.accepted_lengths)

    @property
    def tau(self) -> float:
        """Mean tokens per round, bonus included (1.0 means no draft token was ever accepted)."""
        return sum(self.accepted_lengths) / self.rounds if self.rounds else 0.0

    @property
    def new_tokens(self) -> int:
        return sum(self.accepted_lengths)

    def per_round_ms(self) -> dict[str, float]:
        n = max(self.rounds, 1)
        return {stage: 1000 * getattr(self, f"{stage}_s") / n for stage in ("draft", "build", "verify", "walk", "commit")}

    def calibration_table(self) -> list[dict]:
        """Per depth: drafter-predicted mass per round vs the rate at which the target accepted that depth."""
        rounds = max(self.rounds, 1)
        cal = self.calibration
        return [{"depth": d, "predicted_per_round": cal.predicted[d] / rounds,
                 "accepted_per_round": cal.accepted.get(d, 0.0) / rounds}
                for d in sorted(cal.predicted)]

    def summary(self) -> dict:
        return {
            "strategy": self.strategy,
            "rounds": self.rounds,
            "tau": round(self.tau, 4),
            "new_tokens": self.new_tokens,
            "mean_tree_size": round(sum(self.tree_sizes) / max(len(self.tree_sizes), 1), 2),
            "plain_steps": self.plain_steps,
            "lookup_tokens": self.lookup_tokens,
            "prefill_ms": round(1000 * self.prefill_s, 2),
            **{f"{k}_ms_per_round": round(v, 3) for k, v in self.per_round_ms().items()},
        }
