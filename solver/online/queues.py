"""Virtual queues of the long-term budgets and the bounds they give (DESIGN.md section 3,
"Lyapunov decomposition" and "Guarantees"; THEORY_NOTES section 3.7).

One queue per budget, in the order of `state.budgets`, measured in units of that budget's
limit (dimensionless: Q = 0.5 means half a budget's worth of accumulated excess). This is
DESIGN's queue divided by Cbar_k; the slot objective is V T + sum_k Q_k c_k / Cbar_k, so V
weighs one second of batch time against one budget's worth of cost whatever the units
(USD, joules). Everything here is a pure function of plain numbers.

    Q_k(0) = 0,   Q_k(t+1) = max(Q_k(t) + c_k(t) / Cbar_k - 1, 0)

(a) sample-path overshoot, any trace, any horizon H:
        (1/H) sum_{t<H} (c_k(t) / Cbar_k - 1) <= (Q_k(H) - Q_k(0)) / H
(b) with one budget and a slack plan x0(t) with c(x0) / Cbar <= 1 - delta in every slot that
    the solver weighs (its slot objective <= that of x0 plus C):
        Q(t) <= max(Q(0), (V * DeltaT + C) / delta + ymax)   for all t
    (DeltaT >= T(x0(t)) - T(x(t)) seconds, ymax >= |c(t) / Cbar - 1|), so overshoot is O(V/H).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def initial_queues(num_budgets: int) -> tuple[float, ...]:
    """Q(0) = 0 for every budget."""
    return (0.0,) * num_budgets


def update_queues(Q: Sequence[float], costs: Sequence[float], limits: Sequence[float]) -> tuple[float, ...]:
    """One step of the queue law in budget units: Q_k + c_k / Cbar_k - 1, floored at 0.

    This is DESIGN's Q_k + c_k - Cbar_k divided by Cbar_k: the same controller with every
    budget measured relative to its limit, so that V needs no per-unit tuning.

    Raises ValueError when the three sequences differ in length or a value is not finite.
    """
    if not (len(Q) == len(costs) == len(limits)):
        raise ValueError(f"update_queues: {len(Q)} queues, {len(costs)} costs, {len(limits)} limits")
    out = []
    for q, c, cb in zip(Q, costs, limits):
        q, c, cb = float(q), float(c), float(cb)
        if not (math.isfinite(q) and math.isfinite(c) and math.isfinite(cb)):
            raise ValueError(f"update_queues: non-finite value (Q={q}, c={c}, Cbar={cb})")
        if cb <= 0:
            raise ValueError(f"update_queues: budget limit Cbar={cb} must be positive")
        out.append(max(q + c / cb - 1.0, 0.0))
    return tuple(out)


def queue_trajectory(costs: np.ndarray, limits: Sequence[float],
                     Q0: Sequence[float] | None = None) -> np.ndarray:
    """(H+1, K) queues Q(0..H) for a (H, K) array of per-slot costs."""
    costs = np.atleast_2d(np.asarray(costs, dtype=float))
    H, K = costs.shape
    out = np.zeros((H + 1, K))
    out[0] = initial_queues(K) if Q0 is None else Q0
    for t in range(H):
        out[t + 1] = update_queues(out[t], costs[t], limits)
    return out


def average_overshoot(costs: np.ndarray, limits: Sequence[float]) -> np.ndarray:
    """(K,) time-averaged relative excess (1/H) sum_t (c_k(t) / Cbar_k - 1): 0.01 = 1% over."""
    costs = np.atleast_2d(np.asarray(costs, dtype=float))
    if costs.shape[0] == 0:
        return np.zeros(costs.shape[1])
    return costs.mean(axis=0) / np.asarray(limits, dtype=float) - 1.0


def overshoot_bound(Q_T: Sequence[float], T: int, Q_0: Sequence[float] | None = None) -> np.ndarray:
    """Guarantee (a): (Q_k(T) - Q_k(0)) / T bounds the average overshoot of budget k over T slots."""
    if T <= 0:
        raise ValueError(f"overshoot_bound: horizon T={T} must be positive")
    q = np.asarray(Q_T, dtype=float)
    q0 = np.zeros_like(q) if Q_0 is None else np.asarray(Q_0, dtype=float)
    return (q - q0) / T


def queue_bound(V: float, delta_T: float, C: float, delta: float, ymax: float, Q0: float = 0.0) -> float:
    """Guarantee (b), one budget: max(Q0, (V * delta_T + C) / delta + ymax).

    V: penalty weight (budget units per second); delta_T: seconds, an upper bound of
    T(x0(t)) - T(x(t)); C: the solver's additive gap in objective units (0 when x0 is
    among its candidates); delta > 0: slack of x0 below the limit; ymax: max |c - Cbar|.
    """
    if delta <= 0:
        raise ValueError(f"queue_bound: slack delta={delta} must be positive")
    return max(Q0, (V * max(delta_T, 0.0) + max(C, 0.0)) / delta + ymax)


def queue_bound_multi(V: float, delta_T: float, C: float, delta: float, ymax: Sequence[float],
                      L0: float = 0.0) -> float:
    """Guarantee (b) for K >= 1 budgets (THEORY_NOTES 3.7): every Q_k(t) <= sqrt(2 * Lmax),
    Lmax = max(L0, M^2/2 + B_L + V*delta_T + C), M = (B_L + V*delta_T + C)/delta,
    B_L = sum_k ymax_k^2 / 2, L0 = sum_k Q_k(0)^2 / 2."""
    if delta <= 0:
        raise ValueError(f"queue_bound_multi: slack delta={delta} must be positive")
    BL = 0.5 * float(np.sum(np.square(ymax)))
    M = (BL + V * max(delta_T, 0.0) + max(C, 0.0)) / delta
    return math.sqrt(2.0 * max(L0, 0.5 * M * M + BL + V * max(delta_T, 0.0) + max(C, 0.0)))
