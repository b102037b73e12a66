"""Mutation-audit tests for online.tracking: the investment test (Tracker.repaid: a plan over
the allowance in this slot that a mix of the slot's plans repays over the slots left), the
tracking weights, the fallback and the pre-flight's tolerance."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver.online.tracking import Tracker


def _charge(costs, per_iteration):
    """What repaid reads of a Charge: this slot's charged costs (migration included) and the
    plan's own cost per iteration (its evaluation, no migration)."""
    return SimpleNamespace(costs=tuple(costs), evaluation=SimpleNamespace(costs=tuple(per_iteration)))


def _kept_excess(tracker: Tracker, ch, remaining: int) -> list[float]:
    """The excess after this slot and `remaining` more at the plan's own cost, by recording them."""
    t = Tracker.from_dict(tracker.to_dict())
    t.record(ch.costs)
    for _ in range(remaining):
        t.record(ch.evaluation.costs)
    return t.excess


def test_investment_is_repaid_over_the_remaining_slots():
    """Tolerance 0, H = 20, nothing spent yet (allowance 0). The move costs 1.5 budgets this slot
    (migration) and 0.9 per slot after: kept for 10 more slots the excess ends at
    0.5 - 10 * 0.1 = -0.5 <= 0, so it is repaid; with one slot left it is not (0.4 > 0)."""
    tr = Tracker(0.0, 20, (10.0,), (True,))
    ch = _charge([15.0], [9.0])
    own = np.array([tr.use(ch.evaluation.costs)])
    assert tr.allowance()[0] == 0.0 and tr.use(ch.costs)[0] == pytest.approx(0.5)
    assert tr.repaid(ch, 10, own)
    assert _kept_excess(tr, ch, 10)[0] <= 0.0
    assert not tr.repaid(ch, 1, own)
    assert _kept_excess(tr, ch, 1)[0] > 0.0
    assert not tr.repaid(ch, 0, own)


def test_investment_repaid_by_a_mix_where_no_one_plan_repays():
    """Two budgets, allowance 0, this slot's plan at +0.2 of each. Plan A uses (+0.3, -0.8) a
    slot, plan B (-0.6, +0.9): neither kept alone for 10 slots repays both, 6 slots of A and 4
    of B do (money 0.2 + 1.8 - 2.4 = -0.4, energy 0.2 - 4.8 + 3.6 = -1.0), which the LP finds."""
    tr = Tracker(0.0, 20, (1.0, 1.0), (True, True))
    ch = _charge([1.2, 1.2], [1.2, 1.2])
    a, b = np.array([0.3, -0.8]), np.array([-0.6, 0.9])
    assert not tr.repaid(ch, 10, np.array([a])) and not tr.repaid(ch, 10, np.array([b]))
    assert tr.repaid(ch, 10, np.array([a, b]))
    assert np.all(tr.use(ch.costs) + 6 * a + 4 * b <= tr.allowance())
    assert not tr.repaid(ch, 1, np.array([a, b]))     # one slot: no mix takes 0.2 back on both


@given(st.floats(0.0, 0.05), st.integers(2, 40), st.floats(0.1, 3.0), st.floats(0.2, 1.5),
       st.integers(0, 40), st.floats(-2.0, 2.0))
def test_repaid_iff_kept_plan_ends_within_the_allowance(eps, H, c, cbar_frac, remaining, spent):
    """With one plan to keep, repaid says exactly whether keeping it for the remaining slots ends
    with the excess within eps * H (checked by recording the slots)."""
    tr = Tracker(eps, H, (1.0,), (True,), excess=[spent])
    ch = _charge([c], [cbar_frac])
    end = _kept_excess(tr, ch, remaining)[0]
    if abs(end - eps * H) > 1e-9:
        assert tr.repaid(ch, remaining, np.array([tr.use(ch.evaluation.costs)])) == (remaining > 0 and end <= eps * H)


class _FakeCharge:
    """A Charge's face as track() reads it: costs per budget, charged seconds, the objective."""

    def __init__(self, time: float, costs, limits):
        self.charged_time, self.costs, self.limits = time, tuple(costs), tuple(limits)
        self.evaluation = SimpleNamespace(costs=self.costs)

    def objective(self, queues, V):
        return V * self.charged_time + sum(q * c / b for q, c, b in zip(queues, self.costs, self.limits))


def test_tracking_weights_leave_unattainable_budgets_to_their_queues():
    """Budget 0 attainable, budget 1 not (preflight). The plan breaks both allowances; the
    tracker's re-solves add a tracking weight to the violated *attainable* budget only: the
    unattainable one keeps its queue in every re-solve (module docstring)."""
    limits = (1.0, 1.0)
    tr = Tracker(0.0, 10, limits, (True, False))
    Q = (0.3, 0.7)
    costs = {"fast": (2.0, 3.0), "cheap": (0.5, 2.5)}
    charge = {p: _FakeCharge(1.0 if p == "fast" else 2.0, c, limits) for p, c in costs.items()}
    asked = []

    def resolve(q):
        asked.append(tuple(q))
        return SimpleNamespace(plan="cheap", candidate_pool=())

    from solver.online.tracking import track
    got = track(tr, "fast", charge["fast"], Q, 1.0, resolve, lambda p: charge[p], None)
    assert asked, "the plan breaks an attainable budget: the tracker must re-solve"
    for q in asked:
        assert q[1] == Q[1]            # unattainable: its queue, no tracking weight
        assert q[0] > Q[0]             # attainable and violated: a tracking weight
    assert got.plan == "cheap"          # admissible on the attainable budget


def test_no_admissible_plan_keeps_the_drift_plus_penalty_plan_where_the_slack_breaks_every_attainable_budget():
    """Budget 0 attainable, budget 1 not. Every candidate breaks budget 0's allowance, and the
    slack plan breaks it too (it only keeps budget 1, the unattainable one). Then the tracker
    keeps the drift-plus-penalty plan (module docstring: "where it breaks every attainable
    budget"); an unattainable budget the slack plan happens to keep is not a reason to switch."""
    limits = (1.0, 1.0)
    tr = Tracker(0.0, 10, limits, (True, False))
    costs = {"plan": (3.0, 3.0), "slack": (2.0, 0.5)}
    charge = {p: _FakeCharge(1.0 if p == "plan" else 5.0, c, limits) for p, c in costs.items()}
    from solver.online.tracking import track
    got = track(tr, "plan", charge["plan"], (1.0, 1.0), 1.0, lambda q: SimpleNamespace(plan=None),
                lambda p: charge[p], "slack")
    assert got.plan == "plan"
    assert got.how == "no admissible plan: drift-plus-penalty plan kept"


def test_preflight_attainable_within_the_tolerance():
    """One money budget. The cheapest achievable average is computed independently (the slack
    plan of every slot, evaluated); a limit it exceeds by less than the tolerance is attainable
    (no line), one it exceeds by more is not (one line)."""
    from dataclasses import replace

    import numpy as np

    from solver.cost import evaluate
    from solver.io.synthetic import random_instance
    from solver.model import Budget
    from solver.online.tracking import cheapest_plan, preflight

    inst = random_instance(11, n=4, L=6, slots=3, p_leave=0.0)
    inst = replace(inst, budgets=(Budget("money", "money", 1.0),))
    slots = range(inst.num_slots)
    avg = float(np.mean([evaluate(cheapest_plan(inst.state(t)), inst.state(t)).costs[0] for t in slots]))
    tol = 0.05
    within = replace(inst, budgets=(Budget("money", "money", avg / (1 + tol / 2)),))
    pre = preflight(within, slots, tol)
    assert pre.cheapest_avg[0] == pytest.approx(avg, rel=1e-9)
    assert pre.attainable == (True,) and pre.lines == ()
    beyond = replace(inst, budgets=(Budget("money", "money", avg / (1 + 2 * tol)),))
    pre = preflight(beyond, slots, tol)
    assert pre.attainable == (False,) and len(pre.lines) == 1
