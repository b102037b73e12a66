"""The online controller: observe a slot, let a policy plan it, charge the plan, update the
virtual queues, record one row (DESIGN.md section 3, "Lyapunov decomposition").

Infeasible slots. When a policy has no feasible plan (status "infeasible"), the slot is
recorded as a skip row by default (on_infeasible="skip"): no plan, no cost, batch time NaN,
and the queues unchanged. No iteration ran, and the budgets are averages per iteration, so
crediting the limit for an idle slot would let the controller overspend later. Skip rows are
left out of every average and out of the horizon of the bounds. on_infeasible="raise" raises
InfeasibleSlotError naming the slot and the reason instead.

Resumable runs: see online.checkpoint.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from ..errors import InfeasibleSlotError
from ..model.plan import plan_to_json
from ..model.state import Instance, SlotState
from .charge import Charge, charge_plan
from .checkpoint import ControllerState, _config
from .policies import Decision, Policy, make_policy
from .queues import initial_queues, update_queues


def _row(t: int, policy: str, V: float, state: SlotState, d: Decision, ch: Charge | None,
         q_before: Sequence[float], q_after: Sequence[float], objective: float) -> dict:
    row: dict[str, Any] = {"slot": t, "policy": policy, "V": float(V)}
    p = d.plan if ch is not None else None
    row["plan"] = p.summary(state) if p is not None else ""
    row["plan_json"] = plan_to_json(p)
    row["n_groups"] = len(p.groups) if p is not None else 0
    row["n_devices"] = len(p.devices) if p is not None else 0
    nan = float("nan")
    row["batch_time"] = ch.batch_time if ch else nan
    row["migration_time"] = ch.migration_time if ch else 0.0
    row["charged_time"] = ch.charged_time if ch else nan
    for k, b in enumerate(state.budgets):
        row[f"cost_{b.name}"] = ch.costs[k] if ch else 0.0
    for k, b in enumerate(state.budgets):
        row[f"queue_{b.name}_before"] = float(q_before[k])
        row[f"queue_{b.name}_after"] = float(q_after[k])
    row["objective"] = objective
    row["solve_time"] = float(d.solve_time)
    row["status"] = d.status
    row["message"] = d.message
    return row


def run_online(instance: Instance, V: float = 1.0, policy: str | Policy = "ours", *, options: Any = None,
               replan: bool = True, iterations_per_slot: int = 100, state_path: str | os.PathLike | None = None,
               start: int = 0, stop: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               on_infeasible: str = "skip") -> pd.DataFrame:
    """Run `policy` over slots start..stop-1 of `instance`; one row per slot (see `_row`).

    V: penalty weight (budget units per second of batch time). options: SolveOptions for the
    search (its replan / iterations_per_slot are overridden by the arguments here).
    state_path: JSON file of the controller state; if it exists the run continues from it
    (`start` is then ignored) and the returned frame holds every row so far.
    progress(done, total): called after each slot. on_infeasible: "skip" | "raise".
    """
    if on_infeasible not in ("skip", "raise"):
        raise ValueError(f"on_infeasible must be 'skip' or 'raise', not {on_infeasible!r}")
    if iterations_per_slot < 1:
        raise ValueError(f"iterations_per_slot must be >= 1, got {iterations_per_slot}")
    pol = policy if isinstance(policy, Policy) else make_policy(
        policy, options=options, replan=replan, iterations_per_slot=iterations_per_slot)
    name = pol.name
    config = _config(instance, name, V, replan, iterations_per_slot, options)
    limits = [b.limit for b in instance.budgets]
    stop = instance.num_slots if stop is None else min(int(stop), instance.num_slots)

    cs: ControllerState | None = None
    if state_path is not None and Path(state_path).exists():
        cs = ControllerState.load(state_path)
        if cs.config != config:
            diff = {k: (cs.config.get(k), v) for k, v in config.items() if cs.config.get(k) != v}
            raise ValueError(f"controller state {state_path} belongs to another run: {diff}")
        pol.load_state_dict(cs.policy_state)
    else:
        if not (0 <= start <= instance.num_slots):
            raise ValueError(f"start={start} outside 0..{instance.num_slots}")
        cs = ControllerState(config, int(start), initial_queues(len(limits)), None, pol.state_dict(), [])

    total = max(stop - cs.next_slot, 0)
    for done, t in enumerate(range(cs.next_slot, stop), start=1):
        state = instance.state(t)
        Q = cs.queues
        d = pol.decide(state, Q, V, cs.previous_plan)
        if d.plan is not None:
            bad = d.plan.validate(state)
            if bad:   # a policy must never hand back a wrong plan; treat as infeasible, loudly
                d = Decision(None, "infeasible", f"{name} returned an invalid plan: "
                             + "; ".join(str(v) for v in bad[:3]), d.solve_time)
        if d.plan is None:
            if on_infeasible == "raise":
                raise InfeasibleSlotError(f"slot {t} of {instance.name!r}: policy {name} found no feasible plan"
                                          f" ({d.message or 'no reason given'})")
            row = _row(t, name, V, state, d, None, Q, Q, float("nan"))
            prev = cs.previous_plan
            Qn = Q
        else:
            ch = charge_plan(d.plan, state, cs.previous_plan, replan=replan,
                             iterations_per_slot=iterations_per_slot)
            Qn = update_queues(Q, ch.costs, limits)
            row = _row(t, name, V, state, d, ch, Q, Qn, ch.objective(Q, V))
            prev = d.plan
        cs.rows.append(row)
        cs.next_slot, cs.queues, cs.previous_plan, cs.policy_state = t + 1, Qn, prev, pol.state_dict()
        if state_path is not None:
            cs.save(state_path)
        if progress is not None:
            progress(done, total)
    return rows_frame(cs.rows)


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """The rows as a DataFrame (an empty frame keeps the slot column)."""
    return pd.DataFrame(rows) if rows else pd.DataFrame({"slot": pd.Series(dtype=int)})
