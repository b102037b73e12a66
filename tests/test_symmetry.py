"""Like devices (solve.symmetry): a structure and the same structure with like devices and
like servers swapped share a key and have the same objective; where the network is not
symmetric over the classes there is no key; with a previous plan a holder is told apart."""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from solver.model import Group, Plan
from solver.solve.options import SolveOptions
from solver.solve.scoring import Scorer
from solver.solve.symmetry import Symmetry
from solver.subproblems.cache import SlotCache
from test_twins import cluster

# The twins cluster: servers A (0-3) and B (4-7) alike (V100, V100, T4, T4), C (8, 9: V100 of
# 32 GB) and D (10, 11: V100 behind a faster NIC).
SWAP_SERVERS = {**{x: (x + 4) % 8 for x in range(8)}, 8: 8, 9: 9, 10: 10, 11: 11}
SWAPS_INSIDE = [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11)]


def state_of():
    with tempfile.TemporaryDirectory() as d:
        return cluster(Path(d))


def relabelling(rng: np.random.Generator) -> dict[int, int]:
    """A random symmetry of the twins cluster: servers A and B swapped or not, then like
    devices of one server swapped."""
    sigma = dict(SWAP_SERVERS) if rng.random() < 0.5 else {x: x for x in range(12)}
    for a, b in SWAPS_INSIDE:
        if rng.random() < 0.5:
            sigma = {x: {a: b, b: a}.get(y, y) for x, y in sigma.items()}
    return sigma


def random_structure(rng: np.random.Generator, n: int) -> list[tuple[int, ...]]:
    """1-3 disjoint ordered groups of 1-4 devices."""
    perm = [int(x) for x in rng.permutation(n)]
    out, at = [], 0
    for _ in range(int(rng.integers(1, 4))):
        k = int(rng.integers(1, 5))
        out.append(tuple(perm[at:at + k]))
        at += k
    return out


def objective(sc: Scorer, groups: list[tuple[int, ...]]) -> float | None:
    s = []
    for d in groups:
        c = sc.cuts(d)
        if c is None:
            return None
        s.append((d, c))
    got = sc.score(tuple(s), source="test")
    return None if got is None else got.objective


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from([0.0, 0.3]))
def test_swapped_like_devices_share_the_key_and_the_objective(seed, queue) -> None:
    state = state_of()
    sc = Scorer(state, np.array([queue]), 1.0, SolveOptions(), None)
    assert sc.symmetry.active
    rng = np.random.default_rng(seed)
    for _ in range(20):
        s = random_structure(rng, state.n)
        sigma = relabelling(rng)
        t = [tuple(sigma[x] for x in g) for g in s]
        assert sc.symmetry.key(s) == sc.symmetry.key(t)
        a, b = objective(sc, s), objective(sc, t)
        assert (a is None) == (b is None)
        if a is not None:
            assert b == pytest.approx(a, rel=1e-9)


def test_unlike_structures_get_other_keys() -> None:
    state = state_of()
    sym = Scorer(state, np.zeros(1), 1.0, SolveOptions(), None).symmetry
    key = sym.key
    assert key([(0, 4)]) != key([(0, 1)])               # two servers, not one
    assert key([(0, 2)]) != key([(0, 1)])               # a T4 is not a V100
    assert key([(0, 8)]) != key([(0, 4)])               # C's V100 has more memory
    assert key([(0, 10)]) != key([(0, 4)])              # D's NIC differs
    assert key([(0,), (1,)]) != key([(0,), (4,)])       # NIC shared across groups or not
    assert key([(0, 1), (2,)]) != key([(2,), (0, 1)])   # groups keep their order


def test_no_key_where_a_link_breaks_the_symmetry() -> None:
    state = state_of()
    bw = state.bandwidth.copy()
    bw[0, 4] *= 0.5
    broken = replace(state, bandwidth=bw)
    sym = Symmetry(broken, SlotCache(broken), None)
    assert not sym.active and sym.key([(0, 1)]) is None


def test_no_key_without_like_devices() -> None:
    state = state_of()
    price = np.arange(1.0, state.n + 1.0) * 1e-4          # every device its own price
    alone = replace(state, price=price)
    assert not Symmetry(alone, SlotCache(alone), None).active


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31))
def test_previous_holders_are_told_apart(seed) -> None:
    """With a previous plan, a structure and a relabelled one share a key only when their
    objectives (migration charged) are equal, and a holder never swaps with a device that
    held nothing."""
    state = state_of()
    prev = Plan((Group((8, 10), (6, state.workload.num_layers), 64),))     # held: one of C's, one of D's
    held = {8, 10}
    sc = Scorer(state, np.zeros(1), 1.0, SolveOptions(), prev)
    rng = np.random.default_rng(seed)
    equal = 0
    for _ in range(20):
        s = random_structure(rng, state.n)
        sigma = relabelling(rng)
        t = [tuple(sigma[x] for x in g) for g in s]
        if sc.symmetry.key(s) != sc.symmetry.key(t):
            continue
        equal += 1
        used = {x for g in s for x in g}
        assert all((x in held) == (sigma[x] in held) for x in used)
        a, b = objective(sc, s), objective(sc, t)
        assert (a is None) == (b is None)
        if a is not None:
            assert b == pytest.approx(a, rel=1e-9)
    assert equal > 0
    assert sc.symmetry.key([(8, 0)]) != sc.symmetry.key([(9, 0)])     # a holder and a like device that held nothing
