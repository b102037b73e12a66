"""Evaluate any plan: batch time = max group time + sync time, and its costs per budget."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model.plan import Plan, to_units
from ..model.state import SlotState
from .costs import budget_weights, cost_coeffs
from .pipeline import GroupCoeffs, group_coeffs
from .optimizer import optimizer_step_time
from .sync import sync_time


@dataclass(frozen=True)
class Evaluation:
    """Predicted outcome of one plan in one slot.

    batch_time: seconds per iteration (max group time + sync + optimizer step); group_times:
    seconds; sync_time: seconds; costs: per budget, in state.budgets order (USD, joules);
    limits: the budgets' limits, in the same order; optimizer_time: seconds of the optimizer
    step (cost.optimizer; 0 unless the workload models it).
    """

    batch_time: float
    group_times: tuple[float, ...]
    sync_time: float
    costs: tuple[float, ...]
    limits: tuple[float, ...] = ()
    optimizer_time: float = 0.0

    def objective(self, queues: Sequence[float], V: float) -> float:
        """Drift-plus-penalty V * T + sum_k Q_k c_k / Cbar_k (queues in budget units)."""
        return V * self.batch_time + float(budget_weights(self.limits, queues) @ np.asarray(self.costs))


def evaluate(plan: Plan, state: SlotState, coeffs: Sequence[GroupCoeffs] | None = None) -> Evaluation:
    """Batch time, per-group times, sync time and costs of any structurally valid plan
    (feasibility is Plan.validate's job). coeffs: the groups' GroupCoeffs, if already known.
    A plan with TP stages is evaluated on its units (model.units)."""
    if plan.uses_tp:
        if coeffs is not None:
            raise ValueError("evaluate: coeffs are per unit; pass none for a plan with TP stages")
        state, plan = to_units(plan, state)
    if coeffs is None:
        coeffs = [group_coeffs(state.at_micro_batch(g.micro_batch), g.devices, g.cuts, g.schedule,
                               g.recompute) for g in plan.groups]
    times = tuple(c.time(g.share) for c, g in zip(coeffs, plan.groups))
    structure = [(g.devices, g.cuts) for g in plan.groups]
    ts = sync_time(state, structure)
    to = optimizer_step_time(state, structure)
    T = max(times) + ts + to
    costs = cost_coeffs(state, coeffs).costs(T, plan.shares)
    return Evaluation(T, times, ts, tuple(float(x) for x in costs), tuple(b.limit for b in state.budgets), to)


def lower_bound_time(state: SlotState) -> float:
    """B * sum_l (f_l + g_l) / sum of available speeds: no plan is faster (FLOP-based)."""
    s = float(state.speed[state.available.astype(bool)].sum())
    return state.workload.batch * state.workload.total_flops / s if s > 0 else float("inf")

