"""Virtual queues: the queue law and the sample-path bounds (a) and (b), on plain numbers."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.online.queues import (average_overshoot, initial_queues, overshoot_bound, queue_bound,
                           queue_bound_multi, queue_trajectory, update_queues)

finite = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)
limit = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(st.lists(st.tuples(finite, finite, limit), min_size=1, max_size=4))
def test_queue_law(rows):
    """Queues in budget units: Q + c/Cbar - 1, floored at 0 (DESIGN's law divided by Cbar)."""
    Q, c, cb = (list(x) for x in zip(*rows))
    new = update_queues(Q, c, cb)
    for q, cc, b, n in zip(Q, c, cb, new):
        assert n == max(q + cc / b - 1.0, 0.0)
        assert n >= 0.0 and n >= q + cc / b - 1.0
        raw = max(q * b + cc - b, 0.0)
        assert n * b == pytest.approx(raw, rel=1e-9, abs=1e-9)


def test_queue_law_rejects_mismatch_and_nan():
    with pytest.raises(ValueError):
        update_queues([0.0], [1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        update_queues([0.0], [math.nan], [1.0])
    with pytest.raises(ValueError, match="limit"):
        update_queues([0.0], [1.0], [0.0])
    assert initial_queues(3) == (0.0, 0.0, 0.0)


@given(st.lists(st.lists(finite, min_size=2, max_size=2), min_size=1, max_size=60),
       st.tuples(limit, limit))
def test_guarantee_a_on_any_cost_sequence(costs, limits):
    """(1/H) sum (c/Cbar - 1) <= Q(H)/H for every budget, whatever the costs."""
    traj = queue_trajectory(np.array(costs), limits)
    H = len(costs)
    over = average_overshoot(np.array(costs), limits)
    bound = overshoot_bound(traj[-1], H)
    assert np.all(over <= bound + 1e-9 * (1 + bound))
    # the bound is an equality while the queue never empties
    never_empty = np.all(traj[1:] > 0, axis=0)
    assert np.allclose(over[never_empty], bound[never_empty], rtol=1e-9, atol=1e-9)


@settings(max_examples=30)
@given(st.integers(0, 10_000), st.sampled_from([0.5, 4.0, 32.0, 256.0]))
def test_guarantee_b_toy_controller(seed, V):
    """A drift-plus-penalty controller over random (T, c) actions, one of which is always a slack
    plan with c <= Cbar - delta: Q(t) <= (V DeltaT + C)/delta + ymax with C = 0."""
    rng = np.random.default_rng(seed)
    H, A, Cbar, delta = 300, 5, 1.0, 0.2
    Q, Qmax, dT, ymax = 0.0, 0.0, 0.0, 0.0
    for _ in range(H):
        T = rng.uniform(1.0, 3.0, A)
        c = rng.uniform(0.5, 3.0, A)
        c[0] = rng.uniform(0.0, Cbar - delta)   # the slack plan x0
        T[0] = rng.uniform(2.0, 4.0)
        a = int(np.argmin(V * T + Q * c / Cbar))
        dT = max(dT, T[0] - T[a])
        ymax = max(ymax, abs(c[a] / Cbar - 1.0))
        Q = update_queues([Q], [c[a]], [Cbar])[0]
        Qmax = max(Qmax, Q)
    assert Qmax <= queue_bound(V, dT, 0.0, delta, ymax) + 1e-9


def test_bound_helpers():
    assert queue_bound(10.0, 2.0, 1.0, 0.5, 3.0) == pytest.approx((20.0 + 1.0) / 0.5 + 3.0)
    assert queue_bound(0.0, 0.0, 0.0, 1.0, 0.0, Q0=5.0) == 5.0
    assert overshoot_bound([4.0, 0.0], 8).tolist() == [0.5, 0.0]
    with pytest.raises(ValueError):
        queue_bound(1.0, 1.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError):
        overshoot_bound([1.0], 0)
    one = queue_bound_multi(10.0, 2.0, 0.0, 0.5, [3.0])
    assert one >= queue_bound(10.0, 2.0, 0.0, 0.5, 3.0) - 3.0   # the K-budget form is looser
