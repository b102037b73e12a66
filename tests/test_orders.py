"""Device orders inside a group (solve.orders: the nearest-neighbour chain) and the link
clusters the families group devices by (solve.families.clusters)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from solver.io.synthetic import random_state
from solver.solve.orders import nn_order


def _chain(state, devices: list[int]) -> tuple[int, ...]:
    """The rule of nn_order's docstring, step by step: start at the fastest device (ties: lower
    index), then always the remaining device with the fastest link from the last one (ties:
    faster device, then lower index)."""
    speed = [float(x) for x in state.speed]
    rest = sorted(devices, key=lambda d: (-speed[d], d))
    out = [rest.pop(0)]
    while rest:
        last = out[-1]
        nxt = max(rest, key=lambda d: (float(state.bandwidth[last, d]), speed[d], -d))
        rest.remove(nxt)
        out.append(nxt)
    return tuple(out)


@given(seed=st.integers(0, 10**6), k=st.integers(2, 60), ties=st.booleans())
def test_nn_order_follows_its_rule_for_small_and_large_groups(seed, k, ties):
    """Groups of up to 16 devices take the Python path, larger ones the compiled chain: both
    give the rule's order, on links and speeds with many ties too."""
    state = random_state(seed, n=64, L=4)
    if ties:
        speed = np.asarray(state.speed, dtype=float)
        state = replace(state, bandwidth=np.round(state.bandwidth / 2e10) * 2e10,
                        speed=np.round(speed / speed.max() * 2) + 1)
    devices = [int(d) for d in np.random.default_rng(seed).choice(64, k, replace=False)]
    assert nn_order(state, devices) == _chain(state, devices)


@given(seed=st.integers(0, 10**6), k=st.integers(1, 40), level=st.integers(0, 4))
def test_clusters_are_the_components_of_the_fast_links(seed, k, level):
    """families.clusters: the groups partition the devices, each sorted, in the order of their
    least device; no link of at least the threshold (both ways) joins two groups, and inside a
    group such links connect every device to the first."""
    from solver.solve.families import clusters
    state = random_state(seed, n=48, L=4)
    devices = [int(d) for d in np.random.default_rng(seed).choice(48, k, replace=False)]
    finite = np.unique(state.bandwidth[np.isfinite(state.bandwidth)])
    threshold = float(finite[min(level * len(finite) // 4, len(finite) - 1)])
    fast = np.minimum(state.bandwidth, state.bandwidth.T) >= threshold
    groups = clusters(state, devices, threshold)
    assert sorted(d for g in groups for d in g) == sorted(devices)
    assert all(g == sorted(g) for g in groups) and [g[0] for g in groups] == sorted(g[0] for g in groups)
    where = {d: i for i, g in enumerate(groups) for d in g}
    assert not any(fast[a, b] and where[a] != where[b] for a in devices for b in devices)
    for g in groups:
        reached, stack = {g[0]}, [g[0]]
        while stack:
            a = stack.pop()
            for b in g:
                if b not in reached and fast[a, b]:
                    reached.add(b)
                    stack.append(b)
        assert reached == set(g)
