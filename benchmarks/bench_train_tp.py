"""What a tensor-parallel stage costs in `dynpar train` on this machine: one model on two
processes (p0, p1 of one server) under three given plans, alternated for --rounds rounds:
one stage at TP-2 (p0+p1), two data-parallel groups (p0 | p1), one device (p0), and "tp2>one":
TP-2 in slot 0, then p0 alone (what the estimator, fitted on a TP slot, predicts for a plan
without TP: the collectives' misprice, absorbed into the speed factors, would show there).

    python benchmarks/bench_train_tp.py [--model solver.runtime.examples:wide] [--rounds 2]
                                        [--no-collective-latency] [--tp-degrees 2]

Prints per plan the measured seconds per iteration (the least over the rounds, and each
round's) and the cost model's predictions; writes the same to --out (JSON) when given. The
layer table is `dynpar profile`d here first (kind "cpu", one thread). Each job runs two slots
of --steps iterations: `predicted_s` is slot 0's prediction (from the instance alone),
`refit_predicted_s` slot 1's (after the estimator's fit of slot 0: runtime.estimator; its
error is then the measurement's move plus what the fit does not carry) against slot 1's
measurement. gloo's cost per TP collective (a fixed per-call overhead the link latency does not
hold) is measured first, the mean time of a 2-process all-reduce of 64 floats, and declared
in the instance ([network] tp_collective_latency_ms; `--no-collective-latency`: not declared,
the estimator then fits it from slot 0 alone; `--allreduce-latency`: the same figure declared
for each data-parallel gradient all-reduce, [network] allreduce_latency_ms).
`--tp-degrees 2`: the profile also measures the shards at TP-2 (`dynpar profile --tp-degrees
2 --tp-mode MODE`, tp_times shard_compute; `--tp-mode` group by default: two gloo processes,
runtime.tp_profile), which the cost model then prices TP-2 stages with (their collectives
added as before); without it a TP-2 shard is priced as its layers' degree-1 seconds over 2.
Per TP plan it also prints a TP rank's compute outside its collectives in slot 0, measured
and predicted.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver.cli import main as dynpar
from solver.io.instance import load_instance
from solver.model import Group, Plan, plan_to_json
from solver.runtime.launch import launch
from solver.runtime.spec import blocks_of, load_factory
from solver.runtime.trainer import TrainConfig


def _allreduce_times(rank: int, init: str, out: str) -> None:
    import time

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    x, a, times = torch.zeros(64), torch.randn(32, 32), []
    dist.barrier()
    for k in range(320):
        a = torch.tanh(a @ a) * 0.1  # a little compute between collectives, as between a TP stage's layers
        t0 = time.perf_counter()
        dist.all_reduce(x)
        if k >= 20:
            times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def collective_latency() -> float:
    """Seconds of one gloo all-reduce of 64 float32 between two processes here (the per-call
    cost; the bytes are negligible): the mean of 300 after 20 of warm-up, each after a small
    matrix product as between a TP stage's layers. The mean, not the median: an iteration's
    collectives add up, and on this shared machine a few of them wait milliseconds for a
    descheduled peer (at load 6: median 0.6-1.4 ms, mean 1.0-3.3 ms)."""
    import statistics

    from benchmarks.bench_train import run_pair
    return float(statistics.mean(run_pair(_allreduce_times)))


def instance(folder: Path, model: str, batch: int, micro: int, collective_s: float = 0.0,
             tp_degrees: str = "", tp_mode: str = "group", allreduce_s: float = 0.0) -> Path:
    """Two devices p0, p1 of kind "cpu" in server s0, seconds from `dynpar profile` here, two
    slots; `collective_s`: seconds per TP collective declared ([network] tp_collective_latency_ms);
    `allreduce_s`: seconds per gradient all-reduce call declared ([network] allreduce_latency_ms);
    `tp_degrees`, `tp_mode`: the profile's --tp-degrees ("": degree 1 only) and --tp-mode."""
    extra = ["--tp-degrees", tp_degrees, "--tp-mode", tp_mode] if tp_degrees else []
    assert dynpar(["profile", model, "--kind", "cpu", "--batch", str(batch), "--micro-batch", str(micro),
                   "--repeats", "3", "-o", str(folder / "table.csv"), "--force", *extra]) == 0
    devs = "".join(f'[[devices]]\nname = "p{i}"\nkind = "cpu"\nserver = "s0"\n\n' for i in range(2))
    path = folder / "tp2.toml"
    calls = [f"{k} = {v * 1e3:.6g}\n" for k, v in (("tp_collective_latency_ms", collective_s),
                                                 ("allreduce_latency_ms", allreduce_s)) if v]
    net = "[network]\n" + "".join(calls) + "\n" if calls else ""
    path.write_text(f'name = "tp2"\nnum_slots = 2\n\n[workload]\nmodel = "table.csv"\nbatch = {batch}\n'
                    f'micro_batch = {micro}\n\n[[kinds]]\nkind = "cpu"\npeak_tflops = 0.004\nmemory_gb = 4\n'
                    f'busy_w = 15\nidle_w = 5\nprice_per_hour = 0.01\n\n{net}{devs}[[servers]]\nname = "s0"\n\n'
                    '[[budgets]]\nkind = "money"\nlimit = 1.0\n')
    return path


def shard_compute(row: pd.Series) -> float:
    """Seconds per iteration a TP rank computed outside its TP collectives in this slots.csv
    row: the median over the TP ranks of measured_compute - measured_parts' tp_comm."""
    import statistics
    comp, parts = json.loads(row["measured_compute"]), json.loads(row["measured_parts"])
    return float(statistics.median(comp[d] - parts[d]["tp_comm"] for d in parts if "tp_comm" in parts[d]))


def predicted_shard_compute(inst, plan: Plan, model: str) -> float:
    """The cost model's seconds per iteration of a TP rank's compute without its collectives
    in slot 0 of `inst` (the instance's factors; the collectives priced as `dynpar train`
    prices them, tensor_parallel.collective_counts): runtime.estimator.predicted_compute
    minus predicted_tp_collectives, the largest over the plan's TP ranks."""
    from dataclasses import replace

    from solver.runtime.estimator import predicted_compute, predicted_tp_collectives
    from solver.runtime.tensor_parallel import collective_counts
    wl = replace(inst.workload, tp_collectives=collective_counts(blocks_of(load_factory(model).model)))
    state = replace(inst, workload=wl).state(0)
    comp, coll = predicted_compute(plan, state), predicted_tp_collectives(plan, state)
    return max(comp[d] - coll[d] for d in coll)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--model", default="solver.runtime.examples:mlp64")
    ap.add_argument("--batch", type=positive_int, default=32)
    ap.add_argument("--micro-batch", type=positive_int, default=4)
    ap.add_argument("--steps", type=positive_int, default=16)
    ap.add_argument("--rounds", type=positive_int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--no-collective-latency", dest="declare", action="store_false",
                    help="do not measure and declare gloo's per-collective latency in the instance")
    ap.add_argument("--tp-degrees", default="",
                    help="profile one rank's shard at these TP degrees too (dynpar profile --tp-degrees), e.g. 2")
    ap.add_argument("--tp-mode", choices=("group", "local"), default="group", help="dynpar profile --tp-mode")
    ap.add_argument("--allreduce-latency", action="store_true",
                    help="declare the same per-call figure for the data-parallel gradient all-reduce too "
                         "([network] allreduce_latency_ms)")
    a = ap.parse_args(argv)
    L = len(blocks_of(load_factory(a.model).model))
    B = a.batch
    plans = {"tp2": Plan((Group((0,), (L,), B, tp_peers=((1,),)),)),
             "dp2": Plan((Group((0,), (L,), B // 2), Group((1,), (L,), B - B // 2))),
             "one": Plan((Group((0,), (L,), B),))}
    sequence = {k: (p, p) for k, p in plans.items()}
    sequence["tp2>one"] = (plans["tp2"], plans["one"])
    seen: dict[str, list[float]] = {k: [] for k in sequence}
    seen1: dict[str, list[float]] = {k: [] for k in sequence}
    refit: dict[str, list[float]] = {k: [] for k in sequence}
    lam: dict[str, list[float]] = {k: [] for k in sequence}
    lam_ar: dict[str, list[float]] = {k: [] for k in sequence}
    pred: dict[str, float] = {}
    shard: dict[str, list[float]] = {k: [] for k in sequence}
    shard_pred: dict[str, float] = {}
    coll = collective_latency() if a.declare else 0.0
    with tempfile.TemporaryDirectory() as tmp:
        inst = load_instance(instance(Path(tmp), a.model, B, a.micro_batch, coll, a.tp_degrees,
                                          a.tp_mode, coll if a.allreduce_latency else 0.0))
        for _ in range(a.rounds):
            for name, ps in sequence.items():
                ck = Path(tmp) / name.replace(">", "-")
                shutil.rmtree(ck, ignore_errors=True)
                launch(inst, TrainConfig(a.model, 2 * a.steps, str(ck), iterations_per_slot=a.steps,
                                         plans=tuple(plan_to_json(p) for p in ps)), ["p0", "p1"])
                rows = pd.read_csv(ck / "slots.csv")
                seen[name].append(float(rows["measured_batch_time"].iloc[0]))
                seen1[name].append(float(rows["measured_batch_time"].iloc[1]))
                refit[name].append(float(rows["batch_time"].iloc[1]))
                lam[name].append(float(rows["tp_collective_latency"].iloc[0]))
                lam_ar[name].append(float(rows["allreduce_latency"].iloc[0]) if "allreduce_latency" in rows else 0.0)
                pred[name] = float(rows["batch_time"].iloc[0])
                if ps[0].uses_tp:
                    shard[name].append(shard_compute(rows.iloc[0]))
                    shard_pred[name] = predicted_shard_compute(inst, ps[0], a.model)
    out = {k: {"measured_s": min(v), "rounds_s": v, "predicted_s": pred[k],
               "slot1_measured_s": seen1[k], "refit_predicted_s": refit[k],
               "fitted_collective_latency_ms": [round(x * 1e3, 4) for x in lam[k]],
               "fitted_allreduce_latency_ms": [round(x * 1e3, 4) for x in lam_ar[k]],
               **({"shard_compute_measured_s": shard[k], "shard_compute_predicted_s": shard_pred[k]}
                  if k in shard_pred else {})} for k, v in seen.items()}
    print(f"declared per-collective latency: {coll * 1e3:.4f} ms" if a.declare else
          "no per-collective latency declared")
    for k, v in out.items():
        errs = ", ".join(f"{m / r - 1:+.1%}" for m, r in zip(v["slot1_measured_s"], v["refit_predicted_s"]))
        print(f"{k}: measured {v['measured_s']:.4f} s/iter (rounds {', '.join(f'{x:.4f}' for x in v['rounds_s'])}), "
              f"predicted {v['predicted_s']:.4f} ({v['measured_s'] / v['predicted_s'] - 1:+.1%}); after the fit: "
              f"slot 1 {', '.join(f'{x:.4f}' for x in v['slot1_measured_s'])} against "
              f"{', '.join(f'{x:.4f}' for x in v['refit_predicted_s'])} ({errs}); fitted per-collective latency "
              f"{v['fitted_collective_latency_ms']} ms, all-reduce {v['fitted_allreduce_latency_ms']} ms")
        if "shard_compute_predicted_s" in v:
            print(f"  {k} slot 0, a TP rank's compute outside its collectives: measured "
                  f"{', '.join(f'{x:.4f}' for x in v['shard_compute_measured_s'])} s/iter, predicted "
                  f"{v['shard_compute_predicted_s']:.4f}")
    if a.out:
        a.out.write_text(json.dumps({"command": "python benchmarks/bench_train_tp.py " + " ".join(
                                         argv if argv is not None else sys.argv[1:]),
                                     "model": a.model, "batch": B, "micro_batch": a.micro_batch,
                                     "steps": a.steps, "declared_collective_latency_ms": round(coll * 1e3, 4),
                                     "tp_degrees_profiled": a.tp_degrees, "tp_mode": a.tp_mode,
                                     "allreduce_latency_declared": a.allreduce_latency,
                                     "plans": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
