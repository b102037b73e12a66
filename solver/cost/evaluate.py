"""Evaluate any plan: batch time = max group time + sync time, and its costs per budget."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model.plan import Plan, structure_violations, to_units
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
    step (cost.optimizer; 0 unless the workload models it); rates: per budget, what each second
    of batch time costs (USD/s, W: the held devices' prices and idle powers), so that
    `costs_at` can re-price the costs at another batch time.
    """

    batch_time: float
    group_times: tuple[float, ...]
    sync_time: float
    costs: tuple[float, ...]
    limits: tuple[float, ...] = ()
    optimizer_time: float = 0.0
    rates: tuple[float, ...] = ()

    def costs_at(self, batch_time: float) -> tuple[float, ...]:
        """The costs per iteration had the iteration taken `batch_time` seconds (the same
        shares and busy work; only the time-proportional part changes)."""
        rates = np.asarray(self.rates if self.rates else np.zeros(len(self.costs)), dtype=float)
        return tuple(float(c) for c in np.asarray(self.costs, dtype=float) + rates * (batch_time - self.batch_time))

    def objective(self, queues: Sequence[float], V: float) -> float:
        """Drift-plus-penalty V * T + sum_k Q_k c_k / Cbar_k (queues in budget units)."""
        return V * self.batch_time + float(budget_weights(self.limits, queues) @ np.asarray(self.costs))


def evaluate(plan: Plan, state: SlotState, coeffs: Sequence[GroupCoeffs] | None = None, *,
             check: bool = True) -> Evaluation:
    """Batch time, per-group times, sync time and costs of any structurally valid plan (every
    layer on one stage per group, known devices each used once, shares summing to the batch:
    model.plan.structure_violations; ValueError naming them otherwise; the rest of feasibility,
    memory and availability, is Plan.validate's job). coeffs: the groups' GroupCoeffs, if
    already known; check=False: the caller vouches for the structure (the search's own plans).
    A plan with TP stages is evaluated on its units (model.units). TypeError unless plan is a
    Plan and state a SlotState."""
    if not isinstance(plan, Plan):
        raise TypeError(f"evaluate: plan: expected a Plan, got {type(plan).__name__}: {plan!r:.80}")
    if not isinstance(state, SlotState):
        raise TypeError(f"evaluate: state: expected a SlotState (instance.state(t)), got "
                        f"{type(state).__name__}: {state!r:.80}")
    if check:
        bad = structure_violations(plan, state.workload.num_layers, state.n, state.workload.batch,
                                   state.device_names)
        if bad:
            raise ValueError("evaluate: expected a structurally valid plan, got one where "
                             + "; ".join(str(v) for v in bad[:3]) + ("; ..." if len(bad) > 3 else ""))
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
    cc = cost_coeffs(state, coeffs)
    return Evaluation(T, times, ts, tuple(float(x) for x in cc.costs(T, plan.shares)),
                      tuple(b.limit for b in state.budgets), to, tuple(float(r) for r in cc.R))


def lower_bound_time(state: SlotState) -> float:
    """B * sum_l (f_l + g_l) / sum of available speeds: no plan is faster (FLOP-based)."""
    s = float(state.speed[state.available.astype(bool)].sum())
    return state.workload.batch * state.workload.total_flops / s if s > 0 else float("inf")

