"""Candidate groupings for the search: device orders, link clusters, speed-balanced groups,
chunks of a fast-link chain, single pipelines and data parallelism over the holders."""
from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np
from numba import njit

from .. import baselines
from ..model.state import SlotState
from .options import SearchTuning
from .orders import Ordered, nn_order, speed_order
from .scoring import Scorer


def clusters(state: SlotState, devices: Sequence[int], threshold: float) -> list[list[int]]:
    """Connected components of the links with bandwidth >= threshold (both directions), each
    sorted, in the order of their least device."""
    devs = np.array(sorted(set(devices)), dtype=np.int64)
    sub = state.bandwidth[devs][:, devs]
    label = _components(np.minimum(sub, sub.T) >= threshold)
    out: list[list[int]] = [[] for _ in range(int(label.max()) + 1 if len(devs) else 0)]
    for d, c in zip(devs.tolist(), label.tolist()):
        out[c].append(d)
    return out


@njit(cache=True)
def _components(adj: np.ndarray) -> np.ndarray:
    """label[i]: the connected component of row i of the symmetric (n, n) adjacency `adj`,
    numbered in the order of their least row. O(n^2)."""
    n = adj.shape[0]
    label = np.full(n, -1, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    c = 0
    for s in range(n):
        if label[s] >= 0:
            continue
        label[s] = c
        stack[0] = s
        top = 1
        while top:
            top -= 1
            i = stack[top]
            for j in range(n):
                if adj[i, j] and label[j] < 0:
                    label[j] = c
                    stack[top] = j
                    top += 1
        c += 1
    return label


def balanced_partition(state: SlotState, devices: Sequence[int], m: int) -> list[list[int]]:
    """m groups of similar total speed (LPT: fastest first to the slowest group so far)."""
    groups: list[list[int]] = [[] for _ in range(m)]
    heap = [(0.0, i) for i in range(m)]         # (load, group): the least (load, index) first
    for d in sorted(devices, key=lambda d: (-state.speed[d], d)):
        load, g = heapq.heappop(heap)
        groups[g].append(d)
        heapq.heappush(heap, (load + float(state.speed[d]), g))
    return [g for g in groups if g]


def chain_chunks(state: SlotState, chain: Sequence[int], m: int) -> list[list[int]]:
    """Cut a device chain into m contiguous pieces of similar total speed."""
    sp = np.array([state.speed[d] for d in chain], dtype=float)
    cum = np.cumsum(sp) / sp.sum()
    bounds = [0]
    for i in range(1, m):
        b = int(np.searchsorted(cum, i / m)) + 1
        bounds.append(min(max(b, bounds[-1] + 1), len(chain) - (m - i)))
    bounds.append(len(chain))
    return [list(chain[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def _levels(n: int, cap: int) -> list[int]:
    """1..n up to `cap`, else powers of two and n."""
    if n <= cap:
        return list(range(1, n + 1))
    return sorted({1 << i for i in range(n.bit_length())} | {n})


def families(state: SlotState, sc: Scorer, max_depth: int, tuning: SearchTuning
             ) -> list[tuple[str, list[Ordered]]]:
    """Candidate groupings (lists of ordered groups), each named for its source."""
    avail = list(state.available_indices)
    n = len(avail)
    out: list[tuple[str, list[Ordered]]] = []
    by_speed = speed_order(state, avail)
    for k in _levels(min(n, max_depth, sc.L), tuning.levels_all):
        if k > 1:
            out.append((f"pipe{k}", [nn_order(state, by_speed[:k])]))
    chain = list(nn_order(state, avail))
    sizes = _levels(n, tuning.chunk_levels_all)
    for m in sorted({max(1, -(-n // k)) for k in sizes}):
        if -(-n // m) <= max_depth:
            out.append((f"chunks{m}", [nn_order(state, g) for g in chain_chunks(state, chain, m)]))
            out.append((f"balanced{m}", [nn_order(state, g) for g in balanced_partition(state, avail, m)]))
    thresholds: list[float] = []
    if n > 1:
        idx = np.array(avail)
        bws = np.unique(np.minimum(state.bandwidth[np.ix_(idx, idx)], state.bandwidth[np.ix_(idx, idx)].T)
                        [~np.eye(n, dtype=bool)])
        thresholds = [float(x) for x in bws[::-1][: tuning.cluster_thresholds]]
        for thr in thresholds:
            cl = clusters(state, avail, thr)
            groups = []
            for c in cl:   # a cluster deeper than max_depth is split by speed balance
                parts = -(-len(c) // max_depth)
                groups += [nn_order(state, g) for g in balanced_partition(state, c, parts)]
            out.append((f"clusters{thr:.3g}", groups))
    holders = baselines.holders(state, cache=sc.cache)
    for j in _levels(len(holders), tuning.levels_all):
        out.append((f"dp{j}", [(d,) for d in holders[:j]]))
    out += _clustered_dp(state, holders, thresholds, tuning)
    out += _priced_dp(state, sc, holders, tuning)
    if sc.best is None:   # nothing holds the model yet (not even a baseline): the memory-rich devices too
        out += _roomy(state, sc, by_speed, max_depth, tuning)
    return out


def _clustered_dp(state: SlotState, holders: list[int], thresholds: list[float], tuning: SearchTuning
                  ) -> list[tuple[str, list[Ordered]]]:
    """Data parallelism over the fastest holders of one cluster (the component of links with
    bandwidth >= a threshold, clusters(), holding the most speed), for each of the thresholds:
    the holders' prefixes (dp{j}) pay the sync over whatever links join the fastest devices,
    where the devices of one server sync over its fast links (bench_budget seed 820015, 64
    devices: six of one server 43% below the best plan the search had found, even at 16 times
    its work budget)."""
    out: list[tuple[str, list[Ordered]]] = []
    if len(holders) < 2:
        return out
    seen: set[tuple[int, ...]] = set()
    for thr in thresholds:
        comps = clusters(state, holders, thr)
        best = max(comps, key=lambda c: (sum(state.speed[d] for d in c), -min(c)))
        members = set(best)
        order = [d for d in holders if d in members]
        common = next((i for i, (x, y) in enumerate(zip(order, holders)) if x != y), len(order))
        for j in _levels(len(order), tuning.levels_all):
            # not one device alone, nor a prefix of the holders themselves (the dp{j} family's kind)
            if j > max(common, 1) and tuple(order[:j]) not in seen:
                seen.add(tuple(order[:j]))
                out.append((f"dpc{j}", [(d,) for d in order[:j]]))
    return out


def _roomy(state: SlotState, sc: Scorer, by_speed: list[int], max_depth: int, tuning: SearchTuning
           ) -> list[tuple[str, list[Ordered]]]:
    """Single pipelines on the k devices of most memory (parameter room), where they are not
    the k fastest: when the fastest devices are too small to hold a layer, every family above
    puts one of them in each group and none holds the model (an outside fuzz's 11 slots, the
    search had said no group can hold it)."""
    by_room = sorted(by_speed, key=lambda d: (-sc.room(d), by_speed.index(d)))
    least = sc.least_holding_depth()
    return [(f"roomy{k}", [nn_order(state, by_room[:k])])
            for k in _levels(min(len(by_room), max_depth, sc.L), tuning.levels_all)
            if k >= least and set(by_room[:k]) != set(by_speed[:k])]


def _priced_dp(state: SlotState, sc: Scorer, holders: list[int], tuning: SearchTuning
               ) -> list[tuple[str, list[Ordered]]]:
    """Data parallelism over the holders' prefixes by weighted price per throughput, w_d t_d
    (w_d: the queue-weighted price and idle power of d per second, t_d: its seconds per
    sample). Without sync and memory, min over sets S of (V + sum_S w) / sum_S (1 / t) is
    reached at such a prefix (a set is optimal at lambda* iff it holds every d with
    w_d - lambda* / t_d < 0), where the holders' own order (fastest first) ignores the prices
    (bench_budget seed 830028: four of eight devices alone, 17.6% below the search's
    pipelines, found only by a third local start). None where no queue weighs a price."""
    w = [sc.device_weight(d) for d in holders]
    if not any(x > 0 for x in w):
        return []
    by_price = [d for _, _, d in sorted((wd * baselines.per_sample_time(state, d), i, d)
                                         for i, (wd, d) in enumerate(zip(w, holders)))]
    if by_price == holders:
        return []
    return [(f"dpw{j}", [(d,) for d in by_price[:j]]) for j in _levels(len(by_price), tuning.levels_all)]


def split_pipes(state: SlotState, sc: Scorer, max_depth: int, tuning: SearchTuning
                ) -> list[tuple[str, list[Ordered]]]:
    """The k fastest devices as m pipelines of similar speed (m = 2, 4, ... while each keeps
    two stages or more): the dp x pp shapes that pay where 1F1B or recomputation is what lets
    a pipeline hold its share (the search scores them with each variant's own cuts at any
    number of devices: Scorer.score_groups(variant_cuts=True))."""
    avail = list(state.available_indices)
    by_speed = speed_order(state, avail)
    out: list[tuple[str, list[Ordered]]] = []
    for k in _levels(min(len(avail), max_depth * len(avail)), tuning.levels_all):
        m = 2
        while k // m >= 2 and m <= sc.B // sc.u:
            if -(-k // m) <= min(max_depth, sc.L):
                chain = list(nn_order(state, by_speed[:k]))
                out.append((f"pipes{k}x{m}", [nn_order(state, g) for g in chain_chunks(state, chain, m)]))
            m *= 2
    return out
