"""The search's default work budget against 16 times it, on fresh slots of 8-64 devices drawn
from real layer tables (issue 12: "within 1% of a 16x-budget search on >= 95% of slots").

    python benchmarks/bench_budget.py [OUTDIR] [--slots N] [--seed0 S] [--factor F] [--sizes 8,16,32,64]
                                      [--portfolio 1,3,10,30,100,300]

Slot i (seed S + i, default S = 52_000, apart from the tests' and bench_quality's): the i-th
device count of --sizes in turn, one of bench_quality's workloads (every packaged and shipped
layer table, and ../shared's PipeDream profiles where present), synthetic.random_instance's
kinds, prices and links, device memory at one of bench_quality's four levels of the model's
whole-model need (from "must pipeline" to loose), queues zero on every third slot and random
on the others. Each slot is solved with the default budget and with F times it
(SolveOptions.max_structures). The reference is the better of the two (the search is not
monotone in its budget); the gap is default / reference - 1. With --portfolio B1,B2,...
each slot is also solved at each of those work budgets (max_structures, work units) and the
reference is the best of all the runs: a search cut short scores other structures before its
local search and so descends from other starts, and where one of those ends lower, the
default's local search missed it (a reference the 16x search, which walks the default's path
further, does not give). Prints the share within 1%, median, p95 and max per device count,
and both CPU times (time.process_time, the solver is single-threaded); writes
OUTDIR/budget.csv (default benchmarks/results/).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_quality import MEMORY_LEVELS, memory_level_slot, workloads  # noqa: E402
from solver.cli.argtypes import DocHelp, guarded, nonneg_int, positive_int  # noqa: E402
from solver import SolveOptions, solve_slot  # noqa: E402
from solver.solve.options import SearchTuning  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEED0 = 52_000


def slot(i: int, tables: dict, sizes: tuple[int, ...], seed0: int = SEED0):
    """Slot i of the series: (state, queues, facts)."""
    rng = np.random.default_rng(seed0 + i)
    names = sorted(tables)
    n = sizes[i % len(sizes)]
    name = names[int(rng.integers(len(names)))]
    wl = tables[name]
    level = MEMORY_LEVELS[(i // len(sizes)) % len(MEMORY_LEVELS)]
    state, Q = memory_level_slot(seed0 + i, wl, n, level, rng, queues=i % 3 != 0)
    return state, Q, dict(workload=name, n=n, L=wl.num_layers, memory_level=level)


def run(count: int, sizes: tuple[int, ...], factor: float, seed0: int = SEED0, V: float = 1.0,
        portfolio: tuple[int, ...] = ()) -> pd.DataFrame:
    """One row per slot; with `portfolio` (work budgets), the best of those runs too
    (`portfolio_objective`, and the budget that found it) joins the reference."""
    tables = workloads()
    rows = []
    for i in range(count):
        state, Q, info = slot(i, tables, sizes, seed0)
        n = len(state.available_indices)
        budget = SearchTuning().work_budget(n)
        out = {}
        for label, opt in (("default", SolveOptions()), ("big", SolveOptions(max_structures=factor * budget))):
            t = time.process_time()
            res = solve_slot(state, Q, V, options=opt)
            out[label] = (res.objective, time.process_time() - t)
        best_p, best_b = np.inf, None
        for b in portfolio:
            res = solve_slot(state, Q, V, options=SolveOptions(max_structures=b))
            if res.objective < best_p:
                best_p, best_b = res.objective, b
        ref = min(out["default"][0], out["big"][0], best_p)
        gap = out["default"][0] / ref - 1.0 if np.isfinite(ref) else np.nan
        rows.append(dict(i=i, seed0=seed0, **info, available=n, budget=budget, objective=out["default"][0],
                         big_objective=out["big"][0], gap=gap, big_worse=out["big"][0] > out["default"][0] * (1 + 1e-12),
                         cpu_s=out["default"][1], big_cpu_s=out["big"][1],
                         portfolio_objective=best_p, portfolio_budget=best_b))
        found = f", portfolio best at budget {best_b}" if best_p < min(out["default"][0], out["big"][0]) else ""
        print(f"{i}: {info['workload']} n={n} L={info['L']} mem={info['memory_level']} gap={gap:.3%} "
              f"({out['default'][1]:.2f} s, {factor:g}x {out['big'][1]:.2f} s{found})", flush=True)
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame, factor: float, portfolio: tuple[int, ...] = ()) -> str:
    feas = df[np.isfinite(df["gap"])]
    ref = (f"the best of the two and of budgets {','.join(map(str, portfolio))}" if portfolio
           else "the better of the two")
    lines = [f"{len(feas)} feasible slots of {len(df)}; default budget against {factor:g}x (reference: {ref})"]
    for n, g in [("all", feas), *feas.groupby("n")]:
        x = g["gap"]
        lines.append(f"  n={n}: {len(g)} slots, within 1%: {(x <= 0.01).mean():.1%}, median {x.median():.3%}, "
                     f"p95 {x.quantile(0.95):.3%}, max {x.max():.3%}; {int(g['big_worse'].sum())} where "
                     f"{factor:g}x is worse; CPU median {g['cpu_s'].median():.3f} s against {g['big_cpu_s'].median():.3f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "benchmarks" / "results"), help="output folder")
    ap.add_argument("--slots", type=positive_int, default=32, help="slots (default 32)")
    ap.add_argument("--seed0", type=nonneg_int, default=SEED0, help=f"seed of slot 0 (default {SEED0})")
    ap.add_argument("--factor", type=float, default=16.0, help="budget factor of the reference search (default 16)")
    ap.add_argument("--sizes", default="8,16,32,64", help="device counts, in turn (default 8,16,32,64)")
    ap.add_argument("--portfolio", default="", help="comma-separated work budgets whose runs join the reference "
                                                    "(default: none)")
    args = ap.parse_args(argv)
    try:
        portfolio = tuple(int(x) for x in args.portfolio.split(",") if x.strip())
    except ValueError:
        ap.error(f"--portfolio: expected comma-separated integers, got {args.portfolio!r}")
    if portfolio and min(portfolio) < 0:
        ap.error(f"--portfolio: expected work budgets >= 0, got {args.portfolio!r}")
    try:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    except ValueError:
        ap.error(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        ap.error(f"--sizes: expected device counts >= 1, got {args.sizes!r}")
    df = run(args.slots, sizes, args.factor, args.seed0, portfolio=portfolio)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "budget.csv", index=False)
    print(summarise(df, args.factor, portfolio))
    print(f"wrote {out / 'budget.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
