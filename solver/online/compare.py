"""Every policy over the same instance, the same costs and the same queue law, side by side."""
from __future__ import annotations

from typing import Callable, Sequence

import pandas as pd

from ..model import Instance
from .controller import run_online
from .gain import add_gain_within_budget
from .policies import POLICY_NAMES

POLICIES = POLICY_NAMES


def policy_row(instance: Instance, policy: str, V: float | None, label: str | None = None,
               progress: Callable[[int, int], None] | None = None) -> dict:
    """Run one policy online and summarise it: average batch time (s), average cost, limit
    and overshoot (%) per budget, infeasible slots."""

    s = run_online(instance, V=V, policy=policy, progress=progress).summary
    row = {"policy": label or policy, "V": s["V"], "avg_batch_time_s": s["avg_batch_time"]}
    for b in instance.budgets:
        row[f"avg_{b.name}"] = s[f"avg_cost_{b.name}"]
        row[f"{b.name}_limit"] = b.limit
        row[f"{b.name}_overshoot_pct"] = 100.0 * s[f"overshoot_{b.name}"]
    row["infeasible_slots"] = s.get("infeasible_slots", 0)
    return row


def compare_policies(instance: Instance, V: float | None = 1.0, policies: Sequence[str] | None = None,
                     progress: Callable[[str], Callable[[int, int], None]] | None = None,
                     extra_V: Sequence[float] = ()) -> pd.DataFrame:
    """One row per policy (and one per V in extra_V for "ours", labelled "ours@V=<V>"), with
    the ratio of each average batch time to even DP's (vs_even_dp_pct, negative = faster), and
    meets_budgets / gain_within_budget_pct (online.gain: only against baselines within budget)."""
    rows = [policy_row(instance, name, V, progress=progress(f"{name:>11}") if progress else None)
            for name in policies or POLICIES]
    rows += [policy_row(instance, "ours", v, label=f"ours@V={v:g}") for v in extra_V if v != V]
    table = pd.DataFrame(rows)
    base = table.loc[table.policy == "even-dp", "avg_batch_time_s"]
    if len(base):
        table["vs_even_dp_pct"] = 100.0 * (table.avg_batch_time_s / float(base.iloc[0]) - 1.0)
    return add_gain_within_budget(table)
