"""What a tensor-parallel stage costs in `dynpar train` on this machine: one model on two
processes (p0, p1 of one server) under three given plans, alternated for --rounds rounds:
one stage at TP-2 (p0+p1), two data-parallel groups (p0 | p1), one device (p0).

    python benchmarks/bench_train_tp.py [--model solver.runtime.examples:wide] [--rounds 2]

Prints per plan the measured seconds per iteration (the least over the rounds, and each
round's) and the cost model's prediction; writes the same to --out (JSON) when given. The
layer table is `dynpar profile`d here first (kind "cpu", one thread).
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
from solver.cli import main as dynpar
from solver.io.instance import load_instance
from solver.model import Group, Plan, plan_to_json
from solver.runtime.launch import launch
from solver.runtime.spec import blocks_of, load_factory
from solver.runtime.trainer import TrainConfig


def instance(folder: Path, model: str, batch: int, micro: int) -> Path:
    """Two devices p0, p1 of kind "cpu" in server s0, seconds from `dynpar profile` here."""
    assert dynpar(["profile", model, "--kind", "cpu", "--batch", str(batch), "--micro-batch", str(micro),
                   "--repeats", "3", "-o", str(folder / "table.csv"), "--force"]) == 0
    devs = "".join(f'[[devices]]\nname = "p{i}"\nkind = "cpu"\nserver = "s0"\n\n' for i in range(2))
    path = folder / "tp2.toml"
    path.write_text(f'name = "tp2"\nnum_slots = 1\n\n[workload]\nmodel = "table.csv"\nbatch = {batch}\n'
                    f'micro_batch = {micro}\n\n[[kinds]]\nkind = "cpu"\npeak_tflops = 0.004\nmemory_gb = 4\n'
                    f'busy_w = 15\nidle_w = 5\nprice_per_hour = 0.01\n\n{devs}[[servers]]\nname = "s0"\n\n'
                    '[[budgets]]\nkind = "money"\nlimit = 1.0\n')
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="solver.runtime.examples:mlp64")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    L = len(blocks_of(load_factory(a.model).model))
    B = a.batch
    plans = {"tp2": Plan((Group((0,), (L,), B, tp_peers=((1,),)),)),
             "dp2": Plan((Group((0,), (L,), B // 2), Group((1,), (L,), B - B // 2))),
             "one": Plan((Group((0,), (L,), B),))}
    seen: dict[str, list[float]] = {k: [] for k in plans}
    pred: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        inst = load_instance(instance(Path(tmp), a.model, B, a.micro_batch))
        for _ in range(a.rounds):
            for name, p in plans.items():
                ck = Path(tmp) / name
                shutil.rmtree(ck, ignore_errors=True)
                launch(inst, TrainConfig(a.model, a.steps, str(ck), iterations_per_slot=a.steps,
                                         plans=(plan_to_json(p),)), ["p0", "p1"])
                row = pd.read_csv(ck / "slots.csv").iloc[0]
                seen[name].append(float(row["measured_batch_time"]))
                pred[name] = float(row["batch_time"])
    out = {k: {"measured_s": min(v), "rounds_s": v, "predicted_s": pred[k]} for k, v in seen.items()}
    for k, v in out.items():
        print(f"{k}: measured {v['measured_s']:.4f} s/iter (rounds {', '.join(f'{x:.4f}' for x in v['rounds_s'])}), "
              f"predicted {v['predicted_s']:.4f}")
    if a.out:
        a.out.write_text(json.dumps({"model": a.model, "batch": B, "micro_batch": a.micro_batch,
                                     "steps": a.steps, "plans": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
