"""Micro-batch size as a decision of the search (issue 10, item 5).

Where the workload allows several micro-batch sizes (`Workload.micro_batch_options()`, those
dividing the batch), the search is run once per size u on the slot with every group held at u
(`single_size`: the workload at u with no other option), each with its full work budget. Their
plans are re-scored on the slot itself (each group's `micro_batch` explicit, the same numbers),
the best is polished group by group, trying each group at every other size (`local.polish`
with `Scorer.micro_batch_entries`: mixed sizes, exact shares by `shares.mixed_shares`). So the
returned objective is never above that of the search at any single size.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from ..model.plan import Plan
from ..model.state import SlotState
from ..status import Status
from ..subproblems.cache import SlotCache, slot_cache
from .incumbents import score_incumbents
from .local import polish
from .options import SlotResult, SolveOptions
from .schedules import group_entry
from .scoring import Scorer, slot_result

Solve = Callable[..., SlotResult]
"""solve_slot's signature: (state, queues, V, *, previous_plan, options, cache) -> SlotResult."""


POLISH_SHARE = 0.25
"""The mixing polish's work budget, as a fraction of one search's (SolveOptions.max_structures
or the tuning's default)."""


def micro_batch_sizes(state: SlotState) -> tuple[int, ...]:
    """The sizes (samples) a group may train at: the workload's u first, then every other
    option dividing the batch."""
    wl = state.workload
    return (wl.micro_batch,) + tuple(u for u in wl.micro_batch_options()
                                     if u != wl.micro_batch and wl.batch % u == 0)


def single_size(state: SlotState, u: int) -> SlotState:
    """The slot with every group at micro-batch u (samples), its only option."""
    wl = state.workload
    if u == wl.micro_batch and not wl.measured_by_micro_batch:
        return state
    by_u = wl.measured_by_micro_batch
    measured = dict(by_u[u]) if u in by_u else dict(wl.measured)
    return replace(state, workload=replace(wl, micro_batch=int(u), measured=measured, measured_by_micro_batch={}))


def _at_size(plan: Plan | None, u: int | None) -> Plan | None:
    """plan with every group's micro_batch set to u (None: the workload's own)."""
    if plan is None:
        return None
    return Plan(tuple(replace(g, micro_batch=u) for g in plan.groups))


def solve_by_micro_batch(state: SlotState, queues: Sequence[float] | None, Q: np.ndarray, V: float,
                         solve: Solve, *, previous_plan: Plan | None, options: SolveOptions,
                         cache: SlotCache | None = None) -> SlotResult:
    """The search over groups' micro-batch sizes (module doc). queues: as given to solve_slot;
    Q: their checked cost weights; V: checked; solve: solve_slot (passed in, so that this module
    does not import the search). A time limit (options.time_limit_s) is split evenly between
    the sizes."""
    t0 = time.perf_counter()
    sizes = micro_batch_sizes(state)
    u0 = state.workload.micro_batch
    cache = slot_cache(state, cache)
    sc = Scorer(state, Q, V, options, previous_plan, cache=cache)
    score_incumbents(state, sc, Q, previous_plan, recut_previous=False)
    found: list[tuple[int, SlotResult]] = []
    per_size = options if options.time_limit_s is None else \
        replace(options, time_limit_s=options.time_limit_s / len(sizes))
    for u in sizes:
        st = single_size(state, u)
        prev = None
        if previous_plan is not None and all((g.micro_batch or u0) == u for g in previous_plan.groups):
            prev = _at_size(previous_plan, None)
        res = solve(st, queues, V, previous_plan=prev, options=per_size, cache=None)
        found.append((u, res))
        if res.plan is not None:
            plan = _at_size(res.plan, None if u == u0 else u)
            sc.score(tuple(group_entry(g, u0) for g in plan.groups), plan.shares, source=f"search@u{u}")
    if sc.best is None:
        why = "; ".join(f"u={u}: {r.message}" for u, r in found)
        return SlotResult.infeasible(f"slot {state.t}: no plan at any micro-batch size ({why})",
                                     time.perf_counter() - t0, sc.count)
    if options.local_search:
        tune = options.tuning
        full = options.max_structures if options.max_structures is not None \
            else tune.work_budget(len(state.available_indices))
        sc.tries, sc.budget = 0, POLISH_SHARE * full
        small = tune.small(len(state.available_indices), sc.L)
        polish(state, sc, sc.best, math.inf, tune.all_orders_small if small else tune.all_orders_polish,
               tune.polish_rounds)
    chosen = sorted({g.micro_batch or u0 for g in sc.best.plan.groups})
    per_u = ", ".join(f"u={u}: {r.objective:.6g}" if r.plan is not None else f"u={u}: none" for u, r in found)
    return slot_result(state, sc, Q, V, Status.FEASIBLE,
                       f"tentative search at each micro-batch size ({per_u}), then each group at every size; "
                       f"best at u = {chosen}, {sc.best.source}", t0)
