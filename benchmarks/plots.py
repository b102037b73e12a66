"""The benchmarks' own charts (bench_online, make_report): V sweep, long run, online against
offline. The per-policy comparison and the V frontier are solver.cli.plots'. Every axis has
its unit; synthetic instances are named by what they are."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from solver.cli.plots.common import instance_label, integer_ticks, pyplot, save

V_AXIS = "V (s of batch time per budget's worth of cost)"


def plot_v_sweep(table: pd.DataFrame, path: Path) -> Path:
    """Average batch time (s) and each budget's use (average cost / limit, %) against V, one
    line per instance (rows: instance, V, avg_batch_time_s, avg_<b>, <b>_limit)."""
    plt = pyplot()
    budgets = [c[: -len("_limit")] for c in table.columns if c.endswith("_limit")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for k, (name, g) in enumerate(table.groupby("instance", sort=False)):
        g = g.sort_values("V")
        axes[0].plot(g.V, g.avg_batch_time_s, marker="o", color=f"C{k}", label=instance_label(name))
        for b, ls in zip(budgets, ("-", "--", ":", "-.")):
            if g[f"avg_{b}"].notna().any():
                axes[1].plot(g.V, 100 * g[f"avg_{b}"] / g[f"{b}_limit"], marker=".", ls=ls, color=f"C{k}",
                             label=f"{instance_label(name)}: {b}")
    axes[0].set(xscale="log", xlabel=V_AXIS, ylabel="avg batch time (s)", title="batch time against V")
    axes[1].axhline(100.0, color="k", ls="--", lw=1)
    axes[1].set(xscale="log", xlabel=V_AXIS, ylabel="avg cost / limit (%)", title="budget use against V")
    for a in axes:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, path)


def plot_long_run(df: pd.DataFrame, budgets, V: float, path: Path) -> Path:
    """Running average cost / limit (%) of each budget over a long run's slots."""
    plt = pyplot()
    fig, axes = plt.subplots(len(budgets), 1, figsize=(8, 2.6 * len(budgets)), squeeze=False, sharex=True)
    for a, b in zip(axes[:, 0], budgets):
        a.plot(df["slot"], 100 * df[f"cost_{b.name}"].expanding().mean() / b.limit, label="running average")
        a.axhline(100.0, color="k", ls="--", lw=1, label="budget")
        a.axhline(101.0, color="C3", ls=":", lw=1, label="+1%")
        a.set(ylabel=f"{b.name}: avg cost\n/ limit (%)")
        a.legend(fontsize=7)
    axes[-1, 0].set_xlabel(f"slot (V = {V:g})")
    integer_ticks(axes[-1, 0])
    fig.tight_layout()
    return save(fig, path)


def plot_online_vs_offline(df: pd.DataFrame, path: Path) -> Path:
    """Online / offline average batch time per small instance, one bar per V, at the online
    run's own budget use and at the limits (rows: instance, V, ratio_at_use, ratio_at_limit)."""
    plt = pyplot()
    ratios = [c for c in ("ratio_at_use", "ratio_at_limit") if c in df]
    titles = {"ratio_at_use": "offline at the online run's budget use",
              "ratio_at_limit": "offline at the budget limits"}
    insts = list(dict.fromkeys(df.instance))
    Vs = sorted(df.V.unique())
    fig, axes = plt.subplots(1, len(ratios), figsize=(6.5 * len(ratios), 4), squeeze=False)
    width = 0.8 / len(Vs)
    cmap = plt.get_cmap("viridis")
    for ax, col in zip(axes[0], ratios):
        for k, V in enumerate(Vs):
            g = df[df.V == V].set_index("instance").reindex(insts)
            ax.bar(np.arange(len(insts)) + (k - (len(Vs) - 1) / 2) * width, g[col], width,
                   color=cmap(k / max(len(Vs) - 1, 1)), label=f"V={V:g}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(1.1, color="C3", ls="--", lw=0.8, label="+10%")
        ax.set_xticks(range(len(insts)), [instance_label(i) for i in insts], rotation=25, ha="right", fontsize=8)
        ax.set(ylabel="online / offline avg batch time (ratio)", title=titles[col])
        lo = np.nanmin(df[col].to_numpy(float))
        ax.set_ylim(min(0.95, lo - 0.02), None)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return save(fig, path)


def plot_budget_tradeoff(df: pd.DataFrame, path: Path) -> Path:
    """Average batch time (s) against the worst budget's use (average cost / limit, %), one
    panel per instance: "ours" at each tolerance (a line), the plain controller at each V (a
    line) and every baseline (a labelled point). Rows: instance, policy, kind ("ours", "plain",
    "baseline"), avg_batch_time_s, worst_use_pct (bench_budgets' budgets_tradeoff.csv)."""
    plt = pyplot()
    insts = list(dict.fromkeys(df.instance))
    fig, axes = plt.subplots(1, len(insts), figsize=(6.5 * len(insts), 4.6), squeeze=False)
    style = {"ours": ("C0", "o", "-"), "plain": ("C1", "s", "--")}
    for ax, name in zip(axes[0], insts):
        g = df[df.instance == name]
        for kind, (color, marker, ls) in style.items():
            h = g[g.kind == kind].sort_values("worst_use_pct")
            if len(h):
                ax.plot(h.worst_use_pct, h.avg_batch_time_s, marker=marker, ls=ls, color=color,
                        label="ours (budget tracker), one point per tolerance" if kind == "ours"
                        else "plain controller, one point per V")
                for r in h.itertuples():
                    ax.annotate(r.policy.split(", ", 1)[-1], (r.worst_use_pct, r.avg_batch_time_s), fontsize=6,
                                xytext=(3, 3), textcoords="offset points", color=color)
        b = g[g.kind == "baseline"]
        ax.scatter(b.worst_use_pct, b.avg_batch_time_s, color="C2", marker="^", label="baselines")
        for r in b.itertuples():
            ax.annotate(r.policy, (r.worst_use_pct, r.avg_batch_time_s), fontsize=7, xytext=(3, -8),
                        textcoords="offset points")
        ax.axvline(100.0, color="k", ls="--", lw=1)
        ax.axvline(101.0, color="C3", ls=":", lw=1, label="budget + 1%")
        ax.set(xscale="log", xlabel="worst budget use: avg cost / limit (%)",
               ylabel="avg batch time (s)", title=f"{instance_label(name)}: batch time against budget use")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, path)
