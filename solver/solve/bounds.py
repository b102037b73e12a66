"""A lower bound on the slot objective of every plan (compute- and price-based), for the
certified gap (objective - bound) / objective that every SlotResult reports.

Every plan's objective is W (z + T_sync + migration / iterations) + q.b + sum_k Q_k F_k with
W = V + sum_k Q_k R_k; T_sync, migration, q (busy energy, egress per sample) and F are >= 0
when the queue weights Q are (queues never go negative). So objective >= W z.

Throughput: with w_{d,l} the forward + backward seconds per sample of layer l on device d and
any positive reference profile ref_l, let r_d = min_l w_{d,l} / ref_l. A group's stage j on
device d_j holding layers S_j takes at least F_j + G_j >= r_{d_j} ref(S_j) per sample, and every
schedule's per-sample time alpha is at least max_j (F_j + G_j) (each stage runs its forward and
backward pass on every sample), so alpha >= ref(all) / sum_j 1 / r_{d_j} and the batch time of
any grouping of a device set U is z >= B / Theta(U), Theta(U) = sum_{d in U} theta_d,
theta_d = 1 / (r_d ref(all)) samples per second (for FLOP-based times r_d ref(all) is the
device's whole-model time, so the bound is exact for one pipeline-free device). Where groups
may train at other micro-batch sizes, theta_d is the largest over those sizes.

Price: R_k >= sum_{d in U} (price_d for money budgets, idle power_d for energy budgets), so
W >= V + sum_{d in U} w_d. Then objective >= min over non-empty U of
(V + sum_U w_d) B / sum_U theta_d, a ratio minimised by a prefix of the devices in increasing
w_d / theta_d (include d exactly when w_d / theta_d is below the optimal ratio).

With one available device the only plan is the whole model on it with the whole batch, and
the bound is that plan's objective without migration (so it is exact unless it migrates).
Memory, links and sync are ignored (a relaxation), so the bound can be far below the optimum
when they bind.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..model.state import SlotState


def device_throughputs(state: SlotState, devices: Sequence[int]) -> np.ndarray:
    """theta_d (samples per second) of the module docstring for each of `devices`."""
    d = np.asarray(devices, dtype=int)
    best = np.zeros(len(d))
    for u in state.workload.micro_batch_options():
        st = state.at_micro_batch(u)
        w = np.diff(st.fwd_prefix[d] + st.bwd_prefix[d], axis=1)          # (|d|, L) seconds
        ref = w.mean(axis=0)
        pos = ref > 0
        if not pos.any():
            return np.full(len(d), math.inf)
        r = (w[:, pos] / ref[pos]).min(axis=1)
        theta = np.where(r > 0, 1.0 / np.maximum(r * ref.sum(), 1e-300), math.inf)
        best = np.maximum(best, theta)
    return best


def price_weights(state: SlotState, Q: np.ndarray) -> np.ndarray:
    """w_d per available-or-not device (per second): sum of Q_k price_d over money budgets
    and Q_k idle power_d over energy budgets (device-energy budgets count 0)."""
    w = np.zeros(state.n)
    for k, b in enumerate(state.budgets):
        if Q[k] > 0 and b.kind == "money":
            w += Q[k] * np.asarray(state.price, dtype=float)
        elif Q[k] > 0 and b.kind == "energy":
            w += Q[k] * np.array([dev.idle_power_w for dev in state.devices])
    return w


def compute_bound(state: SlotState, Q: np.ndarray, V: float) -> float:
    """min over non-empty device sets U of (V + sum_U w_d) B / sum_U theta_d (module doc);
    -inf when a queue weight is negative (no bound is claimed), 0 when no device is available."""
    Q = np.asarray(Q, dtype=float)
    if np.any(Q < 0) or V < 0:
        return -math.inf
    idx = list(state.available_indices)
    if not idx:
        return 0.0
    theta = device_throughputs(state, idx)
    if np.any(np.isinf(theta)):
        return 0.0
    w = price_weights(state, Q)[idx]
    order = np.argsort(w / theta, kind="stable")
    num = V + np.cumsum(w[order])
    den = np.cumsum(theta[order])
    return float(np.min(num * state.workload.batch / den)) * (1 - 1e-12)     # float slack


def slot_lower_bound(state: SlotState, Q: np.ndarray, V: float, single_plan_objective: float | None = None
                     ) -> float:
    """The slot's lower bound: compute_bound, or with one available device the objective of
    its only plan without migration (`single_plan_objective`, from the caller's Scorer; inf
    when it does not fit), whichever is larger."""
    lb = compute_bound(state, Q, V)
    if single_plan_objective is not None and len(state.available_indices) == 1:
        lb = max(lb, float(single_plan_objective))
    return lb
