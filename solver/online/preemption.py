"""Preemption in online runs (docs/BUDGETS.md, "Preemption risk"): the loss a run is charged
when a device of its plan is taken away, and the per-device hazards the planner weighs,
estimated from the trace's own history.

Charge. A device that is available in slot t - 1 and not in slot t was preempted during slot
t - 1. When the plan of slot t - 1 used it, the job restarted at the start of slot t from its
last checkpoint: slot t is charged Preemption.lost_seconds of that plan (restart plus the
expected iterations since the checkpoint, at that plan's batch time), amortised over the slot's
iterations like migration, for every policy alike.

Hazards. Up to slot t the run has seen, for each device d, x_d slot transitions s -> s + 1
(s + 1 <= t) in which d was available at s, and e_d of them in which it was gone at s + 1. The
estimate shrinks each device's rate towards the pool's (empirical Bayes with a Beta prior):

    p_pool = (sum_d e_d + PRIOR_SLOTS * PRIOR_RATE) / (sum_d x_d + PRIOR_SLOTS)
    p_d    = (e_d + DEVICE_SLOTS * p_pool) / (x_d + DEVICE_SLOTS)

so before any history every device has PRIOR_RATE, a device seen for a few slots keeps close to
the pool's rate, and one seen for many slots gets its own. Only slots up to t are read.
"""
from __future__ import annotations

import numpy as np

from ..model.plan import Plan
from ..model.preemption import Preemption, PreemptionRisk

PRIOR_RATE = 0.02
"""Per-slot preemption probability assumed before any history."""
PRIOR_SLOTS = 10.0
"""Weight of PRIOR_RATE in the pool's rate, in device-slot transitions."""
DEVICE_SLOTS = 4.0
"""Weight of the pool's rate in each device's, in slot transitions."""


def hazards(available: np.ndarray, t: int) -> np.ndarray:
    """(n,) per-device probability of preemption during slot t, from the availability (S, n)
    of slots 0..t only (module docstring)."""
    A = np.asarray(available, dtype=bool)[: int(t) + 1]
    if A.shape[0] < 2:
        return np.full(A.shape[1], PRIOR_RATE)
    exposed = A[:-1]
    lost = exposed & ~A[1:]
    x, e = exposed.sum(axis=0).astype(float), lost.sum(axis=0).astype(float)
    pool = (e.sum() + PRIOR_SLOTS * PRIOR_RATE) / (x.sum() + PRIOR_SLOTS)
    return (e + DEVICE_SLOTS * pool) / (x + DEVICE_SLOTS)


def risk_at(available: np.ndarray, t: int, cost: Preemption) -> PreemptionRisk:
    """The PreemptionRisk of slot t (hazards from slots 0..t)."""
    return PreemptionRisk(tuple(float(p) for p in hazards(available, t)), cost)


def preempted(previous: Plan | None, available: np.ndarray) -> tuple[int, ...]:
    """The devices of the previous slot's plan (physical indices) that are gone in this slot."""
    if previous is None:
        return ()
    avail = np.asarray(available, dtype=bool)
    return tuple(sorted(d for d in previous.devices if not avail[d]))
