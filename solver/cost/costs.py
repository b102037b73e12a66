"""Per-iteration costs, linear in batch time and shares: c_k = R_k T + sum_g e_kg b_g + F_k.

Money also pays egress where the state's network has prices: bytes per sample across priced
pipeline boundaries go into e, the sync's bytes across priced ring edges into F.

Units: USD for money budgets, joules for energy budgets; R per second, e per sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model.network import egress_usd
from ..model.state import SlotState
from .pipeline import GroupCoeffs
from .sync import buckets


@dataclass(frozen=True)
class CostCoeffs:
    """c_k = R[k] * T + sum_g e[k, g] * b_g + F[k], one row per budget in state order.
    R: per second; e: per sample; F: per iteration (units of the budget)."""

    R: np.ndarray
    e: np.ndarray
    F: np.ndarray

    def costs(self, batch_time: float, shares: Sequence[float]) -> np.ndarray:
        return self.R * batch_time + self.e @ np.asarray(shares, dtype=float) + self.F


def _egress(state: SlotState, groups: Sequence[GroupCoeffs]) -> tuple[np.ndarray, float]:
    """(USD per sample of each group, USD per iteration) of the bytes that cross a priced
    boundary: each pipeline boundary carries its activation forward and its gradient back
    (out_bytes per sample each way); each sync ring edge carries 2 (m-1)/m of its bucket."""
    net = state.network
    per_sample = np.zeros(len(groups))
    for gi, g in enumerate(groups):
        if len(g.devices) > 1:
            d = np.asarray(g.devices, dtype=int)
            o = state.workload.out_bytes[np.asarray(g.cuts[:-1], dtype=int) - 1]
            per_sample[gi] = egress_usd(net, d[:-1], d[1:], o) + egress_usd(net, d[1:], d[:-1], o)
    rings = buckets(state, [(g.devices, g.cuts) for g in groups])
    fixed = 0.0
    if rings is not None:
        cols, nxt, nbytes = rings
        m = len(groups)
        fixed = egress_usd(net, cols.ravel(), nxt.ravel(),
                           np.broadcast_to(2.0 * (m - 1) / m * nbytes, cols.shape).ravel())
    return per_sample, fixed


def cost_coeffs(state: SlotState, groups: Sequence[GroupCoeffs]) -> CostCoeffs:
    K, m = len(state.budgets), len(groups)
    e, F = np.zeros((K, m)), np.zeros(K)
    R = idle_rates(state, [d for g in groups for d in g.devices])
    egress = _egress(state, groups) if state.network is not None and state.network.egress is not None else None
    for k, b in enumerate(state.budgets):
        if b.kind == "money":
            if egress is not None:
                e[k], F[k] = egress
        elif b.kind == "energy":
            e[k] = [g.busy_j for g in groups]
        elif b.kind == "device_energy":
            i, frac = budget_device(state, b.device)
            for gi, g in enumerate(groups):
                if i in g.devices:
                    e[k, gi] = float(g.busy_j_per_sample[g.devices.index(i)]) * frac
    return CostCoeffs(R, e, F)


def idle_rates(state: SlotState, held: Sequence[int]) -> np.ndarray:
    """R per budget of holding the devices `held` (distinct): the prices (USD/s) for money, the
    idle powers (W) for energy and the named device's share of its idle power for device
    energy."""
    R = np.zeros(len(state.budgets))
    for k, b in enumerate(state.budgets):
        if b.kind == "money":
            R[k] = float(sum(state.price[d] for d in held))
        elif b.kind == "energy":
            R[k] = float(sum(state.devices[d].idle_power_w for d in held))
        elif b.kind == "device_energy":
            i, frac = budget_device(state, b.device)
            if i in held:
                R[k] = state.devices[i].idle_power_w * frac
        else:
            raise ValueError(f"budget {b.name!r}: unknown kind {b.kind!r}")
    return R


def budget_device(state: SlotState, name: str) -> tuple[int, float]:
    """(index in state, fraction of its power that is the named device's): on a state of TP
    units, the unit holding that device and 1/t (its members draw alike)."""
    if state.members is None:
        return state.device_index(name), 1.0
    i = state.base.device_index(name)
    for k, unit in enumerate(state.members):
        if i in unit:
            return k, 1.0 / len(unit)
    return -1, 0.0


def budget_weights(limits: Sequence[float], queues: Sequence[float]) -> np.ndarray:
    """Per-budget weights Q_k / Cbar_k of the slot objective V T + sum_k Q_k c_k / Cbar_k.

    Queues are kept in units of their budget (queues.update_queues), so a cost counts
    relative to its limit and V weighs one second against one budget's worth of cost.
    () means every queue is 0."""
    if len(queues) == 0:
        return np.zeros(len(limits))
    return np.asarray(queues, dtype=float) / np.asarray(limits, dtype=float)
