"""dynpar: joint dynamic data and model parallelism over heterogeneous, changing devices.

The pure-math core (model, cost model, per-slot solver, online controller) imports
neither torch, the CLI nor plotting. Public API (DESIGN.md section 2):

    inst = solver.load_instance("instances/default.toml")
    res = solver.solve_slot(inst.state(0), queues=(0.0, 0.0), V=10.0)
    solver.evaluate(res.plan, inst.state(0))
    solver.run_online(inst, V=10.0, policy="ours")
"""
from __future__ import annotations

import importlib

from .costmodel import Evaluation, evaluate
from .errors import DynparError, InfeasibleSlotError, InstanceError, SolverError
from .model import Budget, Device, Layer, SlotState, Workload
from .plan import Group, Plan, Violation

_LAZY = {
    "load_instance": ("instance", "load_instance"),
    "Instance": ("instance", "Instance"),
    "solve_slot": ("search", "solve_slot"),
    "SlotResult": ("search", "SlotResult"),
    "SolveOptions": ("search", "SolveOptions"),
    "solve_exact": ("oracle", "solve_exact"),
    "run_online": ("online", "run_online"),
    "baselines": ("baselines", None),
}

__all__ = ["Budget", "Device", "DynparError", "Evaluation", "Group", "InfeasibleSlotError",
           "InstanceError", "Layer", "Plan", "SlotState", "SolverError", "Violation", "Workload",
           "evaluate", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        mod, attr = _LAZY[name]
        m = importlib.import_module(f".{mod}", __name__)
        value = m if attr is None else getattr(m, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'solver' has no attribute {name!r}")
