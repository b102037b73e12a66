"""The fixed candidates every per-slot solve scores first (search and oracle alike): every
baseline with its own shares and with re-optimised shares, the cheapest known plan and the
previous plan when it is still valid. They make the lower bounds bite early, and they are why
a result never loses to a baseline or to keeping the previous plan."""
from __future__ import annotations

import numpy as np

from .. import baselines
from ..model.plan import Plan, from_physical
from ..model.state import SlotState
from ..subproblems.cache import SlotCache
from .schedules import group_entry, plain_at_micro_batch
from .scoring import Scorer


def fixed_candidates(state: SlotState, Q: np.ndarray, previous_plan: Plan | None, cache: SlotCache
                     ) -> list[tuple[str, Plan]]:
    """(source, plan): each baseline of baselines.ALL that has a plan, "cheapest"
    (baselines.cheapest for the cost weights Q) and "previous" when previous_plan passes
    Plan.validate in this state. On a state of TP units (solve.tp) the baselines are left out
    (they keep degree 1 and are scored in the degree-1 solve) and the previous plan, over
    physical devices, is read over the units where each of its stages is one."""
    fixed = [] if state.tp is not None else [(name, f(state, cache=cache)) for name, f in baselines.ALL.items()]
    fixed.append(("cheapest", baselines.cheapest(state, Q, [p for _, p in fixed], cache=cache)))
    if previous_plan is not None and state.members is not None:
        previous_plan = from_physical(previous_plan, state)
    if previous_plan is not None and not previous_plan.validate(state):
        fixed.append(("previous", previous_plan))
    return [(name, p) for name, p in fixed if p is not None]


def score_incumbents(state: SlotState, sc: Scorer, Q: np.ndarray, previous_plan: Plan | None,
                     *, recut_previous: bool) -> None:
    """Score the fixed candidates on `sc` (before any work budget counts): each with its own
    shares (source = its name) and with exact shares (name + "+lp"), except a plan with a
    pipelined 1F1B group under SolveOptions(one_f_one_b=False) (a runtime without 1F1B: only
    its GPipe form, below); with recut_previous, the previous plan's device groups are also
    cut afresh for this slot ("previous-recut")."""
    for name, p in fixed_candidates(state, Q, previous_plan, sc.cache):
        s = tuple(group_entry(g, sc.u) for g in p.groups)
        if sc.opt.one_f_one_b or not any(g.schedule == "1f1b" and g.num_stages > 1 for g in p.groups):
            sc.score(s, p.shares, source=name)
            sc.score(s, source=name + "+lp")
        gp = plain_at_micro_batch(s)
        if gp != s:         # the same groups under GPipe without recomputation, with exact shares
            sc.score(gp, source=name + "-gpipe+lp")
        if recut_previous and name == "previous":
            sc.score_groups([g.devices for g in p.groups], source="previous-recut", prune=False)
