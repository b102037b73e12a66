"""Measured vs predicted batch time of real torch.distributed training (4 processes, gloo,
padding emulation of unlike devices), and the solver's plan vs even data parallelism
measured on the same processes, over 4 slots whose device speeds change and where a
device leaves and comes back.

Usage: .venv/bin/python benchmarks/bench_torch.py [--steps 6] [--t-ref 0.003] [--backend gloo]
Each slot runs the chosen plan ("solver": solver.solve_slot, else brute force), the
hand-made pipelines of the example, and even DP, one after the other in one world.
Target: |measured / predicted - 1| <= 15 %.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from anywhere without installing
from solver.cli.argtypes import guarded, positive_int  # noqa: E402
from solver.baselines import even_dp  # noqa: E402
from solver.runtime.demo import (  # noqa: E402
    SLOWDOWNS,
    measure,
    plan_for,
    scenario,
    table,
    teacher_data,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer iterations per plan")
    ap.add_argument("--out", default="results/bench", help="folder of torch_timing.csv")
    ap.add_argument("--steps", type=positive_int, default=6, help="iterations per plan per slot")
    ap.add_argument("--t-ref", type=float, default=3e-3, help="reference seconds per sample per forward pass")
    ap.add_argument("--batch", type=positive_int, default=64)
    ap.add_argument("--micro-batch", type=positive_int, default=8)
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--plans", choices=("solver", "brute"), default="solver")
    a = ap.parse_args(argv)
    if a.quick:
        a.steps = min(a.steps, 4)
    how = a.plans if a.plans == "brute" or importlib.util.find_spec("solver.solve") else "brute"
    model, inst = scenario(a.batch, a.micro_batch, a.t_ref, len(SLOWDOWNS))
    cands = [{how: plan_for(inst.state(t), how), "hand": plan_for(inst.state(t), "hand"),
              "evenDP": even_dp(inst.state(t))} for t in range(inst.num_slots)]
    t0 = time.perf_counter()
    rows, res = measure(model, inst, cands, a.steps, teacher_data(2048, a.batch), a.backend)
    wall = time.perf_counter() - t0
    print(f"bench_torch: 4 processes ({a.backend}), B={a.batch}, u={a.micro_batch}, "
          f"T_ref={1e3 * a.t_ref:g} ms/sample, {a.steps} iterations per plan, median after the first")
    print(f"slowdowns per slot: {SLOWDOWNS.tolist()}")
    print(table(rows))
    errs = [abs(r.error) for r in rows]
    print(f"|error|: max {100 * max(errs):.1f}%, median {100 * statistics.median(errs):.1f}%, "
          f"{sum(e <= 0.15 for e in errs)}/{len(errs)} within 15%")
    by = {(r.slot, r.label): r for r in rows}
    for t in range(inst.num_slots):
        p, d = by[(t, how)], by[(t, "evenDP")]
        print(f"slot {t}: {how} vs evenDP speed-up measured {d.measured_s / p.measured_s:.2f}x, "
              f"predicted {d.predicted_s / p.predicted_s:.2f}x")
    print(f"re-plan seconds (median): {statistics.median(res.migrate_s[1:]):.4f}; wall {wall:.1f} s")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd
    pd.DataFrame([{"slot": r.slot, "plan": r.label, "predicted_s": r.predicted_s, "measured_s": r.measured_s,
                   "error": r.error} for r in rows]).to_csv(out / "torch_timing.csv", index=False)
    print(f"wrote {out / 'torch_timing.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
