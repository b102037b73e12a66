"""Optimizer-step seconds per iteration: each stage's device updates its own parameters once per
iteration, after the gradient sync; the slowest stage of the plan sets the time.

Per stage j on device d (Workload.optimizer_step):
- "none": 0 (not modelled; the default);
- "measured": the sum of the stage's measured per-layer seconds for d's kind
  (Workload.optimizer_seconds; a TP stage of degree t: those of Workload.at_tp, the seconds
  / t, each device stepping 1/t of the parameters) divided by d's speed factor; kinds without
  figures get the bandwidth estimate;
- "bandwidth": (2 k_opt - 1) P_j / memory_bandwidth_d: the step reads every byte of model state
  (k_opt P_j: weights, gradients, optimizer state) and writes all of it but the gradients.
A device without a memory bandwidth (0) cannot be estimated: ValueError naming it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model.memory import stage_params_and_stash
from ..model.state import SlotState
from ..model.workload import OPTIMIZER_STEPS

Structure = Sequence[tuple[Sequence[int], Sequence[int]]]


def stage_optimizer_seconds(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> np.ndarray:
    """(k,) optimizer-step seconds of each stage of one group (module doc)."""
    wl = state.workload
    if wl.optimizer_step not in OPTIMIZER_STEPS:
        raise ValueError(f"optimizer_step: expected one of {OPTIMIZER_STEPS}, got {wl.optimizer_step!r}")
    k = len(devices)
    if wl.optimizer_step == "none":
        return np.zeros(k)
    P, _ = stage_params_and_stash(state, cuts, devices)
    starts = (0, *cuts[:-1])
    out = np.empty(k)
    for j, (d, a, c) in enumerate(zip(devices, starts, cuts)):
        dev = state.devices[d]
        at = state.workload_at(state.degree(d))         # a TP stage's per-device figures (Workload.at_tp)
        meas = at.optimizer_seconds.get(dev.kind) if wl.optimizer_step == "measured" else None
        if meas is not None:
            out[j] = float(np.sum(meas[a:c])) / max(float(state.speed_factor[d]), 1e-300)
        elif dev.memory_bandwidth > 0:
            out[j] = (2.0 * wl.opt_factor - 1.0) * float(P[j]) / dev.memory_bandwidth
        else:
            raise ValueError(f"device {dev.name}: memory_bandwidth unknown (0) and no measured optimizer "
                             f"seconds for kind {dev.kind!r}: cannot estimate its optimizer step")
    return out


def optimizer_step_time(state: SlotState, structure: Structure) -> float:
    """Seconds of the plan's optimizer step: the slowest stage over all groups (0 for "none")."""
    if state.workload.optimizer_step == "none":
        return 0.0
    return max((float(stage_optimizer_seconds(state, d, c).max()) for d, c in structure), default=0.0)
