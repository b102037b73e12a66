"""The memory- and energy-aware parts of the per-slot lower bound (solve.bounds): never above
the oracle's objective when memory binds, never below the compute bound, and the exact least
ratio over sets with few non-holders."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from solver.io.synthetic import random_state
from solver.solve import solve_exact
from solver.solve.bounds import (_exact_ratio, _least_ratio, busy_bound, compute_bound, holds_alone, memory_bound,
                                 slot_lower_bound, sync_bound)
from solver.solve.inputs import check_queues


def _tight(seed: int, n: int):
    rng = np.random.default_rng(9_500 + seed)
    state = random_state(9_500 + seed, n=n, L=int(rng.integers(max(n, 3), 10)), scale=30.0, p_available=1.0)
    Q = (0.0, 0.0) if seed % 3 == 0 else (float(rng.uniform(0, 3)), float(rng.uniform(0, 3)))
    return state, check_queues(state, Q), Q


@pytest.mark.parametrize("seed", range(8))
def test_bound_stays_below_the_oracle_when_memory_binds(seed):
    state, q, Q = _tight(seed, n=2 + seed % 3)
    cb, mb = compute_bound(state, q, 1.0), memory_bound(state, q, 1.0)
    assert mb >= cb * (1 - 1e-12)
    exact = solve_exact(state, Q, 1.0)
    if exact.plan is None:
        return
    assert mb + busy_bound(state, q) <= exact.objective * (1 + 1e-12)
    assert sync_bound(state, q, 1.0) + busy_bound(state, q) <= exact.objective * (1 + 1e-12)
    assert exact.lower_bound == pytest.approx(slot_lower_bound(state, q, 1.0), rel=1e-12) or len(state.available_indices) == 1
    assert exact.lower_bound <= exact.objective * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_sync_bound_stays_below_the_oracle_with_loose_memory(seed):
    rng = np.random.default_rng(9_600 + seed)
    state = random_state(9_600 + seed, n=2 + seed % 3, L=int(rng.integers(4, 10)), scale=1.0, p_available=1.0)
    Q = (0.0, 0.0) if seed % 2 == 0 else (float(rng.uniform(0, 3)), float(rng.uniform(0, 3)))
    q = check_queues(state, Q)
    exact = solve_exact(state, Q, 1.0)
    assert exact.plan is not None
    assert sync_bound(state, q, 1.0) <= exact.objective * (1 + 1e-12)
    assert exact.lower_bound <= exact.objective * (1 + 1e-12)


def test_some_slots_have_non_holders():
    assert any(not holds_alone(s, d) for s, _, _ in (_tight(i, 4) for i in range(12)) for d in s.available_indices)


@pytest.mark.parametrize("seed", range(10))
def test_exact_ratio_is_the_minimum_over_sets_of_that_size(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 8))
    w, theta = rng.uniform(0, 2, n) * (rng.random(n) < 0.7), rng.uniform(0.1, 3, n)
    V = float(rng.choice([0.0, 0.5, 2.0]))
    for size in range(1, n + 1):
        best = min((V + w[list(S)].sum()) / theta[list(S)].sum() for S in itertools.combinations(range(n), size))
        assert _exact_ratio(V, w, theta, size) == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_least_ratio_is_the_minimum_over_allowed_sets(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    w, theta = rng.uniform(0, 2, n) * (rng.random(n) < 0.7), rng.uniform(0.1, 3, n)
    holder = rng.random(n) < 0.5
    V = float(rng.choice([0.0, 0.5, 2.0]))
    for j in range(int((~holder).sum()) + 1):
        best = min(((V + w[list(S)].sum()) / theta[list(S)].sum()
                    for r in range(1, n + 1) for S in itertools.combinations(range(n), r)
                    if (~holder[list(S)]).sum() <= j), default=np.inf)
        assert _least_ratio(V, w, theta, holder, j) == pytest.approx(best, rel=1e-9)
