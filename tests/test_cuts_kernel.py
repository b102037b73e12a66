"""The compiled cut DPs inside subproblems.cuts against the numpy reference: the same masks,
values and cuts on random slots."""
from __future__ import annotations

import numpy as np
import pytest

from solver.io.synthetic import random_state
from solver.subproblems import cuts as C
from solver.subproblems.cache import SlotCache
from solver.subproblems.dp_kernel import maxend_need


def _answers(state, devices, min_share, backend):
    sc = SlotCache(state, dp_backend=backend)
    ga = sc.group_arrays(devices, min_share)
    return (C.min_bottleneck_cuts(state, devices, min_share, cache=sc),
            C.frontier_cuts(state, devices, 4, min_share, cache=sc),
            C.balanced_cuts(state, devices, min_share, cache=sc),
            None if ga is None else C._alpha_frontier(ga))


@pytest.mark.parametrize("seed", range(12))
def test_compiled_and_numpy_dps_agree(seed):
    rng = np.random.default_rng(7_000 + seed)
    n = int(rng.integers(2, 7))
    state = random_state(7_000 + seed, n=n, L=int(rng.integers(n, 40)), scale=float(rng.choice([1.0, 10.0, 30.0])))
    av = list(state.available_indices)
    for k in range(1, min(len(av), 4) + 1):
        devices = tuple(int(x) for x in rng.permutation(av)[:k])
        for min_share in (None, 3 * state.workload.micro_batch):
            assert _answers(state, devices, min_share, "compiled") == _answers(state, devices, min_share, "numpy")


@pytest.mark.parametrize("seed", range(6))
def test_maxend_gives_the_numpy_memory_masks(seed):
    state = random_state(7_100 + seed, n=5, L=30, scale=30.0)
    sc = SlotCache(state)
    ga = sc.group_arrays((0, 1, 2, 3), 2 * state.workload.micro_batch)
    me = maxend_need(ga.need, ga.mem)
    L = ga.L
    a, c = np.meshgrid(np.arange(L + 1), np.arange(L + 1), indexing="ij")
    for j in range(4):
        mask = (ga.need <= ga.mem[j]) & (c > a)          # stage a..c-1 non-empty and fits
        assert np.array_equal(mask, (c > a) & (c <= me[j][:, None]))
    assert np.any(me < L), "memory should bind somewhere at scale 30"


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="dp_backend: expected one of"):
        SlotCache(random_state(0, n=2, L=4), dp_backend="fortran")
