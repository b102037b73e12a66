"""Preemption (docs/BUDGETS.md, "Preemption risk"): the hazards read only the past, the
search's objective is the model's expected loss, awareness never loses to the plain plan under
that objective, the loss is charged to the slot after a plan lost a device, and the instance
and command-line forms of the setting."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import SolveOptions, solve_slot
from solver.cli.commands import main
from solver.cost.costs import idle_rates
from solver.errors import InstanceError
from solver.io.instance import load_instance, save_instance
from solver.io.synthetic import random_instance, random_state
from solver.model import plan_from_json
from solver.model.preemption import Preemption, PreemptionRisk
from solver.online import charge_plan, run_online
from solver.online.preemption import PRIOR_RATE, hazards, preempted, risk_at
from solver.solve.scoring import Scorer

DEFAULT = str(Path(__file__).resolve().parents[1] / "instances" / "default.toml")
COST = Preemption(restart_s=120.0, checkpoint_every=40)

availability = st.integers(2, 12).flatmap(
    lambda S: st.integers(1, 6).flatmap(
        lambda n: st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=S, max_size=S)))


@settings(max_examples=60)
@given(availability, st.data())
def test_hazards_read_only_the_slots_seen(rows, data):
    A = np.array(rows, dtype=bool)
    t = data.draw(st.integers(0, len(A) - 1))
    future = A.copy()
    future[t + 1:] = ~future[t + 1:]
    h = hazards(A, t)
    assert np.array_equal(h, hazards(future, t))
    assert np.all((h > 0) & (h < 1))
    if t == 0:
        assert np.allclose(h, PRIOR_RATE)


def test_a_device_that_leaves_more_often_has_the_larger_hazard():
    A = np.ones((30, 3), dtype=bool)
    A[1::4, 1] = False      # device 1 leaves every fourth slot, device 2 every other
    A[1::2, 2] = False
    h = hazards(A, 29)
    assert h[0] < h[1] < h[2]


def test_probability_and_terms_are_the_models():
    r = PreemptionRisk((0.1, 0.2, 0.0), COST)
    assert r.probability([0, 1]) == pytest.approx(1 - 0.9 * 0.8)
    assert r.probability([2]) == 0.0
    kappa, extra = r.terms([0, 1], 100)
    assert kappa == pytest.approx(0.28 * 20 / 100)
    assert extra == pytest.approx(0.28 * 120 / 100)
    kappa, _ = r.terms([0], 10)       # a slot shorter than the checkpoint interval: half the slot
    assert kappa == pytest.approx(0.1 * 5 / 10)
    assert r.for_units([(0, 1), (2,)]).hazard == pytest.approx((0.28, 0.0))
    with pytest.raises(ValueError, match="hazard"):
        PreemptionRisk((1.0,), COST)
    with pytest.raises(ValueError, match="checkpoint_every"):
        Preemption(1.0, 0)


def _risky(seed: int, n: int = 4) -> tuple:
    state = random_state(seed, n=n, L=6)
    rng = np.random.default_rng(seed)
    risk = PreemptionRisk(tuple(float(x) for x in rng.choice([0.0, 0.05, 0.6], size=n)), COST)
    return state, replace(state, risk=risk)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000))
def test_the_search_objective_is_the_expected_loss_and_beats_the_plain_plan(seed):
    plain_state, state = _risky(seed)
    Q = np.zeros(len(state.budgets))
    res = solve_slot(state, Q, 1.0)
    assert res.success
    kappa, extra = state.risk.terms(res.plan.devices, SolveOptions().iterations_per_slot)
    assert res.objective == pytest.approx(res.evaluation.batch_time * (1 + kappa) + extra, rel=1e-9)
    # the plan found without the hazards, scored under them, is no better
    plain = solve_slot(plain_state, Q, 1.0)
    sc = Scorer(state, Q, 1.0, SolveOptions(), None)
    structure = tuple((g.devices, g.cuts, g.schedule, g.recompute) for g in plain.plan.groups)
    scored = sc.score(structure, source="plain")
    assert scored is not None
    assert res.objective <= scored.objective * (1 + 1e-9)


def test_a_large_enough_loss_keeps_the_plan_off_the_risky_devices():
    state = random_state(3, n=4, L=6)
    risk = PreemptionRisk((0.0, 0.9, 0.9, 0.9), Preemption(1e5, 100))
    res = solve_slot(replace(state, risk=risk), np.zeros(len(state.budgets)), 1.0)
    assert res.success and res.plan.devices == (0,)


def test_the_loss_is_charged_to_the_slot_after_a_device_of_the_plan_left():
    inst = random_instance(5, n=4, L=6, slots=2, p_leave=0.0)
    s0 = inst.state(0)
    p = solve_slot(s0, np.zeros(len(s0.budgets)), 1.0).plan
    gone = p.devices[0]
    avail = inst.available.copy()
    avail[1, gone] = False
    s1 = replace(inst, available=avail).state(1)
    assert preempted(p, s1.available) == (gone,)
    assert preempted(p, s0.available) == ()
    q = solve_slot(s1, np.zeros(len(s1.budgets)), 1.0).plan
    z = charge_plan(p, s0).batch_time
    lost = COST.lost_seconds(z, 100)
    assert lost == pytest.approx(120 + 20 * z)
    base = charge_plan(q, s1, p)
    hit = charge_plan(q, s1, p, preemption_time=lost)
    assert hit.charged_time == pytest.approx(base.charged_time + lost / 100)
    left = [d for d in p.devices if d != gone]
    assert hit.costs == pytest.approx(tuple(np.asarray(base.costs) + idle_rates(s1, left) * lost / 100))


def test_online_runs_pay_the_same_losses_whatever_they_plan():
    """Each slot that runs pays the loss of the last plan that ran when a device of it left in
    this slot or in a slot between them that ran nothing (it could not pay: the loss is carried)."""
    inst = random_instance(11, n=4, L=6, slots=8, p_leave=0.3)
    for aware in (False, True):
        run = run_online(inst, preemption=COST, availability_aware=aware, budget_tolerance=None)
        rows = run.rows
        last = None   # the last row that ran a plan
        for t in range(len(rows)):
            row = rows.iloc[t]
            if not np.isfinite(row["batch_time"]):
                continue
            if last is not None:
                plan = plan_from_json(rows.iloc[last]["plan_json"])
                lost = any(preempted(plan, inst.available[u]) for u in range(last + 1, t + 1))
                assert (row["preemption_time"] > 0) == lost
                if lost:
                    z = rows.iloc[last]["batch_time"]
                    assert row["preemption_time"] == pytest.approx(COST.lost_seconds(z, 100))
            last = t
        assert (rows["risk_time"] > 0).any() == aware
        assert run.summary["preempted_slots"] == int((rows["preemption_time"] > 0).sum())


def test_a_loss_in_a_slot_without_a_plan_is_paid_by_the_next_slot_that_runs(tmp_path):
    """An outside audit's case: the V100 of slot 0's plan leaves in slot 1, where the other
    device (0.5 GB) holds no plan, and is back in slot 2. The restart and the iterations since
    the last checkpoint are paid in slot 2 (they had been paid nowhere)."""
    (tmp_path / "avail.csv").write_text("slot,device,available\n0,big,1\n0,small,1\n1,big,0\n1,small,1\n"
                                        "2,big,1\n2,small,1\n")
    (tmp_path / "p.toml").write_text(
        'name = "p"\nnum_slots = 3\n[workload]\nmodel = "vgg16"\nbatch = 64\nmicro_batch = 8\n'
        '[[kinds]]\nkind = "SMALL"\nlike = "T4"\nmemory_gb = 0.5\n'
        '[[devices]]\nname = "big"\nkind = "V100-SXM2-16GB"\n[[devices]]\nname = "small"\nkind = "SMALL"\n'
        '[preemption]\nrestart_s = 30\ncheckpoint_every = 50\n[traces]\ndevices = "avail.csv"\n')
    run = run_online(load_instance(tmp_path / "p.toml"), budget_tolerance=None)
    rows = run.rows
    assert list(rows["status"]) == ["feasible", "infeasible", "feasible"]
    assert rows["preemption_time"].iloc[2] == pytest.approx(30 + 25 * rows["batch_time"].iloc[0])
    assert run.summary["preempted_slots"] == 1


def test_risk_at_matches_hazards():
    A = random_instance(2, n=5, slots=10, p_leave=0.3).available
    assert risk_at(A, 6, COST).hazard == pytest.approx(tuple(hazards(A, 6)))


def test_instance_preemption_table_round_trips_and_names_bad_fields(tmp_path):
    inst = replace(random_instance(1, n=3, L=4, slots=2), preemption=Preemption(90.0, 25))
    path = save_instance(inst, tmp_path / "p.toml")
    assert load_instance(path).preemption == Preemption(90.0, 25)
    text = path.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("checkpoint_every = 25", "checkpoint_every = 2.5"))
    with pytest.raises(InstanceError, match="preemption.checkpoint_every"):
        load_instance(bad)
    bad.write_text(text.replace("restart_s = 90.0", "restart_s = -1"))
    with pytest.raises(InstanceError, match="preemption.restart_s"):
        load_instance(bad)


def test_cli_preemption_flag(tmp_path, capsys):
    assert main(["run", DEFAULT, "--slots", "3", "--out", str(tmp_path), "--no-plots", "--preemption", "60:20"]) == 0
    out = capsys.readouterr().out
    assert "preemption: 60 s to restart, a checkpoint every 20 iterations" in out
    assert "avg_preemption_time_s" in out
    with pytest.raises(SystemExit):
        main(["run", DEFAULT, "--preemption", "60"])
    assert "RESTART_S:CHECKPOINT_EVERY" in capsys.readouterr().err
    assert main(["run", DEFAULT, "--slots", "2", "--out", str(tmp_path), "--ignore-hazards"]) == 2
    assert "--ignore-hazards" in capsys.readouterr().err


def test_a_tracked_run_says_when_preemptions_were_paid():
    inst = random_instance(11, n=4, L=6, slots=6, p_leave=0.3)
    run = run_online(inst, preemption=COST)
    paid = run.summary["preempted_slots"]
    assert paid > 0
    assert any(f"{paid} slot(s) paid a preemption" in n for n in run.notes)
    assert not any("paid a preemption" in n for n in run_online(inst).notes)
