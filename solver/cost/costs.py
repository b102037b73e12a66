"""Per-iteration costs, linear in batch time and shares: c_k = R_k T + sum_g e_kg b_g + F_k.

Units: USD for money budgets, joules for energy budgets; R per second, e per sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model.state import SlotState
from .pipeline import GroupCoeffs


@dataclass(frozen=True)
class CostCoeffs:
    """c_k = R[k] * T + sum_g e[k, g] * b_g + F[k], one row per budget in state order.
    R: per second; e: per sample; F: per iteration (units of the budget)."""

    R: np.ndarray
    e: np.ndarray
    F: np.ndarray

    def costs(self, batch_time: float, shares: Sequence[float]) -> np.ndarray:
        return self.R * batch_time + self.e @ np.asarray(shares, dtype=float) + self.F


def cost_coeffs(state: SlotState, groups: Sequence[GroupCoeffs]) -> CostCoeffs:
    K, m = len(state.budgets), len(groups)
    R, e, F = np.zeros(K), np.zeros((K, m)), np.zeros(K)
    held = [d for g in groups for d in g.devices]
    for k, b in enumerate(state.budgets):
        if b.kind == "money":
            R[k] = float(sum(state.price[d] for d in held))
        elif b.kind == "energy":
            R[k] = float(sum(state.devices[d].idle_power_w for d in held))
            e[k] = [float(g.busy_j_per_sample.sum()) for g in groups]
        elif b.kind == "device_energy":
            i = state.device_index(b.device)
            for gi, g in enumerate(groups):
                if i in g.devices:
                    R[k] = state.devices[i].idle_power_w
                    e[k, gi] = float(g.busy_j_per_sample[g.devices.index(i)])
        else:
            raise ValueError(f"budget {b.name!r}: unknown kind {b.kind!r}")
    return CostCoeffs(R, e, F)


def budget_weights(limits: Sequence[float], queues: Sequence[float]) -> np.ndarray:
    """Per-budget weights Q_k / Cbar_k of the slot objective V T + sum_k Q_k c_k / Cbar_k.

    Queues are kept in units of their budget (queues.update_queues), so a cost counts
    relative to its limit and V weighs one second against one budget's worth of cost.
    () means every queue is 0."""
    if len(queues) == 0:
        return np.zeros(len(limits))
    return np.asarray(queues, dtype=float) / np.asarray(limits, dtype=float)
