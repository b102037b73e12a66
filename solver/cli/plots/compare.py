"""Comparison charts: average batch time against budget use, one point per policy, with the
budget line; per instance. Input: rows of `compare_policies` (policy, V, avg_batch_time_s, and
per budget avg_<b>, <b>_limit), with an `instance` column for several instances."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .common import instance_label, policy_label, pyplot, save

OVER_TOL_PCT = 1.0       # the shaded "over budget" region starts at 100% + this
_STYLE = {               # policy -> (colour, marker)
    "ours": ("C3", "*"), "even-dp": ("C0", "s"), "lb-bsp": ("C2", "D"), "gpipe": ("C4", "^"),
    "dapple": ("C5", "v"), "pipedream": ("C6", "<"), "hetpipe": ("C8", ">"),
    "frozen": ("0.45", "P"), "shares-only": ("0.45", "X"), "cuts-only": ("0.45", "h"),
    "v-inf": ("0.2", "p"), "v-zero": ("0.2", "d"),
}


def budget_names(df: pd.DataFrame) -> list[str]:
    return [c[: -len("_limit")] for c in df.columns if c.endswith("_limit")]


def budget_use_pct(df: pd.DataFrame) -> pd.Series:
    """Per row, the largest average cost / limit over the budgets, in percent (nan if none)."""
    cols = [100.0 * df[f"avg_{b}"] / df[f"{b}_limit"] for b in budget_names(df)]
    return pd.concat(cols, axis=1).max(axis=1) if cols else pd.Series(np.nan, index=df.index)


def _style(policy: str, shade: float = 0.6) -> tuple:
    if policy.startswith("ours@V="):
        return pyplot().get_cmap("Reds")(shade), "o", 40.0
    c, m = _STYLE.get(policy, ("0.6", "o"))
    return c, m, 160.0 if policy == "ours" else 55.0


def _log_if_wide(ax, values: np.ndarray, axis: str) -> None:
    v = values[np.isfinite(values) & (values > 0)]
    if len(v) and v.max() / v.min() > 20:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _percent_ticks(ax) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}%"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if ax.get_xscale() == "log":
        lo, hi = ax.get_xlim()
        decades = math.log10(hi / lo)
        subs = (1, 2, 5) if decades <= 2.2 else (1,)
        ticks = [m * 10 ** e for e in range(-1, 7) for m in subs if lo <= m * 10 ** e <= hi]
        ax.set_xticks(ticks)


def place_labels(ax, xy: list[tuple[float, float]], labels: list[str], fontsize: float = 7) -> list:
    """Write each label next to its point (data coordinates) where it overlaps no label
    already written and no other point; a label with no free spot nearby goes farther
    out with a leader line. Returns the text artists."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pts = ax.transData.transform(np.asarray(xy, dtype=float)) if xy else np.zeros((0, 2))
    taken = [t.get_window_extent(renderer) for t in ax.texts]
    r = 5.0 * fig.dpi / 72.0                       # a marker's half size in pixels
    near = [(6, 2, "left"), (-6, 2, "right"), (6, -10, "left"), (-6, -10, "right"),
            (0, 8, "center"), (0, -16, "center")]
    far = [(dx, dy, "left" if dx > 0 else "right") for dy in (14, -22, 26, -34, 38, -46, 50, -58)
           for dx in (14, -14)]
    out = []
    order = sorted(range(len(xy)), key=lambda i: -pts[i][1])
    for i in order:
        for k, (dx, dy, ha) in enumerate(near + far):
            t = ax.annotate(labels[i], xy[i], xytext=(dx, dy), textcoords="offset points", ha=ha,
                            fontsize=fontsize, annotation_clip=False)
            box = t.get_window_extent(renderer)
            hits_point = any(box.x0 - r < p[0] < box.x1 + r and box.y0 - r < p[1] < box.y1 + r
                             for j, p in enumerate(pts) if j != i)
            inside = ax.get_window_extent(renderer).contains(box.x0, box.y0) and \
                ax.get_window_extent(renderer).contains(box.x1, box.y1)
            last = k == len(near) + len(far) - 1
            if (not hits_point and inside and not any(box.overlaps(b) for b in taken)) or last:
                if k >= len(near):
                    t.remove()
                    t = ax.annotate(labels[i], xy[i], xytext=(dx, dy), textcoords="offset points", ha=ha,
                                    fontsize=fontsize, annotation_clip=False,
                                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.5"})
                taken.append(box)
                out.append(t)
                break
            t.remove()
    return out


def draw_panel(ax, g: pd.DataFrame, title: str = "") -> tuple[list, list, list]:
    """One instance: a point per row of `g` (x = worst budget use %, y = average batch time s),
    ours at other V joined by a line (the V trade-off), the budget line at 100%. Returns the
    points' artists, positions and labels (for `place_labels`, once the layout is final)."""
    x = budget_use_pct(g).to_numpy(float)
    y = g["avg_batch_time_s"].to_numpy(float)
    handles, xy, labels = [], [], []
    extra = sorted(float(v) for v in g.loc[g.policy.str.startswith("ours@V="), "V"])
    curve = g[g.policy.str.startswith("ours")].assign(_x=x[g.policy.str.startswith("ours").to_numpy()])
    if len(curve) > 1:
        curve = curve.sort_values("V")
        ax.plot(curve._x, curve.avg_batch_time_s, color="C3", lw=0.8, alpha=0.6, zorder=1)
    for (_, row), xi, yi in zip(g.iterrows(), x, y):
        if not (math.isfinite(xi) and math.isfinite(yi)):
            continue
        shade = 0.3 + 0.6 * extra.index(float(row.V)) / max(len(extra) - 1, 1) \
            if str(row.policy).startswith("ours@V=") else 0.6
        c, m, s = _style(str(row.policy), shade)
        label = policy_label(str(row.policy), float(row.V) if "V" in row else None)
        handles.append(ax.scatter([xi], [yi], color=c, marker=m, s=s, label=label, zorder=3,
                                  edgecolors="k", linewidths=0.4))
        xy.append((xi, yi))
        labels.append(label)
    ok = np.isfinite(x)
    _log_if_wide(ax, np.append(x[ok], 100.0), "x")
    _log_if_wide(ax, y, "y")
    ax.axvline(100.0, color="k", ls="--", lw=1)
    lo, hi = ax.get_xlim()
    right = max(hi, 100.0 + 2 * OVER_TOL_PCT)
    ax.axvspan(100.0 + OVER_TOL_PCT, right, color="red", alpha=0.06, lw=0)
    ax.set_xlim(min(lo, 95.0), right)
    ax.text(100.0, 1.0, " budget", transform=ax.get_xaxis_transform(), fontsize=7, va="top")
    _percent_ticks(ax)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlabel("budget use: max over budgets of avg cost / limit", fontsize=8)
    ax.set_ylabel("avg batch time (s)", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="major")
    return handles, xy, labels


def _legend(fig, handles: list, ncol: int) -> None:
    seen: dict[str, object] = {}
    for h in handles:
        seen.setdefault(h.get_label(), h)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=ncol, fontsize=7,
               bbox_to_anchor=(0.5, 0.0), frameon=False)


def plot_compare(table: pd.DataFrame, instance, out: Path) -> list[Path]:
    """OUT/compare.png: one instance's policies, batch time against budget use (labelled)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 6))
    handles, xy, labels = draw_panel(ax, table, f"{instance.name}: every policy over the same slots "
                                                "(right of the dashed line = over budget)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    _legend(fig, handles, 4)
    place_labels(ax, xy, labels)
    return [save(fig, Path(out) / "compare.png")]


def plot_compare_grid(df: pd.DataFrame, path: Path, ncols: int = 3) -> Path:
    """Every instance of `df` (column `instance`) in its own panel, one shared legend."""
    plt = pyplot()
    insts = list(dict.fromkeys(df.instance))
    ncols = min(ncols, len(insts))
    nrows = -(-len(insts) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows + 1.2), squeeze=False)
    handles = []
    for ax, inst in zip(axes.ravel(), insts):
        g = df[df.instance == inst]
        name = instance_label(inst)
        handles += draw_panel(ax, g, f"{name} ({g.devices.iloc[0]} devices, {g.slots.iloc[0]} slots)"
                              if {"devices", "slots"} <= set(g.columns) else name)[0]
    for ax in axes.ravel()[len(insts):]:
        ax.set_visible(False)
    fig.suptitle("Average batch time against budget use, one point per policy "
                 "(shaded = over budget; red line = ours at each V)", fontsize=10)
    fig.tight_layout(rect=(0, 1.0 / (3.6 * nrows + 1.2), 1, 0.98))
    _legend(fig, handles, 6)
    return save(fig, path)


def plot_v_tradeoff(df: pd.DataFrame, path: Path, instances: Sequence[str] | None = None) -> Path:
    """The V trade-off as a frontier: per instance, average batch time against budget use
    of ours at each V of a sweep (rows: instance, V, avg_batch_time_s, avg_<b>, <b>_limit),
    each point labelled with its V."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    points: dict[tuple[float, float], list[float]] = {}
    for k, (inst, g) in enumerate(df.groupby("instance", sort=False)):
        if instances and inst not in instances:
            continue
        g = g.sort_values("V")
        x = budget_use_pct(g).to_numpy(float)
        ax.plot(x, g.avg_batch_time_s, marker="o", color=f"C{k % 10}", label=instance_label(inst))
        for xi, yi, V in zip(x, g.avg_batch_time_s, g.V):
            points.setdefault((float(xi), float(yi)), []).append(float(V))     # equal runs share a label
    _log_if_wide(ax, np.append(budget_use_pct(df).to_numpy(float), 100.0), "x")
    _log_if_wide(ax, df.avg_batch_time_s.to_numpy(float), "y")
    ax.axvline(100.0, color="k", ls="--", lw=1, label="budget")
    _percent_ticks(ax)
    ax.tick_params(axis="x", labelrotation=30)
    ax.set(xlabel="budget use: max over budgets of avg cost / limit", ylabel="avg batch time (s)",
           title="What each V buys: batch time against budget use (ours, one point per V)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    place_labels(ax, list(points), ["V=" + ", ".join(f"{v:g}" for v in Vs) for Vs in points.values()], fontsize=6)
    return save(fig, path)
