"""The cost model: batch time, memory and per-iteration costs of a plan (DESIGN.md section 3).

A group is a pair (devices in pipeline order, cut points). Its time for a share of b
samples (a multiple of the micro-batch u) under a synchronous GPipe schedule is exactly
T_g(b) = alpha_g * b + beta_g; `pipeline_sim` is the event simulator this is tested against.
Every cost is linear in the batch time T and the shares: c_k = R_k T + sum_g e_kg b_g + F_k.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .model import SlotState
from .plan import Plan

Structure = Sequence[tuple[Sequence[int], Sequence[int]]]
"""Groups without shares: ((devices, cuts), ...)."""


def stage_times(state: SlotState, devices: Sequence[int], cuts: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample forward seconds F_j, backward seconds G_j of each stage, and the
    one-way boundary transfer seconds lambda_j (k-1 of them; latency spread over u)."""
    d = np.asarray(devices, dtype=int)
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    F = state.fwd_prefix[d, c] - state.fwd_prefix[d, start]
    G = state.bwd_prefix[d, c] - state.bwd_prefix[d, start]
    if len(d) > 1:
        o = state.workload.out_bytes[c[:-1] - 1]
        lam = o / state.bandwidth[d[:-1], d[1:]] + state.latency[d[:-1], d[1:]] / state.workload.micro_batch
    else:
        lam = np.zeros(0)
    return F, G, lam


def gpipe_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of the exact GPipe group time alpha*b + beta."""
    lmax = float(lam.max()) if len(lam) else 0.0
    alpha = max(float(F.max()), lmax) + max(float(G.max()), lmax)
    beta = u * (float(F.sum()) + float(G.sum()) + 2.0 * float(lam.sum())) - u * alpha
    return alpha, beta


@dataclass(frozen=True)
class GroupCoeffs:
    """Numbers of one ordered, cut group in one slot.

    alpha: seconds per sample; beta: seconds of fill and drain; cap: largest share
    (samples, a multiple of u) that fits in memory, 0 if not even one micro-batch fits,
    or a huge number when memory does not bind; busy_j_per_sample: per stage, joules
    per sample above idle ((Pbusy - P0) * (F_j + G_j)).
    """

    devices: tuple[int, ...]
    cuts: tuple[int, ...]
    alpha: float
    beta: float
    cap: int
    fwd: np.ndarray
    bwd: np.ndarray
    lam: np.ndarray
    busy_j_per_sample: np.ndarray

    def time(self, share: int) -> float:
        return self.alpha * share + self.beta


NO_CAP = 1 << 60


def stage_params_and_stash(state: SlotState, cuts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per stage: parameter bytes P_j and stashed activation bytes per sample H_j."""
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    return state.param_prefix[c] - state.param_prefix[start], state.stash_prefix[c] - state.stash_prefix[start]


def memory_use(state: SlotState, devices: Sequence[int], cuts: Sequence[int], share: int) -> np.ndarray:
    """Bytes each stage's device holds: k_opt * P_j plus stashed activations
    (share * H_j under GPipe with >= 2 stages; one micro-batch for a one-stage group)."""
    P, H = stage_params_and_stash(state, cuts)
    wl = state.workload
    live = wl.micro_batch if len(devices) == 1 else share
    return wl.opt_factor * P + live * H


MEM_RTOL = 1e-12
"""Relative slack on device memory, shared by share_cap and Plan.validate so that they agree."""


def share_cap(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> int:
    """Largest share (multiple of u) within every stage's memory (as Plan.validate checks it,
    up to MEM_RTOL); 0 when none fits."""
    wl = state.workload
    u = wl.micro_batch
    P, H = stage_params_and_stash(state, cuts)
    M = state.memory_bytes[np.asarray(devices, dtype=int)] * (1 + MEM_RTOL)
    free = M - wl.opt_factor * P
    if np.any(free < 0):
        return 0
    if len(devices) == 1:
        return NO_CAP if free[0] >= u * H[0] else 0
    with np.errstate(divide="ignore"):
        per = np.where(H > 0, free / np.where(H > 0, H, 1.0), np.inf)
    b = float(per.min())
    if not np.isfinite(b):
        return NO_CAP
    cap = int(np.floor(b / u)) * u

    def fits(share: int) -> bool:
        return bool(np.all(memory_use(state, devices, cuts, share) <= M))

    if cap > 0 and not fits(cap):        # b / u rounded up across an integer
        cap -= u
    elif fits(cap + u):                  # b / u rounded down across an integer
        cap += u
    return cap


def group_coeffs(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> GroupCoeffs:
    F, G, lam = stage_times(state, devices, cuts)
    alpha, beta = gpipe_coeffs(F, G, lam, state.workload.micro_batch)
    extra_w = state.extra_power_w[np.asarray(devices, dtype=int)]
    return GroupCoeffs(tuple(int(x) for x in devices), tuple(int(x) for x in cuts), alpha, beta,
                       share_cap(state, devices, cuts), F, G, lam, extra_w * (F + G))


def holders(devices: Sequence[int], cuts: Sequence[int], num_layers: int) -> np.ndarray:
    """(L,) the device holding each layer in this group."""
    c = np.asarray(cuts, dtype=int)
    sizes = np.diff(np.concatenate([[0], c]))
    out = np.repeat(np.asarray(devices, dtype=int), sizes)
    assert len(out) == num_layers
    return out


def sync_time(state: SlotState, structure: Structure) -> float:
    """Seconds of the cross-group gradient all-reduce (bucketed rings), 0 for one group.

    Layers held by the same devices in every group form one bucket, reduced on the ring of
    those devices in group order: 2(m-1)/m * bytes / slowest ring link + 2(m-1) * largest
    ring latency. The result is the largest per-device sum of buckets. Every device holds one
    contiguous layer range of its group, so the buckets are the segments between the union
    of all groups' cut points (segments without parameter bytes cost nothing).
    """
    m = len(structure)
    if m <= 1:
        return 0.0
    pp = state.param_prefix
    cut_all = np.array(sorted({int(x) for _, c in structure for x in c}), dtype=int)
    starts = np.concatenate([[0], cut_all[:-1]])
    nbytes = pp[cut_all] - pp[starts]
    keep = nbytes > 0
    if not keep.any():
        return 0.0
    starts, nbytes = starts[keep], nbytes[keep]
    cols = np.empty((m, len(starts)), dtype=int)
    for gi, (d, c) in enumerate(structure):
        cols[gi] = np.asarray(d, dtype=int)[np.searchsorted(np.asarray(c, dtype=int), starts, side="right")]
    nxt = np.concatenate((cols[1:], cols[:1]))
    bw = state.bandwidth[cols, nxt].min(axis=0)
    lat = state.latency[cols, nxt].max(axis=0)
    cost = 2.0 * (m - 1) / m * nbytes / bw + 2.0 * (m - 1) * lat
    per_device = np.bincount(cols.ravel(), weights=np.broadcast_to(cost, cols.shape).ravel(), minlength=state.n)
    return float(per_device.max())


@dataclass(frozen=True)
class CostCoeffs:
    """c_k = R[k] * T + sum_g e[k, g] * b_g + F[k], one row per budget in state order.
    R: per second; e: per sample; F: per iteration (units of the budget)."""

    R: np.ndarray
    e: np.ndarray
    F: np.ndarray

    def costs(self, batch_time: float, shares: Sequence[float]) -> np.ndarray:
        return self.R * batch_time + self.e @ np.asarray(shares, dtype=float) + self.F


def cost_coeffs(state: SlotState, groups: Sequence[GroupCoeffs]) -> CostCoeffs:
    K, m = len(state.budgets), len(groups)
    R, e, F = np.zeros(K), np.zeros((K, m)), np.zeros(K)
    held = [d for g in groups for d in g.devices]
    for k, b in enumerate(state.budgets):
        if b.kind == "money":
            R[k] = float(sum(state.price[d] for d in held))
        elif b.kind == "energy":
            R[k] = float(sum(state.devices[d].idle_power_w for d in held))
            e[k] = [float(g.busy_j_per_sample.sum()) for g in groups]
        elif b.kind == "device_energy":
            i = state.device_index(b.device)
            for gi, g in enumerate(groups):
                if i in g.devices:
                    R[k] = state.devices[i].idle_power_w
                    e[k, gi] = float(g.busy_j_per_sample[g.devices.index(i)])
        else:
            raise ValueError(f"budget {b.name!r}: unknown kind {b.kind!r}")
    return CostCoeffs(R, e, F)


def budget_weights(limits: Sequence[float], queues: Sequence[float]) -> np.ndarray:
    """Per-budget weights Q_k / Cbar_k of the slot objective V T + sum_k Q_k c_k / Cbar_k.

    Queues are kept in units of their budget (queues.update_queues), so a cost counts
    relative to its limit and V weighs one second against one budget's worth of cost.
    () means every queue is 0."""
    if len(queues) == 0:
        return np.zeros(len(limits))
    return np.asarray(queues, dtype=float) / np.asarray(limits, dtype=float)


@dataclass(frozen=True)
class Evaluation:
    """Predicted outcome of one plan in one slot.

    batch_time: seconds per iteration (max group time + sync); group_times: seconds;
    sync_time: seconds; costs: per budget, in state.budgets order (USD, joules);
    limits: the budgets' limits, in the same order.
    """

    batch_time: float
    group_times: tuple[float, ...]
    sync_time: float
    costs: tuple[float, ...]
    limits: tuple[float, ...] = ()

    def objective(self, queues: Sequence[float], V: float) -> float:
        """Drift-plus-penalty V * T + sum_k Q_k c_k / Cbar_k (queues in budget units)."""
        return V * self.batch_time + float(budget_weights(self.limits, queues) @ np.asarray(self.costs))


def evaluate(plan: Plan, state: SlotState, coeffs: Sequence[GroupCoeffs] | None = None) -> Evaluation:
    """Batch time, per-group times, sync time and costs of any structurally valid plan
    (feasibility is Plan.validate's job). coeffs: the groups' GroupCoeffs, if already known."""
    if coeffs is None:
        coeffs = [group_coeffs(state, g.devices, g.cuts) for g in plan.groups]
    times = tuple(c.time(g.share) for c, g in zip(coeffs, plan.groups))
    ts = sync_time(state, [(g.devices, g.cuts) for g in plan.groups])
    T = max(times) + ts
    costs = cost_coeffs(state, coeffs).costs(T, plan.shares)
    return Evaluation(T, times, ts, tuple(float(x) for x in costs), tuple(b.limit for b in state.budgets))


def lower_bound_time(state: SlotState) -> float:
    """B * sum_l (f_l + g_l) / sum of available speeds: no plan is faster (FLOP-based)."""
    s = float(state.speed[state.available.astype(bool)].sum())
    return state.workload.batch * state.workload.total_flops / s if s > 0 else float("inf")
