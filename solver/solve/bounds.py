"""A lower bound on the slot objective of every plan (compute- and price-based), for the
certified gap (objective - bound) / objective that every SlotResult reports.

Every plan's objective is W (z + T_sync + migration / iterations) + q.b + sum_k Q_k F_k with
W = V + sum_k Q_k R_k; T_sync, migration, q (busy energy, egress per sample) and F are >= 0
when the queue weights Q are (queues never go negative). So objective >= W z.

Throughput: with w_{d,l} the forward + backward seconds per sample of layer l on device d and
any positive reference profile ref_l (the bound is valid for each; `slot_lower_bound` takes the
best over the mean profile and each distinct device profile, `reference_profiles`), let r_d = min_l w_{d,l} / ref_l. A group's stage j on
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

Memory (`memory_bound`): a group of k >= 2 stages pays fill and drain. Its time for a share of
b samples is alpha b + beta with beta = u (sum F + sum G + 2 sum lam) - u alpha under either
schedule, so T_g >= alpha (b - u) + u W with W = sum_j (F_j + G_j) >= 1 / theta_max(g) (the
whole model on the group's fastest device at best), and with alpha >= 1 / theta_g:
b_g <= theta_g T - u (theta_g / theta_max(g) - 1). Summed over groups,
T >= (B + u sum_g (theta_g / theta_max(g) - 1)) / Theta(U). A device that holds the whole
model with one micro-batch at no allowed micro-batch size (a non-holder) is in a group of
k >= 2, whose term is at least (k - 1) rho >= rho h_g / 2 with h_g its non-holders and
rho = min theta / max theta over the available devices. So a set U with j non-holders has
objective >= (V + sum_U w_d) (B + u_min rho j / 2) / Theta(U), and the bound is the least over j
of (B + u_min rho j / 2) times the least ratio (V + sum_U w_d) / Theta(U) over sets with at most j
non-holders (Dinkelbach's iteration, exact). With no non-holder it is the compute bound.

Sync (`sync_bound`, up to SYNC_BOUND_UP_TO devices): with s devices in m groups, the fill and
drain terms give z >= (B + u_min rho (s - m)) / Theta(U) (every group of k devices pays at least
(k - 1) rho), and with m >= 2 groups some group has at most s / m devices, one of which holds at
least m / s of the parameter bytes P and all-reduces them: T_sync >= 2 (m - 1) (P / (s bw_max)
+ lat_min), bw_max the fastest link among the available devices (times the TP degrees) and
lat_min the least latency. Both are linear in m, so m = 1, 2 and the most groups are the only
candidates; the bound is the least over s of (B + u_min rho (s - m)) R_s + (V + the s least w_d)
T_sync(m), R_s the least (V + sum_U w_d) / Theta(U) over sets of exactly s devices (Dinkelbach).
It is combined with the memory bound by taking the larger.

Busy energy (`busy_bound`): q.b >= B sum_k Q_k min_d extra_power_d / theta_d over energy
budgets k (a stage on device d spends extra_power_d (F_j + G_j) >= extra_power_d r_d ref(S_j)
joules per sample above idle, recomputation only adds), whatever the devices and shares; it
is added to the memory bound.

With one available device the only plan is the whole model on it with the whole batch, and
the bound is that plan's objective without migration (so it is exact unless it migrates).
Links and sync are ignored (a relaxation), so the bound can be far below the optimum when
they bind.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..model.memory import MEM_RTOL, share_cap
from ..model.state import SlotState
from .ratio_kernel import exact_ratio, least_ratio


MAX_PROFILES = 8
"""Most per-device reference profiles the slot bound tries besides the mean."""


def device_throughputs(state: SlotState, devices: Sequence[int], profile: int | None = None) -> np.ndarray:
    """theta_d (samples per second) of the module docstring for each of `devices`, with the
    reference profile ref the mean over `devices` (profile None) or the per-layer times of
    devices[profile] at each micro-batch size."""
    key = (tuple(int(x) for x in devices), profile)
    known = state.__dict__.setdefault("_device_throughputs", {})
    if key not in known:
        known[key] = _device_throughputs(state, key[0], profile)
        known[key].flags.writeable = False
    return known[key]


def _layer_work(state: SlotState, devices: tuple[int, ...], u: int) -> np.ndarray:
    """(|devices|, L) forward + backward seconds per sample of each layer on each device at
    micro-batch size u (kept on the state: every reference profile reads the same)."""
    known = state.__dict__.setdefault("_layer_work", {})
    key = (devices, u)
    if key not in known:
        st = state.at_micro_batch(u)
        d = np.asarray(devices, dtype=int)
        known[key] = np.diff(st.fwd_prefix[d] + st.bwd_prefix[d], axis=1)
        known[key].flags.writeable = False
    return known[key]


def _device_throughputs(state: SlotState, devices: tuple[int, ...], profile: int | None) -> np.ndarray:
    best = np.zeros(len(devices))
    for u in state.workload.micro_batch_options():
        w = _layer_work(state, devices, u)                                  # (|d|, L) seconds
        ref = w.mean(axis=0) if profile is None else w[profile]
        pos = ref > 0
        if not pos.any():
            return np.full(len(devices), math.inf)
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


def _inputs(state: SlotState, Q: np.ndarray, V: float, profile: int | None
            ) -> float | tuple[list[int], np.ndarray, np.ndarray]:
    """(available devices, their throughputs theta, their price weights w) for the bounds, or
    the bound itself where it is trivial: -inf when a queue weight or V is negative (no bound
    is claimed), 0 when no device is available or one has infinite throughput."""
    Q = np.asarray(Q, dtype=float)
    if np.any(Q < 0) or V < 0:
        return -math.inf
    idx = list(state.available_indices)
    if not idx:
        return 0.0
    theta = device_throughputs(state, idx, profile)
    if np.any(np.isinf(theta)):
        return 0.0
    return idx, theta, price_weights(state, Q)[idx]


def compute_bound(state: SlotState, Q: np.ndarray, V: float, profile: int | None = None) -> float:
    """min over non-empty device sets U of (V + sum_U w_d) B / sum_U theta_d (module doc);
    -inf when a queue weight is negative (no bound is claimed), 0 when no device is available."""
    got = _inputs(state, Q, V, profile)
    if isinstance(got, float):
        return got
    idx, theta, w = got
    order = np.argsort(w / theta, kind="stable")
    num = V + np.cumsum(w[order])
    den = np.cumsum(theta[order])
    return float(np.min(num * state.workload.batch / den)) * (1 - 1e-12)     # float slack


def holders_mask(state: SlotState, devices: Sequence[int]) -> np.ndarray:
    """holds_alone for each of `devices`, vectorised (share_cap's one-stage rule); kept on the
    state per device tuple (read-only)."""
    known = state.__dict__.setdefault("_holders_mask", {})
    key = tuple(int(x) for x in devices)
    if key not in known:
        known[key] = _holders_mask(state, key)
        known[key].flags.writeable = False
    return known[key]


def _holders_mask(state: SlotState, devices: tuple[int, ...]) -> np.ndarray:
    d = np.asarray(devices, dtype=int)
    out = np.zeros(len(d), dtype=bool)
    for u in state.workload.micro_batch_options():
        st = state.at_micro_batch(u)
        wl = st.workload
        deg = np.array([st.degree(int(i)) for i in d])
        P, H = np.empty(len(d)), np.empty(len(d))
        for t in set(deg.tolist()):
            P[deg == t], H[deg == t] = st.param_prefix_at(t)[-1], st.stash_prefix_at(t)[-1]
        free = st.memory_bytes[d] * (1 + MEM_RTOL) - wl.opt_factor * P
        out |= (free >= 0) & (free >= u * H)
    return out


def holds_alone(state: SlotState, d: int) -> bool:
    """Device d holds the whole model with one micro-batch at some allowed micro-batch size."""
    L = state.workload.num_layers
    for u in state.workload.micro_batch_options():
        if share_cap(state.at_micro_batch(u), (d,), (L,)) >= u:
            return True
    return False


def _least_ratio(V: float, w: np.ndarray, theta: np.ndarray, holder: np.ndarray, j: int) -> float:
    """min over non-empty sets with at most j non-holders of (V + sum w) / sum theta
    (Dinkelbach's iteration, compiled: ratio_kernel.least_ratio)."""
    return float(least_ratio(float(V), np.ascontiguousarray(w, dtype=float), np.ascontiguousarray(theta, dtype=float),
                             np.ascontiguousarray(holder, dtype=np.bool_), int(j)))


def memory_bound(state: SlotState, Q: np.ndarray, V: float, profile: int | None = None) -> float:
    """The compute bound with the fill and drain that non-holders' pipelines must pay (module
    doc); -inf when a queue weight is negative, 0 when no device is available."""
    got = _inputs(state, Q, V, profile)
    if isinstance(got, float):
        return got
    idx, theta, w = got
    holder = holders_mask(state, idx)
    wl = state.workload
    c = min(wl.micro_batch_options()) * float(theta.min() / theta.max()) / 2.0
    nh = int((~holder).sum())
    floor = _least_ratio(V, w, theta, holder, nh)            # the least ratio of any set
    best = wl.batch * floor if nh == 0 else math.inf
    for j in range(nh):
        if (wl.batch + c * j) * floor >= best:
            break                                            # no larger j can do better
        best = min(best, (wl.batch + c * j) * _least_ratio(V, w, theta, holder, j))
    best = min(best, (wl.batch + c * nh) * floor)
    return best * (1 - 1e-12)        # float slack


SYNC_BOUND_UP_TO = 64
"""Most available devices for which sync_bound is computed (it costs one ratio search per s)."""


def _exact_ratio(V: float, w: np.ndarray, theta: np.ndarray, s: int, start: float | None = None) -> float:
    """min over sets of exactly s devices of (V + sum w) / sum theta (Dinkelbach's iteration,
    compiled: ratio_kernel.exact_ratio; `start`: a lambda to pick the first set by)."""
    return float(exact_ratio(float(V), np.ascontiguousarray(w, dtype=float), np.ascontiguousarray(theta, dtype=float),
                             int(s), 0.0 if start is None else float(start), start is not None))


def sync_bound(state: SlotState, Q: np.ndarray, V: float, profile: int | None = None) -> float:
    """The fill-and-drain and sync bound of the module doc; -inf when a queue weight is
    negative or above SYNC_BOUND_UP_TO available devices (no bound claimed), 0 when none is
    available."""
    if len(state.available_indices) > SYNC_BOUND_UP_TO:
        return -math.inf
    got = _inputs(state, Q, V, profile)
    if isinstance(got, float):
        return got
    idx, theta, w = got
    wl = state.workload
    u = min(wl.micro_batch_options())
    rho = float(theta.min() / theta.max())
    n = len(idx)
    P = float(state.param_prefix[-1])
    if n > 1:
        h = np.asarray(idx, dtype=int)
        bw = state.bandwidth[np.ix_(h, h)].astype(float)
        if state.tp is not None:
            t = np.asarray(state.tp, dtype=float)[h]
            bw = bw * np.minimum(t[:, None], t[None, :])
        off = ~np.eye(n, dtype=bool)
        bw_max, lat_min = float(bw[off].max()), float(state.latency[np.ix_(h, h)][off].min())
    w_sorted = np.cumsum(np.sort(w))
    best = math.inf
    R = None
    for size in range(1, n + 1):
        R = _exact_ratio(V, w, theta, size, R)
        m_max = min(size, wl.batch // u)
        for m in sorted({1, min(2, m_max), m_max}):
            val = (wl.batch + u * rho * (size - m)) * R
            if m >= 2 and P > 0:
                val += (V + float(w_sorted[size - 1])) * 2.0 * (m - 1) * (P / (size * bw_max) + lat_min)
            best = min(best, val)
    return best * (1 - 1e-12)        # float slack


def busy_bound(state: SlotState, Q: np.ndarray, profile: int | None = None) -> float:
    """B sum_k Q_k min_d extra_power_d / theta_d over energy budgets (module doc): a lower
    bound on q.b of every plan; 0 without energy queues or available devices."""
    Q = np.asarray(Q, dtype=float)
    idx = list(state.available_indices)
    qe = sum(float(Q[k]) for k, b in enumerate(state.budgets) if b.kind == "energy" and Q[k] > 0)
    if not idx or qe == 0:
        return 0.0
    theta = device_throughputs(state, idx, profile)
    per_sample = float(np.min(state.extra_power_w[idx] / theta))
    return state.workload.batch * qe * max(per_sample, 0.0) * (1 - 1e-12)


def reference_profiles(state: SlotState, most: int = MAX_PROFILES) -> list[int | None]:
    """The reference profiles the bound tries (positions in state.available_indices, None: the
    mean): the mean, then the first available device of each distinct per-layer shape (times
    over their sum, at the workload's micro-batch size), at most `most` of them."""
    idx = list(state.available_indices)
    if len(idx) <= 1:
        return [None]
    w = np.diff(state.fwd_prefix[idx] + state.bwd_prefix[idx], axis=1)
    tot = w.sum(axis=1, keepdims=True)
    shape = np.round(np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 0.0), 9) + 0.0   # -0.0 as 0.0
    first: dict[bytes, int] = {}
    for i, row in enumerate(shape):
        first.setdefault(row.tobytes(), i)
    if len(first) <= 1:
        return [None]
    return [None] + list(first.values())[:most]


def slot_lower_bound(state: SlotState, Q: np.ndarray, V: float, single_plan_objective: float | None = None
                     ) -> float:
    """The slot's lower bound: the largest over reference_profiles of the larger of
    memory_bound (>= compute_bound) and sync_bound, plus busy_bound, or with one available device
    the objective of its only plan without migration (`single_plan_objective`, from the
    caller's Scorer; inf when it does not fit), whichever is larger. Kept on the state per
    (Q, V, single_plan_objective): the TP and micro-batch screens ask for it before a search
    that asks again."""
    key = (np.asarray(Q, dtype=float).tobytes(), float(V), single_plan_objective)
    known = state.__dict__.setdefault("_lower_bounds", {})
    if key not in known:
        lb = -math.inf
        for p in reference_profiles(state):
            b = max(memory_bound(state, Q, V, p), sync_bound(state, Q, V, p))
            lb = max(lb, b + busy_bound(state, Q, p) if b > -math.inf else b)
        if single_plan_objective is not None and len(state.available_indices) == 1:
            lb = max(lb, float(single_plan_objective))
        known[key] = lb
    return known[key]
