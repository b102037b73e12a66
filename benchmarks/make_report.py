"""Write OUT/REPORT.md (tables + PNG plots, relative links) from the CSVs the benchmarks left in OUT.

    python benchmarks/make_report.py --out results/bench

Sections: what ran; batch time per policy on every instance with its budget use (compare_all.csv
from run_all); the V trade-off (v_sweep.csv); online vs offline (online_vs_offline.csv); budgets
(budgets_instances.csv, budgets_tradeoff.csv from bench_budgets); solve
time vs n and L with log-log fitted exponents (bench_speed's CSV); search quality vs the oracle
(bench_quality's CSV); any other CSV as a short table. A missing CSV gives "not run".
Units: seconds (batch and solve times), budgets in their own units (USD, J per iteration).
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.cli.argtypes import DocHelp, guarded  # noqa: E402
from solver.cli.output import UNIT_SUFFIX  # noqa: E402
from solver.cli.plots.common import policy_label  # noqa: E402
from solver.online.gain import MEET_TOLERANCE_PCT, add_gain_within_budget, within_budget_note  # noqa: E402
from solver.online.policies import BASELINE_NAMES  # noqa: E402

OVERSHOOT_TOL_PCT = MEET_TOLERANCE_PCT   # a policy "meets" a budget when it overshoots by at most this
CONSUMED: set[str] = set()       # CSV names a section used (the rest go to "Other tables")


def plots_on() -> bool:
    """matplotlib present (the `plot` extra): the report then embeds PNGs, else says so."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt():
    from solver.cli.plots.common import pyplot
    return pyplot()


def figure(path: Path) -> str:
    """The Markdown link of a PNG written next to REPORT.md."""
    return f"![{path.name}]({path.name})\n"


NO_PLOTS = "_Plots skipped: matplotlib is not installed (pip install 'dynpar[plot]')._\n"


def fmt(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if math.isnan(v):
            return ""
        return f"{v:.4g}"
    return str(v).replace("|", "/").replace("\n", " ")


def md_table(df: pd.DataFrame, max_rows: int = 60) -> str:
    """A Markdown table of `df` (first max_rows rows)."""
    if df.empty:
        return "_(empty)_\n"
    head = df.head(max_rows)
    lines = ["| " + " | ".join(map(str, head.columns)) + " |", "|" + " --- |" * len(head.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in head.itertuples(index=False)]
    if len(df) > max_rows:
        lines.append(f"\n_({len(df) - max_rows} more rows in the CSV)_")
    return "\n".join(lines) + "\n"


def read(out: Path, *names: str) -> tuple[pd.DataFrame | None, str]:
    """The first of `names` (file names or glob patterns) that exists in `out`, and its name."""
    for pat in names:
        for p in sorted(out.glob(pat)):
            try:
                df = pd.read_csv(p)
            except (pd.errors.EmptyDataError, pd.errors.ParserError):
                continue
            CONSUMED.add(p.name)
            return df, p.name
    return None, ""


def without_units(df: pd.DataFrame) -> pd.DataFrame:
    """A budget's `avg_<b>_<unit>` and `<b>_limit_<unit>` columns (run_all's and bench_online's
    tables since session 34, as compare.csv) as `avg_<b>` and `<b>_limit`, the names the
    sections compute with (the tables they print keep the units)."""
    units = "|".join(sorted(set(UNIT_SUFFIX.values())))
    limits = {m.group(1) for c in df.columns if (m := re.fullmatch(rf"(.+)_limit_({units})", c))}
    names = {f"{b}_limit_{u}": f"{b}_limit" for b in limits for u in UNIT_SUFFIX.values()}
    names.update({f"avg_{b}_{u}": f"avg_{b}" for b in limits for u in UNIT_SUFFIX.values()})
    return df.rename(columns={k: v for k, v in names.items() if k in df.columns})


def not_run(what: str, files: str) -> str:
    return f"_Not run: no {files} in the output folder ({what})._\n"


def save(fig, out: Path, name: str) -> str:
    from solver.cli.plots.common import save as save_png
    fig.tight_layout()
    return figure(save_png(fig, out / name))


# ---------------------------------------------------------------- sections


def section_status(out: Path) -> str:
    df, _ = read(out, "bench_status.csv")
    if df is None:
        return "## What ran\n\n_No bench_status.csv (report made without run_all)._\n"
    return "## What ran\n\n" + md_table(df) + "\nLogs of each module are in `logs/`.\n"


def budget_names(df: pd.DataFrame) -> list[str]:
    return [c[: -len("_limit")] for c in df.columns if c.endswith("_limit")]


def section_compare(out: Path) -> str:
    df, name = read(out, "compare_all.csv")
    text = "## Batch time per policy on every instance\n\n"
    if df is None:
        return text + not_run("run_all's policy comparison", "compare_all.csv")
    df = without_units(df)
    budgets = budget_names(df)
    df = add_gain_within_budget(df, OVERSHOOT_TOL_PCT)
    for b in budgets:
        df[f"{b}_use_pct"] = 100.0 * df[f"avg_{b}"] / df[f"{b}_limit"]
    text += (f"From `{name}`: every policy run online over the same slots, charged the same costs. "
             f"`<budget>_use_pct` = average cost / limit; a policy meets its budgets when it overshoots "
             f"none by more than {OVERSHOOT_TOL_PCT:g}%. Comparing batch times is fair only between policies "
             "that meet the budgets (equal budget use); budget-blind baselines that overshoot are shown "
             "for reference. In the summary, `ours` is the fastest run of our controller (at the comparison's V "
             "or one of the extra V, labelled ours@V=...) that meets the budgets, else the run at the "
             "comparison's V. Over few slots a budget can be overshot by O(V/slots) (guarantee (a)). "
             "`gain_within_budget_pct` = 100 (1 - T / T_ref), T_ref the fastest baseline other than the row itself "
             "that meets every budget (so the fastest such baseline's row is against the next one; positive = "
             "faster; empty where the row itself overshoots).\n\n")
    rows = []
    for inst, g in df.groupby("instance", sort=False):
        mine = g[g.policy.str.startswith("ours")]
        mine_ok = mine[mine.meets_budgets]
        ours = mine_ok.loc[[mine_ok.avg_batch_time_s.idxmin()]] if len(mine_ok) else g[g.policy == "ours"]
        ok = g[g.meets_budgets & g.policy.isin(BASELINE_NAMES)]   # baselines only, as the gain note
        even = g[g.policy == "even-dp"]
        r = {"instance": inst, "devices": g.devices.iloc[0], "slots": g.slots.iloc[0],
             "workload": g.workload.iloc[0]}
        if len(ours):
            o = ours.iloc[0]
            r["ours"] = o.policy
            r["ours_s"] = o.avg_batch_time_s
            r["ours_meets_budgets"] = bool(o.meets_budgets)
            if len(even):
                r["even_dp_s"] = even.avg_batch_time_s.iloc[0]
                r["ours_vs_even_dp_pct"] = 100.0 * (o.avg_batch_time_s / r["even_dp_s"] - 1.0)
            if len(ok):
                best = ok.loc[ok.avg_batch_time_s.idxmin()]
                r["best_baseline_within_budget"] = best.policy
                r["best_baseline_within_budget_s"] = best.avg_batch_time_s
                r["ours_vs_best_within_pct"] = 100.0 * (o.avg_batch_time_s / best.avg_batch_time_s - 1.0)
        rows.append(r)
    summary = pd.DataFrame(rows)
    text += "### Summary\n\n" + md_table(summary)
    if "ours_vs_even_dp_pct" in summary:
        med = float(summary.ours_vs_even_dp_pct.median())
        text += f"\nMedian change of ours against even DP over the instances: {med:+.1f}% batch time.\n"
    text += "\n" + plot_compare(df, out) + "\n### Per instance\n\n"
    cols = ["policy", "avg_batch_time_s", "vs_even_dp_pct", *[f"{b}_use_pct" for b in budgets], "meets_budgets",
            "gain_within_budget_pct", "infeasible_slots"]
    for inst, g in df.groupby("instance", sort=False):
        keep = [c for c in cols if c in g.columns and g[c].notna().any()]
        text += f"**{inst}** ({g.devices.iloc[0]} devices, {g.slots.iloc[0]} slots, {g.workload.iloc[0]})\n\n"
        shown = g[keep].assign(policy=[policy_label(p, v) for p, v in zip(g.policy, g.V)])
        text += md_table(shown) + "\n" + within_budget_note(g, OVERSHOOT_TOL_PCT, label=policy_label) + ".\n\n"
    return text


def plot_compare(df: pd.DataFrame, out: Path) -> str:
    """Per instance, average batch time against budget use, one point per policy."""
    if not plots_on():
        return NO_PLOTS
    from solver.cli.plots import plot_compare_grid
    return figure(plot_compare_grid(df, out / "compare_batch_time.png"))


def section_v(out: Path) -> str:
    raw, name = read(out, "v_sweep.csv")
    text = "## V trade-off\n\n"
    if raw is None:
        return text + not_run("bench_online", "v_sweep.csv")
    df = without_units(raw)
    budgets = budget_names(df)
    if plots_on():
        from benchmarks.plots import plot_v_sweep
        from solver.cli.plots import plot_v_tradeoff
        figs = (figure(plot_v_sweep(df, out / "v_sweep.png")) + "\nThe same runs as a frontier: batch time "
                "against the worst budget use, each point one V.\n\n" + figure(plot_v_tradeoff(df, out / "v_tradeoff.png")))
    else:
        figs = NO_PLOTS
    cols = ["instance", "V", "avg_batch_time_s", *[c for b in budgets for c in (f"avg_{b}", f"{b}_overshoot_pct")]]
    shown = [raw.columns[list(df.columns).index(c)] for c in cols if c in df.columns]   # with their units
    return (text + f"From `{name}` (bench_online): the online controller at each V. Larger V buys batch time "
            "with budget (O(1/V) penalty gap, O(V) backlog).\n\n" + figs + "\n" + md_table(raw[shown]))


def section_offline(out: Path) -> str:
    df, name = read(out, "online_vs_offline.csv")
    text = "## Online vs offline\n\n"
    if df is None:
        return text + not_run("bench_online", "online_vs_offline.csv")
    text += (f"From `{name}`: online average batch time over the offline reference (whole trace known, MILP "
             "over each slot's candidates), at the online run's own budget use and at the limits.\n\n")
    ratios = [c for c in df.columns if c.startswith("ratio")]
    if ratios:
        if plots_on() and "V" in df:
            from benchmarks.plots import plot_online_vs_offline
            text += figure(plot_online_vs_offline(df, out / "online_vs_offline.png")) + "\n"
        elif not plots_on():
            text += NO_PLOTS
        text += "".join(f"- {c}: median {df[c].median():.4g}, max {df[c].max():.4g}\n" for c in ratios) + "\n"
    return text + md_table(df)


def section_budgets(out: Path) -> str:
    """bench_budgets: defaults on every instance, and the batch time / budget use trade-off."""
    text = "## Budgets met without tuning\n\n"
    inst, name = read(out, "budgets_instances.csv")
    pts, pname = read(out, "budgets_tradeoff.csv")
    if inst is None and pts is None:
        return text + not_run("bench_budgets", "budgets_instances.csv or budgets_tradeoff.csv")
    if inst is not None:
        cols = ["instance", "slots", "ours_s", "ours_worst_over_pct", "plain_s", "plain_worst_over_pct",
                "tracker_cost_pct", "best_meeting_baseline", "ours_vs_best_meeting_pct", "online_over_offline",
                "online_over_offline_prefix"]
        text += (f"From `{name}`: the defaults (scale-free V, budget tracker at 1%, price from history) on each "
                 "instance; `*_worst_over_pct` = worst budget's average cost / limit - 1 (%); `online_over_offline` = "
                 "online (re-planning off) / offline MILP average batch time at the online run's own budget use; "
                 "`online_over_offline_prefix`: the same MILP also held to the tracker's rule (running excess "
                 "<= 1% x slots after every slot).\n\n"
                 + md_table(inst[[c for c in cols if c in inst.columns]]) + "\n")
        if "online_over_offline" in inst and inst["online_over_offline"].notna().any():
            r = inst["online_over_offline"]
            text += f"online / offline: median {r.median():.4g}, max {r.max():.4g} over {int(r.notna().sum())} instances.\n\n"
    if pts is not None:
        text += (f"Trade-off from `{pname}`: average batch time against the worst budget's use; \"ours\" at several "
                 "tolerances, the plain controller at several V, every baseline.\n\n")
        if plots_on():
            from benchmarks.plots import plot_budget_tradeoff
            text += figure(plot_budget_tradeoff(pts, out / "budget_tradeoff.png")) + "\n"
        else:
            text += NO_PLOTS
        text += md_table(pts)
    return text


def _col(df: pd.DataFrame, *cands: str) -> str | None:
    low = {c.lower(): c for c in df.columns}
    for c in cands:
        if c.lower() in low:
            return low[c.lower()]
    return None


def loglog_fit(x: np.ndarray, y: np.ndarray) -> float:
    """Exponent b of y ~ a x^b by least squares on log-log (nan if fewer than 2 distinct x)."""
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if len(np.unique(x[ok])) < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def section_speed(out: Path) -> str:
    text = "## Solve time vs n and L\n\n"
    df, name = read(out, "speed*.csv", "bench_speed*.csv", "solve_time*.csv", "scaling*.csv")
    if df is None:
        return text + not_run("bench_speed", "speed*.csv / solve_time*.csv / scaling*.csv")
    n, L = _col(df, "n", "devices", "num_devices"), _col(df, "L", "layers", "num_layers")
    tcol = next((c for c in df.columns if "solve" in c.lower() and df[c].dtype.kind == "f"), None) or \
        _col(df, "time_s", "seconds", "median_s", "mean_s")
    if tcol is None or (n is None and L is None):
        return text + f"From `{name}` (columns not recognised for a fit):\n\n" + md_table(df)
    draw = plots_on()
    if draw:
        fig, axes = _plt().subplots(1, 2, figsize=(11, 4))
    else:
        axes = [None, None]
    fits = []
    # one fit per solver: bench_speed times the solver beside an earlier one (column "solver")
    solvers = list(df.groupby("solver")) if "solver" in df and df["solver"].nunique() > 1 else [("", df)]
    for sname, sdf in solvers:
        tag = f"{sname}: " if sname else ""
        for ax, var, other in ((axes[0], n, L), (axes[1], L, n)):
            if var is None:
                continue
            groups = sdf.groupby(other) if other is not None else [("all", sdf)]
            for key, g in groups:
                g = g.groupby(var, as_index=False)[tcol].median().sort_values(var)
                if g[var].nunique() < 2:
                    continue
                b = loglog_fit(g[var].to_numpy(float), g[tcol].to_numpy(float))
                fits.append({**({"solver": sname} if sname else {}), "vary": var,
                             "fixed": f"{other}={key}" if other else "", "points": len(g), "exponent": b})
                if ax is not None:
                    ax.plot(g[var], g[tcol], marker="o",
                            label=f"{tag}{other}={key}: ~{var}^{b:.2f}" if other else f"{tag}~{var}^{b:.2f}")
        both = [c for c in (n, L) if c is not None]
        if len(both) == 2:
            ok = (sdf[n] > 0) & (sdf[L] > 0) & (sdf[tcol] > 0)
            X = np.column_stack([np.ones(ok.sum()), np.log(sdf.loc[ok, n]), np.log(sdf.loc[ok, L])])
            if np.linalg.matrix_rank(X) == 3:
                coef = np.linalg.lstsq(X, np.log(sdf.loc[ok, tcol]), rcond=None)[0]
                fits.append({**({"solver": sname} if sname else {}), "vary": f"{n} and {L} jointly", "fixed": "",
                             "points": int(ok.sum()), "exponent": f"{n}^{coef[1]:.2f} * {L}^{coef[2]:.2f}"})
    for ax, var in ((axes[0], n), (axes[1], L)):
        if ax is None:
            continue
        if var is None:
            ax.set_visible(False)
            continue
        unit = "devices" if var == n else "layers"
        ax.set(xscale="log", yscale="log", xlabel=f"{var} ({unit})", ylabel=f"{tcol} (s)", title=f"solve time vs {var}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    text += (f"From `{name}`: growth exponents b of time ~ a x^b, least squares on log-log (per solver where "
             "the file times several, per fixed value of the other size, and jointly).\n\n" + (save(fig, out, "solve_time.png") if draw else NO_PLOTS) + "\n")
    return text + md_table(pd.DataFrame(fits)) + "\n" + md_table(df, 40)


def section_quality(out: Path) -> str:
    text = "## Search quality vs the oracle\n\n"
    df, name = read(out, "quality*.csv", "bench_quality*.csv", "oracle*.csv", "*gap*.csv")
    if df is None:
        return text + not_run("bench_quality", "quality*.csv / oracle*.csv")
    gap = next((c for c in df.columns if "gap" in c.lower()), None)
    if gap is None:
        return text + f"From `{name}`:\n\n" + md_table(df)
    g = df[gap].dropna().to_numpy(float)
    pct = g if "pct" in gap.lower() else 100.0 * g      # a fraction unless the column says percent
    stats = pd.DataFrame([{"column": gap, "cases": len(pct), "exact (gap <= 1e-6%)": int((pct <= 1e-6).sum()),
                           "median %": np.median(pct) if len(pct) else np.nan,
                           "p95 %": np.percentile(pct, 95) if len(pct) else np.nan,
                           "max %": pct.max() if len(pct) else np.nan,
                           "within 1%": f"{100.0 * (pct <= 1.0).mean():.1f}%" if len(pct) else "",
                           "never worse than a baseline": bool(df["beats_baselines"].all())
                           if "beats_baselines" in df else ""}])
    if plots_on():
        fig, ax = _plt().subplots(figsize=(6, 3.5))
        ax.hist(pct, bins=30)
        ax.set(xlabel="gap of the search to the oracle (%)", ylabel="slots (count)", title="search vs oracle")
        png = save(fig, out, "quality_gap.png")
    else:
        png = NO_PLOTS
    text += f"From `{name}`.\n\n" + md_table(stats) + "\n" + png + "\n"
    return text + md_table(df, 30)


def section_hetero(out: Path) -> str:
    df, name = read(out, "hetero_vs_even_dp.csv")
    if df is None or "reduction_pct" not in df:
        return ""
    return (f"## Strongly heterogeneous clusters vs even DP\n\nFrom `{name}` (bench_online): per-slot reduction "
            f"of batch time against even DP: median {df.reduction_pct.median():.1f}%, min "
            f"{df.reduction_pct.min():.1f}%, max {df.reduction_pct.max():.1f}% over {len(df)} slots "
            "(target: median >= 60%).\n\n")


def section_other(out: Path) -> str:
    rest = [p for p in sorted(out.glob("*.csv")) if p.name not in CONSUMED]
    if not rest:
        return ""
    text = "## Other tables\n\n"
    for p in rest:
        try:
            df = pd.read_csv(p)
        except (pd.errors.EmptyDataError, pd.errors.ParserError):
            continue
        pngs = [q.name for q in sorted(out.glob(p.stem + "*.png"))]
        text += f"### {p.name}\n\n" + md_table(df, 20) + "".join(f"\n![{q}]({q})\n" for q in pngs) + "\n"
    return text


def build(out: Path) -> str:
    CONSUMED.clear()
    parts = ["# dynpar benchmark report\n", f"Generated by `python benchmarks/make_report.py --out {out.name}` from "
             "the CSVs in this folder. Times in seconds; money in USD per iteration, energy in J per iteration.\n",
             section_status(out), section_compare(out), section_v(out), section_offline(out), section_budgets(out),
             section_speed(out), section_quality(out), section_hetero(out)]
    parts.append(section_other(out))
    return "\n".join(p for p in parts if p)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"), help="folder with the CSVs (default results/bench)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if not out.is_dir():
        print(f"make_report: no folder {out}", file=sys.stderr)
        return 1
    (out / "REPORT.md").write_text(build(out))
    print(f"[bench] wrote {out / 'REPORT.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
