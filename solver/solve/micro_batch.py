"""Micro-batch size as a decision of the search (issue 10, item 5).

Where the workload allows several micro-batch sizes (`Workload.micro_batch_options()`, those
dividing the batch), the search is run once per size u on the slot with every group held at u
(`single_size`: the workload at u with no other option), each with its full work budget. Their
plans are re-scored on the slot itself (each group's `micro_batch` explicit, the same numbers),
the best is polished group by group, trying each group at every other size (`local.polish`
with `Scorer.micro_batch_entries`: mixed sizes, exact shares by `shares.mixed_shares`), then
every two groups are tried merged into one at every size (`local.merge_at_sizes`: a deeper
pipeline is what lets a larger micro-batch fit) and the result polished again. So the
returned objective is never above that of the search at any single size.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable, Mapping, Sequence

import numpy as np

from ..model.plan import Plan
from ..model.state import SlotState
from ..status import Status
from ..subproblems.cache import SlotCache, slot_cache
from .bounds import slot_lower_bound
from .incumbents import score_incumbents
from .local import merge_at_sizes, polish
from .options import SlotResult, SolveOptions, deadline_of, past, screening, time_left
from .schedules import group_entry
from .scoring import Scorer, slot_result

Solve = Callable[..., SlotResult]
"""solve_slot's signature: (state, queues, V, *, previous_plan, options, cache) -> SlotResult."""


POLISH_SHARE = 0.25
"""The mixing polish's work budget, and that of the merges after it (local.merge_at_sizes), as a
fraction of one search's (SolveOptions.max_structures or the tuning's default)."""


def micro_batch_sizes(state: SlotState) -> tuple[int, ...]:
    """The sizes (samples) a group may train at: the workload's u first, then every other
    option dividing the batch."""
    wl = state.workload
    return (wl.micro_batch,) + tuple(u for u in wl.micro_batch_options()
                                     if u != wl.micro_batch and wl.batch % u == 0)


def single_size(state: SlotState, u: int) -> SlotState:
    """The slot with every group at micro-batch u (samples), its only option (one object per
    (state, u), kept on the state, so that what is cached on it is shared)."""
    wl = state.workload
    if u == wl.micro_batch and not wl.measured_by_micro_batch:
        return state
    known = state.__dict__.setdefault("_single_size", {})
    if u not in known:
        by_u = wl.measured_by_micro_batch
        measured = dict(by_u[u]) if u in by_u else dict(wl.measured)
        known[u] = replace(state, workload=replace(wl, micro_batch=int(u), measured=measured,
                                                   measured_by_micro_batch={}))
    return known[u]


def with_micro_batch(plan: Plan | None, u: int | None) -> Plan | None:
    """plan with every group's micro_batch set to u (None: the workload's own)."""
    if plan is None:
        return None
    return Plan(tuple(replace(g, micro_batch=u) for g in plan.groups))


def solve_by_micro_batch(state: SlotState, queues: Sequence[float] | None, Q: np.ndarray, V: float,
                         solve: Solve, *, previous_plan: Plan | None, options: SolveOptions,
                         cache: SlotCache | None = None, known: Mapping[int, SlotResult] | None = None,
                         screened: Mapping[int, SlotResult] | None = None) -> SlotResult:
    """The search over groups' micro-batch sizes (module doc). queues: as given to solve_slot;
    Q: their checked cost weights; V: checked; solve: solve_slot (passed in, so that this module
    does not import the search); known / screened: {size: the result of `solve` on
    single_size(state, size)} on the full work budget / on the screening budget, already run by
    the caller.

    Every other size is screened: searched on SearchTuning.size_explore of the work budget,
    unless its lower bound (solve.bounds.slot_lower_bound at that size) is no better than the
    best objective found before it (then it is not searched; the message names it). The best
    screened size is searched again on the full budget when its screening objective is within
    SearchTuning.size_recheck of the best objective found (so a size that screens far behind
    is not given the full budget). A time limit (options.time_limit_s) is one deadline for the
    whole call: each screen gets an even share of it (at most the time left), the full search
    and the polish the time left; a size whose turn comes after the deadline is not searched
    (the message names it)."""
    t0 = time.perf_counter()
    sizes = micro_batch_sizes(state)
    u0 = state.workload.micro_batch
    tune = options.tuning
    cache = slot_cache(state, cache)
    sc = Scorer(state, Q, V, options, previous_plan, cache=cache)
    score_incumbents(state, sc, Q, previous_plan, recut_previous=False)
    full = options.max_structures if options.max_structures is not None \
        else tune.work_budget(len(state.available_indices))
    deadline = deadline_of(options, t0)
    share = math.inf if options.time_limit_s is None else options.time_limit_s / len(sizes)
    screen_opt = options if tune.size_explore >= 1 else screening(options, tune.size_explore * full)
    found: dict[int, SlotResult] = dict(known or {})
    screens: dict[int, SlotResult] = {u: r for u, r in (screened or {}).items() if u not in found}
    skipped: list[int] = []
    late: list[int] = []

    charged: dict[int, float] = {}     # per size: its plan's objective in this slot, migration charged

    def charge(u: int, plan: Plan) -> None:
        got = sc.score(tuple(group_entry(g, u0) for g in plan.groups), plan.shares, source=f"search@u{u}")
        if got is not None:
            charged[u] = got.objective

    def search(u: int, opt: SolveOptions) -> SlotResult:
        prev = None
        if previous_plan is not None and all((g.micro_batch or u0) == u for g in previous_plan.groups):
            prev = with_micro_batch(previous_plan, None)
        one = single_size(state, u)
        res = solve(one, queues, V, previous_plan=prev, options=opt, cache=cache.at_size(one))
        if res.plan is not None:
            plan = with_micro_batch(res.plan, None if u == u0 else u)
            charge(u, plan)
        return res

    for u, res in (*found.items(), *screens.items()):
        if res.plan is not None:
            plan = with_micro_batch(res.plan, None if u == u0 else u)
            charge(u, plan)
    for u in sizes:
        if u in found or u in screens:
            continue
        if sc.best is not None and slot_lower_bound(single_size(state, u), Q, V) >= sc.best.objective:
            skipped.append(u)
            continue
        if past(deadline):
            late.append(u)
            continue
        screens[u] = search(u, time_left(screen_opt, deadline, share))
    if screen_opt is not options and screens and not past(deadline):
        u, res = min(screens.items(), key=lambda kv: (kv[1].objective, kv[1].batch_time))
        if res.plan is not None and res.objective <= (1 + tune.size_recheck) * sc.best.objective:
            del screens[u]
            found[u] = search(u, time_left(options, deadline))
    if sc.best is None:
        why = "; ".join(f"u={u}: {r.message}" for u, r in {**found, **screens}.items())
        return SlotResult.infeasible(f"slot {state.t}: no plan at any micro-batch size ({why})",
                                     time.perf_counter() - t0, sc.count)
    if options.local_search:
        sc.restart_budget(POLISH_SHARE * full)
        small = tune.small(len(state.available_indices), sc.L)
        orders = tune.all_orders_small if small else tune.all_orders_polish
        polish(state, sc, sc.best, deadline, orders, tune.polish_rounds)
        before = sc.best
        if len(before.structure) > 1:
            sc.restart_budget(POLISH_SHARE * full)
            if merge_at_sizes(sc, before, deadline) is not before:
                polish(state, sc, sc.best, deadline, orders, tune.polish_rounds)
    chosen = sorted({g.micro_batch or u0 for g in sc.best.plan.groups})
    stopped = ", stopped by the time limit" if past(deadline) else ""
    return slot_result(state, sc, Q, V, Status.FEASIBLE,
                       f"tentative search at each micro-batch size ({_per_size(sizes, found, screens, skipped, late, charged)}), "
                       f"then each group and each two merged at every size{stopped}; best at u = {chosen}, {sc.best.source}", t0)


def _per_size(sizes: Sequence[int], found: Mapping[int, SlotResult], screens: Mapping[int, SlotResult],
              skipped: Sequence[int], late: Sequence[int] = (), charged: Mapping[int, float] | None = None) -> str:
    """'u=1: 65.44, u=2: 78.79 (screened), u=8: not searched (lower bound)' for the message: each
    size's objective as scored in this slot (`charged`: migration from the previous plan included,
    which a search at a size the previous plan does not use leaves out), else its search's."""
    def one(u: int) -> str:
        if u in skipped:
            return f"u={u}: not searched (lower bound above the best)"
        if u in late:
            return f"u={u}: not searched (time limit)"
        r = found.get(u) or screens[u]
        how = " (screened)" if u not in found else ""
        obj = (charged or {}).get(u, r.objective)
        return f"u={u}: {obj:.6g}{how}" if r.plan is not None else f"u={u}: none"
    return ", ".join(one(u) for u in sizes)
