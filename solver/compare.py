"""Every policy over the same instance, the same costs and the same queues law, side by side."""
from __future__ import annotations

from typing import Callable, Sequence

import pandas as pd

from .model import Instance

POLICIES = ("ours", "even-dp", "lb-bsp", "gpipe", "dapple", "pipedream", "hetpipe",
            "frozen", "shares-only", "cuts-only", "v-inf", "v-zero")


def compare_policies(instance: Instance, V: float = 1.0, policies: Sequence[str] | None = None,
                     progress: Callable[[str], Callable[[int, int], None]] | None = None) -> pd.DataFrame:
    """One row per policy: average batch time (s), its ratio to even DP and to ours,
    average cost and overshoot per budget, infeasible slots. Runs each policy online."""
    from .online import run_online, summarise

    rows = []
    for name in policies or POLICIES:
        df = run_online(instance, V=V, policy=name, progress=progress(f"{name:>11}") if progress else None)
        s = summarise(df, instance)
        row = {"policy": name, "avg_batch_time_s": s["avg_batch_time"]}
        for b in instance.budgets:
            row[f"avg_{b.name}"] = s[f"avg_cost_{b.name}"]
            row[f"{b.name}_limit"] = b.limit
            row[f"{b.name}_overshoot_pct"] = 100.0 * s[f"overshoot_{b.name}"]
        row["infeasible_slots"] = s.get("infeasible_slots", 0)
        rows.append(row)
    table = pd.DataFrame(rows)
    base = table.loc[table.policy == "even-dp", "avg_batch_time_s"]
    if len(base):
        table["vs_even_dp_pct"] = 100.0 * (table.avg_batch_time_s / float(base.iloc[0]) - 1.0)
    return table
