"""Fidelity of the memory model on measured LLM profiles, and a Metis-style cluster.

Usage: python -m benchmarks.bench_fidelity [--quick] [--out DIR]   (needs ../shared/data)

Part 1, per-stage activation memory: GPT-Neo-2.7 and LLAMA-3-8 (Sailor's llm_info.json, tp 1)
cut into k equal stages by layer count, 1F1B with n >= k micro-batches of u samples. The figure
implied by llm_info.json for stage j (0-based) is min(k - j, n) * u * (sum of the stage's
act_mem_bytes), its README's definition of act_mem_bytes (bytes a layer keeps per sample for
its backward pass, what a stage stashes per in-flight micro-batch). Predicted from four layer
tables: the Sailor import (solver.io.sailor); transformer blocks from the architecture
(solver.io.transformer, other layers as recorded) as the profiled run had them (ARCH: fp32
tensors, 4-byte statistics; GPT-Neo-2.7 with 20 heads, hidden dropout with 1-byte masks and no
attention dropout; LLAMA-3-8 as a Llama block with f = 4h); the same blocks by Korthikanti et
al.'s 16-bit GPT figure with Sailor's configured 32 heads (this benchmark's earlier formula);
and a graph-profile table that knows only the boundary tensors (each layer's input,
act_input_bytes). Model states (16 bytes per parameter, Adam) are added for the totals.

Part 2 (Metis-style cluster) is printed by `cluster_comparison`: see its docstring.

Part 3 (micro-batch size as a decision) is printed by `micro_batch_comparison`: see its docstring.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from solver.cli.argtypes import DocHelp, guarded  # noqa: E402
from solver import baselines, solve_slot  # noqa: E402
from solver.cost import evaluate  # noqa: E402
from solver.cost.simulator import simulate_plan  # noqa: E402
from solver.io.hardware import hardware_spec  # noqa: E402
from solver.io.sailor import read_sailor_profile, sailor_workload  # noqa: E402
from solver.io.synthetic import default_budgets  # noqa: E402
from solver.model import Device, Group, Plan, SlotState  # noqa: E402
from solver.io.transformer import block_saved_bytes, korthikanti_bytes, llama_block_saved_bytes  # noqa: E402
from solver.model.memory import live_samples  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SAILOR = SHARED / "profiles" / "sailor"
ARCH = {"GPT-Neo-2.7": (2048, 2560, 20), "LLAMA-3-8": (8192, 4096, 32)}
"""(sequence, hidden, heads). s * h is each block's act_output_floats (2048 x 2560, 8192 x 4096).
GPT-Neo 2.7B has 20 heads of 128 (EleutherAI's published configuration; Sailor's training
config says 32 of 80, but its measured act_mem_bytes fits 20 to the byte and no combination at
32); Llama 3 8B has 32 query heads. The profiled run was fp32: llm_info.json's act_output_bytes
and params_bytes are 4 bytes per element, and Sailor's profiler records act_mem_bytes as the
growth of torch.cuda.memory_allocated() over a layer's forward (its '_floats' are bytes / 4)."""
LLAMA_FFN_PER_HIDDEN = 4
"""The profiled LLAMA-3-8 block's SwiGLU width f / h: its params_floats are 16 h^2 + 15 h
(4 h^2 attention without grouped K/V, 3 h f = 12 h^2 MLP, 15 h biases and norms), so f = 4 h,
not Llama 3's published 14336."""
KORTHIKANTI_HEADS = {"GPT-Neo-2.7": 32, "LLAMA-3-8": 32}


def block_formula(model: str) -> float:
    """Saved bytes per sample of one block of `model`, from the architecture (ARCH)."""
    s, h, a = ARCH[model]
    if model.startswith("LLAMA"):
        return llama_block_saved_bytes(s, h, a, LLAMA_FFN_PER_HIDDEN * h, act_bytes=4.0, stat_bytes=4.0)
    return block_saved_bytes(s, h, a, act_bytes=4.0, mask_bytes=1.0, stat_bytes=4.0, dropout=True,
                             attention_dropout=False)
STATE_BYTES_PER_PARAM = 16.0


def equal_stages(L: int, k: int) -> list[range]:
    bounds = np.linspace(0, L, k + 1).round().astype(int)
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def memory_rows(model: str, ks=(2, 4, 8), us=(1, 2), n: int = 16) -> list[dict]:
    prof = read_sailor_profile(SAILOR, model)
    info = json.loads((SAILOR / "llm_info.json").read_text())[model]["1"]
    L = prof.num_layers
    s, h, _ = ARCH[model]
    block = [prof.names[i].startswith("block") for i in range(L)]
    formula = [block_formula(model) if block[i] else prof.saved_bytes[i] for i in range(L)]
    paper16 = [korthikanti_bytes(s, h, KORTHIKANTI_HEADS[model]) if block[i] else prof.saved_bytes[i]
               for i in range(L)]
    boundary = [float(info[str(i)]["act_input_bytes"]) for i in range(L)]
    params = [float(info[str(i)]["params_floats"]) for i in range(L)]
    rows = []
    for k in ks:
        for u in us:
            live = live_samples(k, n * u, u, "1f1b")
            for j, st in enumerate(equal_stages(L, k)):
                implied = live[j] * sum(float(info[str(i)]["act_mem_bytes"]) for i in st)
                states = STATE_BYTES_PER_PARAM * sum(params[i] for i in st)
                pred = {name: live[j] * sum(tab[i] for i in st)
                        for name, tab in (("sailor", prof.saved_bytes), ("formula", formula),
                                          ("paper16", paper16), ("boundary", boundary))}
                rows.append({"model": model, "k": k, "u": u, "stage": j, "layers": f"{st.start}-{st.stop - 1}",
                             "implied_act_GB": implied / 1e9, "implied_total_GB": (implied + states) / 1e9,
                             **{f"{m}_act_ratio": p / implied for m, p in pred.items()},
                             **{f"{m}_total_ratio": (p + states) / (implied + states) for m, p in pred.items()}})
    return rows


def summarise(rows: list[dict]) -> None:
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        print(f"{model}: {len(mine)} stages (k in {sorted({r['k'] for r in mine})}, u in {sorted({r['u'] for r in mine})}, 1F1B)")
        for m in ("sailor", "formula", "paper16", "boundary"):
            act = np.array([r[f"{m}_act_ratio"] for r in mine])
            tot = np.array([r[f"{m}_total_ratio"] for r in mine])
            print(f"  {m:<8} predicted / implied: activations min {act.min():.3f} median {np.median(act):.3f} "
                  f"max {act.max():.3f} (largest |ratio - 1| {np.abs(act - 1).max():.1e}); "
                  f"with model states min {tot.min():.3f} max {tot.max():.3f}")
        r = max(mine, key=lambda r: r["implied_act_GB"])
        print(f"  largest stage: k={r['k']} u={r['u']} stage {r['stage']} (layers {r['layers']}): "
              f"implied {r['implied_act_GB']:.2f} GB activations, {r['implied_total_GB']:.2f} GB in all")


KINDS = {"A100-SXM4-40GB": ("A100-40", 3.673385), "V100-SXM2-16GB": ("V100-16", 2.859998)}
"""Hardware kind -> (Sailor's name, Sailor's GCP USD per GPU-hour)."""
A100_80 = ("A100-80", 5.12)
"""Sailor's name of the A100 80 GB and this package's hardware-table price (an estimate: Sailor
lists none)."""
METIS = {"A100-SXM4-40GB": 8, "V100-SXM2-16GB": 8}


def metis_state(u: int, batch: int = 128) -> SlotState:
    """8 A100-40 + 8 V100-16 (cluster_state)."""
    return cluster_state(METIS, u, batch)


def cluster_state(counts: dict[str, int], u: int, batch: int = 128, model: str = "GPT-Neo-2.7") -> SlotState:
    """counts[kind] GPUs of each kind, 4 GPUs per node (Sailor's cluster config: usable memory per
    GPU), `model` from Sailor's profile at micro-batch u (groups may choose any profiled size
    dividing the batch). Links: Sailor's fitted maxima, inside a node 243 GB/s (A100, also
    assumed for the A100 80 GB) / 68 GB/s (V100), between nodes 2.42 GB/s (A100 nodes) /
    1.72 GB/s (any V100 node); latency 10 us inside a node and 50 us between nodes (assumed)."""
    cfg = json.loads((SAILOR / "configs" / "basic_cluster_config.json").read_text())
    devices, node = [], []
    for kind, count in counts.items():
        sname, usd_h = KINDS.get(kind) or A100_80
        spec = hardware_spec(kind)
        for i in range(count):
            devices.append(Device(f"{sname}-{i}", kind, spec.peak_flops, float(cfg[sname]["mem_per_gpu"]),
                                  spec.busy_w, spec.idle_w, usd_h / 3600.0))
            node.append(f"{sname}/{i // 4}")
    n = len(devices)
    bw, lat = np.empty((n, n)), np.empty((n, n))
    for i in range(n):
        for j in range(n):
            a100 = devices[i].kind.startswith("A100") and devices[j].kind.startswith("A100")
            same = node[i] == node[j]
            bw[i, j] = (243e9 if a100 else 68e9) if same else (2.42e9 if a100 else 1.72e9)
            lat[i, j] = 1e-5 if same else 5e-5
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    wl = sailor_workload(read_sailor_profile(SAILOR, model), batch, u)
    ones = np.ones(n)
    return SlotState(0, tuple(devices), wl, default_budgets(1e9, 1e15), ones.astype(bool),
                     np.array([d.peak_flops * 0.5 for d in devices]), ones,
                     np.array([d.price_per_s for d in devices]), bw, lat)


def grid_plans(state: SlotState, schedule: str, recompute: bool):
    """Metis-style plans: dp pipelines of pp equal-size stages (by layer count), each pipeline on
    one GPU type in node order, even shares; over every divisor pp of each type's count, for
    A100s only, V100s only, and both (pipelines of each type side by side)."""
    L, B, u = state.workload.num_layers, state.workload.batch, state.workload.micro_batch
    by_kind = {k: [i for i, d in enumerate(state.devices) if d.kind == k] for k in KINDS}
    options = {k: [(pp, len(devs) // pp) for pp in (1, 2, 4, 8) if len(devs) % pp == 0 and pp <= L]
               for k, devs in by_kind.items()}
    choices = [[(k, o)] for k in KINDS for o in options[k]]
    choices += [[(a, oa), (b, ob)] for a, b in [tuple(KINDS)] for oa in options[a] for ob in options[b]]
    for choice in choices:
        groups = []
        for kind, (pp, dp) in choice:
            devs = by_kind[kind]
            groups += [tuple(devs[g * pp:(g + 1) * pp]) for g in range(dp)]
        m = len(groups)
        if B % (m * u):
            continue
        yield Plan(tuple(Group(g, cuts_for(L, len(g)), B // m, schedule, recompute) for g in groups))


def cuts_for(L: int, k: int) -> tuple[int, ...]:
    return tuple(int(c) for c in np.linspace(0, L, k + 1).round().astype(int)[1:])


def score(plan: Plan | None, state: SlotState) -> dict:
    if plan is None:
        return {"fits": False}
    bad = plan.validate(state)
    if bad:
        return {"fits": False, "why": str(bad[0])}
    how = sorted({g.schedule + (" + recompute" if g.recompute else "") for g in plan.groups})
    return {"fits": True, "model_s": evaluate(plan, state).batch_time,
            "simulated_s": float(simulate_plan(plan, state).batch_time), "plan": plan.summary(state),
            "schedule": ", ".join(how)}


def cluster_comparison(us=(1, 2, 4)) -> list[dict]:
    """Part 2: on the Metis-style cluster (metis_state), global batch 128: data parallelism
    (even DP), the best Metis-style grid plan (grid_plans, 1F1B with and without recomputation,
    every u), and the planner's plan (solve_slot, V = 1, no budgets in force), each scored by
    the cost model and by the event simulator."""
    rows = []
    for u in us:
        state = metis_state(u)
        rows.append({"u": u, "who": "even DP", **score(baselines.even_dp(state), state)})
        best = None
        for schedule, recompute in (("1f1b", False), ("1f1b", True), ("gpipe", False)):
            for plan in grid_plans(state, schedule, recompute):
                r = score(plan, state)
                if r["fits"] and (best is None or r["model_s"] < best["model_s"]):
                    best = r
        rows.append({"u": u, "who": "best dp x pp grid", **(best or {"fits": False})})
        res = solve_slot(state, (0.0, 0.0), 1.0)
        rows.append({"u": u, "who": "planner", "status": str(res.status), **score(res.plan, state)})
    return rows


MB_CLUSTERS = {"8 A100-40 + 8 V100-16": METIS,
               "8 A100-80 + 8 V100-16": {"A100-SXM4-80GB": 8, "V100-SXM2-16GB": 8},
               "4 A100-80 + 4 A100-40 + 8 V100-16": {"A100-SXM4-80GB": 4, "A100-SXM4-40GB": 4, "V100-SXM2-16GB": 8}}


def single_size(state: SlotState, u: int) -> SlotState:
    """The same slot with every group at micro-batch u (its only option)."""
    wl = state.workload
    return replace(state, workload=replace(wl, micro_batch=u, measured=dict(wl.measured_by_micro_batch[u]),
                                           measured_by_micro_batch={}))


def _solved(state: SlotState, check: SlotState) -> dict:
    t0 = time.perf_counter()
    res = solve_slot(state, (0.0, 0.0), 1.0)
    secs = time.perf_counter() - t0
    if res.plan is None:
        return {"fits": False, "status": str(res.status), "solve_s": secs}
    u0 = state.workload.micro_batch
    sizes = [g.micro_batch or u0 for g in res.plan.groups]
    # the plan re-read in the multi-size state (each group's u explicit) must fit and score the same
    plan = Plan(tuple(replace(g, micro_batch=u) for g, u in zip(res.plan.groups, sizes)))
    bad = plan.validate(check)
    return {"fits": not bad, "why": str(bad[0]) if bad else "", "objective_s": res.objective,
            "model_s": evaluate(plan, check).batch_time, "simulated_s": float(simulate_plan(plan, check).batch_time),
            "sizes": sizes, "solve_s": secs,
            "plan": " | ".join(part.replace(":", f"@u{u}:", 1) for u, part in zip(sizes, plan.summary(check).split(" | "))),
            "schedule": ", ".join(sorted({g.schedule + (" + recompute" if g.recompute else "") for g in plan.groups}))}


def micro_batch_comparison(batch: int = 128, clusters: dict | None = None) -> list[dict]:
    """Part 3: GPT-Neo-2.7 (Sailor's times at micro-batch sizes 1..32, those dividing the batch
    allowed), global batch `batch`, V = 1 and no budgets in force, on each cluster of
    MB_CLUSTERS: solve_slot with every group held at one u (u = 1, and each other profiled u)
    against solve_slot choosing each group's u. Figures: the objective (the cost model's batch
    time, 1F1B groups at their upper bound), the event simulator's batch time, the sizes chosen."""
    rows = []
    for name, counts in (clusters or MB_CLUSTERS).items():
        state = cluster_state(counts, 1, batch)
        for u in state.workload.micro_batch_options():
            rows.append({"cluster": name, "who": f"fixed u={u}", **_solved(single_size(state, u), state)})
        rows.append({"cluster": name, "who": "choice", **_solved(state, state)})
    return rows


def print_micro_batch(rows: list[dict]) -> None:
    for name in dict.fromkeys(r["cluster"] for r in rows):
        mine = [r for r in rows if r["cluster"] == name]
        print(f"  {name}:")
        for r in mine:
            if not r["fits"]:
                print(f"    {r['who']:<11} no plan ({r.get('why') or r.get('status')})")
                continue
            print(f"    {r['who']:<11} objective {r['objective_s']:.4f} s, simulated {r['simulated_s']:.4f} s, "
                  f"sizes {sorted(set(r['sizes']))} ({r['schedule']}; {r['solve_s']:.1f} s to solve): {r['plan']}")
        fixed = [r for r in mine if r["fits"] and r["who"] != "choice"]
        u1 = next((r for r in fixed if r["who"] == "fixed u=1"), None)
        choice = next(r for r in mine if r["who"] == "choice")
        if choice["fits"] and fixed:
            best = min(fixed, key=lambda r: r["objective_s"])
            parts = [f"vs fixed u=1 {u1['objective_s'] / choice['objective_s']:.4f}x (simulated "
                     f"{u1['simulated_s'] / choice['simulated_s']:.4f}x)" if u1 else "no plan at u=1",
                     f"vs the best single u ({best['who']}) {best['objective_s'] / choice['objective_s']:.4f}x"]
            print("    gain of choosing u: " + "; ".join(parts))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--parts", default="123", help="which parts to run, e.g. 13 (default 123)")
    args = ap.parse_args(argv)
    if not SAILOR.is_dir():
        print(f"../shared/data not found at {SHARED}: nothing to measure", file=sys.stderr)
        return 1
    result: dict = {}
    if "1" in args.parts:
        rows = [r for m in ARCH for r in memory_rows(m)]
        print("Part 1: per-stage activation memory, predicted / implied by llm_info.json")
        summarise(rows)
        result["memory"] = rows
    if "2" in args.parts:
        print("Part 2: Metis-style cluster, 8 A100-40 + 8 V100-16, GPT-Neo-2.7, B = 128")
        cl = cluster_comparison((1, 2) if args.quick else (1, 2, 4))
        for r in cl:
            fig = (f"model {r['model_s']:.3f} s, simulated {r['simulated_s']:.3f} s ({r['schedule']}): {r['plan']}"
                   if r.get("fits")
                   else f"no plan fits ({r.get('why', r.get('status', 'none'))})")
            print(f"  u={r['u']} {r['who']:<18} {fig}")
        result["cluster"] = cl
    if "3" in args.parts:
        print("Part 3: micro-batch size as a decision, GPT-Neo-2.7, B = 128, solve_slot at one u vs choosing u")
        mb = micro_batch_comparison(clusters=dict(list(MB_CLUSTERS.items())[:1]) if args.quick else None)
        print_micro_batch(mb)
        result["micro_batch"] = mb
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_fidelity.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
