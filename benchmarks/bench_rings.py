"""The sync's ring choice for more than 7 groups against the exact best ring (cost.sync, cost.rings).

Usage: python -m benchmarks.bench_rings [--sets 150] [--seed 7] [--sizes 8-12,13-16,24] [--out DIR]

Random holder sets of m devices (m drawn from each size range) out of 1-2 m devices on 2 to
n / 2 servers of `io.synthetic.random_network` (fast inside a server, 1-25 Gbit/s between), and
bucket sizes of 1 MB, 100 MB and 1 GB. Per (set, bucket) the least ring time
2(m-1)/m bytes / slowest link + 2(m-1) largest latency over the rings of:
- "chains": the nearest-neighbour chains from 8 starts (the model before session 36);
- "model": the rings cost.sync takes (up to EXACT_FRONT_UP_TO each bucket's least ring by
  branch and bound, the exact front where that stops; the chains improved by the moves that
  remove their worst link above);
- "every move": the chains improved by every-move descents (the reference above 16 holders).
The reference is the exact front (`cost.rings.exact_front`) up to 16 holders, else the best of
the three. Prints, per size range and method, the mean and largest ratio to the reference, the
share of cases at it (to 1e-9) and the CPU milliseconds per holder set; writes rings.csv to --out.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver.cost.rings import best_ring, exact_front, improved_rings  # noqa: E402
from solver.cost.sync import (BRANCH_NODES, EXACT_FRONT_UP_TO, EXACT_RINGS_UP_TO, NN_STARTS, _nn_rings,  # noqa: E402
                               _pareto_rings)
from solver.io.synthetic import random_network  # noqa: E402

BUCKETS = (1e6, 1e8, 1e9)
EXACT_REFERENCE_UP_TO = 16


def _cost(rb: np.ndarray, rl: np.ndarray, m: int, nbytes: float) -> float:
    """Least ring time (seconds) over rings of slowest links rb (bytes/s) and latencies rl (s)."""
    return float((2.0 * (m - 1) / m * nbytes / rb + 2.0 * (m - 1) * rl).min())


def _links(rows: np.ndarray, bw: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos = np.arange(bw.shape[0])
    return bw[pos, rows].min(axis=1), lat[pos, rows].max(axis=1)


def _timed(f):
    t = time.process_time()
    out = f()
    return out, time.process_time() - t


def _model_front(bw: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slowest links, largest latencies) of the rings cost.sync takes above 7 holders: up to
    EXACT_FRONT_UP_TO, each bucket's least ring by branch and bound (the exact front where that
    stops at BRANCH_NODES); above, the heuristic front."""
    m = bw.shape[0]
    nn = _nn_rings(bw, lat, min(m, NN_STARTS))
    if EXACT_RINGS_UP_TO < m <= EXACT_FRONT_UP_TO:
        rb, rl = [], []
        for nb in BUCKETS:
            _, b, t, done = best_ring(bw, lat, 2.0 * (m - 1) / m * nb, 2.0 * (m - 1), nn, BRANCH_NODES)
            if not done:
                _, fb, fl = exact_front(bw, lat, np.concatenate((nn, improved_rings(bw, lat, nn, False, 10 * m))))
                return fb, fl
            rb.append(b)
            rl.append(t)
        return np.array(rb), np.array(rl)
    succ = np.concatenate((nn, improved_rings(bw, lat, nn, False, 10 * m)))
    keep, rb, rl = _pareto_rings(bw, lat, succ)
    return rb[keep], rl[keep]


def run(sets: int, seed: int, sizes: list[tuple[int, int]]) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    warm = np.ascontiguousarray(np.ones((9, 9)))
    exact_front(warm, warm, _nn_rings(warm, warm, 2))
    improved_rings(warm, warm, _nn_rings(warm, warm, 2), True, 5)      # compile before timing
    best_ring(warm, warm, 1.0, 1.0, _nn_rings(warm, warm, 2), 5)
    rows = []
    for lo, hi in sizes:
        for _ in range(sets):
            m = int(rng.integers(lo, hi + 1))
            n = int(rng.integers(m, 2 * m))
            bw, lat = random_network(rng, n, servers=int(rng.integers(2, max(3, n // 2))))
            h = np.sort(rng.choice(n, m, replace=False))
            B, L = np.ascontiguousarray(bw[np.ix_(h, h)]), np.ascontiguousarray(lat[np.ix_(h, h)])
            chains, t_chain = _timed(lambda: _nn_rings(B, L, min(m, NN_STARTS)))
            model, t_model = _timed(lambda: _model_front(B, L))
            every, t_every = _timed(lambda: np.concatenate((chains, improved_rings(B, L, chains, True, 10 * m))))
            exact = exact_front(B, L, chains[:0]) if m <= EXACT_REFERENCE_UP_TO else None
            fronts = {"chains": _links(chains, B, L), "model": model, "every move": _links(every, B, L)}
            times = {"chains": t_chain, "model": t_model, "every move": t_every}
            for nb in BUCKETS:
                cost = {k: _cost(*v, m, nb) for k, v in fronts.items()}
                ref = _cost(exact[1], exact[2], m, nb) if exact is not None else min(cost.values())
                for k, c in cost.items():
                    rows.append(dict(sizes=f"{lo}-{hi}" if lo < hi else str(lo), m=m, bucket_bytes=nb, method=k,
                                     ratio=c / ref, cpu_ms=1e3 * times[k]))
    return pd.DataFrame(rows)


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby(["sizes", "method"], sort=False)
    return pd.DataFrame({"cases": g.size(), "mean_ratio": g.ratio.mean(), "max_ratio": g.ratio.max(),
                         "at_reference": g.ratio.apply(lambda r: float((r <= 1 + 1e-9).mean())),
                         "cpu_ms_per_set": g.cpu_ms.mean()}).round(4)


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if not 8 <= a <= b:
            raise argparse.ArgumentTypeError(f"--sizes: expected ranges of 8 or more holders like 8-12,24, got {part!r}")
        out.append((a, b))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--sets", type=positive_int, default=150, help="holder sets per size range")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sizes", type=_sizes, default=_sizes("8-12,13-16,24"), help="holder counts, ranges")
    ap.add_argument("--out", type=Path, default=None, help="folder for rings.csv (default: none written)")
    args = ap.parse_args(argv)
    df = run(args.sets, args.seed, args.sizes)
    print(f"reference: the exact front up to {EXACT_REFERENCE_UP_TO} holders, else the best of the three")
    print(summarise(df).to_string())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out / "rings.csv", index=False)
        print(f"wrote {args.out / 'rings.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
