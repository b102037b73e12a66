"""One iteration of a one-stage group: gradient accumulation over its micro-batches.

Each micro-batch runs its forward, its loss and its backward before the next one starts,
so one micro-batch's activations are live at a time: what `model.memory` charges a
one-stage group (live = u samples), whereas a GPipe stage stashes every micro-batch. The
gradients equal GPipe's up to the order of the float sums. The device is synchronised
only at the end (timed as a whole), so on a GPU the host keeps queueing kernels across
micro-batches; an emulated speed (`pad`) synchronises after each micro-batch instead.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Sequence

import torch
from torch import nn

from .recompute import run_layers, run_recomputed
from .seeding import micro_batch as holding_rows


def accumulate_step(mods: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor,
                    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], sizes: Sequence[int],
                    share: int, offset: int, sync: Callable[[], None], pad_s: float = 0.0, repeat: int = 1,
                    step: int | None = None, amp: torch.dtype | None = None,
                    recompute: bool = False) -> float:
    """Accumulate the group's gradients of its mean loss over `share` rows (x, y) in
    micro-batches of `sizes` (each loss scaled by size / share); return the compute
    seconds (the device synchronised before and after). pad_s: seconds per sample each
    micro-batch's forward + backward is padded to by sleeping (runtime.pipeline.Pad).
    repeat, step, amp, recompute: as runtime.pipeline.pipeline_step (r - 1 extra no-grad
    forwards and gradient-free backwards; per-sample dropout rows offset + start; autocast;
    checkpointed layers)."""
    params = [p for mod in mods for p in mod.parameters() if p.requires_grad]
    cast = torch.autocast(x.device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
    sync()
    t_start = time.perf_counter()
    start = 0
    for s in sizes:
        t0 = time.perf_counter()
        inp = x[start:start + s]
        with holding_rows(step, offset + start) if step is not None else contextlib.nullcontext(), cast:
            out = run_recomputed(mods, inp) if recompute else run_layers(mods, inp)
            loss = loss_fn(out, y[start:start + s]) * (s / share)
            for _ in range(repeat - 1):
                with torch.no_grad():
                    loss_fn(run_layers(mods, inp), y[start:start + s])
        for _ in range(repeat - 1):
            if params:
                torch.autograd.grad(loss, params, retain_graph=True)
        loss.backward()
        if pad_s > 0:
            sync()
            left = t0 + s * pad_s - time.perf_counter()
            if left > 0:
                time.sleep(left)
        start += s
    sync()
    return time.perf_counter() - t_start
