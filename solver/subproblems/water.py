"""The capped water fill: the continuous min-max batch shares of a structure (the LP of
`subproblems.shares` without costs), in closed form and compiled.

The compiled form does numpy's float operations in numpy's order, its sums included
(`cost.pipeline.npsum`: numpy's pairwise summation), so it returns the same floats as the
vectorised numpy form it replaced; the search's answers depend on exact ties between candidates.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from numba import njit

from ..cost.pipeline import npsum


def water_fill(alpha: Sequence[float], beta: Sequence[float], B: float, lo: float = 0.0,
               cap: Optional[Sequence[float]] = None) -> tuple[np.ndarray, float]:
    """Closed form of min z s.t. alpha_g b_g + beta_g <= z, sum b = B, lo <= b_g <= cap_g
    (continuous b in samples; alpha s/sample > 0, beta s; lo samples, one number or one per
    group; returns (b, z seconds)).

    With lo = 0 and no cap this is classic water filling: b_g = max(0, (z - beta_g) / alpha_g),
    groups with beta_g >= z get 0 and do not count in z. With lo > 0 every group runs, so
    z >= max_g alpha_g lo + beta_g; when that bound binds, the slack is shared in proportion
    to each group's room above lo. Raises ValueError when sum of caps < B or m * lo > B.
    Compiled (`water_fill_kernel`): the float operations of numpy's vectorised form, its sums
    included (`cost.pipeline.npsum`), so the same numbers.
    """
    a = np.ascontiguousarray(alpha, dtype=float)
    c = np.ascontiguousarray(beta, dtype=float)
    m = len(a)
    if np.ndim(lo):             # one lower bound per group (groups at their own micro-batch)
        lo_v = np.ascontiguousarray(lo, dtype=float)
        lo_sum = float(lo_v.sum())
    else:
        lo_v = np.full(m, float(lo))
        lo_sum = m * float(lo)
    capped = cap is not None
    caps = np.ascontiguousarray(cap, dtype=float) if capped else np.empty(0)
    b, z, hi_sum, ok = water_fill_kernel(a, c, float(B), lo_v, lo_sum, caps, capped)
    if not ok:
        raise ValueError(f"water_fill: infeasible (sum lo={lo_sum}, sum cap={hi_sum}, B={B})")
    return b, z


@njit(cache=True)
def merge_sorted(x: np.ndarray, n: int) -> np.ndarray:
    """x[:n] in increasing order (bottom-up merge sort: numba compiles np.sort for seconds)."""
    a = x[:n].copy()
    b = np.empty(n)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if i < mid and (j >= hi or a[i] <= a[j]):
                    b[k] = a[i]
                    i += 1
                else:
                    b[k] = a[j]
                    j += 1
        a, b = b, a
        width *= 2
    return a


@njit(cache=True, error_model="numpy")      # a zero alpha divides as numpy does (inf), not raising
def water_fill_kernel(a: np.ndarray, c: np.ndarray, B: float, lo: np.ndarray, lo_sum: float, caps: np.ndarray,
                capped: bool) -> tuple[np.ndarray, float, float, bool]:
    """water_fill on arrays: (b, z, sum of caps, feasible)."""
    m = a.shape[0]
    hi = np.empty(m)
    for g in range(m):
        hi[g] = min(caps[g], B) if capped else np.inf
    hi_sum = npsum(hi[:m])
    bad = lo_sum > B * (1 + 1e-12) or hi_sum < B * (1 - 1e-12)
    for g in range(m):
        bad = bad or hi[g] < lo[g]
    if bad:
        return np.empty(0), np.nan, hi_sum, False
    raw = np.empty(2 * m)
    n = 0
    for g in range(m):
        raw[n] = a[g] * lo[g] + c[g]
        n += 1
    for g in range(m):
        if np.isfinite(hi[g]):
            raw[n] = a[g] * hi[g] + c[g]
            n += 1
    srt = merge_sorted(raw, n)
    pts = np.empty(n)
    P = 0
    for i in range(n):                      # np.unique
        if i == 0 or srt[i] != srt[i - 1]:
            pts[P] = srt[i]
            P += 1
    row = np.empty(m)
    gp = np.empty(P)
    for i in range(P):
        for g in range(m):
            row[g] = min(max((pts[i] - c[g]) / a[g], lo[g]), hi[g])
        gp[i] = npsum(row[:m])
    target = B * (1 - 1e-15)
    k = 0
    while k < P and gp[k] < target:         # first breakpoint with g >= B
        k += 1
    if k == 0:
        z = pts[0]
    elif k < P:
        z0, z1, g0, g1 = pts[k - 1], pts[k], gp[k - 1], gp[k]
        z = z0 + (B - g0) * (z1 - z0) / (g1 - g0)
    else:
        all_capped = True
        for g in range(m):
            all_capped = all_capped and np.isfinite(hi[g])
        if all_capped:                      # every group at its cap (sum of caps = B up to rounding)
            z = pts[P - 1]
        else:                               # beyond the last breakpoint only uncapped groups still grow
            inv = np.empty(m)
            q = 0
            for g in range(m):
                if not np.isfinite(hi[g]):
                    inv[q] = 1.0 / a[g]
                    q += 1
            z = pts[P - 1] + (B - gp[P - 1]) / npsum(inv[:q])
    any_lo = False
    for g in range(m):
        any_lo = any_lo or lo[g] > 0
    if any_lo:
        top = a[0] * lo[0] + c[0]
        for g in range(1, m):
            top = max(top, a[g] * lo[g] + c[g])
        z = max(z, top)
    b = np.empty(m)
    room = np.empty(m)
    for g in range(m):
        b[g] = min(max((z - c[g]) / a[g], lo[g]), hi[g])
        room[g] = b[g] - lo[g]
    r = npsum(room[:m])
    if r > 0:
        f = (B - lo_sum) / r
        for g in range(m):
            b[g] = lo[g] + room[g] * f
    return b, z, hi_sum, True
