"""Wall time of solve_slot against pool size n and model depth L.

    python benchmarks/bench_speed.py [--out OUTDIR] [--quick]

n in {4, 8, 16, 32, 64}, L in {20, 50, 200}; random slots with zero and with positive queues.
Prints median / p95 seconds per cell; writes OUTDIR/speed.csv (default results/bench/).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.solve import solve_slot  # noqa: E402
from solver.io.synthetic import random_state  # noqa: E402

NS = (4, 8, 16, 32, 64)
LS = (20, 50, 200)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=None, help="output folder (same as --out)")
    ap.add_argument("--out", default="results/bench", help="output folder (default results/bench)")
    ap.add_argument("--quick", action="store_true", help="3 slots per cell instead of 10")
    args = ap.parse_args(argv)
    reps = 3 if args.quick else 10
    solve_slot(random_state(0, n=4, L=8))   # warm imports and HiGHS
    rows = []
    for n in NS:
        for L in LS:
            for r in range(reps):
                state = random_state(1000 * n + 10 * L + r, n=n, L=L)
                Q = (0.0, 0.0) if r % 2 == 0 else (2.0, 0.5)   # queues in budget units
                res = solve_slot(state, Q, 1.0)
                rows.append(dict(n=n, L=L, rep=r, seconds=res.solve_time, candidates=res.candidates,
                                 groups=len(res.plan.groups) if res.plan else 0, status=res.status))
    df = pd.DataFrame(rows)
    table = df.groupby(["n", "L"])["seconds"].agg(median="median", p95=lambda s: float(np.quantile(s, 0.95)))
    print((table * 1e3).round(1).rename(columns=lambda c: c + "_ms").to_string())
    out = Path(args.outdir or args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "speed.csv", index=False)
    print(f"wrote {out / 'speed.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
