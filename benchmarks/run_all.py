"""Run every benchmark that exists, a per-instance policy comparison, then the report.

    python -m benchmarks.run_all [--quick] [--out results/bench]      (also: dynpar bench)

1. each of benchmarks/bench_{quality,speed,online,shares,torch,budgets}.py runs in its own process as
   `python -m benchmarks.<module> [--quick] --out OUT`, with a time limit (TIME_LIMIT_S, times
   --time-limit-factor: a slower or busier machine may need more; 0: none); a missing module,
   a failure or a time-out is recorded, never fatal;
2. solver.online.compare.compare_policies(instance, V) on every instance in instances/ (in --quick:
   the first QUICK_SLOTS slots, and not the 64/256-device ones), plus "ours" at the V of V_EXTRA
   (the V trade-off) -> OUT/compare/<name>.csv and OUT/compare_all.csv;
3. benchmarks/make_report.py -> OUT/REPORT.md.
OUT/bench_status.csv records what ran (module, status, seconds, note). Progress on stderr.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Sequence

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.cli.argtypes import DocHelp, guarded, out_path, positive_int, time_factor, v_weight  # noqa: E402  (after the checkout is on the path)

MODULES = ("bench_quality", "bench_speed", "bench_online", "bench_shares", "bench_torch", "bench_budgets")
INSTANCES = ROOT / "instances"
QUICK_SLOTS = 5
LARGE_N = 64                     # instances with at least this many devices skip compare in --quick
TIME_LIMIT_S = {True: 240, False: 3600}   # per benchmark module (quick, full)
MODULE_TIME_LIMIT_S = {"bench_budgets": {True: 900, False: 4 * 3600}}   # exceptions to TIME_LIMIT_S
V_DEFAULT = 1.0
V_EXTRA = (0.1, 0.3, 3.0, 10.0)   # "ours" is also run at these V (queues are in budget units)




def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run_module(mod: str, quick: bool, out: Path, factor: float = 1.0) -> dict:
    """Run benchmarks/<mod>.py in a subprocess, for at most its time limit times `factor`
    seconds (0: no limit); returns a status row."""
    if not (ROOT / "benchmarks" / f"{mod}.py").is_file():
        return {"module": mod, "status": "missing", "seconds": 0.0, "note": "no such file"}
    args = (["--quick"] if quick else []) + ["--out", str(out)]
    log(f"{mod} {' '.join(args)}")
    limit = MODULE_TIME_LIMIT_S.get(mod, TIME_LIMIT_S)[quick] * factor or None
    t0 = time.perf_counter()
    logfile = out / "logs" / f"{mod}.log"
    try:
        with logfile.open("w") as fh:
            proc = subprocess.run([sys.executable, "-m", f"benchmarks.{mod}", *args],
                                  cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=limit)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        status = f"timed out after {limit:g} s (--time-limit-factor gives it longer)"
    dt = time.perf_counter() - t0
    tail = logfile.read_text().strip().splitlines()[-1:] if logfile.exists() else []
    note = "" if status == "ok" else (tail[0][:200] if tail else "")
    log(f"{mod}: {status} in {dt:.0f} s" + (f" ({note})" if note else ""))
    return {"module": mod, "status": status, "seconds": round(dt, 1), "note": note}


def compare_one(path: str, slots: int | None, V: float) -> tuple[str, pd.DataFrame | None, str, float]:
    """compare_policies on one instance file (first `slots` slots, or all): (name, table or
    None, error, seconds)."""
    from solver.cli.output import compare_columns, with_units
    from solver.online.compare import compare_policies
    from solver.io.instance import load_instance

    t0 = time.perf_counter()
    try:
        inst = load_instance(path)
        if slots:
            inst = inst.head(slots)
        table = with_units(compare_policies(inst, V=V, extra_V=V_EXTRA), compare_columns(inst.budgets))
        table.insert(0, "instance", inst.name)
        table.insert(1, "devices", inst.n)
        table.insert(2, "slots", inst.num_slots)
        table.insert(3, "workload", inst.workload.name)
        return inst.name, table, "", time.perf_counter() - t0
    except Exception as e:       # noqa: BLE001 - one broken instance must not stop the suite
        return Path(path).stem, None, f"{type(e).__name__}: {e}", time.perf_counter() - t0


def instance_paths(quick: bool, names: set[str] | None = None) -> list[Path]:
    """Every instance TOML (or those whose stem is in `names`); in --quick without the large
    (>= 64 device) ones."""
    from solver.io.instance import load_instance
    paths = [p for p in sorted(INSTANCES.glob("*.toml")) if not names or p.stem in names]
    if quick:
        paths = [p for p in paths if load_instance(p).n < LARGE_N]
    return paths


def run_compare(quick: bool, out: Path, V: float, workers: int, names: set[str] | None = None,
                slots: int | None = None) -> dict:
    """Policy comparison on every instance, `workers` processes; writes compare/*.csv."""
    t0 = time.perf_counter()
    (out / "compare").mkdir(parents=True, exist_ok=True)
    paths = instance_paths(quick, names)
    slots = slots or (QUICK_SLOTS if quick else None)
    log(f"compare_policies (V={V:g}) on {len(paths)} instances" + (f", first {slots} slots" if slots else ""))
    tables, errors = [], []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(compare_one, str(p), slots, V) for p in paths]
        for f in futures:
            name, table, err, dt = f.result()
            if table is None:
                errors.append(f"{name}: {err}")
                log(f"  compare {name}: FAILED ({err}) after {dt:.0f} s")
                continue
            table.to_csv(out / "compare" / f"{name}.csv", index=False)
            tables.append(table)
            log(f"  compare {name}: {len(table)} policies in {dt:.0f} s")
    if tables:
        pd.concat(tables, ignore_index=True).to_csv(out / "compare_all.csv", index=False)
    status = "ok" if not errors else f"{len(errors)} of {len(paths)} instances failed"
    return {"module": "compare_policies", "status": status, "seconds": round(time.perf_counter() - t0, 1),
            "note": "; ".join(errors)[:500]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--quick", action="store_true", help="small subset: under 10 minutes on 2 cores")
    ap.add_argument("--out", type=out_path, default="results/bench", help="output folder (default results/bench under the current folder)")
    ap.add_argument("--V", type=v_weight, default=V_DEFAULT, help="V of the policy comparison (default 1)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(MODULES)} and compare")
    ap.add_argument("--workers", type=positive_int, default=2, help="processes for the policy comparison (default 2)")
    ap.add_argument("--instances", default="", help="comma-separated instance names for the comparison (default all)")
    ap.add_argument("--slots", type=positive_int, default=None, help="compare on the first SLOTS slots only")
    ap.add_argument("--time-limit-factor", type=time_factor, default=1.0,
                    help="multiplies each benchmark module's time limit (quick: 240 s, bench_budgets 900 s; "
                         "full: 1 h, bench_budgets 4 h); 0: no limit")
    args = ap.parse_args(argv)
    wanted = set(filter(None, args.only.split(",")))
    unknown = sorted(wanted - {*MODULES, "compare"})
    if unknown:
        ap.error(f"--only: expected names among {', '.join(MODULES)}, compare; got {', '.join(unknown)}")
    names = set(filter(None, args.instances.split(",")))
    missing = sorted(names - {p.stem for p in INSTANCES.glob("*.toml")})
    if missing:
        ap.error(f"--instances: no instance {', '.join(missing)} in {INSTANCES} (there: "
                 f"{', '.join(sorted(p.stem for p in INSTANCES.glob('*.toml')))})")
    out = Path(args.out).resolve()
    try:
        (out / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        ap.error(f"--out: cannot create folder {out}: {e.strerror or e}")
    t0 = time.perf_counter()
    rows = [run_module(m, args.quick, out, args.time_limit_factor) for m in MODULES if not wanted or m in wanted]
    if not wanted or "compare" in wanted:
        rows.append(run_compare(args.quick, out, args.V, args.workers, names, args.slots))
    total = time.perf_counter() - t0
    status = pd.DataFrame(rows)
    status.loc[len(status)] = {"module": "total", "status": "quick" if args.quick else "full",
                               "seconds": round(total, 1), "note": ""}
    status.to_csv(out / "bench_status.csv", index=False)
    from benchmarks.make_report import main as report_main
    report_main(["--out", str(out)])
    ran = [r["module"] for r in rows if r["status"] == "ok"]
    log(f"done in {total:.0f} s; ran: {', '.join(ran) or 'nothing'}; report: {out / 'REPORT.md'}")
    return 0 if all(r["status"] in ("ok", "missing") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(guarded(main))
