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


def _through_group_arrays(sc, devices, min_share, schedule, recompute):
    """min_bottleneck_cuts by the general path: the group's arrays (need matrices) and frontier."""
    ga = sc.group_arrays(devices, min_share, schedule, recompute)
    if ga is None:
        return None
    pts = C._alpha_frontier(ga)
    return min(pts, key=lambda p: p[0] + p[1])[2] if pts else None


VARIANTS = (("gpipe", False), ("1f1b", False), ("gpipe", True), ("1f1b", True))
"""Every (schedule, recompute)."""


def _draw(seed: int, n_below: int, L_below: int):
    """(rng, a random slot of 2..n_below-1 devices and n..L_below-1 layers, two fresh caches of it)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, n_below))
    state = random_state(seed, n=n, L=int(rng.integers(n, L_below)), scale=float(rng.choice([1.0, 10.0, 30.0])))
    return rng, state, SlotCache(state), SlotCache(state)


def _orders(rng, state, k_max: int) -> list[tuple[int, ...]]:
    """One random order of k available devices for each k = 2..k_max that fits."""
    av = list(state.available_indices)
    return [tuple(int(x) for x in rng.permutation(av)[:k]) for k in range(2, min(len(av), k_max) + 1)]


@pytest.mark.parametrize("seed", range(10))
def test_fused_kernel_gives_the_group_arrays_cuts(seed):
    """dp_kernel.cut_candidates in min-alpha mode (maxend from the memory rule, no need matrices) against
    the need matrices' path, under every schedule and recomputation and several shares."""
    from solver.subproblems.dp_kernel import maxend_of, maxend_rule
    rng, state, fused, general = _draw(7_200 + seed, 7, 40)
    u = state.workload.micro_batch
    checked = 0
    for devices in _orders(rng, state, 5):
        for min_share in (None, 2 * u, 5 * u, state.workload.batch):
            for schedule, recompute in VARIANTS:
                args = fused.dp_rule(devices, min_share, schedule, recompute)
                assert args is not None
                ga = general.group_arrays(devices, min_share, schedule, recompute)
                if ga is not None:
                    me = maxend_rule(args[3], args[4], args[5], args[6], float(u), args[8], recompute, args[10])
                    assert np.array_equal(me, maxend_of(ga.need, ga.needs, ga.mem))
                got = C._min_bottleneck_cuts(fused, devices, min_share, schedule, recompute)
                assert got == _through_group_arrays(general, devices, min_share, schedule, recompute)
                checked += got is not None
    assert checked > 0


def test_fused_balanced_cuts_are_the_numpy_ones():
    """balanced_cuts in one compiled call (dp_kernel.BALANCED: the rows' mean, free boundaries)
    against the numpy backend's DP over the group arrays, for groups of up to 9 devices at the
    shares DAPPLE's 1F1B peaks and GPipe's whole batch ask for, on 8 random slots."""
    found = none = 0
    for seed in range(8):
        rng, state, _, _ = _draw(7_250 + seed, 12, 90)
        u, B = state.workload.micro_batch, state.workload.batch
        for devices in _orders(rng, state, 9):
            for min_share in (None, len(devices) * u, B):
                got = C.balanced_cuts(state, devices, min_share, cache=SlotCache(state))
                assert got == C.balanced_cuts(state, devices, min_share, cache=SlotCache(state, dp_backend="numpy"))
                found += got is not None
                none += got is None
    assert found > 0 and none > 0


@pytest.mark.parametrize("seed", range(6))
def test_fused_frontier_gives_the_group_arrays_frontier(seed):
    """frontier_cuts through dp_kernel.cut_candidates (one compiled call) against
    its need matrices' path (_frontier_cuts on the group arrays), under every schedule and
    recomputation, several shares, limits and seeds."""
    rng, state, fused, general = _draw(7_310 + seed, 8, 60)
    u = state.workload.micro_batch
    checked = 0
    for devices in _orders(rng, state, 6):
        for min_share in (None, 3 * u, state.workload.batch):
            for schedule, recompute in VARIANTS:
                for limit, seeds in ((4, 2), (6, 1)):
                    assert fused.dp_rule(devices, min_share, schedule, recompute) is not None
                    got = C.frontier_cuts(state, devices, limit, min_share, cache=fused, seeds=seeds,
                                          schedule=schedule, recompute=recompute)
                    ga = general.group_arrays(devices, min_share, schedule, recompute)
                    want = [] if ga is None else C._frontier_cuts(state, devices, limit, ga, C.RELAX, seeds)
                    assert got == want, (devices, min_share, schedule, recompute)
                    checked += bool(got)
    assert checked > 0


def _networked(seed: int, n: int, L: int):
    """A random slot whose devices of one kind sit two to a server (the last of a kind alone),
    with bandwidth fits on some pairs; returns it and its units (one per server)."""
    from dataclasses import replace

    from solver.model.network import Network
    from solver.model.units import unit_state
    rng = np.random.default_rng(seed)
    state = random_state(seed, n=n, L=L, scale=float(rng.choice([1.0, 10.0])))
    kinds: dict[str, list[int]] = {}
    for i, d in enumerate(state.devices):
        kinds.setdefault(d.kind, []).append(i)
    units = [tuple(v[j:j + 2]) for v in kinds.values() for j in range(0, len(v), 2)]
    server = np.zeros(n, dtype=int)
    for si, un in enumerate(units):
        server[list(un)] = si
    fit = np.full((n, n, 3), np.nan)
    some = rng.random((n, n)) < 0.6
    fit[some] = np.column_stack([rng.uniform(-0.05, 0.0, some.sum()), rng.uniform(0.0, 0.5, some.sum()),
                                 rng.uniform(0.5, 5.0, some.sum())])
    net = Network(server=server, server_names=tuple(f"s{i}" for i in range(len(units))),
                  nic=np.full(len(units), np.inf), fit=fit)
    state = replace(state, network=net)
    return state, unit_state(state, units)


@pytest.mark.parametrize("seed", range(4))
def test_fused_kernels_on_fitted_links_and_tp_units(seed):
    """dp_rule's one-call kernels against the group arrays' path on a slot with bandwidth fits
    and on its TP units (where every stage has one degree; groups of mixed degrees take the
    group arrays' path): the same min-bottleneck and frontier cuts under every schedule and
    recomputation."""
    state, units = _networked(7_400 + seed, n=8, L=30)
    rng = np.random.default_rng(seed)
    checked = 0
    for st in (state, units):
        u = st.workload.micro_batch
        fused, general = SlotCache(st), SlotCache(st)
        av = list(st.available_indices)
        pairs = [i for i in av if st.degree(i) == 2]
        draws = [(av, k) for k in range(2, min(len(av), 5) + 1)] + [(pairs, k) for k in range(2, len(pairs) + 1)]
        for pool, k in draws:
            devices = tuple(int(x) for x in rng.permutation(pool)[:k])
            for min_share in (None, 3 * u):
                for schedule, recompute in VARIANTS:
                    one_degree = len({st.degree(i) for i in devices}) == 1
                    assert (fused.dp_rule(devices, min_share, schedule, recompute) is not None) == one_degree
                    got = C._min_bottleneck_cuts(fused, devices, min_share, schedule, recompute)
                    assert got == _through_group_arrays(general, devices, min_share, schedule, recompute)
                    front = C.frontier_cuts(st, devices, 4, min_share, cache=fused, schedule=schedule,
                                            recompute=recompute)
                    ga = general.group_arrays(devices, min_share, schedule, recompute)
                    assert front == ([] if ga is None else C._frontier_cuts(st, devices, 4, ga, C.RELAX, 2))
                    checked += got is not None and one_degree and st.tp is not None
    assert checked > 0


@pytest.mark.parametrize("seed", range(4))
def test_compiled_gpipe_rows_are_alpha_beta(seed):
    """cost.pipeline.plain_gpipe_rows gives alpha_beta's floats for every cut set."""
    from solver.cost.pipeline import plain_gpipe_rows
    rng = np.random.default_rng(7_500 + seed)
    state = random_state(7_500 + seed, n=6, L=int(rng.integers(6, 70)))
    wl = state.workload
    for k in range(2, 7):
        d = tuple(int(x) for x in rng.permutation(6)[:k])
        cuts = [tuple(sorted(rng.choice(np.arange(1, wl.num_layers), k - 1, replace=False).tolist())) + (wl.num_layers,)
                for _ in range(5)]
        got = plain_gpipe_rows(state.fwd_prefix, state.bwd_prefix, wl.out_bytes, state.bandwidth, state.latency,
                               int(wl.micro_batch), np.asarray(d, dtype=np.int64), np.array(cuts, dtype=np.int64))
        assert got.tolist() == [list(C.alpha_beta(state, d, c)) for c in cuts]
