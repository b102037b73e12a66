"""Checks run in the parent process, before any worker starts: does a plan fit the model and world?"""
from __future__ import annotations

from typing import Sequence

from ..errors import DynparError
from ..model import Plan, SlotState
from ..model.plan import structure_violations

# The runtime splits a share into micro-batches of u with a shorter last one, so these
# two solver-side constraints do not bind it (a share only needs >= 1 sample).
_RUNTIME_OK = {"share_multiple", "share_positive"}


class PlanMismatchError(DynparError, ValueError):
    """A plan does not match the module list, the process world or the devices' memory."""


def check_plan(plan: Plan, num_layers: int, world_size: int, batch: int,
               state: SlotState | None = None, where: str = "plan") -> None:
    """Raise PlanMismatchError naming every problem of `plan` for a model of `num_layers`
    modules run on `world_size` processes (device index = rank) with a global batch of
    `batch` samples; with a `state`, also its memory and availability constraints."""
    problems = [v.detail for v in structure_violations(plan, num_layers, world_size, batch)]
    problems += [f"group {gi} share {g.share} < 1 sample" for gi, g in enumerate(plan.groups) if g.share < 1]
    problems += [f"group {gi}: tensor-parallel stages (tp_peers {[list(p) for p in g.tp_peers]}) run under "
                 "`dynpar train` only (runtime.trainer); runtime.run executes one device per stage"
                 for gi, g in enumerate(plan.groups) if any(g.tp_peers)]
    if state is not None:
        if state.workload.num_layers != num_layers:
            problems.append(f"layer count mismatch: the workload has {state.workload.num_layers} "
                            f"layers, the model has {num_layers}")
        if state.n > world_size:
            problems.append(f"the slot state has {state.n} devices but the world only {world_size}")
        if not problems:
            problems += [str(v) for v in plan.validate(state) if v.constraint not in _RUNTIME_OK
                         and v.constraint != "shares_sum"]
    if problems:
        raise PlanMismatchError(f"{where} does not fit: " + "; ".join(problems))


def check_slots(plans: Sequence[Plan], num_layers: int, world_size: int, batch: int,
                states: Sequence[SlotState | None] | None = None) -> None:
    """check_plan for every slot's plan; the message names the slot."""
    for k, p in enumerate(plans):
        st = states[k] if states is not None else None
        check_plan(p, num_layers, world_size, batch, st, where=f"slot {k} plan")
