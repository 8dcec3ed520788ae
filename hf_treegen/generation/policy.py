"""Round policies: whether the next round drafts a tree or takes a plain one-token step.

A plain step is a round whose tree is the root alone: no drafter forward, no build, one single-row
target forward. It emits exactly the token a draft round would have emitted first (the target's own
choice), so a policy changes speed, never tokens.
"""

from __future__ import annotations

from typing import Protocol

from ..defaults import FALLBACK_FIRST_WAIT, FALLBACK_MAX_WAIT, FALLBACK_MEMORY, FALLBACK_OPTIMISM


class RoundPolicy(Protocol):
    def draft_this_round(self) -> bool:
        """True: draft and verify a tree; False: a plain one-token step."""

    def observe(self, drafted: bool, nodes: int, emitted: int) -> None:
        """What the round did: whether it drafted, its drafted nodes, the tokens it emitted."""


class AlwaysDraft:
    """Every fixed strategy: a tree every round."""

    def draft_this_round(self) -> bool:
        return True

    def observe(self, drafted: bool, nodes: int, emitted: int) -> None:
        pass


class StepFallback:
    """Draft while draft rounds beat plain steps in tokens per second; else step, and probe again.

    Draft rounds are scored by the tokens they emitted over the seconds the cost profile says they
    cost, in decayed sums so that recent text counts most. The memory is long (``memory`` 0.95: about
    the last 20 rounds) because acceptance comes in streaks: a drafter that pays on average still has
    runs of rounds that accept nothing, and a short memory (0.8) read such runs as a drafter that does
    not pay, so on everyday chat it took plain steps in over half the rounds and lost speed to drafting
    every round. The sums start from two pretend rounds at
    ``optimism`` times a step's rate, so one unlucky round does not stop a good drafter. While the
    rate is below a plain step's (1 / one single-row forward), the loop takes ``wait`` plain steps,
    then probes with one draft round; each failed probe doubles the wait (up to ``max_wait``), a
    successful one resets it. A drafter that never matches thus costs a few probes per hundred tokens.
    """

    def __init__(self, profile, first_wait: int = FALLBACK_FIRST_WAIT, max_wait: int = FALLBACK_MAX_WAIT,
                 memory: float = FALLBACK_MEMORY, optimism: float = FALLBACK_OPTIMISM, typical_nodes: int = 8):
        self.profile = profile
        self.step_rate = 1.0 / profile.step_seconds()
        self.first_wait, self.max_wait, self.memory = first_wait, max_wait, memory
        self.next_wait = first_wait
        self.waiting = 0  # plain steps left before the next probe
        pretend = 2 * profile.round_seconds(typical_nodes)
        self.seconds = pretend  # decayed modelled seconds of draft rounds
        self.tokens = optimism * self.step_rate * pretend  # decayed tokens they emitted

    def draft_rate(self) -> float:
        return self.tokens / self.seconds

    def draft_this_round(self) -> bool:
        if self.waiting:
            self.waiting -= 1
            return False
        return True

    def observe(self, drafted: bool, nodes: int, emitted: int) -> None:
        if not drafted:
            return
        self.tokens = self.memory * self.tokens + emitted
        self.seconds = self.memory * self.seconds + self.profile.round_seconds(nodes)
        if self.draft_rate() < self.step_rate:
            self.waiting = self.next_wait
            self.next_wait = min(2 * self.next_wait, self.max_wait)
        else:
            self.next_wait = self.first_wait
