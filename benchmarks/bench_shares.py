"""Microseconds per batch-share solve: solve_shares with the persistent ShareLP vs a model
rebuilt every call, the exact integer part alone (no LP bound), the raw LP both ways, and
HiGHS's MIP for comparison (default 1e-4 gap, persistent-free, fewer repetitions).

Usage: .venv/bin/python benchmarks/bench_shares.py [--reps 300] [--B 1024] [--u 4]
Each row cycles through 16 random instances of the same m, so the persistent model sees
changing coefficients and bounds on every call.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from anywhere without installing
from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver.model import NO_CAP  # noqa: E402
from solver.subproblems.shares import ShareLP, solve_shares  # noqa: E402


def instances(rng: np.random.Generator, m: int, B: int, u: int, with_q: bool, k: int = 16) -> list[tuple]:
    """Plausible slots: alpha 2-20 ms/sample, beta 0.05-0.5 s, a third of the groups capped."""
    N, out = B // u, []
    for _ in range(k):
        capn = np.where(rng.random(m) < 0.33, rng.integers(min(N, N // m + 1), N + 1, m), NO_CAP // u)
        q = rng.uniform(0.0, 2e-3, m) if with_q else np.zeros(m)
        out.append((rng.uniform(2e-3, 2e-2, m), rng.uniform(0.05, 0.5, m), capn * u, B, u, 1.0, q))
    return out


def timed(fn: Callable[[tuple], object], insts: list[tuple], reps: int) -> tuple[float, float]:
    """(median, p95) microseconds of fn over reps calls cycling through insts (after a warm-up)."""
    for i in insts:
        fn(i)
    t = np.empty(reps)
    for r in range(reps):
        inst = insts[r % len(insts)]
        t0 = time.perf_counter()
        fn(inst)
        t[r] = time.perf_counter() - t0
    return float(np.median(t)) * 1e6, float(np.percentile(t, 95)) * 1e6


def mip(inst: tuple) -> float:
    """The integer problem as a HiGHS MIP built from scratch (for comparison only)."""
    import highspy
    alpha, beta, cap, B, u, W, q = inst
    m, N, inf = len(alpha), B // u, highspy.kHighsInf
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    for g in range(m):
        h.addVar(1.0, float(min(cap[g] // u, N)))
    h.addVar(-inf, inf)
    h.changeColsIntegrality(m, np.arange(m, dtype=np.int32), np.array([highspy.HighsVarType.kInteger] * m))
    h.changeColsCost(m + 1, np.arange(m + 1, dtype=np.int32), np.r_[q * u, W])
    for g in range(m):
        h.addRow(-inf, -float(beta[g]), 2, np.array([g, m], dtype=np.int32), np.array([alpha[g] * u, -1.0]))
    h.addRow(N, N, m, np.arange(m, dtype=np.int32), np.ones(m))
    h.run()
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return h.getInfo().objective_function_value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--out", default="results/bench", help="folder of shares_speed.csv")
    ap.add_argument("--reps", type=positive_int, default=300)
    ap.add_argument("--B", type=positive_int, default=1024)
    ap.add_argument("--u", type=positive_int, default=4)
    ap.add_argument("--mip-reps", type=positive_int, default=20)
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.mip_reps = min(args.reps, 60), min(args.mip_reps, 4)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    rng = np.random.default_rng(0)
    persistent, rebuilt = ShareLP(), ShareLP(persistent=False)
    cols = ["shares persist", "shares rebuilt", "int only", "LP persist", "LP rebuilt", "MIP"]
    print(f"B={args.B} u={args.u}; median / p95 microseconds per call")
    print(f"{'m':>3} {'q':>4} " + " ".join(f"{c:>17}" for c in cols))
    for with_q in (False, True):
        for m in (1, 2, 4, 8, 16, 64):
            insts = instances(rng, m, args.B, args.u, with_q)
            for inst in insts:   # same answer both ways
                a, b = solve_shares(*inst, lp=persistent), solve_shares(*inst, lp=rebuilt)
                assert a.status == b.status == "optimal" and a.shares == b.shares
            rows = [timed(lambda i: solve_shares(*i, lp=persistent), insts, args.reps),
                    timed(lambda i: solve_shares(*i, lp=rebuilt), insts, args.reps),
                    timed(lambda i: solve_shares(*i, lp_bound=False), insts, args.reps),
                    timed(lambda i: persistent.solve(*i), insts, args.reps),
                    timed(lambda i: rebuilt.solve(*i), insts, args.reps),
                    timed(mip, insts, max(1, args.mip_reps if m <= 16 else args.mip_reps // 4))]
            print(f"{m:>3} {'!=0' if with_q else '0':>4} "
                  + " ".join(f"{md:>8.0f} /{p95:>7.0f}" for md, p95 in rows), flush=True)
            for c, (md, p95) in zip(cols, rows):
                records.append({"m": m, "q": "!=0" if with_q else "0", "method": c,
                                "median_us": md, "p95_us": p95})
    import pandas as pd
    pd.DataFrame(records).to_csv(out / "shares_speed.csv", index=False)
    print(f"wrote {out / 'shares_speed.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
