"""The noise floor of benchmarks/bench_train.py's target: how far the measured seconds per
iteration of one unchanged plan move from one window of iterations to the next on this machine.

With every refit exact (runtime.estimator), the prediction of a slot that keeps its plan is the
slot before's measurement, so its error is how far the measurement moved; no estimator can
predict that part. This script runs bench_train's setup (`--setup cores`: p0, p1 each pinned to
a core of its own, p1 doing its stage compute twice; the wide model profiled here, the link
measured, the pipeline's per-message overhead calibrated) under fixed plans, each for --slots
slots of --per-slot iterations in one job, and reads every iteration's seconds (slots.csv
`iteration_times`: the slowest rank's, barrier to optimizer step). Per plan and window length w
(iterations): the iterations in order, each slot's first left out as bench_train's slots do,
cut into consecutive windows of w (a window may span two slots of the same plan):

- `move`: median of window k+1 over median of window k, minus 1 (what a same-plan slot's
  error is under an exact refit of the slot before);
- `pooled`: median of window k+1 over the median of all iterations of the windows before it
  (up to 3 windows), minus 1 (what a prediction pooling the earlier slots would miss by: better
  than `move` when the noise is independent from window to window, worse when it drifts);
- for each: the median and largest |value| and the share of windows over 15%.

Usage: python benchmarks/bench_train_noise.py [--slots 10] [--per-slot 48] [--windows 16,48]
[--out benchmarks/results]; writes OUT/train_noise.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_train import (
    SETUPS,
    instance,
    measure_link,
    pipeline_overhead,
    run_policy,
)
from solver.cli.argtypes import guarded, positive_int  # noqa: E402
from solver.io.instance import load_instance
from solver.model import Group, Plan, plan_to_json

POOL = 3  # windows pooled by the `pooled` predictor


def window_stats(times: list[list[float]], w: int) -> dict:
    """`times`: per slot, its iterations' seconds. Consecutive windows of w iterations (each
    slot's first iteration left out, the last partial window dropped) -> the module
    docstring's `move` and `pooled` figures (fractions, rounded)."""
    xs = [v for slot in times for v in slot[1:]]
    wins = [xs[k:k + w] for k in range(0, len(xs) - w + 1, w)]
    med = [statistics.median(x) for x in wins]
    move = [med[k + 1] / med[k] - 1.0 for k in range(len(med) - 1)]
    pooled = [med[k] / statistics.median([v for x in wins[max(0, k - POOL):k] for v in x]) - 1.0
              for k in range(1, len(med))]

    def summary(xs: list[float]) -> dict:
        a = [abs(x) for x in xs]
        return {"median_abs": round(statistics.median(a), 4) if a else None,
                "max_abs": round(max(a), 4) if a else None,
                "over_15pct": f"{sum(x > 0.15 for x in a)}/{len(a)}"}
    return {"windows": len(med), "median_s": [round(m, 5) for m in med],
            "move": summary(move), "pooled": summary(pooled)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=positive_int, default=10, help="slots per plan (10)")
    ap.add_argument("--per-slot", type=positive_int, default=48, help="iterations per slot (48)")
    ap.add_argument("--windows", default="16,48", help="window lengths in iterations, comma-separated (16,48)")
    ap.add_argument("--batch", type=positive_int, default=128)
    ap.add_argument("--micro-batch", type=positive_int, default=32)
    ap.add_argument("--width", type=positive_int, default=512)
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args(argv)
    windows = [int(x) for x in a.windows.split(",")]
    most = a.slots * (a.per_slot - 1) // 3
    if any(w < 1 or w > most for w in windows):
        raise SystemExit(f"--windows: expected lengths in 1..{most} (three windows of the slots' iterations, "
                         f"each slot's first left out), got {windows}")
    setup = SETUPS["cores"]
    if len(setup["repeat"]) > (os.cpu_count() or 1):
        raise SystemExit(f"setup cores: {len(setup['repeat'])} processes need as many cores, "
                         f"this machine has {os.cpu_count()}")
    os.environ["DYNPAR_WIDE_WIDTH"] = str(a.width)
    names = list(setup["repeat"])
    out: dict = {"command": "python benchmarks/bench_train_noise.py " + " ".join(argv if argv is not None
                                                                               else sys.argv[1:]),
                 "slots": a.slots, "per_slot": a.per_slot, "batch": a.batch, "micro_batch": a.micro_batch,
                 "width": a.width, "repeat": setup["repeat"], "plans": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        link = measure_link()
        inst = load_instance(instance(tmp, a.batch, a.micro_batch, 1, link, names, True))
        extra = pipeline_overhead(inst, 16, tmp / "calibration", setup)
        link = (link[0] + extra, link[1])
        inst = load_instance(instance(tmp, a.batch, a.micro_batch, a.slots, link, names, True, False))
        L, B = inst.workload.num_layers, inst.workload.batch
        plans = {"128:p0": Plan((Group((0,), (L,), B),)),
                 "64:p0 | 64:p1": Plan((Group((0,), (L,), B // 2), Group((1,), (L,), B - B // 2))),
                 "96:p0 | 32:p1": Plan((Group((0,), (L,), 3 * B // 4), Group((1,), (L,), B - 3 * B // 4))),
                 "128:p0>p1": Plan((Group((0, 1), (L // 2, L), B),))}
        for name, plan in plans.items():
            load0 = os.getloadavg()[0]
            df = run_policy(inst, "ours", a.slots * a.per_slot, a.per_slot, tmp / name.replace(" ", ""), setup,
                            plans=(plan_to_json(plan),))
            times = [json.loads(x) for x in df["iteration_times"]]
            out["plans"][name] = {"load_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
                                  **{f"w{w}": window_stats(times, w) for w in windows}}
    folder = Path(a.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train_noise.json").write_text(json.dumps(out, indent=1))
    print(f"{a.slots} slots x {a.per_slot} iterations per plan; per window length: consecutive windows' "
          "|move| (median, max, share over 15%) | against the pooled earlier windows")
    for name, r in out["plans"].items():
        for w in windows:
            s = r[f"w{w}"]
            print(f"  {name:16s} w={w:3d} ({s['windows']:3d} windows): move {s['move']['median_abs']:.1%}, "
                  f"{s['move']['max_abs']:.1%}, {s['move']['over_15pct']} | pooled {s['pooled']['median_abs']:.1%}, "
                  f"{s['pooled']['max_abs']:.1%}, {s['pooled']['over_15pct']} | load {r['load_1min']}")
    print(f"wrote {folder / 'train_noise.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
