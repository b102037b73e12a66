"""The last resort of a slot where nothing the search built holds the model: one pipeline that
takes the whole batch, its devices and their order found by a DP over device subsets rather
than the few orders (memory-rich first, its reverse) the families and reliefs try. An outside
audit found slots called infeasible whose only plans put particular devices at particular
places: a large layer needs one of the few devices that can hold it, and a 1F1B stage stashes
less the later it runs.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

MAX_DEVICES = 14
"""Devices (those of most parameter room) the subset DP orders: 2^14 subsets at most."""


def chain_order(ends: Callable[[int], np.ndarray], n: int, L: int, stages: int | None = None
                ) -> tuple[int, ...] | None:
    """Row indices (devices 0..n-1) in pipeline order whose stages, each non-empty and within
    its device's memory, cover layers 0..L; None when no order of any subset does.

    ends(p) is an (n, L + 1) table for stage p: ends(p)[i, a] is the last layer c such that
    device i holds the stage [a, c) there (a when no layer fits). stages=None: a GPipe-like
    rule where every stage keeps the same samples (ends(0) serves every position) and the
    order with the fewest devices is returned; stages=k: exactly k stages (1F1B, whose stage p
    stashes for min(k - p, micro-batches) micro-batches).

    Recurrence over subsets M of the devices, reach(M) = the most layers an order of M covers
    from layer 0 (-1: none):
        reach({}) = 0,
        reach(M) = max over i in M with reach(M - {i}) = a >= 0 and e > a of
                   e = min(ends(|M| - 1)[i, a], L - (k - |M|))
    (with stages=k the cap leaves a layer for each stage still to come; a stage may end before
    its device's last layer, since a shorter stage needs less memory). Where ends(p)[i, a] does
    not decrease in a (a stage's memory grows with its layers: GPipe and 1F1B without
    recomputation) a longer covered prefix is never worse, so reach(M) = L exactly when some
    order of M covers the model; with recomputation (a stage also keeps its input, which
    depends on where it starts) it is a heuristic. The order is read back from reach: at M, a
    device i of M whose stage from reach(M - {i}) reaches the layers left."""
    size = 1 << n
    masks = np.arange(size, dtype=np.int64)
    pop = np.zeros(size, dtype=np.int64)
    for i in range(n):
        pop += (masks >> i) & 1
    reach = np.full(size, -1, dtype=np.int64)
    reach[0] = 0
    last = n if stages is None else min(stages, n)
    for p in range(last):
        level = masks[(pop == p) & (reach >= 0)]
        if not len(level):
            return None
        tab = ends(0 if stages is None else p)
        top = L if stages is None else L - (stages - p - 1)     # a layer for each stage still to come
        for i in range(n):
            sel = level[((level >> i) & 1) == 0]
            a = reach[sel]
            c = np.minimum(tab[i, a], top)
            ok = c > a
            tgt = sel[ok] | (1 << i)
            reach[tgt] = np.maximum(reach[tgt], c[ok])
        if stages is None and np.any(reach[pop == p + 1] == L):
            break
    done = masks[(reach == L) & (pop == stages)] if stages is not None else masks[reach == L]
    if not len(done):
        return None
    m = int(done[np.argmin(pop[done])])
    need, order = L, []
    while m:
        tab = ends(0 if stages is None else int(pop[m]) - 1)
        for i in range(n):
            if m >> i & 1:
                a = int(reach[m ^ (1 << i)])
                if 0 <= a < need <= int(tab[i, a]):
                    order.append(i)
                    m, need = m ^ (1 << i), a
                    break
        else:
            raise AssertionError("chain_order: reach holds no predecessor")
    return tuple(reversed(order))


def candidates(devices: Sequence[int], room: Callable[[int], float]) -> list[int]:
    """The MAX_DEVICES devices of most parameter room (all when fewer), in the given order."""
    if len(devices) <= MAX_DEVICES:
        return list(devices)
    keep = set(sorted(devices, key=lambda d: -room(d))[:MAX_DEVICES])
    return [d for d in devices if d in keep]
