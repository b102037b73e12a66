"""Cross-group gradient synchronisation: bucketed ring all-reduces (seconds per iteration).

The ring of each bucket is the best ring order for its holders (one device per group), not
the order of the groups in the plan: a plan fixes who holds each bucket, and the all-reduce
of that bucket runs on the ring of its holders that the cost model finds fastest
(`best_rings`). So without a network a plan's groups may be listed in any order; its sync
time, its egress and the event simulator's sync (which uses `sync_time`) do not depend on that
order. With a network (shared NICs), `buckets` also tries the group-order rings and keeps them
where they are faster under NIC sharing, so there the order of the groups can change the sync
time (Sailor's 32 GPUs: two listings of the same groups, 2.04 s and 2.72 s).
"""
from __future__ import annotations

import itertools
from bisect import bisect_right
from functools import lru_cache
from typing import Sequence

import numpy as np
from numba import njit

from ..model.network import effective_bandwidth
from ..model.state import SlotState
from .rings import best_ring, exact_front, improved_rings

Structure = Sequence[tuple[Sequence[int], Sequence[int]]]
"""Groups without shares: ((devices, cuts), ...)."""

EXACT_RINGS_UP_TO = 7
"""Rings of up to this many holders are chosen by enumerating every directed ring (6! = 720
at 7)."""

EXACT_FRONT_UP_TO = 10
"""Above EXACT_RINGS_UP_TO and up to this many holders, each bucket's ring is a least one:
found by branch and bound for the bucket's size (cost.rings.best_ring, from the
nearest-neighbour rings; about 0.02 ms a call at 8 holders), or where that stops at
BRANCH_NODES, taken from the exact Pareto front (cost.rings.exact_front, threshold search over
a Hamiltonian-cycle test seeded with the heuristic's rings: about 0.1 ms a set at 8 holders,
1 ms at 12). Above it, the heuristic front (`_front`: nearest-neighbour chains improved by the
moves that remove their worst link, about 0.02 ms a set at 8-16 holders). At 12 the exact
front made 64-device searches over many 8-12-group structures up to 7x slower (bench_budget
seed 790031: 7.3 s against 1.0 s); the branch and bound does not scale past 10 either (a
2,000-node cap leaves most 14-holder calls unfinished)."""

BRANCH_NODES = 2_000
"""Paths the branch and bound of one bucket's ring (cost.rings.best_ring) may extend, above
EXACT_RINGS_UP_TO and up to EXACT_FRONT_UP_TO holders, before the bucket's ring is taken from
the exact front instead (about 0.2 ms at 8-10 holders; most sets need 50-1,000)."""

NN_STARTS = 8
"""Start devices of the nearest-neighbour rings the heuristic starts from."""

_TIE = 1e-12
"""Relative margin by which a ring must beat an earlier candidate (the group order first)."""


@lru_cache(maxsize=None)
def _all_rings(m: int) -> np.ndarray:
    """(P, m) int: succ[p, i] the ring successor of position i, over every directed ring of m
    positions (position 0 fixed first: (m-1)! rings)."""
    rows = []
    for rest in itertools.permutations(range(1, m)):
        order = (0,) + rest
        succ = np.empty(m, dtype=int)
        succ[list(order)] = list(order[1:] + order[:1])
        rows.append(succ)
    return np.array(rows, dtype=int)


def _edges(state: SlotState, holders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, m) bytes/s and seconds of the ring edges among `holders`: the pair's nominal
    bandwidth times min of the two TP degrees (parallel shards), and its latency."""
    bw = state.bandwidth[holders][:, holders]
    if state.tp is not None:
        t = np.asarray(state.tp, dtype=float)[holders]
        bw = bw * np.minimum(t[:, None], t[None, :])
    return bw, state.latency[holders][:, holders]


@njit(cache=True)
def _nn_order(bw: np.ndarray, lat: np.ndarray, start: int) -> np.ndarray:
    m = bw.shape[0]
    order = np.empty(m, dtype=np.int64)
    left = np.ones(m, dtype=np.bool_)
    order[0] = start
    left[start] = False
    for step in range(1, m):
        last = order[step - 1]
        pick, best_bw, best_lat = -1, -np.inf, np.inf
        for c in range(m):              # increasing index: ties keep the first
            if left[c] and (bw[last, c] > best_bw or (bw[last, c] == best_bw and lat[last, c] < best_lat)):
                pick, best_bw, best_lat = c, bw[last, c], lat[last, c]
        order[step] = pick
        left[pick] = False
    return order


@njit(cache=True)
def _nn_rings(bw: np.ndarray, lat: np.ndarray, starts: int) -> np.ndarray:
    """(starts, m) successor rows: row s is the chain from position s that always goes on to
    the unvisited holder with the fastest link from the last one (ties: lower latency, then
    position), closed into a ring."""
    m = bw.shape[0]
    succ = np.empty((starts, m), dtype=np.int64)
    for s in range(starts):
        order = _nn_order(bw, lat, s)
        for i in range(m - 1):
            succ[s, order[i]] = order[i + 1]
        succ[s, order[m - 1]] = order[0]
    return succ


def _edge_figures(state: SlotState, members: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(bw, lat, key): `_edges` of the sorted `members` as contiguous float arrays, and a key
    equal for every holder set with the same edge figures (like servers); cached per state and
    set (SlotState.link_memo)."""
    memo = state.link_memo("_ring_edges")
    hit = memo.get(members)
    if hit is None:
        bw, lat = _edges(state, np.asarray(members, dtype=int))
        bw, lat = np.ascontiguousarray(bw, dtype=float), np.ascontiguousarray(lat, dtype=float)
        hit = memo[members] = (bw, lat, (len(members), bw.tobytes(), lat.tobytes()))
    return hit


def _front(state: SlotState, members: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(succ (C, m) over positions in `members` (sorted device indices), slowest-link bytes/s
    (C,), largest latency (C,)) of the (bandwidth, latency) Pareto-optimal rings: among every
    directed ring up to EXACT_RINGS_UP_TO members (ties in the order of enumeration), the exact
    front up to EXACT_FRONT_UP_TO (cost.rings.exact_front), above it among the nearest-neighbour
    rings from NN_STARTS starts and those rings improved by the 2-opt and or-opt moves that remove
    their worst link, under the bandwidth-first and the latency-first key (cost.rings.improved_rings).
    Cached per state and set
    (SlotState.link_memo), and computed once per (bandwidth, latency) edge matrices: it is a
    function of those alone (positions, not device indices)."""
    memo = state.link_memo("_ring_fronts")
    hit = memo.get(members)
    if hit is not None:
        return hit
    m = len(members)
    bw, lat, key = _edge_figures(state, members)
    by_edges = state.link_memo("_ring_fronts_by_edges")
    hit = by_edges.get(key)
    if hit is None:
        if m <= EXACT_RINGS_UP_TO:
            succ = _all_rings(m)
        else:
            nn = _nn_seeds(state, members)
            succ = np.concatenate((nn, improved_rings(bw, lat, nn, False, 10 * m)))
        if EXACT_RINGS_UP_TO < m <= EXACT_FRONT_UP_TO:
            hit = by_edges[key] = exact_front(bw, lat, succ)        # the heuristic's rings as seeds
        else:
            keep, ring_bw, ring_lat = _pareto_rings(bw, lat, succ)
            hit = by_edges[key] = (succ[keep], ring_bw[keep], ring_lat[keep])
    memo[members] = hit
    return hit


def _nn_seeds(state: SlotState, members: tuple[int, ...]) -> np.ndarray:
    """`_nn_rings` of the members from min(m, NN_STARTS) starts; cached per edge figures."""
    bw, lat, key = _edge_figures(state, members)
    memo = state.link_memo("_ring_nn_by_edges")
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _nn_rings(bw, lat, min(len(members), NN_STARTS))
    return hit


@njit(cache=True)
def _pareto_rings(bw: np.ndarray, lat: np.ndarray, succ: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keep, ring_bw, ring_lat): each ring's slowest link (bytes/s) and largest latency (s)
    for successor rows succ (P, m) over the (m, m) link matrices, and the rows of the
    (bandwidth, latency) Pareto front, by decreasing bandwidth (ties: lower latency, then the
    earlier row), each kept when its latency is below every row's before it."""
    P, m = succ.shape
    ring_bw = np.empty(P)
    ring_lat = np.empty(P)
    for p in range(P):
        b, t = bw[0, succ[p, 0]], lat[0, succ[p, 0]]
        for i in range(1, m):
            b = min(b, bw[i, succ[p, i]])
            t = max(t, lat[i, succ[p, i]])
        ring_bw[p], ring_lat[p] = b, t
    keep = np.empty(P, dtype=np.int64)
    n, least = 0, np.inf
    while True:             # the first row in that order with a latency below `least` (no sort:
        pick = -1           # the front has a few rows, and numba compiles a sort for seconds)
        for p in range(P):
            if ring_lat[p] < least and (pick < 0 or ring_bw[p] > ring_bw[pick]
                                        or (ring_bw[p] == ring_bw[pick] and ring_lat[p] < ring_lat[pick])):
                pick = p
        if pick < 0:
            return keep[:n], ring_bw, ring_lat
        keep[n] = pick
        n += 1
        least = ring_lat[pick]


def ring_candidates(state: SlotState, holders: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rings worth trying for one bucket's holders (in group order): (succ (C, m) ring
    successors by position, slowest-link bytes/s (C,), largest latency (C,)), the group order
    first, then the Pareto front of the holders as a set (`_front`: exact up to
    EXACT_FRONT_UP_TO holders, so the best ring for any bucket size is among them; above, a
    heuristic's). Cached per state and holders (SlotState.link_memo)."""
    memo = state.link_memo("_ring_candidates")
    key = tuple(int(h) for h in holders)
    hit = memo.get(key)
    if hit is not None:
        return hit
    m = len(key)
    h = np.asarray(key, dtype=int)
    nxt = np.roll(h, -1)
    par = 1.0 if state.tp is None else np.minimum(np.asarray(state.tp, dtype=float)[h], np.asarray(state.tp, dtype=float)[nxt])
    g_bw = np.array([float((state.bandwidth[h, nxt] * par).min())])
    g_lat = np.array([float(state.latency[h, nxt].max())])
    group = np.roll(np.arange(m), -1)[None, :]
    if m <= 2:
        hit = (group, g_bw, g_lat)
    else:
        members = tuple(sorted(key))
        f_succ, f_bw, f_lat = _front(state, members)
        where = {d: i for i, d in enumerate(key)}           # device -> position in group order
        to_group = np.array([where[d] for d in members])     # sorted position -> group position
        conv = np.empty_like(f_succ)
        conv[:, to_group] = to_group[f_succ]
        hit = (np.concatenate([group, conv]), np.concatenate([g_bw, f_bw]), np.concatenate([g_lat, f_lat]))
    memo[key] = hit
    return hit


def best_rings(state: SlotState, cols: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """nxt (m, buckets): each bucket's holder's ring successor on the ring of least
    2(m-1)/m * nbytes / slowest link + 2(m-1) * largest latency (nominal link bandwidths)
    among the group order and the holders' rings (`_choose_ring`); exact for up to
    EXACT_FRONT_UP_TO groups. The group order is kept unless a ring is faster by more than a
    1e-12 share.
    Each (holders, bytes) choice is cached per state (SlotState.link_memo)."""
    memo = state.link_memo("_ring_choice")
    out = []
    for holders, nb in zip(map(tuple, cols.T.tolist()), nbytes.tolist()):
        key = (holders, nb)
        succ = memo.get(key)
        if succ is None:
            succ = memo[key] = _choose_ring(state, holders, nb)
        out.append(succ)
    return np.array(out, dtype=int).T


def _choose_ring(state: SlotState, holders: tuple[int, ...], nbytes: float) -> tuple[int, ...]:
    """Each holder's successor on the best ring of best_rings for one bucket of nbytes bytes:
    the group-order ring unless the holders' least ring (`_front_choice`: the best of their
    Pareto front, or of the branch and bound at 8-10 holders) beats it by more than the _TIE
    share."""
    m = len(holders)
    if m <= 2:
        return holders[1:] + holders[:1]
    group, g_bw, g_lat, members = _group_ring(state, holders)
    g_cost = 2.0 * (m - 1) / m * nbytes / g_bw + 2.0 * (m - 1) * g_lat
    f_cost, f_next = _front_choice(state, members, nbytes)
    best = min(g_cost, f_cost)
    if g_cost <= best + _TIE * abs(best):
        return group
    succ_of = dict(zip(members, f_next))
    return tuple(succ_of[d] for d in holders)


def _group_ring(state: SlotState, holders: tuple[int, ...]) -> tuple[tuple[int, ...], float, float, tuple[int, ...]]:
    """(each holder's successor on the group-order ring, its slowest link bytes/s (times the TP
    degrees' min), its largest latency seconds, the holders sorted): what `_choose_ring` needs
    of a holders tuple whatever the bucket's size; cached per state (SlotState.link_memo)."""
    memo = state.link_memo("_ring_group")
    hit = memo.get(holders)
    if hit is None:
        group = holders[1:] + holders[:1]
        tp = state.tp
        g_bw = min(float(state.bandwidth[a, b]) * (1.0 if tp is None else min(tp[a], tp[b]))
                   for a, b in zip(holders, group))
        g_lat = max(float(state.latency[a, b]) for a, b in zip(holders, group))
        hit = memo[holders] = (group, g_bw, g_lat, tuple(sorted(holders)))
    return hit


def _front_choice(state: SlotState, members: tuple[int, ...], nbytes: float) -> tuple[float, tuple[int, ...]]:
    """(cost, each member's successor) of the least ring for a bucket of nbytes bytes: above
    EXACT_RINGS_UP_TO and up to EXACT_FRONT_UP_TO members a least ring by branch and bound
    (`_branched_ring`), else (or where that stops at BRANCH_NODES) the first ring of the
    members' front within the _TIE share of the front's least cost. Cached per state
    (SlotState.link_memo)."""
    memo = state.link_memo("_ring_front_choice")
    key = (members, nbytes)
    hit = memo.get(key)
    if hit is None:
        m = len(members)
        ring = _branched_ring(state, members, nbytes) if EXACT_RINGS_UP_TO < m <= EXACT_FRONT_UP_TO else None
        if ring is not None:
            row, ring_bw, ring_lat = ring
            cost = 2.0 * (m - 1) / m * nbytes / ring_bw + 2.0 * (m - 1) * ring_lat
            hit = memo[key] = (cost, tuple(members[j] for j in row))
        else:
            ring_bw, ring_lat, nexts = _front_lists(state, members)
            cost = [2.0 * (m - 1) / m * nbytes / bw + 2.0 * (m - 1) * lat for bw, lat in zip(ring_bw, ring_lat)]
            best = min(cost)
            pick = next(i for i, c in enumerate(cost) if c <= best + _TIE * abs(best))
            hit = memo[key] = (cost[pick], nexts[pick])
    return hit


def _branched_ring(state: SlotState, members: tuple[int, ...], nbytes: float) -> tuple[list[int], float, float] | None:
    """(each member position's successor, slowest link bytes/s, largest latency s) of a least
    ring for a bucket of nbytes bytes (cost.rings.best_ring, from the nearest-neighbour rings),
    or None where the branch and bound stopped after BRANCH_NODES paths; cached per edge
    figures and size."""
    bw, lat, key = _edge_figures(state, members)
    memo = state.link_memo("_ring_branch_by_edges")
    hit = memo.get((key, nbytes), False)
    if hit is False:
        m = len(members)
        succ, ring_bw, ring_lat, done = best_ring(bw, lat, 2.0 * (m - 1) / m * nbytes, 2.0 * (m - 1),
                                                  _nn_seeds(state, members), BRANCH_NODES)
        hit = memo[(key, nbytes)] = (succ.tolist(), float(ring_bw), float(ring_lat)) if done else None
    return hit


def _front_lists(state: SlotState, members: tuple[int, ...]) -> tuple[list[float], list[float], list[tuple[int, ...]]]:
    """`_front` of the members as Python lists: each front ring's slowest link, largest latency
    and each member's successor (device indices); cached per state (SlotState.link_memo)."""
    memo = state.link_memo("_ring_front_lists")
    hit = memo.get(members)
    if hit is None:
        succ, ring_bw, ring_lat = _front(state, members)
        hit = memo[members] = (ring_bw.tolist(), ring_lat.tolist(),
                               [tuple(members[i] for i in row) for row in succ.tolist()])
    return hit


def buckets(state: SlotState, structure: Structure) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The sync's rings: (cols, nxt, nbytes) with cols[g, b] the device of group g holding
    bucket b, nxt[g, b] its successor on the bucket's ring (best_rings; with a state.network,
    the group-order rings instead where those are faster under its shared NICs) and nbytes[b]
    the bucket's parameter bytes; None for one group or no parameter bytes."""
    m = len(structure)
    if m <= 1:
        return None
    pp = state.param_prefix
    cut_all = np.array(sorted({int(x) for _, c in structure for x in c}), dtype=int)
    starts = np.concatenate([[0], cut_all[:-1]])
    nbytes = pp[cut_all] - pp[starts]
    keep = nbytes > 0
    if not keep.any():
        return None
    starts, nbytes = starts[keep], nbytes[keep]
    cols = np.empty((m, len(starts)), dtype=int)
    for gi, (d, c) in enumerate(structure):
        cols[gi] = np.asarray(d, dtype=int)[np.searchsorted(np.asarray(c, dtype=int), starts, side="right")]
    nxt = best_rings(state, cols, nbytes)
    if state.network is not None:
        group = np.concatenate((cols[1:], cols[:1]))
        if not np.array_equal(nxt, group) and _ring_time(state, cols, group, nbytes) <= _ring_time(state, cols, nxt, nbytes):
            nxt = group
    return cols, nxt, nbytes


def _ring_time(state: SlotState, cols: np.ndarray, nxt: np.ndarray, nbytes: np.ndarray) -> float:
    """sync_time of these rings."""
    m = cols.shape[0]
    par = 1.0 if state.tp is None else np.minimum(np.asarray(state.tp)[cols], np.asarray(state.tp)[nxt])
    if state.network is None:
        bw = (state.bandwidth[cols, nxt] * par).min(axis=0)
    else:
        weights = None if state.tp is None else np.asarray(state.tp)
        bw = (effective_bandwidth(state.network, state.bandwidth, cols.ravel(), nxt.ravel(),
                                  np.broadcast_to(nbytes / par, cols.shape).ravel(), weights).reshape(cols.shape)
              * par).min(axis=0)
    lat = state.latency[cols, nxt].max(axis=0)
    cost = 2.0 * (m - 1) / m * nbytes / bw + 2.0 * (m - 1) * lat
    if state.allreduce_latency:
        cost = cost + state.allreduce_latency
    per_device = np.bincount(cols.ravel(), weights=np.broadcast_to(cost, cols.shape).ravel(), minlength=state.n)
    return float(per_device.max())


def sync_time(state: SlotState, structure: Structure) -> float:
    """Seconds of the cross-group gradient all-reduce (bucketed rings), 0 for one group.

    Layers held by the same devices in every group form one bucket, reduced on a ring of
    those devices: 2(m-1)/m * bytes / slowest ring link + 2(m-1) * largest ring latency, plus
    state.allreduce_latency per bucket (a library's per-call overhead, one all-reduce per
    bucket as the training runtime runs them; 0 by default). The result is the largest
    per-device sum of buckets. Every device holds one contiguous layer
    range of its group, so the buckets are the segments between the union of all groups' cut
    points (segments without parameter bytes cost nothing).

    Ring order: each bucket runs on the best ring of its holders (module doc, `buckets`):
    without a state.network the least time exactly for up to EXACT_FRONT_UP_TO groups (a
    least ring per bucket, `_front_choice`; buckets are independent, so the per-bucket best
    minimises the result), and never slower than the group order or the nearest-neighbour chains above.
    With a state.network every bucket's ring runs at once: the bandwidth at the bucket's size, and a server's NIC shared
    by its distinct devices with a ring edge to another server; the rings are then chosen on
    nominal link bandwidths, and the group-order rings are kept where those are faster.

    Tensor parallelism (state.tp): a stage of t devices holds its bucket in t shards and runs
    t rings at once, one per shard; a ring edge between stages of degrees t_a and t_b moves
    the bucket over min(t_a, t_b) links in parallel (each physical device of a server counts
    against its NIC), so its bandwidth is min(t_a, t_b) times the per-link figure.
    """
    if state.network is None and state.tp is None:
        v = _plain_sync_time(state, structure)
        if v is not None:
            return v
    rings = buckets(state, structure)
    if rings is None:
        return 0.0
    return _ring_time(state, *rings)


def _plain_sync_time(state: SlotState, structure: Structure) -> float | None:
    """sync_time without a network model or TP, in plain Python over the few buckets: the same
    buckets, rings (best_rings' cache) and float operations in the same order as buckets and
    _ring_time; None where a ring link has no bandwidth (the general path handles it)."""
    m = len(structure)
    if m <= 1:
        return 0.0
    pp = state.__dict__.get("_param_prefix_list")
    if pp is None:
        pp = state.__dict__["_param_prefix_list"] = state.param_prefix.tolist()
    cut_all = sorted({int(x) for _, c in structure for x in c})
    spans = [(a, pp[b] - pp[a]) for a, b in zip([0] + cut_all[:-1], cut_all) if pp[b] - pp[a] > 0]
    if not spans:
        return 0.0
    cols = [[int(d[bisect_right(c, a)]) for a, _ in spans] for d, c in structure]
    memo = state.link_memo("_ring_choice")
    bwm, latm = state.bandwidth_rows, state.latency_rows
    c1, c2 = 2.0 * (m - 1) / m, 2.0 * (m - 1)
    lam = state.allreduce_latency
    costs = []
    if m == 2:      # the ring of two holders is a -> b -> a (_choose_ring): no choice to look up
        for (_, nb), a, b in zip(spans, cols[0], cols[1]):
            bw = min(bwm[a][b], bwm[b][a])
            if not bw > 0:
                return None
            cost = c1 * nb / bw + c2 * max(latm[a][b], latm[b][a])
            costs.append(cost + lam if lam else cost)
    ring_costs = state.link_memo("_ring_cost")
    for b, (_, nb) in enumerate(spans if m > 2 else ()):
        key = (tuple(col[b] for col in cols), nb)
        cost = ring_costs.get(key, False)
        if cost is False:
            succ = memo.get(key)
            if succ is None:
                succ = memo[key] = _choose_ring(state, key[0], nb)
            bw = min(bwm[h][x] for h, x in zip(key[0], succ))
            cost = ring_costs[key] = (c1 * nb / bw + c2 * max(latm[h][x] for h, x in zip(key[0], succ))
                                      if bw > 0 else None)
        if cost is None:
            return None
        costs.append(cost + lam if lam else cost)
    per: dict[int, float] = {}
    for col in cols:
        for d, cost in zip(col, costs):
            per[d] = per.get(d, 0.0) + cost
    return max(per.values())


def sync_floor(state: SlotState) -> tuple[list[float], list[float]] | None:
    """Per device d, (P / bw_d, lat_d): P the model's parameter bytes, bw_d the largest and lat_d
    the least nominal link from d to another available device (bytes/s, seconds); None on a
    state with a network model or TP (their rings are not priced on the nominal links alone).

    The bound it gives (`sync_lower_bound`): in a structure of m >= 2 groups, group g's
    devices hold disjoint layer ranges of h_j bytes, sum_j h_j = P. Device j is a holder in
    every bucket of its range, and each bucket's ring leaves j on one link, so its per-device
    sum is >= c1 h_j / bw_j + c2 lat_j (c1 = 2(m-1)/m, c2 = 2(m-1); lat_j once where h_j > 0).
    The largest of those over j is >= c1 P / sum_j bw_j (the mediant of the ratios h_j / bw_j)
    plus c2 min_j lat_j; sync_time, the largest per-device sum, is >= that for every group."""
    if state.network is not None or state.tp is not None:
        return None
    idx = list(state.available_indices)
    P = float(state.param_prefix[-1] - state.param_prefix[0])
    per_bytes = [0.0] * state.n
    per_lat = [0.0] * state.n
    if len(idx) < 2 or not P > 0:
        return per_bytes, per_lat
    bw = state.bandwidth[np.ix_(idx, idx)].astype(float)
    lat = state.latency[np.ix_(idx, idx)].astype(float)
    np.fill_diagonal(bw, -np.inf)
    np.fill_diagonal(lat, np.inf)
    for i, d in enumerate(idx):
        b = float(bw[i].max())
        per_bytes[d] = P / b if b > 0 else 0.0
        per_lat[d] = max(float(lat[i].min()), 0.0)
    return per_bytes, per_lat


def sync_lower_bound(floor: tuple[list[float], list[float]] | None, groups: Sequence[Sequence[int]],
                     memo: dict | None = None) -> float:
    """A lower bound (seconds) on sync_time of any cuts of these device groups (sync_floor's
    rule; 0 for one group or floor None): the largest over groups of
    c1 / sum_j (1 / (P / bw_j)) + c2 min_j lat_j. memo: a dict of the caller's that keeps each
    group's (sum, min), keyed by the group as a tuple in its order (the same floats)."""
    m = len(groups)
    if m < 2 or floor is None:
        return 0.0
    c1, c2 = 2.0 * (m - 1) / m, 2.0 * (m - 1)
    best = 0.0
    for g in groups:
        if memo is None:
            terms = _sync_terms(floor, g)
        else:
            key = g if type(g) is tuple else tuple(g)
            terms = memo.get(key)
            if terms is None:
                terms = memo[key] = _sync_terms(floor, key)
        if terms[0] is None:
            continue
        v = c1 / terms[0] + c2 * terms[1]
        best = max(best, v)
    return best


def _sync_terms(floor: tuple[list[float], list[float]], g: Sequence[int]) -> tuple[float | None, float]:
    """(sum_j 1 / (P / bw_j), min_j lat_j) of one group for sync_lower_bound; (None, 0) where a
    device has no link (the group gives no bound)."""
    per_bytes, per_lat = floor
    if any(per_bytes[d] <= 0.0 for d in g):
        return None, 0.0
    return sum(1.0 / per_bytes[d] for d in g), min(per_lat[d] for d in g)
