"""Batch-share subproblem: closed forms, exact integer shares, HiGHS/Pyomo agreement."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

from solver.model import NO_CAP
from solver.subproblems.shares import ShareLP, greedy_shares, solve_shares
from solver.subproblems.water import water_fill

REL = 1e-9


@st.composite
def instances(draw, max_m: int = 6, max_n: int = 40, caps: bool = True, costs: bool = True):
    """(alpha, beta, cap, B, u, W, q) with a feasible integer problem."""
    m = draw(st.integers(1, max_m))
    u = draw(st.sampled_from([1, 2, 4]))
    N = draw(st.integers(m, max_n))
    fl = lambda lo, hi: st.floats(lo, hi, allow_nan=False)    # noqa: E731
    alpha = np.array(draw(st.lists(fl(1e-3, 1.0), min_size=m, max_size=m)))
    beta = np.array(draw(st.lists(fl(0.0, 2.0), min_size=m, max_size=m)))
    capn = np.array(draw(st.lists(st.one_of(st.just(NO_CAP // u), st.integers(1, N)), min_size=m, max_size=m))
                    if caps else [NO_CAP // u] * m, dtype=np.int64)
    assume(np.minimum(capn, N).sum() >= N)
    W = draw(st.sampled_from([0.0, 1.0, 10.0])) if costs else draw(st.sampled_from([0.0, 1.0]))
    q = np.array(draw(st.lists(st.sampled_from([0.0, 0.001, 0.01, 0.1]), min_size=m, max_size=m))) \
        if costs else np.zeros(m)
    return alpha, beta, capn * u, N * u, u, W, q


def brute_force(alpha, beta, cap, B, u, W, q):
    """(best value, smallest z among optima) over every integer split (micro-batch units)."""
    m, N = len(alpha), B // u
    best = (np.inf, np.inf)
    for head in itertools.product(range(1, N + 1), repeat=m - 1):
        n = np.array(head + (N - sum(head),))
        if n[-1] < 1 or np.any(n * u > cap):
            continue
        b = n * u
        z = float(np.max(alpha * b + beta))
        v = W * z + float(q @ b)
        if v < best[0] - 1e-12 * max(1, abs(v)) or (abs(v - best[0]) <= 1e-12 * max(1, abs(v)) and z < best[1]):
            best = (min(v, best[0]), z)
    return best


def check_plan(r, cap, B, u):
    b = np.array(r.shares)
    assert r.status == "optimal", r.message
    assert b.sum() == B and np.all(b % u == 0) and np.all(b >= u) and np.all(b <= cap)


@given(instances())
def test_plan_valid_and_above_lp(inst):
    alpha, beta, cap, B, u, W, q = inst
    r = solve_shares(*inst)
    check_plan(r, cap, B, u)
    assert r.z == pytest.approx(float(np.max(alpha * np.array(r.shares) + beta)), rel=REL)
    assert r.value == pytest.approx(W * r.z + q @ np.array(r.shares), rel=REL)
    assert r.value >= r.lp_value - 1e-7 * max(1.0, abs(r.value))


@given(instances(max_m=3, max_n=12, costs=False))
def test_greedy_matches_brute_force(inst):
    alpha, beta, cap, B, u, W, q = inst
    r = solve_shares(*inst)
    v, z = brute_force(*inst)
    assert r.z == pytest.approx(z, rel=REL)
    assert r.value == pytest.approx(v, rel=REL, abs=1e-12)
    # the literal one-at-a-time hand-out from one micro-batch each reaches the same max time
    g = greedy_shares(alpha, beta, cap, B, u)
    assert float(np.max(alpha * g + beta)) == pytest.approx(z, rel=REL)


@given(instances(max_m=3, max_n=12))
def test_exact_with_costs_matches_brute_force(inst):
    r = solve_shares(*inst)
    v, z = brute_force(*inst)
    assert r.value == pytest.approx(v, rel=REL, abs=1e-12)
    assert r.z == pytest.approx(z, rel=REL)     # ties go to the smaller batch time


@given(instances(max_m=8, max_n=200, costs=False))
def test_greedy_within_one_micro_batch_of_lp(inst):
    alpha, beta, cap, B, u, W, q = inst
    r = solve_shares(alpha, beta, cap, B, u, 1.0, q)
    lp = ShareLP().solve(alpha, beta, cap, B, u, 1.0, q)
    assert lp.status == "optimal"
    assert r.lp_value == pytest.approx(lp.z, rel=1e-7, abs=1e-9)   # closed form = HiGHS
    assert lp.z - 1e-9 <= r.z <= lp.z + u * alpha.max() + 1e-9


@given(st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_water_fill_equals_lp_without_caps(m, seed):
    rng = np.random.default_rng(seed)
    alpha, beta, B = rng.uniform(0.01, 0.1, m), rng.uniform(0.0, 0.5, m), 512
    b, z = water_fill(alpha, beta, B)
    assert b.sum() == pytest.approx(B) and np.all(b >= 0)
    active = b > 0
    assert np.allclose(alpha[active] * b[active] + beta[active], z) and np.all(beta[~active] >= z - 1e-12)
    if b.min() >= 1.0:   # the LP's lower bound u = 1 does not bind: same optimum
        lp = ShareLP().solve(alpha, beta, np.full(m, NO_CAP), B, 1, 1.0, np.zeros(m))
        assert lp.z == pytest.approx(z, rel=1e-7)


def test_water_fill_drops_slow_start_groups():
    b, z = water_fill([1.0, 1.0], [0.0, 10.0], 4.0)
    assert z == pytest.approx(4.0) and b[1] == 0.0


@pytest.mark.parametrize("args, why", [
    (([0.1, 0.1], [0, 0], [4, 4], 12, 2), "sum of caps"),
    (([0.1, 0.1, 0.1], [0, 0], [NO_CAP] * 3, 4, 2), "lengths"),
    (([0.1, 0.1, 0.1], [0, 0, 0], [NO_CAP] * 3, 4, 2), "m*u"),
    (([0.1, 0.1], [0, 0], [0, NO_CAP], 8, 2), "cannot hold"),
    (([0.1, 0.1], [0, 0], [NO_CAP] * 2, 9, 2), "multiple"),
])
def test_infeasible_or_bad_input(args, why):
    alpha, beta, cap, B, u = args
    r = solve_shares(np.array(alpha), np.array(beta), cap, B, u, 1.0, np.full(len(alpha), 0.01))
    assert r.status in ("infeasible", "error") and why in r.message and r.shares == ()
    if why in ("sum of caps", "m*u", "cannot hold"):
        assert r.status == "infeasible"


def test_zero_weights_break_ties_by_batch_time():
    alpha, beta = np.array([0.01, 0.03, 0.02]), np.array([0.2, 0.0, 0.1])
    r = solve_shares(alpha, beta, [NO_CAP] * 3, 48, 4, 0.0, np.zeros(3))
    assert r.value == 0.0 and r.z == pytest.approx(brute_force(alpha, beta, [NO_CAP] * 3, 48, 4, 1.0, np.zeros(3))[1])


def random_instance(rng, m, u=2):
    N = int(rng.integers(m, 8 * m + 20))
    cap = np.where(rng.random(m) < 0.3, rng.integers(1, N + 1, m) * u, NO_CAP)
    if np.minimum(cap // u, N).sum() < N:
        cap[:] = NO_CAP
    return (rng.uniform(1e-3, 0.2, m), rng.uniform(0.0, 1.0, m), cap, N * u, u,
            float(rng.choice([0.0, 1.0, 5.0])), rng.choice([0.0, 0.002, 0.05], m))


def test_pyomo_and_highspy_lp_agree():
    from solver.subproblems.shares_pyomo import solve_shares_lp_pyomo
    rng = np.random.default_rng(7)
    lp = ShareLP()
    for _ in range(12):
        inst = random_instance(rng, int(rng.integers(1, 7)))
        a, p = lp.solve(*inst), solve_shares_lp_pyomo(*inst)
        assert a.status == p.status == "optimal"
        assert a.value == pytest.approx(p.value, rel=1e-6, abs=1e-9)


def test_persistent_model_matches_fresh_after_many_calls():
    rng = np.random.default_rng(11)
    persistent, fresh = ShareLP(max_models=3), ShareLP(persistent=False)
    for _ in range(150):
        inst = random_instance(rng, int(rng.choice([1, 2, 3, 5, 8, 13])))
        a, f = persistent.solve(*inst), fresh.solve(*inst)
        assert a.status == f.status == "optimal"
        assert a.value == pytest.approx(f.value, rel=1e-9, abs=1e-12)
        r = solve_shares(*inst, lp=persistent)
        assert r.lp_value == pytest.approx(f.value, rel=1e-7, abs=1e-9) and r.value >= f.value - 1e-9


def test_large_instance_is_exact_and_fast_enough():
    rng = np.random.default_rng(3)
    m, u, N = 64, 1, 2048
    alpha, beta = rng.uniform(1e-3, 2e-2, m), rng.uniform(0.0, 0.5, m)
    q = rng.uniform(0.0, 1e-3, m)
    r = solve_shares(alpha, beta, [NO_CAP] * m, N * u, u, 1.0, q)
    check_plan(r, NO_CAP, N * u, u)
    assert r.lp_value <= r.value <= r.lp_value + u * alpha.max() + q.max() * m * u


def _every_breakpoint(a, c, capn, N, W, cost, n0):
    """Reference for shares_kernel.exact_with_costs: every z = a_g n + c_g from the min-max
    z0 up, each row's cheapest allocation under z (greedy by cost), no early stop; the first
    row within a relative 1e-12 of the least value."""
    m = len(a)
    z0 = float(np.max(a * n0 + c))
    zs = sorted({z0} | {float(a[g] * n + c[g]) for g in range(m) for n in range(1, int(capn[g]) + 1)
                        if a[g] * n + c[g] > z0})
    rows = []
    for z in zs:
        hi = np.minimum(np.floor(np.minimum((z - c) / a, capn) + 1e-9), capn)
        if (hi < 1 - 1e-9).any() or hi.sum() < N - 1e-9:
            rows.append((np.inf, None))
            continue
        n, left = np.ones(m, dtype=np.int64), N - m
        for g in np.argsort(cost, kind="stable"):
            give = int(min(left, hi[g] - 1))
            n[g] += give
            left -= give
        rows.append((W * z + float(cost @ n), n))
    best = min(v for v, _ in rows)
    return next(n for v, n in rows if v <= best + 1e-12 * max(1.0, abs(best)))


def test_breakpoint_search_equals_every_breakpoint():
    """The compiled search stops once W z + the least cost exceeds the best value: the same
    allocation as evaluating every breakpoint, on instances up to 8 groups and 200 micro-batches."""
    from solver.subproblems.shares_kernel import exact_with_costs, hand_out
    rng = np.random.default_rng(5)
    for _ in range(60):
        alpha, beta, cap, B, u, W, q = random_instance(rng, int(rng.integers(2, 9)))
        N = B // u
        capn = np.minimum(np.asarray(cap, dtype=np.int64) // u, N)
        n0 = np.ones(len(alpha), dtype=np.int64)
        hand_out(alpha * u, beta, capn, N, n0)
        got = exact_with_costs(alpha * u, beta, capn, N, W, q * u, n0)
        assert list(got) == list(_every_breakpoint(alpha * u, beta, capn, N, W, q * u, n0))


def test_every_group_at_its_cap():
    r = solve_shares(np.array([0.0106, 0.02]), np.array([1.2, 0.3]), [8, 4], 12, 2, 1.0, np.array([0.07, 0.0]))
    assert r.shares == (8, 4) and np.isfinite(r.lp_value) and r.lp_value == pytest.approx(r.value)
    r = solve_shares(np.array([0.0106]), np.array([1.2]), [8], 8, 2, 20.0, np.array([0.07]))
    assert r.shares == (8,) and r.lp_value == pytest.approx(r.value)


@pytest.mark.parametrize("cap, q", [(64, 0.0), (NO_CAP, 0.3), (80, 1.5)])
def test_one_group_gets_the_whole_batch_without_an_lp(cap, q):
    r = solve_shares([0.01], [0.2], [cap], 64, 4, 2.0, [q], lp=None)
    assert r.status == "optimal" and r.shares == (64,)
    assert r.z == pytest.approx(0.01 * 64 + 0.2)
    assert r.value == pytest.approx(2.0 * r.z + q * 64) and r.lp_value == r.value


def test_one_group_that_cannot_hold_the_batch_is_infeasible():
    r = solve_shares([0.01], [0.2], [60], 64, 4, 1.0, [0.0])
    assert r.status == "infeasible" and "sum of caps" in r.message


def test_highs_prints_no_banner():
    """The share LP's HiGHS instance is made silently: nothing reaches the user's stdout."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "from solver.subproblems.highs import quiet_highs; "
                          "h = quiet_highs(); print('done')"], capture_output=True, text=True, check=True)
    assert out.stdout == "done\n"


def _water_fill_numpy(alpha, beta, B, lo=0.0, cap=None):
    """water_fill's vectorised numpy form (the reference of its compiled one)."""
    a, c = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    m = len(a)
    lo = np.asarray(lo, dtype=float) if np.ndim(lo) else lo
    lo_sum = m * lo if np.ndim(lo) == 0 else float(lo.sum())
    hi = np.full(m, np.inf) if cap is None else np.minimum(np.asarray(cap, dtype=float), B)
    pts = np.unique(np.concatenate([a * lo + c, (a * hi + c)[np.isfinite(hi)]]))
    gp = np.clip((pts[:, None] - c) / a, lo, hi).sum(axis=1)
    k = int(np.searchsorted(gp, B * (1 - 1e-15)))
    if k == 0:
        z = float(pts[0])
    elif k < len(pts):
        z0, z1, g0, g1 = pts[k - 1], pts[k], gp[k - 1], gp[k]
        z = float(z0 + (B - g0) * (z1 - z0) / (g1 - g0))
    elif np.all(np.isfinite(hi)):
        z = float(pts[-1])
    else:
        z = float(pts[-1] + (B - gp[-1]) / np.sum(1.0 / a[~np.isfinite(hi)]))
    if np.any(lo > 0):
        z = max(z, float(np.max(a * lo + c)))
    b = np.clip((z - c) / a, lo, hi)
    room = b - lo
    if room.sum() > 0:
        b = lo + room * ((B - lo_sum) / room.sum())
    return b, z


@given(st.integers(0, 2**31 - 1), st.integers(1, 300), st.sampled_from(["none", "scalar", "caps", "per-group"]))
def test_water_fill_gives_the_numbers_of_its_numpy_form(seed, m, kind):
    """The compiled water fill adds and divides as numpy's vectorised form does: the same
    floats, not only close ones (the search's answers depend on exact ties)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(1e-4, 1e-2, m) * 10.0 ** rng.integers(-2, 2, m)
    c = rng.uniform(0, 0.05, m) * (rng.random(m) < 0.8)
    lo, cap = {"none": (0.0, None), "scalar": (2.0, None),
               "caps": (1.0, np.where(rng.random(m) < 0.5, rng.integers(1, 64, m) * 4.0, np.inf)),
               "per-group": (rng.choice([1.0, 2.0, 4.0], m), rng.integers(1, 80, m) * 4.0)}[kind]
    lo_sum = float(np.sum(lo)) if np.ndim(lo) else m * lo
    B = float(rng.integers(max(1, int(np.ceil(lo_sum / 4))), 4 * m + 64) * 4)
    hi = np.full(m, np.inf) if cap is None else np.minimum(cap, B)
    if lo_sum > B or hi.sum() < B or np.any(hi < lo):
        with pytest.raises(ValueError, match="infeasible"):
            water_fill(a, c, B, lo=lo, cap=cap)
        return
    b, z = water_fill(a, c, B, lo=lo, cap=cap)
    rb, rz = _water_fill_numpy(a, c, B, lo=lo, cap=cap)
    assert z == rz and np.array_equal(b, rb)


@given(st.integers(0, 2**31 - 1), st.integers(0, 3000))
def test_compiled_sum_adds_as_numpy(seed, n):
    """cost.pipeline.npsum (the water fill's sums) is numpy's sum, float for float."""
    from solver.cost.pipeline import npsum
    x = np.random.default_rng(seed).uniform(-1, 1, n) * 10.0 ** np.random.default_rng(seed + 1).integers(-6, 6, n)
    assert npsum(x) == float(x.sum())


@given(st.integers(0, 2**31 - 1))
def test_min_cost_tables_follow_their_recurrence(seed):
    """Each row of the mixed-size DP is its docstring's recurrence, evaluated plainly over every
    window start (new[r + u j] = cost j + min over i = j-H .. j-1 of prev[r + u i] - cost i):
    the same floats, for ten random problems per example."""
    from solver.subproblems.shares import _min_cost_tables
    rng = np.random.default_rng(seed)
    for _ in range(10):
        m = int(rng.integers(1, 5))
        us = rng.choice([1, 2, 4], m)
        B = int(np.lcm.reduce(us)) * int(rng.integers(1, 12))
        H = rng.integers(1, B // int(us.min()) + 2, m)
        cost = rng.choice([0.0, 0.01, 1.0], m) * rng.uniform(0.5, 2.0, m)
        got = _min_cost_tables(H, us, cost, B)
        prev = np.full(B + 1, np.inf)
        prev[0] = 0.0
        for g in range(m):
            u, h, k = int(us[g]), int(H[g]), float(cost[g])
            new = np.full(B + 1, np.inf)
            for s in range(B + 1):
                r, j = s % u, s // u
                vals = [prev[r + u * i] - k * float(i) for i in range(max(j - h, 0), j)]
                new[s] = (min(vals) if vals else np.inf) + k * float(j)
            assert np.array_equal(got[g], new)
            prev = new
