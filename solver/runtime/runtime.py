"""Apply a sequence of plans (slots) to an nn.Sequential on one process per device.

One world of all devices (rank = device index of the plans) lives across slots; a rank
absent from a slot's plan idles. Each group runs its stages as a GPipe pipeline over
isend/recv; holders of the same layer across groups all-reduce its gradients (each
scaled by share / B, SUM), so an iteration equals single-process full-batch training.
Between slots, layer and optimizer state migrates to the new holders (replan.py).
"""
from __future__ import annotations

import copy
import datetime
import multiprocessing
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from ..model import Plan, SlotState
from ..status import Status
from .checks import check_slots
from .layout import buckets, layer_holders, roles
from .pipeline import Pad, pipeline_step, sync_and_step
from .replan import LayerState, OptFactory, meta_template, migrate, new_layer
from .spec import SpecError, check_semantics, found, input_shapes

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Slot:
    """One slot: a plan, how many iterations to train under it, and per rank the
    emulated-speed padding of its stage (empty: no padding)."""

    plan: Plan
    steps: int
    pads: Mapping[int, Pad] = field(default_factory=dict)


class TensorBatches:
    """Deterministic global batches: iteration i takes rows (i*B .. i*B+B-1) mod N."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch: int) -> None:
        if len(x) != len(y):
            raise ValueError(f"inputs have {len(x)} rows, targets {len(y)}")
        self.x, self.y, self.batch = x, y, batch

    def get(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = (torch.arange(self.batch) + i * self.batch) % len(self.x)
        return self.x[idx], self.y[idx]


@dataclass
class RunResult:
    """After all slots: the model's state_dict (nn.Sequential keys), per layer the
    optimizer state_dict (None without parameters), per slot the seconds of each
    iteration (slowest rank) and the seconds of the migration before it (0 for slot 0).
    status: FEASIBLE when every slot trained (a failed run raises instead of returning);
    message: what ran, in words."""

    state_dict: dict[str, torch.Tensor]
    opt_states: list[dict | None]
    times: list[list[float]]
    migrate_s: list[float]
    status: Status = Status.FEASIBLE
    message: str = ""

    @property
    def success(self) -> bool:
        """True when the result can be used (Status.success)."""
        return self.status.success


@dataclass
class Job:
    """Everything a worker needs (pickled to each spawned process)."""

    model: nn.Sequential
    slots: Sequence[Slot]
    data: TensorBatches
    loss_fn: LossFn
    make_opt: OptFactory
    micro_batch: int
    in_shapes: list[tuple[tuple[int, ...], torch.dtype]]
    backend: str = "gloo"
    timeout_s: float = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(model: nn.Sequential | Sequence[nn.Module], slots: Sequence[Slot], data: TensorBatches,
        loss_fn: LossFn, make_opt: OptFactory, world_size: int, micro_batch: int,
        backend: str = "gloo", states: Sequence[SlotState | None] | None = None,
        timeout_s: float = 120.0, start_method: str = "forkserver") -> RunResult:
    """Train `model` through `slots` on `world_size` spawned processes and return the result.

    Every plan is checked against the model, world and (when given) its slot state before
    any process starts (PlanMismatchError). backend "nccl" puts rank r on cuda:LOCAL_RANK (torchrun) or cuda:r mod #GPUs.
    start_method "forkserver" (default) imports torch once in a server process that
    forks the workers (seconds faster than "spawn" per run; safe after the parent
    used threads, unlike "fork").
    """
    job = make_job(model, slots, data, loss_fn, make_opt, world_size, micro_batch, backend, states, timeout_s)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        init = f"tcp://127.0.0.1:{_free_port()}"
        if start_method == "forkserver":
            multiprocessing.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", __name__])
        mp.start_processes(_spawned, args=(world_size, init, job, out), nprocs=world_size,
                           join=True, start_method=start_method)
        return torch.load(out, weights_only=False)


def make_job(model: nn.Sequential | Sequence[nn.Module], slots: Sequence[Slot], data: TensorBatches,
             loss_fn: LossFn, make_opt: OptFactory, world_size: int, micro_batch: int,
             backend: str = "gloo", states: Sequence[SlotState | None] | None = None,
             timeout_s: float = 120.0) -> Job:
    """Check every slot's plan (PlanMismatchError before any process starts) and the model's
    semantics (spec.check_semantics: SpecError naming the modules this runtime would train
    wrong, nn.Dropout included: this path draws its masks per process, runtime.trainer per
    sample), and bundle what a worker needs, on a copy of the model (the caller's is never
    touched); run() spawns with it, under torchrun call worker_from_env(job)."""
    blocks = list(model)
    check_semantics(blocks)
    drop = found(blocks, lambda m: isinstance(m, nn.Dropout) and m.p > 0)
    if drop:
        raise SpecError("model: solver.runtime.run draws dropout masks per process, so they would depend on the "
                        f"plan; dynpar train (runtime.trainer) seeds them per sample: {', '.join(drop)}")
    model = copy.deepcopy(nn.Sequential(*blocks))
    if not slots:
        raise ValueError("no slot to run")
    check_slots([s.plan for s in slots], len(model), world_size, data.batch, states)
    if micro_batch < 1:
        raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
    job = Job(model, list(slots), data, loss_fn, make_opt, micro_batch,
              input_shapes(list(model), data.get(0)[0])[:-1], backend, timeout_s)
    return job


def _spawned(rank: int, world_size: int, init: str, job: Job, out: str) -> None:
    worker(rank, world_size, init, job, out)


def _device(backend: str, rank: int) -> torch.device:
    """NCCL: GPU LOCAL_RANK under torchrun (the global rank follows join order), else (spawned
    on one machine) GPU rank mod count."""
    if backend == "nccl":
        local = os.environ.get("LOCAL_RANK")
        d = torch.device("cuda", int(local) if local is not None else rank % torch.cuda.device_count())
        torch.cuda.set_device(d)
        return d
    return torch.device("cpu")


def worker(rank: int, world_size: int, init: str, job: Job, out: str | None) -> None:
    """One process's whole run (also the torchrun entry: init "env://"). Rank 0 writes
    the RunResult to `out`."""
    torch.set_num_threads(1)
    dist.init_process_group(job.backend, init_method=init, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=job.timeout_s))
    try:
        result = _train(rank, job, _device(job.backend, rank))
        if rank == 0 and out is not None:
            torch.save(result, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train(rank: int, job: Job, device: torch.device) -> RunResult | None:
    L = len(job.model)
    templates = [meta_template(m) for m in job.model]
    has_params = [any(True for _ in m.parameters()) for m in job.model]
    first = job.slots[0].plan
    r0 = roles(first).get(rank)
    held: dict[int, LayerState] = {i: new_layer(job.model[i], device, job.make_opt)
                                   for i in (r0.layers if r0 else ())}
    old = layer_holders(first, L)
    groups: dict[tuple[int, ...], object] = {}
    times, mig = [], []
    it = 0
    for k, slot in enumerate(job.slots):
        new = layer_holders(slot.plan, L)
        t0 = time.perf_counter()
        if k > 0:
            held = migrate(rank, held, old, new, templates, job.make_opt, device)
        old = new
        bucket_groups = []
        for key, layers in buckets(slot.plan, L, has_params).items():
            if key not in groups:  # every rank creates every subgroup, same order
                groups[key] = dist.new_group(list(key))
            bucket_groups.append((key, layers, groups[key]))
        role = roles(slot.plan).get(rank)
        dist.barrier()
        mig.append(time.perf_counter() - t0 if k > 0 else 0.0)
        elapsed = []
        for _ in range(slot.steps):
            x, y = job.data.get(it)
            it += 1
            dist.barrier()
            t0 = time.perf_counter()
            if role is not None:
                rows = slice(role.offset, role.offset + role.share)
                shape, dtype = job.in_shapes[role.first]
                pipeline_step(role, {i: held[i].module for i in role.layers},
                              x[rows].to(device) if role.prev is None else None,
                              y[rows].to(device) if role.next is None else None,
                              job.loss_fn, job.micro_batch, job.data.batch, shape, dtype,
                              device, slot.pads.get(rank), recompute=slot.plan.groups[role.group].recompute)
                sync_and_step(rank, held, role.layers, bucket_groups)
            elapsed.append(time.perf_counter() - t0)
        t = torch.tensor(elapsed, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.cpu().tolist())
    held = migrate(rank, held, old, [(0,)] * L, templates, job.make_opt, device)
    if rank != 0:
        return None
    sd = {f"{i}.{k}": v.detach().cpu() for i in range(L) for k, v in held[i].module.state_dict().items()}
    opts = [held[i].opt.state_dict() if held[i].opt is not None else None for i in range(L)]
    return RunResult(sd, opts, times, mig, Status.FEASIBLE,
                     f"trained {len(job.slots)} slots, {it} iterations, under every plan")


def worker_from_env(job: Job, out: str | None) -> None:
    """Entry under torchrun: rank and world from RANK / WORLD_SIZE, rendezvous env://."""
    worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", job, out)


def under_torchrun() -> bool:
    """True when this process was started by torchrun (RANK and WORLD_SIZE are set)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def run_here(model: nn.Sequential | Sequence[nn.Module], slots: Sequence[Slot], data: TensorBatches,
             loss_fn: LossFn, make_opt: OptFactory, micro_batch: int, backend: str = "gloo",
             states: Sequence[SlotState | None] | None = None, timeout_s: float = 120.0) -> RunResult | None:
    """run() for a process torchrun started: this process is one rank of the world;
    returns the RunResult on rank 0 and None on the others."""
    job = make_job(model, slots, data, loss_fn, make_opt, int(os.environ["WORLD_SIZE"]), micro_batch,
                   backend, states, timeout_s)
    rank0 = int(os.environ["RANK"]) == 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        worker_from_env(job, out if rank0 else None)
        return torch.load(out, weights_only=False) if rank0 else None
