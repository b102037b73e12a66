"""Mutation-audit tests for online.controller: a skipped (infeasible) slot leaves the queues as
they are even when they are positive (module docstring, "Infeasible slots")."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.io.synthetic import random_instance
from solver.model import Budget
from solver.online import run_online
from solver.online.queues import update_queues


@pytest.mark.parametrize("tolerance", [None, 0.01])
def test_skipped_slot_keeps_positive_queues(tolerance):
    """Slot 0 runs over a tight budget (its queue becomes positive); slot 1 has no available
    device (infeasible, skipped): its queues after equal its queues before, not one budget's
    worth of credit less; slot 2 applies the queue law from there."""
    inst = random_instance(0, n=3, L=4, slots=3)
    inst = replace(inst, budgets=(Budget("money", "money", 1e-9),))
    avail = np.array(inst.available, dtype=bool).copy()
    avail[0] = avail[2] = True
    avail[1] = False
    inst = replace(inst, available=avail)
    df = run_online(inst, V=1.0, policy="ours", budget_tolerance=tolerance).rows
    assert list(df["status"] != "infeasible") == [True, False, True]
    q = [(r["queue_money_before"], r["queue_money_after"]) for _, r in df.iterrows()]
    assert q[0][1] > 0.0
    assert q[1] == (q[0][1], q[0][1])
    assert q[2][0] == q[1][1]
    assert (q[2][1],) == update_queues((q[2][0],), (df["cost_money"].iloc[2],), (1e-9,))


def test_tracker_sees_the_slots_left_after_each_slot(monkeypatch):
    """The investment test's `remaining` is the number of slots of the run after this one:
    S - 1 in the first slot, 0 in the last (where no later slot could repay a migration)."""
    import solver.online.controller as controller
    seen = []
    real = controller.track

    def spy(*args, **kwargs):
        seen.append(kwargs["remaining"])
        return real(*args, **kwargs)

    monkeypatch.setattr(controller, "track", spy)
    inst = random_instance(0, n=3, L=4, slots=4)
    run_online(inst, V=1.0, policy="ours", budget_tolerance=0.01, pricing="queue")
    assert seen == [3, 2, 1, 0]
