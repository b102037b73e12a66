"""Preemption risk: what a plan expects to lose when one of its devices is taken away
during the slot (docs/BUDGETS.md, "Preemption risk").

When a device a plan uses is preempted, the whole job stops and restarts on the devices left
from its last checkpoint: it loses `restart_s` seconds (detection, rendezvous, loading the
checkpoint) and the iterations run since that checkpoint. Checkpoints are taken every
`checkpoint_every` iterations and at every re-plan (docs/TRAIN.md), so with a preemption at a
uniformly random iteration of an N-iteration slot the expected loss is
min(checkpoint_every, N) / 2 iterations of the plan's batch time z. With P the probability
that at least one of the plan's devices is preempted in the slot (devices independent, per
device probability p_d: P = 1 - prod_d (1 - p_d)), the expected loss per iteration is

    P (restart_s + lost z) / N,   lost = min(checkpoint_every, N) / 2,

(z the batch time with its gradient sync), which the slot objective charges like migration
time: W (z (1 + P lost / N) + (migration + P restart_s) / N) + q.b + sum_k Q_k F_k. For a fixed
structure P and the sync are constants, so the shares stay an exact LP with the weight
W (1 + P lost / N) on the pipelines' makespan.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Preemption:
    """What a preemption costs a job: restart_s seconds (>= 0) to restart, and the iterations
    since the last checkpoint, taken every checkpoint_every iterations (>= 1) and at every
    re-plan."""

    restart_s: float
    checkpoint_every: int

    def __post_init__(self) -> None:
        if not (self.restart_s >= 0 and math.isfinite(self.restart_s)):
            raise ValueError(f"preemption.restart_s: expected finite seconds >= 0, got {self.restart_s}")
        if not (int(self.checkpoint_every) == self.checkpoint_every and self.checkpoint_every >= 1):
            raise ValueError(f"preemption.checkpoint_every: expected an integer >= 1, got {self.checkpoint_every}")

    def lost_iterations(self, iterations: int) -> float:
        """Expected iterations lost to one preemption in an N-iteration slot: min(checkpoint_every, N) / 2."""
        return min(int(self.checkpoint_every), max(int(iterations), 1)) / 2.0

    def lost_seconds(self, batch_time: float, iterations: int) -> float:
        """Expected seconds one preemption costs a plan of `batch_time` seconds per iteration."""
        return self.restart_s + self.lost_iterations(iterations) * batch_time


@dataclass(frozen=True)
class PreemptionRisk:
    """The slot's preemption risk as the planner sees it: hazard, per device of the state, the
    probability (0 <= p < 1) that it is preempted during this slot (a TP unit: that any of its
    devices is), and what a preemption costs."""

    hazard: tuple[float, ...]
    cost: Preemption

    def __post_init__(self) -> None:
        for i, p in enumerate(self.hazard):
            if not (0.0 <= p < 1.0):
                raise ValueError(f"PreemptionRisk.hazard[{i}]: expected a probability in [0, 1), got {p}")

    def probability(self, devices: Iterable[int]) -> float:
        """P: the probability that at least one of `devices` (distinct) is preempted."""
        return 0.0 - math.expm1(math.fsum(math.log1p(-self.hazard[d]) for d in devices))

    def terms(self, devices: Iterable[int], iterations: int) -> tuple[float, float]:
        """(kappa, extra seconds per iteration) of a plan on `devices` over an N-iteration slot:
        its expected loss per iteration is kappa z + extra (module docstring)."""
        n = max(int(iterations), 1)
        p = self.probability(devices)
        return p * self.cost.lost_iterations(n) / n, p * self.cost.restart_s / n

    def for_units(self, members: Iterable[Iterable[int]]) -> "PreemptionRisk":
        """The same risk over TP units (each a tuple of physical device indices)."""
        return PreemptionRisk(tuple(self.probability(u) for u in members), self.cost)
