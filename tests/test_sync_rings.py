"""The sync's ring order is the best for each bucket's holders (cost.sync): exact against
enumeration of every group order for small m, independent of the plan's group order, and
never slower than the group-order ring."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from hypothesis import given
from hypothesis import strategies as st

from solver.cost.sync import (EXACT_FRONT_UP_TO, EXACT_RINGS_UP_TO, _ring_time, buckets, ring_candidates, sync_floor, sync_lower_bound,
                              sync_time)
from solver.io.synthetic import random_state


def _state(seed: int, n: int, L: int):
    """A random slot, every device available, whose model has parameters (the next seed else)."""
    while True:
        state = random_state(seed, n=n, L=L, p_available=1.0)
        if state.param_prefix[-1] > 0:
            return state
        seed += 1_000


def _group_ring(state, structure):
    cols, _, nbytes = buckets(state, structure)
    return _ring_time(state, cols, np.concatenate((cols[1:], cols[:1])), nbytes)


def _structure(state, rng, m, two_stage):
    idx = [int(x) for x in rng.permutation(list(state.available_indices))]
    L = state.workload.num_layers
    out = []
    for g in range(m):
        if two_stage and rng.random() < 0.5:
            out.append(((idx[2 * g], idx[2 * g + 1]), (int(rng.integers(1, L)), L)))
        else:
            out.append(((idx[2 * g],), (L,)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_one_bucket_ring_is_the_best_over_every_ring(seed):
    state = _state(9_000 + seed, 12, 8)
    m = min(6, len(state.available_indices) // 2)
    s = _structure(state, np.random.default_rng(seed), m, two_stage=False)
    best = min(_group_ring(state, [s[i] for i in p]) for p in itertools.permutations(range(m)))
    assert sync_time(state, s) == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_sync_does_not_depend_on_group_order_and_beats_every_group_order(seed):
    state = _state(9_100 + seed, 12, 10)
    rng = np.random.default_rng(seed)
    m = min(5, len(state.available_indices) // 2)
    s = _structure(state, rng, m, two_stage=True)
    t = sync_time(state, s)
    orders = list(itertools.permutations(range(m)))
    for p in orders[:: max(1, len(orders) // 12)]:
        assert sync_time(state, [s[i] for i in p]) == pytest.approx(t, rel=1e-12)
    assert t <= min(_group_ring(state, [s[i] for i in p]) for p in orders) * (1 + 1e-12)


def test_many_groups_never_slower_than_the_group_order():
    state = _state(9_200, 40, 6)
    rng = np.random.default_rng(3)
    m = EXACT_RINGS_UP_TO + 6
    for _ in range(5):
        s = _structure(state, rng, m, two_stage=False)
        assert sync_time(state, s) <= _group_ring(state, s) * (1 + 1e-12)


def test_candidates_keep_the_group_order_first_and_a_pareto_front():
    state = _state(9_300, 12, 6)
    holders = tuple(int(x) for x in state.available_indices[:5])
    succ, bw, lat = ring_candidates(state, holders)
    assert list(succ[0]) == [1, 2, 3, 4, 0]
    for i in range(1, len(bw)):
        for j in range(1, len(bw)):
            if i != j:
                assert not (bw[j] >= bw[i] and lat[j] <= lat[i] and (bw[j] > bw[i] or lat[j] < lat[i]))
    for row in succ:                                   # each a single cycle through every holder
        seen, p = set(), 0
        for _ in range(len(row)):
            seen.add(p)
            p = row[p]
        assert p == 0 and seen == set(range(len(row)))


@pytest.mark.parametrize("seed", range(6))
def test_pareto_rings_keep_exactly_the_front_in_order(seed):
    """_pareto_rings against a plain reference: every ring's slowest link and largest latency,
    and as the front the rings no earlier ring (by decreasing bandwidth, then latency, then
    row) matches or beats in latency, in that order."""
    from solver.cost.sync import _all_rings, _pareto_rings
    rng = np.random.default_rng(seed)
    for m in (3, 4, 5, 6, 7):
        bw = rng.choice([1e9, 2e9, 5e9, 1e10], size=(m, m))     # few values: ties are common
        lat = rng.choice([1e-5, 2e-5, 5e-5], size=(m, m))
        succ = _all_rings(m)
        keep, rbw, rlat = _pareto_rings(bw, lat, succ)
        pos = np.arange(m)
        assert np.array_equal(rbw, bw[pos, succ].min(axis=1)) and np.array_equal(rlat, lat[pos, succ].max(axis=1))
        order = sorted(range(len(succ)), key=lambda p: (-rbw[p], rlat[p], p))
        want, least = [], np.inf
        for p in order:
            if rlat[p] < least:
                want.append(p)
                least = rlat[p]
        assert keep.tolist() == want


@given(seed=st.integers(0, 10**6), m=st.integers(2, 5), L=st.integers(2, 30), lat=st.sampled_from([0.0, 1.0]))
def test_sync_lower_bound_holds_for_any_cuts(seed, m, L, lat):
    """The search's sync floor (cost.sync.sync_lower_bound, used to prune before any cut DP) is
    below the exact sync of every structure over those groups, whatever the cuts."""
    state = _state(seed, 2 * m + 2, L)
    rng = np.random.default_rng(seed)
    if lat:
        state = replace(state, latency=state.latency * rng.uniform(0.5, 2.0, state.latency.shape))
    idx = [int(x) for x in rng.permutation(list(state.available_indices))]
    groups, pos = [], 0
    for _ in range(m):
        k = int(rng.integers(1, min(3, L) + 1))
        groups.append(tuple(idx[pos:pos + k]))
        pos += k
    floor = sync_floor(state)
    bound = sync_lower_bound(floor, groups)
    memo: dict = {}
    assert sync_lower_bound(floor, groups, memo) == bound == sync_lower_bound(floor, [list(g) for g in groups], memo)
    for _ in range(4):
        s = [(g, tuple(sorted(int(x) for x in rng.choice(np.arange(1, L), len(g) - 1, replace=False))) + (L,))
             for g in groups]
        assert bound <= sync_time(state, s) * (1 + 1e-12)


def test_sync_lower_bound_is_exact_for_two_devices_on_their_best_link():
    """Two one-device groups that are each other's fastest and lowest-latency peers: one bucket
    of every parameter byte on that link, which is the floor itself."""
    state = _state(9_300, 4, 6)
    a, b = [int(x) for x in state.available_indices[:2]]
    bw = state.bandwidth.copy()
    bw[a, b] = bw[b, a] = 10 * bw[np.isfinite(bw)].max()
    lat = state.latency.copy()
    lat[a, b] = lat[b, a] = 0.5 * lat[lat > 0].min()
    state = replace(state, bandwidth=bw, latency=lat)
    L = state.workload.num_layers
    s = [((a,), (L,)), ((b,), (L,))]
    assert sync_lower_bound(sync_floor(state), [(a,), (b,)]) == pytest.approx(sync_time(state, s), rel=1e-12)
    assert sync_lower_bound(sync_floor(state), [(a, b)]) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_nn_rings_close_each_nearest_neighbour_chain(seed):
    """_nn_rings row s: the nearest-neighbour chain from position s (_nn_order), each position's
    successor the next on the chain and the last's the first; on tie-heavy integer links too."""
    from solver.cost.sync import _nn_order, _nn_rings
    rng = np.random.default_rng(seed)
    m = int(rng.integers(8, 14))
    bw = rng.integers(1, 4, (m, m)).astype(float) if seed % 2 else rng.uniform(1, 10, (m, m))
    lat = rng.integers(1, 3, (m, m)).astype(float)
    succ = _nn_rings(bw, lat, min(m, 8))
    for s in range(succ.shape[0]):
        order = _nn_order(bw, lat, s)
        assert sorted(order.tolist()) == list(range(m))
        assert [int(succ[s, order[i]]) for i in range(m)] == order[1:].tolist() + [int(order[0])]


def _valid_ring(row) -> bool:
    seen, p = set(), 0
    for _ in range(len(row)):
        seen.add(p)
        p = int(row[p])
    return p == 0 and seen == set(range(len(row)))


def _links(rng: np.random.Generator, m: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    """(m, m) bandwidths and latencies, asymmetric; few distinct values when `ties`."""
    if ties:
        bw, lat = rng.choice([1e9, 2e9, 5e9], size=(m, m)), rng.choice([1e-5, 2e-5, 5e-5], size=(m, m))
    else:
        bw, lat = rng.uniform(1e9, 1e10, (m, m)), rng.uniform(1e-5, 1e-3, (m, m))
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    return bw, lat


@given(seed=st.integers(0, 10**6), m=st.integers(3, 8), ties=st.booleans())
def test_exact_front_is_the_front_of_every_ring(seed, m, ties):
    """cost.rings.exact_front (threshold search over a Hamiltonian-cycle DP) gives the same
    (bandwidth, latency) front as enumerating every directed ring, one valid ring per point
    with exactly that slowest link and largest latency, whatever rings seed it (none, a few,
    the front itself)."""
    from solver.cost.rings import exact_front
    from solver.cost.sync import _all_rings, _pareto_rings
    rng = np.random.default_rng(seed)
    bw, lat = _links(rng, m, ties)
    every = _all_rings(m)
    keep, abw, alat = _pareto_rings(bw, lat, every)
    pos = np.arange(m)
    for seeds in (every[:0], every[rng.choice(len(every), min(len(every), 5), replace=False)], every[keep]):
        succ, rbw, rlat = exact_front(bw, lat, seeds)
        assert rbw.tolist() == abw[keep].tolist() and rlat.tolist() == alat[keep].tolist()
        for row, b, t in zip(succ, rbw, rlat):
            assert _valid_ring(row)
            assert bw[pos, row].min() == b and lat[pos, row].max() == t


@given(seed=st.integers(0, 10**6), m=st.integers(3, 8), ties=st.booleans(), log_bytes=st.floats(3.0, 10.0),
       max_nodes=st.sampled_from([0, 3, 10**9]))
def test_best_ring_is_the_least_ring_or_says_it_stopped(seed, m, ties, log_bytes, max_nodes):
    """cost.rings.best_ring (branch and bound) returns a valid ring with its own slowest link and
    largest latency, never worse than its seeds; when it says done, no directed ring costs less
    for the bucket (enumeration), whatever the seeds and however few paths it may extend."""
    from solver.cost.rings import best_ring
    from solver.cost.sync import _all_rings
    rng = np.random.default_rng(seed)
    bw, lat = _links(rng, m, ties)
    a, c = 2.0 * (m - 1) / m * 10.0 ** log_bytes, 2.0 * (m - 1)
    every = _all_rings(m)
    pos = np.arange(m)
    least = float((a / bw[pos, every].min(axis=1) + c * lat[pos, every].max(axis=1)).min())
    seeds = every[rng.choice(len(every), int(rng.integers(1, 4)))]
    seeded = float((a / bw[pos, seeds].min(axis=1) + c * lat[pos, seeds].max(axis=1)).min())
    succ, ring_bw, ring_lat, done = best_ring(bw, lat, a, c, seeds, max_nodes)
    assert _valid_ring(succ)
    assert bw[pos, succ].min() == ring_bw and lat[pos, succ].max() == ring_lat
    cost = a / ring_bw + c * ring_lat
    assert cost <= seeded * (1 + 1e-12)
    assert done or max_nodes < 10**9
    if done:
        assert cost <= least * (1 + 1e-12)


@given(seed=st.integers(0, 10**6), m=st.integers(EXACT_RINGS_UP_TO + 1, EXACT_FRONT_UP_TO))
def test_sync_of_up_to_exact_front_groups_never_rises_with_a_faster_link(seed, m):
    """Up to EXACT_FRONT_UP_TO groups each bucket's ring is the best of every ring, so making
    one link faster (more bandwidth, less latency) never raises the sync time."""
    state = _state(seed, 2 * m, 6)
    rng = np.random.default_rng(seed)
    s = _structure(state, rng, m, two_stage=True)
    assert len(s) == m
    t = sync_time(state, s)
    used = [x for g, _ in s for x in g]
    for _ in range(3):
        a, b = (int(x) for x in rng.choice(used, 2, replace=False))
        bw, lat = state.bandwidth.copy(), state.latency.copy()
        bw[a, b] *= float(rng.uniform(1.0, 20.0))
        lat[a, b] *= float(rng.uniform(0.0, 1.0))
        assert sync_time(replace(state, bandwidth=bw, latency=lat), s) <= t * (1 + 1e-12)


@given(seed=st.integers(0, 10**6), m=st.integers(13, 40), ties=st.booleans())
def test_improved_rings_are_rings_no_worse_than_their_start(seed, m, ties):
    """Above the exact sizes: each improved ring is a ring through every holder whose key
    (cost.rings._key) is no worse than its nearest-neighbour start's, so the front's best ring
    for any bucket is never slower than the nearest-neighbour rings' best."""
    from solver.cost.rings import _key, _better, improved_rings
    from solver.cost.sync import _nn_rings
    bw, lat = _links(np.random.default_rng(seed), m, ties)
    nn = _nn_rings(bw, lat, 8)
    for every in (True, False):
        out = improved_rings(bw, lat, nn, every, 10 * m)
        assert out.shape == (2 * len(nn), m)
        for p, start in enumerate(nn):
            for h in range(2):
                row = out[2 * p + h]
                assert _valid_ring(row)
                order = lambda succ: np.array([int(x) for x in itertools.accumulate(range(m - 1), lambda v, _: succ[v],
                                                                                   initial=0)])
                assert not _better(_key(bw, lat, order(start)), _key(bw, lat, order(row)), h == 1)
