"""One group's pipeline through torch.distributed.pipelining (PipelineStage + ScheduleGPipe
or Schedule1F1B, the schedule the plan's group names), built from the plan's cuts.

Every micro-batch has u samples (share a multiple of u: the planner's shares are); the
schedule averages the micro-batch mean losses (scale_grads), and the gradients are then
scaled by share / B, so the SUM all-reduce across groups gives the full-batch mean, as on
the hand-written path (runtime.pipeline). A group of one stage has no pipeline and runs
on the hand-written path (no communication there).

Stage compute seconds (the estimator's input) are taken with module hooks: forward from
the stage's forward pre-hook to its forward hook; backward from the moment the gradient of
the stage's output arrives (a tensor hook) to the last gradient accumulated into the
stage's parameters or its input's gradient, per micro-batch; on a GPU each reading follows a
device synchronisation (runtime.placement). The forward pre-hook also
tells per-sample dropout which rows the micro-batch holds (runtime.seeding).

Emulated slow devices (repeat r > 1, real work): the stage module is wrapped so that each
micro-batch's forward runs r - 1 more times (one of them building a second graph) and its
backward r - 1 more times through that graph (torch.autograd.grad, results dropped), as
runtime.pipeline does on the hand-written path; gradients are unchanged.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from .layout import StageRole
from .pipeline import scale_grads
from .placement import synchronizer
from .recompute import Recomputed
from .seeding import set_micro_batch
from .tp_stage import END, TPLeader

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class _ExtraBackward(torch.autograd.Function):
    """Identity whose backward first runs `extra` more backward passes of a twin graph."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, twin: list, extra: int) -> torch.Tensor:
        ctx.twin, ctx.extra = twin, extra  # [output, inputs]: in a list, outside this node's graph
        return out.view_as(out)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        twin, wrt = ctx.twin
        for k in range(ctx.extra):
            torch.autograd.grad(twin, wrt, g, retain_graph=k + 1 < ctx.extra, allow_unused=True)
        ctx.twin = None
        return g, None, None


class Repeated(nn.Module):
    """`inner` whose forward and backward compute is done `repeat` times (module docstring);
    its state_dict is inner's (no prefix)."""

    def __init__(self, inner: nn.Module, repeat: int) -> None:
        super().__init__()
        self.inner, self.repeat = inner, int(repeat)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        if self.repeat <= 1:
            return out
        with torch.no_grad():
            for _ in range(self.repeat - 2):
                self.inner(x)
        if not (torch.is_grad_enabled() and out.requires_grad) or x.is_meta:
            with torch.no_grad():
                self.inner(x)
            return out
        xx = x.detach().requires_grad_(x.is_floating_point())
        twin = self.inner(xx)
        wrt = tuple(p for p in self.inner.parameters() if p.requires_grad) + ((xx,) if xx.requires_grad else ())
        return _ExtraBackward.apply(out, [twin, wrt], self.repeat - 1)


class _Clock:
    """Forward and backward compute seconds of one stage module, from hooks."""

    def __init__(self, module: nn.Module, first_sample: Callable[[int], int],
                 sync: Callable[[], None] = lambda: None) -> None:
        self.first_sample, self.sync = first_sample, sync
        self.step = -1
        self.micro = 0
        self._live = False
        self.fwd = self.bwd = 0.0
        self.cpu = 0.0  # CPU seconds of this thread within the same intervals
        self.cpu_s = 0.0  # ... as of the last take
        self._t = self._c = 0.0
        self._b0: float | None = None
        self._b1 = self._cb0 = self._cb1 = 0.0
        self.handles = [module.register_forward_pre_hook(self._pre), module.register_forward_hook(self._post)]
        self.handles += [p.register_post_accumulate_grad_hook(self._grad_done) for p in module.parameters()
                         if p.requires_grad]

    @staticmethod
    def _real(args: tuple) -> bool:
        """A training forward (not the stage's shape inference: no grad, or meta tensors)."""
        return torch.is_grad_enabled() and not any(isinstance(a, torch.Tensor) and a.is_meta for a in args)

    def _pre(self, mod: nn.Module, args: tuple) -> None:
        set_micro_batch(self.step, self.first_sample(self.micro))  # micro-batches run forward in order
        self.micro += 1
        self._live = self._real(args)
        if not self._live:
            return
        self._close()
        self.sync()
        self._t, self._c = time.perf_counter(), time.thread_time()
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                a.register_hook(self._input_grad)

    def _post(self, mod: nn.Module, args: tuple, out: torch.Tensor) -> None:
        if not self._live:
            return
        self.sync()
        self.fwd += time.perf_counter() - self._t
        self.cpu += time.thread_time() - self._c
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._out_grad)

    def _out_grad(self, g: torch.Tensor) -> None:
        self._close()
        self.sync()
        self._b0, self._cb0 = time.perf_counter(), time.thread_time()

    def _input_grad(self, g: torch.Tensor) -> None:
        self.sync()
        self._b1, self._cb1 = time.perf_counter(), time.thread_time()

    def _grad_done(self, p: torch.Tensor) -> None:
        self.sync()
        self._b1, self._cb1 = time.perf_counter(), time.thread_time()

    def _close(self) -> None:
        if self._b0 is not None:
            self.bwd += max(self._b1 - self._b0, 0.0)
            self.cpu += max(self._cb1 - self._cb0, 0.0)
            self._b0 = None

    def take(self) -> tuple[float, float]:
        """(forward, backward) seconds since the last take; `cpu_s` becomes this thread's CPU
        seconds within the same intervals (runtime.speeds: the share of a core the stage got)."""
        self._close()
        out = (self.fwd, self.bwd)
        self.cpu_s, self.fwd, self.bwd, self.cpu = self.cpu, 0.0, 0.0, 0.0
        return out


class TorchStage:
    """This rank's stage of a multi-stage group: the PipelineStage and its schedule."""

    def __init__(self, role: StageRole, layers: Mapping[int, nn.Module], group_ranks: Sequence[int],
                 pg: object, schedule: str, micro_batch: int, batch: int,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], device: torch.device,
                 repeat: int = 1, amp: torch.dtype | None = None, tp_pg: Any = None,
                 recompute: bool = False) -> None:
        """tp_pg: the stage's TP process group when role.tp (this rank is its leader: runtime.tp_stage);
        recompute: the stage runs checkpointed (runtime.recompute; on a TP stage, its peers too:
        runtime.tp_stage)."""
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {sorted(SCHEDULES)}, got {schedule!r}")
        if role.share % micro_batch:
            raise ValueError(f"group {role.group}: share {role.share} is not a multiple of the micro-batch "
                             f"{micro_batch} (torch.distributed.pipelining needs equal micro-batches)")
        n_micro = role.share // micro_batch
        k = len(group_ranks)
        if schedule == "1f1b" and n_micro < k:
            raise ValueError(f"group {role.group}: 1F1B needs at least {k} micro-batches (one per stage), "
                             f"got {n_micro}")
        self.role, self.batch, self.amp, self.device = role, batch, amp, device
        self.module = nn.Sequential(*(layers[i] for i in role.layers))
        if role.tp and repeat > 1:
            raise ValueError(f"group {role.group}, stage {role.stage}: repeat {repeat} on a tensor-parallel stage "
                             "(emulated slow devices run without TP)")
        inner = Recomputed(self.module) if recompute else self.module
        self.leader = TPLeader(inner, tp_pg, role.tp[0], device) if role.tp else None
        run = Repeated(inner, repeat) if repeat > 1 else (self.leader if self.leader is not None else inner)
        self.clock = _Clock(run, lambda m: role.offset + m * micro_batch, synchronizer(device))
        self.stage = PipelineStage(run, role.stage, k, device, group=pg)
        order = sorted(group_ranks)  # a process group's ranks are sorted
        self.stage.stage_index_to_group_rank = {j: order.index(r) for j, r in enumerate(group_ranks)}
        self.schedule = SCHEDULES[schedule](self.stage, n_micro, loss_fn=loss_fn, scale_grads=True)
        if not hasattr(self.schedule, "_stage_forward_initialized"):
            raise RuntimeError("this torch's pipelining schedule lacks _stage_forward_initialized, which the "
                               "per-sample dropout rows rely on; use --engine hand")

    def step(self, x: torch.Tensor | None, y: torch.Tensor | None, step: int) -> tuple[float, float]:
        """One iteration (global batch `step`) of this stage; gradients left scaled by
        share / B. Returns the (forward, backward) compute seconds."""
        first, last = self.role.prev is None, self.role.next is None
        # the first step starts with one metadata-inference forward pass (outputs dropped):
        # it counts as micro-batch -1 so that the real ones keep their rows
        self.clock.step = step
        self.clock.micro = 0 if getattr(self.schedule, "_stage_forward_initialized", True) else -1
        if self.leader is not None:
            self.leader.micro = self.clock.micro
        args = (x,) if first else ()
        cast = torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None else contextlib.nullcontext()
        with cast:
            if last:
                self.schedule.step(*args, target=y, losses=[], return_outputs=False)
            else:
                self.schedule.step(*args, return_outputs=False)
        if self.leader is not None:
            self.leader.header(END)
        scale_grads([self.module], self.role.share / self.batch)
        return self.clock.take()

    def close(self) -> None:
        """Remove the timing hooks (the blocks outlive the stage when they stay on this rank)."""
        for h in self.clock.handles:
            h.remove()
