"""The exact cut DP of the oracle: for one ordered group, one share and one (schedule,
recompute) variant, the cut sets that minimise the group's time (solve.oracle_cuts).

For a share of b samples in micro-batches of u, a cut group's time is
T = alpha b + beta = u (rho alpha + W) with rho = b / u - 1 and W = sum F + sum G + 2 sum lam
(the fill-and-drain work, seconds per sample), alpha the schedule's per-sample term:

    GPipe  alpha = X + Y,           X = max(max F, max lam), Y = max(max G, max lam)
    1F1B   alpha = X + Y + 2 Z,     X = max F, Y = max G, Z = max lam

(G includes the recomputed forward under recomputation: the caller passes those prefix sums).
The objective rho alpha + W mixes maxima and a sum, so a min-max or min-sum DP alone cannot
find its optimum. This is a label DP over (stage j, end layer c): each label keeps the partial
maxima (X, Y, Z), the partial work W and the partial weighted busy time Qv = sum_j wq_j (F_j +
G_j) (the group's energy-type cost per sample, cost.costs). A label is dropped only when
another label at the same (j, c) dominates it for every completion: since a completion can only
raise the maxima,

    W1 + rho (max(0, X1 - X2) + max(0, Y1 - Y2) + 2 max(0, Z1 - Z2)) <= W2   (and Qv1 <= Qv2)

implies that label 1's final objective (and cost) is no worse than label 2's. Without the cost,
a label is also dropped when a valid lower bound on its completion (its maxima times rho plus
the least work of the remaining stages, a backward min-sum DP) is above the objective of a
complete cut set. So the result is exact: with want_q False, a cut set of least rho alpha + W;
with want_q True, every point of the (rho alpha + W, Qv) Pareto frontier (ties: the first
found). Stage j of a start a may end at c <= maxend[j, a] (memory at that share under the
variant's own per-stage peaks, subproblems.dp_kernel.maxend_of); lam[j, c] is inf where c
cannot be a cut.
"""
from __future__ import annotations

import numpy as np
from numba import njit

INF = np.inf


@njit(cache=True)
def _grow(a: np.ndarray, n: int) -> np.ndarray:
    if n <= a.shape[0]:
        return a
    b = np.empty(max(n, 2 * a.shape[0]), dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def _suffix(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, maxend: np.ndarray, ws: np.ndarray,
            wl: float) -> tuple[np.ndarray, np.ndarray]:
    """(suf, nxt), both (k, L+1): suf[j, c] the least sum over stages j+1..k-1 of ws[j'] (F + G)
    plus wl lam over the boundaries from j on, for stage j ending at c (inf: no way on);
    nxt[j, c] the end of stage j+1 on that optimum."""
    k, L1 = Fp.shape
    L = L1 - 1
    suf = np.full((k, L1), INF)
    nxt = np.full((k, L1), -1, dtype=np.int64)
    suf[k - 1, L] = 0.0
    for j in range(k - 2, -1, -1):
        for c in range(j + 1, L - (k - 1 - j) + 1):
            lm = lam[j, c]
            if not lm < INF:
                continue
            hi = min(maxend[j + 1, c], L - (k - 2 - j))
            for c2 in range(c + 1, hi + 1):
                v = suf[j + 1, c2]
                if v < INF:
                    w = wl * lm + ws[j + 1] * ((Fp[j + 1, c2] - Fp[j + 1, c]) + (Gp[j + 1, c2] - Gp[j + 1, c])) + v
                    if w < suf[j, c]:
                        suf[j, c] = w
                        nxt[j, c] = c2
    return suf, nxt


@njit(cache=True)
def _path(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, cuts: np.ndarray, wq: np.ndarray, rho: float,
          one_f_one_b: bool) -> tuple[float, float]:
    """(rho alpha + W, Qv) of one cut set, as the labels add them up."""
    k = cuts.shape[0]
    x = y = z = w = q = 0.0
    a = 0
    for j in range(k):
        c = cuts[j]
        f = Fp[j, c] - Fp[j, a]
        g = Gp[j, c] - Gp[j, a]
        lm = lam[j - 1, a] if j > 0 else 0.0
        x, y = max(x, f), max(y, g)
        if one_f_one_b:
            z = max(z, lm)
        else:
            x, y = max(x, lm), max(y, lm)
        w += f + g + 2.0 * lm
        q += wq[j] * (f + g)
        a = c
    return rho * (x + y + 2.0 * z) + w, q


@njit(cache=True)
def label_dp(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, maxend: np.ndarray, wq: np.ndarray,
             rho: float, one_f_one_b: bool, want_q: bool, ub: float, qub: float = INF
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cuts (m, k) int64, objective rho alpha + W (m,) s/sample, Qv (m,)) of the optimum
    (want_q False: m <= 1) or of every (objective, Qv) Pareto point with objective <= ub and
    Qv <= qub (want_q True); m = 0 when no cut set fits. ub: without want_q, the objective of
    a known cut set (inf: none); with it, that of a cut set of least Qv, and qub the Qv of a
    cut set of least objective (no Pareto point lies beyond either). Module doc; k >= 2."""
    k, L1 = Fp.shape
    L = L1 - 1
    suf, _ = _suffix(Fp, Gp, lam, maxend, np.ones(k), 2.0)
    sufq = _suffix(Fp, Gp, lam, maxend, wq, 0.0)[0] if want_q else suf
    qlim = qub * (1.0 + 1e-9) + 1e-300
    slack = 1e-9
    cap = 1024
    lc = np.empty(cap, dtype=np.int64)
    lX = np.empty(cap)
    lY = np.empty(cap)
    lZ = np.empty(cap)
    lW = np.empty(cap)
    lQ = np.empty(cap)
    lp = np.empty(cap, dtype=np.int64)
    n = 0
    # offsets of stage j's labels ending at c: [off[j, c], off[j, c + 1])
    off = np.zeros((k, L1 + 1), dtype=np.int64)
    # stage 0
    for c in range(L1 + 1):
        off[0, c] = n
        if 1 <= c <= min(maxend[0, 0], L - (k - 1)):
            f = Fp[0, c] - Fp[0, 0]
            g = Gp[0, c] - Gp[0, 0]
            if rho * (f + g) + (f + g) + suf[0, c] > ub * (1.0 + slack):
                continue
            if want_q and wq[0] * (f + g) + sufq[0, c] > qlim:
                continue
            lc = _grow(lc, n + 1)
            lX = _grow(lX, n + 1)
            lY = _grow(lY, n + 1)
            lZ = _grow(lZ, n + 1)
            lW = _grow(lW, n + 1)
            lQ = _grow(lQ, n + 1)
            lp = _grow(lp, n + 1)
            lc[n], lX[n], lY[n], lZ[n], lW[n], lQ[n], lp[n] = c, f, g, 0.0, f + g, wq[0] * (f + g), -1
            n += 1
    cX = np.empty(64)
    cY = np.empty(64)
    cZ = np.empty(64)
    cW = np.empty(64)
    cQ = np.empty(64)
    cp = np.empty(64, dtype=np.int64)
    for j in range(1, k):
        lo_c = L if j == k - 1 else j + 1
        hi_c = L if j == k - 1 else L - (k - 1 - j)
        for c in range(L1 + 1):
            off[j, c] = n
            if c < lo_c or c > hi_c:
                continue
            m = 0
            for a in range(j, c):
                if c > maxend[j, a]:
                    continue
                lm = lam[j - 1, a]
                if not lm < INF:
                    continue
                f = Fp[j, c] - Fp[j, a]
                g = Gp[j, c] - Gp[j, a]
                for i in range(off[j - 1, a], off[j - 1, a + 1]):
                    if one_f_one_b:
                        x = max(lX[i], f)
                        y = max(lY[i], g)
                        z = max(lZ[i], lm)
                    else:
                        x = max(lX[i], f, lm)
                        y = max(lY[i], g, lm)
                        z = 0.0
                    w = lW[i] + f + g + 2.0 * lm
                    if rho * (x + y + 2.0 * z) + w + suf[j, c] > ub * (1.0 + slack):
                        continue
                    qv = lQ[i] + wq[j] * (f + g)
                    if want_q and qv + sufq[j, c] > qlim:
                        continue
                    cX = _grow(cX, m + 1)
                    cY = _grow(cY, m + 1)
                    cZ = _grow(cZ, m + 1)
                    cW = _grow(cW, m + 1)
                    cQ = _grow(cQ, m + 1)
                    cp = _grow(cp, m + 1)
                    cX[m], cY[m], cZ[m], cW[m], cQ[m], cp[m] = x, y, z, w, qv, i
                    m += 1
            if m == 0:
                continue
            order = np.argsort(cW[:m], kind="mergesort")
            start = n
            for t in range(m):
                i = order[t]
                dominated = False
                for s in range(start, n):
                    d = lW[s] + rho * (max(0.0, lX[s] - cX[i]) + max(0.0, lY[s] - cY[i]) + 2.0 * max(0.0, lZ[s] - cZ[i]))
                    if d <= cW[i] and (not want_q or lQ[s] <= cQ[i]):
                        dominated = True
                        break
                if dominated:
                    continue
                lc = _grow(lc, n + 1)
                lX = _grow(lX, n + 1)
                lY = _grow(lY, n + 1)
                lZ = _grow(lZ, n + 1)
                lW = _grow(lW, n + 1)
                lQ = _grow(lQ, n + 1)
                lp = _grow(lp, n + 1)
                lc[n], lX[n], lY[n], lZ[n], lW[n], lQ[n], lp[n] = c, cX[i], cY[i], cZ[i], cW[i], cQ[i], cp[i]
                n += 1
    first, last = off[k - 1, L], off[k - 1, L + 1]
    cnt = last - first
    obj = np.empty(cnt)
    for i in range(cnt):
        s = first + i
        obj[i] = rho * (lX[s] + lY[s] + 2.0 * lZ[s]) + lW[s]
    keep = np.zeros(cnt, dtype=np.bool_)
    if cnt > 0 and not want_q:
        keep[int(np.argmin(obj))] = True
    elif cnt > 0:
        order = np.argsort(obj, kind="mergesort")
        best_q = INF
        for t in range(cnt):
            i = order[t]
            if lQ[first + i] < best_q:
                keep[i] = True
                best_q = lQ[first + i]
    m = int(keep.sum())
    cuts = np.empty((m, k), dtype=np.int64)
    vals = np.empty(m)
    qs = np.empty(m)
    r = 0
    for i in range(cnt):
        if not keep[i]:
            continue
        s = first + i
        vals[r], qs[r] = obj[i], lQ[s]
        for j in range(k - 1, -1, -1):
            cuts[r, j] = lc[s]
            s = lp[s]
        r += 1
    return cuts, vals, qs


@njit(cache=True)
def frontier_dp(Fp: np.ndarray, Gp: np.ndarray, lam: np.ndarray, maxend: np.ndarray, wq: np.ndarray,
                rho: float, one_f_one_b: bool, want_q: bool, ub: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """label_dp with its bounds: without want_q, the optimum under the caller's ub; with it,
    first the optimum (its Qv bounds the frontier's) and a cut set of least Qv (a min-sum DP;
    its objective bounds the frontier's), then every Pareto point between them."""
    cuts, vals, qs = label_dp(Fp, Gp, lam, maxend, wq, rho, one_f_one_b, False, ub, INF)
    if not want_q or cuts.shape[0] == 0:
        return cuts, vals, qs
    k, L1 = Fp.shape
    _, q_of_best = _path(Fp, Gp, lam, cuts[0], wq, rho, one_f_one_b)
    sufq, nxt = _suffix(Fp, Gp, lam, maxend, wq, 0.0)
    best0, c0 = INF, -1
    for c in range(1, min(maxend[0, 0], L1 - 1 - (k - 1)) + 1):
        v = wq[0] * ((Fp[0, c] - Fp[0, 0]) + (Gp[0, c] - Gp[0, 0])) + sufq[0, c]
        if v < best0:
            best0, c0 = v, c
    t_min_q = INF
    if c0 >= 0:
        path = np.empty(k, dtype=np.int64)
        path[0] = c0
        for j in range(1, k):
            path[j] = nxt[j - 1, path[j - 1]]
        t_min_q, _ = _path(Fp, Gp, lam, path, wq, rho, one_f_one_b)
    return label_dp(Fp, Gp, lam, maxend, wq, rho, one_f_one_b, True, max(t_min_q, vals[0]), q_of_best)
