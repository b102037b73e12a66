"""Contiguous layer partitions (cut points) of one ordered group (DESIGN.md section 3, step 3).

For an ordered group (d_1..d_k) the cuts 0 < c_1 < ... < c_k = L give stage j the
layers c_{j-1}..c_j - 1. Its per-sample GPipe bottleneck is

    alpha = max(max_j F_j, max_j lam_j) + max(max_j G_j, max_j lam_j)      (seconds/sample)

which is not a plain bottleneck (the sum of two maxima taken over different stages). Write
X = max(F, lam) and Y = max(G, lam): alpha = X + Y and each of X, Y alone *is* a bottleneck
over stages and boundaries. So the minimum of X + Y lies on the (X, Y) Pareto frontier, which
`min_bottleneck_cuts` traces exactly with min-max dynamic programs:

    b_1 = min Y;  a_1 = min X s.t. Y <= b_1;  b_2 = min Y s.t. X < a_1;  a_2 = ...

stopping when b_i + min X can no longer beat the best a_i + b_i. Each DP is
O(k L^2), vectorised over (start, end) pairs with the prefix sums of the state.

Memory: stage j fits when k_opt * P_j + s * H_j <= M_{d_j} with s = the share the group must
be able to hold (one micro-batch by default; a one-stage group only ever stashes one
micro-batch), matching `costmodel.share_cap`.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .costmodel import gpipe_coeffs, share_cap, stage_times
from .model import SlotState

Cuts = tuple[int, ...]
INF = float("inf")


@dataclass(frozen=True, eq=False)
class GroupArrays:
    """Numbers of one ordered group for the cut DPs. Fp, Gp: (k, L+1) prefix sums of forward /
    backward seconds per sample on each stage's device (stage a..c-1 costs Fp[j, c] - Fp[j, a]);
    lam[j, c]: seconds per sample across the boundary after stage j when it ends at layer c
    (inf where c is not a cut point); need[a, c]: bytes a stage a..c-1 needs for `share`
    samples; mem[j]: memory of stage j's device."""

    devices: tuple[int, ...]
    L: int
    u: int
    Fp: np.ndarray
    Gp: np.ndarray
    lam: np.ndarray
    need: np.ndarray
    mem: np.ndarray
    cache: dict = field(default_factory=dict, repr=False)


_STATE_CACHE: "weakref.WeakKeyDictionary[SlotState, dict]" = weakref.WeakKeyDictionary()
_NEED_KEEP = 32        # memory-need matrices kept per state (one per share)
_ARRAYS_BYTES = 256 << 20   # rough bytes of GroupArrays (with their DP scratch) kept per state


def state_cache(state: SlotState) -> dict:
    """A per-state scratch dict (dropped with the state): prefix-sum derived arrays that do not
    depend on the group, shared by the cut DPs, the baselines and the search."""
    c = _STATE_CACHE.get(state)
    if c is None:
        c = _STATE_CACHE[state] = {}
    return c


def _need(state: SlotState, s: int) -> np.ndarray:
    """(L+1, L+1) bytes a stage a..c-1 needs for s samples (cached per state and share)."""
    cache = state_cache(state).setdefault("need", {})
    need = cache.get(s)
    if need is None:
        wl = state.workload
        pp, sp = state.param_prefix, state.stash_prefix
        # fits iff free >= 0 and free >= (s - 1e-9 u) H, free = M - k_opt P (as share_cap rounds)
        need = wl.opt_factor * (pp[None, :] - pp[:, None]) + (s - 1e-9 * wl.micro_batch) * (sp[None, :] - sp[:, None])
        if len(cache) >= _NEED_KEEP:
            cache.pop(next(iter(cache)))
        cache[s] = need
    return need


def group_arrays(state: SlotState, devices: Sequence[int], min_share: int | None = None) -> GroupArrays | None:
    """Arrays of an ordered group, or None when it has no device or more devices than layers
    (cached per state, devices and share: the DPs' scratch matrices are kept with them)."""
    wl = state.workload
    L, u = wl.num_layers, wl.micro_batch
    k = len(devices)
    if k == 0 or k > L:
        return None
    s = u if (min_share is None or k == 1) else max(int(min_share), u)
    key = (tuple(int(x) for x in devices), s)
    arrays = state_cache(state).setdefault("arrays", {})
    ga = arrays.get(key)
    if ga is not None:
        return ga
    d = np.asarray(key[0], dtype=int)
    mem = np.array([state.devices[i].memory_bytes for i in d], dtype=float)
    lam = np.full((max(k - 1, 0), L + 1), INF)
    if k > 1:
        bw = state.bandwidth[d[:-1], d[1:]]
        lat = state.latency[d[:-1], d[1:]] / u
        lam[:, 1:L] = wl.out_bytes[None, : L - 1] / bw[:, None] + lat[:, None]
    ga = GroupArrays(key[0], L, u, state.fwd_prefix[d], state.bwd_prefix[d], lam, _need(state, s), mem)
    size = 48 * k * (L - k + 2) ** 2 + 1024    # fits masks and up to five cost-matrix sets
    sc = state_cache(state)
    used = sc.get("arrays_bytes", 0) + size
    while arrays and used > _ARRAYS_BYTES:
        old = arrays.pop(next(iter(arrays)))
        used -= 48 * len(old.devices) * (old.L - len(old.devices) + 2) ** 2 + 1024
    sc["arrays_bytes"] = used
    arrays[key] = ga
    return ga


Constraint = tuple[np.ndarray, np.ndarray, float, bool]
"""(stage prefix (k, L+1), boundary cost (k-1, L+1), limit, strict): every stage's and every
boundary's value must be <= limit (< when strict)."""


def _stage_window(j: int, k: int, L: int) -> tuple[int, int, int, int]:
    """Slices [a_lo, a_hi) of starts and [c_lo, c_hi) of ends that stage j of k can have."""
    w = L - k + 1
    a_lo, a_hi = (0, 1) if j == 0 else (j, j + w)
    c_lo, c_hi = (L, L + 1) if j == k - 1 else (j + 1, j + w + 1)
    return a_lo, a_hi, c_lo, c_hi


def _fits(ga: GroupArrays, j: int) -> np.ndarray:
    """Mask over stage j's window: non-empty and within the device's memory (cached)."""
    m = ga.cache.get(j)
    if m is None:
        k = len(ga.devices)
        a_lo, a_hi, c_lo, c_hi = _stage_window(j, k, ga.L)
        m = ((np.arange(a_lo, a_hi)[:, None] < np.arange(c_lo, c_hi)[None, :])
             & (ga.need[a_lo:a_hi, c_lo:c_hi] <= ga.mem[j]))
        ga.cache[j] = m
    return m


def _stage_costs(ga: GroupArrays, prefix: np.ndarray) -> list[np.ndarray]:
    """Per stage j, the window matrix prefix[j, c] - prefix[j, a], inf where the stage is empty
    or does not fit in memory (cached on the group while `prefix` is alive in the cache)."""
    key = ("cost", id(prefix))
    hit = ga.cache.get(key)
    if hit is not None and hit[0] is prefix:
        return hit[1]
    k, L = len(ga.devices), ga.L
    mats = []
    for j in range(k):
        a_lo, a_hi, c_lo, c_hi = _stage_window(j, k, L)
        v = prefix[j, c_lo:c_hi][None, :] - prefix[j, a_lo:a_hi][:, None]
        mats.append(np.where(_fits(ga, j), v, INF))
    ga.cache[key] = (prefix, mats)
    return mats


def _minmax_dp(ga: GroupArrays, prefix: np.ndarray, bound: np.ndarray,
               constraints: Sequence[Constraint] = (), minsum: bool = False
               ) -> tuple[float, Cuts | None]:
    """Minimise the max (with minsum: the sum) over stages of prefix[j, c] - prefix[j, a] and
    over boundaries of bound[j, c], every stage non-empty and within memory, subject to the
    constraints. Returns (value, cuts) or (inf, None). O(k (L-k+1)^2)."""
    k, L = len(ga.devices), ga.L
    costs = _stage_costs(ga, prefix)
    cons = [(_stage_costs(ga, cp), cb, lim, strict) for cp, cb, lim, strict in constraints]
    finite_lam = ga.cache.get("lamok")
    if finite_lam is None:
        finite_lam = ga.cache["lamok"] = np.isfinite(ga.lam)
    dp = np.zeros(0)
    back = []
    for j in range(k):
        a_lo, a_hi, c_lo, c_hi = _stage_window(j, k, L)
        cost = costs[j]
        for cm, _, lim, strict in cons:
            if lim == INF and not strict:
                continue
            cost = np.where((cm[j] < lim) if strict else (cm[j] <= lim), cost, INF)
        if j == 0:
            dp = cost[0]                        # ends c = 1 .. (or L when k == 1)
            continue
        b = bound[j - 1, a_lo:a_hi]             # boundary after stage j-1, which ends at a
        bok = finite_lam[j - 1, a_lo:a_hi]
        for _, cb, lim, strict in cons:
            bv = cb[j - 1, a_lo:a_hi]
            bok = bok & ((bv < lim) if strict else (bv <= lim))
        prev = np.where(bok, (dp + b) if minsum else np.maximum(dp, b), INF)
        cand = (prev[:, None] + cost) if minsum else np.maximum(prev[:, None], cost)
        arg = np.argmin(cand, axis=0)
        dp = cand.min(axis=0)
        back.append(arg)
    val = float(dp[-1])                         # the last stage ends at L
    if not np.isfinite(val):
        return INF, None
    cuts = [L]
    i = len(dp) - 1
    for j in range(k - 1, 0, -1):
        i = int(back[j - 1][i])                 # stage j starts at j + i, where stage j-1 ends
        cuts.append(j + i)
    return val, tuple(reversed(cuts))


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
    a_min, _ = _minmax_dp(ga, Fp, lam)
    if not np.isfinite(a_min):
        return []
    points: list[tuple[float, float, Cuts]] = []
    best = INF
    a_lim, strict = INF, False
    while True:
        b, _ = _minmax_dp(ga, Gp, lam, [(Fp, lam, a_lim, strict)])
        if not np.isfinite(b) or b + a_min >= best:
            break
        a, cuts = _minmax_dp(ga, Fp, lam, [(Gp, lam, b, False)])
        points.append((a, b, cuts))
        best = min(best, a + b)
        a_lim, strict = a, True
    return points


def _cached_arrays(state: SlotState, devices: Sequence[int], min_share: int | None,
                   arrays: GroupArrays | None) -> GroupArrays | None:
    if arrays is not None:
        return arrays
    return group_arrays(state, devices, min_share)


def _single(state: SlotState, devices: Sequence[int], min_share: int | None) -> Cuts | None:
    L = state.workload.num_layers
    single = state_cache(state).setdefault("single", {})
    d = int(devices[0])
    if d not in single:
        single[d] = (L,) if share_cap(state, (d,), (L,)) >= state.workload.micro_batch else None
    return single[d]


def min_bottleneck_cuts(state: SlotState, devices: Sequence[int], min_share: int | None = None,
                        *, arrays: GroupArrays | None = None) -> Cuts | None:
    """Cut points minimising alpha exactly for this device order, every stage non-empty and
    every stage within memory for a share of `min_share` samples (default one micro-batch);
    None when no such cut set exists."""
    if len(devices) == 1:
        return _single(state, devices, min_share)
    ga = _cached_arrays(state, devices, min_share, arrays)
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


def frontier_cuts(state: SlotState, devices: Sequence[int], limit: int = 4, min_share: int | None = None,
                  *, arrays: GroupArrays | None = None) -> list[Cuts]:
    """Up to `limit` cut sets on the (alpha, beta) Pareto frontier of this ordered group,
    min-alpha first, then increasing alpha / decreasing beta. Candidates: the exact min-alpha
    frontier points, and min-sum DPs (least fill-and-drain work sum F + G + 2 lam, which is
    beta + u * alpha over u) under the min-alpha thresholds relaxed by RELAX factors."""
    if len(devices) == 1:
        c = _single(state, devices, min_share)
        return [c] if c is not None else []
    ga = _cached_arrays(state, devices, min_share, arrays)
    if ga is None:
        return []
    hit = ga.cache.get(("fc", limit))
    if hit is None:
        hit = ga.cache[("fc", limit)] = tuple(_frontier_cuts(state, devices, limit, ga))
    return list(hit)


def _frontier_cuts(state: SlotState, devices: Sequence[int], limit: int, ga: GroupArrays) -> list[Cuts]:
    pts = _alpha_frontier(ga)
    if not pts:
        return []
    found = {p[2] for p in pts}
    work = _work(ga)
    lam2 = ga.cache.get("lam2")
    if lam2 is None:
        lam2 = ga.cache["lam2"] = 2.0 * ga.lam
    for a, b, _ in sorted(pts, key=lambda p: p[0] + p[1])[:2]:
        for r in RELAX:
            cons = [(ga.Fp, ga.lam, r * a, False), (ga.Gp, ga.lam, r * b, False)]
            _, cuts = _minmax_dp(ga, work, lam2, cons, minsum=True)
            if cuts is not None:
                found.add(cuts)
    _, cuts = _minmax_dp(ga, work, lam2, minsum=True)
    if cuts is not None:
        found.add(cuts)
    scored = sorted((alpha_beta(state, devices, c) + (c,) for c in found), key=lambda t: (t[0], t[1]))
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


def balanced_cuts(state: SlotState, devices: Sequence[int], min_share: int | None = None) -> Cuts | None:
    """Heterogeneity- and communication-blind balance (GPipe, DAPPLE): cuts minimising the
    largest stage compute time as if every device had the group's mean per-layer time
    (forward + backward seconds per sample), within memory for `min_share` samples."""
    if len(devices) == 1:
        return _single(state, devices, min_share)
    ga = group_arrays(state, devices, min_share)
    if ga is None:
        return None
    if "balanced" not in ga.cache:
        d = list(devices)
        w = (state.fwd_prefix[d] + state.bwd_prefix[d]).mean(axis=0)
        wb = np.broadcast_to(w, ga.Fp.shape)
        _, ga.cache["balanced"] = _minmax_dp(ga, wb, np.zeros_like(ga.lam))
        ga.cache.pop(("cost", id(wb)), None)
    return ga.cache["balanced"]
