"""Averages, budget overshoot and queue bounds of a run's rows."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..model.state import Instance
from .queues import overshoot_bound


def summarise(df: pd.DataFrame, instance: Instance, tolerance: float | None = None) -> dict:
    """Averages over the executed slots (those with a plan; a skipped slot, status "infeasible",
    ran no iteration and is left out of every average below).

    avg_batch_time: seconds per iteration, amortised migration included (charged_time);
    avg_plan_time: the plans' own batch time; avg_migration_time: seconds per slot;
    avg_preemption_time: seconds per slot lost to preemptions (online.preemption), and
    preempted_slots: how many slots paid one; avg_solve_time: seconds the policy took to plan a
    slot, over the same executed slots (a skipped slot's search time is in its row's solve_time);
    per budget `name`: avg_cost_<name>, limit_<name>, overshoot_<name> = (avg - limit)/limit
    (a fraction; negative = under budget), final_queue_<name>, bound_<name> = Q(T)/T (guarantee
    (a): avg / limit - 1 <= Q(T)/T) and bound_ok_<name>; slots, executed_slots, infeasible_slots.
    With `tolerance` (a fraction): within_tolerance_<name> = overshoot <= tolerance. The flags
    are None when no slot ran (nothing was measured). Rows of a
    tracked run also give avg_cheapest_<name>, the slack plans' average charged cost.
    """
    ok = df[df["status"] != "infeasible"] if "status" in df else df
    H = len(ok)
    out: dict[str, Any] = {"slots": int(len(df)), "executed_slots": int(H),
                           "infeasible_slots": int(len(df) - H)}
    nan = float("nan")
    out["avg_batch_time"] = float(ok["charged_time"].mean()) if H else nan
    out["avg_plan_time"] = float(ok["batch_time"].mean()) if H else nan
    out["avg_migration_time"] = float(ok["migration_time"].mean()) if H else nan
    if "preemption_time" in ok:
        out["avg_preemption_time"] = float(ok["preemption_time"].mean()) if H else nan
        out["preempted_slots"] = int((ok["preemption_time"] > 0).sum())
    out["avg_solve_time"] = float(ok["solve_time"].mean()) if H else nan
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
        out[f"bound_ok_{b.name}"] = bool(avg / b.limit - 1.0 <= bound + 1e-9) if H else None
        if tolerance is not None:
            out[f"within_tolerance_{b.name}"] = bool(out[f"overshoot_{b.name}"] <= tolerance + 1e-12) if H else None
        if f"cheapest_{b.name}" in ok:
            out[f"avg_cheapest_{b.name}"] = float(ok[f"cheapest_{b.name}"].mean()) if H else nan
    return out
