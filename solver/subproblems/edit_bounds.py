"""Lower bounds on the min-bottleneck alpha of one-device edits of an ordered group (numba).

The local search's order-keeping moves (`solve.local.ordered_neighbours`) change one group by
one device: a device inserted at a position, a device replaced, a device removed. Each edited
order would cost a full cut DP (`dp_kernel.cut_candidates`) before the search could
tell that it cannot beat the incumbent. Here one call bounds every such edit of a group.

For a cut set, X = max(largest stage forward seconds, largest boundary lam) and Y the same
with the backward seconds; GPipe's alpha at the min-bottleneck cuts is min over cuts of X + Y
(`subproblems.cuts`), which is at least min X + min Y. With the prefix bottlenecks

    P_j(c) = min over cuts of stages 0..j on layers [0, c) of their X (stage j ends at c)

and the suffix ones Q_j(a) (stages j..k-1 on [a, L)), an edit that puts device x between
stages 0..i-1 and stages r..k-1 of the old order has

    min X = min_{a < b, b <= maxend_x(a)} max(P_{i-1}(a), lam(g_{i-1}, x, a), S_x(a, b),
                                             lam(x, g_r, b), Q_r(b))

(without the left terms a = 0, without the right ones b = L), and a removal joins P_{i-1}
and Q_{i+1} across one link. Memory as in the DP: a stage on [a, c) of device x fits when
c <= maxend_x(a) (GPipe at one micro-batch, so the rule does not depend on the stage's
position). Cost O(k L^2) for the prefixes and O(L^2) per edit, with each scan over ends cut
short once the edited stage alone exceeds the best value so far (stage times only grow with
the end). inf where no cut set of the edited order fits in memory.
"""
from __future__ import annotations

import numpy as np
from numba import njit

INF = np.inf


@njit(cache=True, error_model="numpy")
def _lam(out_bytes: np.ndarray, bandwidth: np.ndarray, latency: np.ndarray, u: int, x: int, y: int, c: int,
         L: int) -> float:
    """Seconds per sample of the boundary after layer c between devices x and y (inf off 1..L-1)."""
    if c < 1 or c > L - 1:
        return INF
    return out_bytes[c - 1] / bandwidth[x, y] + latency[x, y] / u


@njit(cache=True, error_model="numpy")
def _prefix_suffix(S: np.ndarray, out_bytes: np.ndarray, bandwidth: np.ndarray, latency: np.ndarray, u: int,
                   g: np.ndarray, maxend: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q), each (k, L+1): the module's prefix and suffix bottlenecks of order g on the
    per-device prefix seconds S (n, L+1)."""
    k = g.shape[0]
    L = S.shape[1] - 1
    P = np.full((k, L + 1), INF)
    Q = np.full((k, L + 1), INF)
    d0 = g[0]
    for c in range(1, L + 1):
        if c <= maxend[d0, 0]:
            P[0, c] = S[d0, c] - S[d0, 0]
    for j in range(1, k):
        d, p = g[j], g[j - 1]
        for c in range(j + 1, L + 1):
            best = INF
            for a in range(c - 1, j - 1, -1):
                st = S[d, c] - S[d, a]
                if st >= best:
                    break
                if c > maxend[d, a] or P[j - 1, a] == INF:
                    continue
                v = max(P[j - 1, a], _lam(out_bytes, bandwidth, latency, u, p, d, a, L), st)
                if v < best:
                    best = v
            P[j, c] = best
    dl = g[k - 1]
    for a in range(L):
        if L <= maxend[dl, a]:
            Q[k - 1, a] = S[dl, L] - S[dl, a]
    for j in range(k - 2, -1, -1):
        d, nx = g[j], g[j + 1]
        for a in range(L):
            best = INF
            for b in range(a + 1, L + 1):
                st = S[d, b] - S[d, a]
                if st >= best or b > maxend[d, a]:
                    break
                if Q[j + 1, b] == INF:
                    continue
                v = max(st, _lam(out_bytes, bandwidth, latency, u, d, nx, b, L), Q[j + 1, b])
                if v < best:
                    best = v
            Q[j, a] = best
    return P, Q


@njit(cache=True, error_model="numpy")
def _middle(S: np.ndarray, out_bytes: np.ndarray, bandwidth: np.ndarray, latency: np.ndarray, u: int,
            g: np.ndarray, maxend: np.ndarray, P: np.ndarray, Q: np.ndarray, i: int, x: int, r: int) -> float:
    """min X of the order g[:i] + (x,) + g[r:] (module doc)."""
    k = g.shape[0]
    L = S.shape[1] - 1
    best = INF
    for a in range(0, L):
        if i == 0:
            if a > 0:
                break
            left = -INF
        else:
            if P[i - 1, a] == INF:
                continue
            left = max(P[i - 1, a], _lam(out_bytes, bandwidth, latency, u, g[i - 1], x, a, L))
            if left >= best:
                continue
        for b in range(a + 1, L + 1):
            st = S[x, b] - S[x, a]
            if st >= best or b > maxend[x, a]:
                break
            if r == k:
                if b < L:
                    continue
                right = -INF
            else:
                if Q[r, b] == INF:
                    continue
                right = max(Q[r, b], _lam(out_bytes, bandwidth, latency, u, x, g[r], b, L))
            v = max(left, st, right)
            if v < best:
                best = v
    return best


@njit(cache=True, error_model="numpy")
def _removed(out_bytes: np.ndarray, bandwidth: np.ndarray, latency: np.ndarray, u: int, g: np.ndarray,
             P: np.ndarray, Q: np.ndarray, j: int, L: int) -> float:
    """min X of g without g[j] (k >= 2)."""
    k = g.shape[0]
    if j == 0:
        return Q[1, 0]
    if j == k - 1:
        return P[k - 2, L]
    best = INF
    for a in range(1, L):
        if P[j - 1, a] == INF or Q[j + 1, a] == INF:
            continue
        v = max(P[j - 1, a], _lam(out_bytes, bandwidth, latency, u, g[j - 1], g[j + 1], a, L), Q[j + 1, a])
        if v < best:
            best = v
    return best


@njit(cache=True, error_model="numpy")
def edit_bounds(fwd_prefix: np.ndarray, bwd_prefix: np.ndarray, out_bytes: np.ndarray, bandwidth: np.ndarray,
                latency: np.ndarray, u: int, g: np.ndarray, cand: np.ndarray, maxend: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower bounds (seconds per sample) on GPipe's min-bottleneck alpha, min X + min Y, of
    the edits of order g (k,) by the devices cand (m,) (not in g): (insert (m, k+1): cand[i]
    at position p; replace (m, k): cand[i] in place of g[p]; remove (k,): without g[p], inf
    when k = 1). maxend (n, L+1): per device, the furthest end of a stage from each start
    (dp_kernel.maxend_rule at one micro-batch, every device a row)."""
    k, m = g.shape[0], cand.shape[0]
    L = fwd_prefix.shape[1] - 1
    ins = np.zeros((m, k + 1))
    rep = np.zeros((m, k))
    rem = np.zeros(k)
    for S in (fwd_prefix, bwd_prefix):
        P, Q = _prefix_suffix(S, out_bytes, bandwidth, latency, u, g, maxend)
        for i in range(m):
            for p in range(k + 1):
                ins[i, p] += _middle(S, out_bytes, bandwidth, latency, u, g, maxend, P, Q, p, cand[i], p)
            for p in range(k):
                rep[i, p] += _middle(S, out_bytes, bandwidth, latency, u, g, maxend, P, Q, p, cand[i], p + 1)
        for p in range(k):
            rem[p] += INF if k == 1 else _removed(out_bytes, bandwidth, latency, u, g, P, Q, p, L)
    return ins, rep, rem
