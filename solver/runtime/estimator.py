"""The documented estimator of the training loop: measured seconds -> the planner's numbers.

1. Compute -> speed factors. The cost model's per-sample layer seconds on device d are
(measured table or FLOPs / speed) divided by the slot's speed factor phi_d, so a stage's
predicted compute per iteration is
    P_d = share * sum_{layers of the stage} (fwd + bwd seconds per sample) / phi_d.
Given M_d, the measured compute seconds of that stage per iteration (forward plus backward
kernels only, receive waits excluded; median over the slot's iterations, the first one left
out as warm-up when there are several), the estimate is
    phi_d' = phi_d * P_d / M_d,
the factor under which the cost model predicts exactly what was measured. A device keeps its
latest estimate until it is measured again; a device never measured keeps the instance
trace's factor.

2. Transfers -> an extra per-message latency delta. The instance's latency and bandwidth
(one figure per link, e.g. from a quiet ping-pong) price the pipeline boundaries and the
gradient all-reduce; in a running job each message costs more (the receiver is busy or
descheduled, gloo's copies and wake-ups, the Python around each send). With the new
factors, the seconds of the measured iteration that compute and the optimizer step do not
explain are attributed to the plan's messages: delta (seconds) is added to every link's
latency (so once per micro-batch and boundary in a pipeline, and 2(m - 1) times per ring
all-reduce of m groups: cost.pipeline, cost.sync), chosen so that the cost model's batch
time (cost.evaluate) equals the measured one (bisection in [0, DELTA_MAX]). A plan without
messages (one group of one stage) keeps the previous delta; when even delta = 0 predicts
more than was measured, delta is 0 and the fit says so (Estimate.note). Bandwidth is
kept: on one machine the messages are small and their cost is per message.

3. The optimizer step is not estimated here: the layer table's measured opt_s:<kind>
seconds (dynpar profile) are charged with the instance's optimizer_step = "measured".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from ..cost import evaluate
from ..model import Plan, SlotState

DELTA_MAX = 1.0  # seconds per message


def predicted_compute(plan: Plan, state: SlotState) -> dict[int, float]:
    """Device index -> predicted forward + backward compute seconds of its stage per iteration
    (at the group's micro-batch)."""
    out: dict[int, float] = {}
    for g in plan.groups:
        st = state.at_micro_batch(g.micro_batch) if g.micro_batch is not None else state
        fp, bp = st.fwd_prefix, st.bwd_prefix
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


def with_extra_latency(state: SlotState, delta: float) -> SlotState:
    """`state` with `delta` seconds added to the latency of every link between two devices."""
    if delta == 0.0:
        return state
    lat = np.asarray(state.latency, dtype=float) + delta
    np.fill_diagonal(lat, np.diag(np.asarray(state.latency, dtype=float)))
    return replace(state, latency=lat)


def observed_state(state: SlotState, present: np.ndarray, factors: Mapping[int, float],
                   delta: float = 0.0) -> SlotState:
    """`state` with availability limited to the `present` devices (bool per device), the
    estimated speed factors in place of the trace's and the extra latency `delta` (s)."""
    phi = np.array(state.speed_factor, dtype=float)
    for d, f in factors.items():
        phi[d] = f
    base = np.where(state.speed_factor > 0, state.speed / np.maximum(state.speed_factor, 1e-300), 0.0)
    out = replace(state, available=np.asarray(state.available, dtype=bool) & np.asarray(present, dtype=bool),
                  speed=base * phi, speed_factor=phi)
    return with_extra_latency(out, delta)


@dataclass(frozen=True)
class Estimate:
    """After one slot: the speed factors, the extra latency delta (s), the cost model's batch
    time of the slot's plan under them (seconds; the measured one when the fit is exact) and
    a note ('' when nothing was clipped or kept)."""

    factors: dict[int, float]
    delta: float
    refit_batch_time: float
    note: str = ""


def has_transfers(plan: Plan) -> bool:
    return len(plan.groups) > 1 or any(g.num_stages > 1 for g in plan.groups)


def estimate(factors: Mapping[int, float], delta: float, plan: Plan, raw: SlotState,
             present: np.ndarray, measured_compute: Mapping[int, float], measured_batch: float,
             iterations: int = 60) -> Estimate:
    """Steps 1 and 2 of the module docstring for `plan` run in slot state `raw` (the
    instance's, before any estimate): new factors from `measured_compute`, then delta from
    `measured_batch` (seconds per iteration)."""
    observed = observed_state(raw, present, factors, 0.0)
    new = update_factors(factors, plan, observed, measured_compute)
    base = observed_state(raw, present, new, 0.0)

    def t(x: float) -> float:
        return float(evaluate(plan, with_extra_latency(base, x)).batch_time)

    if not (measured_batch > 0):
        return Estimate(new, delta, t(delta), "no batch time measured: delta kept")
    if not has_transfers(plan):
        return Estimate(new, delta, t(delta), "no messages in the plan: delta kept")
    if t(0.0) >= measured_batch:
        return Estimate(new, 0.0, t(0.0), f"compute and optimizer step alone predict {t(0.0):.4g} s >= measured "
                                          f"{measured_batch:.4g} s: delta 0")
    if t(DELTA_MAX) <= measured_batch:
        return Estimate(new, DELTA_MAX, t(DELTA_MAX), f"delta at its ceiling {DELTA_MAX} s")
    lo, hi = 0.0, DELTA_MAX
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if t(mid) < measured_batch:
            lo = mid
        else:
            hi = mid
    x = 0.5 * (lo + hi)
    return Estimate(new, x, t(x))
