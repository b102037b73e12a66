"""Cut DPs: exact against brute force on small groups; frontier cut sets are valid."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, strategies as st

from solver.model import share_cap
from solver.subproblems.cuts import alpha_beta, balanced_cuts, frontier_cuts, min_bottleneck_cuts
from solver.io.synthetic import random_state


def brute_min_alpha(state, devices, min_share):
    L = state.workload.num_layers
    best = None
    for c in itertools.combinations(range(1, L), len(devices) - 1):
        cuts = (*c, L)
        if share_cap(state, devices, cuts) < min_share:
            continue
        a, _ = alpha_beta(state, devices, cuts)
        best = a if best is None else min(best, a)
    return best


@given(seed=st.integers(0, 10**6), n=st.integers(2, 4), L=st.integers(2, 9),
       scale=st.sampled_from([1.0, 10.0, 40.0]), mult=st.sampled_from([1, 2, 8]))
def test_min_bottleneck_equals_brute_force(seed, n, L, scale, mult):
    state = random_state(seed, n=n, L=L, scale=scale)
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, min(n, L) + 1))
    devices = tuple(int(x) for x in rng.permutation(n)[:k])
    share = state.workload.micro_batch * mult
    cuts = min_bottleneck_cuts(state, devices, share)
    expected = brute_min_alpha(state, devices, share if k > 1 else state.workload.micro_batch)
    if expected is None:
        assert cuts is None
        return
    assert cuts is not None and cuts[-1] == L and all(a < b for a, b in zip((0, *cuts), cuts))
    assert share_cap(state, devices, cuts) >= (share if k > 1 else state.workload.micro_batch)
    assert abs(alpha_beta(state, devices, cuts)[0] - expected) <= 1e-12 * expected


@given(seed=st.integers(0, 10**6), k=st.integers(1, 5), L=st.integers(5, 30))
def test_frontier_cuts_valid_and_pareto(seed, k, L):
    state = random_state(seed, n=5, L=L)
    devices = tuple(range(k))
    cuts = frontier_cuts(state, devices, limit=4)
    assert 1 <= len(cuts) <= 4
    ab = [alpha_beta(state, devices, c) for c in cuts]
    best = min_bottleneck_cuts(state, devices)
    assert abs(ab[0][0] - alpha_beta(state, devices, best)[0]) <= 1e-12 * ab[0][0]
    for (a1, b1), (a2, b2) in zip(ab, ab[1:]):
        assert a1 <= a2 and b1 > b2          # increasing alpha, decreasing beta
    for c in cuts:
        assert len(c) == k and c[-1] == L and share_cap(state, devices, c) >= state.workload.micro_batch
    b = balanced_cuts(state, devices)
    assert b is not None and len(b) == k


def test_too_many_devices_or_no_memory_is_none():
    state = random_state(1, n=4, L=3)
    assert min_bottleneck_cuts(state, (0, 1, 2, 3)) is None
    assert frontier_cuts(state, (0, 1, 2, 3)) == []
    huge = random_state(1, n=2, L=4, scale=1e4)
    assert min_bottleneck_cuts(huge, (0, 1)) is None


def _busy(state, devices, cuts, weights, schedule, recompute):
    """The weighted busy joules per sample of a cut group, from the cost model's own numbers
    (weights: per stage, per busy second including the device's busy power, as
    solve.oracle_cuts.busy_weights gives them)."""
    from solver.cost.pipeline import group_coeffs
    gc = group_coeffs(state, devices, cuts, schedule, recompute)
    power = state.extra_power_w[list(devices)]
    return float(np.dot(np.asarray(weights) / power, gc.busy_j_per_sample))


@given(seed=st.integers(0, 10**6), k=st.integers(2, 4), L=st.integers(2, 10),
       variant=st.sampled_from([("gpipe", False), ("1f1b", False), ("gpipe", True), ("1f1b", True)]),
       mult=st.sampled_from([None, 1, 4]), scale=st.sampled_from([1.0, 10.0]))
def test_busy_cuts_fit_and_reach_the_least_busy_energy(seed, k, L, variant, mult, scale):
    """Every cut set busy_cuts returns fits the share under its variant, and the least weighted
    busy energy among them is the least over every cut set that fits (brute force)."""
    from solver.subproblems.cuts import busy_cuts
    state = random_state(seed, n=4, L=L, scale=scale)
    rng = np.random.default_rng(seed)
    devices = tuple(int(x) for x in rng.permutation(4)[:k])
    weights = rng.uniform(0.0, 2.0, k) * (rng.random(k) < 0.8)
    share = None if mult is None else state.workload.micro_batch * mult
    need = state.workload.micro_batch if share is None else share
    found = busy_cuts(state, devices, weights, share, schedule=variant[0], recompute=variant[1])
    fits = [(*c, L) for c in itertools.combinations(range(1, L), k - 1)
            if share_cap(state, devices, (*c, L), *variant) >= need] if k <= L else []
    if not np.any(weights > 0) or not fits:
        assert found == []
        return
    for c in found:
        assert len(c) == k and c[-1] == L and all(a < b for a, b in zip((0, *c), c))
        assert share_cap(state, devices, c, *variant) >= need
    least = min(_busy(state, devices, c, weights, *variant) for c in fits)
    got = min(_busy(state, devices, c, weights, *variant) for c in found)
    assert got <= least * (1 + 1e-9) + 1e-15
