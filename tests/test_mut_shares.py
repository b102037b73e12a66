"""Mutation-audit tests for subproblems.shares: groups at different micro-batch sizes whose one
micro-batch each already makes up the whole batch (sum u_g = B) have exactly one allocation."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver.subproblems.shares import mixed_shares, solve_shares
from tests.test_micro_batch import brute_shares as _brute  # noqa: E402


@pytest.mark.parametrize("us", [(1, 1, 2), (2, 2, 4), (1, 2, 3), (4, 4, 8)])
def test_one_micro_batch_each_fills_the_batch(us):
    B = sum(us)
    a, c, q = np.array([0.3, 0.5, 0.2]), np.array([0.1, 0.0, 0.4]), np.array([0.2, 0.1, 0.3])
    r = solve_shares(a, c, [B] * 3, B, list(us), 1.0, q)
    assert r.status == "optimal"
    assert r.shares == tuple(us)
    assert r.value == pytest.approx(_brute(a, c, [B] * 3, B, us, 1.0, q), rel=1e-12)
    assert mixed_shares(a, c, [B] * 3, B, list(us), 1.0, q).shares == tuple(us)


@given(st.integers(0, 10**6), st.sampled_from([(1, 1, 2), (1, 2, 3), (2, 2, 4), (1, 2), (2, 4), (1, 3)]),
       st.integers(1, 3), st.sampled_from([0.0, 1.0]))
def test_mixed_shares_brute_force_near_the_least_batch(seed, us, mult, W):
    """B a small multiple of lcm(u) at or just above sum(u): optimal iff some allocation exists,
    at the brute force's value."""
    rng = np.random.default_rng(seed)
    m = len(us)
    lcm = int(np.lcm.reduce(us))
    B = lcm * mult
    if B < sum(us):
        B = lcm * -(-sum(us) // lcm)
    a, c, q = rng.uniform(0.1, 2.0, m), rng.uniform(0.0, 3.0, m), rng.uniform(0.0, 1.0, m)
    cap = [int(rng.integers(u, B + 1)) for u in us]
    best = _brute(a, c, cap, B, us, W, q)
    r = solve_shares(a, c, cap, B, list(us), W, q)
    if best is None:
        assert r.status == "infeasible"
    else:
        assert r.status == "optimal" and r.value == pytest.approx(best, rel=1e-9, abs=1e-12)


@given(st.integers(0, 10**6), st.integers(2, 3), st.sampled_from([1e-3, 0.05, 0.3]))
def test_shares_brute_force_with_small_time_weight(seed, m, W):
    """W < 1 (batch time weighs little against the per-sample costs): the search over the
    breakpoints must still reach the cheap allocations far above the min-max z."""
    rng = np.random.default_rng(seed)
    u, B = 2, 16
    us = (u,) * m
    a, c = rng.uniform(0.1, 2.0, m), rng.uniform(0.0, 3.0, m)
    q = rng.uniform(0.0, 1.0, m)
    cap = [int(rng.integers(u, B + 1)) for _ in range(m)]
    best = _brute(a, c, cap, B, us, W, q)
    r = solve_shares(a, c, cap, B, u, W, q)
    if best is None:
        assert r.status == "infeasible"
    else:
        assert r.status == "optimal" and r.value == pytest.approx(best, rel=1e-9, abs=1e-12)
