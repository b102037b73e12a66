"""solve.rescue.chain_order against every order of every subset (small cases)."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.solve.rescue import chain_order


def _ends(rng: np.random.Generator, n: int, L: int) -> np.ndarray:
    """(n, L + 1) tables non-decreasing in the start layer a, ends[i, a] >= a, <= L."""
    out = np.empty((n, L + 1), dtype=np.int64)
    for i in range(n):
        room = rng.uniform(0.5, 3.0)
        size = rng.uniform(0.2, 1.5, L)
        for a in range(L + 1):
            c, used = a, 0.0
            while c < L and used + size[c] <= room:
                used += size[c]
                c += 1
            out[i, a] = c
        out[i] = np.maximum.accumulate(out[i])
    return out


def _covers(order, tabs, L, p: int = 0, a: int = 0) -> bool:
    """Whether the devices of `order`, stage p on from layer a, can each take a non-empty
    stage within its table (any end up to the table's) and together end at L."""
    if p == len(order):
        return a == L
    return any(_covers(order, tabs, L, p + 1, c) for c in range(a + 1, int(tabs[p][order[p], a]) + 1))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 5), st.integers(1, 7), st.booleans())
def test_chain_order_finds_a_covering_order_exactly_when_one_exists(seed, n, L, fixed):
    rng = np.random.default_rng(seed)
    if fixed:       # k stages, each position its own table (1F1B)
        k = int(rng.integers(1, n + 1))
        tabs = [_ends(rng, n, L) for _ in range(k)]
        got = chain_order(lambda p: tabs[p], n, L, stages=k)
        exists = any(_covers(o, tabs, L) for o in itertools.permutations(range(n), k))
        assert (got is not None) == exists
        if got is not None:
            assert len(got) == k and len(set(got)) == k and _covers(got, tabs, L)
    else:           # one table for every position (GPipe): the fewest devices
        tab = _ends(rng, n, L)
        tabs = [tab] * n
        got = chain_order(lambda p: tab, n, L)
        sizes = [m for m in range(1, n + 1) if any(_covers(o, tabs, L) for o in itertools.permutations(range(n), m))]
        assert (got is not None) == bool(sizes)
        if got is not None:
            assert len(got) == sizes[0] and len(set(got)) == len(got) and _covers(got, tabs, L)
