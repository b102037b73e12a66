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
When no candidate is admissible (the premise below fails in this slot), the investment test
follows: a candidate (the cheapest plan from the previous one, V = 0 with migration weighed,
among them) is taken when, kept for the rest of the run at its own cost per iteration, it ends
every budget within the allowance (y_k + R ybar_k <= a_k with ybar_k <= 0, R the slots left):
a move whose migration is paid once and repaid later, which the per-slot test cannot see.
When none passes either, the budgets the slack plan keeps within their allowance are kept: among
the candidates within the allowance of each such budget (the slack plan is one), the least slot
objective (row: `no admissible plan: within the allowance of the budgets the slack plan keeps
(...)`); a budget the slack plan itself breaks is left to its queue from this slot on (the
controller's note names it). Only without a slack plan, or where it breaks every attainable
budget, does the tracker keep the drift-plus-penalty plan, and it says so in the row (the
queues go on pushing the costs down, and guarantee (a) still bounds the overshoot).

Guarantee (c). If in every slot the slack plan x0 is admissible, as it is whenever
c_k(x0) <= Cbar_k for every budget (charged, migration included), then E_k <= eps * H after
every slot, so the average overshoot
over the executed slots is at most eps * H / H_exec (= eps when no slot is skipped).
Proof by induction: E_k <= eps * H makes a_k >= 0 >= y_k(x0), so x0 is admissible, and the
tracker only accepts admissible plans. Per budget: if x0 keeps budget k within its allowance in
every slot (c_k(x0) <= Cbar_k is enough), E_k <= eps * H after every slot even where x0 breaks
another budget, unless the investment test takes a plan there (one that repays within the run
if kept): every other pick keeps each budget x0 keeps. Guarantee (a) is untouched: the queues
follow the same law whatever plan is chosen, so the overshoot is still <= Q_k(H) / H.

Unattainable budgets (the documented rule). The pre-flight check (`preflight`) compares each
budget with its cheapest achievable average (the cheapest plan of every slot, and for K >= 2
the search weighting that budget alone); when even that is over the limit by more than the
tolerance, one line says so with the figure. Such a budget cannot be met, so it yields to the
others: admissibility is judged on the attainable budgets only, and the unattainable budget is
left to its queue, which keeps growing, so its weight in the slot objective comes to dominate
and the controller spends as little on it as the other budgets and the batch time allow. As slots
arrive, a slot whose slack plan itself is not admissible is noted once per budget (the
guarantee's premise fails there).
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


@dataclass(frozen=True)
class Preflight:
    """Budgets against the cheapest plans, before the run.

    plans[i]: the slack plan of slots[i] (None: no plan); costs[i]: its costs per budget per
    iteration (no migration; nan without a plan); cheapest_avg: per budget, the least average
    cost the check found (USD or J per iteration); attainable: cheapest_avg <= (1 + tol) limit;
    lines: one line per unattainable budget."""

    slots: tuple[int, ...]
    plans: tuple[Plan | None, ...]
    costs: tuple[tuple[float, ...], ...]
    cheapest_avg: tuple[float, ...]
    attainable: tuple[bool, ...]
    lines: tuple[str, ...]

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
    docstring). For K >= 2, a budget that the slack plans overshoot on average is re-checked
    with the search weighting that budget alone (V = 0)."""
    slots = tuple(int(t) for t in slots)
    K = len(instance.budgets)
    plans = tuple(cheapest_plan(instance.state(t), options) for t in slots)
    costs = _avg_costs(instance, slots, plans)
    ran = ~np.isnan(costs[:, 0]) if K else np.ones(len(slots), bool)
    best = np.nanmean(costs[ran], axis=0) if ran.any() and K else np.full(K, math.nan)
    lines: list[str] = []
    attainable: list[bool] = []
    for k, b in enumerate(instance.budgets):
        if K >= 2 and ran.any() and best[k] > b.limit * (1 + tolerance):
            w = [1.0 if j == k else 0.0 for j in range(K)]
            alone = [cheapest_plan(instance.state(t), options, w) if p is not None else None
                     for t, p in zip(slots, plans)]
            ck = _avg_costs(instance, slots, alone)[:, k]
            best[k] = min(best[k], float(np.nanmean(np.fmin(ck, costs[:, k])[ran])))
        ok = bool(not ran.any() or best[k] <= b.limit * (1 + tolerance))
        attainable.append(ok)
        if not ok:
            lines.append(f"budget {b.name} cannot be met on average: the cheapest achievable average is "
                         f"{best[k]:.6g} per iteration, {_pct(best[k] / b.limit - 1)} over its limit "
                         f"{b.limit:.6g}; the other budgets are kept first and {b.name} as low as the "
                         f"controller can")
    return Preflight(slots, plans, tuple(tuple(float(x) for x in r) for r in costs), tuple(float(x) for x in best),
                     tuple(attainable), tuple(lines))


@dataclass
class Tracker:
    """The tracker's state over a run (JSON-able for resume): tolerance eps (fraction), horizon
    H (slots), limits Cbar_k, attainable flags, excess E_k (budgets' worth), executed slots,
    binding slots (where the drift-plus-penalty plan was replaced), and the notes so far."""

    tolerance: float
    horizon: int
    limits: tuple[float, ...]
    attainable: tuple[bool, ...]
    excess: list[float] = field(default_factory=list)
    executed: int = 0
    binding: int = 0
    noted: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (self.tolerance >= 0 and math.isfinite(self.tolerance)):
            raise ValueError(f"budget tolerance must be a finite fraction >= 0, got {self.tolerance}")
        K = len(self.limits)
        self.excess = list(self.excess) or [0.0] * K
        self.noted = list(self.noted) or [False] * K

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

    def repaid(self, ch: Charge, remaining: int) -> bool:
        """The investment test: kept for the `remaining` slots after this one at its own cost per
        iteration (no migration), the plan ends every attainable budget within its allowance,
        y_k + remaining * ybar_k <= a_k with ybar_k <= 0."""
        y, ybar, a = self.use(ch.costs), self.use(ch.evaluation.costs), self.allowance()
        att = np.asarray(self.attainable, dtype=bool)
        ok = (ybar <= 1e-12) & (y + remaining * ybar <= a + 1e-12)
        return bool(remaining > 0 and np.all(ok[att]))

    def record(self, costs: Sequence[float]) -> None:
        self.excess = [float(e + y) for e, y in zip(self.excess, self.use(costs))]
        self.executed += 1

    def note_slack(self, t: int, names: Sequence[str], costs: Sequence[float]) -> None:
        """Note once per budget a slot whose slack plan is not admissible."""
        y, a = self.use(costs), self.allowance()
        for k, name in enumerate(names):
            if y[k] > a[k] + 1e-12 and not self.noted[k]:
                self.noted[k] = True
                self.notes.append(f"slot {t}: even the cheapest plan uses {_pct(y[k] + 1)} of budget "
                                  f"{name} with {100 * a[k] / max(self.horizon, 1):.2f}% of the run's tolerance "
                                  f"left; guarantee (c) does not cover {name} from here")

    def to_dict(self) -> dict:
        return {"tolerance": self.tolerance, "horizon": self.horizon, "limits": list(self.limits),
                "attainable": list(self.attainable), "excess": self.excess, "executed": self.executed,
                "binding": self.binding, "noted": self.noted, "notes": self.notes}

    @classmethod
    def from_dict(cls, d: dict) -> "Tracker":
        return cls(float(d["tolerance"]), int(d["horizon"]), tuple(float(x) for x in d["limits"]),
                   tuple(bool(x) for x in d["attainable"]), [float(x) for x in d["excess"]], int(d["executed"]),
                   int(d["binding"]), [bool(x) for x in d["noted"]], list(d["notes"]))


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
          resolve_capped: Callable[[tuple[float, ...], tuple[float, ...], float], Any] | None = None) -> Tracked:
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
    allowance) and cap_weight, its plan and (with `valid`) its pool candidates too ("capped search")."""
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
    if not ok and cheapest_now is not None:
        res = cheapest_now()
        if res.plan is not None:
            cands.append((res.plan, charge(res.plan), "cheapest from the previous plan"))
        ok = [(p, c, f"investment: {how}") for p, c, how in cands if tracker.repaid(c, remaining)]
    if not ok and slack is not None:
        # the budgets the slack plan keeps within their allowance are kept (guarantee (c) per budget)
        keep = (tracker.over(charge(slack).costs) == 0.0) & np.asarray(tracker.attainable, dtype=bool)
        if keep.any():
            ok = [(p, c, f"no admissible plan: within the allowance of the budgets the slack plan keeps ({how})")
                  for p, c, how in cands if not tracker.over(c.costs)[keep].any()]
    if not ok:   # nothing keeps the attainable budgets: the drift-plus-penalty plan, said so
        return Tracked(plan, ch, "no admissible plan: drift-plus-penalty plan kept", time.perf_counter() - t0)
    best = min(ok, key=lambda x: x[1].objective(queues, V))
    return Tracked(best[0], best[1], best[2], time.perf_counter() - t0)


def _pct(x: float) -> str:
    """x (a fraction) as a percentage: one decimal, in powers of ten beyond 1e6 %."""
    return f"{100 * x:.1f}%" if abs(100 * x) < 1e6 else f"{100 * x:.3g}%"
