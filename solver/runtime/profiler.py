"""Profile an nn.Sequential into a workload table, and probe a device's matmul speed.

Per layer, per sample: forward / backward seconds (median of `repeats`, divided by the
example's batch size), output activation bytes, stashed bytes, FLOPs (of the Linear and
Conv2d modules inside each block, composite blocks included), and parameter bytes. Per
layer, per iteration (with `make_optimizer`): the optimizer step's seconds, as the
trainer runs it (its own optimizer over the block's parameters: step, then zero_grad),
written as the table's opt_s:<kind> column (the cost model charges it with the
instance's `optimizer_step = "measured"`: cost.optimizer).

At tensor-parallel degrees t > 1 (runtime.tp_profile, `dynpar profile --tp-degrees`): the
same figures of a rank's shard, its TP collectives' seconds left out (`exclude`), as a
TPVariant of times "shard_compute" (solver.io.columns: the `@tp<t>` columns and the
`# tp_times:` line).

Stashed bytes: the tensors autograd saves for backward during this layer's forward,
captured with saved_tensors_hooks, counted once per storage and excluding parameters and
buffers. A tensor saved by two adjacent layers (a ReLU's output that the next Linear also
saves as its input) counts in both, so the sum over a stage is an upper bound.
"""
from __future__ import annotations

import copy
import statistics
import time
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..model import Layer, Workload
from .spec import forward_checked


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _flops(mod: nn.Module, out: torch.Tensor, n: int) -> float:
    """Forward FLOP per sample (multiply-add = 2) of a Linear or Conv2d, else 0."""
    if isinstance(mod, nn.Linear):
        return 2.0 * mod.in_features * out.numel() / n
    if isinstance(mod, nn.Conv2d):
        kh, kw = mod.kernel_size
        return 2.0 * (mod.in_channels // mod.groups) * kh * kw * out.numel() / n
    return 0.0


def block_flops(block: nn.Module, x: torch.Tensor) -> float:
    """Forward FLOP per sample of a (possibly composite) block: the Linear and Conv2d
    modules inside it, counted by forward hooks during one pass on `x` (n samples);
    other operators (attention matmuls, norms, activations) are not counted."""
    n = int(x.shape[0])
    total = [0.0]
    hooks = [m.register_forward_hook(lambda mod, a, out: total.__setitem__(0, total[0] + _flops(mod, out, n)))
             for m in block.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad():
            block(x)
    finally:
        for h in hooks:
            h.remove()
    return total[0]


def _stash_bytes(mod: nn.Module, x: torch.Tensor) -> int:
    own = {p.untyped_storage().data_ptr() for p in list(mod.parameters()) + list(mod.buffers())}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in own:
            seen[ptr] = max(seen.get(ptr, 0), _nbytes(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mod(x)
    return sum(seen.values())


def _syncer(device: torch.device):
    """A function that waits for queued kernels on `device` (CUDA launches are asynchronous)."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def _clocked(clock: Any) -> float:
    """Seconds the TP collective clock (tensor_parallel.CollectiveClock) has counted so far; 0 without one."""
    return clock.seconds if clock is not None else 0.0


def _time(fn, repeats: int, sync=lambda: None, exclude: Any = None) -> float:
    """Median wall seconds of `repeats` calls of fn, each less the seconds the collective
    clock `exclude` counted during it (None: nothing excluded)."""
    ts = []
    for _ in range(repeats):
        sync()
        c0, t0 = _clocked(exclude), time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0 - (_clocked(exclude) - c0))
    return statistics.median(ts)


def optimizer_seconds(mod: nn.Module, make_optimizer, repeats: int, sync=lambda: None) -> float:
    """Seconds of one optimizer step (step + zero_grad) over `mod`'s parameters, on a
    private copy with random gradients (median of `repeats`, after one warm-up step);
    0 for a block without parameters."""
    m = copy.deepcopy(mod)
    params = [p for p in m.parameters() if p.requires_grad]
    if not params:
        return 0.0
    opt = make_optimizer(params)
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device) for p in params]

    def step() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    ts = []
    for k in range(repeats + 1):
        for p, gr in zip(params, grads):
            p.grad = gr.clone()
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if k:
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def profile_module(model: nn.Sequential, example: torch.Tensor, kind: str, batch: int,
                   micro_batch: int, repeats: int = 5, name: str = "profiled",
                   opt_factor: float = 4.0, make_optimizer=None, exclude: Any = None,
                   private: bool = True) -> Workload:
    """Measure `model` on `example` (a batch of n samples) on this device and return a
    Workload of its layers with measured={kind: (fwd s/sample, bwd s/sample)}.
    batch / micro_batch: the global batch and micro-batch of the training job (samples).
    make_optimizer: the job's (parameters -> optimizer); when given, optimizer_seconds
    = {kind: per-layer step seconds per iteration}. Each block runs one untimed forward and
    one untimed backward pass before its timed ones. exclude: a TP collective clock
    (tensor_parallel.CollectiveClock) whose seconds are left out of every timed pass (TP
    shards in a live process group: `profile_tp`). private: time a deep copy of `model`, so the
    caller's model is untouched (False: time `model` itself, whose BatchNorm statistics then
    move and whose gradients are cleared, for callers that pass their own copy and cannot hold
    two)."""
    if private:
        model = copy.deepcopy(model)
    n = int(example.shape[0])
    if n < 1:
        raise ValueError("the example needs at least one sample")
    layers, fwd_s, bwd_s = [], [], []
    x = example.detach()
    sync = _syncer(example.device)
    for i, mod in enumerate(model):
        inp = x.detach().requires_grad_(i > 0 and x.is_floating_point())
        with torch.no_grad():
            out = forward_checked(mod, inp, i)
        fwd_s.append(_time(lambda: mod(inp), repeats, sync, exclude) / n)
        stash = _stash_bytes(mod, inp)
        needs_grad = inp.requires_grad or any(p.requires_grad for p in mod.parameters())
        if needs_grad:
            grad = torch.ones_like(out)

            def step() -> float:
                o = mod(inp)
                sync()
                c0, t0 = _clocked(exclude), time.perf_counter()
                o.backward(grad)
                sync()
                return time.perf_counter() - t0 - (_clocked(exclude) - c0)

            step()      # untimed: the process's first backward pays one-time setup (seconds with --repeats 1)
            bwd_s.append(statistics.median(step() for _ in range(repeats)) / n)
        else:
            bwd_s.append(0.0)
        f = block_flops(mod, inp)
        params = sum(_nbytes(p) for p in mod.parameters())
        layers.append(Layer(f"{i}:{type(mod).__name__}", f, 2.0 * f, _nbytes(out) / n, stash / n, float(params)))
        x = out
    model.zero_grad(set_to_none=True)
    wl = Workload(name, tuple(layers), batch, micro_batch, opt_factor, _nbytes(example) / n,
                  {kind: (tuple(fwd_s), tuple(bwd_s))})
    if make_optimizer is None:
        return wl
    opt_s = tuple(optimizer_seconds(mod, make_optimizer, repeats, sync) for mod in model)
    return replace(wl, optimizer_seconds={kind: opt_s})


def measure_matmul_flops(size: int = 512, repeats: int = 5, dtype: torch.dtype = torch.float32,
                         device: str | torch.device = "cpu") -> float:
    """Sustained FLOP/s of a size x size matmul on `device` (median of `repeats`)."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    (a @ b).sum().item()
    return 2.0 * size ** 3 / _time(lambda: a @ b, repeats, _syncer(torch.device(device)))
