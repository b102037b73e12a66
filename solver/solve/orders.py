"""Device orders inside a group: nearest-neighbour chains, speed and memory orders, and the
orders the search tries for a group."""
from __future__ import annotations

import itertools
from typing import Iterable

import numpy as np
from numba import njit

from ..model.state import SlotState

Ordered = tuple[int, ...]
"""Device indices of one group in pipeline order."""


def nn_order(state: SlotState, devices: Iterable[int]) -> Ordered:
    """Pipeline order keeping fast links adjacent: start at the fastest device, then always
    the remaining device with the fastest link from the last one (ties: faster device)."""
    bw, speed, _ = _lists(state)
    rest = sorted(devices, key=lambda d: (-speed[d], d))
    if len(rest) <= 2:
        return tuple(rest)
    out = [rest.pop(0)]
    if len(rest) > 16:                  # the same choice, compiled
        chain = _nn_chain(np.ascontiguousarray(state.bandwidth, dtype=float), np.asarray(state.speed, dtype=float),
                          out[0], np.array(rest, dtype=np.int64))
        return tuple(chain.tolist())
    while rest:
        row = bw[out[-1]]
        nxt = max(rest, key=lambda d: (row[d], speed[d], -d))
        rest.remove(nxt)
        out.append(nxt)
    return tuple(out)


@njit(cache=True)
def _nn_chain(bw: np.ndarray, speed: np.ndarray, first: int, rest: np.ndarray) -> np.ndarray:
    """nn_order's chain from device `first` through the devices `rest`: each step takes the
    remaining device of the largest (bandwidth from the last one, speed, -index), a total order,
    so the pick does not depend on the order of `rest`. O(n^2)."""
    k = rest.shape[0]
    left = rest.copy()
    out = np.empty(k + 1, dtype=np.int64)
    out[0] = first
    last = first
    for step in range(1, k + 1):
        pick = 0
        for i in range(1, k):
            d, p = left[i], left[pick]
            if bw[last, d] > bw[last, p] or (bw[last, d] == bw[last, p] and (
                    speed[d] > speed[p] or (speed[d] == speed[p] and d < p))):
                pick = i
        last = left[pick]
        out[step] = last
        k -= 1
        left[pick] = left[k]
    return out


def _lists(state: SlotState) -> tuple[list[list[float]], list[float], list[float]]:
    """The state's bandwidth matrix, speeds and memory keys (a device's bytes times its TP
    degree) as Python lists (the same numbers; kept on the state): the orders compare them
    element by element, where numpy scalars cost the most."""
    got = state.__dict__.get("_order_lists")
    if got is None:
        got = state.__dict__["_order_lists"] = (
            state.bandwidth_rows, np.asarray(state.speed, dtype=float).tolist(),
            [state.devices[d].memory_bytes * state.degree(d) for d in range(state.n)])
    return got


def speed_order(state: SlotState, devices: Iterable[int]) -> Ordered:
    """Fastest first."""
    speed = _lists(state)[1]
    return tuple(sorted(devices, key=lambda d: (-speed[d], d)))


def memory_order(state: SlotState, devices: Iterable[int]) -> Ordered:
    """Most memory first (the first stages stash the most activations in CNNs), ties by speed; a
    TP unit counts the memory of all its devices (each holds a shard)."""
    _, speed, memory = _lists(state)
    return tuple(sorted(devices, key=lambda d: (-memory[d], -speed[d], d)))


RELOCATE_UP_TO = 8
"""Groups of up to this many devices may also try every single-device relocation of their order
(group_orders(relocate=True): k (k - 1) orders, 56 at 8)."""


def group_orders(state: SlotState, d: Ordered, all_up_to: int = 4, relocate: bool = False,
                 transpose: bool = True) -> list[Ordered]:
    """Orders to try for a group: every order up to `all_up_to` devices, else the current one,
    speed, memory and reversed orders and (with transpose) every adjacent transposition of the
    current one; with relocate (groups of up to RELOCATE_UP_TO devices), then every order with
    one device moved to another position."""
    if len(d) <= all_up_to:
        return list(itertools.permutations(d))
    out = [d, speed_order(state, d), memory_order(state, d), tuple(reversed(d))]
    for i in range(len(d) - 1 if transpose else 0):
        out.append(d[:i] + (d[i + 1], d[i]) + d[i + 2:])
    if relocate and len(d) <= RELOCATE_UP_TO:
        for i in range(len(d)):
            rest = d[:i] + d[i + 1:]
            out += [rest[:j] + (d[i],) + rest[j:] for j in range(len(d)) if j != i]
    return list(dict.fromkeys(out))
