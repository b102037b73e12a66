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
transfers cost more (receivers busy or descheduled, gloo's copies, reductions and wake-ups,
the Python around each message). Two numbers are fitted, and kept until refitted:
  beta (bandwidth scale: every link's bandwidth is divided by beta), from the measured
  all-reduce: S, the smallest over the ranks of their median sync seconds (the last rank to
  arrive waits least, so its sync is the collective alone), equals cost.sync's time
  (bisection on log beta in [BETA_MIN, BETA_MAX]); only for plans of several groups;
  delta (seconds added to every link's latency, so once per micro-batch and boundary of a
  pipeline: cost.pipeline), from the measured batch time: with the new factors and beta,
  the seconds of the iteration that compute, all-reduce and optimizer step do not explain
  are the pipelines' messages; delta makes cost.evaluate's batch time equal the measured
  one (bisection in [0, DELTA_MAX]); only for plans with a group of several stages.
Where even the bound of a range predicts more than was measured, the value is clipped to it
and the fit says so (Estimate.note). delta also adds 2(m - 1) latencies to the all-reduce,
so when a plan has both, they are solved together (Newton's method), or, where that fails,
alternated until both settle (at most ROUNDS times). The all-reduce is fitted on bandwidth and the pipeline
on latency because that is what each carries here: megabytes of gradients in one
collective, kilobytes of activations per message.

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

DELTA_MAX = 1.0  # seconds per message
BETA_MIN, BETA_MAX = 1e-3, 1e5
ROUNDS = 100  # most alternations of the two fits when a plan has both (they stop when both settle)


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


def _newton(plan: Plan, base: SlotState, sync: float, batch: float, steps: int = 30
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
        x = np.clip(x, [0.0, np.log(BETA_MIN)], [DELTA_MAX, np.log(BETA_MAX)])
    return None


def estimate(factors: Mapping[int, float], delta: float, beta: float, plan: Plan, raw: SlotState,
             present: np.ndarray, measured_compute: Mapping[int, float], measured_batch: float,
             measured_sync: float | None = None) -> Estimate:
    """Steps 1 and 2 of the module docstring for `plan` run in slot state `raw` (the
    instance's, before any estimate): new factors from `measured_compute` (device ->
    seconds per iteration), beta from `measured_sync` (seconds of the all-reduce per
    iteration), delta from `measured_batch` (seconds per iteration)."""
    notes: list[str] = []
    new = update_factors(factors, plan, observed_state(raw, present, factors), measured_compute)
    base = observed_state(raw, present, new)
    structure = [(g.devices, g.cuts) for g in plan.groups]
    fit_beta = len(plan.groups) > 1 and measured_sync is not None and measured_sync > 0
    fit_delta = any(g.num_stages > 1 for g in plan.groups) and measured_batch > 0

    def t(x: float, b: float) -> float:
        return float(evaluate(plan, with_links(base, x, b)).batch_time)

    if fit_beta and fit_delta:
        joint = _newton(plan, base, measured_sync, measured_batch)
        if joint is not None:
            return Estimate(new, joint[0], joint[1], t(*joint), "")
    for _ in range(ROUNDS if fit_beta and fit_delta else 1):  # delta also enters the all-reduce
        before = (delta, beta)
        notes = []
        if fit_beta:
            def s(b: float) -> float:
                return sync_time(with_links(base, delta, b), structure)
            if s(BETA_MIN) >= measured_sync:
                beta = BETA_MIN
                notes.append(f"all-reduce measured {measured_sync:.4g} s <= the model's at beta {BETA_MIN}: "
                             "beta clipped")
            elif s(BETA_MAX) <= measured_sync:
                beta = BETA_MAX
                notes.append(f"beta clipped at {BETA_MAX}")
            else:
                beta = _bisect(s, BETA_MIN, BETA_MAX, measured_sync, log=True)
        if fit_delta:
            if t(0.0, beta) >= measured_batch:
                delta = 0.0
                notes.append(f"compute, all-reduce and optimizer step alone predict {t(0.0, beta):.4g} s >= "
                             f"measured {measured_batch:.4g} s: delta 0")
            elif t(DELTA_MAX, beta) <= measured_batch:
                delta = DELTA_MAX
                notes.append(f"delta clipped at {DELTA_MAX} s")
            else:
                delta = _bisect(lambda x: t(x, beta), 0.0, DELTA_MAX, measured_batch, log=False)
        if abs(delta - before[0]) <= 1e-6 * max(delta, 1e-12) and abs(beta - before[1]) <= 1e-6 * beta:
            break
    return Estimate(new, delta, beta, t(delta, beta), "; ".join(notes))
