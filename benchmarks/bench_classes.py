"""The class-level search (solve.classes) against the device-level search on clusters of like
GPUs, side by side in one run: Sailor-style clusters (benchmarks/bench_sailor_cluster.py's
instance writer: 4 GPUs per server, Sailor's bandwidth fits, prices and memory) of every
combination of GPU types, servers per type, model, global batch and queue weight given.

    python benchmarks/bench_classes.py [--models M ...] [--kinds A100-40,V100-16 ...] [--nodes 2 4]
                                       [--batches 2048] [--queues 0 10000] [--tp-degrees 1,2,4,8]
                                       [--lost 0 1 3] [--seed 0] [--out FILE.csv]

With --packaged, the packaged layer tables on clusters of hardware.csv kinds instead (no
../shared needed). Per case: objective, batch time and solve CPU seconds (time.process_time, each on a fresh
state, after one untimed warm-up solve of the first case so that compiled kernels are loaded)
of SolveOptions(classes="auto") and of classes="off", their ratios, and what auto did (the
class-level search, or the device-level search where the class search did not apply). A
summary line gives the share of cases within 1% of the device-level search and the median
speed-up. --lost K ...: each case also with K devices unavailable (preempted GPUs, drawn with
--seed from the case), the pool's servers then uneven. Without --packaged it needs
../shared/data (exits 1 with a message without it).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.bench_sailor_cluster as sailor  # noqa: E402
from solver.cli.argtypes import DocHelp, guarded, nonneg_int, positive_int  # noqa: E402
from solver import SolveOptions, load_instance, solve_slot  # noqa: E402


PACKAGED = ("bert_base", "gpt2_small", "vgg16", "resnet50")
"""The packaged layer tables (FLOP-based; no ../shared needed): their clusters are built from
hardware.csv kinds, 4 GPUs per server, 100 Gb/s inside a server and 25 between."""


def packaged_toml(folder: Path, batch: int, model: str, kinds: tuple[str, ...], nodes: int) -> Path:
    lines = [f'name = "classes_{model}"', "num_slots = 1", "", "[workload]", f'model = "{model}"',
             f"batch = {batch}", "micro_batch = 4", "", "[network]", "intra_server_gbps = 100.0",
             "inter_server_gbps = 25.0", "intra_server_latency_ms = 0.005", "inter_server_latency_ms = 0.05", ""]
    for kind in kinds:
        for node in range(nodes):
            server = f"{kind.lower()}-n{node}"
            lines += ["[[servers]]", f'name = "{server}"', ""]
            for g in range(4):
                lines += ["[[devices]]", f'name = "{server}-g{g}"', f'kind = "{kind}"', f'server = "{server}"', ""]
    lines += ["[[budgets]]", 'kind = "money"', "limit = 1.0", ""]
    path = folder / f"classes_{model}.toml"
    path.write_text("\n".join(lines))
    return path


def case_state(model: str, kinds: tuple[str, ...], nodes: int, batch: int, lost: int = 0, seed: int = 0):
    """The case's slot state; `lost` devices unavailable, drawn by a generator seeded with
    (seed, lost, nodes, number of kinds)."""
    with tempfile.TemporaryDirectory() as tmp:
        if model in PACKAGED:
            st = load_instance(packaged_toml(Path(tmp), batch, model, kinds, nodes)).state(0)
        else:
            st = load_instance(sailor.toml(Path(tmp), batch, 1, model, kinds=kinds, nodes=nodes)).state(0)
    if lost:
        avail = np.array(st.available, dtype=bool)
        rng = np.random.default_rng([seed, lost, nodes, len(kinds)])
        avail[rng.choice(np.flatnonzero(avail), size=lost, replace=False)] = False
        st = dataclasses.replace(st, available=avail)
    return st


def solve(model: str, kinds: tuple[str, ...], nodes: int, batch: int, q: float, classes: str,
          degrees: tuple[int, ...], lost: int = 0, seed: int = 0) -> tuple[float, float, float, str]:
    """(objective, batch time, CPU seconds, message) of one solve on a fresh state."""
    st = case_state(model, kinds, nodes, batch, lost, seed)
    t0 = time.process_time()
    res = solve_slot(st, [q], V=1.0, options=SolveOptions(classes=classes, tp_degrees=degrees))
    return res.objective, res.batch_time, time.process_time() - t0, res.message


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--models", nargs="+", default=["GPT-Neo-2.7", "LLAMA-3-8"])
    ap.add_argument("--kinds", nargs="+", default=["A100-40,V100-16", "A100-40,V100-16,GH-96", "A100-40",
                                                  "V100-16,GH-96"])
    ap.add_argument("--nodes", nargs="+", type=positive_int, default=[2, 4])
    ap.add_argument("--batches", nargs="+", type=positive_int, default=[2048])
    ap.add_argument("--queues", nargs="+", type=float, default=[0.0, 1e4],
                    help="weights of the money queue (the Sailor instances' budget is 1000 USD per iteration, "
                         "the packaged ones' 1 USD)")
    ap.add_argument("--tp-degrees", default="1,2,4,8")
    ap.add_argument("--lost", nargs="+", type=nonneg_int, default=[0],
                    help="devices unavailable in each case (several: each case once per number)")
    ap.add_argument("--seed", type=nonneg_int, default=0, help="draws the unavailable devices")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--packaged", action="store_true",
                    help="the packaged layer tables (bert_base, gpt2_small, vgg16, resnet50) on hardware.csv kinds "
                         "instead (default kinds V100-SXM2-16GB,T4 and A100-SXM4-40GB,A10G,T4; queues 0 and 1)")
    args = ap.parse_args()
    if args.packaged:
        if args.models == ap.get_default("models"):
            args.models = list(PACKAGED)
        if args.kinds == ap.get_default("kinds"):
            args.kinds = ["V100-SXM2-16GB,T4", "A100-SXM4-40GB,A10G,T4"]
        if args.queues == ap.get_default("queues"):
            args.queues = [0.0, 1.0]
        if args.batches == ap.get_default("batches"):
            args.batches = [256, 1024]
    elif not sailor.DATA.is_dir():
        print(f"needs Sailor's data at {sailor.DATA}", file=sys.stderr)
        return 1
    fewest = 4 * min(args.nodes) * min(len(k.split(",")) for k in args.kinds)
    bad = [k for k in args.lost if not 0 <= k < fewest]
    if bad:
        print(f"--lost: expected numbers of devices from 0 to {fewest - 1} (the smallest cluster has {fewest}), "
              f"got {bad}", file=sys.stderr)
        return 2
    degrees = tuple(int(x) for x in args.tp_degrees.split(","))
    cases = list(itertools.product(args.models, [tuple(k.split(",")) for k in args.kinds], args.nodes,
                                   args.batches, args.queues, args.lost))
    solve(*cases[0][:5], "off", degrees)         # warm-up: compiled kernels loaded
    rows = []
    print("model | kinds | servers per kind | B | queue | lost | auto obj | off obj | auto/off | auto s | off s | "
          "speed-up | auto searched")
    for model, kinds, nodes, batch, q, lost in cases:
        a = solve(model, kinds, nodes, batch, q, "auto", degrees, lost, args.seed)
        o = solve(model, kinds, nodes, batch, q, "off", degrees, lost, args.seed)
        how = "classes" if a[3].startswith("class-level") else "devices"
        ratio = a[0] / o[0] if o[0] > 0 and o[0] != float("inf") else float("nan")
        row = dict(model=model, kinds="+".join(kinds), nodes=nodes, batch=batch, queue=q, lost=lost,
                   auto_objective=a[0], off_objective=o[0], ratio=ratio, auto_cpu_s=a[2], off_cpu_s=o[2], speedup=o[2] / max(a[2], 1e-9),
                   auto_batch_time=a[1], off_batch_time=o[1], auto_searched=how)
        rows.append(row)
        print(f"{model} | {'+'.join(kinds)} | {nodes} | {batch} | {q:g} | {lost} | {a[0]:.5g} | {o[0]:.5g} | "
              f"{ratio:.4f} | {a[2]:.3f} | {o[2]:.3f} | {row['speedup']:.1f}x | {how}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    both = [r for r in rows if r["ratio"] == r["ratio"]]
    cls = [r for r in both if r["auto_searched"] == "classes"]
    within = sum(r["ratio"] <= 1.01 for r in cls)
    print(f"\nclass-level search ran on {len(cls)} of {len(rows)} cases: within 1% of the device-level search on "
          f"{within} of {len(cls)}, worst ratio {max((r['ratio'] for r in cls), default=float('nan')):.4f}, best "
          f"{min((r['ratio'] for r in cls), default=float('nan')):.4f}; median CPU {statistics.median(r['auto_cpu_s'] for r in cls) if cls else float('nan'):.3f} s "
          f"against {statistics.median(r['off_cpu_s'] for r in cls) if cls else float('nan'):.3f} s, median speed-up "
          f"{statistics.median(r['speedup'] for r in cls) if cls else float('nan'):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
