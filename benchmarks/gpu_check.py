"""One short, prepared GPU check (run on a CUDA machine; never needed by CI).

1. sustained matmul FLOP/s (fp32, and TF32 allowed) on the GPU;
2. VGG-16 (our own nn.Sequential of the models/vgg16.csv layer shapes) profiled per layer on
   the GPU: measured seconds against FLOPs / sustained FLOP/s (the `efficiency` an instance
   file would use), and parameter bytes against the table;
3. predicted (one-stage group, b * (F + G) from the measured table) against measured training
   iteration time with gradient accumulation over micro-batches;
4. the torch adapter on NCCL (one rank per GPU: with one GPU, one rank) against single-process
   training on the CPU.

    python benchmarks/gpu_check.py --out DIR
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver.model import Group, Plan  # noqa: E402
from solver.runtime import Slot, TensorBatches, profile_module, run  # noqa: E402
from solver.runtime.profiler import measure_matmul_flops  # noqa: E402
from solver.io.workloads import read_workload_csv  # noqa: E402

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16() -> nn.Sequential:
    layers: list[nn.Module] = []
    c = 3
    for v in VGG16:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU()]
            c = v
    layers += [nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
               nn.Linear(4096, 1000)]
    return nn.Sequential(*layers)


def timed_iteration(model: nn.Sequential, x: torch.Tensor, y: torch.Tensor, u: int, repeats: int = 5) -> float:
    """Median seconds of one training iteration over x in micro-batches of u (accumulation)."""
    loss_fn = nn.CrossEntropyLoss()
    ts = []
    for _ in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, len(x), u):
            (loss_fn(model(x[i:i + u]), y[i:i + u]) * (min(u, len(x) - i) / len(x))).backward()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--out", default="results/gpu")
    ap.add_argument("--batch", type=positive_int, default=128)
    ap.add_argument("--micro", type=positive_int, default=32)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    rep: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rep["matmul_fp32_tflops"] = measure_matmul_flops(8192, 10, device=dev) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = True
    rep["matmul_tf32_tflops"] = measure_matmul_flops(8192, 10, device=dev) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    print(json.dumps(rep), flush=True)

    model = vgg16().to(dev)
    table = read_workload_csv(REPO / "models" / "vgg16.csv", args.batch, args.micro)
    rep["params_torch_bytes"] = float(sum(p.numel() * 4 for p in model.parameters()))
    rep["params_table_bytes"] = float(table.param_bytes.sum())
    x = torch.randn(args.micro, 3, 224, 224, device=dev)
    wl = profile_module(model, x, "H200", args.batch, args.micro, repeats=5, name="vgg16-h200")
    fwd, bwd = (sum(t) for t in wl.measured["H200"])
    rep["measured_fwd_bwd_s_per_sample"] = fwd + bwd
    rep["table_flops_per_sample"] = table.total_flops
    rep["effective_tflops_vs_table"] = table.total_flops / (fwd + bwd) / 1e12
    rep["efficiency_vs_fp32_peak_66.9"] = rep["effective_tflops_vs_table"] / 66.91
    print(json.dumps(rep), flush=True)

    xb = torch.randn(args.batch, 3, 224, 224, device=dev)
    yb = torch.randint(0, 1000, (args.batch,), device=dev)
    measured = timed_iteration(model, xb, yb, args.micro)
    rep["one_stage_predicted_s"] = args.batch * (fwd + bwd)
    rep["one_stage_measured_s"] = measured
    rep["one_stage_error_pct"] = 100 * (measured / rep["one_stage_predicted_s"] - 1)
    print(json.dumps(rep), flush=True)

    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)).double()
    g = torch.Generator().manual_seed(1)
    data = TensorBatches(torch.randn(96, 6, generator=g, dtype=torch.float64),
                         torch.randn(96, 3, generator=g, dtype=torch.float64), 32)
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    ref = copy.deepcopy(mlp)
    opt = sgd(ref.parameters())
    for i in range(4):
        xx, yy = data.get(i)
        opt.zero_grad()
        nn.functional.mse_loss(ref(xx), yy).backward()
        opt.step()
    plan = Plan((Group((0,), (5,), 32),))
    res = run(mlp, [Slot(plan, 4)], data, nn.MSELoss(), sgd, world_size=1, micro_batch=8, backend="nccl")
    diff = max(float((res.state_dict[k].cpu() - v).abs().max()) for k, v in ref.state_dict().items())
    rep["nccl_one_rank_max_abs_diff_vs_cpu"] = diff
    rep["gpu_count"] = torch.cuda.device_count()
    print(json.dumps(rep, indent=2), flush=True)
    (out / "gpu_check.json").write_text(json.dumps(rep, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
