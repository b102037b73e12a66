"""A tensor-parallel stage inside a torch.distributed.pipelining pipeline.

The stage's leader (the plan's `devices[j]`) is the pipeline's stage: it alone receives the
boundary from the previous stage and sends its output to the next (the output is whole on
every rank of the stage: runtime.tensor_parallel). Its module is wrapped in `TPLeader`,
which, for each real micro-batch forward, broadcasts over the stage's TP process group a
header (forward, micro-batch index, rows, whether the input needs a gradient) and the input,
then runs its shard; the output's gradient, when the schedule runs that micro-batch's
backward, is broadcast the same way (header, then the gradient) before the leader's own
backward goes on. The peers (`TPFollower`) loop on these headers: forward of their shard on
the broadcast input (stashed per micro-batch), backward from the broadcast gradient, until
the leader's end-of-step header. Both sides then scale their gradients alike (1 / number of
micro-batches as the schedule's scale_grads, then share / B), so a parameter kept whole has
the same gradient on every rank of the stage. The TP collectives inside the layers then meet
in the same order on every rank: each rank runs the same forward and backward graphs in the
leader's order. The schedule's metadata-inference pass runs on the leader alone, with the
TP collectives off (tensor_parallel.local_only; its values are dropped). A recomputed stage
runs checkpointed on the leader and on every peer (runtime.recompute), so the recomputation
inside each backward meets the same collectives on every rank.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .layout import StageRole
from .recompute import Recomputed
from .seeding import set_micro_batch
from .tensor_parallel import local_only

FWD, BWD, END = 1, 2, 3


class _Announce(torch.autograd.Function):
    """Identity; its backward first broadcasts (BWD, micro) and the gradient to the peers."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, leader: TPLeader, micro: int) -> torch.Tensor:
        ctx.leader, ctx.micro = leader, micro
        return out.view_as(out)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if not g.is_meta:
            ctx.leader.header(BWD, ctx.micro)
            dist.broadcast(g.contiguous(), src=ctx.leader.src, group=ctx.leader.pg)
        ctx.leader = None
        return g, None, None


class TPLeader(nn.Module):
    """The leader's stage module (module docstring); its state_dict is inner's."""

    def __init__(self, inner: nn.Module, pg: Any, src: int, device: torch.device) -> None:
        super().__init__()
        self.inner, self.pg, self.src, self.device = inner, pg, src, device
        self.micro = 0

    def header(self, cmd: int, micro: int = 0, rows: int = 0, grad: int = 0) -> None:
        dist.broadcast(torch.tensor([cmd, micro, rows, grad], dtype=torch.int64, device=self.device),
                       src=self.src, group=self.pg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        micro = self.micro
        self.micro += 1
        if micro < 0 or x.is_meta:
            with local_only():
                return self.inner(x)
        self.header(FWD, micro, x.shape[0], int(x.requires_grad))
        dist.broadcast(x.detach().contiguous(), src=self.src, group=self.pg)
        return _Announce.apply(self.inner(x), self, micro)


class TPFollower:
    """A TP peer's side of one pipeline stage (module docstring)."""

    def __init__(self, role: StageRole, module: nn.Module, pg: Any, in_shape: Sequence[int],
                 in_dtype: torch.dtype, micro_batch: int, batch: int, device: torch.device,
                 amp: torch.dtype | None = None, sync: Callable[[], None] = lambda: None,
                 recompute: bool = False) -> None:
        """recompute: the stage runs checkpointed, as its leader's (runtime.recompute)."""
        self.role, self.module, self.pg, self.src = role, module, pg, role.tp[0]
        self.run = Recomputed(module) if recompute else module
        self.in_shape, self.in_dtype, self.micro_batch, self.batch = tuple(in_shape), in_dtype, micro_batch, batch
        self.device, self.amp, self.sync = device, amp, sync
        self.clock = self  # TorchStage's interface: clock.cpu_s
        self.cpu_s = 0.0

    def step(self, x: torch.Tensor | None, y: torch.Tensor | None, step: int) -> tuple[float, float]:
        """Follow the leader through one iteration (x, y unused: the leader broadcasts the
        input); returns (forward, backward) compute seconds, broadcast waits excluded."""
        stash: dict[int, torch.Tensor] = {}
        fwd = bwd = cpu = 0.0
        n_micro = 0
        head = torch.empty(4, dtype=torch.int64, device=self.device)
        cast = torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None else contextlib.nullcontext()
        while True:
            dist.broadcast(head, src=self.src, group=self.pg)
            cmd, micro, rows, grad = (int(v) for v in head.tolist())
            if cmd == END:
                break
            if cmd == FWD:
                inp = torch.empty((rows, *self.in_shape), dtype=self.in_dtype, device=self.device)
                dist.broadcast(inp, src=self.src, group=self.pg)
                inp.requires_grad_(bool(grad))
                set_micro_batch(step, self.role.offset + micro * self.micro_batch)
                self.sync()
                t0, c0 = time.perf_counter(), time.thread_time()
                with cast:
                    stash[micro] = self.run(inp)
                self.sync()
                fwd += time.perf_counter() - t0
                cpu += time.thread_time() - c0
                n_micro += 1
            elif cmd == BWD:
                out = stash.pop(micro)
                g = torch.empty_like(out)
                dist.broadcast(g, src=self.src, group=self.pg)
                self.sync()
                t0, c0 = time.perf_counter(), time.thread_time()
                out.backward(g)
                self.sync()
                bwd += time.perf_counter() - t0
                cpu += time.thread_time() - c0
            else:
                raise RuntimeError(f"TP stage: unknown header {cmd} from rank {self.src}")
        if stash:
            raise RuntimeError(f"TP stage: micro-batches {sorted(stash)} had no backward from rank {self.src}")
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if grads:       # as the leader's schedule (scale_grads) and TorchStage.step, in that order
            if n_micro != 1:
                torch._foreach_div_(grads, n_micro)
            torch._foreach_mul_(grads, self.role.share / self.batch)
        self.cpu_s = cpu
        return fwd, bwd

    def close(self) -> None:
        """Nothing to release (TorchStage's interface)."""
