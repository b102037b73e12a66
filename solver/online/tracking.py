"""Budget tracking: every budget within a stated tolerance over the run (docs/BUDGETS.md).

Realised excess of budget k after the executed slots so far, in budgets' worth:

    E_k = sum_s (c_k(s) / Cbar_k - 1),     overshoot at the horizon = E_k(H) / H_exec.

Allowance. With tolerance eps and a run of H slots, a plan is admissible in a slot when its
charged cost keeps E_k <= eps * H for every budget k:

    y_k = c_k / Cbar_k - 1 <= a_k = eps * H - E_k.

The drift-plus-penalty plan is kept when it is admissible (the usual case: the tracker binds
only when the slack eps * H is used up). Otherwise the tracker adds a tracking weight
lambda_k to the queue of each violated budget and re-solves (lambda = m * max(V T, max_k Q_k),
m = 1, 4, 16, 64 up to the first admissible plan, then BISECT_STEPS = 3 geometric bisection
steps on the bracket between the last weight that was not and the first that was; given
`valid`, the plans of these searches' candidate
pools too), then, given `resolve_capped`, one search at the slot's weights whose objective
also pays CAP_WEIGHT * max(V T, max_k Q_k) per budget's worth above the allowance (SolveOptions.caps:
a weight's search returns a point of the hull of the slot's frontier, and the plan the allowance
needs may lie between two), and finally offers the slack plan x0 (the cheapest plan, the search at V = 0
with every queue 1, charged with migration like any plan). Among the candidates it takes the
admissible one with the least slot objective V T + sum_k Q_k c_k / Cbar_k at the real queues.
When no candidate is admissible (the premise below fails in this slot), each budget's own
cheapest plan of the slot joins them (`alone`; with two or more budgets the plan that keeps
them all may trade one for another), then the investment test follows: the candidate of least
objective (the cheapest plan from the previous one, V = 0 with migration weighed, among them)
that a mix of the candidates' own uses per iteration (no migration), taken over half the slots
left R' = ceil(R / 2), repays: y_k + R' sum_j pi_j ybar_jk <= a_k for every attainable budget
(online.mixes; one plan kept is the mix of that plan alone). It catches a move whose migration
is paid once and repaid later, and a plan that overspends one budget where the slot's other
plans, taken in turn, overspend another: neither can the per-slot test see. The half is a
margin: the coming slots may not offer these plans, and a run takes one plan per slot.
When none passes either, the budgets the slack plan keeps within their allowance are kept: among
the candidates within the allowance of each such budget (the slack plan is one), those of least
total excess over the other attainable budgets' allowances, and of those the least slot
objective (row: `no admissible plan: within the allowance of the budgets the slack plan keeps
(...)`): a budget the slack plan itself breaks is kept as close to its allowance as the others
allow (the controller's note names it). Only without a slack plan, or where it breaks every
attainable budget, does the tracker keep the drift-plus-penalty plan, and it says so in the row
(the queues go on pushing the costs down, and guarantee (a) still bounds the overshoot).

Guarantee (c). If in every slot the slack plan x0 is admissible, as it is whenever
c_k(x0) <= Cbar_k for every budget (charged, migration included), then E_k <= eps * H after
every slot, so the average overshoot
over the executed slots is at most eps * H / H_exec (= eps when no slot is skipped).
Proof by induction: E_k <= eps * H makes a_k >= 0 >= y_k(x0), so x0 is admissible, and the
tracker only accepts admissible plans. Per budget: if x0 keeps budget k within its allowance in
every slot (c_k(x0) <= Cbar_k is enough), E_k <= eps * H after every slot even where x0 breaks
another budget, unless the investment test takes a plan there (one that a mix of the slot's
plans would repay), or k is one of budgets kept together (the fallback trades those against
each other): every other pick keeps each budget x0 keeps. Guarantee (a) is untouched: the
queues follow the same law whatever plan is chosen, so the overshoot is still <= Q_k(H) / H.

Unattainable budgets (the documented rule). The pre-flight check (`preflight`) compares each
budget with its cheapest achievable average (the cheapest plan of every slot, and for K >= 2
the search weighting that budget alone); when even that is over the limit by more than the
tolerance, one line says so with the figure. Such a budget cannot be met, so it yields to the
others: admissibility is judged on the attainable budgets only, and the unattainable budget is
left to its queue, which keeps growing, so its weight in the slot objective comes to dominate
and the controller spends as little on it as the other budgets and the batch time allow.
Budgets that each can be met alone are then checked together (`_together`, an LP over mixes of
the slots' cheapest plans): budgets that cannot be met together are named in one line with the
level one of those plans per slot reaches (a MILP), marked unattainable, and tracked to that
level (each over its limit by the same fraction); budgets that a mix meets but no one kind of
cheapest plan does are named as met only by alternating plans (outside guarantee (c)'s
premise). As slots arrive, a slot whose slack plan itself is not admissible is noted once per
budget (the guarantee's premise fails there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..model.plan import Plan
from ..model.state import Instance, SlotState
from ..solve import SolveOptions, solve_slot
from .charge import Charge
from .mixes import Excess, least_excess

DEFAULT_TOLERANCE = 0.01
LAMBDA_STEPS = (1.0, 4.0, 16.0, 64.0)
BISECT_STEPS = 3
"""Geometric bisection steps between the last tracking weight whose plan is over the allowance
and the first whose plan is within it (a factor 4 apart): the bracket ends a factor
4 ** (1 / 2 ** BISECT_STEPS) = 1.19 wide. The least weight with an admissible plan is the one whose
plan gives up the least batch time for the allowance; one step (before) left a factor 2, and on
`hetero_strong_gpt2` slot 7 the tracker took a 4.88 s plan at x8 where x5.66 gives 3.69 s, both
within the allowance (its fastest plan, 1.98 s, over it)."""
CAP_WEIGHT = 1e3
"""The capped search's penalty per budget's worth above the allowance, in units of
max(V T, max_k Q_k) (the plan's batch time weighed, or the largest queue): far above what any
speed is worth, so the search keeps within the caps where it finds a way (set before any
measurement; not tuned)."""


def cheapest_plan(state: SlotState, options: SolveOptions | None = None,
                  weights: Sequence[float] | None = None) -> Plan | None:
    """The slack plan x0 of a slot: the search at V = 0 with queues `weights` (default every
    queue 1: the least sum_k c_k / Cbar_k), migration not weighed; None when the slot has no plan."""
    K = len(state.budgets)
    opts = replace(options or SolveOptions(), replan=False, keep_candidates=False)
    res = solve_slot(state, tuple(weights) if weights is not None else (1.0,) * K, 0.0, options=opts)
    return res.plan


def own_cheapest_plans(state: SlotState, options: SolveOptions | None = None) -> list[Plan | None]:
    """Per budget k, the slot's cheapest plan for k alone (`cheapest_plan` weighting k only)."""
    K = len(state.budgets)
    return [cheapest_plan(state, options, [1.0 if j == k else 0.0 for j in range(K)]) for k in range(K)]


@dataclass(frozen=True)
class Preflight:
    """Budgets against the cheapest plans, before the run.

    plans[i]: the slack plan of slots[i] (None: no plan); costs[i]: its costs per budget per
    iteration (no migration; nan without a plan); cheapest_avg: per budget, the least average
    cost the check found (USD or J per iteration); attainable: cheapest_avg <= (1 + tol) limit,
    and not among budgets that cannot be met together; lines: one line per unattainable budget
    or group of budgets, and per device budget whose device is available in none of the slots;
    targets: per budget, the limit the tracker keeps it to (USD or J per
    iteration): its own, or for budgets that cannot be met together the limit times 1 + the
    least common excess one of the slots' cheapest plans per slot reaches; tracked: the budgets
    the tracker keeps (attainable, or attainable alone but not together)."""

    slots: tuple[int, ...]
    plans: tuple[Plan | None, ...]
    costs: tuple[tuple[float, ...], ...]
    cheapest_avg: tuple[float, ...]
    attainable: tuple[bool, ...]
    lines: tuple[str, ...]
    targets: tuple[float, ...] = ()
    tracked: tuple[bool, ...] = ()

    def plan(self, t: int) -> Plan | None:
        return self.plans[self.slots.index(t)] if t in self.slots else None


def _avg_costs(instance: Instance, slots: Sequence[int], plans: Sequence[Plan | None]) -> np.ndarray:
    from ..cost import evaluate
    K = len(instance.budgets)
    rows = [evaluate(p, instance.state(t)).costs if p is not None else (math.nan,) * K
            for t, p in zip(slots, plans)]
    return np.asarray(rows, dtype=float).reshape(len(slots), K)


def preflight(instance: Instance, slots: Sequence[int], tolerance: float,
              options: SolveOptions | None = None) -> Preflight:
    """Compare each budget with the cheapest achievable average over `slots` (module
    docstring). For K >= 2, when the slack plans overshoot some budget on average, every slot's
    own cheapest plan of each budget is found too (V = 0, that budget alone weighted): a budget
    is re-checked against them, and the budgets that are attainable one by one are checked
    together (`_together`)."""
    slots = tuple(int(t) for t in slots)
    K = len(instance.budgets)
    limits = np.asarray([b.limit for b in instance.budgets], dtype=float)
    plans = tuple(cheapest_plan(instance.state(t), options) for t in slots)
    costs = _avg_costs(instance, slots, plans)
    ran = ~np.isnan(costs[:, 0]) if K else np.ones(len(slots), bool)
    best = np.nanmean(costs[ran], axis=0) if ran.any() and K else np.full(K, math.nan)
    own: list[np.ndarray] = []    # own[k]: per slot, the costs of budget k's own cheapest plan
    if K >= 2 and ran.any() and np.any(best > limits * (1 + tolerance)):
        alone = [own_cheapest_plans(instance.state(t), options) if p is not None else [None] * K
                 for t, p in zip(slots, plans)]
        own = [_avg_costs(instance, slots, [a[k] for a in alone]) for k in range(K)]
        best = np.minimum(best, [float(np.nanmean(np.fmin(own[k][:, k], costs[:, k])[ran])) for k in range(K)])
    attainable = [bool(not ran.any() or best[k] <= b.limit * (1 + tolerance)) for k, b in enumerate(instance.budgets)]
    names = [d.name for d in instance.devices]
    idle = [f"budget {b.name} caps device {b.device}, which is available in none of the run's slots: it costs "
            f"nothing and binds nothing" for b in instance.budgets
            if b.kind == "device_energy" and b.device in names
            and not instance.available[list(slots), names.index(b.device)].any()]
    lines = idle + [f"budget {b.name} cannot be met on average: the cheapest achievable average is "
             f"{best[k]:.6g} per iteration, {_pct(best[k] / b.limit - 1)} over its limit "
             f"{b.limit:.6g}; the other budgets are kept first and {b.name} as low as the "
             f"controller can" for k, b in enumerate(instance.budgets) if not attainable[k]]
    tracked, targets = list(attainable), limits.copy()
    if own and sum(attainable) >= 2:
        line, attainable, relax = _together(instance, [np.vstack([costs[i], *(o[i] for o in own)])
                                                       for i in np.flatnonzero(ran)], attainable, tolerance)
        lines += [line] if line else []
        targets = limits * (1.0 + relax)
    return Preflight(slots, plans, tuple(tuple(float(x) for x in r) for r in costs), tuple(float(x) for x in best),
                     tuple(attainable), tuple(lines), tuple(float(x) for x in targets), tuple(tracked))


def _together(instance: Instance, per_slot: Sequence[np.ndarray], attainable: Sequence[bool],
              tolerance: float) -> tuple[str, list[bool], np.ndarray]:
    """The budgets attainable one by one, checked together over the slots' cheapest plans
    (`per_slot[i]`: the costs of the slack plan and of each budget's own cheapest plan in one
    slot; rows with no plan are dropped).

    When no mix of them over the slots (online.mixes, the LP) keeps those budgets within
    (1 + tolerance) of their limits together, the budgets that bind the mix cannot be met
    together: that is proved (over these plans) by the LP, whose s* is a lower bound of their
    common excess. Their level is then the MILP's (one of these plans per slot, as a run takes
    them, with the other budgets within their limits; where no choice keeps those, every budget
    grows): what a run of these plans can reach knowing the whole trace. A line names them with
    both figures, and the tracker aims them at the MILP's level (targets (1 + s / (1 + tolerance))
    times the limits, so that its tolerance on top gives the level; each over by the same
    fraction).

    When a mix keeps them but no one kind of plan does in every slot (the slack plans, or one
    budget's own cheapest plans), a line says that they are met together only by alternating
    plans, which guarantee (c) does not cover, and whether one of these plans per slot can meet
    them (the MILP) or a run of them ends over, and by how much; they stay tracked at their
    limits (other plans of the slots may meet them). Returns (the line or "", the attainable
    flags, per budget the fraction its target is above its limit)."""
    names = [b.name for b in instance.budgets]
    limits = np.asarray([b.limit for b in instance.budgets], dtype=float)
    uses = [u[~np.isnan(u).any(axis=1)] / limits for u in per_slot]
    uses = [u for u in uses if len(u)]
    att = np.asarray(attainable, dtype=bool)
    relax = np.zeros(len(limits))
    if not uses:
        return "", list(attainable), relax
    bounds = np.full(len(limits), 1.0 + tolerance)

    def solved(ex: Excess, what: str) -> Excess:
        if not ex.ok:
            raise RuntimeError(f"budget pre-flight: the {what} of the budgets together ended with HiGHS "
                               f"status {ex.status}")
        return ex

    ex = solved(least_excess(uses, bounds, att), "LP")
    if ex.s > 1e-9:
        bind = [k for k in np.flatnonzero(att) if ex.binding[k]] or list(np.flatnonzero(att))
        grows = np.isin(np.arange(len(limits)), bind)
        one = least_excess(uses, bounds, att, integral=True, grows=grows)
        if one.status == "Infeasible":
            one = least_excess(uses, bounds, att, integral=True)
        mix = _pct(tolerance + ex.s)
        if one.status == "Time limit reached" and not one.ok:   # no choice found in time: the LP's level
            s = ex.s
            reach = (f"no choice of one of the slots' cheapest plans per slot was found in time; a mix of them "
                     f"that may split a slot is {mix} over each limit")
        else:
            s = max(solved(one, "MILP").s, ex.s)
            best = "at best" if one.status == "Optimal" else "with the best choice found in time"
            reach = (f"one of the slots' cheapest plans per slot, the whole trace known, reaches "
                     f"{_pct(tolerance + s)} over each limit {best} (a mix that may split a slot: {mix})")
        who = " and ".join(names[k] for k in bind)
        flags = [a and k not in bind for k, a in enumerate(attainable)]
        relax[bind] = s / (1.0 + tolerance)    # the tracker's tolerance on top lands on the level
        return (f"budgets {who} cannot be met together on average (each can alone): {reach}; the tracker aims "
                f"each at {_pct(tolerance + s)} (alternating plans, which guarantee (c) does not cover), and the "
                f"other budgets are kept first"), flags, relax
    kinds = np.stack([np.stack([u[j] for u in per_slot]) for j in range(len(per_slot[0]))])  # (kind, slot, K)
    one_kind = [bool(np.all((np.nanmean(kinds[j], axis=0) / limits)[att] <= bounds[att])) for j in range(len(kinds))]
    if any(one_kind):
        return "", list(attainable), relax
    one = least_excess(uses, bounds, att, integral=True)
    who = " and ".join(names[k] for k in np.flatnonzero(att))
    if one.status == "Time limit reached" and not one.ok:
        how = "no choice of one of them per slot was found in time; a mix that splits slots meets them"
    elif solved(one, "MILP").s <= 1e-9:
        how = "one of them per slot meets them, the whole trace known"
    else:
        best = "at best" if one.status == "Optimal" else "with the best choice found in time"
        how = (f"one of them per slot, the whole trace known, ends {_pct(tolerance + one.s)} over {best}; a mix "
               f"that splits slots meets them")
    return (f"budgets {who} can be met together only by alternating plans across slots (no one kind of the slots' "
            f"cheapest plans meets them all; {how}): guarantee (c) does not cover them, a run may end over; "
            f"the tracker trades them slot by slot at their limits"), list(attainable), relax


@dataclass
class Tracker:
    """The tracker's state over a run (JSON-able for resume): tolerance eps (fraction), horizon
    H (slots), limits Cbar_k (the targets it keeps), attainable flags (the budgets it keeps),
    excess E_k (budgets' worth), executed slots, binding slots (where the drift-plus-penalty
    plan was replaced), the notes so far, and together: the budgets kept to a common level
    because they cannot be met together (preflight), which the fallback trades against each
    other rather than keeping those the slack plan keeps."""

    tolerance: float
    horizon: int
    limits: tuple[float, ...]
    attainable: tuple[bool, ...]
    excess: list[float] = field(default_factory=list)
    executed: int = 0
    binding: int = 0
    noted: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    together: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (self.tolerance >= 0 and math.isfinite(self.tolerance)):
            raise ValueError(f"budget tolerance must be a finite fraction >= 0, got {self.tolerance}")
        K = len(self.limits)
        self.excess = list(self.excess) or [0.0] * K
        self.noted = list(self.noted) or [False] * K
        self.together = list(self.together) or [False] * K

    def allowance(self) -> np.ndarray:
        """a_k = eps * H - E_k (budgets' worth) for the coming slot."""
        return self.tolerance * self.horizon - np.asarray(self.excess, dtype=float)

    def use(self, costs: Sequence[float]) -> np.ndarray:
        """y_k = c_k / Cbar_k - 1."""
        return np.asarray(costs, dtype=float) / np.asarray(self.limits, dtype=float) - 1.0

    def over(self, costs: Sequence[float]) -> np.ndarray:
        """Per budget, the excess of y_k over the allowance a_k (budgets' worth; 0 within it)."""
        over = np.maximum(self.use(costs) - self.allowance(), 0.0)
        over[over < 1e-12] = 0.0
        return over

    def violations(self, costs: Sequence[float]) -> tuple[float, float]:
        """(attainable budgets' total excess over their allowance, unattainable ones')."""
        over = self.over(costs)
        att = np.asarray(self.attainable, dtype=bool)
        return float(over[att].sum()), float(over[~att].sum())

    def repaid(self, ch: Charge, remaining: int, uses: np.ndarray) -> bool:
        """The investment test: some mix of the plans whose uses per iteration (no migration) are
        the rows of `uses` (each y = c / Cbar - 1), taken over the `remaining` slots after this
        one, ends every attainable budget within its allowance after this plan:
        y_k + remaining * sum_j pi_j uses_jk <= a_k (online.mixes; one plan kept is the mix of
        that plan alone)."""
        att = np.asarray(self.attainable, dtype=bool)
        if remaining <= 0 or not len(uses):
            return False
        need = (self.allowance() - self.use(ch.costs)) / remaining
        if np.any((np.min(uses, axis=0) > need + 1e-12)[att]):   # not even the best of each budget
            return False
        ex = least_excess([uses], need, att)
        if not ex.ok:
            raise RuntimeError(f"budget tracker: the investment test's LP ended with HiGHS status {ex.status}")
        return ex.s <= 1e-12

    def record(self, costs: Sequence[float]) -> None:
        self.excess = [float(e + y) for e, y in zip(self.excess, self.use(costs))]
        self.executed += 1

    def note_slack(self, t: int, names: Sequence[str], costs: Sequence[float], run: Sequence[float],
                   limits: Sequence[float] | None = None) -> None:
        """Note once per budget a slot whose slack plan (costs) is not admissible, with the use of
        the plan run (run: its charged costs), before the slot is recorded. The slack plan is the
        least sum over budgets, so one budget alone may have a cheaper plan (the one run, even).
        limits: the budgets' own limits; where the tracker keeps a budget to another level (budgets
        that conflict, `preflight`), the note says its uses are of that level, and which it is."""
        y, a, z = self.use(costs), self.allowance(), self.use(run)
        for k, name in enumerate(names):
            if y[k] > a[k] + 1e-12 and not self.noted[k]:
                self.noted[k] = True
                of = f"budget {name}"
                if limits is not None and abs(self.limits[k] - limits[k]) > 1e-12 * abs(limits[k]):
                    of = (f"the level budget {name} is tracked to ({self.limits[k]:.4g}, {_pct(self.limits[k] / limits[k])} "
                          f"of its limit {limits[k]:.4g})")
                self.notes.append(f"slot {t}: the slack plan (the least summed cost over the budgets) uses "
                                  f"{_pct(y[k] + 1)} of {of} while the run's allowance is "
                                  f"{100 * a[k] / max(self.horizon, 1):+.2f}% of it (the tolerance less the excess "
                                  f"so far, over the run's slots), the plan run {_pct(z[k] + 1)}; guarantee (c) does "
                                  f"not cover {name} from here")

    def to_dict(self) -> dict:
        return {"tolerance": self.tolerance, "horizon": self.horizon, "limits": list(self.limits),
                "attainable": list(self.attainable), "excess": self.excess, "executed": self.executed,
                "binding": self.binding, "noted": self.noted, "notes": self.notes, "together": self.together}

    @classmethod
    def from_dict(cls, d: dict) -> "Tracker":
        return cls(float(d["tolerance"]), int(d["horizon"]), tuple(float(x) for x in d["limits"]),
                   tuple(bool(x) for x in d["attainable"]), [float(x) for x in d["excess"]], int(d["executed"]),
                   int(d["binding"]), [bool(x) for x in d["noted"]], list(d["notes"]),
                   [bool(x) for x in d.get("together", [])])


@dataclass(frozen=True)
class Tracked:
    """The tracker's pick: plan, its charge, how it was found ("plan", "tracking weight x<m>",
    "slack plan", or "no admissible plan: ..." when none is) and the re-solves' seconds."""

    plan: Plan
    charge: Charge
    how: str
    extra_solve_time: float


def track(tracker: Tracker, plan: Plan, ch: Charge, queues: Sequence[float], V: float,
          resolve: Callable[[tuple[float, ...]], Any], charge: Callable[[Plan], Charge],
          slack: Plan | None, remaining: int = 0,
          cheapest_now: Callable[[], Any] | None = None,
          valid: Callable[[Plan], bool] | None = None, others: Sequence[Plan] = (),
          resolve_capped: Callable[[tuple[float, ...], tuple[float, ...], float], Any] | None = None,
          alone: Callable[[], Sequence[Plan | None]] | None = None) -> Tracked:
    """Keep `plan` when admissible, else search with tracking weights and the slack plan
    (module docstring). resolve(queues) -> SlotResult at V; charge(plan) -> Charge;
    remaining: slots of the run after this one; cheapest_now() -> SlotResult: the least charged
    cost from the previous plan (for the investment test); valid(plan): given, every plan of
    a re-solve's candidate pool (SlotResult.candidate_pool) that it accepts is a candidate too
    ("tracking weight x<m>, pool"), so the pick is not limited to the few weights tried;
    others: more plans of this slot (with the price from history: every plan its searches
    found, the slack plan and the re-shared ones), candidates too when `valid` accepts them
    ("slot's plans"): the admissible plan the tracker needs is often one the frontier searches
    found and the tracking weights' searches do not (geo, slot 1: 0.714 s within the allowance,
    where the tracking weights' best was 1.187 s); resolve_capped(queues, caps, cap_weight) ->
    SlotResult: the search at `queues` with SolveOptions.caps (budgets' worth per iteration, the
    allowance) and cap_weight, its plan and (with `valid`) its pool candidates too ("capped search");
    alone() -> each budget's own cheapest plan of the slot, candidates where no other is admissible."""
    import time
    Q = np.asarray(queues, dtype=float)
    if tracker.violations(ch.costs)[0] == 0.0:
        return Tracked(plan, ch, "plan", 0.0)
    tracker.binding += 1
    t0 = time.perf_counter()
    cands: list[tuple[Plan, Charge, str]] = [(plan, ch, "plan")]
    a = tracker.allowance()
    base = max(V * ch.charged_time, float(Q.max()) if len(Q) else 0.0, 1e-9)
    violated = (tracker.use(ch.costs) > a + 1e-12) & np.asarray(tracker.attainable, dtype=bool)
    seen = {plan}

    def offer(plans: Iterable[Plan], how: str) -> None:
        """With `valid`: each plan it accepts and not yet a candidate becomes one."""
        for p in plans if valid is not None else ():
            if p not in seen and valid(p):
                seen.add(p)
                cands.append((p, charge(p), how))

    def add(res: Any, m: float) -> Charge | None:
        """The re-solve's plan (and, with `valid`, its pool) as candidates; the plan's charge."""
        if res.plan is None:
            return None
        c = charge(res.plan)
        cands.append((res.plan, c, f"tracking weight x{m:g}"))
        seen.add(res.plan)
        offer((p for p, _, _ in getattr(res, "candidate_pool", ())), f"tracking weight x{m:g}, pool")
        return c

    def bisect(bad: float, good: float) -> None:
        """BISECT_STEPS geometric bisection steps on the bracket (bad, good) of tracking weights
        (in units of `base`): the plan at `bad` is not admissible, the one at `good` is."""
        for _ in range(BISECT_STEPS):
            mid = (bad * good) ** 0.5
            c = add(resolve(tuple(Q + mid * base * violated)), mid)
            if c is None:
                return
            if tracker.violations(c.costs)[0] == 0.0:
                good = mid
            else:
                bad = mid

    if violated.any():
        last_bad = 0.0
        for m in LAMBDA_STEPS:
            c = add(resolve(tuple(Q + m * base * violated)), m)
            if c is None:
                break
            if tracker.violations(c.costs)[0] == 0.0:
                if last_bad > 0:   # geometric bisection towards the least weight whose plan is admissible
                    bisect(last_bad, m)
                break
            last_bad = m
    if resolve_capped is not None and violated.any():
        # the weights' searches reach the hull of the slot's frontier only; the allowance's own
        # plan may lie between two of its points: a search at the slot's weights whose objective
        # pays CAP_WEIGHT * base per budget's worth above the allowance
        att = np.asarray(tracker.attainable, dtype=bool)
        caps = tuple(float(1.0 + a[k]) if att[k] else math.inf for k in range(len(a)))
        res = resolve_capped(tuple(Q), caps, CAP_WEIGHT * base)
        if res.plan is not None and res.plan not in seen:
            seen.add(res.plan)
            cands.append((res.plan, charge(res.plan), "capped search"))
        offer((p for p, _, _ in getattr(res, "candidate_pool", ())), "capped search, pool")
    if slack is not None:
        cands.append((slack, charge(slack), "slack plan"))
        seen.add(slack)
    offer(others, "slot's plans")

    ok = [x for x in cands if tracker.violations(x[1].costs)[0] == 0.0]
    if not ok and alone is not None:
        # each budget's own cheapest plan: where no plan keeps every allowance, the plans that
        # trade one budget for another are what a mix over the coming slots is made of
        for p in alone():
            if p is not None and p not in seen:
                seen.add(p)
                cands.append((p, charge(p), "a budget's own cheapest plan"))
        ok = [x for x in cands if tracker.violations(x[1].costs)[0] == 0.0]
    if not ok and cheapest_now is not None:
        res = cheapest_now()
        if res.plan is not None and res.plan not in seen:
            cands.append((res.plan, charge(res.plan), "cheapest from the previous plan"))
        uses = np.unique(np.asarray([tracker.use(c.evaluation.costs) for _, c, _ in cands]), axis=0)
        for p, c, how in sorted(cands, key=lambda x: x[1].objective(queues, V)):
            if tracker.repaid(c, (remaining + 1) // 2, uses):   # the least objective that a mix repays
                ok = [(p, c, f"investment: {how}")]
                break
    if not ok and slack is not None:
        # the budgets the slack plan keeps within their allowance are kept (guarantee (c) per
        # budget), but for budgets kept to a common level, which are traded against each other
        together = np.asarray(tracker.together, dtype=bool)
        keep = (tracker.over(charge(slack).costs) == 0.0) & np.asarray(tracker.attainable, dtype=bool) & ~together
        if keep.any() or together.any():
            what = ("within the allowance of the budgets the slack plan keeps" if keep.any() else
                    "the least excess over the budgets kept together")
            kept = [(p, c, tracker.violations(c.costs)[0], f"no admissible plan: {what} ({how})")
                    for p, c, how in cands if not tracker.over(c.costs)[keep].any()]
            # of those, the least excess over the other attainable budgets' allowances, then the
            # least objective: a budget the slack plan breaks is still kept as close as they allow
            least = min((v for _, _, v, _ in kept), default=0.0)
            ok = [(p, c, how) for p, c, v, how in kept if v <= least + 1e-12]
    if not ok:   # nothing keeps the attainable budgets: the drift-plus-penalty plan, said so
        return Tracked(plan, ch, "no admissible plan: drift-plus-penalty plan kept", time.perf_counter() - t0)
    best = min(ok, key=lambda x: x[1].objective(queues, V))
    return Tracked(best[0], best[1], best[2], time.perf_counter() - t0)


def _pct(x: float) -> str:
    """x (a fraction) as a percentage: one decimal, in powers of ten beyond 1e6 %."""
    return f"{100 * x:.1f}%" if abs(100 * x) < 1e6 else f"{100 * x:.3g}%"
