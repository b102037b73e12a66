"""The online controller with the real per-slot search: queue law on every row, guarantees (a)
and (b), exact resume, every policy's plans valid, per-slot dominance over the baselines."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import baselines
from solver.cost import evaluate
from solver.errors import InfeasibleSlotError
from solver.model import Budget
from solver.online.offline import calibrate_budgets
from solver.model import plan_from_json, plan_to_json
from solver.online import charge_plan, run_online, summarise
from solver.baselines import even_split
from solver.online.policies import POLICY_NAMES
from solver.online.queues import queue_bound, update_queues
from solver.solve import SolveOptions
from solver.io.synthetic import random_instance

_CACHE: dict = {}


def tight(seed: int, frac: float = 0.3, n: int = 4, L: int = 6, slots: int = 6, budgets=None):
    """A small random instance whose budgets bind (calibrated between cheapest and fastest)."""
    key = (seed, frac, n, L, slots, budgets)
    if key not in _CACHE:
        _CACHE[key] = calibrate_budgets(random_instance(seed, n=n, L=L, slots=slots, budgets=budgets), frac)
    return _CACHE[key]


def _queue_columns(inst):
    return [f"queue_{b.name}_{w}" for b in inst.budgets for w in ("before", "after")]


def _check_rows(df, inst):
    limits = [b.limit for b in inst.budgets]
    prev = (0.0,) * len(limits)
    for _, r in df.iterrows():
        before = tuple(r[f"queue_{b.name}_before"] for b in inst.budgets)
        after = tuple(r[f"queue_{b.name}_after"] for b in inst.budgets)
        assert before == prev
        costs = [r[f"cost_{b.name}"] for b in inst.budgets]
        if r["status"] == "infeasible":
            assert after == before
        else:
            assert after == update_queues(before, costs, limits)
        prev = after


@settings(max_examples=6)
@given(st.integers(0, 500), st.sampled_from([0.1, 10.0, 1e3, 1e5]))
def test_guarantee_a_every_run(seed, V):
    """Average overshoot of every budget <= Q_k(T)/T, and the queue law on every row."""
    inst = tight(seed % 4, 0.2)
    df = run_online(inst, V=V, policy="ours", replan=bool(seed % 2)).rows
    _check_rows(df, inst)
    s = summarise(df, inst)
    H = s["executed_slots"]
    for b in inst.budgets:
        over = df[f"cost_{b.name}"].mean() / b.limit - 1.0
        assert over <= df[f"queue_{b.name}_after"].iloc[-1] / H + 1e-9
        assert s[f"bound_ok_{b.name}"]


@pytest.mark.parametrize("replan", [False, True])
def test_guarantee_b_slack_plan_one_budget(replan):
    """One money budget set delta above the cheapest plan's cost in every slot: the queue stays
    below (V DeltaT + C)/delta + ymax with C = 0 (the cheapest plan is among the candidates).
    Bound (b) is the drift-plus-penalty controller's: the plan minimises the objective at the
    queues, so the run prices by the queues (pricing="queue"; docs/BUDGETS.md)."""
    inst = random_instance(11, n=4, L=6, slots=12, p_leave=0.0, budgets=(Budget("money", "money", 1.0),))
    states = [inst.state(t) for t in range(inst.num_slots)]
    x0 = [baselines.cheapest(s) for s in states]
    c0 = [evaluate(p, s).costs[0] for p, s in zip(x0, states)]
    delta = 0.25 * float(np.mean(c0))
    inst = replace(inst, budgets=(Budget("money", "money", max(c0) + delta),))
    cbar = inst.budgets[0].limit
    for V in (0.01, 0.1, 1.0):   # queues in budget units: V of order T's spread makes them matter
        df = run_online(inst, V=V, policy="ours", replan=replan, iterations_per_slot=20, pricing="queue").rows
        prev, dT, ymax, worst0 = None, 0.0, 0.0, 0.0
        for t, r in df.iterrows():
            s = inst.state(t)
            # the slack plan charged as the controller would have charged it in this slot
            ch0 = charge_plan(x0[t], s, prev, replan=replan, iterations_per_slot=20)
            worst0 = max(worst0, ch0.costs[0])
            dT = max(dT, ch0.charged_time - r["charged_time"])
            ymax = max(ymax, abs(r["cost_money"] / cbar - 1.0))
            prev = plan_from_json(r["plan_json"])
        d = 1.0 - worst0 / cbar    # = delta/cbar without migration; migration may eat some slack
        assert d > 0
        bound = queue_bound(V, dT, 0.0, d, ymax)
        assert 0 < df["queue_money_after"].max() <= bound * (1 + 1e-9)


def test_resume_reproduces_unbroken_run(tmp_path):
    inst = tight(1, 0.3, slots=7)
    full = run_online(inst, V=2.0, policy="ours").rows
    with pytest.raises(ValueError, match="stop: expected a slot index after start=0"):
        run_online(inst, V=2.0, policy="ours", state_path=tmp_path / "state0.json", stop=0)
    for stop in (1, 3, 6):
        p = tmp_path / f"state{stop}.json"
        part = run_online(inst, V=2.0, policy="ours", state_path=p, stop=stop).rows
        assert len(part) == stop
        json.loads(p.read_text()) if stop else None
        rest = run_online(inst, V=2.0, policy="ours", state_path=p).rows
        cols = [c for c in full.columns if c != "solve_time"]
        pd.testing.assert_frame_equal(rest[cols], full[cols], check_exact=True)
        again = run_online(inst, V=2.0, policy="ours", state_path=p).rows   # nothing repeated
        assert len(again) == len(full)
    with pytest.raises(ValueError, match="another run"):
        run_online(inst, V=3.0, policy="ours", state_path=tmp_path / "state3.json")
    # the same settings on other inputs (a batch or a device changed in the file): refused, naming them
    wl = inst.workload
    for other in (replace(inst, workload=replace(wl, batch=wl.batch * 2)),
                  replace(inst, devices=(replace(inst.devices[0], memory_bytes=inst.devices[0].memory_bytes / 2),
                                         *inst.devices[1:]))):
        with pytest.raises(ValueError, match="another run.*inputs"):
            run_online(other, V=2.0, policy="ours", state_path=tmp_path / "state3.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{bad")
    with pytest.raises(ValueError, match=f"controller state {bad}: not a saved run"):
        run_online(inst, V=2.0, policy="ours", state_path=bad)


def test_run_range_and_arguments_are_checked():
    """A run's slots are start..stop-1 inside the instance, both integers: an empty, reversed,
    negative or too long range is refused naming the argument (it had run nothing and called
    that a success, or cut the range silently); so are an instance given by its path and a V
    that is not a number."""
    inst = tight(1, 0.3, slots=4)
    for kw, kind, words in [({"stop": -1}, ValueError, r"stop: expected a slot index in 0..4 .*got -1"),
                            ({"stop": 0}, ValueError, "stop: expected a slot index after start=0"),
                            ({"start": 3, "stop": 2}, ValueError, "stop: expected a slot index after start=3"),
                            ({"stop": 5}, ValueError, r"stop: .*the instance has 4 slots\), got 5"),
                            ({"start": 4}, ValueError, r"start: expected a slot index in 0..3, got 4"),
                            ({"start": 1.5, "stop": 2}, TypeError, r"start: expected an integer slot index, got 1.5"),
                            ({"stop": 2.7}, TypeError, "stop: expected an integer"),
                            ({"V": "1"}, TypeError, "V: expected a finite real number")]:
        with pytest.raises(kind, match=words):
            run_online(inst, **kw)
    with pytest.raises(TypeError, match="instance: expected an Instance"):
        run_online("instances/default.toml")
    assert len(run_online(inst, V=1.0, start=3, stop=4).rows) == 1


def test_resume_stateful_policies(tmp_path):
    inst = random_instance(5, n=5, L=6, slots=6, p_leave=0.3)
    for pol in ("hetpipe", "frozen"):
        full = run_online(inst, V=1.0, policy=pol).rows
        p = tmp_path / f"{pol}.json"
        run_online(inst, V=1.0, policy=pol, state_path=p, stop=2)
        rest = run_online(inst, V=1.0, policy=pol, state_path=p).rows
        cols = [c for c in full.columns if c != "solve_time"]
        pd.testing.assert_frame_equal(rest[cols], full[cols], check_exact=True)


def test_every_policy_plan_is_valid_and_charged_alike():
    inst = tight(2, 0.3, n=5, slots=5)
    N = 50
    for pol in POLICY_NAMES:
        df = run_online(inst, V=1.0, policy=pol, iterations_per_slot=N).rows
        assert list(df["slot"]) == list(range(inst.num_slots))
        prev = None
        for t, r in df.iterrows():
            s = inst.state(t)
            plan = plan_from_json(r["plan_json"])
            if r["status"] == "infeasible":
                assert plan is None and r["message"]
                continue
            assert plan.validate(s) == [], (pol, t)
            ch = charge_plan(plan, s, prev, replan=True, iterations_per_slot=N)
            assert r["batch_time"] == pytest.approx(ch.batch_time, rel=1e-12)
            assert r["charged_time"] == pytest.approx(ch.batch_time + ch.migration_time / N, rel=1e-12)
            assert r["n_groups"] == len(plan.groups) and r["n_devices"] == len(plan.devices)
            if r["status"] == "fallback":
                assert "fell back" in r["message"]
            prev = plan
        _check_rows(df, inst)


def test_replan_off_charges_no_migration():
    inst = random_instance(7, n=5, L=6, slots=5, p_leave=0.3)
    df = run_online(inst, V=1.0, policy="ours", replan=False).rows
    assert (df["migration_time"] == 0).all()
    assert (df["charged_time"] == df["batch_time"]).all()


@pytest.mark.parametrize("replan", [False, True])
def test_dominance_over_baselines_per_slot(replan):
    """Same state, queues and previous plan: ours' objective <= every baseline plan's."""
    inst = tight(4, 0.2, n=5, slots=6)
    V = 1.0
    df = run_online(inst, V=V, policy="ours", replan=replan, iterations_per_slot=100, budget_tolerance=None).rows
    prev = None
    for t, r in df.iterrows():
        s = inst.state(t)
        Q = tuple(r[f"queue_{b.name}_before"] for b in inst.budgets)
        ours = r["objective"]
        for name, fn in baselines.ALL.items():
            p = fn(s)
            if p is None or p.validate(s):
                continue
            theirs = charge_plan(p, s, prev, replan=replan, iterations_per_slot=100).objective(Q, V)
            assert ours <= theirs * (1 + 1e-9) + 1e-12, (t, name, ours, theirs)
        prev = plan_from_json(r["plan_json"])


def test_infeasible_slots_skip_or_raise():
    inst = random_instance(0, n=3, L=4, slots=3)
    huge = tuple(replace(l, param_bytes=1e12) for l in inst.workload.layers)
    inst = replace(inst, workload=replace(inst.workload, layers=huge))
    df = run_online(inst, V=1.0, policy="ours").rows
    assert (df["status"] == "infeasible").all() and (df["plan_json"] == "null").all()
    assert all(df[f"queue_{b.name}_after"].eq(0.0).all() for b in inst.budgets)
    s = summarise(df, inst)
    assert s["infeasible_slots"] == 3 and s["executed_slots"] == 0
    with pytest.raises(InfeasibleSlotError, match="slot 0"):
        run_online(inst, V=1.0, policy="ours", on_infeasible="raise")
    dfb = run_online(inst, V=1.0, policy="even-dp").rows
    assert (dfb["status"] == "infeasible").all()


@given(st.integers(0, 200))
@settings(max_examples=15)
def test_plan_json_roundtrip(seed):
    s = random_instance(seed, n=5, L=6, slots=1).state(0)
    for fn in baselines.ALL.values():
        p = fn(s)
        if p is not None:
            assert plan_from_json(plan_to_json(p)) == p
    assert plan_from_json(plan_to_json(None)) is None


@given(st.integers(1, 8), st.integers(1, 40), st.sampled_from([1, 2, 4]))
def test_even_split(m, n_units, u):
    B = n_units * u
    sh = even_split(m, B, u)
    if m > n_units:
        assert sh is None
    else:
        assert sum(sh) == B and all(x % u == 0 and x >= u for x in sh) and max(sh) - min(sh) <= u


def test_online_runs_compare_by_value():
    """`OnlineRun == copy` had raised pandas' "truth value of a DataFrame is ambiguous" (an outside
    audit): runs are equal when every field is (a deep copy, a pickled copy), unequal when a row
    differs, and not hashable."""
    import copy
    import pickle
    inst = random_instance(3, n=3, L=5, slots=2)
    run = run_online(inst, V=1.0)
    assert run == copy.deepcopy(run) and run == pickle.loads(pickle.dumps(run))
    other = copy.deepcopy(run)
    other.rows.loc[0, "batch_time"] += 1e-9
    assert run != other and run != "run"
    with pytest.raises(TypeError, match="unhashable"):
        hash(run)


@pytest.mark.parametrize("tolerance", [0.01, None])
def test_skipped_slots_have_no_cost_and_averages_agree(tolerance, tmp_path):
    """An outside audit: a slot with no plan had cost 0 (batch time NaN), so a plain mean of the
    rows was not summary.json's average, and avg_solve_time alone averaged over every slot. Now
    every plan figure of a skipped row is NaN, each summary average is the plain mean of its
    column (the executed slots), the queue law holds (queues unchanged there) and a resumed run
    reproduces the NaN rows exactly."""
    inst = tight(3, 0.3, slots=6)
    avail = inst.available.copy()
    avail[[2, 3], :] = False
    inst = replace(inst, available=avail)
    run = run_online(inst, budget_tolerance=tolerance)
    df, s = run.rows, run.summary
    skipped = df["status"] == "infeasible"
    assert list(df.index[skipped]) == [2, 3] and s["executed_slots"] == 4
    plan_cols = ["batch_time", "charged_time", "migration_time", "preemption_time", "risk_time",
                 *[f"cost_{b.name}" for b in inst.budgets]]
    assert df.loc[skipped, plan_cols].isna().all().all()
    assert df.loc[~skipped, plan_cols].notna().all().all()
    for col, key in [("charged_time", "avg_batch_time"), ("batch_time", "avg_plan_time"),
                     ("migration_time", "avg_migration_time"), ("solve_time", "avg_solve_time"),
                     *[(f"cost_{b.name}", f"avg_cost_{b.name}") for b in inst.budgets]]:
        expected = df.loc[~skipped, col].mean()
        assert s[key] == pytest.approx(expected, rel=1e-12), key
        if col != "solve_time":
            assert df[col].mean() == pytest.approx(s[key], rel=1e-12), key    # NaN rows drop out
    _check_rows(df, inst)
    p = tmp_path / "state.json"
    run_online(inst, budget_tolerance=tolerance, state_path=p, stop=3)
    rest = run_online(inst, budget_tolerance=tolerance, state_path=p).rows
    cols = [c for c in df.columns if c != "solve_time"]
    pd.testing.assert_frame_equal(rest[cols], df[cols], check_exact=True)


def test_resume_with_other_settings_says_each_in_words(tmp_path):
    """An outside audit: a resume with other settings printed a dict of tuples ({'V': (None, 2.0)}).
    Now each setting that differs is named with the value saved and the value requested."""
    inst = random_instance(3, n=3, L=5, slots=2)
    p = tmp_path / "state.json"
    run_online(inst, state_path=p, stop=1)
    with pytest.raises(ValueError) as e:
        run_online(inst, V=2.0, budget_tolerance=None, replan=False, state_path=p,
                   options=SolveOptions(tp_degrees=(1, 2)))
    msg = str(e.value)
    assert f"controller state {p} belongs to another run: " in msg and "(None" not in msg and "{" not in msg
    for part in ("V: saved the default rule, requested 2", "budget tolerance: saved 1%, requested off",
                 "pricing: saved history, requested queue", "re-planning cost: saved charged, requested not charged",
                 "search options: tp_degrees saved (1, 2, 4, 8), requested (1, 2)"):
        assert part in msg, (part, msg)
    # another slot count alone: the traces differ because of it, not the instance (an outside audit)
    longer = random_instance(3, n=3, L=5, slots=3)
    with pytest.raises(ValueError) as e:
        run_online(longer, state_path=p)
    msg = str(e.value)
    assert "slots: saved 2, requested 3" in msg and "as the slot count does" in msg and "workload" not in msg, msg
