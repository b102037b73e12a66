"""Sailor's cluster with the cluster description of solver.io.cluster: A100-40 x16 + V100-16 x16
in one GCP zone, 4 GPUs per server, Sailor's bandwidth fits (intra-node pairs, inter-node
pairs per GPU type), each server's NIC at Sailor's 4-sender fit maximum, Sailor's GPU prices
and usable memory, GPT-Neo-2.7 imported from Sailor's profiles (`import_any("sailor", ...)`),
global batch 2048 as in `configs/training_config_gpt_neo27.json`.

    python benchmarks/bench_sailor_cluster.py [--micro-batch 1] [--batch 2048]

Prints the plan, its batch time, USD per iteration and planning time, beside the best
baseline, and the same plan's figures without the network facts (links at their cap, no NIC
sharing); also a hand-built 1F1B plan over the A100s. Tensor parallelism is not planned yet
(issue 11 part 1): plans use t = 1.
Needs ../shared/data (exits 1 with a message without it).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver import baselines, evaluate, load_instance, solve_slot  # noqa: E402
from solver.io.importers import import_any, write_table  # noqa: E402
from solver.model import Group, Plan  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "profiles" / "sailor"
ZONE = "us-central1-a"
KINDS = {"A100-40": "A100-SXM4-40GB", "V100-16": "V100-SXM2-16GB"}
PRICE = {"A100-40": 3.673385, "V100-16": 2.859998}
"""USD per GPU-hour Sailor uses (its README)."""


def toml(folder: Path, batch: int, micro: int, model: str = "GPT-Neo-2.7", kinds: tuple[str, ...] = tuple(KINDS),
         nodes: int = 4) -> Path:
    """Write the instance (and its layer table) into `folder`: `nodes` servers of 4 GPUs of each
    Sailor GPU in `kinds`; returns the TOML path."""
    net = DATA / "network"
    intra = json.loads((net / "intra_node_bandwidths.json").read_text())
    inter = json.loads((net / "multizone_bandwidths_het.json").read_text())[ZONE]
    homo = json.loads((net / "network_coeffs_all_homo.json").read_text())["inter"]
    mem = json.loads((DATA / "configs" / "basic_cluster_config.json").read_text())
    table = model.lower().replace("-", "_").replace(".", "") + ".csv"
    write_table(import_any("sailor", DATA / "profiles" / model), folder / table)
    lines = [f'name = "sailor_{table[:-4]}"', "num_slots = 1", "", "[workload]", f'model = "{table}"',
             f"batch = {batch}", f"micro_batch = {micro}", "", "[network]", "inter_server_latency_ms = 0.1", "",
             # the tables also hold GH200-96 times (no such devices here): its kind must be declared
             "[[kinds]]", 'kind = "GH-96"', 'like = "H100-SXM5-80GB"', "memory_gb = 96", ""]
    devs = []
    for gpu in kinds:
        for node in range(nodes):
            server = f"{gpu.lower()}-n{node}"
            lines += ["[[servers]]", f'name = "{server}"', f"nic_gbps = {homo[gpu]['4'][1] * 8 / 1e9!r}",
                      f'zone = "{ZONE}"', ""]
            for g in range(4):
                devs.append((f"{server}-g{g}", gpu, server))
    for name, gpu, server in devs:
        lines += ["[[devices]]", f'name = "{name}"', f'kind = "{KINDS[gpu]}"', f'server = "{server}"',
                  f"memory_gb = {mem[gpu]['mem_per_gpu'] / 1e9!r}", f"price_per_hour = {PRICE[gpu]!r}", ""]
    for i, (a, ga, sa) in enumerate(devs):
        for b, gb, sb in devs[i + 1:]:
            (fa, fb, fc), cap = intra[ga]["2"] if sa == sb else inter[ga]["1"][ZONE][gb]["1"]
            lines += ["[[links]]", f'a = "{a}"', f'b = "{b}"', f"gbps = {cap * 8 / 1e9!r}",
                      f"fit = [{fa!r}, {fb!r}, {fc!r}]", ""]
    lines += ["[[budgets]]", 'kind = "money"', "limit = 1000.0", ""]
    path = folder / f"sailor_{table[:-4]}.toml"
    path.write_text("\n".join(lines))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=1)
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"needs Sailor's data at {DATA}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        inst = load_instance(toml(Path(tmp), args.batch, args.micro_batch))
    state = inst.state(0)
    print(f"{inst.n} devices, {inst.workload.num_layers} layers, B={inst.workload.batch}, "
          f"u={inst.workload.micro_batch}, precision {inst.workload.precision}")
    for n in inst.notes:
        print(f"note: {n}")
    t0 = time.perf_counter()
    res = solve_slot(state, V=1.0)
    wall = time.perf_counter() - t0
    print(f"ours: status {res.status} ({res.message}); planning {wall:.2f} s")
    if res.plan is not None:
        print(res.plan.describe(state))
        plain = evaluate(res.plan, replace(state, network=None))
        print(f"  batch time {res.batch_time:.4g} s, {res.costs[0]:.4g} USD per iteration; without the network "
              f"facts (links at their cap, no NIC sharing) the same plan predicts {plain.batch_time:.4g} s")
    # a hand-built plan: two groups of the 8 A100s of two servers each, 8 stages, 1F1B
    L = inst.workload.num_layers
    cuts = tuple(round(L * (j + 1) / 8) for j in range(8))
    hand = Plan(tuple(Group(tuple(range(8 * g, 8 * g + 8)), cuts, inst.workload.batch // 2, "1f1b") for g in range(2)))
    broken = hand.validate(state)
    if broken:
        print(f"hand plan (2 x 8 A100 stages, 1F1B): invalid: {broken[0]}")
    else:
        ev, plain = evaluate(hand, state), evaluate(hand, replace(state, network=None))
        print(f"hand plan (2 x 8 A100 stages, 1F1B): batch time {ev.batch_time:.4g} s (sync {ev.sync_time:.4g} s), "
              f"{ev.costs[0]:.4g} USD per iteration; without the network facts {plain.batch_time:.4g} s "
              f"(sync {plain.sync_time:.4g} s)")
    best = None
    for name, f in baselines.ALL.items():
        p = f(state)
        if p is None or p.validate(state):
            continue
        ev = evaluate(p, state)
        if best is None or ev.batch_time < best[1].batch_time:
            best = (name, ev)
    if best is None:
        print("baselines: none fits in memory")
    else:
        print(f"best baseline {best[0]}: batch time {best[1].batch_time:.4g} s, {best[1].costs[0]:.4g} USD per "
              "iteration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
