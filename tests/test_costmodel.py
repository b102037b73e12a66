"""The cost model (DESIGN.md 3): memory, costs, gradient sync, measured times, batch time."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver.cost import cost_coeffs, evaluate, group_coeffs, lower_bound_time, stage_times, sync_time
from solver.model import NO_CAP, memory_use, share_cap
from solver.model import Budget, Device, Layer, SlotState, Workload
from solver.cost.simulator import simulate
from solver.model import Group, Plan
from solver.io.synthetic import default_budgets, random_state
from test_plan import names, random_plan

REL = 1e-9
seeds = st.integers(0, 2**32 - 1)


def hand_state(params: list[float], bw: np.ndarray, lat: np.ndarray, *, kinds: list[str] | None = None,
               speed: list[float] | None = None, factor: list[float] | None = None,
               measured: dict | None = None, flops: list[float] | None = None,
               batch: int = 8, u: int = 2) -> SlotState:
    """A small hand-made slot: n = len(bw) devices, one layer per entry of `params` (bytes)."""
    n, L = len(bw), len(params)
    kinds = kinds or ["X"] * n
    devs = tuple(Device(f"d{i}", kinds[i], 1e12, 1e12, 300.0, 100.0, 0.001) for i in range(n))
    flops = flops or [1e9] * L
    layers = tuple(Layer(f"l{i}", flops[i], 2 * flops[i], 1e6, 1e6, params[i]) for i in range(L))
    wl = Workload("hand", layers, batch, u, 4.0, 1e6, measured or {})
    bw = np.array(bw, dtype=float)
    np.fill_diagonal(bw, np.inf)
    speed = np.array(speed or [1e12] * n, dtype=float)
    factor = np.array(factor or [1.0] * n, dtype=float)
    return SlotState(0, devs, wl, default_budgets(), np.ones(n, bool), speed, factor,
                     np.full(n, 0.001), bw, np.array(lat, dtype=float))


def random_group(rng: np.random.Generator, state) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Random ordered devices (1..min(n, L)) and increasing cuts ending at L."""
    L = state.workload.num_layers
    k = int(rng.integers(1, min(state.n, L) + 1))
    devs = tuple(int(d) for d in rng.permutation(state.n)[:k])
    cuts = tuple(sorted(int(c) for c in rng.choice(np.arange(1, L), size=k - 1, replace=False))) + (L,)
    return devs, cuts


# ---------------------------------------------------------------- memory

def stage_bytes(state, cuts) -> tuple[list[float], list[float]]:
    """Per stage: parameter bytes P_j and stashed bytes per sample H_j, summed layer by layer."""
    layers, starts = state.workload.layers, (0, *cuts[:-1])
    return ([sum(l.param_bytes for l in layers[a:c]) for a, c in zip(starts, cuts)],
            [sum(l.stash_bytes for l in layers[a:c]) for a, c in zip(starts, cuts)])


@given(seeds, st.integers(1, 5), st.integers(1, 10), st.integers(1, 16))
def test_memory_use_formula(seed, n, L, n_mb):
    state = random_state(seed, n=n, L=L)
    devs, cuts = random_group(np.random.default_rng(seed), state)
    wl, u = state.workload, state.workload.micro_batch
    P, H = stage_bytes(state, cuts)
    live = u if len(devs) == 1 else n_mb * u
    expected = [wl.opt_factor * p + live * h for p, h in zip(P, H)]
    assert memory_use(state, devs, cuts, n_mb * u) == pytest.approx(expected, rel=REL)


@given(seeds, st.integers(1, 5), st.integers(1, 10), st.lists(st.floats(-0.5, 40.0), min_size=5, max_size=5))
def test_share_cap_is_largest_fitting_multiple(seed, n, L, room):
    """Device j gets memory k_opt * P_j + room_j * H_j (room in samples; < 0: not even the weights)."""
    state = random_state(seed, n=n, L=L)
    devs, cuts = random_group(np.random.default_rng(seed), state)
    u = state.workload.micro_batch
    P, H = stage_bytes(state, cuts)
    devices = list(state.devices)
    for j, d in enumerate(devs):
        mem = state.workload.opt_factor * P[j] + room[j] * H[j]
        devices[d] = dataclasses.replace(devices[d], memory_bytes=mem)
    state = dataclasses.replace(state, devices=tuple(devices))

    def fits(share: int) -> bool:       # exactly as Plan.validate judges memory
        return "memory" not in names(Plan((Group(devs, cuts, share),)), state)

    cap = share_cap(state, devs, cuts)
    assert group_coeffs(state, devs, cuts).cap == cap
    if len(devs) == 1:          # one micro-batch live at a time: any share, or none
        assert cap == (NO_CAP if fits(u) else 0)
        return
    assert cap >= 0 and cap % u == 0
    assert cap == 0 or fits(cap)
    assert not fits(cap + u)
    assert cap == (u * int(np.floor(min(room[: len(devs)]) / u + 1e-9)) if min(room[: len(devs)]) >= 0 else 0)


@pytest.mark.parametrize("rel", [-1e-10, -1e-13, 0.0, 1e-13, 1e-10])
def test_share_cap_agrees_with_validate_at_the_edge(rel):
    """Memory for exactly 16 samples, give or take a hair: a share of cap validates, cap + u
    does not (regression: share_cap used to round b/u up by 1e-9 and return a share that
    Plan.validate, with its 1e-12 relative slack, rejected)."""
    state = random_state(3, n=2, L=2, batch=64, micro_batch=4)
    P, H = stage_bytes(state, (1, 2))
    devices = list(state.devices)
    for j in range(2):
        devices[j] = dataclasses.replace(devices[j], memory_bytes=4 * P[j] + 16 * H[j] * (1 + rel))
    state = dataclasses.replace(state, devices=tuple(devices))
    cap = share_cap(state, (0, 1), (1, 2))
    assert cap == (12 if rel < -1e-12 else 16)
    assert "memory" not in names(Plan((Group((0, 1), (1, 2), cap),)), state)
    assert "memory" in names(Plan((Group((0, 1), (1, 2), cap + 4),)), state)


def test_memory_one_stage_holds_one_micro_batch():
    state = hand_state([10.0, 20.0], [[0]], [[0]], batch=8, u=2)
    assert memory_use(state, (0,), (2,), 8) == pytest.approx([4.0 * 30 + 2 * 2e6])
    assert memory_use(state, (0,), (2,), 2) == pytest.approx(memory_use(state, (0,), (2,), 8))


# ---------------------------------------------------------------- costs

@given(seeds, st.integers(1, 6), st.integers(2, 8))
def test_costs_are_linear_and_match_direct_formulas(seed, n, L):
    budgets = (*default_budgets(), Budget("d0-energy", "device_energy", 100.0, device="d0"))
    state = random_state(seed, n=n, L=L, budgets=budgets)
    plan = random_plan(np.random.default_rng(seed), state)
    ev = evaluate(plan, state)
    coeffs = [group_coeffs(state, g.devices, g.cuts) for g in plan.groups]
    cc = cost_coeffs(state, coeffs)
    T = ev.batch_time
    assert ev.costs == pytest.approx(cc.R * T + cc.e @ np.array(plan.shares, float) + cc.F, rel=REL)
    held = plan.devices
    dev = state.devices
    money = sum(state.price[d] for d in held) * T
    busy = {d: g.share * (F + G) for g in plan.groups
            for d, F, G in zip(g.devices, *stage_times(state, g.devices, g.cuts)[:2])}
    energy = sum(dev[d].idle_power_w * T + (dev[d].busy_power_w - dev[d].idle_power_w) * busy[d] for d in held)
    d0 = dev[0].idle_power_w * T + (dev[0].busy_power_w - dev[0].idle_power_w) * busy[0] if 0 in held else 0.0
    assert ev.costs == pytest.approx([money, energy, d0], rel=REL)


def test_unknown_budget_kind_is_rejected():
    state = random_state(1, n=2, L=4, budgets=(Budget("co2", "carbon", 1.0),))
    with pytest.raises(ValueError, match="carbon"):
        evaluate(Plan((Group((0,), (4,), state.workload.batch),)), state)


# ---------------------------------------------------------------- gradient sync

def _net(n: int, links: dict[tuple[int, int], tuple[float, float]]):
    """(bandwidth, latency) matrices: 1e18 B/s and 0 s except the given (i, j): (bw, lat)."""
    bw, lat = np.full((n, n), 1e18), np.zeros((n, n))
    for (i, j), (b, l) in links.items():
        bw[i, j], lat[i, j] = b, l
    return bw, lat


def test_sync_two_groups_two_stages_by_hand():
    # ring (0,2): bw 0->2 100, 2->0 50 (slowest wins), latency 0.5; ring (1,3): 350 B/s, 1.0 s;
    # ring (0,3): 100 B/s, 0.25 s. Layer params 100, 200, 300, 400 bytes. With m = 2 a bucket
    # costs 2 (m-1)/m * bytes / bw + 2 (m-1) * lat = bytes / bw + 2 lat.
    bw, lat = _net(4, {(0, 2): (100, 0.5), (2, 0): (50, 0.5), (1, 3): (350, 1.0), (3, 1): (350, 0.0),
                       (0, 3): (100, 0.25), (3, 0): (100, 0.0)})
    state = hand_state([100, 200, 300, 400], bw, lat)
    A = ((0, 1), (2, 4))
    assert sync_time(state, [A]) == 0.0
    # layers 0-1 on (0, 2): one bucket of 300 B: 300/50 + 1 = 7 (not 100/50+1 + 200/50+1 = 8);
    # layers 2-3 on (1, 3): 700/350 + 2 = 4
    assert sync_time(state, [A, ((2, 3), (2, 4))]) == pytest.approx(7.0)
    # B cut after layer 0: buckets (0,2) {l0}: 3, (0,3) {l1}: 200/100 + 0.5 = 2.5, (1,3) {l2,l3}: 4;
    # device 0 pays 3 + 2.5 = 5.5, device 3 pays 2.5 + 4 = 6.5
    assert sync_time(state, [A, ((2, 3), (1, 4))]) == pytest.approx(6.5)
    # a layer without parameters costs nothing: bucket (0, 3) disappears, device 3 pays 4
    free = hand_state([100, 0, 300, 400], bw, lat)
    assert sync_time(free, [A, ((2, 3), (1, 4))]) == pytest.approx(4.0)
    assert sync_time(hand_state([0, 0, 0, 0], bw, lat), [A, ((2, 3), (1, 4))]) == 0.0


def test_sync_ring_follows_group_order():
    # three one-stage groups 0, 1, 2: ring 0->1->2->0; the reverse link 0->2 is slow but unused.
    bw, lat = _net(3, {(0, 1): (300, 0.1), (1, 2): (600, 0.2), (2, 0): (400, 0.3), (0, 2): (1, 9.0)})
    state = hand_state([600, 300], bw, lat)
    one = [((d,), (2,)) for d in (0, 1, 2)]
    assert sync_time(state, one) == pytest.approx(2 * 2 / 3 * 900 / 300 + 2 * 2 * 0.3)


# ---------------------------------------------------------------- measured times

def test_measured_times_replace_flops_over_speed():
    measured = {"A": ((0.1, 0.2, 0.3), (0.2, 0.5, 0.7))}
    bw, lat = _net(2, {(0, 1): (1e6, 0.0), (1, 0): (1e6, 0.0)})
    state = hand_state([1, 1, 1], bw, lat, kinds=["A", "B"], speed=[1e12, 2e12], factor=[0.5, 1.0],
                       measured=measured, flops=[1e9, 2e9, 3e9])
    F, G, lam = stage_times(state, (0, 1), (2, 3))
    assert F == pytest.approx([(0.1 + 0.2) / 0.5, 3e9 / 2e12])        # kind A measured / factor
    assert G == pytest.approx([(0.2 + 0.5) / 0.5, 6e9 / 2e12])        # kind B FLOPs / speed
    assert lam == pytest.approx([1e6 / 1e6])
    F2, G2, _ = stage_times(state, (1, 0), (2, 3))
    assert F2 == pytest.approx([3e9 / 2e12, 0.3 / 0.5]) and G2 == pytest.approx([6e9 / 2e12, 0.7 / 0.5])
    gc = group_coeffs(state, (0, 1), (2, 3))
    sim = simulate(F, G, lam, 2, 8, "gpipe").makespan
    assert gc.time(8) == pytest.approx(sim, rel=REL)


# ---------------------------------------------------------------- batch time

@given(seeds, st.integers(1, 6), st.integers(2, 8), st.floats(0.3, 1.0))
def test_batch_time_is_slowest_group_plus_sync_and_above_lower_bound(seed, n, L, p_avail):
    state = random_state(seed, n=n, L=L, p_available=p_avail)
    plan = random_plan(np.random.default_rng(seed), state)
    ev = evaluate(plan, state)
    u = state.workload.micro_batch
    sims = [simulate(*stage_times(state, g.devices, g.cuts), u, g.share).makespan for g in plan.groups]
    assert ev.group_times == pytest.approx(sims, rel=REL)
    ts = sync_time(state, [(g.devices, g.cuts) for g in plan.groups])
    assert ev.sync_time == ts and (len(plan.groups) > 1 or ts == 0.0)
    assert ev.batch_time == pytest.approx(max(sims) + ts, rel=REL)
    assert lower_bound_time(state) <= ev.batch_time * (1 + 1e-12)
