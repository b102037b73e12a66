"""Compiled kernels of the contiguous-cut dynamic programs (numba).

One ordered group of k devices over L layers; stage j holds layers a..c-1 (0 <= a < c <= L),
stage 0 starts at 0, stage k-1 ends at L, every stage non-empty. With S_j(a, c) =
S[j, c] - S[j, a] the cost of stage j and B[j, c] the cost of the boundary after stage j when it
ends at layer c, the recurrence over stages is

    D_0(c)  = S_0(0, c)
    D_j(c)  = min_{j <= a < c, stage j fits on [a, c)}  (D_{j-1}(a) (+) B[j-1, a]) (+) S_j(a, c)
    value   = D_{k-1}(L)

where (+) is max (min-max: the bottleneck) or + (min-sum: total work). A stage fits when
c <= maxend[j, a] (the memory rule is monotone in the end layer for a fixed start, so one
integer per (stage, start) describes it; `maxend_prefix` builds it for the rule
k_opt * P + s_j * H <= M_j). Optional side constraints bound every stage value
CS[m, j, c] - CS[m, j, a] and every boundary value CB[m, j, a] by lims[m] (strictly when
strict[m]). Boundaries whose link cost `lam` is not finite are never cuts.

The recurrence costs O(k L^2) scalar steps, with no temporaries (where the starts that fit a
stage form a window [lo(c), c) whose left end only grows with c, as the memory rule and side
constraints on non-decreasing prefixes give, the starts before lo(c) are skipped unchecked,
and the middle stages of a min-max DP take `_window_stage`'s O(log L) per end); ties go to the first
minimising start (the smallest a), as a full argmin over starts would pick, so the cuts equal
those of the vectorised numpy DP in `subproblems.cuts`, float for float (same operations in
the same order). Min-max with non-decreasing stage prefixes (non-negative layer costs) scans
the starts of each end from c-1 down and stops once the stage alone exceeds the best value so
far (every earlier start gives a longer stage), keeping ties on the smallest start: the same
values and cuts in far fewer steps when stages are short.
"""
from __future__ import annotations

import os

import numpy as np
from numba import njit

INF = np.inf


@njit(cache=True)
def _combine(x: float, y: float, minsum: bool) -> float:
    return x + y if minsum else max(x, y)


@njit(cache=True)
def _within(v: float, lim: float, strict: bool) -> bool:
    return v < lim if strict else v <= lim


@njit(cache=True)
def _stage_ok(j: int, a: int, c: int, CS: np.ndarray, lims: np.ndarray, strict: np.ndarray) -> bool:
    for m in range(CS.shape[0]):
        if not _within(CS[m, j, c] - CS[m, j, a], lims[m], strict[m]):
            return False
    return True


@njit(cache=True)
def _bound_ok(j: int, a: int, CB: np.ndarray, lims: np.ndarray, strict: np.ndarray) -> bool:
    for m in range(CB.shape[0]):
        if not _within(CB[m, j, a], lims[m], strict[m]):
            return False
    return True


@njit(cache=True)
def _nondecreasing(S: np.ndarray) -> bool:
    for j in range(S.shape[0]):
        for c in range(1, S.shape[1]):
            if not S[j, c] >= S[j, c - 1]:
                return False
    return True


@njit(cache=True)
def _suffix_rows(j: int, w: int, S: np.ndarray, maxend: np.ndarray, CS: np.ndarray) -> bool:
    """True when, for every end c, the starts a of stage j that fit (memory: c <= maxend[j, a];
    side constraints on CS[m, j, c] - CS[m, j, a]) form a suffix of j..c-1: maxend[j, .]
    non-decreasing over the starts and every CS row non-decreasing."""
    for a in range(j + 1, j + w):
        if maxend[j, a] < maxend[j, a - 1]:
            return False
    return _side_rows_nondecreasing(CS, j)


@njit(cache=True)
def _side_rows_nondecreasing(CS: np.ndarray, j: int) -> bool:
    """Whether every side constraint's row of stage j is non-decreasing."""
    for m in range(CS.shape[0]):
        for c in range(1, CS.shape[2]):
            if not CS[m, j, c] >= CS[m, j, c - 1]:
                return False
    return True


@njit(cache=True)
def _window_stage(j: int, c0: int, c1: int, a0: int, S: np.ndarray, prev: np.ndarray, maxend: np.ndarray,
                  CS: np.ndarray, lims: np.ndarray, strict: np.ndarray, D: np.ndarray, arg: np.ndarray,
                  queue: np.ndarray) -> None:
    """D[j, c], arg[j, c] for every end c of a middle stage j of the min-max recurrence with
    non-decreasing S, when the starts that fit form a window [lo(c), hi(c)] whose ends only
    grow with c (`_suffix_rows`). Over the window, f(a) = max(prev[a], S[j, c] - S[j, a]):
    the stage term falls with a, so only the starts whose prev is at most every later prev
    (kept in `queue`, a monotone deque: prev non-decreasing front to back) can be the minimum,
    and over them f first falls and then rises, so the least f is found by bisection. The
    smallest start attaining it (the scan's tie rule) is then the first a >= the least start
    whose stage term is within it with prev[a] within it. Same values and cuts as the scan:
    amortised O(log L) per end instead of O(stage length). Ends c0..c1; every start below a0
    has prev inf (and c0 - 1 <= a0), so the window starts there."""
    head, tail = 0, 0                        # queue[head:tail]
    lo = a0
    for c in range(c0, c1 + 1):
        a_new = c - 1                        # the start that joins the window
        if prev[a_new] < INF:
            while tail > head and prev[queue[tail - 1]] > prev[a_new]:
                tail -= 1
            queue[tail] = a_new
            tail += 1
        while lo <= a_new and (c > maxend[j, lo] or not _stage_ok(j, lo, c, CS, lims, strict)):
            lo += 1
        while tail > head and queue[head] < lo:
            head += 1
        if tail == head:
            D[j, c], arg[j, c] = INF, -1
            continue
        Sc = S[j, c]
        i_lo, i_hi = head, tail - 1         # first record whose prev reaches its stage term
        if prev[queue[i_hi]] < Sc - S[j, queue[i_hi]]:
            best = Sc - S[j, queue[i_hi]]
        else:
            while i_lo < i_hi:
                mid = (i_lo + i_hi) // 2
                if prev[queue[mid]] >= Sc - S[j, queue[mid]]:
                    i_hi = mid
                else:
                    i_lo = mid + 1
            best = prev[queue[i_lo]]
            if i_lo > head:
                best = min(best, Sc - S[j, queue[i_lo - 1]])
        t_lo, t_hi = lo, a_new              # least start whose stage term is within best
        while t_lo < t_hi:
            mid = (t_lo + t_hi) // 2
            if Sc - S[j, mid] <= best:
                t_hi = mid
            else:
                t_lo = mid + 1
        a = t_lo
        while prev[a] > best:
            a += 1
        D[j, c], arg[j, c] = best, a


@njit(cache=True)
def cut_dp(S: np.ndarray, lam: np.ndarray, B: np.ndarray, maxend: np.ndarray, CS: np.ndarray,
           CB: np.ndarray, lims: np.ndarray, strict: np.ndarray, minsum: bool
           ) -> tuple[float, np.ndarray]:
    """The recurrence of the module docstring. S (k, L+1) stage prefix; lam, B (k-1, L+1);
    maxend (k, L+1) int64; CS (m, k, L+1), CB (m, k-1, L+1), lims (m,), strict (m,) bool.
    Returns (value, cuts (k,) int64); value inf and cuts all -1 when no cut set is valid."""
    k, L1 = S.shape
    lo_end = np.empty(max(k, 1), dtype=np.int64)
    hi_end = np.empty(max(k, 1), dtype=np.int64)
    for j in range(k):
        lo_end[j], hi_end[j] = j + 1, j + L1 - k
    if k > 0:
        lo_end[k - 1] = hi_end[k - 1] = L1 - 1
    return _ranged_dp(S, lam, B, maxend, CS, CB, lims, strict, minsum, lo_end, hi_end)


@njit(cache=True)
def cut_dp_within(S: np.ndarray, lam: np.ndarray, B: np.ndarray, maxend: np.ndarray, CS: np.ndarray,
                  CB: np.ndarray, lims: np.ndarray, strict: np.ndarray, T: float) -> tuple[float, np.ndarray]:
    """The min-max cut_dp (S non-decreasing) when some cut set is known to reach value T or
    less: only the ends that a cut set of value <= T can use are visited (`_end_ranges`: a
    relaxation, so every such cut set lies inside). Its value is then <= T, and value and cuts
    are cut_dp's: each start that attains the minimum on cut_dp's path lies on a cut set of
    value <= T, so it is inside and keeps its value, and a start left out can only be worse.
    Falls back to cut_dp when the ranges leave nothing (T below every cut set: a wrong T)."""
    k, L1 = S.shape
    if k < 3 or not T < INF or not _nondecreasing(S):
        return cut_dp(S, lam, B, maxend, CS, CB, lims, strict, False)
    me_ok = np.ones(k, dtype=np.bool_)      # memory monotone in the start: the relaxation may use it
    for j in range(k):
        for a in range(1, L1 - 1):
            if maxend[j, a] < maxend[j, a - 1]:
                me_ok[j] = False
                break
    CSr = CS if _nondecreasing_rows(CS) else np.empty((0, k, L1))   # side constraints it may use
    lo_end = np.empty(k, dtype=np.int64)
    hi_end = np.empty(k, dtype=np.int64)
    if _end_ranges(S, lam, B, maxend, me_ok, CSr, CB, lims, strict, T, lo_end, hi_end):
        val, cuts = _ranged_dp(S, lam, B, maxend, CS, CB, lims, strict, False, lo_end, hi_end)
        if val <= T:
            return val, cuts
    return cut_dp(S, lam, B, maxend, CS, CB, lims, strict, False)


@njit(cache=True)
def _ranged_dp(S: np.ndarray, lam: np.ndarray, B: np.ndarray, maxend: np.ndarray, CS: np.ndarray,
               CB: np.ndarray, lims: np.ndarray, strict: np.ndarray, minsum: bool, lo_end: np.ndarray,
               hi_end: np.ndarray) -> tuple[float, np.ndarray]:
    """The recurrence with stage j's end restricted to lo_end[j]..hi_end[j] (every end:
    j+1..L-k+1+j, and L for the last stage)."""
    k, L1 = S.shape
    L = L1 - 1
    cuts = np.full(k, -1, dtype=np.int64)
    if k == 0 or k > L:
        return INF, cuts
    if k == 1:
        if maxend[0, 0] >= L and _stage_ok(0, 0, L, CS, lims, strict):
            cuts[0] = L
            return S[0, L] - S[0, 0], cuts
        return INF, cuts
    w = L - k + 1
    prune = not minsum and _nondecreasing(S)
    D = np.full((k, L1), INF)
    arg = np.full((k, L1), -1, dtype=np.int64)
    for c in range(max(1, lo_end[0]), min(w, hi_end[0]) + 1):          # stage 0 ends at c
        if c <= maxend[0, 0] and _stage_ok(0, 0, c, CS, lims, strict):
            D[0, c] = S[0, c] - S[0, 0]
    prev = np.full(L1, INF)
    queue = np.empty(L1, dtype=np.int64)
    for j in range(1, k):
        a_lo, a_hi = max(j, lo_end[j - 1]), min(j + w - 1, hi_end[j - 1])    # stage j starts at a
        prev[:] = INF
        for a in range(a_lo, a_hi + 1):
            p = INF
            if D[j - 1, a] < INF and np.isfinite(lam[j - 1, a]) and _bound_ok(j - 1, a, CB, lims, strict):
                p = _combine(D[j - 1, a], B[j - 1, a], minsum)
            prev[a] = p
        c_lo, c_hi = (L, L) if j == k - 1 else (j + 1, j + w)
        c_lo, c_hi = max(c_lo, lo_end[j]), min(c_hi, hi_end[j])
        window = _suffix_rows(j, w, S, maxend, CS)
        if prune and j < k - 1 and window:
            _window_stage(j, a_lo + 1, c_hi, a_lo, S, prev, maxend, CS, lims, strict, D, arg, queue)
            continue
        lo = j
        for c in range(c_lo, c_hi + 1):
            best, besta = INF, -1
            if prune:       # starts from c-1 down: the stage only grows, stop once it exceeds best
                for a in range(min(c - 1, a_hi), a_lo - 1, -1):
                    sv = S[j, c] - S[j, a]
                    if sv > best:
                        break
                    if prev[a] == INF or c > maxend[j, a]:
                        continue
                    if not _stage_ok(j, a, c, CS, lims, strict):
                        continue
                    v = max(prev[a], sv)
                    if v <= best:       # ties: the smallest start, as the ascending scan
                        best, besta = v, a
            elif window:    # the starts that fit are lo..: skip those before lo unchecked
                while lo < min(c, j + w) and (c > maxend[j, lo] or not _stage_ok(j, lo, c, CS, lims, strict)):
                    lo += 1
                for a in range(lo, min(c, j + w)):
                    if prev[a] == INF:
                        continue
                    v = _combine(prev[a], S[j, c] - S[j, a], minsum)
                    if v < best:
                        best, besta = v, a
            else:
                for a in range(j, min(c, j + w)):
                    if prev[a] == INF or c > maxend[j, a]:
                        continue
                    if not _stage_ok(j, a, c, CS, lims, strict):
                        continue
                    v = _combine(prev[a], S[j, c] - S[j, a], minsum)
                    if v < best:
                        best, besta = v, a
            D[j, c], arg[j, c] = best, besta
    val = D[k - 1, L]
    if not val < INF:
        return INF, cuts
    c = L
    for j in range(k - 1, -1, -1):
        cuts[j] = c
        if j > 0:
            c = arg[j, c]
    return val, cuts


@njit(cache=True)
def _nondecreasing_rows(CS: np.ndarray) -> bool:
    for j in range(CS.shape[1]):
        if not _side_rows_nondecreasing(CS, j):
            return False
    return True


@njit(cache=True)
def _fits_within(j: int, a: int, c: int, S: np.ndarray, maxend: np.ndarray, me_ok: bool, CS: np.ndarray,
                 lims: np.ndarray, strict: np.ndarray, T: float) -> bool:
    """Stage j on layers a..c-1 within T, in memory (when me_ok) and within the side
    constraints: each still holds on fewer layers."""
    if S[j, c] - S[j, a] > T or (me_ok and c > maxend[j, a]):
        return False
    return _stage_ok(j, a, c, CS, lims, strict)


@njit(cache=True)
def _last_end(j: int, a: int, top: int, S: np.ndarray, maxend: np.ndarray, me_ok: bool, CS: np.ndarray,
              lims: np.ndarray, strict: np.ndarray, T: float) -> int:
    """The largest c in a..top such that stage j on layers a..c-1 `_fits_within` (a itself when
    none does), by binary search."""
    lo, hi = a, top
    while lo < hi:
        c = (lo + hi + 1) // 2
        if _fits_within(j, a, c, S, maxend, me_ok, CS, lims, strict, T):
            lo = c
        else:
            hi = c - 1
    return lo


@njit(cache=True)
def _first_start(j: int, c: int, bottom: int, S: np.ndarray, maxend: np.ndarray, me_ok: bool, CS: np.ndarray,
                 lims: np.ndarray, strict: np.ndarray, T: float) -> int:
    """The smallest a in bottom..c such that stage j on layers a..c-1 `_fits_within` (c itself
    when none does), by binary search."""
    lo, hi = bottom, c
    while lo < hi:
        a = (lo + hi) // 2
        if _fits_within(j, a, c, S, maxend, me_ok, CS, lims, strict, T):
            hi = a
        else:
            lo = a + 1
    return lo


@njit(cache=True)
def _cut_passes(j: int, c: int, lam: np.ndarray, B: np.ndarray, CB: np.ndarray, lims: np.ndarray,
                strict: np.ndarray, T: float) -> bool:
    """Whether the boundary after stage j may sit at layer c in a cut set of value <= T."""
    if not (np.isfinite(lam[j, c]) and B[j, c] <= T):
        return False
    for m in range(CB.shape[0]):
        if not (CB[m, j, c] < lims[m] if strict[m] else CB[m, j, c] <= lims[m]):
            return False
    return True


@njit(cache=True)
def _end_ranges(S: np.ndarray, lam: np.ndarray, B: np.ndarray, maxend: np.ndarray, me_ok: np.ndarray,
                CS: np.ndarray, CB: np.ndarray, lims: np.ndarray, strict: np.ndarray, T: float,
                lo_end: np.ndarray, hi_end: np.ndarray) -> bool:
    """Bounds on each stage's end over the cut sets whose stages all fit within T (`_last_end`)
    and whose boundaries all pass `_cut_passes`: hi_end[j] the furthest end stages 0..j reach
    (each stage to the last boundary it may take, from the left), lo_end[j] the earliest start
    of stage j+1 from which stages j+1..k-1 still reach L (each from the first boundary it
    may take, from the right); both by exchange, as a stage that fits still fits on fewer
    layers. False when no such cut set exists (then none of value <= T does). O(k log L) and
    the scans to a boundary that passes."""
    k, L1 = S.shape
    L = L1 - 1
    a = 0
    for j in range(k):
        c = _last_end(j, a, max(a, L - (k - 1 - j)), S, maxend, me_ok[j], CS, lims, strict, T)
        if j < k - 1:
            while c > a and not _cut_passes(j, c, lam, B, CB, lims, strict, T):
                c -= 1
        hi_end[j] = a = c
    if hi_end[k - 1] < L:
        return False
    c = L
    lo_end[k - 1] = L
    for j in range(k - 1, 0, -1):
        a = _first_start(j, c, min(j, c), S, maxend, me_ok[j], CS, lims, strict, T)
        while a < c and not _cut_passes(j - 1, a, lam, B, CB, lims, strict, T):
            a += 1
        lo_end[j - 1] = c = a
    for j in range(k):
        if lo_end[j] > hi_end[j]:
            return False
    return True


@njit(cache=True)
def maxend_prefix(pp: np.ndarray, sp: np.ndarray, kopt: float, live: np.ndarray, mem: np.ndarray
                  ) -> np.ndarray:
    """(k, L+1) int64: the last end layer c such that stage j starting at a fits,
    kopt * (pp[c] - pp[a]) + live[j] * (sp[c] - sp[a]) <= mem[j]; a itself when no non-empty
    stage fits, so that no c > a passes. pp, sp: prefix sums of parameter bytes and of stashed
    bytes per sample; live[j]: samples stashed on stage j. Binary search: O(k L log L)."""
    k = mem.shape[0]
    L = pp.shape[0] - 1
    out = np.empty((k, L + 1), dtype=np.int64)
    for j in range(k):
        for a in range(L + 1):
            lo, hi = a, L                         # the largest c in [a, L] that fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                need = kopt * (pp[mid] - pp[a]) + live[j] * (sp[mid] - sp[a])
                if need <= mem[j]:
                    lo = mid
                else:
                    hi = mid - 1
            out[j, a] = lo
    return out


@njit(cache=True)
def maxend_need(need: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """(k, L+1) int64 from a need matrix: the last end layer c such that need[a, c] <= mem[j]
    (need (L+1, L+1) bytes a stage a..c-1 needs, non-decreasing in c for each a, as the
    memory rule of `subproblems.cache.SlotCache.need` is; mem (k,) bytes); a itself when no
    non-empty stage fits. The same comparisons as the numpy masks `need <= mem`, found by
    binary search: O(k L log L)."""
    k = mem.shape[0]
    L = need.shape[0] - 1
    out = np.empty((k, L + 1), dtype=np.int64)
    for j in range(k):
        for a in range(L + 1):
            lo, hi = a, L
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if need[a, mid] <= mem[j]:
                    lo = mid
                else:
                    hi = mid - 1
            out[j, a] = lo
    return out


def maxend_of(need: np.ndarray, needs: tuple[np.ndarray, ...] | None, mem: np.ndarray) -> np.ndarray:
    """maxend_need of a group: one need matrix for every stage, or `needs[j]` for stage j."""
    if needs is None:
        return maxend_need(np.ascontiguousarray(need, dtype=float), np.ascontiguousarray(mem, dtype=float))
    return np.concatenate([maxend_need(np.ascontiguousarray(n, dtype=float),
                                       np.ascontiguousarray(mem[j:j + 1], dtype=float))
                           for j, n in enumerate(needs)])


@njit(cache=True)
def _value_of(S: np.ndarray, B: np.ndarray, cuts: np.ndarray) -> float:
    """The min-max value of one cut set: its largest stage S[j, c_j] - S[j, c_{j-1}] and
    boundary B[j, c_j] (the DP's own numbers for it)."""
    k = cuts.shape[0]
    v = S[0, cuts[0]] - S[0, 0]
    for j in range(1, k):
        v = max(v, B[j - 1, cuts[j - 1]], S[j, cuts[j]] - S[j, cuts[j - 1]])
    return v


@njit(cache=True)
def alpha_frontier(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, maxend: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (X, Y) Pareto walk of `subproblems.cuts` (min X + Y over cuts, X = max(F, lam),
    Y = max(G, lam)) in one compiled call, the same points as the Python loop it replaces
    (`subproblems.cuts._alpha_frontier`): b_1 = min Y; a_i = min X s.t. Y <= b_i; b_{i+1} = min Y
    s.t. X < a_i; stop when b + min X can no longer beat the best a + b, or once a_i = min X
    (no cut set has a smaller X, so the next DP would find none); where min X's cuts also reach
    min Y, they are the one point without the DP for a_1. Fp, Gp (k, L+1) prefix seconds per
    sample; lam (k-1, L+1); maxend as in cut_dp. Returns (a (p,), b (p,), cuts (p, k)).
    Where a cut set known so far bounds a DP's value (a_min's cuts for b_1, b_i's cuts for a_i),
    that DP visits only the ends within the bound (cut_dp_within: the same value and cuts)."""
    k, L1 = Fp.shape
    kb = lam.shape[0]
    no_s = np.empty((0, k, L1))
    no_b = np.empty((0, kb, L1))
    no_l = np.empty(0)
    no_t = np.empty(0, dtype=np.bool_)
    one_t = np.zeros(1, dtype=np.bool_)
    FS, FB = Fp.reshape((1, k, L1)), lam.reshape((1, kb, L1))
    GS = Gp.reshape((1, k, L1))
    cap = 16
    A = np.empty(cap)
    Bv = np.empty(cap)
    C = np.empty((cap, k), dtype=np.int64)
    n = 0
    a_min, a_cuts = cut_dp(Fp, lam, lam, maxend, no_s, no_b, no_l, no_t, False)
    if not a_min < INF:
        return A[:0], Bv[:0], C[:0]
    y_a = _value_of(Gp, lam, a_cuts)
    b_min, b_min_cuts = cut_dp_within(Gp, lam, lam, maxend, no_s, no_b, no_l, no_t, y_a)     # a_min's cuts reach y_a
    if y_a == b_min:
        # a_min's cuts reach the least Y too: the walk's first DP (min X with Y <= b_min) would
        # return them (every stage of their path meets the constraint, so the constrained DP
        # takes the same least start at each step) and stop there, a = a_min: one point
        A[0], Bv[0], C[0] = a_min, b_min, a_cuts
        return A[:1], Bv[:1], C[:1]
    best = INF
    a_lim = INF
    strict = False
    lim = np.empty(1)
    while True:
        if a_lim == INF and not strict:
            b, b_cuts = b_min, b_min_cuts
        else:
            lim[0] = a_lim
            one_t[0] = strict
            b, b_cuts = cut_dp(Gp, lam, lam, maxend, FS, FB, lim, one_t, False)
        if not np.isfinite(b) or b + a_min >= best:
            break
        lim[0] = b
        one_t[0] = False
        a, cuts = cut_dp_within(Fp, lam, lam, maxend, GS, FB, lim, one_t,
                                _value_of(Fp, lam, b_cuts))         # b's cuts hold Y <= b at that X
        if n == cap:
            cap *= 2
            A2, B2, C2 = np.empty(cap), np.empty(cap), np.empty((cap, k), dtype=np.int64)
            A2[:n], B2[:n], C2[:n] = A, Bv, C
            A, Bv, C = A2, B2, C2
        A[n], Bv[n], C[n] = a, b, cuts
        n += 1
        best = min(best, a + b)
        if a <= a_min:      # no cut set has X < a_min: the next DP would find none
            break
        a_lim = a
        strict = True
    return A[:n], Bv[:n], C[:n]


@njit(cache=True, error_model="numpy")
def plain_group_arrays(fwd_prefix: np.ndarray, bwd_prefix: np.ndarray, out_bytes: np.ndarray, bandwidth: np.ndarray,
                       latency: np.ndarray, u: int, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Fp, Gp, lam) of SlotCache.group_arrays for an ordered group d on a state without TP or
    fitted bandwidths: the prefix rows of its devices and lam[j, c] = out_bytes[c - 1] /
    bandwidth(d_j, d_j+1) + latency(d_j, d_j+1) / u for 1 <= c < L (inf elsewhere)."""
    k = d.shape[0]
    L1 = fwd_prefix.shape[1]
    Fp = np.empty((k, L1))
    Gp = np.empty((k, L1))
    for j in range(k):
        Fp[j] = fwd_prefix[d[j]]
        Gp[j] = bwd_prefix[d[j]]
    lam = np.full((max(k - 1, 0), L1), np.inf)
    for j in range(k - 1):
        bw = bandwidth[d[j], d[j + 1]]
        lat = latency[d[j], d[j + 1]] / u
        for c in range(1, L1 - 1):
            lam[j, c] = out_bytes[c - 1] / bw + lat
    return Fp, Gp, lam


@njit(cache=True)
def maxend_rule(pp: np.ndarray, sp: np.ndarray, inp: np.ndarray, kopt: float, u: float, live: np.ndarray,
                recompute: bool, mem: np.ndarray) -> np.ndarray:
    """maxend_need of the need matrices `SlotCache.need` (live[j] in place of its slackened
    share s - 1e-9 u) or, with recompute, `SlotCache.recompute_need`, without building them:
    need_j(a, c) = kopt (pp[c] - pp[a]) + live[j] (sp[c] - sp[a]), or with recompute
    kopt (pp[c] - pp[a]) + u (sp[c] - sp[a]) + live[j] inp[a], in the matrices' own operations
    and order (so the same floats and the same comparisons with mem[j]); non-decreasing in c,
    so found by binary search. O(k L log L)."""
    k = mem.shape[0]
    L = pp.shape[0] - 1
    out = np.empty((k, L + 1), dtype=np.int64)
    for j in range(k):
        for a in range(L + 1):
            lo, hi = a, L
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if recompute:
                    need = kopt * (pp[mid] - pp[a]) + u * (sp[mid] - sp[a]) + live[j] * inp[a]
                else:
                    need = kopt * (pp[mid] - pp[a]) + live[j] * (sp[mid] - sp[a])
                if need <= mem[j]:
                    lo = mid
                else:
                    hi = mid - 1
            out[j, a] = lo
    return out


BALANCED = -2
"""cut_candidates' `seeds` for balanced_cuts."""


@njit(cache=True)
def _balanced(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, maxend: np.ndarray) -> np.ndarray:
    """The min-max cuts of the rows' mean (Fp + Gp).mean(axis=0) on every stage (numpy's
    sum over rows in order, then / k: the same floats), boundaries 0 where lam is finite,
    within maxend; (1, k) or (0, k) when no cut set fits."""
    k, L1 = Fp.shape
    w = Fp[0] + Gp[0]
    for j in range(1, k):
        w = w + (Fp[j] + Gp[j])
    w = w / k
    S = np.empty((k, L1))
    for j in range(k):
        S[j] = w
    val, cuts = cut_dp(S, lam, np.zeros((k - 1, L1)), maxend, np.empty((0, k, L1)), np.empty((0, k - 1, L1)),
                       np.empty(0), np.empty(0, dtype=np.bool_), False)
    if not val < INF:
        return np.empty((0, k), dtype=np.int64)
    return cuts.reshape((1, k))


@njit(cache=True, error_model="numpy")
def cut_candidates(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, pp: np.ndarray, sp: np.ndarray,
                   inp: np.ndarray, kopt: float, u: float, live: np.ndarray, recompute: bool, mem: np.ndarray,
                   relax: np.ndarray, seeds: int) -> np.ndarray:
    """The cut sets of an ordered group (k >= 2) in one call, from SlotCache.dp_rule's
    arguments, then the relax factors and seeds. With seeds < 0, `subproblems.cuts.
    min_bottleneck_cuts`: the first alpha_frontier point of least a + b (one row). Otherwise
    the candidates of `subproblems.cuts.frontier_cuts`: the alpha_frontier points, then for
    each of the `seeds` points of least a + b (stable order) and each factor r the min-sum DP
    of F + G + 2 lam with X <= r a and Y <= r b, then the unconstrained min-sum DP; (p, k) rows
    in that order, those DPs that find no cut set left out. No rows when no cut set fits. A
    constrained DP whose thresholds the unconstrained DP's cuts already meet is not run: it
    would return those cuts.
    With seeds == BALANCED, `subproblems.cuts.balanced_cuts` instead (one row): the min-max
    DP of the group's mean forward + backward prefix on every stage, boundaries free.
    (One kernel for all: each compiled entry point re-optimises the DPs it calls.)"""
    if recompute:
        Gp = Fp + Gp
    me = maxend_rule(pp, sp, inp, kopt, u, live, recompute, mem)
    k, L1 = Fp.shape
    if seeds == BALANCED:
        return _balanced(Fp, Gp, lam, me)
    A, Bv, C = alpha_frontier(Fp, Gp, lam, me)
    n = A.shape[0]
    if n == 0:
        return np.empty((0, k), dtype=np.int64)
    if seeds < 0:
        best = 0
        for i in range(1, n):
            if A[i] + Bv[i] < A[best] + Bv[best]:
                best = i
        if not A[best] < INF:
            return np.empty((0, k), dtype=np.int64)
        return C[best:best + 1].copy()
    out = np.empty((n + seeds * relax.shape[0] + 1, k), dtype=np.int64)
    out[:n] = C
    m = n
    work = Fp + Gp
    lam2 = 2.0 * lam
    CS = np.empty((2, k, L1))
    CS[0] = Fp
    CS[1] = Gp
    CB = np.empty((2, k - 1, L1))
    CB[0] = lam
    CB[1] = lam
    lims = np.empty(2)
    strict = np.zeros(2, dtype=np.bool_)
    key = A + Bv
    order = np.arange(n)
    for i in range(1, n):               # insertion sort by a + b: stable, as Python's sorted
        j = i
        while j > 0 and key[order[j - 1]] > key[order[j]]:
            order[j - 1], order[j] = order[j], order[j - 1]
            j -= 1
    free_val, free_cuts = cut_dp(work, lam, lam2, me, np.empty((0, k, L1)), np.empty((0, k - 1, L1)), np.empty(0),
                                 np.empty(0, dtype=np.bool_), True)
    for i in range(min(seeds, n)):
        s = order[i]
        for r in relax:
            lims[0] = r * A[s]
            lims[1] = r * Bv[s]
            if free_val < INF and _meets(free_cuts, CS, CB, lims, strict):
                # the unconstrained DP's path meets the thresholds at every stage, so the
                # constrained DP takes the same least start at each step: its cuts
                out[m] = free_cuts
                m += 1
                continue
            val, cuts = cut_dp(work, lam, lam2, me, CS, CB, lims, strict, True)
            if val < INF:
                out[m] = cuts
                m += 1
    if free_val < INF:
        out[m] = free_cuts
        m += 1
    return out[:m]


@njit(cache=True)
def _meets(cuts: np.ndarray, CS: np.ndarray, CB: np.ndarray, lims: np.ndarray, strict: np.ndarray) -> bool:
    """Whether a cut set passes every side constraint the DP checks: each stage's values
    (_stage_ok) and each boundary's (_bound_ok), in the DP's own comparisons."""
    a = 0
    for j in range(cuts.shape[0]):
        if not _stage_ok(j, a, cuts[j], CS, lims, strict):
            return False
        if j > 0 and not _bound_ok(j - 1, a, CB, lims, strict):
            return False
        a = cuts[j]
    return True


@njit(cache=True, error_model="numpy")
def plain_cut_candidates(fwd_prefix: np.ndarray, bwd_prefix: np.ndarray, out_bytes: np.ndarray,
                         bandwidth: np.ndarray, latency: np.ndarray, u: int, d: np.ndarray, pp: np.ndarray,
                         sp: np.ndarray, inp: np.ndarray, kopt: float, live: np.ndarray, recompute: bool,
                         mem: np.ndarray, relax: np.ndarray, seeds: int) -> np.ndarray:
    """cut_candidates on a state without TP units or fitted bandwidths, the group's rows and
    links built here (plain_group_arrays) from SlotCache.plain_rule's arguments."""
    Fp, Gp, lam = plain_group_arrays(fwd_prefix, bwd_prefix, out_bytes, bandwidth, latency, u, d)
    return cut_candidates(Fp, Gp, lam, pp, sp, inp, kopt, float(u), live, recompute, mem, relax, seeds)


def compiled_cached() -> bool | None:
    """Whether numba's on-disk cache already holds the kernels every search calls (cut_dp, the
    one-call cut sets plain_cut_candidates and the integer shares, shares_kernel.integer_shares:
    so the first solve of this process loads them in well under a second instead of compiling
    them, about 40 CPU seconds; an install from before any of them counts as not compiled);
    None when numba's cache layout cannot be read (a numba version whose internals differ).
    Reads numba's cache index, an internal of numba 0.6x."""
    from .shares_kernel import integer_shares
    try:
        return all(os.path.exists(f._cache._cache_file._index_path)
                   for f in (cut_dp, plain_cut_candidates, integer_shares))
    except AttributeError:
        return None
