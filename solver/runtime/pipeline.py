"""One training iteration on one rank: GPipe forward/backward of its stage over plain
isend/recv, then the per-layer gradient all-reduce across groups, global-norm gradient
clipping and the optimizer and LR-scheduler steps."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

from .accumulate import accumulate_step
from .layout import StageRole, micro_sizes
from .placement import synchronizer
from .recompute import run_layers, run_recomputed
from .tp_sync import counted

CPU = torch.device("cpu")
from .seeding import micro_batch as holding_rows


@dataclass(frozen=True)
class Pad:
    """Emulated device speed: each micro-batch's forward (backward) compute on this stage
    is padded by sleeping to `fwd_s` (`bwd_s`) seconds per sample times its size."""

    fwd_s: float = 0.0
    bwd_s: float = 0.0


def _sleep_until(t_end: float) -> None:
    left = t_end - time.perf_counter()
    if left > 0:
        time.sleep(left)


def _tag(micro: int, backward: bool) -> int:
    return 2 * micro + int(backward)


def pipeline_step(role: StageRole, layers: Mapping[int, nn.Module], x: torch.Tensor | None,
                  y: torch.Tensor | None, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  micro_batch: int, batch: int, in_shape: Sequence[int], in_dtype: torch.dtype,
                  device: torch.device, pad: Pad | None = None, repeat: int = 1,
                  step: int | None = None, amp: torch.dtype | None = None,
                  recompute: bool = False) -> tuple[float, float]:
    """Accumulate this stage's gradients for one iteration, already scaled by share / batch;
    return the stage's forward and backward compute seconds (receive waits excluded).

    x, y: the group's own samples (share rows; x needed by the first stage, y by the last).
    in_shape / in_dtype: per-sample shape and dtype of this stage's input (what the
    previous stage sends); device: where received tensors go. loss_fn must return the mean over its micro-batch: each
    micro-batch's loss is scaled by size / share, so the group's gradient is that of its
    mean loss, and the share / batch factor makes the SUM all-reduce a full-batch mean.
    repeat r > 1 emulates a device r times slower with real work: each micro-batch's
    forward runs r - 1 more times without grad, and its backward r - 1 more times through
    torch.autograd.grad (results dropped), so gradients are unchanged. step: the global
    batch's index, for per-sample dropout (runtime.seeding; the micro-batch's rows are
    role.offset + its start). amp: run the forward passes and the loss under
    torch.autocast(device.type, amp) (TrainSpec.autocast). recompute: the stage's layers run
    checkpointed (runtime.recompute), their forward again inside the backward.
    A one-stage group accumulates micro-batch by micro-batch instead (runtime.accumulate:
    one micro-batch's activations live) and returns (its seconds, 0.0): its forward and
    backward are not timed apart.
    """
    mods = [layers[i] for i in role.layers]
    sizes = micro_sizes(role.share, micro_batch)
    pad = pad or Pad()
    first, last = role.prev is None, role.next is None
    if first and last:
        secs = accumulate_step(mods, x, y, loss_fn, sizes, role.share, role.offset, synchronizer(device),
                               pad.fwd_s + pad.bwd_s, repeat, step, amp, recompute)
        scale_grads(mods, role.share / batch)
        return secs, 0.0
    sends: list[dist.Work] = []
    stash: list[tuple[torch.Tensor, torch.Tensor]] = []
    params = [p for mod in mods for p in mod.parameters() if p.requires_grad]
    fwd_s = bwd_s = 0.0
    start = 0
    cast = torch.autocast(device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
    sync = synchronizer(device)
    for m, s in enumerate(sizes):
        if first:
            inp = x[start:start + s]
        else:
            inp = torch.empty((s, *in_shape), dtype=in_dtype, device=device)
            dist.recv(inp, src=role.prev, tag=_tag(m, False))
            inp.requires_grad_(inp.is_floating_point())
        sync()
        t0 = time.perf_counter()
        with holding_rows(step, role.offset + start) if step is not None else contextlib.nullcontext(), cast:
            out = run_recomputed(mods, inp) if recompute else run_layers(mods, inp)
            if last:
                out = loss_fn(out, y[start:start + s]) * (s / role.share)
            if repeat > 1:
                with torch.no_grad():
                    for _ in range(repeat - 1):
                        o = run_layers(mods, inp)
                        if last:
                            loss_fn(o, y[start:start + s])
        sync()
        fwd_s += time.perf_counter() - t0
        _sleep_until(t0 + s * pad.fwd_s)
        if not last:
            sends.append(dist.isend(out.detach().contiguous(), dst=role.next, tag=_tag(m, False)))
        stash.append((inp, out))
        start += s
    for m in reversed(range(len(sizes))):
        inp, out = stash[m]
        if last:
            grad = None
        else:
            grad = torch.empty_like(out)
            dist.recv(grad, src=role.next, tag=_tag(m, True))
        sync()
        t0 = time.perf_counter()
        wrt = params + ([inp] if inp.requires_grad else [])
        for _ in range(repeat - 1):
            if wrt:
                torch.autograd.grad(out, wrt, grad, retain_graph=True)
        out.backward(grad)
        sync()
        bwd_s += time.perf_counter() - t0
        _sleep_until(t0 + sizes[m] * pad.bwd_s)
        if not first:
            sends.append(dist.isend(inp.grad.contiguous(), dst=role.prev, tag=_tag(m, True)))
        stash[m] = None  # free the micro-batch's activations
    for w in sends:
        w.wait()
    scale_grads(mods, role.share / batch)
    return fwd_s, bwd_s


def scale_grads(mods: Sequence[nn.Module], scale: float) -> None:
    """Multiply every gradient of the modules' parameters by `scale` (one fused call)."""
    grads = [p.grad for mod in mods for p in mod.parameters() if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, scale)


def allreduce_grads(rank: int, layers: Mapping[int, nn.Module],
                    bucket_groups: Sequence[tuple[tuple[int, ...], list[int], object]]) -> None:
    """SUM-all-reduce each bucket (holder-rank set, its layers, process group) this rank
    belongs to, as one flat tensor, in the given (same on every rank) order. Frozen
    parameters (requires_grad False) take no part; a trainable parameter that no holder's
    forward used keeps no gradient (had_grad), as in single-process training, so that the
    optimizer skips it (no weight decay, no momentum step)."""
    for ranks, bucket_layers, pg in bucket_groups:
        if rank not in ranks:
            continue
        params = [p for i in bucket_layers for p in layers[i].parameters() if p.requires_grad]
        if not params:
            continue
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [had_grad(params, grads[0])])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=pg)
        used = flat[-len(params):]
        off = 0
        for k, p in enumerate(params):
            n = p.numel()
            p.grad = flat[off:off + n].view_as(p).clone() if used[k] > 0 else None
            off += n


def had_grad(params: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """One element per parameter, 1 where it has a gradient on this rank (the dtype and device
    of `like`): summed in the all-reduce with the gradients, 0 means no holder's forward used it."""
    return torch.tensor([float(p.grad is not None) for p in params], dtype=like.dtype, device=like.device)


def clip_global(held: Mapping[int, object], layers: Sequence[int], owned: Sequence[int],
                max_norm: float, device: torch.device = CPU) -> float:
    """Collective over the default process group (every rank calls it; `layers` may be
    empty): scale the gradients of this rank's `layers` so that the L2 norm of the whole
    model's gradient is at most `max_norm`, as torch.nn.utils.clip_grad_norm_ on one
    process (coefficient max_norm / (norm + 1e-6), capped at 1). Each layer's squared norm
    is counted once, by the rank in `owned` for it (its first holder); gradients must be
    the all-reduced ones; `device`: where the norm is all-reduced (the process group's:
    a CUDA device under NCCL); with TP, each rank of the first holder's stage counts its
    shards and the stage's shard-0 rank the parameters kept whole (runtime.tp_sync.counted).
    Returns the norm before clipping."""
    sq = torch.zeros(1, dtype=torch.float64)
    for i in owned:
        for name, p in held[i].module.named_parameters():
            if p.grad is not None and counted(held[i], name):
                sq += p.grad.detach().double().pow(2).sum().cpu()
    sq = sq.to(device)
    dist.all_reduce(sq, op=dist.ReduceOp.SUM)
    norm = float(sq.sqrt().item())
    scale_grads([held[i].module for i in layers], min(max_norm / (norm + 1e-6), 1.0))
    return norm


def sync_and_step(rank: int, held: Mapping[int, object], layers: Sequence[int],
                  bucket_groups: Sequence[tuple[tuple[int, ...], list[int], object]],
                  clip_norm: float | None = None, owned: Sequence[int] = (),
                  device: torch.device = CPU, reduce: Callable[[], None] | None = None) -> float:
    """The end of one iteration on a stage: all-reduce its gradients with the holders of the same
    layers in other groups, clip them to the global norm `clip_norm` when given (then a
    collective of every rank: clip_global, `owned` the layers this rank counts), step and
    clear each held layer's optimizer, then step its LR scheduler. held[i] has `.module`,
    `.opt` and `.sched` (replan.LayerState). Returns the seconds of the all-reduce (with
    the norm's when clipping): the sync as this rank sees it, waits for peers included.
    reduce: the all-reduce to run instead (runtime.tp_sync, for plans with TP stages)."""
    t0 = time.perf_counter()
    if reduce is not None:
        reduce()
    else:
        allreduce_grads(rank, {i: held[i].module for i in layers}, bucket_groups)
    if clip_norm is not None:
        clip_global(held, layers, owned, clip_norm, device)
    sync_s = time.perf_counter() - t0
    for i in layers:
        if held[i].opt is not None:
            held[i].opt.step()
            held[i].opt.zero_grad(set_to_none=True)
            if getattr(held[i], "sched", None) is not None:
                held[i].sched.step()
    return sync_s
