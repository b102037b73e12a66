"""Mutation-audit tests for model.state: Instance.state(t) reads slot t of every per-slot trace."""
from __future__ import annotations

import numpy as np

from solver.io.synthetic import random_instance


def test_state_reads_each_slot_of_every_trace():
    inst = random_instance(5, n=4, L=4, slots=4)
    assert not np.allclose(inst.price[0], inst.price[1])      # the traces change over slots
    peak = np.array([d.peak_flops for d in inst.devices])
    for t in range(inst.num_slots):
        s = inst.state(t)
        assert s.t == t
        assert np.array_equal(s.price, inst.price[t])
        assert np.array_equal(s.available, inst.available[t].astype(bool))
        assert np.array_equal(s.speed_factor, inst.speed_factor[t])
        assert np.allclose(s.speed, peak * inst.efficiency * inst.speed_factor[t], rtol=1e-15)
        off = ~np.eye(inst.n, dtype=bool)
        assert np.array_equal(s.bandwidth[off], np.asarray(inst.bandwidth[t], dtype=float)[off])
