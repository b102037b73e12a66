"""Sailor's cluster with the cluster description of solver.io.cluster: A100-40 x16 + V100-16 x16
in one GCP zone, 4 GPUs per server, Sailor's bandwidth fits (intra-node pairs, inter-node
pairs per GPU type), each server's NIC at Sailor's 4-sender fit maximum, Sailor's GPU prices
and usable memory, GPT-Neo-2.7 imported from Sailor's profiles (`import_any("sailor", ...)`),
global batch 2048 as in `configs/training_config_gpt_neo27.json`.

    python benchmarks/bench_sailor_cluster.py [--micro-batch 1] [--batch 2048] [--nodes 4] [--kinds K ...]
                                              [--models M ...]
                                              [--against COMMIT] [--rounds R]

Per model (GPT-Neo-2.7 and LLAMA-3-8 by default): our plan (groups, stages with their TP
degree, schedule, shares), its batch time, USD per iteration and planning time, with TP and with
tp 1 only; beside the best baseline (tp 1) and the best Megatron-style uniform (dp, tp, pp) grid
point, all scored in the same model. With --against COMMIT, the planning time of this tree's
solve_slot and of COMMIT's (a `git worktree` in a temporary folder) on the same instances, each
in its own process after one untimed warm-up solve, each timed solve on a freshly loaded state
(nothing kept from an earlier solve), R rounds in turn (old, new, old, ...), the
least CPU time (process seconds, which a shared machine's other work inflates less than wall
time; the solver is single-threaded) of each kept: their ratio is what to read on a loaded machine.
In trees that have SolveOptions.classes, the device-level search ("off") and the class-level search
alone ("auto", timed against the old tree's solve of the same case) are timed.
Needs ../shared/data (exits 1 with a message without it).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver import SolveOptions, baselines, evaluate, load_instance, solve_slot  # noqa: E402
from solver.io.importers import import_any, write_table  # noqa: E402
from solver.model import Group, Plan  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "profiles" / "sailor"
ZONE = "us-central1-a"
KINDS = {"A100-40": "A100-SXM4-40GB", "V100-16": "V100-SXM2-16GB", "GH-96": "GH-96"}
"""Sailor's GPU names -> device kinds (GH-96 is declared in the instance, like an H100 with 96 GB)."""
PRICE = {"A100-40": 3.673385, "V100-16": 2.859998, "GH-96": 11.06}
"""USD per GPU-hour Sailor uses (its README)."""


def toml(folder: Path, batch: int, micro: int, model: str = "GPT-Neo-2.7", kinds: tuple[str, ...] = ("A100-40", "V100-16"),
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
             f"batch = {batch}", f"micro_batch = {micro}", "", "[network]", "inter_server_latency_ms = 0.1", ""]
    header = next(ln for ln in (folder / table).read_text().splitlines() if ln and not ln.startswith("#"))
    if "GH-96" in kinds or "GH-96" in header:
        # a table with GH200-96 times (some Sailor profiles have none), or such devices: its kind must be
        # declared, and only then (the loader refuses a declared kind that nothing uses)
        lines += ["[[kinds]]", 'kind = "GH-96"', 'like = "H100-SXM5-80GB"', "memory_gb = 96", ""]
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


def megatron_grid(state, layers: int, batch: int, micro: int):
    """Every Megatron-style uniform (dp, tp, pp) plan over the A100s, the V100s or all GPUs (in
    that device order): units of tp GPUs of one server, pp units per pipeline with equal layer
    counts, dp pipelines with equal shares, 1F1B with and without recomputation. Yields
    (label, plan) for each grid point whose shares divide evenly."""
    from solver.solve.tp import configuration_units
    kinds = sorted({d.kind for d in state.devices})
    for subset in [[k] for k in kinds] + [kinds]:
        for tp in (1, 2, 4):
            units = [u for u in configuration_units(state, tuple((k, tp) for k in kinds))
                     if state.devices[u[0]].kind in subset and len(u) == tp]
            for pp in range(1, min(len(units), layers) + 1):
                dp = len(units) // pp
                if dp < 1 or batch % dp or (batch // dp) % micro:
                    continue
                cuts = tuple(round(layers * (j + 1) / pp) for j in range(pp))
                for rc in (False, True):
                    groups = tuple(Group(tuple(u[0] for u in units[g * pp:(g + 1) * pp]), cuts, batch // dp, "1f1b", rc,
                                         tp_peers=tuple(u[1:] for u in units[g * pp:(g + 1) * pp]) if tp > 1 else ())
                                   for g in range(dp))
                    yield f"{'+'.join(k.split('-')[0] for k in subset)} dp{dp} tp{tp} pp{pp}{' rc' if rc else ''}", \
                        Plan(groups)


def report(model: str, batch: int, micro: int, nodes: int = 4, kinds: tuple[str, ...] = ("A100-40", "V100-16")) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        inst = load_instance(toml(Path(tmp), batch, micro, model, kinds=kinds, nodes=nodes))
    state = inst.state(0)
    print(f"\n== {model}: {inst.n} devices, {inst.workload.num_layers} layers, B={inst.workload.batch}, "
          f"u={inst.workload.micro_batch}, precision {inst.workload.precision}")
    for degs, label in (((1,), "ours, tp 1 only"), ((1, 2, 4, 8), "ours")):
        t0 = time.perf_counter()
        res = solve_slot(state, V=1.0, options=SolveOptions(tp_degrees=degs))
        wall = time.perf_counter() - t0
        if res.plan is None:
            print(f"{label}: {res.status}: {res.message} ({wall:.2f} s)")
            continue
        print(f"{label}: batch time {res.batch_time:.4g} s, {res.costs[0]:.4g} USD per iteration, planning {wall:.2f} s")
        if degs != (1,):
            print("  " + res.plan.describe(state).replace("\n", "\n  "))
            print(f"  ({res.message[-160:]})")
    best = None
    for name, f in baselines.ALL.items():
        p = f(state)
        if p is None or p.validate(state):
            continue
        ev = evaluate(p, state)
        if best is None or ev.batch_time < best[1].batch_time:
            best = (name, ev)
    print("best baseline (tp 1): none fits in memory" if best is None else
          f"best baseline (tp 1) {best[0]}: batch time {best[1].batch_time:.4g} s, {best[1].costs[0]:.4g} USD per iteration")
    grid = [(label, evaluate(p, state)) for label, p in megatron_grid(state, inst.workload.num_layers, batch, micro)
            if not p.validate(state)]
    if grid:
        label, ev = min(grid, key=lambda x: x[1].batch_time)
        print(f"best Megatron-style uniform grid ({len(grid)} valid points): {label}: batch time {ev.batch_time:.4g} s, "
              f"{ev.costs[0]:.4g} USD per iteration")
    else:
        print("Megatron-style uniform grid: no point fits in memory")


_TIMER = """
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {tree!r})
import benchmarks.bench_sailor_cluster as bench
bench.DATA = Path({data!r})
from solver import SolveOptions, load_instance, solve_slot
out = {{}}
for model in {models!r}:
    def fresh():
        with tempfile.TemporaryDirectory() as tmp:
            return load_instance(bench.toml(Path(tmp), {batch}, {micro}, model, kinds={kinds!r}, nodes={nodes})).state(0)
    solve_slot(fresh(), V=1.0, options=SolveOptions(tp_degrees=(1,)))
    modes = [None]
    if "classes" in SolveOptions.__dataclass_fields__:     # trees since session 17: the class-level search alone too
        modes = ["off", "auto"]
    for degs in ((1,), (1, 2, 4, 8)):
        for mode in modes:
            state = fresh()             # nothing kept on the state from an earlier solve
            t0 = time.process_time()
            res = solve_slot(state, V=1.0, options=SolveOptions(tp_degrees=degs) if mode is None else
                             SolveOptions(tp_degrees=degs, classes=mode))
            key = model + (" tp 1 only" if degs == (1,) else "") + ("" if mode in (None, "off") else " classes auto")
            out[key] = (time.process_time() - t0, res.objective)
print(json.dumps(out))
"""


def planning_times(against: str, rounds: int, models: list[str], batch: int, micro: int, nodes: int = 4,
                   kinds: tuple[str, ...] = ("A100-40", "V100-16")) -> None:
    """Print the planning time of this tree's solver and of commit `against`'s side by side (module doc)."""
    root = Path(__file__).resolve().parents[1]
    least: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_sailor_") as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(old), against],
                       check=True, capture_output=True)
        try:
            for _ in range(max(1, rounds)):
                for who, tree in (("old", old), ("new", root)):
                    code = _TIMER.format(tree=str(tree), data=str(DATA), models=models, batch=batch, micro=micro, nodes=nodes,
                                         kinds=tuple(kinds))
                    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp)
                    if run.returncode:
                        raise SystemExit(f"{who} solver ({tree}) failed:\n{run.stderr[-2000:]}")
                    for case, (sec, obj) in json.loads(run.stdout.strip().splitlines()[-1]).items():
                        got = least.setdefault((who, case), [sec, obj])
                        got[0] = min(got[0], sec)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(old)], capture_output=True)
    print(f"\nplanning CPU seconds per slot, least of {max(1, rounds)} rounds; old = {against}, new = this tree")
    for case in dict.fromkeys(c for _, c in least):
        if ("old", case) not in least:       # the class-level search alone: against the old tree's device search
            (so, oo), (sn, on) = least[("old", case.replace(" classes auto", ""))], least[("new", case)]
        else:
            (so, oo), (sn, on) = least[("old", case)], least[("new", case)]
        close = oo == on or (math.isfinite(oo) and math.isfinite(on) and abs(oo - on) <= 1e-9 * abs(oo))
        same = "same objective" if close else f"objective {oo:.6g} -> {on:.6g}"
        print(f"  {case}: old {so:.3f} s, new {sn:.3f} s, {so / sn:.2f}x faster, {same}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--batch", type=positive_int, default=2048)
    ap.add_argument("--micro-batch", type=positive_int, default=1)
    ap.add_argument("--models", nargs="+", default=["GPT-Neo-2.7", "LLAMA-3-8"])
    ap.add_argument("--nodes", type=positive_int, default=4, help="servers of 4 GPUs per GPU type (Sailor's setting: 4)")
    ap.add_argument("--kinds", nargs="+", default=["A100-40", "V100-16"], choices=sorted(KINDS),
                    help="Sailor GPU types in the cluster (Sailor's setting: A100-40 V100-16)")
    ap.add_argument("--against", default=None, help="commit whose planning time to measure beside this tree's")
    ap.add_argument("--rounds", type=positive_int, default=2, help="rounds of the side-by-side timing (--against)")
    args = ap.parse_args()
    if not DATA.is_dir():
        print(f"needs Sailor's data at {DATA}", file=sys.stderr)
        return 1
    for model in args.models:
        report(model, args.batch, args.micro_batch, args.nodes, tuple(args.kinds))
    if args.against:
        planning_times(args.against, args.rounds, args.models, args.batch, args.micro_batch, args.nodes,
                       tuple(args.kinds))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
