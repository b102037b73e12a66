"""The run chart: batch time, each budget's cost against its limit, and the virtual queues,
over the slots of one online run (the rows `run_online` returns)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...model import Instance
from .common import budget_unit, integer_ticks, policy_label, pyplot, save


def plot_run(df: pd.DataFrame, instance: Instance, out: Path) -> list[Path]:
    """OUT/run.png: batch time (s), cost per iteration of each budget with its limit and
    running average (USD or J), virtual queues (in budgets' worth), over the slots. Slots with
    no plan (NaN times and costs) are gaps in the time and cost lines, shaded grey on every
    panel; the running average is over the slots that ran (summary.json's avg_cost_<budget>)."""
    plt = pyplot()
    budgets = instance.budgets
    rows = 2 + len(budgets)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.1 * rows), sharex=True, squeeze=False)
    axes = axes[:, 0]
    slots = df["slot"]
    skipped = df["status"] == "infeasible" if "status" in df else pd.Series(False, index=df.index)
    for ax in axes:
        for i, t in enumerate(slots[skipped]):
            ax.axvspan(t - 0.5, t + 0.5, color="0.85", lw=0, label="no plan" if i == 0 and ax is axes[0] else None)
    axes[0].plot(slots, df["batch_time"], marker=".", label="batch time")
    if "charged_time" in df and (df["charged_time"] - df["batch_time"]).abs().max() > 0:
        axes[0].plot(slots, df["charged_time"], ls=":", label="+ amortised re-planning")
    axes[0].set_ylabel("batch time (s)")
    axes[0].legend(fontsize=8)
    for ax, b in zip(axes[1:], budgets):
        unit = budget_unit(b.kind)
        cost = df[f"cost_{b.name}"].where(~skipped)    # rows written before NaN costs hold 0 there
        ax.plot(slots, cost, marker=".", label="per iteration")
        ax.plot(slots, cost.expanding().mean().where(~skipped), label="running average")
        ax.axhline(b.limit, color="k", ls="--", lw=1, label="budget")
        ax.set_ylabel(f"{b.name} ({unit}/iter.)")
        ax.legend(fontsize=8)
    ax = axes[-1]
    for b in budgets:
        col = f"queue_{b.name}_after"
        if col in df:
            ax.plot(slots, df[col], marker=".", label=f"Q {b.name}")
    ax.set_ylabel("virtual queue\n(budgets' worth)")
    ax.set_xlabel("slot")
    integer_ticks(ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    policy = str(df["policy"].iloc[0]) if "policy" in df and len(df) else ""
    V = float(df["V"].iloc[0]) if "V" in df and len(df) else None
    fig.suptitle(f"{instance.name}: {policy_label(policy, V)}" if policy else instance.name)
    fig.tight_layout()
    return [save(fig, Path(out) / "run.png")]
