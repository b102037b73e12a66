"""Offline reference MILP: exact on hand-made candidate sets; on real instances, no worse than
the online controller at the same budget use, and its averaged budgets hold."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.io.synthetic import random_instance
from solver.model import Group, Plan
from solver.online import run_online, summarise
from solver.online.offline import (
    Candidate,
    calibrate_budgets,
    offline_reference,
    online_lower_bound,
    pareto_prune,
    plans_from_frame,
    solve_offline,
)

DUMMY = Plan((Group((0,), (1,), 4),))


def _brute(cands, limits):
    best = None
    for pick in itertools.product(*[range(len(c)) for c in cands]):
        ch = [cands[t][p] for t, p in enumerate(pick)]
        avgc = np.mean([c[2] for c in ch], axis=0)
        if np.all(avgc <= np.asarray(limits) * (1 + 1e-9)):
            v = float(np.mean([c[1] for c in ch]))
            best = v if best is None else min(best, v)
    return best


@settings(max_examples=25)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(1, 4), st.integers(1, 2))
def test_milp_matches_brute_force(seed, H, P, K):
    rng = np.random.default_rng(seed)
    cands = [[(DUMMY, float(rng.uniform(1, 5)), tuple(rng.uniform(0, 2, K))) for _ in range(P)]
             for _ in range(H)]
    limits = tuple(rng.uniform(0.3, 1.5, K))
    res = solve_offline(limits, cands)
    ref = _brute(cands, limits)
    if ref is None:
        assert res.status == "infeasible" and res.plans == (None,) * H
    else:
        assert res.status == "optimal"
        assert res.avg_batch_time == pytest.approx(ref, rel=1e-6)
        assert np.all(np.asarray(res.avg_costs) <= np.asarray(limits) * (1 + 1e-7))
        assert res.lp_bound <= res.avg_batch_time + 1e-9


def test_infeasible_and_empty_slots_are_reported():
    c = [[(DUMMY, 1.0, (5.0,))]]
    assert solve_offline((1.0,), c).status == "infeasible"
    r = solve_offline((1.0,), [[(DUMMY, 1.0, (0.5,))], []])
    assert r.status == "infeasible" and "slots without" in r.message


def test_pareto_prune_drops_dominated():
    a = Candidate(DUMMY, 1.0, (2.0,))
    b = Candidate(DUMMY, 2.0, (1.0,))
    c = Candidate(DUMMY, 2.0, (2.0,))      # dominated by both
    assert pareto_prune([a, b, c, a]) == [a, b]


def test_offline_beats_online_at_equal_budget_use():
    """On a small tight-budget instance: offline avg batch time <= online's (replan off, online
    plans in the pool, budgets = max(limit, online's realised use)); its budgets hold."""
    inst = calibrate_budgets(random_instance(3, n=4, L=6, slots=6), 0.4)
    df = run_online(inst, V=1.0, policy="ours", replan=False).rows
    s = summarise(df, inst)
    limits = [max(b.limit, s[f"avg_cost_{b.name}"]) for b in inst.budgets]
    res = offline_reference(inst, extra_plans=plans_from_frame(df, inst.num_slots), limits=limits,
                            settings_scales=(0.3, 3.0))
    assert res.status == "optimal", res.message
    assert res.avg_batch_time <= s["avg_batch_time"] * (1 + 1e-9)
    assert np.all(np.asarray(res.avg_costs) <= np.asarray(limits) * (1 + 1e-7))
    for t, p in enumerate(res.plans):
        assert p.validate(inst.state(t)) == []
    # at the instance's own limits the reference also holds them (or says it cannot)
    own = offline_reference(inst, extra_plans=plans_from_frame(df, inst.num_slots), settings_scales=(0.3, 3.0))
    assert own.status in ("optimal", "infeasible")
    if own.ok:
        assert np.all(np.asarray(own.avg_costs) <= np.asarray([b.limit for b in inst.budgets]) * (1 + 1e-7))


def _scaled_money(inst, f: float):
    """The same instance with money counted in units 1/f as large (prices and limit times f)."""
    from dataclasses import replace
    budgets = tuple(replace(b, limit=b.limit * f) if b.kind == "money" else b for b in inst.budgets)
    return replace(inst, price=inst.price * f, budgets=budgets)


def test_weight_settings_are_in_budgets_worth():
    """The sweep's queues are in budgets' worth, as solve_slot takes them: counting money in
    milli-dollars (prices and limit x 1000) leaves every candidate plan unchanged. (When the
    settings were divided by the limit before solve_slot divided again, the weights moved by a
    factor 1e-3 here and the candidates changed.)"""
    from solver.online.offline import slot_candidates, weight_settings
    inst = random_instance(3, n=4, L=6, slots=2)
    st0 = inst.state(0)
    assert weight_settings(st0, (1.0,), 2.0) == weight_settings(_scaled_money(inst, 1e3).state(0), (1.0,), 2.0)
    for t in range(inst.num_slots):
        a = slot_candidates(inst.state(t), include_baselines=False, scales=(0.3, 3.0))
        b = slot_candidates(_scaled_money(inst, 1e3).state(t), include_baselines=False, scales=(0.3, 3.0))
        assert [c.plan for c in a] == [c.plan for c in b]


def test_sweep_reaches_fastest_and_cheapest_plans():
    """Without the baselines in the pool, the sweep alone reaches, in every slot, the fastest
    plan of the search and a plan at least as cheap in each budget as the cheapest plan of the
    search for that budget (V = 0) and as every baseline."""
    from solver import baselines
    from solver.cost import evaluate
    from solver.online.offline import slot_candidates
    from solver.online.tracking import cheapest_plan
    from solver.solve import SolveOptions, solve_slot
    inst = random_instance(8, n=5, L=6, slots=2)
    K = len(inst.budgets)
    for t in range(inst.num_slots):
        s = inst.state(t)
        cands = slot_candidates(s, include_baselines=False, scales=(0.3, 3.0))
        fast = solve_slot(s, (0.0,) * K, 1.0, options=SolveOptions(replan=False))
        assert min(c.batch_time for c in cands) <= fast.batch_time * (1 + 1e-12)
        base = [p for p in (f(s) for f in baselines.ALL.values()) if p is not None and not p.validate(s)]
        for k in range(K):
            alone = cheapest_plan(s, weights=[1.0 if j == k else 0.0 for j in range(K)])
            ref = min([evaluate(alone, s).costs[k]] + [evaluate(p, s).costs[k] for p in base])
            assert min(c.costs[k] for c in cands) <= ref * (1 + 1e-12), (t, inst.budgets[k].name)


def test_offline_le_online_default_settings():
    """The online controller at its defaults (scale-free V, tracker; re-planning off as the
    MILP has no migration): the MILP at the online run's realised budget use is no slower."""
    inst = calibrate_budgets(random_instance(6, n=4, L=6, slots=5), 0.3)
    run = run_online(inst, replan=False)
    s = run.summary
    use = [s[f"avg_cost_{b.name}"] for b in inst.budgets]
    res = offline_reference(inst, extra_plans=plans_from_frame(run.rows, inst.num_slots), limits=use,
                            settings_scales=(0.3, 3.0))
    assert res.success and res.status == "optimal", res.message
    assert res.avg_batch_time <= s["avg_batch_time"] * (1 + 1e-9)
    assert np.all(np.asarray(res.avg_costs) <= np.asarray(use) * (1 + 1e-7))


@settings(max_examples=15)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(1, 3), st.floats(0.0, 0.5))
def test_prefix_rows_match_brute_force(seed, H, P, allow):
    """With prefix = (Cbar, A) the MILP is the best choice whose running excess
    sum_{s <= t} (c(s) / Cbar - 1) stays <= A after every slot (brute force over every choice)."""
    rng = np.random.default_rng(seed)
    cands = [[(DUMMY, float(rng.uniform(0.5, 3)), (float(rng.uniform(0.3, 1.8)),)) for _ in range(P)]
             for _ in range(H)]
    limit = 1.2
    best = None
    for pick in itertools.product(*[range(P) for _ in range(H)]):
        ch = [cands[t][p] for t, p in enumerate(pick)]
        run = np.cumsum([c[2][0] / 1.0 - 1.0 for c in ch])
        if np.mean([c[2][0] for c in ch]) <= limit * (1 + 1e-9) and run.max() <= allow + 1e-9:
            v = float(np.mean([c[1] for c in ch]))
            best = v if best is None else min(best, v)
    res = solve_offline([limit], cands, prefix=([1.0], allow))
    if best is None:
        assert res.status == "infeasible"
    else:
        assert res.ok and res.avg_batch_time == pytest.approx(best, rel=1e-7)
        free = solve_offline([limit], cands)
        assert free.avg_batch_time <= res.avg_batch_time * (1 + 1e-9)


def _brute_bound(traces, shared, limit, tol, prefix):
    """online_lower_bound by enumeration: every shared choice, each trace's best completion."""
    H = len(traces[0])

    def kept(ch):
        run = np.cumsum([c[2][0] / limit - 1.0 for c in ch])
        return (run.max() if prefix else run[-1]) <= tol * H + 1e-9

    def best(tr, head, ok):
        vals = [float(np.mean([c[1] for c in head + [tr[t][p] for t, p in zip(range(len(head), H), tail)]]))
                for tail in itertools.product(*[range(len(tr[t])) for t in range(len(head), H)])
                if ok(head + [tr[t][p] for t, p in zip(range(len(head), H), tail)])]
        return min(vals, default=None)

    opt = [best(tr, [], lambda ch: np.mean([c[2][0] for c in ch]) <= limit * (1 + tol) * (1 + 1e-12))
           for tr in traces]
    if any(o is None for o in opt):
        return None
    z = None
    for pick in itertools.product(*[range(len(traces[0][t])) for t in range(shared)]):
        head = [traces[0][t][p] for t, p in enumerate(pick)]
        per = [best(tr, head, kept) for tr in traces]
        if any(b is None for b in per):
            continue
        v = max(b / o for b, o in zip(per, opt))
        z = v if z is None else min(z, v)
    return z


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 2), st.integers(0, 3), st.booleans())
def test_online_lower_bound_matches_brute_force(seed, H, P, shared, prefix):
    """z* of online_lower_bound is the least over the shared slots' choices of the worst trace's
    ratio to its offline optimum (each trace completed at its best within the tolerance)."""
    rng = np.random.default_rng(seed)
    shared = min(shared, H)
    base = [[(DUMMY, float(rng.uniform(0.5, 3)), (float(rng.uniform(0.3, 1.6)),)) for _ in range(P)]
            for _ in range(H)]
    other = base[:shared] + [[(DUMMY, float(rng.uniform(0.5, 3)), (float(rng.uniform(0.3, 1.6)),))
                              for _ in range(P)] for _ in range(H - shared)]
    ref = _brute_bound([base, other], shared, 1.0, 0.1, prefix)
    res = online_lower_bound([base, other], shared, [1.0], 0.1, prefix=prefix)
    if ref is None:
        assert not res.ok
    else:
        assert res.ok, res.message
        assert res.ratio == pytest.approx(ref, rel=1e-6)
        assert res.ratio >= 1.0 - 1e-9   # no online rule beats the offline optimum of every trace


def test_online_lower_bound_one_trace_is_the_guarantee_s_price():
    """With one trace the bound is the offline optimum under the tracker's rule over the plain
    offline optimum: the plain optimum borrows in slot 0 and repays in slot 1, which the rule
    (running excess <= 0 after every slot at tolerance 0) forbids."""
    cands = [[(DUMMY, 1.0, (1.5,)), (DUMMY, 3.0, (0.5,))], [(DUMMY, 1.0, (0.5,)), (DUMMY, 0.6, (1.5,))]]
    free = online_lower_bound([cands], 2, [1.0], 0.0, prefix=False)
    rule = online_lower_bound([cands], 2, [1.0], 0.0, prefix=True)
    assert free.ok and free.ratio == pytest.approx(1.0) and free.offline == pytest.approx((1.0,))
    assert rule.ok and rule.ratio == pytest.approx(1.8) and rule.bound_s == pytest.approx((1.8,))
    other = [[(DUMMY, 1.0, (1.5,)), (DUMMY, 2.0, (0.5,))], cands[1]]
    with pytest.raises(ValueError, match="differs from trace 0 in shared slot 0"):
        online_lower_bound([cands, other], 1, [1.0], 0.0)


def test_bench_budgets_bound_rows():
    """bench_budgets --bound on a small random instance: both rules solved and at least 1, the
    family's bound under the rule after every slot at least the instance's own under it (the
    family contains it), the rule at the end only never above the rule after every slot; a
    shared slot count outside 1..H-1 is an error."""
    from benchmarks.bench_budgets import bound
    inst = calibrate_budgets(random_instance(7, n=3, L=4, slots=3), 0.4)
    rows = bound(inst, 2)
    assert [r["rule"] for r in rows] == ["after every slot", "at the end"]
    for r in rows:
        assert r["status"] == "optimal" and r["traces"] == 4 and r["bound_ratio"] >= 1.0 - 1e-9
        assert r["worst_trace"] == "the instance" or r["worst_trace"].startswith("slots 2-2 repeat slot ")
    # the family holds the instance: under the rule after every slot its bound is at least the
    # instance's own under that rule (the rule at the end only is weaker and may be below it)
    assert rows[0]["bound_ratio"] >= rows[0]["alone_under_rule_ratio"] - 1e-9 >= 1.0 - 2e-9
    assert rows[1]["bound_ratio"] <= rows[0]["bound_ratio"] + 1e-9
    with pytest.raises(ValueError, match="T0 must be in 1..2"):
        bound(inst, 3)


def _frontiers(seed: int, H: int, K: int = 2) -> list[np.ndarray]:
    """H random slot frontiers (T s, y_k budgets' worth): 3-6 points, faster ones dearer, the
    slowest within every budget (y_k <= 0.9: a slack point in every slot)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(H):
        n = int(rng.integers(3, 7))
        T = np.sort(rng.uniform(0.5, 3.0, n))
        y = np.sort(rng.uniform(0.5, 1.6, (n, K)), axis=0)[::-1]
        y[-1] = np.minimum(y[-1], 0.9)
        out.append(np.column_stack([T, y]))
    return out


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(2, 8))
def test_bench_margin_distribution_known_replay(seed, H):
    """bench_margin's replay with the price LP over the whole trace (known=), in the trace's own
    order and reversed: its ratio to the offline LP over the same points at its own use is
    >= 1 like any replay's, and with a slack point in every slot the tracker's rule keeps the
    running excess within eps H after every slot (guarantee (c) on the points)."""
    from benchmarks.bench_margin import RULES, TOL, replay
    F = _frontiers(seed, H)
    for order in (F, F[::-1]):
        r = replay(order, RULES["in force"], known=F)
        assert r["ratio"] >= 1 - 1e-9 and r["ratio_lim"] >= 1 - 1e-9
        assert r["max_excess_over_H"] <= TOL + 1e-12


def test_bench_margin_family_bound_rows():
    """bench_margin --bound on recorded points: both rules solved and at least 1, the family's
    bound under the rule after every slot at least the trace's own under that rule (the family
    holds the trace), the rule at the end only never above the rule after every slot; T0 outside
    1..H-1 is an error naming the range."""
    from benchmarks.bench_margin import family_bound
    F = _frontiers(3, 4)
    rows = family_bound(F, 2)
    assert [r["rule"] for r in rows] == ["after every slot", "at the end"]
    for r in rows:
        assert r["status"] == "optimal" and r["traces"] == 5 and r["bound_ratio"] >= 1.0 - 1e-9
    assert rows[0]["bound_ratio"] >= rows[0]["alone_under_rule_ratio"] - 1e-9 >= 1.0 - 2e-9
    assert rows[1]["bound_ratio"] <= rows[0]["bound_ratio"] + 1e-9
    with pytest.raises(ValueError, match=r"T0 must be in 1..3"):
        family_bound(F, 4)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), H=st.integers(2, 8), lam=st.tuples(st.floats(0.0, 20.0, allow_subnormal=False), st.floats(0.0, 20.0, allow_subnormal=False)))
def test_bench_margin_constant_price_is_the_offline_optimum_at_its_own_use(seed, H, lam):
    """bench_margin's replay with the price held constant (fixed=): wherever the tracker never
    binds, each slot takes its least T + lambda . y, which is the offline LP's optimum at the
    replay's own use (Lagrangian sufficiency), so its ratio at equal use is 1 whatever lambda
    is; it is never below 1."""
    from benchmarks.bench_margin import RULES, replay
    F = _frontiers(seed, H)
    r = replay(F, RULES["in force"], fixed=lam)
    assert r["ratio"] >= 1 - 1e-9
    if r["binding_slots"] == 0:
        assert r["ratio"] == pytest.approx(1.0, abs=1e-7)


def test_bench_margin_whole_trace_price_meets_the_use():
    """whole_trace_price: at a use the LP can reach with money to spare the price is 0; at a
    tighter one it is positive."""
    from benchmarks.bench_margin import whole_trace_price
    F = _frontiers(11, 6)
    assert whole_trace_price(F, 5.0) == (0.0, 0.0)
    assert max(whole_trace_price(F, 0.95)) > 0.0


def test_bench_budgets_slot_table_adds_up():
    """bench_budgets --slots on a small random instance: one row per slot; the per-slot
    differences add up to the gap of the averages, which is >= 0 against the offline MILP at
    ours' use (the online plans are among its candidates), and the MILP under the tracker's rule
    is no faster than without it; the use columns are cost / limit."""
    from benchmarks.bench_budgets import slot_table
    inst = calibrate_budgets(random_instance(7, n=3, L=4, slots=3), 0.4)
    rows = slot_table(inst)
    assert [r["slot"] for r in rows] == [0, 1, 2]
    ours = np.mean([r["ours_s"] for r in rows])
    off = np.mean([r["offline_s"] for r in rows])
    rule = np.mean([r["offline_rule_s"] for r in rows])
    assert np.mean([r["ours_minus_offline_s"] for r in rows]) == pytest.approx(ours - off)
    assert ours >= off * (1 - 1e-9) and rule >= off * (1 - 1e-9) and ours >= rule * (1 - 1e-9)
    for b in inst.budgets:
        assert np.mean([r[f"ours_{b.name}_use"] for r in rows]) <= 1.0 + 0.01 + 1e-9


def test_bench_budgets_row_at_the_limits_is_no_kinder_than_at_equal_use():
    """bench_budgets' MILP columns on a small random instance: ours keeps every budget within
    1%, so the offline MILP at the limits + 1% is at least as fast as at ours' own use, and the
    ratio at the limits is at least the ratio at equal use, itself at least 1."""
    from benchmarks.bench_budgets import bench_instance
    inst = calibrate_budgets(random_instance(7, n=3, L=4, slots=3), 0.4)
    row = bench_instance(inst, milp=True, others=False)
    assert row["offline_status"] == "optimal" and row["offline_at_limits_status"] == "optimal"
    assert row["ours_worst_over_pct"] <= 1.0 + 1e-9
    assert row["offline_at_limits_s"] <= row["offline_s"] * (1 + 1e-9)
    assert row["online_over_offline_at_limits"] >= row["online_over_offline"] * (1 - 1e-9) >= 1 - 1e-9


def test_time_limit_reaches_highs_and_prefix_refs_are_checked(monkeypatch):
    """time_limit_s was set on the appsi solver's config, which its solve() then overwrote with
    its own default (no limit): an outside audit's 150-slot MILP ran 35 s under a 0.05 s limit.
    A prefix reference of 0 dropped that budget's rows without a word."""
    from solver.online import offline
    seen = {}
    real = offline._solver

    def spy():
        s = real()
        solve = s.solve
        s.solve = lambda m, **kw: seen.update(kw) or solve(m, **kw)
        return s
    monkeypatch.setattr(offline, "_solver", spy)
    c = [[(DUMMY, 1.0, (0.5,)), (DUMMY, 0.5, (1.5,))]] * 2
    assert solve_offline((1.0,), c, time_limit_s=7.5).status == "optimal"
    assert seen.get("timelimit") == 7.5 or not hasattr(real(), "config")
    with pytest.raises(ValueError, match=r"prefix: expected one reference limit > 0 per budget \(1\), got \[0.0\]"):
        solve_offline((1.0,), c, prefix=([0.0], 0.1))
