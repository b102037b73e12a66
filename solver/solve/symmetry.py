"""Interchangeable devices: a key that two structures share only when one is the other with
like devices swapped, so the local search scores one of them.

A cluster of few device kinds (Sailor's 16 A100s and 16 V100s on 8 servers) offers the local
search many neighbours that differ only in which of several like devices they use: dropping
any one of four A100s of one server from a group gives four plans with the same figures. The
key maps a structure (ordered device groups) to its class under the cluster's symmetry.

Two devices are alike when every input the scoring reads for one device is the same number
for both (`plan_classes`: the cut DPs' class of SlotCache.signature, the Device's fields but its
name, price, speed, speed factor, availability, TP link, preemption hazard, and its name where a per-device
energy budget names it). The key is used only where the network is symmetric over those
classes (`symmetric_links`: every pair's bandwidth, latency, bandwidth fit and egress price is a
function of the two classes and whether they share a server). With a previous plan (charged
migration) a device's class also holds what it held, the holders' servers keep their own
labels, and the links from the holders are checked too (so they need not be available); TP
states with a previous plan get no key. Then equal keys mean the structures are the same up
to a relabelling of like devices and like servers, with the same cost under the cost model
(one caveat: the sync's ring choice keeps the first of rings whose nominal costs tie, by
position, and with shared NICs two such rings can differ; `tests/test_symmetry.py` checks
the objectives equal under random relabellings of a cluster with shared NICs). The key keeps
the order of the groups (with a network, the sync also tries the group-order rings), so the
same groups listed in another order get another key.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model.state import SlotState
from ..subproblems.cache import SlotCache

Ordered = tuple[int, ...]


def plan_classes(state: SlotState, cache: SlotCache, held: np.ndarray | None = None) -> list[int]:
    """One class per device: equal for devices whose inputs to a plan's cost are the same
    (held: the previous plan's (n, L) holder mask, cost.migration.holder_mask, or None)."""
    named = {b.device for b in state.budgets if b.device is not None}
    base = cache.device_classes()
    ids: dict[tuple, int] = {}
    out = []
    for d, dev in enumerate(state.devices):
        key = (base[d], dev.kind, dev.peak_flops, dev.memory_bytes, dev.busy_power_w, dev.idle_power_w,
               dev.price_per_s, dev.memory_bandwidth, float(state.price[d]), float(state.speed[d]),
               float(state.speed_factor[d]), bool(state.available[d]),
               None if state.tp_link is None else np.asarray(state.tp_link[d], dtype=float).tobytes(),
               dev.name if dev.name in named else None, None if held is None else held[d].tobytes(),
               None if state.risk is None else state.risk.hazard[d])
        out.append(ids.setdefault(key, len(ids)))
    return out


def symmetric_links(state: SlotState, classes: Sequence[int], extra: Sequence[int] = ()) -> bool:
    """True when, over the available devices and `extra`, every ordered pair's link figures
    (bandwidth, latency, bandwidth fit, egress) depend only on the two devices' classes and on
    whether they share a server."""
    idx = np.array(sorted(set(state.available_indices) | set(extra)), dtype=int)
    if len(idx) < 2:
        return False
    cls = np.asarray(classes, dtype=np.int64)[idx]
    net = state.network
    server = np.zeros(len(idx), dtype=np.int64) if net is None else np.asarray(net.server, dtype=np.int64)[idx]
    k = int(cls.max()) + 1
    same = server[:, None] == server[None, :]
    pair = (cls[:, None] * k + cls[None, :]) * 2 + same
    off = ~np.eye(len(idx), dtype=bool)
    sub = np.ix_(idx, idx)
    figures = [state.bandwidth[sub], state.latency[sub]]
    if net is not None and net.fit is not None:
        figures += [net.fit[idx][:, idx, j] for j in range(net.fit.shape[2])]
    if net is not None and net.egress is not None:
        figures.append(net.egress[sub])
    labels = pair[off]
    order = np.argsort(labels, kind="stable")
    lab = labels[order]
    step = lab[1:] == lab[:-1]
    for f in figures:
        v = np.asarray(f, dtype=float)[off][order]
        both_nan = np.isnan(v[1:]) & np.isnan(v[:-1])
        if not np.all((v[1:] == v[:-1]) | both_nan | ~step):
            return False
    return True


class Symmetry:
    """The structure keys of one state (module doc); `active` is False where they would not
    be sound, and `key` then returns None."""

    def __init__(self, state: SlotState, cache: SlotCache, held: np.ndarray | None) -> None:
        """held: the previous plan's holder mask over the physical devices, or None."""
        self.active = False
        self._cls: list[int] = []
        self._server: list[int] | None = None
        self._fixed: dict[int, int] = {}
        avail = state.available_indices
        if (held is not None and state.tp is not None) or len(avail) < 2:
            return
        cls = plan_classes(state, cache, held)
        holders = [] if held is None else [int(d) for d in np.flatnonzero(held.any(axis=1))]
        if len({cls[d] for d in avail}) == len(avail) or not symmetric_links(state, cls, holders):
            return
        self.active, self._cls = True, cls
        net = state.network
        if net is not None:
            self._server = [int(s) for s in net.server]
            for s in sorted({self._server[d] for d in holders}):
                self._fixed[s] = len(self._fixed)

    def key(self, groups: Sequence[Ordered]) -> tuple | None:
        """The class of a structure's ordered groups under the symmetry, in their order (the
        sync's group-order rings read it; None: not active)."""
        if not self.active:
            return None
        cls, server = self._cls, self._server
        if server is None:
            return tuple(tuple([cls[d] for d in g]) for g in groups)
        label = dict(self._fixed)
        return tuple((tuple([cls[d] for d in g]), tuple([label.setdefault(server[d], len(label)) for d in g]))
                     for g in groups)
