"""Plan quality on fresh slots drawn from real layer tables: the search against the oracle
(n <= 6) and against the per-slot lower bound.

    python benchmarks/bench_quality.py [OUTDIR] [--quick] [--instances N] [--max-oracle-L L] [--max-oracle-n N]
                                       [--seed0 S] [--oracle-from CSV]
    python benchmarks/bench_quality.py --rebound CSV

--oracle-from CSV reuses the oracle objectives recorded there for the same slots (the oracle
is deterministic; it takes minutes per slot at L ~ 177), so that a changed search is re-measured
on the same slots in seconds.

--rebound recomputes only this tree's lower bound on the slots of a recorded quality.csv
(same seeds) against the objectives recorded there, and prints both certified gaps.

Workloads: every packaged layer table (solver/data/models), the imported tables shipped with
the instances (instances/*_layers.csv) and, when ../shared/data is present, the PipeDream
profiles there (imported by solver.io.pipedream). Per slot (seeds S + i, default S = 31_000, apart
from the tests'; another --seed0 draws fresh slots): one workload, n = 2..6 random devices
(synthetic.random_instance's kinds, prices and links), device memory set to a multiple of the model's whole-model need at one micro-batch
(levels 0.35, 0.7, 1.5, 4 in turn: from "must pipeline" to loose; the workload changes
every four slots), queues zero on every third slot
and random (0..3 budget units) on the others. Records the search's gap to the oracle
(solve_exact; slots with L > --max-oracle-L, default 200, or more than --max-oracle-n
available devices, default 5 (6 takes minutes per slot at L ~ 70), skip it), its certified gap to
SlotResult.lower_bound, and times. Prints medians / p95 / max and the fraction within 1%, by
workload; writes OUTDIR/quality.csv (default benchmarks/results/).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.cli.argtypes import DocHelp, guarded, nonneg_int, positive_int  # noqa: E402
from solver.io.data import models_dir, packaged_models  # noqa: E402
from solver.io.synthetic import random_instance  # noqa: E402
from solver.io.workloads import read_workload_csv  # noqa: E402
from solver.solve import solve_exact, solve_slot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "profiles" / "pipedream"
MEMORY_LEVELS = (0.35, 0.7, 1.5, 4.0)
SEED0 = 31_000


def workloads() -> dict[str, object]:
    """name -> Workload (B = 64, u = 4 for the packaged tables; imported ones keep theirs when
    it divides, else the same)."""
    out = {}
    for name in packaged_models():
        out[name] = read_workload_csv(models_dir() / f"{name}.csv", 64, 4)
    for p in sorted((ROOT / "instances").glob("*_layers.csv")):
        out[p.stem.removesuffix("_layers")] = read_workload_csv(p, 64, 4)
    if SHARED.is_dir():
        from solver.io.pipedream import import_profile
        for p in sorted(SHARED.glob("*/graph.txt")):
            key = "pd_" + p.parent.name
            if key.removeprefix("pd_") not in {k.removeprefix("pipedream_") for k in out}:
                out[key] = import_profile(p, batch=64, micro_batch=4)
    return out


def slot(i: int, tables: dict, seed0: int = SEED0):
    """Slot i of the series drawn from seed0: (state, queues, facts)."""
    rng = np.random.default_rng(seed0 + i)
    names = sorted(tables)
    name = names[(i // len(MEMORY_LEVELS)) % len(names)]
    wl = tables[name]
    n = int(rng.integers(2, 7))
    level = MEMORY_LEVELS[i % len(MEMORY_LEVELS)]
    state, Q = memory_level_slot(seed0 + i, wl, n, level, rng, queues=i % 3 != 0)
    return state, Q, dict(workload=name, n=n, L=wl.num_layers, memory_level=level)


def memory_level_slot(seed: int, wl, n: int, level: float, rng: np.random.Generator, queues: bool):
    """(state, queues) of a fresh slot: n devices of synthetic.random_instance(seed) running wl,
    each with memory `level` x the model's whole-model need at one micro-batch (x U(0.8, 1.25)
    from rng), and queues U(0, 3) budget units from rng when `queues`, else zero."""
    inst = random_instance(seed, n=n, L=4, slots=1, p_leave=0.0)
    whole = wl.opt_factor * float(np.sum(wl.param_bytes)) + wl.micro_batch * float(np.sum(wl.stash_bytes))
    devs = tuple(replace(d, memory_bytes=level * whole * float(rng.uniform(0.8, 1.25))) for d in inst.devices)
    state = replace(inst, workload=wl, devices=devs).state(0)
    Q = tuple(float(x) for x in rng.uniform(0, 3, len(state.budgets))) if queues else (0.0,) * len(state.budgets)
    return state, Q


def recorded_oracle(csv: Path | None) -> dict[tuple[int, int], float]:
    """(seed0, i) -> the oracle's objective recorded in a quality.csv (its oracle_objective
    column, else objective / (1 + gap)); {} for None."""
    if csv is None:
        return {}
    df = pd.read_csv(csv)
    df = df[df["gap"].notna()]
    obj = df["oracle_objective"] if "oracle_objective" in df else df["objective"] / (1.0 + df["gap"])
    seeds = df["seed0"] if "seed0" in df else pd.Series(SEED0, index=df.index)
    return {(int(a), int(b)): float(o) for a, b, o in zip(seeds, df["i"], obj)}


def run(count: int, max_oracle_L: int, max_oracle_n: int, V: float = 1.0, seed0: int = SEED0,
        oracle_from: Path | None = None) -> pd.DataFrame:
    tables = workloads()
    known = recorded_oracle(oracle_from)
    rows = []
    for i in range(count):
        state, Q, info = slot(i, tables, seed0)
        res = solve_slot(state, Q, V)
        row = dict(i=i, seed0=seed0, **info, available=len(state.available_indices), gap=np.nan,   # first "gap" column:
                   search_time=res.solve_time, status=str(res.status),              # make_report's
                   objective=res.objective, lower_bound=res.lower_bound, gap_to_bound=res.gap,
                   oracle_time=np.nan, oracle_status="")
        if res.plan is not None and (seed0, i) in known:
            row.update(oracle_status="recorded", oracle_mode="recorded", oracle_objective=known[(seed0, i)],
                       gap=res.objective / known[(seed0, i)] - 1.0)
        elif res.plan is not None and info["L"] <= max_oracle_L and row["available"] <= max_oracle_n:
            t, c = time.perf_counter(), time.process_time()
            ex = solve_exact(state, Q, V)
            row.update(oracle_time=time.perf_counter() - t, oracle_cpu_s=time.process_time() - c,
                       oracle_status=str(ex.status),
                       oracle_mode="model" if "exact for the model" in ex.message
                       and "exact only relative" not in ex.message else "restricted",
                       gap=res.objective / ex.objective - 1.0 if ex.plan is not None else np.nan,
                       oracle_objective=ex.objective,
                       oracle_gap_to_bound=ex.gap)
        rows.append(row)
        print(f"{i}: {info['workload']} n={info['n']} L={info['L']} mem={info['memory_level']} "
              f"gap={row['gap']:.4%} bound gap={res.gap:.2%}", flush=True)
    return pd.DataFrame(rows)


def _stats(x: pd.Series) -> str:
    x = x.dropna()
    if not len(x):
        return "none"
    return (f"n={len(x)} median {x.median():.3%} p95 {x.quantile(0.95):.3%} max {x.max():.3%} "
            f"within 1%: {(x <= 0.01).mean():.1%}")


def summarise(df: pd.DataFrame) -> str:
    feas = df[df["objective"] < np.inf]
    lines = [f"slots: {len(df)} ({len(feas)} feasible), workloads {sorted(df['workload'].unique())}",
             f"search vs oracle (objective / oracle - 1): {_stats(feas['gap'])}",
             f"search certified gap to the lower bound: {_stats(feas['gap_to_bound'])}"]
    if "oracle_gap_to_bound" in feas:
        lines.append(f"oracle certified gap to the lower bound: {_stats(feas['oracle_gap_to_bound'])}")
    if "oracle_mode" in feas:
        modes = feas["oracle_mode"].dropna()
        modes = modes[modes != ""]
        lines.append("oracle: " + ", ".join(f"{k} {v}" for k, v in modes.value_counts().items())
                     + " (model: every cut set or the certified frontier; restricted: frontier cut sets only)")
    below = feas[feas["gap"] < -1e-9]
    lines.append(f"search below the oracle (gap < -1e-9): {len(below)} slots"
                 + (f", by up to {-below['gap'].min():.4%}" if len(below) else ""))
    lines.append(f"search time median {feas['search_time'].median() * 1e3:.1f} ms; "
                 f"oracle time median {feas['oracle_time'].median() * 1e3:.0f} ms")
    if "oracle_cpu_s" in feas and feas["oracle_cpu_s"].notna().any():
        cpu = feas["oracle_cpu_s"].dropna()
        lines.append(f"oracle CPU time: median {cpu.median():.1f} s, max {cpu.max():.1f} s, "
                     f"total {cpu.sum():.0f} s over {len(cpu)} slots")
    by = feas.groupby("workload").agg(slots=("gap_to_bound", "size"), L=("L", "first"),
                                      gap_median=("gap", "median"), gap_max=("gap", "max"),
                                      bound_gap_median=("gap_to_bound", "median"))
    lines.append(by.to_string(float_format=lambda v: f"{v:.4f}"))
    return "\n".join(lines)


def rebound(csv: Path, V: float = 1.0) -> str:
    """Certified gaps of a recorded quality.csv with its recorded bounds and with this tree's
    slot_lower_bound on the same slots (objectives as recorded)."""
    from solver.solve.bounds import slot_lower_bound
    from solver.solve.inputs import check_queues
    df = pd.read_csv(csv)
    df = df[df["objective"] < np.inf]
    tables = workloads()
    now = []
    seeds = df["seed0"] if "seed0" in df else [SEED0] * len(df)
    for i, s0 in zip(df["i"], seeds):
        state, Q, _ = slot(int(i), tables, int(s0))
        now.append(slot_lower_bound(state, check_queues(state, Q), V))
    now = np.array(now)
    single = df["available"].to_numpy() == 1          # the recorded bound is exact there
    now = np.where(single, df["lower_bound"].to_numpy(), now)
    obj = df["objective"].to_numpy()
    above = int(np.sum(now > obj * (1 + 1e-9)))
    return (f"{len(df)} feasible slots of {csv}: certified gap median recorded "
            f"{np.median(df['gap_to_bound']):.1%}, this tree's bound {np.median((obj - now) / obj):.1%}; "
            f"bounds above the recorded objective: {above}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("outdir", nargs="?", default=None, help="output folder (same as --out)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output folder")
    ap.add_argument("--quick", action="store_true", help="12 slots, the oracle only up to L = 50")
    ap.add_argument("--instances", type=positive_int, default=None, help="slots (default 120)")
    ap.add_argument("--max-oracle-L", type=positive_int, default=200, help="skip the oracle above this many layers")
    ap.add_argument("--max-oracle-n", type=positive_int, default=5, help="skip the oracle above this many devices (<= 6)")
    ap.add_argument("--seed0", type=nonneg_int, default=SEED0, help=f"seed of slot 0 (default {SEED0})")
    ap.add_argument("--oracle-from", type=Path, default=None,
                    help="take the oracle's objective of a slot (same seed0 and index) from this recorded quality.csv")
    ap.add_argument("--rebound", type=Path, default=None, help="only recompute the bound on a recorded quality.csv")
    args = ap.parse_args(argv)
    if args.rebound:
        print(rebound(args.rebound))
        return 0
    count = args.instances or (12 if args.quick else 120)
    df = run(count, min(args.max_oracle_L, 50) if args.quick else args.max_oracle_L, args.max_oracle_n,
             seed0=args.seed0, oracle_from=args.oracle_from)
    out = Path(args.outdir or args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "quality.csv", index=False)
    print(summarise(df))
    print(f"wrote {out / 'quality.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
