"""Mutation-audit tests for solve.bounds: the compute bound is the least ratio over every device
set (checked by enumeration), and each device's throughput theta_d is at least its own
whole-model rate, whatever the shape of its per-layer times (otherwise a one-device plan beats
the 'lower bound')."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver.io.synthetic import random_state
from solver.solve.bounds import compute_bound, device_throughputs, holds_alone, price_weights, slot_lower_bound


def _measured_state(seed: int, n: int = 4, L: int = 5):
    """A random slot whose per-layer times are 'measured' per kind with a random shape each
    (not proportional to FLOPs), so devices differ in which layers are slow."""
    s = random_state(seed, n=n, L=L, batch=16, micro_batch=4)
    rng = np.random.default_rng(seed + 1)
    measured = {}
    for kind in sorted({d.kind for d in s.devices}):
        f = rng.uniform(1e-4, 1e-2, L)
        measured[kind] = (tuple(f), tuple(f * rng.uniform(1.0, 3.0, L)))
    return replace(s, workload=replace(s.workload, measured=measured))


@given(st.integers(0, 10_000), st.floats(0.0, 2.0), st.floats(0.0, 50.0))
def test_compute_bound_is_the_least_ratio_over_every_device_set(seed, V, q):
    s = random_state(seed, n=5, L=4, p_available=0.8)
    Q = np.array([q, 0.0])
    idx = list(s.available_indices)
    theta = device_throughputs(s, idx)
    w = price_weights(s, Q)[idx]
    best = min((V + sum(w[i] for i in U)) * s.workload.batch / sum(theta[i] for i in U)
               for r in range(1, len(idx) + 1) for U in itertools.combinations(range(len(idx)), r))
    assert compute_bound(s, Q, V) == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_throughput_is_at_least_the_whole_model_rate_of_each_device(seed):
    s = _measured_state(seed)
    idx = list(s.available_indices)
    whole = (s.fwd_prefix[idx, -1] + s.bwd_prefix[idx, -1])          # seconds per sample, alone
    for profile in [None, *range(len(idx))]:
        theta = device_throughputs(s, idx, profile)
        assert np.all(theta >= (1.0 / whole) * (1 - 1e-12))
    # so the bound is below the plan of the whole batch on one device that holds the model
    # (Q = 0, V = 1: objective z = B * whole, one stage has no fill or drain)
    alone = [whole[i] for i, d in enumerate(idx) if holds_alone(s, d)]
    assert alone
    assert slot_lower_bound(s, np.zeros(2), 1.0) <= s.workload.batch * min(alone) * (1 + 1e-12)


def _two_device_state(memory: float, u: int = 4, B: int = 16):
    """Two identical devices (1e12 FLOP/s), two identical layers (1 GFLOP forward, 2 backward,
    1 GB parameters, 1 MB saved per sample), links without cost."""
    from solver.model import Budget, Device, Layer, SlotState, Workload
    devices = tuple(Device(f"d{i}", "X", 1e12, memory, 300.0, 100.0, 1e-3) for i in range(2))
    layers = tuple(Layer(f"l{i}", 1e9, 2e9, 1e6, 1e6, 1e9) for i in range(2))
    wl = Workload("w", layers, B, u, 4.0, 1e5)
    bw = np.full((2, 2), np.inf)
    lat = np.zeros((2, 2))
    return SlotState(0, devices, wl, (Budget("money", "money", 1.0),), np.ones(2, bool),
                     np.full(2, 1e12), np.ones(2), np.full(2, 1e-3), bw, lat)


def test_bound_below_a_pipeline_of_non_holders():
    """Neither device holds the model (8 GB of parameter state > 5 GB), the two-stage GPipe
    pipeline fits (4 GB + 16 MB). By hand: w = 6e-3 s per sample alone, each stage w / 2, so
    z = (w / 2)(B + u) = 0.06 s, exactly the memory bound (B + u rho j / 2) / Theta with j = 2
    non-holders, rho = 1, Theta = 2 / w. A bound charging u rho per non-holder would claim
    (w / 2)(B + 2u) = 0.072 s, above this plan."""
    from solver.cost import evaluate
    from solver.model import Group, Plan
    s = _two_device_state(5e9)
    plan = Plan((Group((0, 1), (1, 2), 16),))
    assert plan.validate(s) == []
    z = evaluate(plan, s).batch_time
    assert z == pytest.approx(0.06, rel=1e-12)
    assert slot_lower_bound(s, np.zeros(1), 1.0) <= z * (1 + 1e-12)


def test_holders_are_the_devices_that_hold_the_model_with_one_micro_batch():
    """8 GB of parameter state plus 2 MB per sample: 8.004 GB holds one sample but not one
    micro-batch of u = 4 (8 MB), so no device holds the model alone; 8.01 GB holds it."""
    from solver.solve.bounds import holders_mask
    for memory, holds in ((8.004e9, False), (8.01e9, True)):
        s = _two_device_state(memory)
        assert [holds_alone(s, d) for d in (0, 1)] == [holds, holds]
        assert holders_mask(s, (0, 1)).tolist() == [holds, holds]


def test_sync_bound_below_data_parallel_on_the_low_latency_pair():
    """Three identical devices (w = 6 ms per sample alone), B = 4, u = 2. Devices 0 and 1 are
    10 us apart; device 2 is 1 s from both. Data parallel on (0, 1), one micro-batch each:
    z = 2 w + P / bw + 2 * 10 us (ring of two: c1 = 1, c2 = 2) = 12.22 ms. The sync bound's
    latency term may only charge the least latency among the available devices; charging the
    largest (1 s) would put every two-group candidate above this plan, and the bound at
    (B + 2 u) w / 3 = 16 ms (three devices, one pipeline) > 12.22 ms."""
    from solver.cost import evaluate
    from solver.model import Budget, Device, Group, Layer, Plan, SlotState, Workload
    devices = tuple(Device(f"d{i}", "X", 1e12, 40e9, 300.0, 100.0, 1e-3) for i in range(3))
    layers = tuple(Layer(f"l{i}", 1e9, 2e9, 1e6, 1e6, 1e6) for i in range(2))
    wl = Workload("w", layers, 4, 2, 4.0, 1e5)
    bw = np.full((3, 3), 1e10)
    np.fill_diagonal(bw, np.inf)
    lat = np.full((3, 3), 1.0)
    lat[0, 1] = lat[1, 0] = 1e-5
    np.fill_diagonal(lat, 0.0)
    s = SlotState(0, devices, wl, (Budget("money", "money", 1.0),), np.ones(3, bool), np.full(3, 1e12),
                  np.ones(3), np.full(3, 1e-3), bw, lat)
    plan = Plan((Group((0,), (2,), 2), Group((1,), (2,), 2)))
    assert plan.validate(s) == []
    z = evaluate(plan, s).batch_time
    assert z == pytest.approx(2 * 6e-3 + 2e6 / 1e10 + 2 * 1e-5, rel=1e-9)
    assert slot_lower_bound(s, np.zeros(1), 1.0) <= z * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_slot_bound_adds_the_busy_energy_floor(seed):
    """With an energy queue, q.b >= busy_bound for every plan, and the slot bound is the larger
    of the memory and sync bounds plus it (module docstring): never less than memory + busy."""
    from solver.solve.bounds import busy_bound, memory_bound, sync_bound
    s = random_state(seed, n=4, L=5)
    Q = np.array([0.0, 3.0])                       # (money, energy): the energy queue only
    assert [b.kind for b in s.budgets] == ["money", "energy"]
    busy = busy_bound(s, Q)
    assert busy > 0
    lb = slot_lower_bound(s, Q, 1.0)
    assert lb >= (max(memory_bound(s, Q, 1.0), sync_bound(s, Q, 1.0)) + busy) * (1 - 1e-12)


def test_bound_ignores_unavailable_devices():
    """One available device (slow) and one unavailable (10x faster), FLOP-based times, the model
    fits: the bound is the available device's only plan, B times its whole-model time; the
    unavailable device's speed must not lower it."""
    from solver.solve.bounds import memory_bound
    s = random_state(3, n=2, L=4)
    s = replace(s, available=np.array([True, False]), speed=np.array([1e12, 1e13]),
                speed_factor=np.ones(2))
    whole = float(s.fwd_prefix[0, -1] + s.bwd_prefix[0, -1])
    assert holds_alone(s, 0)
    assert memory_bound(s, np.zeros(2), 1.0) == pytest.approx(s.workload.batch * whole, rel=1e-9)
