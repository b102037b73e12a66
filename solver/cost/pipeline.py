"""Pipeline time of one ordered, cut group: stage times, the exact GPipe form, the 1F1B bound.

Its time for a share of b samples (a multiple of the micro-batch u) under a synchronous GPipe
schedule is exactly T_g(b) = alpha_g * b + beta_g (seconds). 1F1B has no such exact form; the
planner uses the upper bound u (C + (n - 1)(max F + max G + 2 max lam)), C = sum F + sum G +
2 sum lam, n = b / u, which is again alpha * b + beta (`one_f_one_b_coeffs`). Recomputation
adds each stage's forward to its backward. `cost.simulator` is the event simulator all of
this is tested against (docs/MODEL.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
from numba import njit

from ..model.memory import MEM_RTOL, SCHEDULES, StageMemory, stage_memory, stage_share_cap
from ..model.network import fitted_bandwidth, nic_limits
from ..model.state import SlotState


def stage_times(state: SlotState, devices: Sequence[int], cuts: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample forward seconds F_j, backward seconds G_j of each stage, and the
    one-way boundary transfer seconds lambda_j (k-1 of them; latency spread over u). With a
    state.network, the boundaries of the group run at once: bandwidth at the micro-batch's
    message size, and a server's NIC shared by its devices that send across servers."""
    d = np.asarray(devices, dtype=int)
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    F = state.fwd_prefix[d, c] - state.fwd_prefix[d, start]
    G = state.bwd_prefix[d, c] - state.bwd_prefix[d, start]
    if len(d) > 1:
        o = state.workload.out_bytes[c[:-1] - 1]
        u = state.workload.micro_batch
        if state.network is None:
            lam = o / state.bandwidth[d[:-1], d[1:]] + state.latency[d[:-1], d[1:]] / u
        else:
            lam = _boundary_seconds(state, d, o, u)
    else:
        lam = np.zeros(0)
    return F, G, lam


def _boundary_seconds(state: SlotState, d: np.ndarray, o: np.ndarray, u: int) -> np.ndarray:
    """stage_times' lambda under a network model: effective_bandwidth, its bandwidth fits read
    from _fitted_matrix (up to MATRIX_DEVICES devices; above, fitted per call), then the NIC
    limits (the same floats: the fit is element-wise)."""
    net = state.network
    src, dst = d[:-1], d[1:]
    msg = o * u
    bw = np.asarray(state.bandwidth[src, dst], dtype=float)
    if net.fit is not None and state.n > MATRIX_DEVICES:
        bw = fitted_bandwidth(net.fit[src, dst], bw, msg)
    elif net.fit is not None:
        sizes = msg.tolist()
        if len(set(sizes)) == 1:
            bw = _fitted_matrix(state, sizes[0])[src, dst]
        else:
            bw = np.array([_fitted_matrix(state, m)[a, b] for a, b, m in zip(src.tolist(), dst.tolist(), sizes)])
    bw = nic_limits(net, bw, src, dst)
    return o / bw + state.latency[src, dst] / u


MATRIX_DEVICES = 256
"""Most devices for which _boundary_seconds keeps a whole (n, n) fitted-bandwidth matrix per
message size (each n^2 entries: about 1 ms at 256 devices on this machine)."""


def _fitted_matrix(state: SlotState, message_bytes: float) -> np.ndarray:
    """(n, n) fitted bandwidth of every pair at one message size (bytes/s; model.network's
    fitted_bandwidth), kept for the state and its micro-batch copies: a model's boundaries
    send few distinct sizes."""
    memo = state.link_memo("_fitted_bandwidth")
    got = memo.get(message_bytes)
    if got is None:
        bw = np.asarray(state.bandwidth, dtype=float)
        got = memo[message_bytes] = fitted_bandwidth(state.network.fit, bw, np.full(bw.shape, message_bytes))
        got.flags.writeable = False
    return got


def gpipe_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of the exact GPipe group time alpha*b + beta."""
    lmax = float(lam.max()) if len(lam) else 0.0
    alpha = max(float(F.max()), lmax) + max(float(G.max()), lmax)
    beta = u * (float(F.sum()) + float(G.sum()) + 2.0 * float(lam.sum())) - u * alpha
    return alpha, beta


@njit(cache=True, error_model="numpy")
def plain_gpipe_rows(fwd_prefix: np.ndarray, bwd_prefix: np.ndarray, out_bytes: np.ndarray, bandwidth: np.ndarray,
                     latency: np.ndarray, u: int, d: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(p, 2) gpipe_coeffs (alpha, beta) of the ordered group d (k >= 2) at each cut set of C
    (p, k) on a state without a network model, in one compiled call (_plain_stages and
    _pipeline_ab, group_coeffs' own kernels: the same floats)."""
    out = np.empty((C.shape[0], 2))
    for i in range(C.shape[0]):
        F, G, lam = _plain_stages(fwd_prefix, bwd_prefix, out_bytes, bandwidth, latency, u, d, C[i])
        out[i, 0], out[i, 1] = _pipeline_ab(F, G, lam, u, False)
    return out


def one_f_one_b_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of the 1F1B upper bound alpha*b + beta:
    alpha = max F + max G + 2 max lam, beta = u (sum F + sum G + 2 sum lam) - u alpha."""
    lmax = float(lam.max()) if len(lam) else 0.0
    alpha = float(F.max()) + float(G.max()) + 2.0 * lmax
    beta = u * (float(F.sum()) + float(G.sum()) + 2.0 * float(lam.sum())) - u * alpha
    return alpha, beta


def schedule_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int, schedule: str = "gpipe",
                    recompute: bool = False) -> tuple[float, float]:
    """(alpha, beta) of a schedule: GPipe's exact form or 1F1B's upper bound; recomputation
    runs the forward again in the backward (G + F)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
    Gr = G + F if recompute else G
    return (gpipe_coeffs if schedule == "gpipe" else one_f_one_b_coeffs)(F, Gr, lam, u)


@dataclass(frozen=True)
class GroupCoeffs:
    """Numbers of one ordered, cut group in one slot.

    alpha: seconds per sample; beta: seconds of fill and drain; cap: largest share
    (samples, a multiple of u) that fits in memory, 0 if not even one micro-batch fits,
    or a huge number when memory does not bind; busy_j_per_sample: per stage, joules
    per sample above idle ((Pbusy - P0) * (F_j + G_j), plus F_j again under recomputation);
    schedule, recompute: as in the plan's Group (`exact` is False where alpha * b + beta is
    the 1F1B upper bound rather than the exact time).
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
    schedule: str = "gpipe"
    recompute: bool = False

    @property
    def exact(self) -> bool:
        return self.schedule == "gpipe" or len(self.devices) == 1

    def time(self, share: int) -> float:
        return self.alpha * share + self.beta

    @cached_property
    def busy_j(self) -> float:
        """Joules per sample above idle of the whole group (the sum of busy_j_per_sample)."""
        return float(self.busy_j_per_sample.sum())


def group_coeffs(state: SlotState, devices: Sequence[int], cuts: Sequence[int],
                 schedule: str = "gpipe", recompute: bool = False,
                 times: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 memory: StageMemory | None = None) -> GroupCoeffs:
    """GroupCoeffs of an ordered, cut group; times and memory: its stage_times and
    model.memory.stage_memory when the caller has them (the same arrays; they do not depend
    on the schedule)."""
    if state.network is None and state.tp is None and schedule in SCHEDULES and len(devices) == len(cuts) > 0:
        gc = _plain_group_coeffs(state, devices, cuts, schedule, recompute)
        if gc is not None:
            return gc
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
    F, G, lam = stage_times(state, devices, cuts) if times is None else times
    P, H, M, I = stage_memory(state, devices, cuts) if memory is None else memory
    wl = state.workload
    ab, busy, cap = _schedule_numbers(np.ascontiguousarray(F, dtype=float), np.ascontiguousarray(G, dtype=float),
                                      np.ascontiguousarray(lam, dtype=float), int(wl.micro_batch),
                                      schedule == "1f1b", bool(recompute),
                                      state.extra_power_w[np.asarray(devices, dtype=np.int64)], P, H, M, I,
                                      float(wl.opt_factor))
    return GroupCoeffs(_int_tuple(devices), _int_tuple(cuts), float(ab[0]), float(ab[1]), int(cap), F, G, lam, busy,
                       schedule, bool(recompute))


def _plain_group_coeffs(state: SlotState, devices: Sequence[int], cuts: Sequence[int], schedule: str,
                        recompute: bool) -> GroupCoeffs | None:
    """group_coeffs on a state without a network model or TP, in one compiled call (the same
    numbers float for float: the same operations in the same order, sums as numpy's pairwise
    sum); None where an index is out of range (the general path raises)."""
    wl = state.workload
    d = np.asarray(devices, dtype=np.int64)
    c = np.asarray(cuts, dtype=np.int64)
    F, G, lam, busy, ab, cap = _coeffs_kernel(
        state.fwd_prefix, state.bwd_prefix, wl.out_bytes, state.bandwidth, state.latency, int(wl.micro_batch),
        d, c, schedule == "1f1b", bool(recompute), state.extra_power_w, state.param_prefix, state.stash_prefix,
        state.memory_bytes, float(wl.opt_factor), float(wl.input_bytes), 1.0 + MEM_RTOL)
    if cap == -2:
        return None
    return GroupCoeffs(_int_tuple(devices), _int_tuple(cuts), float(ab[0]), float(ab[1]), int(cap), F, G, lam, busy,
                       schedule, bool(recompute))


def _int_tuple(x: Sequence[int]) -> tuple[int, ...]:
    """x as a tuple of Python ints (x itself when it is one already)."""
    if type(x) is tuple:
        for v in x:
            if type(v) is not int:
                break
        else:
            return x
    return tuple(int(v) for v in x)


def float_sum(x: Sequence[float]) -> float:
    """numpy's float64 sum of a short sequence (the same float: pairwise, as npsum), in plain Python."""
    n = len(x)
    if n == 0:
        return 0.0
    if n < 8:
        r = -0.0
        for v in x:
            r += v
        return r
    if n > 128:
        return float(np.sum(np.asarray(x, dtype=float)))
    r = list(x[:8])
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += x[i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for v in x[i:]:
        res += v
    return res


@njit(cache=True, error_model="numpy")
def npsum(a: np.ndarray) -> float:
    """numpy's float64 sum of a 1-D array (pairwise: 8 running sums per block of 128)."""
    n = a.shape[0]
    if n < 8:
        r = -0.0
        for i in range(n):
            r += a[i]
        return r
    if n <= 128:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
        i = 8
        while i < n - n % 8:
            r0 += a[i]
            r1 += a[i + 1]
            r2 += a[i + 2]
            r3 += a[i + 3]
            r4 += a[i + 4]
            r5 += a[i + 5]
            r6 += a[i + 6]
            r7 += a[i + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += a[i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return npsum(a[:n2]) + npsum(a[n2:])


@njit(cache=True, error_model="numpy")
def _pipeline_ab(F, Gr, lam, u, one_f_one_b):
    """(alpha, beta) of schedule_coeffs from the stage numbers (Gr: the backward side, G + F
    under recomputation), as gpipe_coeffs and one_f_one_b_coeffs compute them."""
    lmax = lam.max() if lam.shape[0] > 0 else 0.0
    if one_f_one_b:
        alpha = F.max() + Gr.max() + 2.0 * lmax
    else:
        alpha = max(F.max(), lmax) + max(Gr.max(), lmax)
    return alpha, u * (npsum(F) + npsum(Gr) + 2.0 * npsum(lam)) - u * alpha


@njit(cache=True, error_model="numpy")
def _plain_stages(fwd_prefix, bwd_prefix, out_bytes, bandwidth, latency, u, d, c):
    """(F, G, lam) of stage_times on a state without a network model (indices already valid)."""
    k = d.shape[0]
    F = np.empty(k)
    G = np.empty(k)
    s = 0
    for j in range(k):
        F[j] = fwd_prefix[d[j], c[j]] - fwd_prefix[d[j], s]
        G[j] = bwd_prefix[d[j], c[j]] - bwd_prefix[d[j], s]
        s = c[j]
    lam = np.empty(k - 1)
    for j in range(k - 1):
        lam[j] = out_bytes[c[j] - 1] / bandwidth[d[j], d[j + 1]] + latency[d[j], d[j + 1]] / u
    return F, G, lam


@njit(cache=True, error_model="numpy")
def _schedule_numbers(F, G, lam, u, one_f_one_b, recompute, w, P, H, M, I, kopt):
    """((alpha, beta), busy joules per sample per stage, share cap) of an ordered, cut group
    from its stage numbers (stage_times; model.memory.stage_memory, M with MEM_RTOL; w: each
    stage device's busy watts above idle): schedule_coeffs, the busy energy and
    model.memory.share_cap in one compiled call, the same floats as the numpy forms."""
    k = F.shape[0]
    alpha, beta = _pipeline_ab(F, G + F if recompute else G, lam, u, one_f_one_b)
    busy = np.empty(k)
    for j in range(k):
        busy[j] = w[j] * (F[j] + G[j] + F[j] if recompute else F[j] + G[j])
    cap = stage_share_cap(kopt, u, P, H, M, I if recompute else H, recompute, one_f_one_b)
    return np.array([alpha, beta]), busy, cap


@njit(cache=True, error_model="numpy")
def _coeffs_kernel(fwd_prefix, bwd_prefix, out_bytes, bandwidth, latency, u, d, c, one_f_one_b, recompute,
                   extra_w, pp, sp, mem, kopt, input_bytes, rtol1):
    """(F, G, lam, busy, (alpha, beta), cap) of group_coeffs: stage_times on a state without a
    network model, then _schedule_numbers; cap -2 where an index is out of range (the
    general path then raises)."""
    k = d.shape[0]
    n, L1 = fwd_prefix.shape
    for j in range(k):
        if not (0 <= d[j] < n and 0 <= c[j] < L1 and (j == 0 or c[j - 1] >= 1)):
            return np.empty(0), np.empty(0), np.empty(0), np.empty(0), np.empty(2), -2
    F, G, lam = _plain_stages(fwd_prefix, bwd_prefix, out_bytes, bandwidth, latency, u, d, c)
    P = np.empty(k)
    H = np.empty(k)
    I = np.empty(k)
    s = 0
    for j in range(k):
        P[j] = pp[c[j]] - pp[s]
        H[j] = sp[c[j]] - sp[s]
        I[j] = input_bytes if j == 0 else out_bytes[c[j - 1] - 1]
        s = c[j]
    M = np.empty(k)
    w = np.empty(k)
    for j in range(k):
        M[j] = mem[d[j]] * rtol1
        w[j] = extra_w[d[j]]
    ab, busy, cap = _schedule_numbers(F, G, lam, u, one_f_one_b, recompute, w, P, H, M, I, kopt)
    return F, G, lam, busy, ab, cap
