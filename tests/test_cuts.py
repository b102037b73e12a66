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
