"""The plain-state fast paths (no network model, no TP) give the general paths' numbers float for
float: group coefficients, the sync time, the cut DPs' group arrays and the pairwise float sum;
and the cut DP under a 1F1B or recomputation variant's own per-stage peaks is exact (brute force
over every cut set on short models)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from solver.cost import pipeline as P
from solver.cost import sync as S
from solver.io.synthetic import random_state
from solver.model.memory import share_cap
from solver.subproblems.cache import SlotCache
from solver.subproblems.cuts import min_bottleneck_cuts


def _cuts(rng, L: int, k: int) -> tuple[int, ...]:
    return tuple(sorted(int(x) for x in rng.choice(np.arange(1, L), k - 1, replace=False))) + (L,)


def _groups(rng, n: int, L: int, count: int):
    """`count` random ordered groups of n devices over L layers: (devices, cuts)."""
    for _ in range(count):
        k = int(rng.integers(1, min(n, L) + 1))
        yield tuple(int(x) for x in rng.choice(n, k, replace=False)), _cuts(rng, L, k)


@pytest.mark.parametrize("seed", range(8))
def test_plain_group_coeffs_equal_the_general_path(seed):
    rng = np.random.default_rng(9_000 + seed)
    n, L = int(rng.integers(2, 14)), int(rng.integers(2, 50))
    state = random_state(9_000 + seed, n=n, L=L, scale=float(rng.choice([1.0, 10.0, 30.0])))
    for d, c in _groups(rng, n, L, 30):
        for schedule, recompute in itertools.product(("gpipe", "1f1b"), (False, True)):
            _assert_numpy_forms(P._plain_group_coeffs(state, d, c, schedule, recompute), state, d, c)


def _assert_numpy_forms(gc, state, d, c) -> None:
    """gc has the numbers of schedule_coeffs, share_cap and the busy energy in numpy."""
    assert gc is not None
    F, G, lam = P.stage_times(state, d, c)
    alpha, beta = P.schedule_coeffs(F, G, lam, state.workload.micro_batch, gc.schedule, gc.recompute)
    busy = state.extra_power_w[list(d)] * (F + G + F if gc.recompute else F + G)
    assert (gc.alpha, gc.beta, gc.cap) == (alpha, beta, share_cap(state, d, c, gc.schedule, gc.recompute))
    for got, want in ((gc.fwd, F), (gc.bwd, G), (gc.lam, lam), (gc.busy_j_per_sample, busy)):
        assert np.array_equal(got, want)
    assert gc.busy_j == float(busy.sum())


@pytest.mark.parametrize("matrix", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_network_group_coeffs_equal_the_numpy_forms(seed, matrix, monkeypatch):
    """With a network model (servers sharing NICs, bandwidth fits) group_coeffs' compiled
    schedule numbers equal schedule_coeffs, share_cap and the busy energy in numpy; the
    boundary times equal effective_bandwidth's, from the per-state fit matrices or (matrix
    False: as above MATRIX_DEVICES devices) fitted per call."""
    if not matrix:
        monkeypatch.setattr(P, "MATRIX_DEVICES", 0)
    from dataclasses import replace

    from solver.model.network import Network, effective_bandwidth
    rng = np.random.default_rng(9_060 + seed)
    n, L = int(rng.integers(2, 14)), int(rng.integers(2, 50))
    state = random_state(9_060 + seed, n=n, L=L, scale=float(rng.choice([1.0, 10.0, 30.0])))
    S_ = int(rng.integers(1, 4))
    fit = None if seed % 2 else rng.normal(size=(n, n, 3))
    if fit is not None:
        fit[rng.random((n, n)) < 0.3] = np.nan      # pairs without a fit run at their cap
    state = replace(state, network=Network(server=rng.integers(0, S_, n), server_names=tuple(f"s{i}" for i in range(S_)),
                                           nic=rng.choice([np.inf, 1e9, 6e9], S_), fit=fit))
    u = state.workload.micro_batch
    for d, c in _groups(rng, n, L, 20):
        for schedule, recompute in itertools.product(("gpipe", "1f1b"), (False, True)):
            _assert_numpy_forms(P.group_coeffs(state, d, c, schedule, recompute), state, d, c)
        if len(d) > 1:       # the boundaries' memoised fitted bandwidths give effective_bandwidth's floats
            o = state.workload.out_bytes[np.asarray(c[:-1]) - 1]
            src, dst = np.asarray(d[:-1]), np.asarray(d[1:])
            bw = effective_bandwidth(state.network, state.bandwidth, src, dst, o * u)
            assert np.array_equal(P.stage_times(state, d, c)[2], o / bw + state.latency[src, dst] / u)


def test_plain_group_coeffs_leave_bad_indices_to_the_general_path():
    state = random_state(9_050, n=4, L=8)
    assert P._plain_group_coeffs(state, (0, 9), (4, 8), "gpipe", False) is None
    with pytest.raises(IndexError):
        P.group_coeffs(state, (0, 9), (4, 8))


@pytest.mark.parametrize("seed", range(6))
def test_plain_sync_time_equals_buckets_and_rings(seed):
    rng = np.random.default_rng(9_100 + seed)
    n, L = int(rng.integers(2, 24)), int(rng.integers(2, 40))
    state = random_state(9_100 + seed, n=n, L=L)
    for _ in range(40):
        perm = [int(x) for x in rng.permutation(n)]
        m = int(rng.integers(1, min(n, 10) + 1))
        structure, pos = [], 0
        for g in range(m):
            k = max(1, min(L, (n - pos) // (m - g)))
            d = tuple(perm[pos:pos + int(rng.integers(1, k + 1))])
            pos += len(d)
            structure.append((d, _cuts(rng, L, len(d))))
        rings = S.buckets(state, structure)
        want = 0.0 if rings is None else S._ring_time(state, *rings)
        assert S._plain_sync_time(state, structure) == want
        assert S.sync_time(state, structure) == want


@pytest.mark.parametrize("seed", range(4))
def test_plain_group_arrays_equal_their_definition(seed):
    rng = np.random.default_rng(9_200 + seed)
    n, L = int(rng.integers(2, 12)), int(rng.integers(2, 60))
    state = random_state(9_200 + seed, n=n, L=L)
    wl, sc = state.workload, SlotCache(state)
    for _ in range(20):
        k = int(rng.integers(1, min(n, L) + 1))
        d = np.array(rng.choice(n, k, replace=False))
        ga = sc.group_arrays(tuple(int(x) for x in d))
        lam = np.full((k - 1, L + 1), np.inf)
        if k > 1:
            lam[:, 1:L] = wl.out_bytes[None, :L - 1] / state.bandwidth[d[:-1], d[1:]][:, None] \
                + (state.latency[d[:-1], d[1:]] / wl.micro_batch)[:, None]
        assert np.array_equal(ga.Fp, state.fwd_prefix[d]) and np.array_equal(ga.Gp, state.bwd_prefix[d])
        assert np.array_equal(ga.lam, lam)
        assert np.array_equal(ga.mem, np.array([state.devices[i].memory_bytes for i in d], dtype=float))


def test_float_sum_is_numpys_sum():
    rng = np.random.default_rng(9_300)
    for n in list(range(0, 40)) + [127, 128, 129, 300]:
        for _ in range(50):
            x = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
            assert P.float_sum(x.tolist()) == float(x.sum())


def _gpipe_alpha(state, d, c, recompute):
    F, G, lam = P.stage_times(state, d, c)
    return P.gpipe_coeffs(F, G + F if recompute else G, lam, state.workload.micro_batch)[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("schedule,recompute", [("1f1b", False), ("gpipe", True), ("1f1b", True)])
def test_variant_cuts_are_the_best_cut_set_within_that_variants_memory(seed, schedule, recompute):
    """Every cut set the variant's DP returns holds the share under that variant, and no cut set
    that holds it (with a margin above the DP's 1e-9 u slack) has a smaller alpha."""
    rng = np.random.default_rng(9_400 + seed)
    L = int(rng.integers(4, 10))
    state = random_state(9_400 + seed, n=4, L=L, scale=float(rng.choice([10.0, 30.0])))
    u, B = state.workload.micro_batch, state.workload.batch
    for k in (2, 3):
        d = tuple(int(x) for x in rng.permutation(state.n)[:k])
        for share in (u, B // 2, B):
            got = min_bottleneck_cuts(state, d, share, schedule=schedule, recompute=recompute)
            fitting = [c + (L,) for c in itertools.combinations(range(1, L), k - 1)
                       if share_cap(state, d, c + (L,), schedule, recompute) >= share]
            if got is None:
                assert not fitting
                continue
            assert share_cap(state, d, got, schedule, recompute) >= share - u   # the DP's slack is 1e-9 u H
            if fitting:
                best = min(_gpipe_alpha(state, d, c, recompute) for c in fitting)
                assert _gpipe_alpha(state, d, got, recompute) <= best * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_plain_cost_weights_equal_cost_coeffs(seed):
    """Scorer's W and q without cost_coeffs (money and one energy budget, no egress) are the
    numbers of W = V + Q R and q = Q e from cost.costs.cost_coeffs, float for float."""
    from solver.cost.costs import cost_coeffs
    from solver.solve.options import SolveOptions
    from solver.solve.scoring import Scorer
    rng = np.random.default_rng(9_500 + seed)
    n, L = int(rng.integers(2, 14)), int(rng.integers(2, 50))
    state = random_state(9_500 + seed, n=n, L=L, scale=float(rng.choice([1.0, 10.0, 30.0])))
    assert sorted(b.kind for b in state.budgets) == ["energy", "money"]
    Q = rng.uniform(0.0, 3.0, len(state.budgets)) * 10.0 ** rng.integers(-6, 3, len(state.budgets))
    sc = Scorer(state, Q, float(rng.uniform(0.1, 10.0)), SolveOptions(), None)
    assert sc._energy_weight is not None
    for _ in range(40):
        groups = list(_groups(rng, n, L, int(rng.integers(1, 4))))
        gcs = [sc.coeffs(d, c) for d, c in groups]
        W, q = sc._plain_weights(tuple(groups), gcs)
        cc = cost_coeffs(state, gcs)
        assert W == sc.V + float(Q @ cc.R)
        assert q == (Q @ cc.e).tolist()
