"""python -m solver.runtime: train a small MLP on 4 processes through slots whose
plans change shares, cuts and groups; print measured vs predicted batch time per slot.

Spawns its 4 processes itself, or runs as one rank under
`torchrun --nproc-per-node 4 -m solver.runtime` (rank 0 prints)."""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time

from ..baselines import even_dp
from .demo import (
    HAND,
    SLOWDOWNS,
    accuracy,
    measure,
    plan_for,
    scenario,
    table,
    teacher_data,
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m solver.runtime", description=__doc__)
    ap.add_argument("--slots", type=int, default=len(SLOWDOWNS), help=f"slots to run (1-{len(SLOWDOWNS)})")
    ap.add_argument("--steps", type=int, default=6, help="iterations per slot")
    ap.add_argument("--batch", type=int, default=64, help="global batch B (samples)")
    ap.add_argument("--micro-batch", type=int, default=8, help="micro-batch u (samples)")
    ap.add_argument("--t-ref", type=float, default=3e-3,
                    help="emulated seconds per sample of a full forward pass on a slowdown-1 device")
    ap.add_argument("--plans", choices=("hand", "brute", "solver"), default="hand",
                    help="hand-made pipelines, brute force over small structures, or solver.solve_slot")
    ap.add_argument("--compare-dp", action="store_true", help="also run even data parallelism each slot")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo", help="nccl: one CUDA device per rank")
    ap.add_argument("--samples", type=int, default=2048, help="synthetic dataset size")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if not 1 <= a.slots <= len(SLOWDOWNS):
        print(f"--slots must be 1..{len(SLOWDOWNS)}", file=sys.stderr)
        return 2
    model, inst = scenario(a.batch, a.micro_batch, a.t_ref, a.slots)
    data = teacher_data(a.samples, a.batch)
    cands = []
    for t in range(inst.num_slots):
        st = inst.state(t)
        c = {a.plans: plan_for(st, a.plans)}
        if a.compare_dp:
            c["evenDP"] = even_dp(st)
        cands.append(c)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"4 processes ({a.backend}), B={a.batch}, u={a.micro_batch}, T_ref={1e3 * a.t_ref:g} ms/sample, "
              f"slowdowns per slot: {SLOWDOWNS[:inst.num_slots].tolist()}"
              + (f", hand groups {HAND[:inst.num_slots]}" if a.plans == "hand" else ""))
    before = accuracy(copy.deepcopy(model), model.state_dict(), data)
    t0 = time.perf_counter()
    rows, res = measure(model, inst, cands, a.steps, data, a.backend)
    wall = time.perf_counter() - t0
    if res is None:  # a torchrun rank other than 0
        return 0
    after = accuracy(copy.deepcopy(model), res.state_dict, data)
    print(table(rows))
    print(f"re-plan (state migration) seconds: {[round(s, 4) for s in res.migrate_s]}")
    print(f"loss {before[0]:.3f} -> {after[0]:.3f}, accuracy {before[1]:.3f} -> {after[1]:.3f}; "
          f"wall {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
