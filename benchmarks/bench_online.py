"""Online-controller benchmarks: V trade-off, online vs offline, every policy side by side,
a long run's overshoot, and the gain over even DP on strongly heterogeneous clusters.

    python -m benchmarks.bench_online [--quick] [--out results/bench]

Writes CSV tables and PNG plots into --out and prints a summary against the targets:
overshoot <= 1% at 1000 slots; online within 10% of offline on small instances; never worse
than any baseline at equal budget use; median >= 60% below even DP on K80/T4 + V100/A100.
Synthetic instances get budgets calibrated between their cheapest and fastest plans
(solver.online.offline.calibrate_budgets), so that the budgets bind.

Queues are in units of their budget (solver.online.queues), so V weighs one second of batch time
against one budget's worth of cost, whatever the units (USD, J). Every run here has the budget
tracker on at its default 1% (online.tracking); benchmarks/bench_budgets.py measures the
defaults (the scale-free V) on every shipped instance. The sweep is logarithmic over
0.01..100; the policy table uses, per instance, the sweep's fastest V whose overshoot is within
1%; the long run recommends the largest V within 1% at its horizon.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.cli.argtypes import DocHelp, guarded, nonneg_int  # noqa: E402
from solver.model import Device, Instance  # noqa: E402
from solver.online.offline import calibrate_budgets, offline_reference, plans_from_frame  # noqa: E402
from solver.online import run_online, summarise  # noqa: E402
from solver.online.policies import POLICY_NAMES  # noqa: E402
from solver.io.synthetic import KINDS, random_instance  # noqa: E402


def _plots_on() -> bool:
    """matplotlib present (the `plot` extra); without it the CSVs are still written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("plots skipped: matplotlib is not installed (pip install 'dynpar[plot]')")
        return False
    return True


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- instances


def hetero_instance(seed: int, slots: int, per_kind: int = 2, L: int = 12) -> Instance:
    """A strongly heterogeneous cluster: per_kind each of K80, T4, V100 and A100."""
    kinds = [k for k in ("K80", "T4", "V100", "A100") for _ in range(per_kind)]
    base = random_instance(seed, n=len(kinds), L=L, slots=slots)
    devs = []
    for i, k in enumerate(kinds):
        peak, mem, tdp, usd_h = KINDS[k]
        devs.append(Device(f"{k.lower()}-{i}", k, peak, mem, tdp, 0.3 * tdp, usd_h / 3600.0))
    price = np.array([d.price_per_s for d in devs])[None, :] * (base.price / np.array(
        [d.price_per_s for d in base.devices])[None, :])
    return replace(base, name=f"hetero-{seed}", devices=tuple(devs), price=price)


def bench_instances(quick: bool) -> list[Instance]:
    """The default instance (if solver.load_instance and instances/default.toml exist) and two
    synthetic ones with calibrated budgets."""
    out = []
    default = ROOT / "instances" / "default.toml"
    try:
        from solver import load_instance
        if default.exists():
            inst = load_instance(default)
            out.append(inst if not quick else replace(inst, **_cut(inst, 6)))
    except Exception as e:  # noqa: BLE001 - fall back to synthetic instances, say so
        log(f"default instance unavailable ({e}); synthetic instances only")
    slots = 6 if quick else 20
    out.append(calibrate_budgets(random_instance(101, n=6, L=12, slots=slots), 0.4))
    out.append(calibrate_budgets(hetero_instance(7, slots, per_kind=2 if not quick else 1), 0.4))
    if not out[0].name.startswith("random") and len(out) < 3:
        out.append(calibrate_budgets(random_instance(202, n=5, L=10, slots=slots), 0.3))
    return out


def _cut(inst: Instance, slots: int) -> dict:
    s = min(slots, inst.num_slots)
    return {"available": inst.available[:s], "speed_factor": inst.speed_factor[:s],
            "price": inst.price[:s], "bandwidth": inst.bandwidth[:s]}


# ---------------------------------------------------------------- parts


def _to_csv(table: pd.DataFrame, insts: Sequence[Instance], path: Path) -> None:
    """`table` of `_row`s written with the budgets' units (`avg_<b>_usd`, `<b>_limit_j`, ...), as
    compare.csv; make_report reads both forms."""
    from solver.cli.output import compare_columns, with_units
    with_units(table, compare_columns([b for i in insts for b in i.budgets])).to_csv(path, index=False)


def _row(inst: Instance, run, **extra) -> dict:
    s = run.summary
    r = {"instance": inst.name, **extra, "avg_batch_time_s": s["avg_batch_time"],
         "avg_plan_time_s": s["avg_plan_time"], "infeasible_slots": s["infeasible_slots"],
         "avg_solve_time_s": s["avg_solve_time"]}
    for b in inst.budgets:
        r[f"avg_{b.name}"] = s[f"avg_cost_{b.name}"]
        r[f"{b.name}_limit"] = b.limit
        r[f"{b.name}_overshoot_pct"] = 100 * s[f"overshoot_{b.name}"]
        r[f"{b.name}_bound_pct"] = 100 * s[f"bound_{b.name}"]
    return r


def v_sweep(insts: Sequence[Instance], Vs: Sequence[float], out: Path) -> pd.DataFrame:
    rows = []
    for inst in insts:
        for V in Vs:
            t0 = time.perf_counter()
            rows.append(_row(inst, run_online(inst, V=V, policy="ours"), V=V))
            log(f"  V sweep {inst.name} V={V:g}: {rows[-1]['avg_batch_time_s']:.4g} s ({time.perf_counter() - t0:.1f} s)")
    table = pd.DataFrame(rows)
    _to_csv(table, insts, out / "v_sweep.csv")
    if _plots_on():
        from benchmarks.plots import plot_v_sweep
        plot_v_sweep(table, out / "v_sweep.png")
    return table


def online_vs_offline(seeds: Sequence[int], Vs: Sequence[float], out: Path, slots: int) -> pd.DataFrame:
    """Small instances, replan off (the offline reference has no migration): ratio of average
    batch times online / offline, offline at the online run's realised budget use (equal use)
    and at the limits, for every V of the grid."""
    rows = []
    for seed in seeds:
        inst = calibrate_budgets(random_instance(seed, n=4, L=8, slots=slots), 0.3)
        frames = {V: run_online(inst, V=V, policy="ours", replan=False).rows for V in Vs}
        extra = plans_from_frame(list(frames.values()), inst.num_slots)
        at_lim = offline_reference(inst, extra_plans=extra)
        for V, df in frames.items():
            s = summarise(df, inst)
            at_use = offline_reference(inst, extra_plans=extra,
                                       limits=[max(b.limit, s[f"avg_cost_{b.name}"]) for b in inst.budgets])
            r = {"instance": inst.name, "V": V, "online_s": s["avg_batch_time"],
                 "offline_at_use_s": at_use.avg_batch_time, "offline_at_limit_s": at_lim.avg_batch_time,
                 "offline_lp_bound_s": at_lim.lp_bound, "offline_status": at_lim.status,
                 "ratio_at_use": s["avg_batch_time"] / at_use.avg_batch_time,
                 "ratio_at_limit": s["avg_batch_time"] / at_lim.avg_batch_time if at_lim.ok else float("nan")}
            for b in inst.budgets:
                r[f"online_{b.name}_overshoot_pct"] = 100 * s[f"overshoot_{b.name}"]
            rows.append(r)
            log(f"  offline {inst.name} V={V:g}: online/offline at equal use {r['ratio_at_use']:.4f}")
    table = pd.DataFrame(rows)
    table.to_csv(out / "online_vs_offline.csv", index=False)
    if _plots_on():
        from benchmarks.plots import plot_online_vs_offline
        plot_online_vs_offline(table, out / "online_vs_offline.png")
    return table


def pick_V(sweep: pd.DataFrame, inst: Instance, max_overshoot_pct: float = 1.0) -> float:
    """The V of the sweep with the least average batch time whose every overshoot is within
    max_overshoot_pct (else the V with the least worst overshoot)."""
    g = sweep[sweep.instance == inst.name]
    worst = g[[f"{b.name}_overshoot_pct" for b in inst.budgets]].max(axis=1)
    ok = g[worst <= max_overshoot_pct]
    if len(ok):
        return float(ok.sort_values(["avg_batch_time_s", "V"]).iloc[0]["V"])
    return float(g.loc[worst.idxmin(), "V"])


def policies_side_by_side(insts: Sequence[Instance], Vs: dict, out: Path) -> pd.DataFrame:
    rows = []
    for inst in insts:
        V = Vs[inst.name]
        for pol in POLICY_NAMES:
            t0 = time.perf_counter()
            rows.append(_row(inst, run_online(inst, V=V, policy=pol), policy=pol, V=V))
            log(f"  {inst.name} {pol}: {rows[-1]['avg_batch_time_s']:.4g} s ({time.perf_counter() - t0:.1f} s)")
    table = pd.DataFrame(rows)
    for name, g in table.groupby("instance", sort=False):
        base = float(g.loc[g.policy == "even-dp", "avg_batch_time_s"].iloc[0])
        table.loc[g.index, "vs_even_dp_pct"] = 100 * (g["avg_batch_time_s"] / base - 1)
    _to_csv(table, insts, out / "policies.csv")
    if _plots_on():
        from solver.cli.plots import plot_compare_grid
        plot_compare_grid(table, out / "policies.png")
    return table


def long_run(slots: int, Vs: Sequence[float], out: Path) -> pd.DataFrame:
    """i.i.d. synthetic states (random_instance draws every slot independently); the overshoot
    at each V; the recommended V is the largest with every overshoot <= 1%."""
    base = random_instance(303, n=5, L=8, slots=slots)
    inst = calibrate_budgets(base, 0.4, slots=range(min(slots, 30)))
    rows, frames = [], {}
    for V in Vs:
        t0 = time.perf_counter()
        run = run_online(inst, V=V, policy="ours")
        frames[V] = run.rows
        rows.append(_row(inst, run, V=V, slots=slots))
        log(f"  long run V={V:g}: {time.perf_counter() - t0:.1f} s")
    table = pd.DataFrame(rows)
    ok = table[[all(r[f"{b.name}_overshoot_pct"] <= 1.0 for b in inst.budgets) for _, r in table.iterrows()]]
    rec = float(ok["V"].max()) if len(ok) else float(table["V"].min())
    table["recommended"] = table["V"] == rec
    _to_csv(table, [inst], out / "long_run.csv")
    if _plots_on():
        from benchmarks.plots import plot_long_run
        plot_long_run(frames[rec], inst.budgets, rec, out / "long_run.png")
    return table


def hetero_gain(seeds: Sequence[int], slots: int, out: Path) -> pd.DataFrame:
    """Per slot, empty queues (batch time only): 1 - T_ours / T_even_dp on K80/T4 + V100/A100."""
    from solver.baselines import even_dp
    from solver.cost import evaluate
    from solver.solve import SolveOptions, solve_slot

    rows = []
    for seed in seeds:
        inst = hetero_instance(seed, slots)
        for t in range(inst.num_slots):
            st = inst.state(t)
            e = even_dp(st)
            r = solve_slot(st, (0.0,) * len(inst.budgets), 1.0, options=SolveOptions(replan=False))
            if e is None or r.plan is None:
                continue
            te = evaluate(e, st).batch_time
            rows.append({"instance": inst.name, "slot": t, "even_dp_s": te, "ours_s": r.batch_time,
                         "reduction_pct": 100 * (1 - r.batch_time / te)})
    table = pd.DataFrame(rows)
    table.to_csv(out / "hetero_vs_even_dp.csv", index=False)
    return table


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--quick", action="store_true", help="small sizes (a minute or two)")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench"))
    ap.add_argument("--long-slots", type=nonneg_int, default=None, help="slots of the long run (default 1000; quick 150)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    q = args.quick
    t0 = time.perf_counter()
    Vs = [0.03, 0.3, 1.0, 3.0, 30.0] if q else [0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0]

    log("V sweep")
    insts = bench_instances(q)
    sweep = v_sweep(insts, Vs, out)
    Vinst = {i.name: pick_V(sweep, i) for i in insts}
    log("long run")
    long = long_run(args.long_slots or (150 if q else 1000),
                    [0.3, 3.0] if q else [0.1, 0.3, 1.0, 3.0, 10.0], out)
    Vrec = float(long.loc[long.recommended, "V"].iloc[0])
    log(f"policies (V per instance: {Vinst})")
    pol = policies_side_by_side(insts, Vinst, out)
    log("online vs offline")
    off = online_vs_offline(range(3) if q else range(6), [0.1, 1.0, 10.0] if q else [0.03, 0.1, 0.3, 1.0, 3.0, 10.0],
                            out, slots=6 if q else 10)
    log("heterogeneous vs even DP")
    het = hetero_gain(range(2) if q else range(6), 4 if q else 10, out)

    rec = long[long.recommended].iloc[0]
    budgets = [c[: -len("_overshoot_pct")] for c in long.columns if c.endswith("_overshoot_pct")]
    # equal budget use: for each baseline/ablation run, ours' fastest sweep run that uses no
    # more of any budget than max(that run's use, the limit)
    worse, checked = [], 0
    for inst in insts:
        g = pol[pol.instance == inst.name]
        sw = sweep[sweep.instance == inst.name]
        for _, r in g.iterrows():
            if r.policy in ("ours", "v-inf", "v-zero", "frozen", "cuts-only"):
                continue
            fit = sw[np.all([sw[f"avg_{b.name}"] <= max(r[f"avg_{b.name}"], b.limit) * (1 + 1e-9)
                             for b in inst.budgets], axis=0)]
            checked += 1
            if not len(fit) or float(fit.avg_batch_time_s.min()) > r.avg_batch_time_s * (1 + 1e-9):
                worse.append({"instance": inst.name, "policy": r.policy, "baseline_s": r.avg_batch_time_s,
                              "ours_best_at_no_more_use_s": float(fit.avg_batch_time_s.min()) if len(fit) else None})
    best_ratio = off.groupby("instance").ratio_at_use.min()
    summary = {
        "recommended_V": Vrec,
        "long_run_slots": int(rec["slots"]),
        "long_run_overshoot_pct": {b: float(rec[f"{b}_overshoot_pct"]) for b in budgets},
        "target_overshoot_le_1pct": bool(all(rec[f"{b}_overshoot_pct"] <= 1.0 for b in budgets)),
        "online_over_offline_at_equal_use_best_V_per_instance": {k: round(float(v), 4) for k, v in best_ratio.items()},
        "online_over_offline_at_equal_use_all_V": {"median": float(off.ratio_at_use.median()),
                                                   "max": float(off.ratio_at_use.max())},
        "online_over_offline_at_limit_all_V": {"median": float(off.ratio_at_limit.median()),
                                               "max": float(off.ratio_at_limit.max())},
        "target_within_10pct_of_offline": bool(best_ratio.max() <= 1.10),
        "V_per_instance": Vinst,
        "baseline_runs_checked_at_equal_use": checked,
        "baselines_faster_at_no_more_budget_use": worse,
        "hetero_reduction_vs_even_dp_pct": {"median": float(het.reduction_pct.median()),
                                            "min": float(het.reduction_pct.min()),
                                            "max": float(het.reduction_pct.max()), "slots": int(len(het))},
        "target_hetero_median_ge_60pct": bool(het.reduction_pct.median() >= 60.0),
        "policies_vs_even_dp_pct": {f"{r.instance}:{r.policy}": round(float(r.vs_even_dp_pct), 2)
                                    for _, r in pol.iterrows()},
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    (out / "summary_online.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
