"""Availability-aware planning against the same controller without it (issue 13, item 6).

    python benchmarks/bench_preemption.py [OUTDIR] [--instances aws_spot,...] [--markov mixed_gpus:3,...]
                                         [--settings 30:10,300:50] [--slots N] [--iterations 100]

Each run charges every slot after a device of the plan was preempted the restart seconds and
the expected iterations since the last checkpoint (online.preemption; a setting is
RESTART_S:CHECKPOINT_EVERY, a slot --iterations iterations, run_online's 100 by default). "ours" runs with its
defaults (budget tracker at 1%, price from history), once planning with the per-device hazards
learnt from the trace so far (aware) and once without them (plain); both pay the same losses.

Traces: the shipped instances as they are (aws_spot is SkyNomad's real V100 spot trace, nine
zones whose availability ranges from 11% to 95%), and with --markov NAME:K, K fresh random
traces on instance NAME's devices (seeds 990000 + k, apart from the tests'): each device gets
a per-slot preemption probability drawn from {0.01, 0.05, 0.2, 0.4} and returns with
probability 0.5 per slot, starting available.

Prints and writes OUTDIR/preemption.csv (default benchmarks/results/): per trace and setting,
the average charged batch time (plan, migration and preemption losses per iteration), the
plans' own time, the slots that paid a preemption, the worst budget overshoot, and aware /
plain.
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

from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver import load_instance  # noqa: E402
from solver.model.preemption import Preemption  # noqa: E402
from solver.online import run_online  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MARKOV_SEED0 = 990_000
HAZARDS = (0.01, 0.05, 0.2, 0.4)
RETURN = 0.5


def markov_trace(n: int, slots: int, seed: int) -> np.ndarray:
    """(slots, n) availability: each device leaves with its own per-slot probability (drawn
    from HAZARDS) and comes back with probability RETURN; all start available."""
    rng = np.random.default_rng(seed)
    p = rng.choice(HAZARDS, size=n)
    A = np.ones((slots, n), dtype=bool)
    for t in range(1, slots):
        u = rng.random(n)
        A[t] = np.where(A[t - 1], u >= p, u < RETURN)
        if not A[t].any():
            A[t, int(rng.integers(n))] = True
    return A


def traces(instances: list[str], markov: list[str], slots: int | None):
    """(label, instance) pairs."""
    for name in instances:
        inst = load_instance(ROOT / "instances" / f"{name}.toml")
        yield name, inst.head(slots) if slots else inst
    for spec in markov:
        name, _, k = spec.partition(":")
        inst = load_instance(ROOT / "instances" / f"{name}.toml")
        if slots:
            inst = inst.head(slots)
        for j in range(int(k or 1)):
            seed = MARKOV_SEED0 + j
            yield f"{name}+markov{seed}", replace(inst, available=markov_trace(inst.n, inst.num_slots, seed))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--instances", default="aws_spot")
    ap.add_argument("--markov", default="mixed_gpus:10,hetero_strong:4")
    ap.add_argument("--settings", default="30:10,300:50")
    ap.add_argument("--slots", type=positive_int, default=None, help="only the first SLOTS slots of each trace")
    ap.add_argument("--iterations", type=positive_int, default=100, help="training iterations per slot")
    a = ap.parse_args(argv)
    settings = []
    for s in a.settings.split(","):
        r, c = s.split(":")
        settings.append(Preemption(float(r), int(c)))
    rows = []
    for label, inst in traces([x for x in a.instances.split(",") if x], [x for x in a.markov.split(",") if x],
                              a.slots):
        for pre in settings:
            got = {}
            for aware in (False, True):
                t0 = time.process_time()
                s = run_online(inst, preemption=pre, availability_aware=aware,
                               iterations_per_slot=a.iterations).summary
                cpu = time.process_time() - t0
                over = max((s[f"overshoot_{b.name}"] for b in inst.budgets), default=float("nan"))
                got[aware] = s["avg_batch_time"]
                rows.append({"trace": label, "restart_s": pre.restart_s, "checkpoint_every": pre.checkpoint_every,
                             "iterations": a.iterations,
                             "aware": aware, "slots": s["executed_slots"], "avg_batch_time": s["avg_batch_time"],
                             "avg_plan_time": s["avg_plan_time"], "avg_preemption_time": s["avg_preemption_time"],
                             "preempted_slots": s["preempted_slots"], "worst_overshoot": over, "cpu_s": cpu})
                print(f"{label:28s} {pre.restart_s:6g}:{pre.checkpoint_every:<4d} {'aware' if aware else 'plain'}"
                      f"  batch {s['avg_batch_time']:.4f} s  plan {s['avg_plan_time']:.4f} s  "
                      f"preempted {s['preempted_slots']:3d}  worst overshoot {100 * over:+.2f}%  cpu {cpu:.0f} s",
                      flush=True)
            rows[-1]["aware_over_plain"] = got[True] / got[False]
            print(f"{'':28s} aware / plain {got[True] / got[False]:.4f}", flush=True)
    df = pd.DataFrame(rows)
    out = Path(a.outdir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "preemption.csv", index=False)
    pairs = df.dropna(subset=["aware_over_plain"])
    for (rs, ce), g in pairs.groupby(["restart_s", "checkpoint_every"]):
        r = g["aware_over_plain"]
        print(f"setting {rs:g}:{ce}: aware / plain over {len(r)} traces: mean {r.mean():.4f}, median {r.median():.4f}, "
              f"min {r.min():.4f}, max {r.max():.4f}; aware faster on {int((r < 1).sum())}")
    for aware, g in df.groupby("aware"):
        print(f"{'aware' if aware else 'plain'}: worst overshoot > 1% on {int((g['worst_overshoot'] > 0.01).sum())} of "
              f"{len(g)} runs, max {100 * g['worst_overshoot'].max():+.2f}%; preempted slots {int(g['preempted_slots'].sum())}")
    print(f"wrote {out / 'preemption.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
