"""dynpar: joint dynamic data and model parallelism over heterogeneous, changing devices.

Data flows one way through the subpackages:

    io (files) -> model (Instance, SlotState) -> cost, subproblems -> baselines -> solve (Plan)
        -> online (queues, policies, controller) -> cli, runtime (torch)

The core (model, io, cost, subproblems, baselines, solve, online) imports neither torch, the
CLI nor plotting. Public API (README, "Using it from Python"):

    inst = solver.load_instance("instances/default.toml")
    res = solver.solve_slot(inst.state(0), queues=(0.0, 0.0), V=1.0)
    solver.evaluate(res.plan, inst.state(0))
    solver.run_online(inst, V=1.0, policy="ours")
"""
from __future__ import annotations

from . import baselines
from .cost import Evaluation, evaluate
from .errors import DynparError, InfeasibleSlotError, InstanceError
from .io import load_instance
from .model import (
           Budget,
           Device,
           Group,
           Instance,
           Layer,
           Plan,
           SlotState,
           Violation,
           Workload,
)
from .online import run_online
from .solve import SlotResult, SolveOptions, solve_exact, solve_slot
from .status import Status

__all__ = ["Budget", "Device", "DynparError", "Evaluation", "Group", "InfeasibleSlotError", "Instance",
           "InstanceError", "Layer", "Plan", "SlotResult", "SlotState", "SolveOptions", "Status",
           "Violation", "Workload", "baselines", "evaluate", "load_instance", "run_online", "solve_exact",
           "solve_slot"]
