"""Contiguous layer partitions (cut points) of one ordered group (DESIGN.md section 3, step 3).

For an ordered group (d_1..d_k) the cuts 0 < c_1 < ... < c_k = L give stage j the
layers c_{j-1}..c_j - 1. Its per-sample GPipe bottleneck is

    alpha = max(max_j F_j, max_j lam_j) + max(max_j G_j, max_j lam_j)      (seconds/sample)

which is not a plain bottleneck (the sum of two maxima taken over different stages). Write
X = max(F, lam) and Y = max(G, lam): alpha = X + Y and each of X, Y alone *is* a bottleneck
over stages and boundaries. So the minimum of X + Y lies on the (X, Y) Pareto frontier, which
`min_bottleneck_cuts` traces exactly with min-max dynamic programs:

    b_1 = min Y;  a_1 = min X s.t. Y <= b_1;  b_2 = min Y s.t. X < a_1;  a_2 = ...

stopping when b_i + min X can no longer beat the best a_i + b_i, or once a_i = min X (no cut
set has X below it, so b_{i+1} does not exist). Each DP is
O(k L^2): by default the compiled scalar recurrence of `dp_kernel.cut_dp` (no temporaries;
its memory rule `maxend` is built from the same need matrix and comparisons as the numpy
masks); a SlotCache made with dp_backend="numpy" selects the vectorised numpy recurrence
below instead (the same operations in the same order, so the same values and cuts; kept as
the reference the kernel is tested and benchmarked against). With the compiled DPs, where
every stage has one TP degree, `min_bottleneck_cuts` and `frontier_cuts`' candidates are one
compiled call each (`dp_kernel.cut_candidates`: the group's rows and links, its memory rule
from the prefix sums in the need matrices' own operations, the frontier walk), with no group
arrays or need matrices built in Python.

Memory: stage j fits when k_opt * P_j + s * H_j <= M_{d_j} with s = the share the group must
be able to hold (one micro-batch by default; a one-stage group only ever stashes one
micro-batch), matching `model.memory.share_cap`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..cost.pipeline import gpipe_coeffs, plain_gpipe_rows, stage_times
from ..model import SlotState
from . import dp_kernel
from .cache import Cuts, GroupArrays, SlotCache, slot_cache

INF = float("inf")

def group_arrays(state: SlotState, devices: Sequence[int], min_share: int | None = None, *,
                 cache: SlotCache | None = None) -> GroupArrays | None:
    """Arrays of an ordered group (SlotCache.group_arrays), or None when it has no device or
    more devices than layers."""
    return slot_cache(state, cache).group_arrays(devices, min_share)


Constraint = tuple[np.ndarray, np.ndarray, float, bool]
"""(stage prefix (k, L+1), boundary cost (k-1, L+1), limit, strict): every stage's and every
boundary's value must be <= limit (< when strict)."""


def _stage_window(j: int, k: int, L: int) -> tuple[int, int, int, int]:
    """Slices [a_lo, a_hi) of starts and [c_lo, c_hi) of ends that stage j of k can have."""
    w = L - k + 1
    a_lo, a_hi = (0, 1) if j == 0 else (j, j + w)
    c_lo, c_hi = (L, L + 1) if j == k - 1 else (j + 1, j + w + 1)
    return a_lo, a_hi, c_lo, c_hi


def _strided(x: np.ndarray, r0: int, c0: int, shape: tuple, strides: tuple) -> np.ndarray:
    if x.flags.c_contiguous and x.base is None:
        # a read-only view straight on x's buffer (as_strided's result, without its overhead)
        v = np.ndarray(shape, x.dtype, x, r0 * x.strides[0] + c0 * x.strides[1], strides)
        v.flags.writeable = False
        return v
    return np.lib.stride_tricks.as_strided(x[r0:, c0:], shape=shape, strides=strides, writeable=False)


def _rows(x: np.ndarray, r0: int, n: int, w: int, off: int) -> np.ndarray:
    """(n, w) strided view x[r0 + t, r0 + t + off + i] (no copy)."""
    s0, s1 = x.strides
    return _strided(x, r0, r0 + off, (n, w), (s0 + s1, s1))


# Stage costs of a k-stage group are kept as three parts over windows of w = L - k + 1
# positions: first (w,) stage 0 = layers 0..1+c'-1; mid (k-2, w, w) stage j = 1..k-2 starts at
# a = j + a' and ends at c = j + 1 + c'; last (w,) stage k-1 starts at k-1+a' and ends at L.
# Invalid stages (empty, over memory, or for k = 1 not ending at L) cost inf.


def _penalty3(ga: GroupArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, mid, last) penalties: 0 where the stage is valid, inf elsewhere (cached)."""
    pen = ga.cache.get("pen3")
    if pen is None:
        k, L = len(ga.devices), ga.L
        w = L - k + 1
        need, mem = ga.need, ga.mem
        s0, s1 = need.strides
        first = need[0, 1:w + 1] <= mem[0]
        if k == 1:
            first = first & (np.arange(w) == w - 1)
        if k > 2:
            r = np.arange(w)
            if ga.needs is None:
                fits = _strided(need, 1, 2, (k - 2, w, w), (s0 + s1, s0, s1)) <= mem[1:k - 1, None, None]
            else:       # stages of different TP degrees: each its own need matrix
                fits = np.stack([ga.needs[j][j:j + w, j + 1:j + 1 + w] <= mem[j] for j in range(1, k - 1)])
            mid = (r[:, None] <= r[None, :])[None, :, :] & fits
        else:
            mid = np.zeros((0, w, w), dtype=bool)
        last = ga.stage_need(k - 1)[k - 1:k - 1 + w, L] <= mem[k - 1] if k > 1 else np.zeros(0, dtype=bool)
        pen = ga.cache["pen3"] = tuple(np.where(m, 0.0, INF) for m in (first, mid, last))
    return pen


def _win3(ga: GroupArrays, prefix: np.ndarray, memo: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, mid, last) stage values prefix[j, c] - prefix[j, a], inf where the stage is
    invalid; with memo, cached on the group (the cache keeps `prefix` alive, so its id stays
    its own). Fp and Gp share stacked arrays (see _fg3)."""
    if prefix is ga.Fp or prefix is ga.Gp:
        i = 0 if prefix is ga.Fp else 1
        return tuple(x[i] for x in _fg3(ga))
    if not memo:
        return _win3_uncached(ga, prefix)
    key = ("win3", id(prefix))
    hit = ga.cache.get(key)
    if hit is not None and hit[0] is prefix:
        return hit[1]
    v = _win3_uncached(ga, prefix)
    ga.cache[key] = (prefix, v)
    return v


def _win3_uncached(ga: GroupArrays, prefix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    k, L = len(ga.devices), ga.L
    w = L - k + 1
    pf, pm, pl = _penalty3(ga)
    first = (prefix[0, 1:w + 1] - prefix[0, 0]) + pf
    if k > 2:
        mid = (_rows(prefix, 1, k - 2, w, 1)[:, None, :] - _rows(prefix, 1, k - 2, w, 0)[:, :, None]) + pm
    else:
        mid = np.zeros((0, w, w))
    last = (prefix[k - 1, L] - prefix[k - 1, k - 1:k - 1 + w]) + pl if k > 1 else np.zeros(0)
    return first, mid, last


def _fg3(ga: GroupArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_win3 of Fp and of Gp stacked on a leading axis of 2 (cached)."""
    v = ga.cache.get("fg3")
    if v is None:
        v = ga.cache["fg3"] = _fg3_uncached(ga)
    return v


def _fg3_uncached(ga: GroupArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_win3_uncached of Fp and of Gp in one stacked pass (the same float operations)."""
    k, L = len(ga.devices), ga.L
    w = L - k + 1
    pf, pm, pl = _penalty3(ga)
    P = np.stack([ga.Fp, ga.Gp])
    first = (P[:, 0, 1:w + 1] - P[:, 0, 0:1]) + pf
    if k > 2:
        S, s0, s1 = P.strides
        hi = np.ndarray((2, k - 2, w), P.dtype, P, s0 + 2 * s1, (S, s0 + s1, s1))
        lo = np.ndarray((2, k - 2, w), P.dtype, P, s0 + s1, (S, s0 + s1, s1))
        mid = (hi[:, :, None, :] - lo[:, :, :, None]) + pm
    else:
        mid = np.zeros((2, 0, w, w))
    last = (P[:, k - 1, L:L + 1] - P[:, k - 1, k - 1:k - 1 + w]) + pl if k > 1 else np.zeros((2, 0))
    return first, mid, last


def _bwin(ga: GroupArrays, bound: np.ndarray, memo: bool = True) -> np.ndarray:
    """(k-1, w): bound[j-1, j + a'] for stage j = 1..k-1 starting at a' (the boundary before
    it), inf where the link cost lam is not finite (with memo, cached like _win3)."""
    key = ("bwin", id(bound))
    hit = ga.cache.get(key) if memo else None
    if hit is not None and hit[0] is bound:
        return hit[1]
    k, L = len(ga.devices), ga.L
    w = L - k + 1
    lam = _rows(ga.lam, 0, k - 1, w, 1)
    v = np.where(np.isfinite(lam), _rows(bound, 0, k - 1, w, 1), INF)
    if memo:
        ga.cache[key] = (bound, v)
    return v


def _recurrence(cost: tuple, bnd: np.ndarray | None, minsum: bool) -> tuple[np.ndarray, list]:
    """Forward pass over stages ((first, mid, last) costs, (..., k-1, w) boundary costs, any
    leading axes): returns (the optimum (...), the per-stage `prev` vectors for _backtrack)."""
    first, mid, last = cost
    dp = first
    prevs = []
    buf = None
    for j in range(1, mid.shape[-3] + 1):
        b = bnd[..., j - 1, :]
        prev = (dp + b) if minsum else np.maximum(dp, b)
        prevs.append(prev)
        c = mid[..., j - 1, :, :]
        if buf is None:
            buf = np.empty(c.shape)
        if minsum:
            np.add(prev[..., :, None], c, out=buf)
        else:
            np.maximum(prev[..., :, None], c, out=buf)
        dp = buf.min(axis=-2)
    if bnd is None:                             # one stage: it ends at L
        return dp[..., -1], prevs
    b = bnd[..., -1, :]
    prev = (dp + b) if minsum else np.maximum(dp, b)
    prevs.append(prev)
    return ((prev + last) if minsum else np.maximum(prev, last)).min(axis=-1), prevs


def _backtrack(cost: tuple, prevs: list, minsum: bool, L: int) -> Cuts:
    """Cuts of the optimum of one forward pass: the first minimising start of each stage (as
    a full argmin would pick)."""
    first, mid, last = cost
    k = mid.shape[0] + 2
    p = prevs[-1]
    i = int(np.argmin((p + last) if minsum else np.maximum(p, last)))    # last stage starts at k-1+i
    out = [L, k - 1 + i]
    for j in range(k - 2, 0, -1):
        col = mid[j - 1, :, i]
        p = prevs[j - 1]
        i = int(np.argmin((p + col) if minsum else np.maximum(p, col)))   # stage j starts at j + i
        out.append(j + i)
    return tuple(reversed(out))


def _constrained(ga: GroupArrays, prefix: np.ndarray, bound: np.ndarray, constraints: Sequence[Constraint],
                 memo: bool = True) -> tuple[tuple, np.ndarray | None]:
    k = len(ga.devices)
    cost = _win3(ga, prefix, memo)
    bnd = _bwin(ga, bound, memo) if k > 1 else None
    for cp, cb, lim, strict in constraints:
        if lim == INF and not strict:
            continue
        cm = _win3(ga, cp)
        cost = tuple(np.where((m < lim) if strict else (m <= lim), x, INF) for m, x in zip(cm, cost))
        if k > 1:
            bv = _bwin(ga, cb)
            bnd = np.where((bv < lim) if strict else (bv <= lim), bnd, INF)
    return cost, bnd


def _maxend(ga: GroupArrays) -> np.ndarray:
    """(k, L+1) last end layer of a stage of ga starting at a that fits its device's memory,
    from the same need matrix and comparisons as _penalty3 (cached)."""
    me = ga.cache.get("maxend")
    if me is None:
        me = ga.cache["maxend"] = dp_kernel.maxend_of(ga.need, ga.needs, ga.mem)
    return me


def _kernel_dp(ga: GroupArrays, prefix: np.ndarray, bound: np.ndarray, constraints: Sequence[Constraint],
               minsum: bool, cuts: bool) -> tuple[float, Cuts | None]:
    """_minmax_dp on the compiled kernel."""
    k, L = len(ga.devices), ga.L
    cons = [c for c in constraints if not (c[2] == INF and not c[3])]
    if cons:
        CS = np.stack([np.ascontiguousarray(c[0], dtype=float) for c in cons])
        CB = np.stack([np.ascontiguousarray(c[1], dtype=float) for c in cons])
    else:
        CS, CB = np.empty((0, k, L + 1)), np.empty((0, max(k - 1, 0), L + 1))
    lims = np.array([float(c[2]) for c in cons], dtype=float)
    strict = np.array([bool(c[3]) for c in cons], dtype=np.bool_)
    S = np.ascontiguousarray(np.broadcast_to(prefix, (k, L + 1)), dtype=float)
    B = np.ascontiguousarray(bound, dtype=float).reshape(max(k - 1, 0), L + 1)
    val, cut = dp_kernel.cut_dp(S, ga.lam, B, _maxend(ga), CS, CB, lims, strict, bool(minsum))
    val = float(val)
    if not val < INF:
        return INF, None
    return val, (tuple(cut.tolist()) if cuts else None)


def _minmax_dp(ga: GroupArrays, prefix: np.ndarray, bound: np.ndarray,
               constraints: Sequence[Constraint] = (), minsum: bool = False, cuts: bool = True,
               memo: bool = True) -> tuple[float, Cuts | None]:
    """Minimise the max (with minsum: the sum) over stages of prefix[j, c] - prefix[j, a] and
    over boundaries of bound[j, c], every stage non-empty and within memory, subject to the
    constraints. Returns (value, cuts) or (inf, None); with cuts=False only the value (cuts
    None). memo=False: keep nothing of `prefix` and `bound` (one-off arrays). O(k (L-k+1)^2):
    the compiled kernel, or with the numpy backend a few numpy calls per stage."""
    if ga.dp == "compiled":
        return _kernel_dp(ga, prefix, bound, constraints, minsum, cuts)
    cost, bnd = _constrained(ga, prefix, bound, constraints, memo)
    val, prevs = _recurrence(cost, bnd, minsum)
    val = float(val)
    if not val < INF:
        return INF, None
    if not cuts:
        return val, None
    if len(ga.devices) == 1:
        return val, (ga.L,)
    return val, _backtrack(cost, prevs, minsum, ga.L)


def _work(ga: GroupArrays) -> np.ndarray:
    """Fp + Gp (cached on the group)."""
    w = ga.cache.get("work")
    if w is None:
        w = ga.cache["work"] = ga.Fp + ga.Gp
    return w


def _alpha_frontier(ga: GroupArrays) -> list[tuple[float, float, Cuts]]:
    """The (X, Y) Pareto points visited while minimising alpha = X + Y exactly, in order of
    increasing Y; the last points may be cut short by the bound (see module docstring).
    Cached on the group."""
    pts = ga.cache.get("frontier")
    if pts is None:
        pts = ga.cache["frontier"] = _alpha_frontier_uncached(ga)
    return pts


def _alpha_frontier_uncached(ga: GroupArrays) -> list[tuple[float, float, Cuts]]:
    Fp, Gp, lam = ga.Fp, ga.Gp, ga.lam
    if ga.dp == "compiled":
        A, Bv, C = dp_kernel.alpha_frontier(np.ascontiguousarray(Fp, dtype=float), np.ascontiguousarray(Gp, dtype=float),
                                            np.ascontiguousarray(lam, dtype=float), _maxend(ga))
        return [(a, b, tuple(c) if a < INF else None) for a, b, c in zip(A.tolist(), Bv.tolist(), C.tolist())]
    a_min, b_min = _min_xy_numpy(ga)
    if not a_min < INF:
        return []
    points: list[tuple[float, float, Cuts]] = []
    best = INF
    a_lim, strict = INF, False
    while True:
        if a_lim == INF and not strict:
            b = b_min if b_min < INF else INF
        else:
            b, _ = _minmax_dp(ga, Gp, lam, [(Fp, lam, a_lim, strict)], cuts=False)
        if not np.isfinite(b) or b + a_min >= best:
            break
        a, cuts = _minmax_dp(ga, Fp, lam, [(Gp, lam, b, False)])
        points.append((a, b, cuts))
        best = min(best, a + b)
        a_lim, strict = a, True
    return points


def _min_xy_numpy(ga: GroupArrays) -> tuple[float, float]:
    """(min X, min Y) with no constraint, in one stacked numpy pass."""
    if len(ga.devices) > 1:
        bl = _bwin(ga, ga.lam)
        bl = np.broadcast_to(bl, (2,) + bl.shape)
    else:
        bl = None
    dp, _ = _recurrence(_fg3(ga), bl, False)
    return float(dp[0]), float(dp[1])


def min_bottleneck_cuts(state: SlotState, devices: Sequence[int], min_share: int | None = None,
                        *, cache: SlotCache | None = None, schedule: str = "gpipe", recompute: bool = False
                        ) -> Cuts | None:
    """Cut points minimising alpha exactly for this device order, every stage non-empty and
    every stage within memory for a share of `min_share` samples (default one micro-batch);
    None when no such cut set exists. Under another schedule or with recomputation, each stage
    within its own peak memory of that schedule (SlotCache.group_arrays) and alpha the GPipe
    form of its stage times (recomputation: backward + forward)."""
    sc = slot_cache(state, cache)
    if len(devices) == 1:
        return sc.single_cuts(devices[0])
    return sc.twin_cuts(("min-alpha", min_share, schedule, bool(recompute)), devices,
                        lambda: _min_bottleneck_cuts(sc, devices, min_share, schedule, recompute))


_NO_RELAX = np.empty(0)


def _fused(sc: SlotCache, devices: Sequence[int], min_share: int | None, schedule: str, recompute: bool,
           relax: np.ndarray, seeds: int) -> np.ndarray | None:
    """dp_kernel.cut_candidates (plain_cut_candidates on plain states) of the group's rule;
    None where neither SlotCache.plain_rule nor dp_rule applies."""
    args = sc.plain_rule(devices, min_share, schedule, recompute)
    if args is not None:
        return dp_kernel.plain_cut_candidates(*args, relax, seeds)
    args = sc.dp_rule(devices, min_share, schedule, recompute)
    return None if args is None else dp_kernel.cut_candidates(*args, relax, seeds)


def _min_bottleneck_cuts(sc: SlotCache, devices: Sequence[int], min_share: int | None, schedule: str,
                         recompute: bool) -> Cuts | None:
    got = _fused(sc, devices, min_share, schedule, recompute, _NO_RELAX, -1)
    if got is not None:       # one compiled call, the same cuts as the path below
        return _first_row(got)
    ga = sc.group_arrays(devices, min_share, schedule, recompute)
    if ga is None:
        return None
    pts = _alpha_frontier(ga)
    if not pts:
        return None
    return min(pts, key=lambda p: p[0] + p[1])[2]


def alpha_beta(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of an ordered, cut group."""
    F, G, lam = stage_times(state, devices, cuts)
    return gpipe_coeffs(F, G, lam, state.workload.micro_batch)


RELAX = (1.0, 1.05, 1.15, 1.35, 1.7, 2.5)
"""Default factors on the min-alpha thresholds of frontier_cuts (solve.options.SearchTuning)."""


def frontier_cuts(state: SlotState, devices: Sequence[int], limit: int = 4, min_share: int | None = None,
                  *, cache: SlotCache | None = None, relax: Sequence[float] = RELAX, seeds: int = 2,
                  schedule: str = "gpipe", recompute: bool = False) -> list[Cuts]:
    """Up to `limit` cut sets on the (alpha, beta) Pareto frontier of this ordered group,
    min-alpha first, then increasing alpha / decreasing beta. Candidates: the exact min-alpha
    frontier points, and min-sum DPs (least fill-and-drain work sum F + G + 2 lam, which is
    beta + u * alpha over u) under the thresholds (X, Y) of the `seeds` best min-alpha points
    relaxed by each factor of `relax`. schedule, recompute: every stage within its own peak
    memory of that variant (as min_bottleneck_cuts), the points ranked by GPipe's (alpha, beta)."""
    sc = slot_cache(state, cache)
    if len(devices) == 1:
        c = sc.single_cuts(devices[0])
        return [c] if c is not None else []
    def compute() -> tuple[Cuts, ...]:
        found = _fused(sc, devices, min_share, schedule, recompute, np.asarray(relax, dtype=float), int(seeds))
        if found is not None:       # one compiled call for the candidates, the same as the path below
            return tuple(_pareto_pick(state, devices, {tuple(c) for c in found.tolist()}, limit))
        ga = sc.group_arrays(devices, min_share, schedule, recompute)
        return () if ga is None else tuple(_frontier_cuts(state, devices, limit, ga, tuple(relax), int(seeds)))
    return list(sc.twin_cuts(("frontier", limit, tuple(relax), int(seeds), min_share, schedule, bool(recompute)),
                             devices, compute))


def _frontier_cuts(state: SlotState, devices: Sequence[int], limit: int, ga: GroupArrays,
                   relax: tuple[float, ...], seeds: int) -> list[Cuts]:
    pts = _alpha_frontier(ga)
    if not pts:
        return []
    lam2 = ga.cache.get("lam2")
    if lam2 is None:
        lam2 = ga.cache["lam2"] = 2.0 * ga.lam
    found = {p[2] for p in pts} | set(_relaxed_minsum(ga, pts, _work(ga), lam2, relax, seeds))
    return _pareto_pick(state, devices, found, limit)


def _relaxed_minsum(ga: GroupArrays, pts: list[tuple[float, float, Cuts]], prefix: np.ndarray, bound: np.ndarray,
                    relax: Sequence[float], seeds: int, memo: bool = True) -> list[Cuts]:
    """The cut sets of least sum over stages of `prefix` (plus `bound` on the boundaries) under
    the thresholds X <= r a, Y <= r b of the `seeds` best (least a + b) min-alpha frontier points
    `pts` for each factor r of `relax`, then under none; distinct, in that order."""
    found: dict[Cuts, None] = {}
    for a, b, _ in sorted(pts, key=lambda p: p[0] + p[1])[:seeds]:
        for r in relax:
            cons = [(ga.Fp, ga.lam, r * a, False), (ga.Gp, ga.lam, r * b, False)]
            _, cuts = _minmax_dp(ga, prefix, bound, cons, minsum=True, memo=memo)
            if cuts is not None:
                found[cuts] = None
    _, cuts = _minmax_dp(ga, prefix, bound, minsum=True, memo=memo)
    if cuts is not None:
        found[cuts] = None
    return list(found)


def busy_cuts(state: SlotState, devices: Sequence[int], weights: Sequence[float], min_share: int | None = None,
              *, cache: SlotCache | None = None, relax: Sequence[float] = RELAX, seeds: int = 2,
              schedule: str = "gpipe", recompute: bool = False) -> list[Cuts]:
    """Cut sets of an ordered group that spend little weighted busy energy: per stage j,
    weights[j] (the objective's weight of one busy second per sample on stage j's device, its
    busy power above idle included: solve.oracle_cuts.busy_weights; > 0 somewhere) times the
    seconds per sample it computes (forward plus backward, plus the forward again under
    recomputation). The min-bottleneck cuts balance seconds, but where energy weighs, moving
    layers from a power-hungry stage to an efficient one pays even at a longer bottleneck.
    Candidates: _relaxed_minsum of that weighted energy (as frontier_cuts' of the fill-and-drain
    work); memory as min_bottleneck_cuts for `min_share` samples under the variant (schedule,
    recompute). [] when no cut set fits or no weight is positive."""
    w = np.asarray(weights, dtype=float)
    if len(devices) < 2 or not np.any(w > 0):
        return []
    sc = slot_cache(state, cache)
    key = ("busy", tuple(w.tolist()), tuple(relax), int(seeds), min_share, schedule, bool(recompute))

    def compute() -> tuple[Cuts, ...]:
        ga = sc.group_arrays(devices, min_share, schedule, recompute)
        if ga is None:
            return ()
        pts = _alpha_frontier(ga)
        if not pts:
            return ()
        free = np.where(np.isfinite(ga.lam), 0.0, INF)      # boundaries cost no busy joules
        return tuple(_relaxed_minsum(ga, pts, w[:, None] * _work(ga), free, relax, seeds, memo=False))
    return list(sc.twin_cuts(key, devices, compute))


def _pareto_pick(state: SlotState, devices: Sequence[int], found: set[Cuts], limit: int) -> list[Cuts]:
    """frontier_cuts' answer from its candidate cut sets: their (alpha, beta) Pareto front,
    min-alpha first, thinned to `limit` points spread along it."""
    cands = list(found)
    if cands and state.network is None and len(devices) > 1:      # alpha_beta of every candidate in one compiled call
        wl = state.workload
        ab = plain_gpipe_rows(state.fwd_prefix, state.bwd_prefix, wl.out_bytes, state.bandwidth, state.latency,
                              int(wl.micro_batch), np.asarray(devices, dtype=np.int64),
                              np.array(cands, dtype=np.int64)).tolist()
        rows = [(a, b, c) for (a, b), c in zip(ab, cands)]
    else:
        rows = [alpha_beta(state, devices, c) + (c,) for c in cands]
    scored = sorted(rows, key=lambda t: (t[0], t[1]))
    pareto: list[tuple[float, float, Cuts]] = []
    for a, b, c in scored:
        if not pareto or b < pareto[-1][1] - 1e-15 * max(1.0, abs(b)):
            pareto.append((a, b, c))
    if len(pareto) <= limit:
        return [p[2] for p in pareto]
    if limit <= 1:
        return [pareto[0][2]]
    idx = sorted({round(i * (len(pareto) - 1) / (limit - 1)) for i in range(limit)})
    return [pareto[i][2] for i in idx]


def blind_cuts(state: SlotState, devices: Sequence[int], layer_seconds: np.ndarray, boundary: np.ndarray,
               min_share: int | None = None, *, cache: SlotCache | None = None) -> tuple[float, Cuts | None]:
    """Cuts minimising the slowest of the stages and boundaries under costs the caller gives
    (heterogeneity-blind planners: every stage priced as if on one typical device):
    layer_seconds (L+1,) prefix sums of seconds per sample per layer, the same on every stage;
    boundary (k-1, L+1) seconds per sample across the boundary after stage j ending at layer c
    (used only where the group's real link cost is finite). Stages within memory for
    `min_share` samples (default one micro-batch). Returns (that bottleneck in seconds per
    sample, cuts), or (inf, None) when no cut set fits. Nothing of the two arrays is cached."""
    sc = slot_cache(state, cache)
    args = sc.plain_rule(devices, min_share)
    if args is not None:        # the kernel's own rows, links and memory rule: the same DP as below
        k, L1 = len(devices), state.workload.num_layers + 1
        _, _, lam = dp_kernel.plain_group_arrays(*args[:7])
        maxend = dp_kernel.maxend_rule(*args[7:11], float(args[5]), *args[11:])
        S = np.ascontiguousarray(np.broadcast_to(np.asarray(layer_seconds, dtype=float), (k, L1)))
        B = np.ascontiguousarray(boundary, dtype=float).reshape(k - 1, L1)
        val, cut = dp_kernel.cut_dp(S, lam, B, maxend, np.empty((0, k, L1)), np.empty((0, k - 1, L1)),
                                    np.empty(0), np.empty(0, dtype=np.bool_), False)
        return (float(val), tuple(cut.tolist())) if val < INF else (INF, None)
    ga = sc.group_arrays(devices, min_share)
    if ga is None:
        return INF, None
    stage = np.broadcast_to(np.asarray(layer_seconds, dtype=float), ga.Fp.shape)
    return _minmax_dp(ga, stage, np.asarray(boundary, dtype=float), memo=False)


def balanced_cuts(state: SlotState, devices: Sequence[int], min_share: int | None = None, *,
                  cache: SlotCache | None = None) -> Cuts | None:
    """Heterogeneity- and communication-blind balance (GPipe, DAPPLE): cuts minimising the
    largest stage compute time as if every device had the group's mean per-layer time
    (forward + backward seconds per sample), within memory for `min_share` samples."""
    sc = slot_cache(state, cache)
    if len(devices) == 1:
        return sc.single_cuts(devices[0])
    if sc.plain_applies(len(devices)):      # one compiled call (dp_kernel.BALANCED), the same cuts as below
        return sc.twin_cuts(("balanced", min_share), devices, lambda: _first_row(
            dp_kernel.plain_cut_candidates(*sc.plain_rule(devices, min_share), _NO_RELAX, dp_kernel.BALANCED)))
    ga = sc.group_arrays(devices, min_share)
    if ga is None:
        return None
    if "balanced" not in ga.cache:
        d = list(devices)
        w = (state.fwd_prefix[d] + state.bwd_prefix[d]).mean(axis=0)
        _, ga.cache["balanced"] = blind_cuts(state, devices, w, np.zeros_like(ga.lam), min_share, cache=sc)
    return ga.cache["balanced"]


def _first_row(rows: np.ndarray) -> Cuts | None:
    """The first cut set of a kernel's (p, k) rows, or None when it has none."""
    return tuple(rows[0].tolist()) if len(rows) else None


def memory_levels(state: SlotState, devices: Sequence[int], max_share: int | None = None, *,
                  cache: SlotCache | None = None) -> list[int]:
    """The shares u, 2u, ..., max_share (default the batch) at which the set of stages that
    fit this ordered group's memory changes: the smallest share of each distinct set (a cut
    DP's answer depends on the share only through that set)."""
    sc = slot_cache(state, cache)
    wl = state.workload
    u = wl.micro_batch
    top = wl.batch if max_share is None else int(max_share)
    if len(devices) <= 1:
        return [u]
    levels, last = [], None
    for s in range(u, top + 1, u):
        ga = sc.group_arrays(devices, s)
        if ga is None:
            return []
        me = _maxend(ga)
        if last is None or not np.array_equal(me, last):
            levels.append(s)
            last = me
        if not np.any(me[:, :-1] > np.arange(ga.L)[None, :]):
            break                               # no stage fits any more: larger shares neither
    return levels


def frontier_cuts_all_levels(state: SlotState, devices: Sequence[int], limit: int = 4,
                             max_share: int | None = None, *, cache: SlotCache | None = None,
                             relax: Sequence[float] = RELAX, seeds: int = 2) -> list[Cuts]:
    """frontier_cuts at every memory level of `memory_levels` (each share the integer shares
    can reach, up to max_share), in that order, without repeats."""
    found: dict[Cuts, None] = {}
    for s in memory_levels(state, devices, max_share, cache=cache):
        found.update(dict.fromkeys(frontier_cuts(state, devices, limit, s, cache=cache, relax=relax, seeds=seeds)))
    return list(found)
