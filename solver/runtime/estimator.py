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

2. Transfers. The instance's latency and bandwidth (one figure per link, e.g. from a quiet
ping-pong) price the pipeline boundaries and the gradient all-reduce; in a running job the
transfers cost more or less (receivers busy or descheduled, gloo's copies, reductions and
wake-ups, the Python around each message, the ranks arriving at the collective apart). Two
numbers are fitted, and kept until refitted, so that the cost model's batch time of the
slot's plan equals the measured one (an exact refit: the next slot's prediction of the same
plan is this slot's measurement):
  beta (bandwidth scale: every link's bandwidth is divided by beta) carries the all-reduce.
  A plan of several one-stage groups (data parallelism): beta makes cost.evaluate's batch
  time equal the measured one, so the all-reduce is charged every second of the iteration
  that compute and optimizer step do not explain (the collective, and the ranks' skew around
  it: the barrier each iteration starts from releases them apart, and the slowest rank of an
  iteration is not the same every time, so the median iteration exceeds the sum of the
  slowest rank's median parts: by 5-20% in the recorded runs, which fitting beta to the
  all-reduce alone left as a prediction error of that size).
  A plan of several groups with a pipeline among them: beta from the measured all-reduce,
  S, the smallest over the ranks of their median sync seconds (the last rank to arrive
  waits least, so its sync is the collective alone), equals cost.sync's time, and delta
  below carries the batch time.
  delta (seconds added to every link's latency, so once per micro-batch and boundary of a
  pipeline: cost.pipeline) carries the pipelines' messages: with the new factors and beta,
  delta makes cost.evaluate's batch time equal the measured one; only for plans with a group
  of several stages. delta may be negative down to minus the smallest latency between two
  devices (no link's latency below 0): the instance's latency may itself hold a measured
  per-message overhead (bench_train's calibration slot) that a later slot sees smaller;
  clipped at 0 instead, the model over-predicted GPipe slots by up to 14%.
Where even the bound of a range predicts more (or less) than was measured, the value is
clipped to it and the fit says so (Estimate.note). delta also adds 2(m - 1) latencies to the
all-reduce, so when a plan has both, they are solved together (Newton's method), or, where
that fails, alternated until both settle (at most ROUNDS times). The all-reduce is fitted on
bandwidth and the pipeline on latency because that is what each carries here: megabytes of
gradients in one collective, kilobytes of activations per message. A plan of one group and
one stage has no transfer to fit: its prediction error is the factor's and the optimizer
step's (-2..-4% in the recorded runs: the step measured 2-3 ms against the profile's 0.9-1.3).

3. The optimizer step is not estimated here: the layer table's measured opt_s:<kind>
seconds (dynpar profile) are charged with the instance's optimizer_step = "measured".
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from ..cost import evaluate
from ..cost.sync import sync_time
from ..model import Plan, SlotState
from ..model.plan import to_units

DELTA_MAX = 1.0  # seconds per message
BETA_MIN, BETA_MAX = 1e-3, 1e5
ROUNDS = 100  # most alternations of the two fits when a plan has both (they stop when both settle)


def predicted_compute(plan: Plan, state: SlotState) -> dict[int, float]:
    """Device index -> predicted forward + backward compute seconds of its stage per iteration
    (at the group's micro-batch); every device of a tensor-parallel stage gets the stage's
    (its unit's time: model.units, TP collectives included)."""
    out: dict[int, float] = {}
    if plan.uses_tp:
        ustate, uplan = to_units(plan, state)
        per_unit = predicted_compute(uplan, ustate)
        for g, ug in zip(plan.groups, uplan.groups):
            for unit, u in zip(g.units(), ug.devices):
                out.update({d: per_unit[u] for d in unit})
        return out
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


def with_links(state: SlotState, delta: float = 0.0, beta: float = 1.0) -> SlotState:
    """`state` with `delta` seconds added to the latency of every link between two devices
    and every bandwidth divided by `beta`."""
    if delta == 0.0 and beta == 1.0:
        return state
    lat = np.asarray(state.latency, dtype=float) + delta
    np.fill_diagonal(lat, np.diag(np.asarray(state.latency, dtype=float)))
    bw = np.asarray(state.bandwidth, dtype=float) / beta
    np.fill_diagonal(bw, np.diag(np.asarray(state.bandwidth, dtype=float)))
    return replace(state, latency=lat, bandwidth=bw)


def observed_state(state: SlotState, present: np.ndarray, factors: Mapping[int, float],
                   delta: float = 0.0, beta: float = 1.0) -> SlotState:
    """`state` with availability limited to the `present` devices (bool per device), the
    estimated speed factors in place of the trace's, the extra latency `delta` (s) and the
    bandwidth scale `beta`."""
    phi = np.array(state.speed_factor, dtype=float)
    for d, f in factors.items():
        phi[d] = f
    base = np.where(state.speed_factor > 0, state.speed / np.maximum(state.speed_factor, 1e-300), 0.0)
    out = replace(state, available=np.asarray(state.available, dtype=bool) & np.asarray(present, dtype=bool),
                  speed=base * phi, speed_factor=phi)
    return with_links(out, delta, beta)


@dataclass(frozen=True)
class Estimate:
    """After one slot: the speed factors, the extra latency delta (s), the bandwidth scale
    beta, the cost model's batch time of the slot's plan under them (seconds; the measured
    one when the fit is exact) and notes ('' when nothing was clipped)."""

    factors: dict[int, float]
    delta: float
    beta: float
    refit_batch_time: float
    note: str = ""


def _bisect(f, lo: float, hi: float, target: float, log: bool, iterations: int = 60) -> float:
    """x in [lo, hi] with f(x) = target, f increasing (bisection; on log x when `log`)."""
    a, b = (np.log(lo), np.log(hi)) if log else (lo, hi)
    for _ in range(iterations):
        mid = 0.5 * (a + b)
        if f(float(np.exp(mid)) if log else mid) < target:
            a = mid
        else:
            b = mid
    x = 0.5 * (a + b)
    return float(np.exp(x)) if log else float(x)


def _newton(plan: Plan, base: SlotState, sync: float, batch: float, lo_delta: float = 0.0, steps: int = 30
            ) -> tuple[float, float] | None:
    """(delta, beta) with the model's all-reduce = `sync` and batch time = `batch` at once:
    Newton's method on (delta, log beta) with a finite-difference Jacobian (both are
    piecewise linear, so a few steps land exactly), each step clipped to the ranges; None
    when it does not converge (the caller then alternates the two one-dimensional fits)."""
    def r(x: np.ndarray) -> np.ndarray:
        ev = evaluate(plan, with_links(base, float(x[0]), float(np.exp(x[1]))))
        return np.array([ev.sync_time / sync - 1.0, ev.batch_time / batch - 1.0])

    x = np.array([0.0, 0.0])
    for _ in range(steps):
        f = r(x)
        if np.abs(f).max() < 1e-9:
            return float(x[0]), float(np.exp(x[1]))
        h = np.array([max(1e-7, 1e-4 * abs(x[0])), 1e-4])
        J = np.column_stack([(r(x + np.array([h[0], 0.0])) - f) / h[0], (r(x + np.array([0.0, h[1]])) - f) / h[1]])
        try:
            x = x - np.linalg.solve(J, f)
        except np.linalg.LinAlgError:
            return None
        x = np.clip(x, [lo_delta, np.log(BETA_MIN)], [DELTA_MAX, np.log(BETA_MAX)])
    return None


def delta_floor(state: SlotState) -> float:
    """The least extra latency delta (s, <= 0): minus the smallest latency between two devices."""
    lat = np.asarray(state.latency, dtype=float)
    off = lat[~np.eye(len(lat), dtype=bool)]
    return -float(off.min()) if off.size else 0.0


def estimate(factors: Mapping[int, float], delta: float, beta: float, plan: Plan, raw: SlotState,
             present: np.ndarray, measured_compute: Mapping[int, float], measured_batch: float,
             measured_sync: float | None = None) -> Estimate:
    """Steps 1 and 2 of the module docstring for `plan` run in slot state `raw` (the
    instance's, before any estimate): new factors from `measured_compute` (device ->
    seconds per iteration), beta from `measured_batch` (seconds per iteration; data-parallel
    plans) or from `measured_sync` (seconds of the all-reduce per iteration; plans with a
    pipeline too), delta from `measured_batch`."""
    notes: list[str] = []
    new = update_factors(factors, plan, observed_state(raw, present, factors), measured_compute)
    base = observed_state(raw, present, new)
    structure = [(g.devices, g.cuts) for g in plan.groups]

    def sync_s(st: SlotState) -> float:  # a plan with TP stages: its all-reduce on its units (model.units)
        if not plan.uses_tp:
            return sync_time(st, structure)
        ust, uplan = to_units(plan, st)
        return sync_time(ust, [(g.devices, g.cuts) for g in uplan.groups])
    fit_delta = any(g.num_stages > 1 for g in plan.groups) and measured_batch > 0
    several = len(plan.groups) > 1
    beta_on_sync = several and fit_delta and measured_sync is not None and measured_sync > 0
    beta_on_batch = several and not fit_delta and measured_batch > 0
    lo_delta = delta_floor(raw)

    def t(x: float, b: float) -> float:
        return float(evaluate(plan, with_links(base, x, b)).batch_time)

    if beta_on_sync:
        joint = _newton(plan, base, measured_sync, measured_batch, lo_delta)
        if joint is not None:
            return Estimate(new, joint[0], joint[1], t(*joint), "")
    if beta_on_batch:
        beta = _fit(lambda b: t(delta, b), BETA_MIN, BETA_MAX, measured_batch, True, "beta", notes)
        return Estimate(new, delta, beta, t(delta, beta), "; ".join(notes))
    for _ in range(ROUNDS if beta_on_sync else 1):  # delta also enters the all-reduce
        before = (delta, beta)
        notes = []
        if beta_on_sync:
            beta = _fit(lambda b: sync_s(with_links(base, delta, b)), BETA_MIN, BETA_MAX,
                        measured_sync, True, "beta (all-reduce)", notes)
        if fit_delta:
            delta = _fit(lambda x: t(x, beta), lo_delta, DELTA_MAX, measured_batch, False, "delta", notes)
        if abs(delta - before[0]) <= 1e-6 * max(abs(delta), 1e-12) and abs(beta - before[1]) <= 1e-6 * beta:
            break
    return Estimate(new, delta, beta, t(delta, beta), "; ".join(notes))


def _fit(f, lo: float, hi: float, target: float, log: bool, name: str, notes: list[str]) -> float:
    """x in [lo, hi] with f(x) = target for increasing f; at a bound, clipped with a note."""
    if f(lo) >= target:
        notes.append(f"{name} clipped at {lo:.4g}: the model predicts {f(lo):.4g} s there, measured {target:.4g} s")
        return lo
    if f(hi) <= target:
        notes.append(f"{name} clipped at {hi:.4g}: the model predicts {f(hi):.4g} s there, measured {target:.4g} s")
        return hi
    return _bisect(f, lo, hi, target, log=log)
