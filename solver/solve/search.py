"""The per-slot solver: tentative search over groupings and partitions + exact batch shares
(DESIGN.md section 3, "Per-slot solution: tentative search + linear solving").

The search scores candidate structures (solve.scoring) from several families (solve.families:
data parallel over the devices that hold the model, link-locality clusters, speed-balanced
groups, contiguous chunks of a fast-link chain, single pipelines), the previous plan, every
baseline and the cheapest plan, then improves the best ones by local moves (solve.local: move,
swap, drop, add a device; split, merge groups) and polishes cuts (frontier cut sets) and orders
of the winner. Every baseline plan is scored with its own shares and with re-optimised shares,
so the result never loses to a baseline.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from .. import baselines
from ..model.plan import Plan
from ..model.state import SlotState
from ..solve.oracle import solve_exact
from .families import families
from .local import local_search, polish
from .options import SlotResult, SolveOptions, default_work_budget
from .scoring import Scorer, _result, check_queues, infeasible_reason


def solve_slot(state: SlotState, queues: Sequence[float] = (), V: float = 1.0, *,
               previous_plan: Plan | None = None, options: SolveOptions | None = None) -> SlotResult:
    """Choose the plan minimising V T + sum_k Q_k c_k / Cbar_k (+ amortised migration) in this
    slot. queues: in budget order and budget units (solver.online.queues); V: weight of one second of
    batch time against one budget's worth of cost. Returns a SlotResult (status, message).
    """
    t0 = time.perf_counter()
    opt = options or SolveOptions()
    Q = check_queues(state, queues)
    if not (np.isfinite(V) and V >= 0):
        raise ValueError(f"V must be finite and >= 0, got {V}")
    if opt.exact:
        return solve_exact(state, queues, V, previous_plan=previous_plan if opt.replan else None,
                           iterations_per_slot=opt.iterations_per_slot, keep_candidates=opt.keep_candidates)
    why = infeasible_reason(state)
    if why:
        return SlotResult(None, math.inf, (), math.inf, "infeasible", why, time.perf_counter() - t0)
    sc = Scorer(state, Q, V, opt, previous_plan)
    n = len(state.available_indices)
    small = n <= 6 and sc.L <= 24          # small slots: all orders of groups up to 4 devices
    max_depth = min(n, sc.L, 8 if n > 16 else 16)
    deadline = t0 + opt.time_limit_s if opt.time_limit_s is not None else math.inf
    sc.deadline = deadline

    # 1. the baselines (own shares and re-optimised), the cheapest plan, the previous plan
    fixed = [(name, f(state)) for name, f in baselines.ALL.items()]
    fixed.append(("cheapest", baselines.cheapest(state, Q, [p for _, p in fixed])))
    if previous_plan is not None and not previous_plan.validate(state):
        fixed.append(("previous", previous_plan))
    for name, p in fixed:
        if p is None:
            continue
        s = tuple((g.devices, g.cuts) for g in p.groups)
        sc.score(s, p.shares, source=name)
        sc.score(s, source=name + "+lp")
        if name == "previous":
            sc.score_groups([g.devices for g in p.groups], source="previous-recut", prune=False)
    # 2. candidate families (from here on the work budget counts)
    sc.tries = 0
    sc.budget = opt.max_structures if opt.max_structures is not None else default_work_budget(n, sc.L)
    for name, groups in families(state, sc, max_depth):
        if sc.exhausted():
            break
        sc.score_groups(groups, source=name)
    if sc.best is None:
        return SlotResult(None, math.inf, (), math.inf, "infeasible",
                          f"slot {state.t}: no device or group of available devices can hold the model "
                          f"({state.workload.name}) with one micro-batch", time.perf_counter() - t0, sc.count)
    # 3. local search from the best few distinct structures, then polish the winner
    if opt.local_search:
        starts = sorted({id(s): s for s in sc._seen.values() if s is not None}.values(),
                        key=lambda s: (s.objective, s.batch_time))[:3]
        for s in starts:
            if sc.exhausted():
                break
            local_search(state, sc, s, max_depth, deadline)
        top = sorted({s.structure: s for s in sc._seen.values() if s is not None}.values(),
                     key=lambda s: (s.objective, s.batch_time))[:5 if small else 2]
        for s in top:
            polish(state, sc, s, deadline, 4 if small else 2)
        local_search(state, sc, sc.best, max_depth, deadline, max_iter=5)
        polish(state, sc, sc.best, deadline, 4 if small else 2)
    return _result(state, sc, Q, V, "feasible", f"tentative search: {sc.count} structures scored ({sc.tries:.0f} work units), "
                   f"best from {sc.best.source}", t0)
