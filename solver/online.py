"""The online controller: observe a slot, let a policy plan it, charge the plan, update the
virtual queues, record one row (DESIGN.md section 3, "Lyapunov decomposition").

Charging (the same for every policy). A slot is `iterations_per_slot` (N) training
iterations under one plan; all numbers are per iteration. When the plan changes, moving
parameters and optimizer state takes m seconds (solver.replan.migration_time); one iteration's
share of it, m / N, is added to the batch time, and the devices of the new plan are paid for
that time at their idle rates: c_k += R_k * m / N (R_money = sum of prices in USD/s,
R_energy = sum of idle powers in W). With replan=False there is no migration charge at all
and the search does not weigh it (the article's setting).

Infeasible slots. When a policy has no feasible plan (status "infeasible"), the slot is
recorded as a skip row by default (on_infeasible="skip"): no plan, no cost, batch time NaN,
and the queues unchanged. No iteration ran, and the budgets are averages per iteration, so
crediting the limit for an idle slot would let the controller overspend later. Skip rows are
left out of every average and out of the horizon of the bounds. on_infeasible="raise" raises
InfeasibleSlotError naming the slot and the reason instead.

Resumable runs. With state_path, the controller state (queues, previous plan, the policy's
own state, next slot and every row so far) is written to that JSON file after each slot
(atomically), and a later call with the same path continues from it: a run stopped after slot
t and resumed gives exactly the rows of an unbroken run (solve_time aside).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from .costmodel import Evaluation, budget_weights, cost_coeffs, evaluate, group_coeffs
from .errors import InfeasibleSlotError
from .model import Instance, SlotState
from .plan import Group, Plan
from .policies import Decision, Policy, make_policy
from .queues import initial_queues, overshoot_bound, update_queues

STATE_VERSION = 1

# ---------------------------------------------------------------- plans as JSON


def plan_to_dict(plan: Plan) -> dict:
    """{"groups": [{"devices": [...], "cuts": [...], "share": b}, ...]} (device indices)."""
    return {"groups": [{"devices": [int(d) for d in g.devices], "cuts": [int(c) for c in g.cuts],
                        "share": int(g.share)} for g in plan.groups]}


def plan_from_dict(d: dict) -> Plan:
    """Inverse of plan_to_dict; ValueError on a malformed dict."""
    try:
        return Plan(tuple(Group(tuple(int(x) for x in g["devices"]), tuple(int(x) for x in g["cuts"]),
                                int(g["share"])) for g in d["groups"]))
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed plan JSON: {e!r} in {d!r}") from e


def plan_to_json(plan: Plan | None) -> str:
    """Compact JSON of a plan; "null" for None."""
    return json.dumps(None if plan is None else plan_to_dict(plan), separators=(",", ":"))


def plan_from_json(text: str) -> Plan | None:
    d = json.loads(text)
    return None if d is None else plan_from_dict(d)


# ---------------------------------------------------------------- charging


@dataclass(frozen=True)
class Charge:
    """What one iteration of a plan costs in a slot.

    batch_time: the plan's predicted seconds per iteration; migration_time: seconds to move
    to it from the previous plan (whole slot; 0 when replan is off); charged_time: batch_time
    + migration_time / iterations_per_slot (seconds per iteration); costs: per budget, per
    iteration, migration share included (USD, J)."""

    batch_time: float
    migration_time: float
    charged_time: float
    costs: tuple[float, ...]
    evaluation: Evaluation

    def objective(self, queues: Sequence[float], V: float) -> float:
        """Drift-plus-penalty V * charged_time + sum_k Q_k c_k / Cbar_k (queues in budget units)."""
        w = budget_weights(self.evaluation.limits, queues)
        return float(V * self.charged_time + float(w @ np.asarray(self.costs)))


def migration_seconds(previous: Plan | None, plan: Plan, state: SlotState) -> float:
    """Seconds to move from `previous` to `plan` (0 without a previous plan)."""
    if previous is None:
        return 0.0
    from .replan import migration_time
    return float(migration_time(previous, plan, state))


def charge_plan(plan: Plan, state: SlotState, previous: Plan | None = None, *, replan: bool = True,
                iterations_per_slot: int = 100) -> Charge:
    """Charge `plan` in `state` the controller's way (module docstring), for any policy."""
    ev = evaluate(plan, state)
    mig = migration_seconds(previous, plan, state) if replan else 0.0
    per_iter = mig / max(int(iterations_per_slot), 1)
    costs = np.asarray(ev.costs, dtype=float)
    if per_iter > 0 and len(costs):
        R = cost_coeffs(state, [group_coeffs(state, g.devices, g.cuts) for g in plan.groups]).R
        costs = costs + R * per_iter
    return Charge(ev.batch_time, mig, ev.batch_time + per_iter, tuple(float(c) for c in costs), ev)


# ---------------------------------------------------------------- controller state


@dataclass
class ControllerState:
    """Everything needed to continue a run: JSON-able."""

    config: dict
    next_slot: int
    queues: tuple[float, ...]
    previous_plan: Plan | None
    policy_state: dict
    rows: list[dict]

    def to_dict(self) -> dict:
        return {"version": STATE_VERSION, "config": self.config, "next_slot": self.next_slot,
                "queues": list(self.queues),
                "previous_plan": None if self.previous_plan is None else plan_to_dict(self.previous_plan),
                "policy_state": self.policy_state, "rows": self.rows}

    @classmethod
    def from_dict(cls, d: dict) -> "ControllerState":
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"controller state version {d.get('version')!r}, expected {STATE_VERSION}")
        prev = d.get("previous_plan")
        return cls(d["config"], int(d["next_slot"]), tuple(float(q) for q in d["queues"]),
                   None if prev is None else plan_from_dict(prev), d.get("policy_state", {}), list(d["rows"]))

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), allow_nan=True))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ControllerState":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _config(instance: Instance, policy: str, V: float, replan: bool, iterations_per_slot: int,
            options: Any) -> dict:
    return {"instance": instance.name, "num_slots": instance.num_slots, "policy": policy, "V": float(V),
            "replan": bool(replan), "iterations_per_slot": int(iterations_per_slot),
            "options": repr(options), "budgets": [[b.name, b.kind, float(b.limit)] for b in instance.budgets]}


# ---------------------------------------------------------------- the loop


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


# ---------------------------------------------------------------- summary


def summarise(df: pd.DataFrame, instance: Instance) -> dict:
    """Averages over the executed (non-skipped) slots.

    avg_batch_time: seconds per iteration, amortised migration included (charged_time);
    avg_plan_time: the plans' own batch time; avg_migration_time: seconds per slot;
    per budget `name`: avg_cost_<name>, limit_<name>, overshoot_<name> = (avg - limit)/limit
    (a fraction; negative = under budget), final_queue_<name>, bound_<name> = Q(T)/T (guarantee
    (a): avg / limit - 1 <= Q(T)/T) and bound_ok_<name>; slots, executed_slots, infeasible_slots.
    """
    ok = df[df["status"] != "infeasible"] if "status" in df else df
    H = len(ok)
    out: dict[str, Any] = {"slots": int(len(df)), "executed_slots": int(H),
                           "infeasible_slots": int(len(df) - H)}
    nan = float("nan")
    out["avg_batch_time"] = float(ok["charged_time"].mean()) if H else nan
    out["avg_plan_time"] = float(ok["batch_time"].mean()) if H else nan
    out["avg_migration_time"] = float(ok["migration_time"].mean()) if H else nan
    out["avg_solve_time"] = float(df["solve_time"].mean()) if len(df) else nan
    for b in instance.budgets:
        avg = float(ok[f"cost_{b.name}"].mean()) if H else nan
        qT = float(df[f"queue_{b.name}_after"].iloc[-1]) if len(df) else 0.0
        q0 = float(df[f"queue_{b.name}_before"].iloc[0]) if len(df) else 0.0
        out[f"avg_cost_{b.name}"] = avg
        out[f"limit_{b.name}"] = float(b.limit)
        out[f"overshoot_{b.name}"] = (avg - b.limit) / b.limit if b.limit > 0 and H else nan
        out[f"final_queue_{b.name}"] = qT
        bound = float(overshoot_bound([qT], H, [q0])[0]) if H else nan
        out[f"bound_{b.name}"] = bound
        out[f"bound_ok_{b.name}"] = bool(H == 0 or avg / b.limit - 1.0 <= bound + 1e-9)
    return out
