"""Mutation-audit tests for cost.sync: the sync floor's latency term (sync_lower_bound) must stay
a lower bound when the devices of one group have very different least latencies."""
from __future__ import annotations

import numpy as np
import pytest

from solver.cost.sync import sync_floor, sync_lower_bound, sync_time
from solver.model import Budget, Device, Layer, SlotState, Workload


def _state(param_bytes, bw, lat):
    """A slot of len(bw) identical devices and one layer per entry of param_bytes."""
    return links_state(tuple(Layer(f"l{i}", 1e9, 2e9, 1e6, 1e6, float(p)) for i, p in enumerate(param_bytes)),
                       bw, lat, 1)


def links_state(layers, bw, lat, u):
    """A slot of len(bw) identical devices with links bw (bytes/s) and lat (s), batch 8 in
    micro-batches of u, one money budget."""
    n = len(bw)
    devices = tuple(Device(f"d{i}", "X", 1e12, 16e9, 300.0, 100.0, 1e-3) for i in range(n))
    wl = Workload("w", tuple(layers), 8, u, 4.0, 1e5)
    bw = np.array(bw, dtype=float)
    lat = np.array(lat, dtype=float)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    return SlotState(0, devices, wl, (Budget("money", "money", 1.0),), np.ones(n, bool),
                     np.full(n, 1e12), np.ones(n), np.full(n, 1e-3), bw, lat)


def test_sync_floor_latency_is_the_least_in_the_group():
    """Two groups (0, 1) and (2, 3) cut after layer 0. Device 0 is 1 s from everyone; every other
    link has no latency; all links 1 GB/s. Layer 0 has 1 kB of parameters, layer 1 1 GB.
    By hand (m = 2: c1 = 1, c2 = 2): bucket 0 on ring (0, 2) costs 1e3 / 1e9 + 2 * 1 s, bucket 1
    on ring (1, 3) costs 1e9 / 1e9 s, so sync = 2 + 1e-6 s. Device 0 holds almost no bytes, so
    the floor may charge only the group's least latency (0): charging device 0's 1 s on top of
    the bytes term (P / (2 bw) = 0.5 s) would give 2.5 s > sync, not a lower bound."""
    n = 4
    bw = np.full((n, n), 1e9)
    lat = np.zeros((n, n))
    lat[0, :] = lat[:, 0] = 1.0
    state = _state([1e3, 1e9], bw, lat)
    s = [((0, 1), (1, 2)), ((2, 3), (1, 2))]
    t = sync_time(state, s)
    assert t == pytest.approx(2.0 + 1e-6, rel=1e-12)
    bound = sync_lower_bound(sync_floor(state), [(0, 1), (2, 3)])
    assert 0.0 < bound <= t * (1 + 1e-12)
