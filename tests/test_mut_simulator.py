"""Mutation-audit tests for cost.simulator: a simulated plan's batch time is its slowest group's
makespan plus the gradient sync plus the optimizer step, in both the event simulator
(simulate_plan) and the fast recurrence (simulated_batch_time)."""
from __future__ import annotations

import dataclasses

import pytest

from solver.cost.optimizer import optimizer_step_time
from solver.cost.simulator import simulate_plan, simulated_batch_time
from solver.cost.sync import sync_time
from solver.io.synthetic import random_state
from solver.model import Group, Plan


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_simulated_batch_time_adds_sync_and_optimizer_step(schedule):
    state = random_state(2, n=3, L=6, batch=16, micro_batch=4)
    devices = tuple(dataclasses.replace(d, memory_bandwidth=2e12) for d in state.devices)
    state = dataclasses.replace(state, devices=devices,
                                workload=dataclasses.replace(state.workload, optimizer_step="bandwidth"))
    plan = Plan((Group((0, 1), (2, 6), 8, schedule), Group((2,), (6,), 8, schedule)))
    assert not plan.validate(state)
    structure = [(g.devices, g.cuts) for g in plan.groups]
    t_sync, t_opt = sync_time(state, structure), optimizer_step_time(state, structure)
    assert t_sync > 0 and t_opt > 0          # both terms present, so dropping either shows
    sim = simulate_plan(plan, state)
    assert sim.sync_time == t_sync and sim.optimizer_time == t_opt
    assert sim.batch_time == pytest.approx(max(sim.group_times) + t_sync + t_opt, rel=1e-12)
    assert simulated_batch_time(plan, state) == pytest.approx(sim.batch_time, rel=1e-12)
