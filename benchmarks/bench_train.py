"""`dynpar train` with real compute: predicted against measured batch time, the planner's plans
against the baselines' on the same processes, and a failure drill.

Unlike devices are emulated with real work, not sleep: device d's stage compute is done
r_d times (`--repeat`, the hand-written engine repeats each micro-batch's forward and
backward). The instance says nothing of it (every speed factor 1); the controller learns
the slowdowns from the first slot's measurements (runtime.estimator). The model is
solver.runtime.examples:wide (float32 Linear + Tanh blocks), profiled first on this
machine (`dynpar profile`, kind "cpu", one thread); the instance's link latency and
bandwidth are measured first too (gloo ping-pong of 8 B and 1 MiB between two processes).

Per policy (ours and the baselines, the same controller, observations and processes),
one run of S slots; figures from slot 1 on (after the first measurements):
  err = measured / predicted - 1 per slot, and the mean measured seconds per iteration.
Failure drill: ours with the device of `--kill` killed (SIGKILL) mid-run, then the same
command again: iterations lost (done after the last checkpoint), restart seconds (second
launch until it exits, its own training included, and its restore time), and the re-plan.

Usage: python benchmarks/bench_train.py [--quick] [--out benchmarks/results]
Writes OUT/train_bench.json and prints a table. Targets (issue 14): |err| <= 15 % and ours
faster than even DP and than the best baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from solver.cli import main as dynpar  # noqa: E402
from solver.io.instance import load_instance  # noqa: E402
from solver.runtime.launch import TrainFailed, launch  # noqa: E402
from solver.runtime.trainer import TrainConfig  # noqa: E402

MODEL = "solver.runtime.examples:wide"
REPEAT = {"p0": 1, "p1": 1, "p2": 2, "p3": 4}
POLICIES = ("ours", "even-dp", "lb-bsp", "dapple", "gpipe")


def _pingpong(rank: int, init: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    res = {}
    for n in (2, 1 << 18):  # 8 bytes and 1 MiB of float32
        t = torch.zeros(n)
        times = []
        for _ in range(30):
            dist.barrier()
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
            times.append((time.perf_counter() - t0) / 2)
        res[4 * n] = statistics.median(times)
    if rank == 0:
        Path(out).write_text(json.dumps(res))
    dist.destroy_process_group()


def measure_link() -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of one gloo message between two processes here:
    median one-way time of an 8-byte and a 1-MiB message (ping-pong)."""
    import socket

    import torch.multiprocessing as mp
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "link.json")
        mp.start_processes(_pingpong, args=(f"tcp://127.0.0.1:{port}", out), nprocs=2, start_method="spawn")
        res = {int(k): v for k, v in json.loads(Path(out).read_text()).items()}
    small, big = min(res), max(res)
    lat = res[small]
    return lat, (big - small) / max(res[big] - lat, 1e-9)


def instance(folder: Path, batch: int, micro: int, slots: int, link: tuple[float, float]) -> Path:
    assert dynpar(["profile", MODEL, "--kind", "cpu", "--batch", str(batch), "--micro-batch", str(micro),
                   "--repeats", "7", "-o", str(folder / "wide.csv"), "--force"]) == 0
    devs = "".join(f'[[devices]]\nname = "{d}"\nkind = "cpu"\nserver = "s0"\n' for d in REPEAT)
    path = folder / "cpu_wide.toml"
    path.write_text(f'name = "cpu_wide"\nnum_slots = {slots}\n[workload]\nmodel = "wide.csv"\nbatch = {batch}\n'
                    f'micro_batch = {micro}\n[[kinds]]\nkind = "cpu"\npeak_tflops = 0.004\nmemory_gb = 4\n'
                    f'busy_w = 15\nidle_w = 5\nprice_per_hour = 0.01\n[network]\nintra_server_gbps = {link[1] * 8 / 1e9:.4g}\n'
                    f'intra_server_latency_ms = {link[0] * 1e3:.4g}\n{devs}')
    return path


def run_policy(inst, policy: str, steps: int, per_slot: int, ck: Path, kill=None) -> pd.DataFrame:
    cfg = TrainConfig(MODEL, steps, str(ck), iterations_per_slot=per_slot, checkpoint_every=per_slot // 2,
                      policy=policy, repeat=dict(REPEAT), engine="hand", kill=kill, timeout_s=300)
    launch(inst, cfg)
    return pd.read_csv(ck / "slots.csv")


def figures(df: pd.DataFrame) -> dict:
    later = df[df["slot"] >= 1]
    err = (later["measured_batch_time"] / later["batch_time"] - 1.0).tolist()
    return {"plans": df["plan"].tolist(), "predicted_s": df["batch_time"].round(5).tolist(),
            "measured_s": df["measured_batch_time"].round(5).tolist(),
            "err_after_slot0": [round(e, 4) for e in err],
            "max_abs_err_after_slot0": round(max(abs(e) for e in err), 4) if err else None,
            "mean_measured_after_slot0_s": round(float(later["measured_batch_time"].mean()), 5)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 slots of 4 iterations, ours and even DP only")
    ap.add_argument("--out", default="benchmarks/results", help="folder of train_bench.json")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--per-slot", type=int, default=8, help="iterations per slot")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--width", type=int, default=256, help="block width W of the wide model")
    ap.add_argument("--kill", default="p1", help="device killed in the drill ('' to skip)")
    a = ap.parse_args(argv)
    slots, per = (3, 4) if a.quick else (a.slots, a.per_slot)
    policies = ("ours", "even-dp") if a.quick else POLICIES
    os.environ["DYNPAR_WIDE_WIDTH"] = str(a.width)
    out: dict = {"command": "python benchmarks/bench_train.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "model": MODEL, "width": a.width, "batch": a.batch, "micro_batch": a.micro_batch,
                 "repeat": REPEAT, "slots": slots, "iterations_per_slot": per, "cpus": os.cpu_count(),
                 "load_avg_1min_at_start": round(os.getloadavg()[0], 2), "policies": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        link = measure_link()
        out["link_measured"] = {"latency_ms": round(link[0] * 1e3, 4), "gbps": round(link[1] * 8 / 1e9, 3)}
        inst = load_instance(instance(tmp, a.batch, a.micro_batch, slots, link))
        for pol in policies:
            t0 = time.perf_counter()
            df = run_policy(inst, pol, slots * per, per, tmp / pol)
            out["policies"][pol] = {**figures(df), "wall_s": round(time.perf_counter() - t0, 2)}
        if a.kill:
            ck = tmp / "drill"
            kill_at = slots * per // 2 + 1
            t0 = time.perf_counter()
            try:
                run_policy(inst, "ours", slots * per, per, ck, kill=(a.kill, kill_at))
                raise RuntimeError("the drill's worker was not killed")
            except TrainFailed as e:
                first_s = time.perf_counter() - t0
                message = str(e)
            ckpt_step = int((ck / "LATEST").read_text().split("-")[1])
            t1 = time.perf_counter()
            df = run_policy(inst, "ours", slots * per, per, ck, kill=(a.kill, kill_at))
            resumed = df[df["restarts"] > 0]
            out["drill"] = {"killed": a.kill, "at_step": kill_at, "checkpoint_step": ckpt_step,
                            "lost_iterations": kill_at - ckpt_step, "first_launch_s": round(first_s, 2),
                            "error": message, "second_launch_s": round(time.perf_counter() - t1, 2),
                            "restore_s": round(float(resumed["measured_restore_time"].max()), 4),
                            "plans_before": df[df["restarts"] == 0]["plan"].tolist(),
                            "plans_after": resumed["plan"].tolist()}
    res = out["policies"]
    if "ours" in res:
        base = {k: v["mean_measured_after_slot0_s"] for k, v in res.items() if k != "ours"}
        out["ours_vs"] = {k: round(v / res["ours"]["mean_measured_after_slot0_s"], 3) for k, v in base.items()}
    folder = Path(a.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train_bench.json").write_text(json.dumps(out, indent=1))
    for pol, r in res.items():
        print(f"{pol:8s} measured {r['mean_measured_after_slot0_s']:.4f} s/iter after slot 0, "
              f"max |err| {r['max_abs_err_after_slot0']}, plans {r['plans']}")
    if "ours_vs" in out:
        print("baseline time / ours:", out["ours_vs"])
    if "drill" in out:
        d = out["drill"]
        print(f"drill: {d['killed']} killed at step {d['at_step']}, {d['lost_iterations']} iterations lost, "
              f"second launch {d['second_launch_s']} s (restore {d['restore_s']} s), plans after {d['plans_after']}")
    print(f"wrote {folder / 'train_bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
