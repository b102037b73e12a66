"""Mutation-audit tests for online.queues: guarantee (a) from a non-zero initial queue (a
resumed run), where the bound is (Q(H) - Q(0)) / H."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver.online.queues import average_overshoot, overshoot_bound, queue_trajectory

finite = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


@given(st.lists(st.lists(finite, min_size=2, max_size=2), min_size=1, max_size=40),
       st.tuples(st.floats(1e-2, 1e3), st.floats(1e-2, 1e3)), st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 50.0)))
def test_guarantee_a_from_a_nonzero_initial_queue(costs, limits, Q0):
    costs = np.array(costs)
    traj = queue_trajectory(costs, limits, Q0)
    assert np.array_equal(traj[0], np.asarray(Q0))
    H = len(costs)
    over = average_overshoot(costs, limits)
    bound = overshoot_bound(traj[-1], H, Q0)
    assert np.all(over <= bound + 1e-9 * (1 + np.abs(bound)))
    # while a queue never empties the law has no floor: the sum of c / Cbar - 1 is Q(H) - Q(0)
    never_empty = np.all(traj[1:] > 0, axis=0)
    assert np.allclose(over[never_empty], bound[never_empty], rtol=1e-9, atol=1e-9)


def test_guarantee_a_from_a_nonzero_initial_queue_by_hand():
    """Q(0) = 5, two slots at 2 budgets' worth: Q = 5 -> 6 -> 7, overshoot 100% = (7 - 5) / 2."""
    traj = queue_trajectory(np.array([[2.0], [2.0]]), [1.0], [5.0])
    assert traj[:, 0].tolist() == [5.0, 6.0, 7.0]
    assert overshoot_bound(traj[-1], 2, [5.0]).tolist() == [1.0]
    assert average_overshoot(np.array([[2.0], [2.0]]), [1.0]).tolist() == [1.0]


def test_queue_bound_multi_by_hand():
    """THEORY_NOTES 3.7 by hand: V = 2, DeltaT = 3, C = 1, delta = 0.5, ymax = (1, 2):
    B_L = (1 + 4) / 2 = 2.5 (the drift's constant: (Q + y)^2 / 2 - Q^2 / 2 = Q y + y^2 / 2),
    M = (2.5 + 6 + 1) / 0.5 = 19, Lmax = 19^2 / 2 + 2.5 + 6 + 1 = 190, bound sqrt(380)."""
    from solver.online.queues import queue_bound_multi
    assert queue_bound_multi(2.0, 3.0, 1.0, 0.5, [1.0, 2.0]) == pytest.approx(380.0 ** 0.5, rel=1e-12)
    # L0 dominates when the run starts with large queues: sqrt(2 L0)
    assert queue_bound_multi(2.0, 3.0, 1.0, 0.5, [1.0, 2.0], L0=1e4) == pytest.approx(2e4 ** 0.5, rel=1e-12)
