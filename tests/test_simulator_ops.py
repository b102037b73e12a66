"""The event simulator's per-operation records (what the pipeline timeline draws)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from solver.cost.simulator import simulate


def test_known_gpipe_records():
    """Two stages, u=1, 3 micro-batches, link 0.5 s per sample each way."""
    r = simulate([1.0, 1.0], [2.0, 2.0], [0.5], 1, 3, "gpipe")
    f0 = [(o.start, o.end) for o in r.ops if o.kind == "F" and o.where == 0]
    f1 = [(o.start, o.end) for o in r.ops if o.kind == "F" and o.where == 1]
    assert f0 == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert f1 == [(1.5, 2.5), (2.5, 3.5), (3.5, 4.5)]
    # the flush: stage 1's first backward starts after its last forward
    b1 = [o for o in r.ops if o.kind == "B" and o.where == 1]
    assert b1[0].start == pytest.approx(4.5) and b1[0].micro_batch == 0
    assert max(o.end for o in r.ops) == pytest.approx(r.makespan)


@settings(max_examples=60)
@given(st.integers(1, 5), st.integers(1, 6), st.sampled_from([1, 2, 4]),
       st.lists(st.floats(0.01, 1.0), min_size=15, max_size=15), st.sampled_from(["gpipe", "1f1b"]))
def test_records_are_consistent_with_totals(k, n, u, xs, schedule):
    F, G, lam = xs[:k], xs[5:5 + k], xs[10:10 + k - 1]
    r = simulate(F, G, lam, u, n * u, schedule)
    assert sum(o.kind == "F" for o in r.ops) == k * n == sum(o.kind == "B" for o in r.ops)
    assert sum(o.kind.startswith("send") for o in r.ops) == 2 * (k - 1) * n
    assert max(o.end for o in r.ops) == pytest.approx(r.makespan)
    for j in range(k):
        mine = sorted((o for o in r.ops if o.kind in "FB" and o.where == j), key=lambda o: o.start)
        assert sum(o.end - o.start for o in mine) == pytest.approx(r.stage_busy[j])
        assert all(a.end <= b.start + 1e-12 for a, b in zip(mine, mine[1:]))   # one at a time
    for i in range(k - 1):
        sends = [o for o in r.ops if o.kind.startswith("send") and o.where == i]
        assert sum(o.end - o.start for o in sends) == pytest.approx(r.link_busy[i])
    # a stage's forward of m starts only after the activations of m have arrived
    arrive = {(o.where + 1, o.micro_batch): o.end for o in r.ops if o.kind == "sendF"}
    for o in r.ops:
        if o.kind == "F" and o.where > 0:
            assert o.start >= arrive[(o.where, o.micro_batch)] - 1e-12
