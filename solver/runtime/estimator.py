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
trace's factor here (the training controller prices it with its measured peers' drift:
runtime.trainer.Controller.unmeasured).

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

4. Tensor-parallel collectives. A TP stage's predicted compute (model.units) is its split
layers' seconds over the unit's factor plus its TP collectives, which are not divided by any
speed factor: per layer and pass, Workload.tp_collectives of them (the runtime's split:
runtime.tensor_parallel.collective_counts), each priced at the ring of the unit's links plus
lambda = SlotState.tp_collective_latency seconds (the library's per-call overhead: about 1 ms
for gloo between CPU processes, which the link latency, microseconds, does not hold; the
instance may declare it, [network] tp_collective_latency_ms). The runtime times every TP
collective on each rank (tensor_parallel.CollectiveClock; waits for the stage's other ranks
included), C_d seconds per iteration. Per TP stage, the rank that waits least in them is
the one that computes longest, so the stage's collectives cost C_U = min over its ranks of
C_d; lambda is fitted so that the model's collective seconds summed over the plan's TP stages
equal the sum of their C_U (linear in lambda; clipped at 0 with a note where the ring alone
exceeds it), and a TP rank's factor from its compute alone: phi_d' = phi_d * (P_d - Q_d) /
(M_d - C_d), Q_d the model's collectives under the slot's prediction. Without it the
collectives' misprice went into the factors (a TP-2 stage of mlp64 on gloo: predicted 7x
low, its ranks' factors then 7x too slow for any plan without TP).

5. The gradient all-reduce's per-call cost. cost.sync prices each bucket's all-reduce at its
ring plus lambda_ar = SlotState.allreduce_latency seconds (one call per bucket, as the
runtime reduces them; the instance may declare it, [network] allreduce_latency_ms, 0 by
default). For a plan of several one-stage groups with a measured all-reduce S (the smallest
of the ranks' median sync seconds, as in step 2), lambda_ar is fitted first so that cost.sync
at the instance's links (beta 1, delta 0) equals S (0 where the ring alone exceeds it: the
bandwidth then carries the all-reduce), then beta as in step 2 on the batch time, so the refit stays exact and
beta keeps only what the per-call figure does not hold (the ranks' skew around the
collective). Other plans keep lambda_ar (with a pipeline, S fits beta).
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


def predicted_tp_collectives(plan: Plan, state: SlotState) -> dict[int, float]:
    """Device index -> the model's seconds per iteration of its TP stage's collectives (the
    part of predicted_compute no speed factor divides; model.state.tp_collective_seconds),
    for every device of a stage with TP peers."""
    if not plan.uses_tp:
        return {}
    ustate, uplan = to_units(plan, state)
    out: dict[int, float] = {}
    for g, ug in zip(plan.groups, uplan.groups):
        st = ustate.at_micro_batch(g.micro_batch) if g.micro_batch is not None else ustate
        for unit, (u, a, b) in zip(g.units(), ug.stages()):
            if len(unit) > 1:
                per = st.tp_collectives_per_sample(u, 0)[a:b].sum() + st.tp_collectives_per_sample(u, 1)[a:b].sum()
                out.update({d: g.share * float(per) for d in unit})
    return out


def fit_tp_latency(plan: Plan, state: SlotState, measured_tp: Mapping[int, float]) -> tuple[float, str]:
    """(lambda seconds per TP collective, note) for `plan` run in `state` (its other estimates
    in place) from `measured_tp` (device -> seconds per iteration in its TP collectives):
    step 4 of the module docstring. A plan without a measured TP stage keeps the state's
    lambda (note '')."""
    units = [u for g in plan.groups for u in g.units() if len(u) > 1 and all(d in measured_tp for d in u)]
    if not units:
        return float(state.tp_collective_latency), ""
    target = sum(min(float(measured_tp[d]) for d in u) for u in units)
    at0 = predicted_tp_collectives(plan, replace(state, tp_collective_latency=0.0))
    at1 = predicted_tp_collectives(plan, replace(state, tp_collective_latency=1.0))
    c0, slope = sum(at0[u[0]] for u in units), sum(at1[u[0]] - at0[u[0]] for u in units)
    if slope <= 0:
        return float(state.tp_collective_latency), ""
    lam = (target - c0) / slope
    if lam < 0:
        return 0.0, (f"tp_collective_latency clipped at 0: the ring alone prices the TP collectives "
                     f"{c0:.4g} s per iteration, measured {target:.4g} s")
    if lam > DELTA_MAX:
        return DELTA_MAX, (f"tp_collective_latency clipped at {DELTA_MAX:g} s: measured {target:.4g} s of TP "
                           "collectives per iteration")
    return float(lam), ""


def update_factors(factors: Mapping[int, float], plan: Plan, state: SlotState,
                   measured: Mapping[int, float], measured_tp: Mapping[int, float] | None = None) -> dict[int, float]:
    """The estimates after one slot: `factors` (device index -> phi) updated from `measured`
    (device index -> compute seconds per iteration) of `plan` run in `state`; `measured_tp`
    (device -> seconds of its TP collectives per iteration, part of `measured`): a TP rank's
    factor from its compute alone (step 4 of the module docstring)."""
    pred = predicted_compute(plan, state)
    coll = predicted_tp_collectives(plan, state) if measured_tp else {}
    out = dict(factors)
    for d, m in measured.items():
        p = pred.get(d, 0.0)
        if d in coll and d in measured_tp:
            p, m = p - coll[d], m - float(measured_tp[d])
        if d in pred and m > 0 and p > 0:
            out[d] = float(state.speed_factor[d]) * p / m
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
                   delta: float = 0.0, beta: float = 1.0, tp_latency: float | None = None,
                   allreduce_latency: float | None = None) -> SlotState:
    """`state` with availability limited to the `present` devices (bool per device), the
    estimated speed factors in place of the trace's, the extra latency `delta` (s), the
    bandwidth scale `beta`, the per-collective TP latency `tp_latency` and the per-call
    all-reduce latency `allreduce_latency` (s; None: the state's own, the instance's)."""
    phi = np.array(state.speed_factor, dtype=float)
    for d, f in factors.items():
        phi[d] = f
    base = np.where(state.speed_factor > 0, state.speed / np.maximum(state.speed_factor, 1e-300), 0.0)
    out = replace(state, available=np.asarray(state.available, dtype=bool) & np.asarray(present, dtype=bool),
                  speed=base * phi, speed_factor=phi)
    if tp_latency is not None:
        out = replace(out, tp_collective_latency=float(tp_latency))
    if allreduce_latency is not None:
        out = replace(out, allreduce_latency=float(allreduce_latency))
    return with_links(out, delta, beta)


@dataclass(frozen=True)
class Estimate:
    """After one slot: the speed factors, the extra latency delta (s), the bandwidth scale
    beta, the cost model's batch time of the slot's plan under them (seconds; the measured
    one when the fit is exact), notes ('' when nothing was clipped), the per-collective TP
    latency lambda (s; step 4) and the per-call all-reduce latency lambda_ar (s; step 5)."""

    factors: dict[int, float]
    delta: float
    beta: float
    refit_batch_time: float
    note: str = ""
    tp_latency: float = 0.0
    allreduce_latency: float = 0.0


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
             measured_sync: float | None = None, measured_tp: Mapping[int, float] | None = None,
             tp_latency: float | None = None, allreduce_latency: float | None = None) -> Estimate:
    """Steps 1, 2, 4 and 5 of the module docstring for `plan` run in slot state `raw` (the
    instance's, before any estimate): lambda from `measured_tp` (device -> seconds of its TP
    collectives per iteration; `tp_latency`: lambda before the slot, None: the instance's), new
    factors from `measured_compute` (device -> seconds per iteration), lambda_ar
    (`allreduce_latency` before the slot, None: the instance's) and beta from `measured_sync`
    (seconds of the all-reduce per iteration) and `measured_batch` (seconds per iteration) for
    data-parallel plans, beta from `measured_sync` for plans with a pipeline too, delta from
    `measured_batch`."""
    notes: list[str] = []
    before = observed_state(raw, present, factors, delta, beta, tp_latency, allreduce_latency)
    lam, why = fit_tp_latency(plan, before, measured_tp or {})
    if why:
        notes.append(why)
    new = update_factors(factors, plan, before, measured_compute, measured_tp)
    lam_ar = float(before.allreduce_latency)
    base = observed_state(raw, present, new, tp_latency=lam, allreduce_latency=lam_ar)
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
    if beta_on_batch and measured_sync is not None and measured_sync > 0:    # step 5
        lam_ar = fit_allreduce_latency(lambda x: sync_s(replace(base, allreduce_latency=x)), measured_sync, notes)
        base = replace(base, allreduce_latency=lam_ar)
    tp_notes = list(notes)

    def t(x: float, b: float) -> float:
        return float(evaluate(plan, with_links(base, x, b)).batch_time)

    if beta_on_sync:
        joint = _newton(plan, base, measured_sync, measured_batch, lo_delta)
        if joint is not None:
            return Estimate(new, joint[0], joint[1], t(*joint), "; ".join(tp_notes), lam, lam_ar)
    if beta_on_batch:
        beta = _fit(lambda b: t(delta, b), BETA_MIN, BETA_MAX, measured_batch, True, "beta", notes)
        return Estimate(new, delta, beta, t(delta, beta), "; ".join(notes), lam, lam_ar)
    for _ in range(ROUNDS if beta_on_sync else 1):  # delta also enters the all-reduce
        before_fit = (delta, beta)
        notes = list(tp_notes)
        if beta_on_sync:
            beta = _fit(lambda b: sync_s(with_links(base, delta, b)), BETA_MIN, BETA_MAX,
                        measured_sync, True, "beta (all-reduce)", notes)
        if fit_delta:
            delta = _fit(lambda x: t(x, beta), lo_delta, DELTA_MAX, measured_batch, False, "delta", notes)
        if abs(delta - before_fit[0]) <= 1e-6 * max(abs(delta), 1e-12) and abs(beta - before_fit[1]) <= 1e-6 * beta:
            break
    return Estimate(new, delta, beta, t(delta, beta), "; ".join(notes), lam, lam_ar)


def fit_allreduce_latency(sync_at, measured_sync: float, notes: list[str]) -> float:
    """lambda_ar (s per all-reduce call, step 5) with sync_at(lambda_ar) = `measured_sync`
    (seconds per iteration; sync_at: the model's all-reduce at that per-call latency,
    increasing). 0 where the ring alone already takes longer (the bandwidth, which beta fits
    next, then carries the all-reduce; the column allreduce_latency shows the 0); clipped at
    DELTA_MAX with a note."""
    if sync_at(0.0) >= measured_sync:
        return 0.0
    return _fit(sync_at, 0.0, DELTA_MAX, measured_sync, False, "allreduce_latency", notes)


def _fit(f, lo: float, hi: float, target: float, log: bool, name: str, notes: list[str]) -> float:
    """x in [lo, hi] with f(x) = target for increasing f; at a bound, clipped with a note."""
    if f(lo) >= target:
        notes.append(f"{name} clipped at {lo:.4g}: the model predicts {f(lo):.4g} s there, measured {target:.4g} s")
        return lo
    if f(hi) <= target:
        notes.append(f"{name} clipped at {hi:.4g}: the model predicts {f(hi):.4g} s there, measured {target:.4g} s")
        return hi
    return _bisect(f, lo, hi, target, log=log)
