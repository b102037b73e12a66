"""The per-slot lower bound (solve.bounds): never above any plan's objective, exact where the
slot has one possible plan."""
from __future__ import annotations

import numpy as np
import pytest

from solver.io.synthetic import random_state
from solver.solve import solve_exact, solve_slot
from solver.solve.bounds import compute_bound


def _slot(seed: int, n: int, p_available: float = 0.8):
    rng = np.random.default_rng(9_000 + seed)
    state = random_state(9_000 + seed, n=n, L=int(rng.integers(max(n, 2), 12)),
                         scale=float(rng.choice([1.0, 10.0, 30.0])), p_available=p_available)
    Q = (0.0, 0.0) if seed % 2 == 0 else (float(rng.uniform(0, 3)), float(rng.uniform(0, 3)))
    return state, Q


@pytest.mark.parametrize("seed", range(16))
def test_bound_is_below_the_search_and_the_oracle(seed):
    state, Q = _slot(seed, n=2 + seed % 4)
    res = solve_slot(state, Q, 1.0)
    if res.plan is None:
        assert np.isnan(res.lower_bound) and np.isnan(res.gap)
        return
    exact = solve_exact(state, Q, 1.0)
    assert res.lower_bound <= exact.objective <= res.objective * (1 + 1e-12)
    assert exact.lower_bound == pytest.approx(res.lower_bound, rel=1e-12)
    assert 0.0 <= res.gap < 1.0
    assert res.gap == pytest.approx((res.objective - res.lower_bound) / res.objective)


@pytest.mark.parametrize("seed", range(6))
def test_one_device_bound_is_its_only_plan(seed):
    state, Q = _slot(seed, n=1, p_available=1.0)
    res = solve_slot(state, Q, 1.0)
    assert res.plan is not None
    assert res.lower_bound == pytest.approx(res.objective, rel=1e-12)
    assert res.gap == pytest.approx(0.0, abs=1e-12)
    assert compute_bound(state, np.zeros(len(state.budgets)), 1.0) <= res.batch_time * (1 + 1e-12)


def test_negative_queue_weights_claim_nothing():
    state, _ = _slot(0, n=3)
    assert compute_bound(state, np.array([-1.0, 0.0]), 1.0) == -np.inf
