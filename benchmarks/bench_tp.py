"""Tensor-parallel degrees: the search's coordinate descent against the oracle over every way of
forming TP units, on small random slots with servers (seeds apart from the tests').

    python benchmarks/bench_tp.py [--cases 40] [--seed 1000]

Each case: 4-6 devices of two kinds in two servers, one of three layer tables (4-8 layers, one
or two dominant layers), usable memory 6-40 GB (so that TP is needed, helps or does not), batch 16
in micro-batches of 4. Prints, per case, the oracle's and the search's objective and degrees,
then the share of cases within 1% of the oracle, the median and largest gap, how often each
chooses TP, and the solve times side by side.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.cli.argtypes import DocHelp, guarded, nonneg_int, positive_int  # noqa: E402
from solver import load_instance, solve_slot  # noqa: E402
from solver.solve.oracle import solve_exact  # noqa: E402

KINDS = ("V100-SXM2-16GB", "A100-SXM4-40GB")


def layer_table(rng: np.random.Generator) -> str:
    L = int(rng.integers(4, 9))
    rows = ["# input_bytes: 1000", "name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes"]
    heavy = set(rng.choice(L, size=int(rng.integers(1, 3)), replace=False).tolist())
    for l in range(L):
        f = float(rng.uniform(1, 8)) * 1e9 * (3 if l in heavy else 1)
        rows.append(f"l{l},{f:.6g},{2 * f:.6g},{float(rng.uniform(0.5, 4)) * 1e6:.6g},"
                    f"{float(rng.uniform(1, 30)) * 1e6:.6g},{float(rng.uniform(0.2, 2.5)) * 1e9 * (2 if l in heavy else 1):.6g}")
    return "\n".join(rows) + "\n"


def case(folder: Path, rng: np.random.Generator):
    (folder / "layers.csv").write_text(layer_table(rng))
    n = int(rng.integers(4, 7))
    mem = float(rng.choice([6, 12, 20, 40]))
    lines = ['name = "tpcase"', "num_slots = 1", "[workload]", 'model = "layers.csv"', "batch = 16",
             "micro_batch = 4", "[network]", "intra_server_gbps = 300.0", "inter_server_gbps = 25.0",
             "intra_server_latency_ms = 0.002", "inter_server_latency_ms = 0.02", ""]
    for i in range(n):
        lines += ["[[devices]]", f'name = "d{i}"', f'kind = "{KINDS[int(rng.integers(0, 2))]}"',
                  f'server = "{"AB"[i % 2]}"', f"memory_gb = {mem}", ""]
    lines += ["[[servers]]", 'name = "A"', "", "[[servers]]", 'name = "B"', "",
              "[[budgets]]", 'kind = "money"', "limit = 1000.0", ""]
    (folder / "c.toml").write_text("\n".join(lines))
    return load_instance(folder / "c.toml")


def degrees(res) -> str:
    if res.plan is None:
        return "-"
    return "/".join(",".join(str(d) for d in g.degrees) for g in res.plan.groups)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--cases", type=positive_int, default=40)
    ap.add_argument("--seed", type=nonneg_int, default=1000)
    args = ap.parse_args()
    gaps, ts, te, tp_s, tp_e, feasible = [], [], [], 0, 0, 0
    print(f"{'case':>4} {'oracle':>10} {'search':>10} {'gap %':>7}  degrees (oracle | search)")
    for c in range(args.cases):
        rng = np.random.default_rng(args.seed + c)
        with tempfile.TemporaryDirectory() as tmp:
            inst = case(Path(tmp), rng)
        s = inst.state(0)
        t0 = time.perf_counter()
        ex = solve_exact(s, V=1.0, tp_degrees=(1, 2, 4, 8))
        t1 = time.perf_counter()
        se = solve_slot(s, V=1.0)
        t2 = time.perf_counter()
        if not ex.success:
            print(f"{c:>4} {'infeasible':>10} {'infeasible' if not se.success else 'FEASIBLE?':>10}")
            continue
        feasible += 1
        gap = (se.objective - ex.objective) / ex.objective if se.success else float("inf")
        gaps.append(gap)
        te.append(t1 - t0)
        ts.append(t2 - t1)
        tp_e += ex.plan.uses_tp
        tp_s += bool(se.success and se.plan.uses_tp)
        print(f"{c:>4} {ex.objective:>10.4g} {se.objective:>10.4g} {100 * gap:>7.2f}  {degrees(ex)} | {degrees(se)}")
    g = np.array(gaps)
    if len(g) == 0:
        print("no feasible case")
        return 0
    print(f"\n{feasible} feasible cases of {args.cases}: search within 1% of the oracle in "
          f"{100 * np.mean(g <= 0.01):.1f}%, median gap {100 * np.median(g):.2f}%, max {100 * g.max():.2f}%")
    print(f"TP chosen: oracle {tp_e}, search {tp_s} of {feasible}")
    print(f"median solve time: oracle {1e3 * np.median(te):.0f} ms, search {1e3 * np.median(ts):.0f} ms "
          f"(ratio {np.median(te) / np.median(ts):.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
