"""The Python API's input checks: a wrong type raises TypeError and a wrong value ValueError, each
naming the argument or field and the value, before anything runs (never an AttributeError,
ZeroDivisionError or a comparison's TypeError from deep inside); weights large enough to
overflow the objective are refused."""
from __future__ import annotations

import dataclasses
import math
import warnings

import pytest

from solver import evaluate, run_online
from solver.io.synthetic import random_instance, random_state
from solver.model.preemption import Preemption
from solver.solve import SolveOptions, solve_exact, solve_slot
from solver.solve.inputs import QUEUE_MAX, V_MAX
from solver.solve.options import SearchTuning


@pytest.mark.parametrize("solve", [solve_slot, solve_exact])
def test_weights_that_would_overflow_are_refused(solve):
    """queues up to QUEUE_MAX and V up to V_MAX solve without a numpy warning and give a finite
    objective; beyond them (1e306 had given objective NaN and the most expensive plan), a
    ValueError naming the argument and the bound."""
    state = random_state(3, n=3, L=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for q, V in [((QUEUE_MAX, 0.0), 1.0), ((0.0, 0.0), V_MAX)]:
            assert math.isfinite(solve(state, q, V).objective)
    for q, words in [((1e306, 0.0), r"queues\[0\] \(money\): expected a finite real number >= 0 and <= 1e\+24, "
                                     r"got 1e\+306"),
                     ((0.0, 2 * QUEUE_MAX), r"queues\[1\] \(energy\)")]:
        with pytest.raises(ValueError, match=words):
            solve(state, q)
    with pytest.raises(ValueError, match=r"V: expected a finite real number >= 0 and <= 1e\+12, got 1e\+308"):
        solve(state, (), 1e308)


def test_caps_name_the_bad_one():
    """SolveOptions' caps are checked per element when built (a NaN had been reported as a wrong
    count); cap_weight is a finite number in range."""
    with pytest.raises(ValueError, match=r"caps\[0\]: expected a number .* or inf \(no cap\), got nan"):
        SolveOptions(caps=(math.nan, 1.0))
    with pytest.raises(ValueError, match=r"caps\[1\]: .*got -inf"):
        SolveOptions(caps=(1.0, -math.inf))
    with pytest.raises(TypeError, match=r"caps\[0\]: .*got '1' \(str\)"):
        SolveOptions(caps=("1",))
    for w in (math.inf, -1.0, 1e308):
        with pytest.raises(ValueError, match="cap_weight: expected a finite number >= 0"):
            SolveOptions(caps=(1.0,), cap_weight=w)
    assert SolveOptions(caps=(math.inf, 0.5), cap_weight=1e3).caps == (math.inf, 0.5)


@pytest.mark.parametrize("kw, error, words", [
    (dict(cut_work_pairs=0), ValueError, r"SearchTuning.cut_work_pairs: expected a finite number > 0, got 0$"),
    (dict(small_devices="6"), TypeError, r"SearchTuning.small_devices: expected an integer >= 0, got '6' \(str\)"),
    (dict(work_small=-5), ValueError, r"SearchTuning.work_small: expected an integer >= 0, got -5$"),
    (dict(max_depth=-1), ValueError, r"SearchTuning.max_depth: expected an integer >= 1, got -1$"),
    (dict(max_depth=0), ValueError, "SearchTuning.max_depth"),
    (dict(local_max_iter=2.5), TypeError, "SearchTuning.local_max_iter: expected an integer"),
    (dict(patience=math.nan), ValueError, "SearchTuning.patience: expected a finite number >= 0, got nan"),
    (dict(tp_explore=0.0), ValueError, "SearchTuning.tp_explore: expected a finite number > 0"),
    (dict(improve_rel=None), TypeError, "SearchTuning.improve_rel"),
    (dict(final_relocate="yes"), TypeError, "SearchTuning.final_relocate: expected True or False, got 'yes'"),
    (dict(frontier_relax=()), ValueError, "SearchTuning.frontier_relax: expected a non-empty tuple"),
    (dict(frontier_relax=[1.0]), TypeError, "SearchTuning.frontier_relax: expected a tuple"),
    (dict(frontier_relax=(1.0, -2.0)), ValueError, r"SearchTuning.frontier_relax\[1\]: expected a finite number > 0"),
])
def test_search_tuning_is_checked_when_built(kw, error, words):
    with pytest.raises(error, match=words):
        SearchTuning(**kw)
    with pytest.raises(error, match=words):
        dataclasses.replace(SearchTuning(), **kw)


def test_search_tuning_defaults_and_edges_pass():
    SearchTuning()
    SearchTuning(work_small=0, all_orders_memory=0, patience=1, extend_cap=1.0, final_floor=0.0, tp_explore=1.0)


@pytest.fixture(scope="module")
def instance():
    return random_instance(3, n=3, L=6, slots=2)


@pytest.mark.parametrize("kw, error, words", [
    (dict(budget_tolerance="0.01"), TypeError, r"budget_tolerance: expected a fraction in \[0, 1\) or None, got '0.01'"),
    (dict(budget_tolerance=1.5), ValueError, "budget_tolerance: expected a fraction"),
    (dict(preemption=(30, 10)), TypeError, r"preemption: expected a Preemption\(restart_s, checkpoint_every\)"),
    (dict(options="x"), TypeError, "options: expected a SolveOptions or None, got 'x'"),
    (dict(iterations_per_slot="5"), TypeError, "iterations_per_slot: expected an integer >= 1, got '5'"),
    (dict(iterations_per_slot=0), ValueError, "iterations_per_slot: expected an integer >= 1, got 0"),
    (dict(replan="no"), TypeError, "replan: expected True or False"),
    (dict(progress=3), TypeError, "progress: expected a function or None"),
    (dict(policy=3), TypeError, "policy: expected a policy name"),
    (dict(V=1e308), ValueError, r"V: expected a finite real number >= 0 and <= 1e\+12"),
])
def test_run_online_checks_its_arguments(instance, kw, error, words):
    with pytest.raises(error, match=words):
        run_online(instance, stop=1, **kw)


def test_run_online_state_path_is_a_file(instance, tmp_path):
    with pytest.raises(ValueError, match=f"state_path: expected the path of a JSON file, got '{tmp_path}' "
                                         r"\(a folder\)"):
        run_online(instance, stop=1, state_path=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    run_online(instance, stop=1, preemption=Preemption(30.0, 10), state_path=tmp_path / "state.json")


def test_evaluate_and_validate_name_the_expected_type(instance):
    state = instance.state(0)
    plan = solve_slot(state).plan
    with pytest.raises(TypeError, match="evaluate: plan: expected a Plan, got NoneType"):
        evaluate(None, state)
    with pytest.raises(TypeError, match=r"evaluate: state: expected a SlotState \(instance.state\(t\)\), got NoneType"):
        evaluate(plan, None)
    with pytest.raises(TypeError, match="evaluate: state: expected a SlotState.*got Instance"):
        evaluate(plan, instance)
    with pytest.raises(TypeError, match="validate: state: expected a SlotState.*got NoneType"):
        plan.validate(None)
