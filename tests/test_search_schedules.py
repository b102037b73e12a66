"""The search and the oracle choose 1F1B and recomputation where GPipe's stash does not fit:
every returned plan fits in memory under its own schedule and recomputation."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.cost import evaluate
from solver.cost.simulator import simulate_plan
from solver.io.synthetic import random_state
from solver.model.state import SlotState
from solver.solve import SolveOptions, solve_exact, solve_slot


def tight(state: SlotState, params: float, samples: float) -> SlotState:
    """Every device gets `params` times the whole model's state bytes plus room for `samples`
    samples of the whole model's saved activations."""
    wl = state.workload
    P, H = float(state.param_prefix[-1]), float(state.stash_prefix[-1])
    mem = wl.opt_factor * P * params + samples * H
    return dataclasses.replace(state, devices=tuple(dataclasses.replace(d, memory_bytes=mem)
                                                    for d in state.devices))


def check_result(res, state) -> None:
    assert res.plan.validate(state) == []
    ev = evaluate(res.plan, state)
    if any(g.schedule == "1f1b" and g.num_stages > 1 for g in res.plan.groups):
        assert res.batch_time == pytest.approx(simulate_plan(res.plan, state).batch_time, rel=1e-9)
        assert res.batch_time <= ev.batch_time * (1 + 1e-9)
        assert "event simulator" in res.message
    else:
        assert res.batch_time == pytest.approx(ev.batch_time, rel=1e-9)


@settings(max_examples=25)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 6), L=st.integers(4, 12),
       params=st.sampled_from([0.3, 0.5, 1.2]), samples=st.floats(0.5, 40.0))
def test_every_returned_plan_fits_under_its_schedule(seed, n, L, params, samples):
    state = tight(random_state(seed, n=n, L=L, batch=32, micro_batch=2), params, samples)
    res = solve_slot(state, (0.0, 0.0), 1.0)
    if res.plan is None:
        assert res.status == "infeasible" and res.message
        return
    check_result(res, state)
    gpipe_only = solve_slot(state, (0.0, 0.0), 1.0, options=SolveOptions(schedules=False))
    if gpipe_only.plan is not None:
        assert gpipe_only.plan.validate(state) == []


@settings(max_examples=10)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 4), L=st.integers(3, 6),
       samples=st.floats(0.5, 24.0))
def test_oracle_never_worse_than_search_with_schedules(seed, n, L, samples):
    state = tight(random_state(seed, n=n, L=L, batch=16, micro_batch=2), 0.5, samples)
    ex = solve_exact(state, (0.0, 0.0), 1.0)
    res = solve_slot(state, (0.0, 0.0), 1.0)
    assert (ex.plan is None) == (res.plan is None)
    if ex.plan is not None:
        check_result(ex, state)
        assert ex.objective <= res.objective * (1 + 1e-9)


def test_1f1b_where_gpipe_does_not_fit():
    """Four devices that hold a quarter of the model each with a few samples' activations:
    GPipe cannot hold the batch, 1F1B (stage j keeps u min(k - j, n)) or recomputation can."""
    state = tight(random_state(3, n=4, L=8, batch=64, micro_batch=4), 0.4, 7.0)
    gp = solve_slot(state, (0.0, 0.0), 1.0, options=SolveOptions(schedules=False))
    res = solve_slot(state, (0.0, 0.0), 1.0)
    assert res.plan is not None
    check_result(res, state)
    assert any(g.schedule == "1f1b" or g.recompute for g in res.plan.groups)
    assert gp.plan is None or res.objective <= gp.objective * (1 + 1e-12)


@pytest.mark.parametrize("seed, samples", [(7, 1.0), (19, 1.0)])
def test_recomputation_can_be_ruled_out(seed, samples):
    """SolveOptions(recompute=False) (a runtime that cannot recompute): where the search alone
    recomputes, no group of the plan does and the plan fits under its own schedule."""
    state = tight(random_state(seed, n=4, L=8, batch=64, micro_batch=4), 0.4, samples)
    assert any(g.recompute for g in solve_slot(state, (0.0, 0.0), 1.0).plan.groups)
    res = solve_slot(state, (0.0, 0.0), 1.0, options=SolveOptions(recompute=False))
    if res.plan is not None:
        assert not any(g.recompute for g in res.plan.groups)
        check_result(res, state)
