"""Compiled integer shares of one structure (`subproblems.shares`), in micro-batch units.

`integer_shares` runs the whole exact path of `solve_shares` for groups of one micro-batch
size: the capped water fill's floor, the min-max hand-out from it and, where the groups' costs
per sample differ, the exact search over the breakpoints z (module docstring of
`subproblems.shares`). One compiled call instead of some fifty numpy calls on arrays of two to
sixteen entries, whose call overhead was most of the time.

The breakpoint search evaluates the candidate z in increasing order and stops once
W z + (least cost of any allocation) is above the best value so far; of the rows it has
evaluated, the one chosen is the first (smallest z) whose value is within the relative 1e-12 of
their least. The numpy form it replaced evaluated a window that a convex lower bound showed to
hold every row within that tolerance; rows outside that window are above it, so both choose
the same row.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .water import merge_sorted, water_fill_kernel

TOL_N = 1e-9
"""Slack on "how many micro-batches fit under z" (float noise in (z - beta) / a)."""


@njit(cache=True)
def hand_out(a: np.ndarray, c: np.ndarray, capn: np.ndarray, N: int, n: np.ndarray) -> None:
    """Min-max hand-out in place: from n (micro-batches per group) give the remaining of N
    micro-batches one at a time to the group whose time a n + c after receiving one is least
    (ties: lowest index), never above capn; where n holds more than N, take them back one at a
    time from the group whose time is largest (ties: lowest index), never below one. a
    seconds per micro-batch, c seconds. Exactly optimal for the largest time when n holds only
    micro-batches no later than the optimum's. Needs sum(capn) >= N."""
    m = a.shape[0]
    left = N - n.sum()
    while left > 0:
        g_best, t_best = -1, np.inf
        for g in range(m):
            if n[g] < capn[g]:
                t = a[g] * (n[g] + 1) + c[g]
                if t < t_best:
                    g_best, t_best = g, t
        n[g_best] += 1
        left -= 1
    while left < 0:
        g_best, t_best = -1, -np.inf
        for g in range(m):
            if n[g] > 1:
                t = a[g] * n[g] + c[g]
                if t > t_best:
                    g_best, t_best = g, t
        n[g_best] -= 1
        left += 1


@njit(cache=True)
def _stable_order(key: np.ndarray) -> np.ndarray:
    """Indices sorting key ascending, equal keys in index order (insertion sort: m is small)."""
    m = key.shape[0]
    order = np.arange(m)
    for i in range(1, m):
        j = i
        while j > 0 and key[order[j - 1]] > key[order[j]]:
            order[j - 1], order[j] = order[j], order[j - 1]
            j -= 1
    return order


@njit(cache=True)
def _fill(x: np.ndarray, extra: int, out: np.ndarray) -> None:
    """out[j] = what is left of `extra` after x[0..j-1], at most x[j] and at least 0."""
    rem = float(extra)
    for j in range(x.shape[0]):
        give = min(max(rem, 0.0), x[j])
        out[j] = give
        rem -= x[j]


@njit(cache=True)
def _row(z: float, a: np.ndarray, c: np.ndarray, cap: np.ndarray, k: np.ndarray, N: int, W: float,
         k_sum: float, room: np.ndarray, alloc: np.ndarray) -> float:
    """The cheapest allocation whose every group's time is at most z (alloc: micro-batches
    beyond each group's first, groups in cost order) and its value W z + cost; inf when
    none."""
    m = a.shape[0]
    total = 0.0
    ok = True
    for j in range(m):
        hi = min(np.floor(min((z - c[j]) / a[j], cap[j]) + TOL_N), cap[j])
        ok = ok and hi >= 1 - TOL_N
        total += hi
        room[j] = max(hi - 1.0, 0.0)
    if not (ok and total >= N - TOL_N):
        return np.inf
    _fill(room, N - m, alloc)
    cost = 0.0
    for j in range(m):
        cost += alloc[j] * k[j]
    return W * z + cost + k_sum


@njit(cache=True)
def _tol(v: float) -> float:
    return 1e-12 * max(1.0, abs(v))


@njit(cache=True)
def exact_with_costs(a: np.ndarray, c: np.ndarray, capn: np.ndarray, N: int, W: float, cost: np.ndarray,
                     n0: np.ndarray) -> np.ndarray:
    """The least W z + sum_g cost_g n_g over integer n (1 <= n_g <= capn_g, sum N, every
    a_g n_g + c_g <= z): a seconds per micro-batch, c seconds, cost per micro-batch, n0 a
    min-max allocation. The optimum z is a group's time at some n, between n0's z0 and the
    z_hi where the cost stops falling or W z alone outweighs the saving; ties of value (within
    a relative 1e-12) go to the smaller z. Returns micro-batches per group."""
    m = a.shape[0]
    extra = N - m
    order = _stable_order(cost)
    a_s, c_s, k_s = a[order], c[order], cost[order]
    cap_s = capn[order].astype(np.float64)
    z0 = -np.inf
    cost0 = 0.0
    for g in range(m):
        z0 = max(z0, a[g] * n0[g] + c[g])
        cost0 += cost[g] * n0[g]
    cheap = np.empty(m)
    _fill(cap_s - 1.0, extra, cheap)
    cost_min, z_hi, k_sum = 0.0, -np.inf, 0.0
    for j in range(m):
        cost_min += k_s[j] * (1.0 + cheap[j])
        z_hi = max(z_hi, a_s[j] * (1.0 + cheap[j]) + c_s[j])
        k_sum += k_s[j]
    if W > 0:
        z_hi = min(z_hi, z0 + (cost0 - cost_min) / W + 1e-12 * abs(z0))
    count = 1
    for j in range(m):
        lo = max(1.0, np.floor((z0 - c_s[j]) / a_s[j] - TOL_N))
        hi = min(cap_s[j], np.floor((z_hi - c_s[j]) / a_s[j] + TOL_N))
        count += max(int(hi - lo) + 1, 0)
    raw = np.empty(count)
    raw[0] = z0
    p = 1
    for j in range(m):
        lo = max(1.0, np.floor((z0 - c_s[j]) / a_s[j] - TOL_N))
        hi = min(cap_s[j], np.floor((z_hi - c_s[j]) / a_s[j] + TOL_N))
        n = lo
        while n <= hi:
            z = a_s[j] * n + c_s[j]
            if z > z0 and z <= z_hi:
                raw[p] = z
                p += 1
            n += 1.0
    zs = merge_sorted(raw, p)
    room, alloc = np.empty(m), np.empty(m)
    f = np.empty(p)
    best = np.inf
    used = 0
    for i in range(p):
        if i > 0 and zs[i] == zs[i - 1]:
            f[i] = np.inf
            used += 1
            continue
        if W * zs[i] + cost_min > best + _tol(best):
            break       # no allocation at this z or later can come within the tolerance
        f[i] = _row(zs[i], a_s, c_s, cap_s, k_s, N, W, k_sum, room, alloc)
        best = min(best, f[i])
        used += 1
    pick = 0
    for i in range(used):
        if f[i] <= best + _tol(best):
            pick = i
            break
    _row(zs[pick], a_s, c_s, cap_s, k_s, N, W, k_sum, room, alloc)
    out = np.empty(m, dtype=np.int64)
    for j in range(m):
        out[order[j]] = 1 + np.int64(alloc[j])
    return out


@njit(cache=True)
def valid_inputs(alpha: np.ndarray, c: np.ndarray, q: np.ndarray) -> bool:
    """Whether alpha is finite and > 0 and c and q are finite, everywhere."""
    for g in range(alpha.shape[0]):
        if not (np.isfinite(alpha[g]) and alpha[g] > 0 and np.isfinite(c[g]) and np.isfinite(q[g])):
            return False
    return True


@njit(cache=True, error_model="numpy")
def integer_shares(alpha: np.ndarray, c: np.ndarray, capn: np.ndarray, N: int, u: int, W: float,
                   q: np.ndarray) -> tuple[np.ndarray, float, float, bool]:
    """(micro-batches per group, their largest group time alpha_g u n_g + c_g in seconds, the
    continuous min-max z in seconds, whether q is the same for every group) of solve_shares'
    exact path for m >= 2 groups of micro-batch size u: the water fill over
    u <= b_g <= capn_g u, its floor handed out to N micro-batches (hand_out), and, where q (per
    sample) differs between groups, exact_with_costs from there. alpha seconds per sample; the
    inputs are checked by solve_shares (sum(capn) >= N >= m, capn >= 1, alpha > 0, all finite)."""
    m = alpha.shape[0]
    lo = np.full(m, float(u))
    caps = (capn * u).astype(np.float64)
    _, z_lp, _, _ = water_fill_kernel(alpha, c, float(N * u), lo, m * float(u), caps, True)
    au = alpha * u
    n = np.empty(m, dtype=np.int64)
    for g in range(m):
        n[g] = min(max(np.int64(np.floor((z_lp - c[g]) / au[g] - TOL_N)), 1), capn[g])
    hand_out(au, c, capn, N, n)
    same_q = True
    for g in range(1, m):
        same_q = same_q and q[g] == q[0]
    if not same_q:
        n = exact_with_costs(au, c, capn, N, W, q * u, n)
    z = -np.inf
    for g in range(m):
        z = max(z, alpha[g] * (n[g] * u) + c[g])
    return n, z, z_lp, same_q
