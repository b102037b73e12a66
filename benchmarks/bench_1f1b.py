"""The 1F1B time bound against the event simulator on thousands of random pipelines.

Usage: python -m benchmarks.bench_1f1b [--quick] [--n 3000] [--out DIR]
Prints, per link model (half / full duplex) and recomputation, the largest simulated time over
the upper bound u (C + (n-1)(max F + max G + 2 max lam)) (never above 1), how loose the bound is
(median and p95 of bound / simulated), the smallest simulated time over the lower bound
u (C + (n-1) M), and how often 1F1B is faster or slower than GPipe on the same pipeline.
Pipelines: 2-8 stages, speeds over 10x, work 1-20 units, G = 1-3 F, links 1 MB/s to 100 GB/s.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver.cost.pipeline import one_f_one_b_coeffs  # noqa: E402
from solver.cost.simulator import simulate  # noqa: E402


def random_pipeline(rng: np.random.Generator):
    k = int(rng.integers(2, 9))
    u = int(rng.choice([1, 2, 4, 8]))
    n = int(rng.integers(1, 17))
    F = 1e-3 * rng.uniform(1, 20, k) / 10 ** rng.uniform(0, 1, k)
    G = F * rng.uniform(1, 3, k)
    lam = rng.uniform(1e5, 5e6, k - 1) / 10 ** rng.uniform(6, 11, k - 1) + 10 ** rng.uniform(-6, -2, k - 1) / u
    return F, G, lam, u, n


def run(count: int, seed: int = 0) -> list[dict]:
    rows = []
    for duplex in ("half", "full"):
        for recompute in (False, True):
            rng = np.random.default_rng(seed)
            over, loose, under, faster, slower, worst = [], [], [], 0, 0, 1.0
            for _ in range(count):
                F, G, lam, u, n = random_pipeline(rng)
                b = n * u
                T = simulate(F, G, lam, u, b, "1f1b", recompute=recompute, duplex=duplex).makespan
                Tg = simulate(F, G, lam, u, b, "gpipe", recompute=recompute, duplex=duplex).makespan
                Gr = G + F if recompute else G
                a, beta = one_f_one_b_coeffs(F, Gr, lam, u)
                hi = a * b + beta
                lo = u * (F.sum() + Gr.sum() + 2 * lam.sum() + (n - 1) * max(F.max(), Gr.max(), lam.max()))
                over.append(T / hi)
                loose.append(hi / T)
                under.append(T / lo)
                faster += T < Tg * (1 - 1e-9)
                slower += T > Tg * (1 + 1e-9)
                worst = max(worst, T / Tg)
            rows.append({"duplex": duplex, "recompute": recompute, "pipelines": count,
                         "max_sim_over_upper": max(over), "median_upper_over_sim": float(np.median(loose)),
                         "p95_upper_over_sim": float(np.percentile(loose, 95)),
                         "min_sim_over_lower": min(under), "1f1b_faster": faster / count,
                         "1f1b_slower": slower / count, "worst_1f1b_over_gpipe": worst})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=positive_int, default=3000, help="random pipelines per setting")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = run(300 if args.quick else args.n)
    for r in rows:
        print(f"duplex={r['duplex']:<4} recompute={r['recompute']!s:<5} n={r['pipelines']}: "
              f"max sim/upper {r['max_sim_over_upper']:.12f}  upper/sim median {r['median_upper_over_sim']:.3f} "
              f"p95 {r['p95_upper_over_sim']:.3f}  min sim/lower {r['min_sim_over_lower']:.12f}  "
              f"1F1B faster {100 * r['1f1b_faster']:.1f}% slower {100 * r['1f1b_slower']:.1f}% "
              f"(worst {r['worst_1f1b_over_gpipe']:.3f}x)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_1f1b.json").write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["max_sim_over_upper"] > 1 + 1e-9 or r["min_sim_over_lower"] < 1 - 1e-9]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
