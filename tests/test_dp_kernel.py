"""The compiled cut DP against brute force over every cut set (small L)."""
from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, strategies as st

from solver.subproblems.dp_kernel import cut_dp, maxend_prefix

INF = float("inf")


def _brute(S, lam, B, pp, sp, kopt, live, mem, minsum, lim=None):
    """The best value over every cut set, and one cut set that attains it (by enumeration)."""
    k, L1 = S.shape
    L = L1 - 1
    best, arg = INF, None
    for inner in itertools.combinations(range(1, L), k - 1):
        cuts = (*inner, L)
        starts = (0, *inner)
        vals, ok = [], True
        for j, (a, c) in enumerate(zip(starts, cuts)):
            if kopt * (pp[c] - pp[a]) + live[j] * (sp[c] - sp[a]) > mem[j]:
                ok = False
                break
            v = S[j, c] - S[j, a]
            if lim is not None and not v <= lim:
                ok = False
                break
            vals.append(v)
            if j < k - 1:
                if not np.isfinite(lam[j, c]):
                    ok = False
                    break
                vals.append(B[j, c])
        if not ok:
            continue
        tot = sum(vals) if minsum else max(vals)
        if tot < best:
            best, arg = tot, cuts
    return best, arg


@st.composite
def problems(draw):
    k = draw(st.integers(1, 4))
    L = draw(st.integers(k, 9))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    f = rng.uniform(0.1, 2.0, size=(k, L))
    S = np.concatenate([np.zeros((k, 1)), np.cumsum(f, axis=1)], axis=1)
    lam = np.full((k - 1, L + 1), INF)
    lam[:, 1:L] = rng.uniform(0.0, 3.0, size=(k - 1, L - 1))
    p = rng.uniform(0.0, 1.0, size=L)
    h = rng.uniform(0.0, 1.0, size=L)
    pp = np.concatenate([[0.0], np.cumsum(p)])
    sp = np.concatenate([[0.0], np.cumsum(h)])
    live = rng.integers(1, 4, size=k).astype(float)
    mem = rng.uniform(0.3, 1.2, size=k) * (4 * pp[-1] + live.max() * sp[-1]) / max(k - 0.5, 1)
    return S, lam, pp, sp, 4.0, live, mem, draw(st.booleans())


@given(problems())
def test_cut_dp_equals_brute_force(prob) -> None:
    S, lam, pp, sp, kopt, live, mem, minsum = prob
    k = S.shape[0]
    me = maxend_prefix(pp, sp, kopt, live, mem)
    none3, none2 = np.zeros((0, k, S.shape[1])), np.zeros((0, k - 1, S.shape[1]))
    val, cuts = cut_dp(S, lam, lam, me, none3, none2, np.zeros(0), np.zeros(0, dtype=np.bool_), minsum)
    bval, bcuts = _brute(S, lam, lam, pp, sp, kopt, live, mem, minsum)
    if bcuts is None:
        assert val == INF and list(cuts) == [-1] * k
        return
    assert np.isclose(val, bval, rtol=1e-12, atol=0.0)
    starts = (0, *cuts[:-1])
    recomputed = [S[j, c] - S[j, a] for j, (a, c) in enumerate(zip(starts, cuts))] + \
                 [lam[j, c] for j, c in enumerate(cuts[:-1])]
    assert np.isclose(sum(recomputed) if minsum else max(recomputed), val, rtol=1e-12)
    assert cuts[-1] == S.shape[1] - 1 and all(a < c for a, c in zip(starts, cuts))


@given(problems(), st.floats(0.5, 4.0))
def test_side_constraint_is_respected(prob, lim) -> None:
    S, lam, pp, sp, kopt, live, mem, _ = prob
    k, L1 = S.shape
    me = maxend_prefix(pp, sp, kopt, live, mem)
    CS = S[None].copy()
    CB = np.zeros((1, k - 1, L1))
    val, cuts = cut_dp(S, lam, lam, me, CS, CB, np.array([lim]), np.array([False]), True)
    bval, _ = _brute(S, lam, lam, pp, sp, kopt, live, mem, True, lim=lim)
    assert (val == INF) == (bval == INF)
    if val < INF:
        assert np.isclose(val, bval, rtol=1e-12)


def test_maxend_is_the_last_fitting_end() -> None:
    pp = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    sp = np.zeros(5)
    me = maxend_prefix(pp, sp, 1.0, np.array([1.0]), np.array([2.0]))
    assert list(me[0]) == [2, 3, 4, 4, 4]


def _reference(S, B, me, CS, lims, strict, minsum):
    """The module docstring's recurrence, plainly: every start of every stage, ties to the
    smallest start (the rule the kernel's cuts follow)."""
    k, L1 = S.shape
    L = L1 - 1

    def fits(j, a, c):
        if c > me[j, a]:
            return False
        return all((CS[m, j, c] - CS[m, j, a] < lims[m]) if strict[m] else (CS[m, j, c] - CS[m, j, a] <= lims[m])
                   for m in range(CS.shape[0]))

    comb = (lambda x, y: x + y) if minsum else max
    D = np.full((k, L1), INF)
    arg = np.full((k, L1), -1)
    for c in range(1, L1):
        if fits(0, 0, c):
            D[0, c] = S[0, c] - S[0, 0]
    for j in range(1, k):
        for c in range(j + 1, L1):
            for a in range(j, c):
                if D[j - 1, a] == INF or not fits(j, a, c):
                    continue
                v = comb(comb(D[j - 1, a], B[j - 1, a]), S[j, c] - S[j, a])
                if v < D[j, c]:
                    D[j, c], arg[j, c] = v, a
    if D[k - 1, L] == INF:
        return INF, [-1] * k
    cuts, c = [], L
    for j in range(k - 1, -1, -1):
        cuts.append(c)
        c = arg[j, c]
    return D[k - 1, L], cuts[::-1]


def _tie_problem(rng, k_min: int):
    """A cut DP of k_min..6 stages over up to 15 layers with integer costs (ties are common),
    a memory rule, and none, one or two side constraints on non-decreasing rows:
    (S, lam, maxend, CS, CB, lims, strict)."""
    k = int(rng.integers(k_min, 7))
    L = int(rng.integers(k, 16))
    side = int(rng.integers(0, 3))
    S = np.concatenate([np.zeros((k, 1)), np.cumsum(rng.integers(0, 3, size=(k, L)), axis=1)], axis=1).astype(float)
    lam = np.full((k - 1, L + 1), INF)
    lam[:, 1:L] = rng.integers(0, 4, size=(k - 1, L - 1))
    pp = np.concatenate([[0.0], np.cumsum(rng.integers(0, 3, size=L))]).astype(float)
    me = maxend_prefix(pp, np.zeros(L + 1), 1.0, np.ones(k), np.full(k, float(rng.integers(2, 2 * L + 2)) / k))
    rows = [S, np.concatenate([np.zeros((k, 1)), np.cumsum(rng.integers(0, 3, size=(k, L)), axis=1)], axis=1)]
    CS = np.stack(rows[:side]).astype(float) if side else np.zeros((0, k, L + 1))
    lims = np.array([float(rng.integers(2, 3 * L)) for _ in range(side)])
    strict = np.array([bool(rng.integers(0, 2)) for _ in range(side)], dtype=np.bool_)
    return S, lam, me, CS, np.zeros((side, k - 1, L + 1)), lims, strict


@given(st.integers(0, 2**31))
def test_cuts_follow_the_smallest_start_on_ties(seed) -> None:
    """Integer layer costs make ties common: the kernel (its windowed middle stages included)
    picks the same cut set as the plain recurrence, not only the same value, with none, one or
    two side constraints (25 problems per
    example: ties in a middle stage are what this checks, and one problem rarely has them)."""
    rng = np.random.default_rng(seed)
    for _ in range(25):
        minsum = bool(rng.integers(0, 2))
        S, lam, me, CS, CB, lims, strict = _tie_problem(rng, 2)
        val, cuts = cut_dp(S, lam, lam, me, CS, CB, lims, strict, minsum)
        rval, rcuts = _reference(S, lam, me, CS, lims, strict, minsum)
        assert val == rval
        assert list(cuts) == list(rcuts)


@given(st.integers(0, 2**31))
def test_cut_dp_within_a_known_value_gives_the_same_cuts(seed) -> None:
    """cut_dp_within(T) with T the value of any valid cut set (here: of random valid cut sets,
    and of the optimum itself) visits fewer ends but returns cut_dp's value and cut set, ties
    included (integer costs, 0-2 side constraints; 25 problems per example)."""
    from solver.subproblems.dp_kernel import _value_of, cut_dp_within
    rng = np.random.default_rng(seed)
    for _ in range(25):
        S, lam, me, CS, CB, lims, strict = _tie_problem(rng, 3)
        k, L, side = S.shape[0], S.shape[1] - 1, CS.shape[0]
        val, cuts = cut_dp(S, lam, lam, me, CS, CB, lims, strict, False)
        if val == INF:
            continue
        known = [np.asarray(cuts)]
        for _ in range(3):      # random valid cut sets: their values bound the optimum too
            inner = np.sort(rng.choice(np.arange(1, L), size=k - 1, replace=False))
            c = np.array([*inner, L], dtype=np.int64)
            starts = [0, *c[:-1]]
            ok = all(b <= me[j, a] for j, (a, b) in enumerate(zip(starts, c))) and all(
                np.isfinite(lam[j, x]) for j, x in enumerate(c[:-1])) and all(
                (CS[m, j, b] - CS[m, j, a] < lims[m]) if strict[m] else (CS[m, j, b] - CS[m, j, a] <= lims[m])
                for m in range(side) for j, (a, b) in enumerate(zip(starts, c)))
            if ok:
                known.append(c)
        for c in known:
            T = _value_of(S, lam, c)
            assert T >= val
            wval, wcuts = cut_dp_within(S, lam, lam, me, CS, CB, lims, strict, T)
            assert wval == val and list(wcuts) == list(cuts)
