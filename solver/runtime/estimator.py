"""Speed factors from measured stage compute: the documented estimator of the training loop.

The cost model's per-sample layer seconds on device d are (measured table or FLOPs / speed)
divided by the slot's speed factor phi_d, so a stage's predicted compute per iteration is
    P_d = share * sum_{layers of the stage} (fwd + bwd seconds per sample) / phi_d.
Given M_d, the measured compute seconds of that stage per iteration (forward plus backward
kernels only, receive waits excluded; median over the slot's iterations, the first one left
out as warm-up when there are several), the estimate is
    phi_d' = phi_d * P_d / M_d,
the factor under which the cost model predicts exactly what was measured. A device keeps its
latest estimate until it is measured again; a device never measured keeps the instance
trace's factor. Transfer seconds are not estimated (the cost model keeps the instance's
bandwidth and latency).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from ..model import Plan, SlotState


def predicted_compute(plan: Plan, state: SlotState) -> dict[int, float]:
    """Device index -> predicted forward + backward compute seconds of its stage per iteration."""
    out: dict[int, float] = {}
    fp, bp = state.fwd_prefix, state.bwd_prefix
    for g in plan.groups:
        for d, a, b in g.stages():
            out[d] = g.share * float(fp[d, b] - fp[d, a] + bp[d, b] - bp[d, a])
    return out


def update_factors(factors: Mapping[int, float], plan: Plan, state: SlotState,
                   measured: Mapping[int, float]) -> dict[int, float]:
    """The estimates after one slot: `factors` (device index -> phi) updated from `measured`
    (device index -> compute seconds per iteration) of `plan` run in `state`."""
    pred = predicted_compute(plan, state)
    out = dict(factors)
    for d, m in measured.items():
        if d in pred and m > 0 and pred[d] > 0:
            out[d] = float(state.speed_factor[d]) * pred[d] / m
    return out


def observed_state(state: SlotState, present: np.ndarray, factors: Mapping[int, float]) -> SlotState:
    """`state` with availability limited to the `present` devices (bool per device) and the
    estimated speed factors in place of the trace's."""
    phi = np.array(state.speed_factor, dtype=float)
    for d, f in factors.items():
        phi[d] = f
    base = np.where(state.speed_factor > 0, state.speed / np.maximum(state.speed_factor, 1e-300), 0.0)
    return replace(state, available=np.asarray(state.available, dtype=bool) & np.asarray(present, dtype=bool),
                   speed=base * phi, speed_factor=phi)
