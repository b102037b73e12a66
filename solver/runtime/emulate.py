"""Emulating unlike devices on one machine, and small plan builders for the example/benchmark.

Each emulated device d has a slowdown factor s_d per slot. The workload's measured table
holds reference seconds per sample per layer (kind "emu"); a stage's forward (backward) of
a micro-batch is padded by sleeping to size * F_j (G_j) seconds, with F_j, G_j the cost
model's per-sample stage times (reference seconds * s_d). Compute and padding sit below
the target, communication and the schedule stay real (RUNTIME_NOTES: pad, never
calibrate T_ref at start-up).
"""
from __future__ import annotations

import itertools
from typing import Iterator, Sequence

import numpy as np

from ..cost import evaluate, group_coeffs, stage_times
from ..model import Device, Group, Instance, Plan, SlotState, Workload
from .pipeline import Pad

EMU = "emu"


def reference_times(workload: Workload, t_ref: float, floor: float = 0.02
                    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-layer reference (forward, backward) seconds per sample: a whole forward pass
    costs t_ref seconds per sample, spread over layers by FLOPs (layers without FLOPs get
    `floor` of the largest layer's share); backward is twice forward."""
    f = workload.fwd_flops.copy()
    f = np.maximum(f, floor * (f.max() if f.max() > 0 else 1.0))
    fwd = t_ref * f / f.sum()
    return tuple(float(x) for x in fwd), tuple(float(2 * x) for x in fwd)


def emulated_instance(workload: Workload, slowdown: np.ndarray, t_ref: float,
                      bandwidth: float = 1e9, latency: float = 2e-4,
                      memory_bytes: float = 8e9) -> Instance:
    """An instance of n emulated devices over S slots. slowdown: (S, n), a device's
    seconds are its factor times the reference; inf (or nan) = unavailable that slot.
    bandwidth bytes/s and latency s approximate loopback gloo."""
    slowdown = np.asarray(slowdown, dtype=float)
    S, n = slowdown.shape
    avail = np.isfinite(slowdown)
    factor = np.where(avail, 1.0 / np.where(avail, slowdown, 1.0), 1.0)
    wl = Workload(workload.name, workload.layers, workload.batch, workload.micro_batch,
                  workload.opt_factor, workload.input_bytes, {EMU: reference_times(workload, t_ref)})
    devices = tuple(Device(f"p{i}", EMU, 1e12, memory_bytes, 100.0, 30.0, 1e-4) for i in range(n))
    bw = np.full((S, n, n), bandwidth)
    lat = np.full((n, n), latency)
    return Instance("emulated", devices, wl, (), np.ones(n), avail, factor,
                    np.full((S, n), 1e-4), bw, lat)


def pads(plan: Plan, state: SlotState) -> dict[int, Pad]:
    """Per rank, the padding of its stage under `plan` in `state` (cost model stage times)."""
    out: dict[int, Pad] = {}
    for g in plan.groups:
        F, G, _ = stage_times(state, g.devices, g.cuts)
        for d, f, b in zip(g.devices, F, G):
            out[d] = Pad(float(f), float(b))
    return out


def balanced_cuts(state: SlotState, devices: Sequence[int]) -> tuple[int, ...]:
    """Cut points minimising the slowest stage's per-sample forward + backward (exhaustive)."""
    L, k = state.workload.num_layers, len(devices)
    best, best_cuts = np.inf, None
    for inner in itertools.combinations(range(1, L), k - 1):
        cuts = (*inner, L)
        F, G, _ = stage_times(state, devices, cuts)
        worst = float((F + G).max())
        if worst < best:
            best, best_cuts = worst, cuts
    return best_cuts


def balanced_shares(state: SlotState, structure: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Plan:
    """Shares in micro-batches, each next micro-batch to the group that stays fastest
    (optimal for min max_g alpha_g b_g + beta_g); every group gets at least one."""
    B, u = state.workload.batch, state.workload.micro_batch
    co = [group_coeffs(state, d, c) for d, c in structure]
    b = [u] * len(co)
    for _ in range(B // u - len(co)):
        g = min(range(len(co)), key=lambda i: co[i].time(b[i] + u))
        b[g] += u
    return Plan(tuple(Group(tuple(d), tuple(c), s) for (d, c), s in zip(structure, b)))


def _partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    head, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[head] + part[i]] + part[i + 1:]
        yield [[head]] + part


def brute_force_plan(state: SlotState, max_stages: int = 3) -> Plan:
    """Best predicted plan over every partition of the available devices into groups of
    <= max_stages stages, every stage order, balanced cuts and shares (n <= 6)."""
    devs = list(state.available_indices)
    if len(devs) > 6:
        raise ValueError(f"brute force is for <= 6 devices, got {len(devs)}")
    B, u = state.workload.batch, state.workload.micro_batch
    best, best_plan = np.inf, None
    for part in _partitions(devs):
        if any(len(g) > max_stages for g in part) or len(part) > B // u:
            continue
        for orders in itertools.product(*(itertools.permutations(g) for g in part)):
            structure = [(o, balanced_cuts(state, o)) for o in orders]
            if any(c is None for _, c in structure):
                continue
            plan = balanced_shares(state, structure)
            t = evaluate(plan, state).batch_time
            if t < best and not plan.validate(state):
                best, best_plan = t, plan
    return best_plan


def solver_plan(state: SlotState, V: float = 1.0) -> Plan:
    """The project solver's plan (solver.solve_slot), when solver/search.py exists."""
    import solver
    return solver.solve_slot(state, tuple(0.0 for _ in state.budgets), V).plan
