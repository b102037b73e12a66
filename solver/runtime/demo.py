"""The runnable example's pieces: a small MLP, a teacher-labelled synthetic dataset, a
4-device emulated scenario, and measured-vs-predicted batch times per slot."""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..cost import evaluate
from ..model import Instance, Plan, SlotState
from .emulate import (
    balanced_cuts,
    balanced_shares,
    brute_force_plan,
    emulated_instance,
    pads,
    solver_plan,
)
from .profiler import profile_module
from .runtime import RunResult, Slot, TensorBatches, run, run_here, under_torchrun

# Per slot, per device: slowdown factor (inf: the device is gone that slot).
SLOWDOWNS = np.array([[1.0, 1.0, 2.0, 2.0],
                      [1.0, 3.0, 1.0, 1.5],
                      [1.0, np.inf, 2.0, 1.0],
                      [2.0, 1.0, 1.0, 1.0]])
# Hand-made pipeline groups per slot (cuts and shares are balanced by the cost model).
HAND = [[(0, 2), (1, 3)], [(1, 0), (2, 3)], [(0,), (2, 3)], [(0, 1, 2), (3,)]]


def mlp(seed: int = 0, width: int = 128) -> nn.Sequential:
    """7 layers: 32 -> width -> width -> 64 -> 10 classes, ReLU between."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 64), nn.ReLU(), nn.Linear(64, 10))


def teacher_data(n: int, batch: int, seed: int = 1) -> TensorBatches:
    """n Gaussian inputs labelled by a fixed random teacher MLP's argmax (10 classes)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    teacher = mlp(seed + 100, width=64)
    with torch.no_grad():
        y = teacher(x).argmax(dim=1)
    return TensorBatches(x, y, batch)


def scenario(batch: int, micro_batch: int, t_ref: float, slots: int) -> tuple[nn.Sequential, Instance]:
    """The model and an emulated instance of its profiled layers (bytes, FLOPs exact)."""
    model = mlp()
    wl = profile_module(model, torch.randn(micro_batch, 32), "cpu", batch, micro_batch, repeats=2)
    S = min(slots, len(SLOWDOWNS))
    return model, emulated_instance(wl, SLOWDOWNS[:S], t_ref)


def plan_for(state: SlotState, how: str) -> Plan:
    """'hand' (HAND structures), 'brute' (best of every small structure) or 'solver'."""
    if how == "hand":
        structure = [(d, balanced_cuts(state, d)) for d in HAND[state.t % len(HAND)]]
        return balanced_shares(state, structure)
    if how == "brute":
        return brute_force_plan(state)
    if how == "solver":
        return solver_plan(state)
    raise ValueError(f"unknown plan source {how!r}: use hand, brute or solver")


@dataclass(frozen=True)
class Row:
    """One measured slot: which plan, its summary, predicted and measured seconds per
    iteration (median over iterations after the first), relative error."""

    slot: int
    label: str
    summary: str
    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        return self.measured_s / self.predicted_s - 1.0


def measure(model: nn.Sequential, inst: Instance, candidates: Sequence[dict[str, Plan]], steps: int,
            data: TensorBatches, backend: str = "gloo") -> tuple[list[Row], RunResult | None]:
    """Run, in one world, every slot's candidate plans one after the other (re-planning
    between them) with emulation padding; return a row per (slot, candidate). Under
    torchrun this process is one rank; ranks other than 0 get ([], None)."""
    slots, meta = [], []
    for t, cands in enumerate(candidates):
        st = inst.state(t)
        for label, p in cands.items():
            slots.append(Slot(p, steps, pads(p, st)))
            meta.append((t, label, p, st))
    sgd = functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)
    states = [m[3] for m in meta]
    if under_torchrun():
        res = run_here(model, slots, data, nn.CrossEntropyLoss(), sgd, inst.workload.micro_batch, backend, states)
        if res is None:
            return [], None
    else:
        res = run(model, slots, data, nn.CrossEntropyLoss(), sgd, world_size=inst.n,
                  micro_batch=inst.workload.micro_batch, backend=backend, states=states)
    rows = [Row(t, label, p.summary(st), evaluate(p, st).batch_time,
                statistics.median(times[1:] if len(times) > 1 else times))
            for (t, label, p, st), times in zip(meta, res.times)]
    return rows, res


def accuracy(model: nn.Sequential, state_dict: dict, data: TensorBatches) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of `model` with `state_dict` on all of `data`."""
    model.load_state_dict(state_dict)
    with torch.no_grad():
        out = model(data.x)
        return float(nn.functional.cross_entropy(out, data.y)), float((out.argmax(1) == data.y).float().mean())


def table(rows: Sequence[Row]) -> str:
    """Fixed-width text table of rows."""
    head = f"{'slot':>4}  {'plan':<6} {'predicted ms':>12} {'measured ms':>11} {'error':>7}  groups (share:stages)"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.slot:>4}  {r.label:<6} {1e3 * r.predicted_s:>12.1f} {1e3 * r.measured_s:>11.1f} "
                     f"{100 * r.error:>+6.1f}%  {r.summary}")
    return "\n".join(lines)
