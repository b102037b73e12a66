"""Charging a slot, the same for every policy: batch time, migration and costs per iteration.

A slot is `iterations_per_slot` (N) training iterations under one plan; all numbers are per
iteration. When the plan changes, moving parameters and optimizer state takes m seconds
(cost.migration.migration_time); one iteration's share of it, m / N, is added to the batch
time, and the devices of the new plan are paid for that time at their idle rates:
c_k += R_k * m / N (R_money = sum of prices in USD/s, R_energy = sum of idle powers in W).
With replan=False there is no migration charge at all and the search does not weigh it (the
article's setting).

Preemption (online.preemption): when the previous slot's plan lost a device, the restart and
the lost iterations, p seconds, are charged the same way, p / N per iteration, at the idle
rates of the previous plan's devices that are left (they sat through the restart and re-ran
the lost iterations), so the charge is the same whatever the slot's plan. With a preemption
risk on the state (model.preemption), the plan's expected loss per iteration r = kappa z +
extra is not charged (it may not happen) but weighs in the objective the controller chooses
by, as in the search's: V (T + r) + sum_k Q_k (c_k + R_k r) / Cbar_k.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..cost.costs import budget_weights, idle_rates
from ..cost.evaluate import Evaluation, evaluate
from ..cost.migration import migration_time
from ..model.plan import Plan
from ..model.state import SlotState
from ..subproblems.cache import SlotCache


@dataclass(frozen=True)
class Charge:
    """What one iteration of a plan costs in a slot.

    batch_time: the plan's predicted seconds per iteration; migration_time: seconds to move
    to it from the previous plan (whole slot; 0 when replan is off); charged_time: batch_time
    + migration_time / iterations_per_slot (seconds per iteration); costs: per budget, per
    iteration, migration share included (USD, J); preemption_time: seconds the previous slot's
    preemption costs this slot (whole slot; in charged_time and costs like migration);
    risk_time, risk_costs: the plan's expected preemption loss per iteration and its costs
    (weighed by `objective`, not charged)."""

    batch_time: float
    migration_time: float
    charged_time: float
    costs: tuple[float, ...]
    evaluation: Evaluation
    preemption_time: float = 0.0
    risk_time: float = 0.0
    risk_costs: tuple[float, ...] = ()

    def objective(self, queues: Sequence[float], V: float) -> float:
        """Drift-plus-penalty V * charged_time + sum_k Q_k c_k / Cbar_k (queues in budget units),
        with the expected preemption loss risk_time and its costs (module docstring)."""
        w = budget_weights(self.evaluation.limits, queues)
        costs = np.asarray(self.costs) + (np.asarray(self.risk_costs) if self.risk_costs else 0.0)
        return float(V * (self.charged_time + self.risk_time) + float(w @ costs))


def migration_seconds(previous: Plan | None, plan: Plan, state: SlotState) -> float:
    """Seconds to move from `previous` to `plan` (0 without a previous plan)."""
    if previous is None:
        return 0.0
    return float(migration_time(previous, plan, state))


def charge_plan(plan: Plan, state: SlotState, previous: Plan | None = None, *, replan: bool = True,
                iterations_per_slot: int = 100, cache: SlotCache | None = None,
                preemption_time: float = 0.0) -> Charge:
    """Charge `plan` in `state` the controller's way (module docstring), for any policy; cache:
    the slot's SlotCache (the same numbers, evaluations shared with the slot's searches);
    preemption_time: seconds the previous slot's preemption costs this slot (online.preemption)."""
    ev = cache.evaluation(plan) if cache is not None else evaluate(plan, state)
    mig = (cache.migration(previous, plan) if cache is not None else migration_seconds(previous, plan, state)) \
        if replan else 0.0
    n = max(int(iterations_per_slot), 1)
    per_iter = mig / n
    costs = np.asarray(ev.costs, dtype=float)
    risk, risk_costs = 0.0, ()
    R = None
    if (per_iter > 0 or state.risk is not None) and len(costs):
        R = idle_rates(state, plan.devices)   # every device held, TP peers included
    if per_iter > 0 and R is not None:
        costs = costs + R * per_iter
    if preemption_time > 0 and previous is not None and len(costs):
        left = [d for d in previous.devices if state.available[d]]
        costs = costs + idle_rates(state, left) * (preemption_time / n)
    per_iter += preemption_time / n
    if state.risk is not None:
        kappa, extra = state.risk.terms(plan.devices, n)
        risk = kappa * ev.batch_time + extra
        if R is not None:
            risk_costs = tuple(float(c) for c in R * risk)
    return Charge(ev.batch_time, mig, ev.batch_time + per_iter, tuple(float(c) for c in costs), ev,
                  float(preemption_time), risk, risk_costs)
