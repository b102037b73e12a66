"""Mutation-audit tests for model.memory: the live-sample rule with a short last micro-batch."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, strategies as st

from solver.cost.simulator import simulate
from solver.model.memory import live_samples


@given(st.integers(2, 6), st.sampled_from([2, 3, 4]), st.integers(1, 30), st.booleans())
def test_1f1b_live_samples_count_the_short_last_micro_batch(k, u, b, recompute):
    """For a share b that is not a multiple of u, the last micro-batch is short but still a
    micro-batch: 1F1B stage j stashes min(k - j, ceil(b / u)) of them (the simulator's peak), and
    live_samples, u times that, bounds the simulator's peak activation bytes."""
    F, G, lam = [1e-3] * k, [2e-3] * k, [1e-4] * (k - 1)
    H, I = [1.0] * k, [1.0] * k
    r = simulate(F, G, lam, u, b, "1f1b", recompute=recompute, saved=H, inputs=I, duplex="full")
    n = math.ceil(b / u)
    live = live_samples(k, b, u, "1f1b")
    assert r.peak_stash == tuple(min(k - j, n) for j in range(k))
    assert np.array_equal(live, u * np.minimum(k - np.arange(k), n).astype(float))
    extra = u * np.asarray(H) if recompute else 0.0
    assert np.all(np.asarray(r.peak_bytes) <= live * np.asarray(I if recompute else H) + extra + 1e-9)
