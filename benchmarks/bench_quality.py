"""Plan quality of the tentative search against the exhaustive oracle (n <= 6 devices).

    python benchmarks/bench_quality.py [OUTDIR] [--quick] [--instances N]

Per random slot: objective gap search / oracle - 1, whether the search beats or ties every
baseline, batch time over the FLOP lower bound, solve times. Prints median / p95 / max gap and
the fraction within 1%; writes OUTDIR/quality.csv (default results/bench/).
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

from solver import baselines  # noqa: E402
from solver.cost import evaluate, lower_bound_time  # noqa: E402
from solver.solve.oracle import solve_exact  # noqa: E402
from solver.solve import solve_slot  # noqa: E402
from solver.io.synthetic import random_state  # noqa: E402


def instance(i: int):
    """Instance i: n = 2..6 devices, L = 4..10 layers, memory from loose to tight, queues zero
    for even i and random otherwise."""
    rng = np.random.default_rng(10_000 + i)
    n = 2 + i % 5
    L = int(rng.choice([4, 6, 8, 10]))
    scale = float(rng.choice([1.0, 10.0, 30.0]))
    state = random_state(10_000 + i, n=n, L=L, p_available=float(rng.choice([0.8, 1.0])), scale=scale)
    Q = (0.0, 0.0) if i % 2 == 0 else (float(rng.uniform(0, 3)), float(rng.uniform(0, 3)))   # budget units
    return state, Q, dict(n=n, L=L, scale=scale)


def run(count: int, V: float = 1.0) -> pd.DataFrame:
    rows = []
    for i in range(count):
        state, Q, info = instance(i)
        t = time.perf_counter()
        ex = solve_exact(state, Q, V)
        t_ex = time.perf_counter() - t
        res = solve_slot(state, Q, V)
        row = dict(i=i, **info, available=len(state.available_indices), oracle_time=t_ex,
                   search_time=res.solve_time, status=res.status,
                   oracle_mode="model" if "exact for the model" in ex.message else "frontier")
        if ex.plan is None or res.plan is None:
            row.update(gap=np.nan, beats_baselines=True, time_over_lb=np.nan)
        else:
            base = [evaluate(p, state).objective(Q, V) for p in (f(state) for f in baselines.ALL.values()) if p]
            row.update(gap=res.objective / ex.objective - 1.0,
                       beats_baselines=all(res.objective <= b * (1 + 1e-9) for b in base),
                       best_baseline_ratio=res.objective / min(base) if base else np.nan,
                       time_over_lb=res.batch_time / lower_bound_time(state),
                       search_objective=res.objective, oracle_objective=ex.objective)
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame) -> str:
    g = df["gap"].dropna()
    lines = [f"instances: {len(df)} ({len(g)} feasible; oracle exact for the model on "
             f"{int((df['oracle_mode'] == 'model').sum())}, relative to frontier cuts on the rest)",
             f"gap search/oracle - 1: median {g.median():.4%}  p95 {g.quantile(0.95):.4%}  max {g.max():.4%}  "
             f"mean {g.mean():.4%}",
             f"within 1%: {(g <= 0.01).mean():.1%}   exact (gap <= 1e-9): {(g <= 1e-9).mean():.1%}",
             f"never worse than a baseline: {bool(df['beats_baselines'].all())}",
             f"objective / best baseline: median {df['best_baseline_ratio'].median():.3f}",
             f"batch time / lower bound: median {df['time_over_lb'].median():.2f}  "
             f"p95 {df['time_over_lb'].quantile(0.95):.2f}",
             f"search time median {df['search_time'].median() * 1e3:.1f} ms, "
             f"oracle time median {df['oracle_time'].median() * 1e3:.0f} ms"]
    by_n = df.groupby("available")["gap"].agg(["count", "median", "max"])
    lines.append("gap by available devices:\n" + by_n.to_string())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=None, help="output folder (same as --out)")
    ap.add_argument("--out", default="results/bench", help="output folder (default results/bench)")
    ap.add_argument("--quick", action="store_true", help="30 instances")
    ap.add_argument("--instances", type=int, default=None)
    args = ap.parse_args(argv)
    count = args.instances or (30 if args.quick else 200)
    df = run(count)
    out = Path(args.outdir or args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "quality.csv", index=False)
    print(summarise(df))
    print(f"wrote {out / 'quality.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
