"""The problem model: devices, workload, budgets, the state of one slot, plans and the memory
constraint (DESIGN.md section 2).

Units throughout: seconds, bytes, FLOP, FLOP/s, watts, US dollars. Everything here is frozen;
a `SlotState` is what is true in one slot and is all that the per-slot solver sees. This
package imports nothing else of `solver`.
"""
from .cluster import BUDGET_KINDS, Budget, Device
from .memory import MEM_RTOL, NO_CAP, memory_use, share_cap, stage_params_and_stash
from .plan import (
           Group,
           Plan,
           Violation,
           plan_from_dict,
           plan_from_json,
           plan_to_dict,
           plan_to_json,
)
from .state import Instance, SlotState
from .workload import Layer, Workload

__all__ = ["BUDGET_KINDS", "Budget", "Device", "Group", "Instance", "Layer", "MEM_RTOL", "NO_CAP",
           "Plan", "SlotState", "Violation", "Workload", "memory_use", "plan_from_dict", "plan_from_json",
           "plan_to_dict", "plan_to_json", "share_cap", "stage_params_and_stash"]
