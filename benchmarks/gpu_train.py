"""`dynpar train` on one CUDA GPU with NCCL: profile -> instance -> plan -> train, predicted
against measured batch time, and throughput against plain training of the same model.

For each case (a model of solver.runtime.examples, a global batch B and micro-batch u):
1. `dynpar profile MODEL --kind KIND --accelerator cuda`: per-block forward, backward and
   optimizer-step seconds on the GPU (each timing between device synchronisations);
2. an instance of one device of that kind (one GPU: the plan is one group of one stage;
   the planner still picks the micro-batch and whether to recompute), optimizer_step =
   "measured";
3. `dynpar train ... --accelerator cuda` (one spawned process, NCCL) over S slots of K
   iterations: per slot the predicted and the measured seconds per iteration (err =
   measured / predicted - 1; from slot 1 on the estimator has the slot before's
   measurements), and the whole command's wall seconds (spawn, CUDA and NCCL start,
   planning, checkpoints included);
4. the same model trained by a plain loop in this process on the same GPU, same B, same
   micro-batches (gradient accumulation), the batch already on the GPU: median seconds
   per iteration; and wrapped in DistributedDataParallel over a one-rank NCCL group
   (no_sync on all but the last micro-batch). Their throughput against dynpar's measured
   one;
5. how far dynpar's final parameters are from the plain loop's after the same iterations,
   ||dynpar - plain|| / ||plain - initial||, beside the rounding floor: the same for the
   plain loop at u against the plain loop on whole batches (float32 on a GPU, summed in
   another order: not 0);
6. memory: the allocator's peak on the GPU per slot (measured_parts' peak_bytes) against
   model.memory's one-stage rule k_opt * P + u * H, with P and H the profiled table's
   parameter and stash bytes and k_opt = 2 + the optimizer's state bytes over the
   parameter bytes (measured from the plain loop's optimizer).

    python benchmarks/gpu_train.py --out DIR                 # on a CUDA machine
    python benchmarks/gpu_train.py --out DIR --accelerator cpu --small   # a dry run here

Writes DIR/gpu_train.json and prints one table row per case.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver.runtime.spec import Batches, blocks_of, load_factory  # noqa: E402
from solver.runtime.trainer import final_state  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One model: factory name in solver.runtime.examples, its environment knobs, B and u."""

    name: str
    factory: str
    env: dict[str, str] = field(default_factory=dict)
    batch: int = 64
    micro: int = 16


CASES = (
    Case("wide-4096x8", "wide", {"DYNPAR_WIDE_WIDTH": "4096", "DYNPAR_WIDE_BLOCKS": "8"}, 1024, 256),
    Case("encoder-1024x8-fp32", "encoder", {"DYNPAR_ENC_DIM": "1024", "DYNPAR_ENC_LAYERS": "8",
                                            "DYNPAR_ENC_SEQ": "256"}, 64, 16),
    Case("encoder-1024x8-bf16", "encoder_bf16", {"DYNPAR_ENC_DIM": "1024", "DYNPAR_ENC_LAYERS": "8",
                                                 "DYNPAR_ENC_SEQ": "256"}, 64, 16),
)
SMALL = (
    Case("wide-256x4", "wide", {"DYNPAR_WIDE_WIDTH": "256", "DYNPAR_WIDE_BLOCKS": "4"}, 64, 16),
    Case("encoder-64x2", "encoder", {"DYNPAR_ENC_DIM": "64", "DYNPAR_ENC_LAYERS": "2", "DYNPAR_ENC_SEQ": "16"},
         16, 4),
)


def dynpar(args: list[str], env: dict[str, str]) -> tuple[int, float, str]:
    """`python -m solver ARGS` in a child process: (exit code, wall seconds, its output's tail)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "solver", *args], cwd=REPO, capture_output=True, text=True,
                       env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(filter(None, (
                           str(REPO), os.environ.get("PYTHONPATH"))))})
    out = (p.stdout + p.stderr)[-3000:]
    return p.returncode, time.perf_counter() - t0, out


def write_instance(folder: Path, case: Case, kind: str, slots: int) -> Path:
    """One device of `kind` whose seconds the profiled table holds."""
    mem = 141 if kind == "h200" else 8
    path = folder / f"{case.name}.toml"
    path.write_text(f'name = "{case.name}"\nnum_slots = {slots}\n[workload]\nmodel = "{case.name}.csv"\n'
                    f'batch = {case.batch}\nmicro_batch = {case.micro}\noptimizer_step = "measured"\n'
                    f'[[kinds]]\nkind = "{kind}"\npeak_tflops = 989\nmemory_gb = {mem}\nbusy_w = 700\n'
                    f'idle_w = 100\nprice_per_hour = 3.5\n[[devices]]\nname = "g0"\nkind = "{kind}"\n'
                    f'server = "s0"\n')
    return path


def plain_loop(case: Case, device: torch.device, iterations: int, ddp: bool,
               micro: int | None = None) -> tuple[float, dict, dict, float]:
    """Median seconds per iteration of single-process training (or DDP over one rank) at
    micro-batch `micro` (default u) with gradient accumulation, batches pre-staged on
    `device`; the initial and final parameters keyed like final_state, and the optimizer
    state's bytes over the parameters' bytes after training."""
    os.environ.update(case.env)
    spec = load_factory(f"solver.runtime.examples:{case.factory}")
    model = torch.nn.Sequential(*blocks_of(spec.model)).to(device)
    start = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    opt = spec.make_optimizer(model.parameters())
    micro = micro or case.micro
    data = Batches(spec.data, case.batch)
    batches = [tuple(t.to(device) for t in data.rows(i, 0, case.batch)) for i in range(iterations)]
    run = model
    if ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1,
                                    init_method="tcp://127.0.0.1:29533")
        run = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    times = []
    for x, y in batches:
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for a in range(0, case.batch, micro):
            last = a + micro >= case.batch
            ctx = run.no_sync() if ddp and not last else contextlib.nullcontext()
            with ctx, spec.autocast_context(device):
                loss = spec.loss(run(x[a:a + micro]), y[a:a + micro]) * (min(micro, case.batch - a) / case.batch)
            loss.backward()
        opt.step()
        sync()
        times.append(time.perf_counter() - t0)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    p_bytes = sum(q.numel() * q.element_size() for q in model.parameters())
    s_bytes = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                  if torch.is_tensor(t) and t.dim() > 0)
    return statistics.median(times[2:] if len(times) > 4 else times), start, state, s_bytes / p_bytes


def relative_change(a: dict, b: dict, start: dict) -> float:
    """||a - b|| / ||b - start|| over every floating-point parameter: how far two trainings
    ended apart, against how far training moved the parameters."""
    keys = [k for k, v in b.items() if v.is_floating_point()]
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in keys)
    den = sum(float((b[k].double() - start[k].double()).pow(2).sum()) for k in keys)
    return (num / den) ** 0.5 if den > 0 else float("nan")


def run_case(case: Case, out: Path, accelerator: str, kind: str, slots: int, per_slot: int) -> dict:
    folder = out / case.name
    folder.mkdir(parents=True, exist_ok=True)
    rep: dict = {"case": case.name, "factory": case.factory, "env": case.env, "batch": case.batch,
                 "micro": case.micro}
    rc, wall, tail = dynpar(["profile", f"solver.runtime.examples:{case.factory}", "--kind", kind, "--batch",
                             str(case.batch), "--micro-batch", str(case.micro), "--repeats", "5",
                             "--accelerator", accelerator, "-o", str(folder / f"{case.name}.csv"), "--force"],
                            case.env)
    rep["profile"] = {"rc": rc, "wall_s": round(wall, 2), "tail": tail[-600:]}
    print(f"[{case.name}] profile rc={rc} {wall:.1f}s: {tail.strip().splitlines()[-1] if tail.strip() else ''}",
          flush=True)
    if rc:
        return rep
    inst = write_instance(folder, case, kind, slots)
    ck = folder / "ck"
    steps = slots * per_slot
    rc, wall, tail = dynpar(["train", str(inst), "--model", f"solver.runtime.examples:{case.factory}",
                             "--steps", str(steps), "--iterations-per-slot", str(per_slot),
                             "--checkpoint-dir", str(ck), "--accelerator", accelerator, "--timeout", "300"],
                            case.env)
    rep["train"] = {"rc": rc, "wall_s": round(wall, 2), "tail": tail[-1500:]}
    print(f"[{case.name}] train rc={rc} {wall:.1f}s", flush=True)
    if rc:
        print(tail, flush=True)
        return rep
    df = pd.read_csv(ck / "slots.csv")
    pred, meas = df["batch_time"].tolist(), df["measured_batch_time"].tolist()
    err = [m / p - 1.0 for p, m in zip(pred, meas)]
    rep["slots"] = {"plan": df["plan"].tolist(), "predicted_s": [round(v, 6) for v in pred],
                    "measured_s": [round(v, 6) for v in meas], "err": [round(e, 4) for e in err]}
    rep["max_abs_err_after_slot0"] = round(max(abs(e) for e in err[1:]), 4) if len(err) > 1 else None
    later = meas[1:] or meas
    rep["dynpar_s_per_it"] = statistics.median(later)
    parts = [json.loads(m)["0"] for m in df["measured_parts"]]
    if all("peak_bytes" in q for q in parts):
        rep["peak_bytes_per_slot"] = [q["peak_bytes"] for q in parts]
    dev = torch.device("cuda" if accelerator == "cuda" else "cpu")
    plain_s, start, plain_state, state_ratio = plain_loop(case, dev, steps, ddp=False)
    rep["plain_s_per_it"] = plain_s
    ddp_s, *_ = plain_loop(case, dev, max(6, per_slot), ddp=True)
    rep["ddp1_s_per_it"] = ddp_s
    rep["throughput_vs_plain"] = plain_s / rep["dynpar_s_per_it"]
    rep["throughput_vs_ddp1"] = ddp_s / rep["dynpar_s_per_it"]
    got = final_state(ck, len(blocks_of(load_factory(f"solver.runtime.examples:{case.factory}").model)))
    rep["rel_diff_vs_plain"] = relative_change(got, plain_state, start)
    _, _, full_state, _ = plain_loop(case, dev, steps, ddp=False, micro=case.batch)
    rep["rel_diff_plain_u_vs_full_batch"] = relative_change(full_state, plain_state, start)
    table = pd.read_csv(folder / f"{case.name}.csv", comment="#")
    k_opt = 2.0 + state_ratio       # parameters, gradients and the optimizer's state, per parameter byte
    rep["k_opt_measured"] = k_opt
    rep["predicted_peak_bytes"] = float(k_opt * table["param_bytes"].sum() + case.micro * table["stash_bytes"].sum())
    if "peak_bytes_per_slot" in rep:
        rep["peak_measured_over_predicted"] = max(rep["peak_bytes_per_slot"]) / rep["predicted_peak_bytes"]
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--out", default="results/gpu_train")
    ap.add_argument("--accelerator", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--small", action="store_true", help="the small cases (a CPU dry run)")
    ap.add_argument("--slots", type=positive_int, default=4)
    ap.add_argument("--per-slot", type=positive_int, default=10)
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kind = "h200" if args.accelerator == "cuda" else "cpu"
    head: dict = {"torch": torch.__version__, "accelerator": args.accelerator}
    if args.accelerator == "cuda":
        head["gpu"] = torch.cuda.get_device_name(0)
    else:
        torch.set_num_threads(1)
    print(json.dumps(head), flush=True)
    cases = [c for c in (SMALL if args.small else CASES) if not args.only or c.name in args.only.split(",")]
    rows = []
    for c in cases:
        try:
            rep = run_case(c, out, args.accelerator, kind, args.slots, args.per_slot)
        except Exception as e:  # noqa: BLE001 - one case's failure is recorded, the others still run
            rep = {"case": c.name, "error": f"{type(e).__name__}: {e}"}
            print(f"[{c.name}] error: {rep['error']}", flush=True)
        rows.append(rep)
        (out / "gpu_train.json").write_text(json.dumps({**head, "cases": rows}, indent=2))
    print(f"{'case':24s} {'pred/meas err (slots 1..)':30s} {'dynpar s/it':>11s} {'plain s/it':>10s} "
          f"{'DDP1 s/it':>9s} {'vs plain':>8s} {'rel diff':>8s} {'floor':>8s} {'mem m/p':>7s}")
    for r in rows:
        if "dynpar_s_per_it" not in r:
            print(f"{r['case']:24s} failed: {r.get('error') or r.get('train', r.get('profile', {})).get('rc')}")
            continue
        errs = ",".join(f"{e:+.1%}" for e in r["slots"]["err"][1:])
        print(f"{r['case']:24s} {errs:30s} {r['dynpar_s_per_it']:11.4f} {r['plain_s_per_it']:10.4f} "
              f"{r['ddp1_s_per_it']:9.4f} {r['throughput_vs_plain']:8.3f} {r['rel_diff_vs_plain']:8.1e} "
              f"{r['rel_diff_plain_u_vs_full_batch']:8.1e} {r.get('peak_measured_over_predicted', float('nan')):7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
