"""The exhaustive oracle: enumeration size, exactness, monotonicity in V, and the search's gap."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from solver import baselines
from solver.cost import evaluate
from solver.solve.oracle import ordered_groupings, solve_exact
from solver.solve import SolveOptions, solve_slot
from solver.io.synthetic import random_state


def test_enumeration_size():
    assert sum(1 for g in ordered_groupings(range(6)) if g) == 8463
    assert sum(1 for g in ordered_groupings(range(3)) if g) == 25


def test_rejects_large_pools_and_wires_options():
    with pytest.raises(ValueError, match="at most 6"):
        solve_exact(random_state(1, n=7, L=4))
    state = random_state(2, n=3, L=4)
    res = solve_slot(state, (0.0, 0.0), options=SolveOptions(exact=True))
    assert res.status == "optimal" and "exact for the model" in res.message
    assert res.plan.validate(state) == []
    wide = solve_exact(random_state(2, n=3, L=120))
    assert "every share" in wide.message and "(every cut set)" not in wide.message
    assert ("exact for the model (per ordered group the exact time / cost frontier" in wide.message
            or ("not every cut set" in wide.message and "gradient sync" in wide.message)), wide.message


def small_state(seed, n, L, p, scale):
    return random_state(seed, n=n, L=L, p_available=p, scale=scale)


@settings(max_examples=12)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 4), L=st.integers(2, 6),
       p=st.sampled_from([0.7, 1.0]), scale=st.sampled_from([1.0, 10.0, 30.0]),
       Q=st.tuples(st.sampled_from([0.0, 20.0, 300.0]), st.sampled_from([0.0, 1e-3])))
def test_chosen_batch_time_non_increasing_in_V(seed, n, L, p, scale, Q):
    state = small_state(seed, n, L, p, scale)
    times = []
    for V in (0.0, 1.0, 10.0, 100.0, 1e4):
        res = solve_exact(state, Q, V)
        if res.plan is None:
            return
        assert res.plan.validate(state) == []
        times.append(res.batch_time)
    assert all(b <= a * (1 + 1e-9) for a, b in zip(times, times[1:])), times


GAPS: list[float] = []


@settings(max_examples=30)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 4), L=st.integers(2, 6),
       scale=st.sampled_from([1.0, 10.0, 30.0]),
       Q=st.tuples(st.sampled_from([0.0, 50.0]), st.sampled_from([0.0, 1e-3])))
def test_search_gap_to_oracle(seed, n, L, scale, Q):
    state = small_state(seed, n, L, 1.0, scale)
    exact = solve_exact(state, Q, 10.0)
    res = solve_slot(state, Q, 10.0)
    if exact.plan is None:
        assert res.plan is None
        return
    assert exact.objective <= res.objective * (1 + 1e-9)
    for f in baselines.ALL.values():
        p = f(state)
        if p is not None:
            assert exact.objective <= evaluate(p, state).objective(Q, 10.0) * (1 + 1e-9)
    gap = res.objective / exact.objective - 1.0
    GAPS.append(gap)
    assert gap <= 0.05, (gap, exact.plan.summary(state), res.plan.summary(state))


def test_mean_gap_small():
    """Runs after test_search_gap_to_oracle (file order): the mean gap is below 1%."""
    if not GAPS:
        pytest.skip("gap test did not run")
    assert float(np.mean(GAPS)) < 0.01, (np.mean(GAPS), max(GAPS))
