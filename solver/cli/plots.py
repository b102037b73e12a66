"""PNG plots of runs and comparisons (matplotlib, imported here only; never by the core)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..model import Instance


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_run(df: pd.DataFrame, instance: Instance, out: Path) -> list[Path]:
    """Batch time, per-budget cost against its limit, and virtual queues over slots."""
    plt = _pyplot()
    budgets = instance.budgets
    fig, axes = plt.subplots(2 + len(budgets), 1, figsize=(8, 2.2 * (2 + len(budgets))), sharex=True)
    axes[0].plot(df["slot"], df["batch_time"], marker=".", label="batch time")
    if "charged_time" in df:
        axes[0].plot(df["slot"], df["charged_time"], ls=":", label="+ amortised migration")
    axes[0].set_ylabel("seconds")
    axes[0].legend(fontsize=8)
    for ax, b in zip(axes[1:], budgets):
        ax.plot(df["slot"], df[f"cost_{b.name}"], marker=".", label=f"{b.name} per iteration")
        ax.plot(df["slot"], df[f"cost_{b.name}"].expanding().mean(), label="running average")
        ax.axhline(b.limit, color="k", ls="--", lw=1, label="budget")
        ax.set_ylabel(b.name)
        ax.legend(fontsize=8)
    ax = axes[-1]
    for b in budgets:
        col = f"queue_{b.name}_after"
        if col in df:
            ax.plot(df["slot"], df[col], label=f"Q {b.name}")
    ax.set_ylabel("virtual queue")
    ax.set_xlabel("slot")
    ax.legend(fontsize=8)
    fig.suptitle(f"{instance.name}: {df['policy'].iloc[0] if 'policy' in df else ''}")
    fig.tight_layout()
    path = out / "run.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plot_compare(table: pd.DataFrame, instance: Instance, out: Path) -> list[Path]:
    """Average batch time per policy, and budget use relative to each limit."""
    plt = _pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.barh(table["policy"], table["avg_batch_time_s"], color=["C3" if p == "ours" else "C0" for p in table["policy"]])
    a.invert_yaxis()
    a.set_xlabel("average batch time (s)")
    width = 0.8 / max(len(instance.budgets), 1)
    for k, bud in enumerate(instance.budgets):
        use = table[f"avg_{bud.name}"] / bud.limit
        b.barh([i + k * width for i in range(len(table))], use, height=width, label=bud.name)
    b.axvline(1.0, color="k", ls="--", lw=1)
    b.set_yticks(range(len(table)), table["policy"])
    b.invert_yaxis()
    b.set_xlabel("average cost / budget")
    b.legend(fontsize=8)
    fig.suptitle(instance.name)
    fig.tight_layout()
    path = out / "compare.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
