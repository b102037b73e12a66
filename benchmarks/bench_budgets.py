"""Budgets met without tuning: default settings on every shipped instance and a long i.i.d. run.

    python -m benchmarks.bench_budgets [--quick] [--out benchmarks/results] [--instances a,b]
                                       [--long-slots 1000] [--tradeoff default,...]

Per instance (instances/*.toml, all slots; the 64/256-device ones have 5 slots), with the
defaults of `dynpar run` (the scale-free V, the budget tracker at 1%):
- budget overshoot (average cost / limit - 1) and average batch time of "ours";
- the plain controller at the same V without the tracker (what the tracker costs in batch time
  and what it saves in overshoot);
- every baseline, and the best one that meets every budget within 1%;
- on instances small enough for the MILP (<= MILP_SLOTS slots, <= MILP_DEVICES devices):
  "ours" with re-planning off (the offline reference has no migration) against the offline
  MILP at equal budget use (the MILP's limits = the online run's realised average costs, the
  online plans among its candidates), online / offline average batch time (a run that spends
  less is compared with a slower reference: docs/BUDGETS.md, "What the metric at equal use
  measures"; online_over_offline_at_limits is against the MILP at the limits + TOL); and
  against the same MILP under the tracker's rule (running excess <= TOL * H after every slot: the reference that,
  like any run with guarantee (c), cannot borrow from later slots), online_over_offline_prefix.
The long run: LONG_SEED's i.i.d. random trace, budgets calibrated between the cheapest and the
fastest plans, tracked and plain. The trade-off (--tradeoff instances): "ours" at each tolerance
of TRADEOFF_TOLERANCES, the plain controller (no tracker, queue prices) at the default V and at
V x TRADEOFF_V_FACTORS, and every baseline: average batch time against budget use, the points of
the report's trade-off plot. Writes budgets_instances.csv, budgets_long.csv and
budgets_tradeoff.csv into --out and prints a table. --quick: the first 5 slots, no instance
with LARGE_N or more devices. --ours-only: per instance only "ours" and the offline comparison
(the plain controller's and the baselines' columns are left empty).

--bound NAME:T0,... (docs/BUDGETS.md, "What no online rule can do"): per pair, the candidates
of the MILP comparison (above), then offline.online_lower_bound at the instance's limits and
TOL over the instance's trace and the H traces that agree with it up to slot T0 - 1 and then
repeat one of its own slots s (s = 0 .. H - 1): with the tracker's rule after every slot and
with the tolerance only at the end; also the instance alone under the rule (what the guarantee
costs with the whole trace known) and "ours" (re-planning off) against the offline optimum at
the limits. Writes budgets_bound.csv.

--slots NAME,... (docs/BUDGETS.md, "Where the gap is, slot by slot"): per slot of each
instance, ours with re-planning off (batch time, use of each budget, the price, the target,
the allowance, what the tracker did) beside the offline MILP's plan at ours' own use and under
the tracker's rule at that use (the comparison of the MILP columns above, same candidates), and
the difference in batch time. Writes budgets_slots.csv.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.cli.argtypes import DocHelp, guarded, nonneg_int  # noqa: E402
from solver import load_instance
from solver.io.synthetic import random_instance
from solver.model import Instance
from solver.online import run_online
from solver.online.offline import (
    calibrate_budgets,
    online_lower_bound,
    plans_from_frame,
    reference_candidates,
    solve_offline,
)
from solver.online.policies import BASELINE_NAMES

TOL = 0.01
MILP_SLOTS = 30
MILP_DEVICES = 12
LONG_SEED = 303
LARGE_N = 64
TRADEOFF_TOLERANCES = (0.0, 0.01, 0.03, 0.1)
TRADEOFF_V_FACTORS = (0.1, 10.0)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _over(s: dict, inst: Instance) -> dict:
    return {f"{b.name}_over_pct": 100 * s[f"overshoot_{b.name}"] for b in inst.budgets}


def _worst(s: dict, inst: Instance) -> float:
    return max((100 * s[f"overshoot_{b.name}"] for b in inst.budgets), default=float("-inf"))


def bench_instance(inst: Instance, milp: bool, others: bool = True) -> dict:
    """One instance's row (module docstring); others=False leaves out the plain controller and
    the baselines (their columns NaN / empty: `--ours-only`)."""
    t0 = time.perf_counter()
    run = run_online(inst)
    s = run.summary
    wall = time.perf_counter() - t0
    row = {"instance": inst.name, "devices": inst.n, "slots": inst.num_slots,
           "budgets": ",".join(b.name for b in inst.budgets), "V": s["V"], "v": s["V_rule"]["v"] if s["V_rule"] else None,
           "ours_s": s["avg_batch_time"], **{f"ours_{k}": v for k, v in _over(s, inst).items()},
           "ours_worst_over_pct": _worst(s, inst), "binding_slots": s["tracker_binding_slots"],
           "attainable": all(s.get(f"attainable_{b.name}", True) for b in inst.budgets),
           "notes": " | ".join(run.notes), "status": str(run.status), "ours_wall_s": round(wall, 1)}
    nan = float("nan")
    if others:
        plain = run_online(inst, V=s["V"], budget_tolerance=None, check_budgets=False).summary
        row.update({"plain_s": plain["avg_batch_time"], **{f"plain_{k}": v for k, v in _over(plain, inst).items()},
                    "plain_worst_over_pct": _worst(plain, inst),
                    "tracker_cost_pct": 100 * (s["avg_batch_time"] / plain["avg_batch_time"] - 1)})
    else:
        row.update({"plain_s": nan, "plain_worst_over_pct": nan, "tracker_cost_pct": nan})
    best, best_name = float("inf"), ""
    for name in BASELINE_NAMES if others else ():
        b = run_online(inst, policy=name).summary
        row[f"{name}_s"] = b["avg_batch_time"]
        row[f"{name}_worst_over_pct"] = _worst(b, inst)
        if _worst(b, inst) <= 100 * TOL and b["avg_batch_time"] < best:
            best, best_name = b["avg_batch_time"], name
    row["best_meeting_baseline"] = best_name
    row["best_meeting_baseline_s"] = best if best_name else float("nan")
    row["ours_vs_best_meeting_pct"] = 100 * (s["avg_batch_time"] / best - 1) if best_name else float("nan")
    if milp:
        t1 = time.perf_counter()
        on = run_online(inst, replan=False)
        so = on.summary
        use = [so[f"avg_cost_{b.name}"] for b in inst.budgets]
        cands = with_plans(reference_candidates(inst, extra_plans=plans_from_frame(on.rows, inst.num_slots),
                                                settings_scales=(0.3, 3.0)))
        off = solve_offline(inst, cands, limits=use)
        pre = solve_offline(inst, cands, limits=use, prefix=([b.limit for b in inst.budgets], TOL * inst.num_slots))
        full = solve_offline(inst, cands, limits=[b.limit * (1 + TOL) for b in inst.budgets])
        row.update({"offline_at_limits_s": full.avg_batch_time, "offline_at_limits_status": str(full.status),
                    "online_over_offline_at_limits": so["avg_batch_time"] / full.avg_batch_time if full.ok else nan})
        row.update({"online_noreplan_s": so["avg_batch_time"], "offline_s": off.avg_batch_time,
                    "offline_status": str(off.status), "offline_lp_bound_s": off.lp_bound,
                    "online_over_offline": so["avg_batch_time"] / off.avg_batch_time if off.ok else nan,
                    "offline_prefix_s": pre.avg_batch_time, "offline_prefix_status": str(pre.status),
                    "online_over_offline_prefix": so["avg_batch_time"] / pre.avg_batch_time if pre.ok else nan,
                    "offline_slots": len(cands), "offline_wall_s": round(time.perf_counter() - t1, 1)})
    log(f"  {inst.name}: ours {row['ours_s']:.4g} s (worst {row['ours_worst_over_pct']:+.2f}%), plain "
        f"{row['plain_s']:.4g} s ({row['plain_worst_over_pct']:+.2f}%), best meeting baseline "
        f"{best_name or ('-' if others else 'not run')}"
        + (f", online/offline {row['online_over_offline']:.4f} (under the tracker's rule "
           f"{row['online_over_offline_prefix']:.4f}, at the limits {row['online_over_offline_at_limits']:.4f})"
           if milp else "") + f" [{time.perf_counter() - t0:.0f} s]")
    return row


def with_plans(cands: list[list]) -> list[list]:
    """The slots that have a candidate plan: a slot with no device has none, and the online run
    skips it too (its averages are over the slots it ran), so the offline reference leaves it
    out (row column offline_slots)."""
    return [c for c in cands if c]


def slot_table(inst: Instance) -> list[dict]:
    """--slots: one row per slot of `inst` (module docstring); batch times in seconds, use in
    budgets' worth (cost / limit), prices in seconds per budget's worth."""
    from solver.cost import evaluate
    t0 = time.perf_counter()
    on = run_online(inst, replan=False)
    so = on.summary
    lim = [b.limit for b in inst.budgets]
    use = [so[f"avg_cost_{b.name}"] for b in inst.budgets]
    cands = reference_candidates(inst, extra_plans=plans_from_frame(on.rows, inst.num_slots), settings_scales=(0.3, 3.0))
    off = solve_offline(inst, cands, limits=use)
    pre = solve_offline(inst, cands, limits=use, prefix=(lim, TOL * inst.num_slots))
    if not (off.ok and pre.ok):
        raise RuntimeError(f"--slots {inst.name}: the offline MILP is {off.status} / under the rule {pre.status}")
    rows = []
    for t in range(len(on.rows)):
        r = on.rows.iloc[t]
        row = {"instance": inst.name, "slot": t, "ours_s": r["batch_time"], "tracker": r["tracker"]}
        for k, b in enumerate(inst.budgets):
            row[f"ours_{b.name}_use"] = r[f"cost_{b.name}"] / lim[k]
            row[f"price_{b.name}"] = r[f"price_{b.name}"]
            row[f"target_{b.name}"] = r[f"target_{b.name}"]
            row[f"allowance_{b.name}"] = r[f"allowance_{b.name}"]
        for label, res in (("offline", off), ("offline_rule", pre)):
            ev = evaluate(res.plans[t], inst.state(t))
            row[f"{label}_s"] = ev.batch_time
            for k, b in enumerate(inst.budgets):
                row[f"{label}_{b.name}_use"] = ev.costs[k] / lim[k]
        row["ours_minus_offline_s"] = row["ours_s"] - row["offline_s"]
        row["ours_minus_offline_rule_s"] = row["ours_s"] - row["offline_rule_s"]
        rows.append(row)
    log(f"  slots {inst.name}: ours {so['avg_batch_time']:.4g} s, offline at ours' use {off.avg_batch_time:.4g} s "
        f"({so['avg_batch_time'] / off.avg_batch_time:.4f}), under the rule {pre.avg_batch_time:.4g} s "
        f"({so['avg_batch_time'] / pre.avg_batch_time:.4f}) [{time.perf_counter() - t0:.0f} s]")
    return rows


def _trace_name(j: int, t0: int, H: int) -> str:
    """Trace j of bound()'s family in words."""
    return "the instance" if j == 0 else f"slots {t0}-{H - 1} repeat slot {j - 1}"


def bound(inst: Instance, t0: int) -> list[dict]:
    """The lower bounds of --bound for `inst` shared up to slot t0 - 1 (module docstring)."""
    if not (1 <= t0 < inst.num_slots):
        raise ValueError(f"--bound {inst.name}:{t0}: T0 must be in 1..{inst.num_slots - 1}, got {t0}")
    t_start = time.perf_counter()
    on = run_online(inst, replan=False)
    cands = reference_candidates(inst, extra_plans=plans_from_frame(on.rows, inst.num_slots), settings_scales=(0.3, 3.0))
    lim = [b.limit for b in inst.budgets]
    H = inst.num_slots
    family = [cands] + [cands[:t0] + [cands[s]] * (H - t0) for s in range(H)]
    alone = online_lower_bound([cands], H, lim, TOL, prefix=True)
    ours = on.summary["avg_batch_time"]
    rows = []
    for prefix in (True, False):
        t1 = time.perf_counter()
        b = online_lower_bound(family, t0, lim, TOL, prefix=prefix)
        rows.append({"instance": inst.name, "slots": H, "shared_slots": t0, "traces": len(family),
                     "rule": "after every slot" if prefix else "at the end", "status": str(b.status),
                     "bound_ratio": b.ratio, "offline_at_limits_s": b.offline[0] if b.offline else float("nan"),
                     "worst_trace": _trace_name(int(np.argmax(np.asarray(b.bound_s) / np.asarray(b.offline))), t0, H)
                     if b.ok else "",
                     "alone_under_rule_ratio": alone.ratio, "ours_noreplan_s": ours,
                     "ours_over_offline_at_limits": ours / alone.offline[0] if alone.offline else float("nan"),
                     "bound_wall_s": round(time.perf_counter() - t1, 1)})
        log(f"  bound {inst.name} shared 0..{t0 - 1}, {len(family)} traces, rule {rows[-1]['rule']}: "
            f"{b.ratio:.4f} ({b.status}); alone under the rule {alone.ratio:.4f}; ours (no re-planning) / offline at "
            f"the limits {rows[-1]['ours_over_offline_at_limits']:.4f} [{time.perf_counter() - t_start:.0f} s]")
    return rows


def _point(inst: Instance, label: str, kind: str, s: dict, tolerance: float | None) -> dict:
    use = {f"{b.name}_use_pct": 100 * s[f"avg_cost_{b.name}"] / b.limit for b in inst.budgets}
    return {"instance": inst.name, "policy": label, "kind": kind, "tolerance": tolerance, "V": s["V"],
            "avg_batch_time_s": s["avg_batch_time"], **use, "worst_use_pct": max(use.values(), default=float("nan"))}


def tradeoff(inst: Instance) -> list[dict]:
    """Average batch time against budget use: "ours" at each tolerance, the plain controller
    at several V, every baseline (module docstring)."""
    rows = []
    V0 = None
    for tol in TRADEOFF_TOLERANCES:
        s = run_online(inst, budget_tolerance=tol).summary
        V0 = s["V"]
        rows.append(_point(inst, f"ours, tolerance {100 * tol:g}%", "ours", s, tol))
    for f in (1.0, *TRADEOFF_V_FACTORS):
        s = run_online(inst, V=V0 * f, budget_tolerance=None, check_budgets=False).summary
        rows.append(_point(inst, f"plain, V = {V0 * f:.3g}", "plain", s, None))
    for name in BASELINE_NAMES:
        rows.append(_point(inst, name, "baseline", run_online(inst, policy=name).summary, None))
    log(f"  trade-off {inst.name}: {len(rows)} points")
    return rows


def long_run(slots: int) -> pd.DataFrame:
    inst = calibrate_budgets(random_instance(LONG_SEED, n=5, L=8, slots=slots), 0.4, slots=range(min(slots, 30)))
    rows = []
    for label, kw in (("ours (default)", {}), ("plain, same V", None)):
        t0 = time.perf_counter()
        if kw is None:
            kw = {"V": rows[0]["V"], "budget_tolerance": None}
        s = run_online(inst, **kw).summary
        rows.append({"run": label, "slots": slots, "V": s["V"], "avg_batch_time_s": s["avg_batch_time"],
                     **_over(s, inst), "binding_slots": s["tracker_binding_slots"],
                     "wall_s": round(time.perf_counter() - t0, 1)})
        log(f"  long run {label}: {rows[-1]}")
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--quick", action="store_true", help="first 5 slots of each instance, 150-slot long run")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--instances", default="", help="comma-separated instance names (default all; '-': none)")
    ap.add_argument("--long-slots", type=nonneg_int, default=None, help="slots of the long run (default 1000; quick 150; 0: none)")
    ap.add_argument("--bound", default="", help="comma-separated NAME:T0 pairs: the online lower bound (default: none)")
    ap.add_argument("--slots", default="", help="comma-separated instances: the per-slot comparison with the offline "
                    "MILP (writes budgets_slots.csv)")
    ap.add_argument("--tradeoff", default="default", help="comma-separated instances of the trade-off (default: default; '': none)")
    ap.add_argument("--ours-only", action="store_true",
                    help="per instance only ours and the offline comparison (no plain controller, no baselines)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [] if args.instances == "-" else (
        [n for n in args.instances.split(",") if n] or sorted(p.stem for p in (ROOT / "instances").glob("*.toml")))
    rows = []
    for name in names:
        inst = load_instance(ROOT / "instances" / f"{name}.toml")
        if args.quick:
            if inst.n >= LARGE_N:
                continue
            inst = inst.head(min(5, inst.num_slots))
        rows.append(bench_instance(inst, inst.num_slots <= MILP_SLOTS and inst.n <= MILP_DEVICES,
                                   others=not args.ours_only))
        pd.DataFrame(rows).to_csv(out / "budgets_instances.csv", index=False)   # after each instance
    table = pd.DataFrame(rows)
    points = []
    for name in filter(None, args.tradeoff.split(",")):
        inst = load_instance(ROOT / "instances" / f"{name}.toml")
        points += tradeoff(inst.head(min(5, inst.num_slots)) if args.quick else inst)
        pd.DataFrame(points).to_csv(out / "budgets_tradeoff.csv", index=False)
    per_slot = []
    for name in filter(None, args.slots.split(",")):
        per_slot += slot_table(load_instance(ROOT / "instances" / f"{name}.toml"))
        pd.DataFrame(per_slot).to_csv(out / "budgets_slots.csv", index=False)
    bounds = []
    for pair in filter(None, args.bound.split(",")):
        name, _, t0 = pair.partition(":")
        if not t0.isdigit():
            raise SystemExit(f"--bound: expected NAME:T0 with T0 a slot number, got {pair!r}")
        bounds += bound(load_instance(ROOT / "instances" / f"{name}.toml"), int(t0))
        pd.DataFrame(bounds).to_csv(out / "budgets_bound.csv", index=False)
    long = long_run(args.long_slots or (150 if args.quick else 1000)) if args.long_slots != 0 else pd.DataFrame()
    if len(long):
        long.to_csv(out / "budgets_long.csv", index=False)
    cols = ["instance", "slots", "V", "ours_s", "ours_worst_over_pct", "plain_s", "plain_worst_over_pct",
            "tracker_cost_pct", "best_meeting_baseline", "ours_vs_best_meeting_pct", "online_over_offline",
            "online_over_offline_prefix", "online_over_offline_at_limits"]
    with pd.option_context("display.width", 220, "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        if not table.empty:
            print(table[[c for c in cols if c in table]].to_string(index=False))
        if len(long):
            print()
            print(long.to_string(index=False))
        if points:
            print()
            print(pd.DataFrame(points).to_string(index=False))
        if bounds:
            print()
            print(pd.DataFrame(bounds).to_string(index=False))
    if table.empty:
        return 0
    att = table[table.attainable]
    print(json.dumps({
        "attainable_instances_within_1pct": int((att.ours_worst_over_pct <= 100 * TOL + 1e-9).sum()),
        "attainable_instances": len(att),
        "unattainable": [r.notes for r in table[~table.attainable].itertuples()],
        "ours_slower_than_a_meeting_baseline": (table.loc[table.ours_vs_best_meeting_pct > 0, "instance"].tolist()
                                                if not args.ours_only else "not run (--ours-only)"),
        "online_over_offline_max": float(np.nanmax(table["online_over_offline"])) if "online_over_offline" in table else None,
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
