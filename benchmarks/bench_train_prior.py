"""How well the node-rate prior rho(2) predicts a device alone after data parallelism, with the
prior measured just before, and whether the planner's search on rank 0 changes the answer.

Per triple (`--triples`, bench_train's setup and instance: two pinned processes, p1 r = 2, the
wide model, the measured link and pipeline overhead): (1) a calibration job, eight slots
alternating even data parallelism and p0 alone (bench_train.node_contention: rho(2), the median
of the neighbouring slots' CPU-time factor ratios of p0, data parallel over alone); (2) a job of
given plans, even DP in slot 0, then p0 alone (no search runs on rank 0: the policy is not
asked), and (3) an `ours` job (the planner decides every slot), both with that rho(2) as their
prior. Reported per triple: the calibration's pair ratios, each job's slot-1 error (measured /
predicted - 1; slot 1 is p0 alone after data-parallel slot 0 in the given job, and whatever
ours chose), its slot-0 -> slot-1 pair ratio x (what the prior stood for in that job) and
ours' solve seconds for slot 1 (spent before the slot's first barrier). If the planner's CPU
time leaked into p0's iterations, ours would miss where the given job does not.

Usage: python benchmarks/bench_train_prior.py [--triples 6] [--out benchmarks/results]
Writes OUT/train_prior.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_train as bt  # noqa: E402

from solver.cli.argtypes import guarded, positive_int  # noqa: E402
from solver.io.instance import load_instance  # noqa: E402
from solver.model import Group, Plan, plan_to_json  # noqa: E402


def cpu_factor(row) -> float:
    """p0's CPU-time factor in a slots.csv row: its fitted wall factor over its core share."""
    return json.loads(row["speed_factors"])["0"] / json.loads(row["core_shares"])["0"]


def slot1(df) -> dict:
    """Slot 1 of a job: plan, err, the slot-0 -> slot-1 ratio x of p0's CPU-time factors (None
    unless slot 0 was a two-group data-parallel plan and slot 1 p0 alone) and its solve seconds."""
    r0, r1 = df.iloc[0], df.iloc[1]
    x = (cpu_factor(r0) / cpu_factor(r1)) if r1["plan"] == "128:p0" and r0["plan"].count("|") == 1 else None
    return {"plan": r1["plan"], "err": round(float(r1["measured_batch_time"] / r1["batch_time"] - 1.0), 4),
            "x": None if x is None else round(float(x), 4), "solve_s": round(float(r1["solve_time"]), 4),
            "predicted_s": round(float(r1["batch_time"]), 5), "measured_s": round(float(r1["measured_batch_time"]), 5)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triples", type=positive_int, default=6)
    ap.add_argument("--per-slot", type=positive_int, default=16)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--probe", action="store_true",
                    help="a third job per triple: the given plans with TrainConfig.probe_alone and no prior")
    a = ap.parse_args(argv)
    setup, per = bt.SETUPS["cores"], a.per_slot
    names = list(setup["repeat"])
    if len(names) > (os.cpu_count() or 1):
        raise SystemExit(f"needs {len(names)} cores, this machine has {os.cpu_count()}")
    os.environ["DYNPAR_WIDE_WIDTH"] = "512"
    out: dict = {"command": "python benchmarks/bench_train_prior.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "triples": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        link = bt.measure_link()
        inst = load_instance(bt.instance(tmp, 128, 32, 4, link, names, True))
        extra = bt.pipeline_overhead(inst, per, tmp / "calibration", setup)
        link = (link[0] + extra, link[1])
        inst = load_instance(bt.instance(tmp, 128, 32, 4, link, names, True, False))
        eight = load_instance(bt.instance(tmp, 128, 32, 8, link, names, True, False))
        L = inst.workload.num_layers
        dp = plan_to_json(Plan((Group((0,), (L,), 64), Group((1,), (L,), 64))))
        alone = plan_to_json(Plan((Group((0,), (L,), 128),)))
        for k in range(a.triples):
            load0, t0 = os.getloadavg()[0], time.perf_counter()
            rho, ratios = bt.node_contention(eight, per, tmp / f"contention-{k}", setup)
            row = {"rho_2": round(rho, 4), "pair_ratios": ratios}
            for mode, plans, probe in (("given", (dp, alone, alone, alone), False), ("ours", (), False),
                                       ("given-probe", (dp, alone, alone, alone), True))[:3 if a.probe else 2]:
                row[mode] = slot1(bt.run_policy(inst, "ours", 4 * per, per, tmp / f"{mode}-{k}", setup,
                                                plans=plans, contention={} if probe else {2: rho}, probe_alone=probe))
            row.update(load_1min=[round(load0, 2), round(os.getloadavg()[0], 2)], wall_s=round(time.perf_counter() - t0, 1))
            out["triples"].append(row)
            print(f"{k}: load {row['load_1min']}, rho(2) {rho:.3f} (pairs {ratios}) | given: {row['given']['err']:+.1%}, "
                  f"x {row['given']['x']} | ours: {row['ours']['plan']} {row['ours']['err']:+.1%}, x {row['ours']['x']}, "
                  f"solve {row['ours']['solve_s']} s" + (f" | given with probes: {row['given-probe']['err']:+.1%}"
                                                           if a.probe else ""), flush=True)
    for mode in ("given", "ours", *(("given-probe",) if a.probe else ())):
        errs = [t[mode]["err"] for t in out["triples"] if t[mode]["plan"] == "128:p0"]
        out[mode] = {"slot1_alone_errors": errs, "median": round(statistics.median(errs), 4) if errs else None,
                     "within_15pct": f"{sum(abs(e) <= 0.15 for e in errs)}/{len(errs)}",
                     "positive": f"{sum(e > 0 for e in errs)}/{len(errs)}"}
        print(f"{mode}: slot 1 on p0 alone, err {errs}: median {out[mode]['median']}, within 15% "
              f"{out[mode]['within_15pct']}, positive {out[mode]['positive']}")
    pairs = [r for t in out["triples"] for r in t["pair_ratios"]]
    xs = [t[m]["x"] for t in out["triples"] for m in ("given", "ours") if t[m]["x"] is not None]
    out["pair_ratio_spread"] = {"calibration": [min(pairs), statistics.median(pairs), max(pairs)],
                                "jobs_slot0_to_1": [min(xs), statistics.median(xs), max(xs)] if xs else None}
    print(f"pair ratios min, median, max: calibrations {out['pair_ratio_spread']['calibration']}, "
          f"the jobs' slot 0 -> 1 {out['pair_ratio_spread']['jobs_slot0_to_1']}")
    folder = Path(a.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train_prior.json").write_text(json.dumps(out, indent=1))
    print(f"wrote {folder / 'train_prior.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
