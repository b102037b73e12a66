"""Gain within budget: a policy's batch time against the fastest baseline that meets every
budget, never against one that buys its speed by overshooting.

Works on a comparison table (`compare_policies` rows: policy, avg_batch_time_s and, per budget,
<name>_overshoot_pct); with an `instance` column, each instance separately.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .policies import BASELINE_NAMES

MEET_TOLERANCE_PCT = 1.0
"""A policy meets a budget when its average cost overshoots the limit by at most this many
percent (the 1% long-run target of the online controller)."""


def _overshoot_cols(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c.endswith("_overshoot_pct")]


def meets_budgets(table: pd.DataFrame, tolerance_pct: float = MEET_TOLERANCE_PCT) -> pd.Series:
    """Per row: every budget's overshoot (%) is at most tolerance_pct. A budget the row's
    instance does not have (its <name>_limit empty, in a table of several instances) is met;
    an empty overshoot of a budget it has is not."""
    ok = pd.Series(True, index=table.index)
    for c in _overshoot_cols(table):
        limit = table.get(c[: -len("_overshoot_pct")] + "_limit")
        absent = limit.isna() if limit is not None else pd.Series(False, index=table.index)
        ok &= absent | (table[c] <= tolerance_pct)
    return ok


def add_gain_within_budget(table: pd.DataFrame, tolerance_pct: float = MEET_TOLERANCE_PCT) -> pd.DataFrame:
    """A copy of `table` with `meets_budgets` and `gain_within_budget_pct`: 100 * (1 - T / T_ref),
    T_ref the least average batch time of the baselines (other than the row itself) that meet
    the budgets; positive = faster. Empty (nan) where the row itself misses a budget or no
    baseline meets them."""
    out = table.copy()
    out["meets_budgets"] = meets_budgets(out, tolerance_pct)
    out["gain_within_budget_pct"] = np.nan
    groups = out.groupby("instance", sort=False) if "instance" in out else [(None, out)]
    for _, g in groups:
        ok = g[g.meets_budgets & g.policy.isin(BASELINE_NAMES)]
        for i, row in g[g.meets_budgets].iterrows():
            ref = ok[ok.policy != row.policy].avg_batch_time_s
            if len(ref) and ref.min() > 0:
                out.loc[i, "gain_within_budget_pct"] = 100.0 * (1.0 - row.avg_batch_time_s / ref.min())
    return out


def within_budget_note(table: pd.DataFrame, tolerance_pct: float = MEET_TOLERANCE_PCT,
                       label=str) -> str:
    """One line saying what gain_within_budget_pct compared with and which policies were left
    out for overshooting (with their worst overshoot). `label` names a policy for the reader."""
    cols = _overshoot_cols(table)
    ok = meets_budgets(table, tolerance_pct)
    base = table[ok & table.policy.isin(BASELINE_NAMES)]
    if len(base):
        best = base.loc[base.avg_batch_time_s.idxmin()]
        ref = f"the fastest baseline within budget, {label(best.policy)} ({best.avg_batch_time_s:.4g} s)"
    else:
        ref = None
    out, planless = [], []
    for _, row in table[~ok].iterrows():
        if not any(math.isfinite(row[c]) for c in cols):   # no slot ran: nothing was spent or met
            planless.append(label(row.policy))
            continue
        worst = max(cols, key=lambda c: row[c] if math.isfinite(row[c]) else -math.inf)
        out.append(f"{label(row.policy)} ({worst[: -len('_overshoot_pct')]} {row[worst]:+.3g}%)")
    excluded = f"; excluded for overshooting a budget by more than {tolerance_pct:g}%: {', '.join(out)}" if out else ""
    if planless:
        excluded += f"; excluded for having no feasible plan in any slot: {', '.join(planless)}"
    head = f"against {ref}" if ref else "none given, as no baseline meets the budgets"
    return f"gain within budget: {head}{excluded}"
