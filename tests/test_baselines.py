"""Baseline plans: valid whenever returned; expected shapes; infeasible states give None."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver import baselines
from solver.cost.migration import migration_time
from solver.io.synthetic import random_state


@given(seed=st.integers(0, 10**6), n=st.integers(1, 8), L=st.integers(1, 16),
       p=st.sampled_from([0.5, 1.0]), scale=st.sampled_from([1.0, 10.0, 50.0]))
def test_every_baseline_plan_is_valid(seed, n, L, p, scale):
    state = random_state(seed, n=n, L=L, p_available=p, scale=scale)
    for name, f in baselines.ALL.items():
        plan = f(state)
        if plan is not None:
            assert plan.validate(state) == [], name
    c = baselines.cheapest(state, (1.0, 0.0))
    if c is not None:
        assert c.validate(state) == []


def test_shapes():
    state = random_state(3, n=8, L=12)
    B, u = state.workload.batch, state.workload.micro_batch
    dp = baselines.even_dp(state)
    assert len(dp.groups) == 8 and all(len(g.devices) == 1 for g in dp.groups)
    assert max(dp.shares) - min(dp.shares) <= u
    lb = baselines.lb_bsp(state)
    fastest = min(range(8), key=lambda d: baselines.per_sample_time(state, d))
    assert dict(zip((g.devices[0] for g in lb.groups), lb.shares))[fastest] == max(lb.shares)
    gp = baselines.gpipe(state)
    assert len(gp.groups) == 1 and gp.groups[0].devices == tuple(range(8)) and gp.shares == (B,)
    hp = baselines.hetpipe(state)
    assert sorted(d for g in hp.groups for d in g.devices) == list(range(8))
    for f in (baselines.dapple, baselines.pipedream):
        p = f(state)
        assert len({len(g.devices) for g in p.groups}) == 1


def test_even_split_and_proportional():
    assert baselines.even_split(3, 40, 4) == [16, 12, 12]
    assert sum(baselines.proportional_split([1, 2, 3], 64, 4)) == 64
    assert baselines.proportional_split([1, 1], 4, 4) is None


def test_infeasible_state_gives_none():
    state = random_state(1, n=3, L=4, scale=1e4)   # nothing fits anywhere
    for f in baselines.ALL.values():
        assert f(state) is None


def test_migration_time():
    state = random_state(5, n=6, L=10)
    a, b = baselines.even_dp(state), baselines.gpipe(state)
    assert migration_time(None, a, state) == 0.0
    assert migration_time(a, a, state) == 0.0
    assert migration_time(b, b, state) == 0.0
    assert migration_time(b, a, state) > 0.0           # every device must receive the whole model
    assert migration_time(a, b, state) == 0.0          # every device already holds everything


@given(seed=st.integers(0, 10**6), n=st.integers(2, 12), L=st.integers(2, 30), scale=st.floats(0.5, 40.0))
def test_dapple_takes_its_fastest_configuration(seed, n, L, scale):
    """DAPPLE's choice (its loop skips configurations by a lower bound) is the fastest valid
    plan over every (m, k) configuration, each evaluated in full."""
    from solver.baselines.reconstructions import _configs, _unchecked_equal_groups, one_f_one_b_peak
    from solver.cost.evaluate import evaluate
    from solver.subproblems.cuts import balanced_cuts
    state = random_state(seed, n=n, L=L, scale=scale)
    avail, u = state.available_indices, state.workload.micro_batch
    times = []
    for m, k in _configs(state):
        plan = _unchecked_equal_groups(
            state, [avail[i * k:(i + 1) * k] for i in range(m)],
            lambda ch, b: balanced_cuts(state, ch, min_share=one_f_one_b_peak(len(ch), b, u)), one_f_one_b=True)
        if plan is not None and not plan.validate(state):
            times.append(evaluate(plan, state).batch_time)
    got = baselines.dapple(state)
    if not times:
        assert got is None
    else:
        assert got is not None and evaluate(got, state).batch_time == min(times)


@given(seed=st.integers(0, 10**6), n=st.integers(1, 8), q=st.sampled_from([(), (0.0, 3.0), (2.0, 0.0), (1.0, 1.0)]))
def test_single_holder_cost_floor_is_below_its_evaluation(seed, n, q):
    """cheapest skips a one-device plan whose floor cannot reach the best key: the floor
    (weighted cost, batch time) is below the plan's own evaluation on every holder."""
    from solver.baselines.reconstructions import _single_cost_floor, cost_weights
    from solver.model import Group, Plan
    from solver.subproblems.cache import SlotCache

    state = random_state(seed, n=n, L=12)
    w = cost_weights(state, q[:len(state.budgets)] if q else ())
    floor = _single_cost_floor(state, w)
    cache = SlotCache(state)
    L, B = state.workload.num_layers, state.workload.batch
    for d in baselines.holders(state, cache=cache):
        ev = cache.evaluation(Plan((Group((d,), (L,), B),)))
        c_lo, t_lo = floor[(d,)]
        assert t_lo <= ev.batch_time * (1 + 1e-12)
        assert c_lo <= float(np.dot(w, ev.costs)) * (1 + 1e-12) + 1e-300


def test_baselines_name_a_state_that_is_not_one():
    """Every baseline is given one slot's SlotState; anything else (a name, the Instance) is a
    TypeError naming the baseline and what it got, not an AttributeError from inside."""
    from solver.io.synthetic import random_instance
    inst = random_instance(2, n=3, L=4, slots=2)
    for f in (baselines.even_dp, baselines.lb_bsp, baselines.gpipe, baselines.dapple, baselines.pipedream,
              baselines.hetpipe):
        for bad, kind in (("x", "str"), (inst, "Instance")):
            with pytest.raises(TypeError, match=f"{f.__name__}: expected a SlotState .*got {kind}"):
                f(bad)
