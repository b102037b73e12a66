"""Ring orders for one bucket's all-reduce: the (bandwidth, latency) Pareto front of the
directed rings through m holders, given their (m, m) link matrices (positions, not device
indices).

A ring's time is 2(m-1)/m bytes / its slowest link + 2(m-1) its largest latency (cost.sync),
so the best ring for any bucket size lies on the front of (slowest link, largest latency)
over all (m-1)! rings. cost.sync reaches it three ways, by size:

- up to cost.sync.EXACT_RINGS_UP_TO holders, every ring enumerated (cost.sync._all_rings);
- up to cost.sync.EXACT_FRONT_UP_TO, the least ring for the bucket's size by branch and bound
  (`best_ring`), or where that runs past its node limit, the exact front (`exact_front`: each
  front point by threshold search over a Hamiltonian-cycle test, a dynamic programme over
  subsets, `_reach`); either way the ring is a least one and the sync time monotone in every
  link;
- above, `improved_rings`: nearest-neighbour chains, each improved by 2-opt and or-opt
  descents under a bandwidth-first and a latency-first key, a heuristic.
"""
from __future__ import annotations

import numpy as np
from numba import njit

Key = tuple[float, int, float, int]
"""A ring's (slowest link bytes/s, links that slow, largest latency s, links with it)."""


@njit(cache=True)
def _into(bw: np.ndarray, lat: np.ndarray, theta: float, lam: float) -> np.ndarray:
    """into[w]: the bit set of positions u != w with a link u -> w of at least theta bytes/s
    and at most lam seconds."""
    m = bw.shape[0]
    into = np.zeros(m, dtype=np.int64)
    for u in range(m):
        for w in range(m):
            if u != w and bw[u, w] >= theta and lat[u, w] <= lam:
                into[w] |= np.int64(1) << u
    return into


@njit(cache=True)
def _reach(into: np.ndarray) -> np.ndarray:
    """reach[S], over the sets S of positions that hold position 0: the bit set of the
    positions v at which a path can end that starts at 0 and visits exactly S, on the links of
    `into`. Recurrence: reach[{0}] = {0}; v in reach[S + {v}] iff some u in reach[S] has a link
    u -> v. A ring through all m positions exists iff reach[all] holds a u with a link u -> 0.
    O(2^m m) bit operations."""
    m = into.shape[0]
    size = np.int64(1) << m
    reach = np.zeros(size, dtype=np.int64)
    reach[1] = 1
    for S in range(1, size, 2):
        r = reach[S]
        if r == 0:
            continue
        for w in range(1, m):
            bit = np.int64(1) << w
            if (S & bit) == 0 and (r & into[w]) != 0:
                reach[S | bit] |= bit
    return reach


@njit(cache=True)
def _has_ring(bw: np.ndarray, lat: np.ndarray, theta: float, lam: float) -> bool:
    """Whether a ring through all positions has every link >= theta bytes/s and <= lam s: first
    the O(m^2) necessary test (every position has a link in and a link out), then `_reach`."""
    into = _into(bw, lat, theta, lam)
    full = (np.int64(1) << bw.shape[0]) - 1
    outs = np.int64(0)
    for w in range(into.shape[0]):
        if into[w] == 0:
            return False
        outs |= into[w]
    if outs != full:
        return False
    return (_reach(into)[full] & into[0]) != 0


@njit(cache=True)
def _lowest(bits: np.int64) -> int:
    v = 0
    while (bits >> v) & 1 == 0:
        v += 1
    return v


@njit(cache=True)
def _ring(bw: np.ndarray, lat: np.ndarray, theta: float, lam: float) -> np.ndarray:
    """Successor row of a ring whose links all have >= theta bytes/s and <= lam seconds (one
    must exist): walked back from the full set through `_reach`, the lowest position first."""
    m = bw.shape[0]
    into = _into(bw, lat, theta, lam)
    reach = _reach(into)
    S = (np.int64(1) << m) - 1
    order = np.empty(m, dtype=np.int64)
    v = _lowest(reach[S] & into[0])
    order[m - 1] = v
    for k in range(m - 2, 0, -1):
        S ^= np.int64(1) << v
        v = _lowest(reach[S] & into[v])
        order[k] = v
    order[0] = 0
    succ = np.empty(m, dtype=np.int64)
    for i in range(m - 1):
        succ[order[i]] = order[i + 1]
    succ[order[m - 1]] = order[0]
    return succ


@njit(cache=True)
def _at(values: np.ndarray, v: float) -> int:
    """The index of v in `values` (it is there)."""
    for i in range(values.shape[0]):
        if values[i] == v:
            return i
    return -1


@njit(cache=True)
def exact_front(bw: np.ndarray, lat: np.ndarray, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(succ (C, m), slowest link bytes/s (C,), largest latency s (C,)): one ring per point of
    the exact (bandwidth, latency) Pareto front over every directed ring of the m >= 3
    positions, by decreasing bandwidth. Each point, under a latency cap (at first none): the
    most bandwidth B any ring has with every latency <= the cap, then the least cap a ring of
    bandwidth >= B needs; the next point's cap is the next smaller latency value. Both are
    searched over the distinct link values with `_has_ring` (O(2^m m) each), starting from what
    the rings `seeds` (P, m successor rows, any rings, e.g. a heuristic's) already reach: where
    a seed is on the front, one test beyond it settles each search; else a binary search
    (about log2(m^2) tests) goes on from there."""
    m = bw.shape[0]
    off = ~np.eye(m, dtype=np.bool_)
    bws = np.unique(bw.ravel()[off.ravel()])[::-1]         # decreasing
    lats = np.unique(lat.ravel()[off.ravel()])              # increasing
    P = seeds.shape[0]
    sb, sl = np.empty(P), np.empty(P)
    for p in range(P):
        b, t = np.inf, -np.inf
        for i in range(m):
            b, t = min(b, bw[i, seeds[p, i]]), max(t, lat[i, seeds[p, i]])
        sb[p], sl[p] = b, t
    rows = []
    ring_bw = []
    ring_lat = []
    cap = len(lats) - 1
    while cap >= 0:
        j, known = len(bws) - 1, False          # a feasible bandwidth index under the cap
        for p in range(P):
            if sl[p] <= lats[cap]:
                k = _at(bws, sb[p])
                if not known or k < j:
                    j, known = k, True
        if not known and not _has_ring(bw, lat, bws[j], lats[cap]):
            break
        if j > 0 and _has_ring(bw, lat, bws[j - 1], lats[cap]):
            lo, hi = 0, j - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if _has_ring(bw, lat, bws[mid], lats[cap]):
                    hi = mid
                else:
                    lo = mid + 1
            j = lo
        theta = bws[j]
        a, seed = cap, -1                       # a feasible latency index at bandwidth theta
        for p in range(P):
            if sb[p] >= theta and sl[p] <= lats[a]:
                a, seed = _at(lats, sl[p]), p
        if a > 0 and _has_ring(bw, lat, theta, lats[a - 1]):
            lo, hi = 0, a - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if _has_ring(bw, lat, theta, lats[mid]):
                    hi = mid
                else:
                    lo = mid + 1
            a, seed = lo, -1
        rows.append(seeds[seed].copy() if seed >= 0 and sb[seed] == theta and sl[seed] == lats[a]
                    else _ring(bw, lat, theta, lats[a]))
        ring_bw.append(theta)
        ring_lat.append(lats[a])
        cap = a - 1
    succ = np.empty((len(rows), m), dtype=np.int64)
    for i in range(len(rows)):
        succ[i] = rows[i]
    return succ, np.array(ring_bw), np.array(ring_lat)


@njit(cache=True)
def _completion_bound(ibw: np.ndarray, lat: np.ndarray, used: np.ndarray, last: int, x: float, t: float,
                      a: float, c: float, stop: float) -> float:
    """A lower bound on the cost a * (largest 1/bandwidth) + c * (largest latency) of every ring
    that starts with the path of worst links x (s/byte) and t (s) ending at `last`, the positions
    of `used` visited: every unvisited w needs a link in from `last` or another unvisited one and
    a link out to 0 or another unvisited one, and 0 a link in from an unvisited one, and a ring
    costs at least what its path and any one of its links cost together. Returns early once the
    bound reaches `stop`."""
    m = ibw.shape[0]
    bound = a * x + c * t
    into0, left = np.inf, 0
    for w in range(m):
        if used[w]:
            continue
        left += 1
        best_in = a * max(x, ibw[last, w]) + c * max(t, lat[last, w])
        best_out = a * max(x, ibw[w, 0]) + c * max(t, lat[w, 0])
        into0 = min(into0, best_out)
        for u in range(m):
            if u != w and not used[u]:
                best_in = min(best_in, a * max(x, ibw[u, w]) + c * max(t, lat[u, w]))
                best_out = min(best_out, a * max(x, ibw[w, u]) + c * max(t, lat[w, u]))
        bound = max(bound, best_in, best_out)
        if bound >= stop:
            return bound
    if left == 0:
        return a * max(x, ibw[last, 0]) + c * max(t, lat[last, 0])
    return max(bound, into0)


@njit(cache=True)
def best_ring(bw: np.ndarray, lat: np.ndarray, a: float, c: float, seeds: np.ndarray,
              max_nodes: int) -> tuple[np.ndarray, float, float, bool]:
    """(succ (m,), its slowest link bytes/s, its largest latency s, done): a directed ring
    through the m >= 3 positions of least a / (slowest link bytes/s) + c * (largest latency s)
    (for one bucket's all-reduce, a = 2(m-1)/m bytes and c = 2(m-1)), by depth-first branch
    and bound from position 0.

    The incumbent starts as the best of the rings `seeds` (P >= 1 successor rows); a path is
    extended, children in position order, only while `_completion_bound` stays below the
    incumbent, so a ring replaces it only when strictly cheaper. done is False when the search
    stopped after max_nodes extended paths: succ is then the best ring found, not proven least.
    Worst case (m-1)! leaves; on 8-10 holders of random clusters about 100-1,000 paths."""
    m = bw.shape[0]
    ibw = 1.0 / bw
    best = np.inf
    succ = seeds[0].copy()
    for p in range(seeds.shape[0]):
        x, t = 0.0, -np.inf
        for i in range(m):
            x, t = max(x, ibw[i, seeds[p, i]]), max(t, lat[i, seeds[p, i]])
        if a * x + c * t < best:
            best = a * x + c * t
            succ[:] = seeds[p]
    path = np.zeros(m, dtype=np.int64)
    nxt = np.ones(m, dtype=np.int64)           # the next child to try at each depth
    px, pt = np.zeros(m), np.full(m, -np.inf)  # each depth's path: largest 1/bandwidth, latency
    used = np.zeros(m, dtype=np.bool_)
    used[0] = True
    d, nodes = 0, 0
    while d >= 0:
        last = path[d]
        if d == m - 1:
            x, t = max(px[d], ibw[last, 0]), max(pt[d], lat[last, 0])
            if a * x + c * t < best:
                best = a * x + c * t
                for i in range(m - 1):
                    succ[path[i]] = path[i + 1]
                succ[last] = 0
            used[last] = False
            d -= 1
            continue
        k = nxt[d]
        x, t = 0.0, 0.0
        while k < m:
            if not used[k]:
                x, t = max(px[d], ibw[last, k]), max(pt[d], lat[last, k])
                if a * x + c * t < best:
                    used[k] = True
                    bound = _completion_bound(ibw, lat, used, k, x, t, a, c, best)
                    used[k] = False
                    if bound < best:
                        break
            k += 1
        if k == m:
            used[last] = d == 0
            d -= 1
            continue
        if nodes == max_nodes:
            break
        nodes += 1
        nxt[d] = k + 1
        d += 1
        path[d], used[k], px[d], pt[d], nxt[d] = k, True, x, t, 1
    ring_bw, ring_lat = np.inf, -np.inf
    for i in range(m):
        ring_bw, ring_lat = min(ring_bw, bw[i, succ[i]]), max(ring_lat, lat[i, succ[i]])
    return succ, ring_bw, ring_lat, d < 0


@njit(cache=True)
def _key(bw: np.ndarray, lat: np.ndarray, order: np.ndarray) -> Key:
    """(slowest link, how many links are that slow, largest latency, how many links have it) of
    the ring visiting `order`."""
    m = order.shape[0]
    b, nb, t, nt = np.inf, 0, -np.inf, 0
    for i in range(m):
        x, y = bw[order[i], order[(i + 1) % m]], lat[order[i], order[(i + 1) % m]]
        if x < b:
            b, nb = x, 1
        elif x == b:
            nb += 1
        if y > t:
            t, nt = y, 1
        elif y == t:
            nt += 1
    return b, nb, t, nt


@njit(cache=True)
def _better(k1: Key, k2: Key, by_latency: bool) -> bool:
    """k1 before k2: more bandwidth, fewer links at it, then less latency, fewer links at it
    (by_latency: the latency pair first)."""
    b1, nb1, t1, nt1 = k1
    b2, nb2, t2, nt2 = k2
    if by_latency:
        if t1 != t2:
            return t1 < t2
        if nt1 != nt2:
            return nt1 < nt2
    if b1 != b2:
        return b1 > b2
    if nb1 != nb2:
        return nb1 < nb2
    if t1 != t2:
        return t1 < t2
    return nt1 < nt2


@njit(cache=True)
def _worst_link(bw: np.ndarray, lat: np.ndarray, order: np.ndarray, by_latency: bool) -> int:
    """The first position i whose link order[i] -> order[i + 1] is the ring's slowest (by_latency:
    of largest latency)."""
    m = order.shape[0]
    pick, worst = 0, 0.0
    for i in range(m):
        a, c = order[i], order[(i + 1) % m]
        v = lat[a, c] if by_latency else -bw[a, c]
        if i == 0 or v > worst:
            pick, worst = i, v
    return pick


@njit(cache=True)
def _reversed(o: np.ndarray, i: int, j: int, out: np.ndarray) -> None:
    """out: o with its path o[i..j] reversed (2-opt: links o[i-1] -> o[i] and o[j] -> o[j+1]
    replaced by o[i-1] -> o[j] and o[i] -> o[j+1])."""
    for k in range(o.shape[0]):
        out[k] = o[i + j - k] if i <= k <= j else o[k]


@njit(cache=True)
def _moved(o: np.ndarray, i: int, j: int, out: np.ndarray) -> None:
    """out: o with o[i] taken out and put back at place j of what is left (or-opt)."""
    m = o.shape[0]
    p = 0
    for k in range(m):
        if k != i:
            out[p] = o[k]
            p += 1
    for k in range(m - 1, j, -1):
        out[k] = out[k - 1]
    out[j] = o[i]


@njit(cache=True)
def _fails(bw: np.ndarray, lat: np.ndarray, a: int, c: int, key: Key, by_latency: bool) -> bool:
    """True when a ring with the link a -> c cannot come before one of `key` (`_better`): the
    link is slower than its slowest (by_latency: of more latency than its largest)."""
    return lat[a, c] > key[2] if by_latency else bw[a, c] < key[0]


@njit(cache=True)
def _first_reversal(bw: np.ndarray, lat: np.ndarray, o: np.ndarray, cur: Key, by_latency: bool, every_move: bool,
                    tmp: np.ndarray) -> tuple[bool, Key]:
    """The first path reversal (2-opt) of the ring visiting `o` whose key comes before `cur`
    (`_better`): (True, its key), the ring in tmp; else (False, cur). Every reversal, or with
    every_move False those of a prefix only (they remove the link o[m - 1] -> o[0])."""
    m = o.shape[0]
    for i in range(0, m - 1 if every_move else 1):
        for j in range(i + 1, m - 1 if i == 0 else m):
            if _fails(bw, lat, o[i - 1], o[j], cur, by_latency) or \
                    _fails(bw, lat, o[i], o[(j + 1) % m], cur, by_latency):
                continue
            _reversed(o, i, j, tmp)
            got = _key(bw, lat, tmp)
            if _better(got, cur, by_latency):
                return True, got
    return False, cur


@njit(cache=True)
def _first_relocation(bw: np.ndarray, lat: np.ndarray, o: np.ndarray, cur: Key, by_latency: bool, every_move: bool,
                      tmp: np.ndarray) -> tuple[bool, Key]:
    """The first move of one position elsewhere (or-opt), as `_first_reversal`; with every_move
    False only of o[0] and o[m - 1], the ends of the link o[m - 1] -> o[0]."""
    m = o.shape[0]
    for i in range(m):
        if not every_move and 0 < i < m - 1:
            continue
        if _fails(bw, lat, o[i - 1], o[(i + 1) % m], cur, by_latency):
            continue
        for j in range(m):
            if j == i:
                continue
            # o[i]'s neighbours at place j of o without it (`_moved`)
            prev = o[j - 1 if j - 1 < i else j] if j > 0 else o[m - 1 if i < m - 1 else m - 2]
            nxt = o[j if j < i else j + 1] if j < m - 1 else o[0 if i > 0 else 1]
            if _fails(bw, lat, prev, o[i], cur, by_latency) or _fails(bw, lat, o[i], nxt, cur, by_latency):
                continue
            _moved(o, i, j, tmp)
            got = _key(bw, lat, tmp)
            if _better(got, cur, by_latency):
                return True, got
    return False, cur


@njit(cache=True)
def improve(bw: np.ndarray, lat: np.ndarray, order: np.ndarray, by_latency: bool, every_move: bool,
            max_steps: int) -> np.ndarray:
    """A first-improvement descent from the ring visiting `order` under `_better`'s key, at
    most max_steps steps. Moves: reversing a path (2-opt) and moving one position elsewhere
    (or-opt); with every_move all of them (O(m^3) per step at worst), else only those that
    remove the ring's worst link (O(m^2): the ring rotated so that link closes it, every
    reversal of a prefix and every move of either of its ends). A move whose new links alone
    are worse than the ring's key (`_fails`) is not evaluated."""
    m = order.shape[0]
    o = order.copy()
    tmp = np.empty(m, dtype=np.int64)
    cur = _key(bw, lat, o)
    for _ in range(max_steps):
        if not every_move:      # the worst link o[m - 1] -> o[0]
            i = _worst_link(bw, lat, o, by_latency)
            for k in range(m):
                tmp[k] = o[(i + 1 + k) % m]
            o[:] = tmp
        found, got = _first_reversal(bw, lat, o, cur, by_latency, every_move, tmp)
        if not found:
            found, got = _first_relocation(bw, lat, o, cur, by_latency, every_move, tmp)
        if not found:
            break
        o[:] = tmp
        cur = got
    return o


@njit(cache=True)
def improved_rings(bw: np.ndarray, lat: np.ndarray, succ: np.ndarray, every_move: bool, max_steps: int) -> np.ndarray:
    """(2P, m) successor rows: each ring of succ (P, m) improved by `improve` under the
    bandwidth-first key and under the latency-first key."""
    P, m = succ.shape
    out = np.empty((2 * P, m), dtype=np.int64)
    order = np.empty(m, dtype=np.int64)
    for p in range(P):
        order[0] = 0
        for k in range(1, m):
            order[k] = succ[p, order[k - 1]]
        for h in range(2):
            o = improve(bw, lat, order, h == 1, every_move, max_steps)
            for k in range(m):
                out[2 * p + h, o[k]] = o[(k + 1) % m]
    return out
