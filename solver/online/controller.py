"""The online controller: observe a slot, let a policy plan it, keep the budgets on track,
charge the plan, update the virtual queues, record one row (DESIGN.md section 3, "Lyapunov
decomposition"; docs/BUDGETS.md).

Defaults (docs/BUDGETS.md): V=None takes the scale-free default V of online.vrule, measured in
the first executed slot; budget_tolerance=0.01 runs "ours" with the budget tracker of
online.tracking (every budget within 1% over the run wherever the cheapest plan of every slot
meets it), after a pre-flight check that says in one line when a budget cannot be met, and
prices the budgets from the run's history (online.pricing: the offline LP's duals over the
slots seen so far) instead of the queues. budget_tolerance=None is the plain drift-plus-penalty
controller of the article; it still runs the pre-flight check for its notes (budget_check:
a budget no plan meets on average is named; its plans are unchanged). Baselines and
ablations are never tracked (they ignore the budgets, or are the controller's ablations); their
overshoot is reported as it is.

Horizon. H is the number of slots from `start` to the instance's last slot; `stop` only pauses
the run (a resumed run continues towards the same H).

Infeasible slots. When a policy has no feasible plan (status "infeasible"), the slot is
recorded as a skip row by default (on_infeasible="skip"): no plan, its times and costs NaN
(not 0: a plain mean over the rows is then the summary's), and the queues unchanged. No
iteration ran, and the budgets are averages per iteration, so crediting the limit for an idle slot would let the controller overspend later. Skip rows are
left out of every average and out of the horizon of the bounds. on_infeasible="raise" raises
InfeasibleSlotError naming the slot and the reason instead.

Resumable runs: see online.checkpoint.
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..errors import InfeasibleSlotError
from ..model.plan import Plan, plan_from_json, plan_to_json
from ..model.preemption import Preemption
from ..model.state import Instance, SlotState
from ..solve import SolveOptions, solve_slot
from ..solve.inputs import check_V
from ..subproblems.cache import SlotCache
from .charge import Charge, charge_plan
from .checkpoint import ControllerState, run_config
from .policies import POLICY_NAMES, Decision, Ours, Policy, make_policy, with_lp_shares
from .preemption import preempted, risk_at
from .pricing import BRACKET, FASTEST_TUNING, RESHARE, TIE, History, Price, lp_weight, margin, points
from .queues import initial_queues, update_queues
from .result import OnlineRun, run_status
from .summary import summarise
from .tracking import DEFAULT_TOLERANCE, Preflight, Tracker, cheapest_plan, own_cheapest_plans, preflight, track
from .vrule import VChoice, choose_V, given_V


def _row(t: int, policy: str, V: float, state: SlotState, d: Decision, ch: Charge | None,
         q_before: Sequence[float], q_after: Sequence[float], objective: float, prev_row: dict | None,
         extra: dict) -> dict:
    """One slot's row. Times in seconds (batch_time, charged_time, risk_time per iteration;
    migration_time, preemption_time per slot), cost_<budget> per iteration (USD or J), queues in
    budgets' worth, avg_/over_/bound_ over the slots run so far. A slot with no plan (`ch` None,
    status "infeasible") ran no iteration: its plan figures (times and costs) are NaN, not 0, so
    that a plain mean over the rows is the mean over the slots that ran (as online.summary's)."""
    row: dict[str, Any] = {"slot": t, "policy": policy, "V": float(V)}
    p = d.plan if ch is not None else None
    row["plan"] = p.summary(state) if p is not None else ""
    row["plan_json"] = plan_to_json(p)
    row["n_groups"] = len(p.groups) if p is not None else 0
    row["n_devices"] = len(p.devices) if p is not None else 0
    nan = float("nan")
    row["batch_time"] = ch.batch_time if ch else nan
    row["migration_time"] = ch.migration_time if ch else nan
    row["charged_time"] = ch.charged_time if ch else nan
    row["preemption_time"] = ch.preemption_time if ch else nan
    row["risk_time"] = ch.risk_time if ch else nan
    for k, b in enumerate(state.budgets):
        row[f"cost_{b.name}"] = ch.costs[k] if ch else nan
    for k, b in enumerate(state.budgets):
        row[f"queue_{b.name}_before"] = float(q_before[k])
        row[f"queue_{b.name}_after"] = float(q_after[k])
    n_prev = int(prev_row["executed"]) if prev_row else 0
    n = n_prev + (1 if ch else 0)
    row["executed"] = n
    for k, b in enumerate(state.budgets):
        prev_avg = float(prev_row[f"avg_{b.name}"]) if prev_row and n_prev else 0.0
        avg = (prev_avg * n_prev + ch.costs[k]) / n if ch else (prev_avg if n_prev else nan)
        row[f"avg_{b.name}"] = avg
        row[f"over_{b.name}_pct"] = 100.0 * (avg / b.limit - 1.0) if n else nan
        row[f"bound_{b.name}_pct"] = 100.0 * float(q_after[k]) / n if n else nan
    row.update(extra)
    row["objective"] = objective
    row["solve_time"] = float(d.solve_time)
    row["status"] = d.status
    row["message"] = d.message
    return row


class _Fastest:
    """The slot's fastest plan, searched once: every queue 0, V = 1, no migration, with the
    candidate pool and the lighter local search of FASTEST_TUNING (the default V's T_ref and the
    price's frontier share it)."""

    def __init__(self, state: SlotState, opts: SolveOptions, cache: SlotCache) -> None:
        self.state, self.opts, self.cache, self._res = state, opts, cache, None

    def __call__(self) -> Any:
        if self._res is None:
            opts = replace(self.opts, replan=False, keep_candidates=True,
                           tuning=replace(self.opts.tuning, **FASTEST_TUNING))
            self._res = solve_slot(self.state, (0.0,) * len(self.state.budgets), 1.0, cache=self.cache, options=opts)
        return self._res


def _decide_V(V: float | None, fastest: Callable[[], Any], horizon: int,
              tolerance: float, tracked: bool) -> VChoice | None:
    """The V in force: the caller's, or the default rule from this slot's fastest plan (None:
    the slot has no plan; the rule waits for the next slot)."""
    if V is not None:
        return given_V(V, horizon, tolerance)
    fast = fastest()
    return choose_V(fast.batch_time, horizon, tolerance, tracked) if fast.plan is not None else None


def _check_arguments(*, options: Any, iterations_per_slot: Any, budget_tolerance: Any, preemption: Any,
                     state_path: Any, policy: Any, callables: dict[str, Any], flags: dict[str, Any]) -> None:
    """run_online's arguments by type and range: TypeError for a wrong type, ValueError for a value
    out of range, each naming the argument and the value (before anything runs)."""
    def kind(x: Any) -> str:
        return f"{x!r:.80} ({type(x).__name__})"
    if options is not None and not isinstance(options, SolveOptions):
        raise TypeError(f"options: expected a SolveOptions or None, got {kind(options)}")
    if not isinstance(policy, (str, Policy)):
        raise TypeError(f"policy: expected a policy name (one of {', '.join(POLICY_NAMES)}) or a Policy, "
                        f"got {kind(policy)}")
    if isinstance(iterations_per_slot, bool) or not isinstance(iterations_per_slot, numbers.Integral):
        raise TypeError(f"iterations_per_slot: expected an integer >= 1, got {kind(iterations_per_slot)}")
    if iterations_per_slot < 1:
        raise ValueError(f"iterations_per_slot: expected an integer >= 1, got {iterations_per_slot}")
    if budget_tolerance is not None:
        if isinstance(budget_tolerance, bool) or not isinstance(budget_tolerance, numbers.Real):
            raise TypeError(f"budget_tolerance: expected a fraction in [0, 1) or None, got {kind(budget_tolerance)}")
        if not 0 <= budget_tolerance < 1:
            raise ValueError(f"budget_tolerance: expected a fraction in [0, 1) or None, got {budget_tolerance!r}")
    if preemption is not None and not isinstance(preemption, Preemption):
        raise TypeError(f"preemption: expected a Preemption(restart_s, checkpoint_every) or None, got "
                        f"{kind(preemption)}")
    if state_path is not None:
        if not isinstance(state_path, (str, os.PathLike)):
            raise TypeError(f"state_path: expected the path of a JSON file or None, got {kind(state_path)}")
        if Path(state_path).is_dir():
            raise ValueError(f"state_path: expected the path of a JSON file, got {str(state_path)!r} (a folder)")
    for name, f in callables.items():
        if f is not None and not callable(f):
            raise TypeError(f"{name}: expected a function or None, got {kind(f)}")
    for name, x in flags.items():
        if not isinstance(x, (bool, np.bool_)):
            raise TypeError(f"{name}: expected True or False, got {kind(x)}")


def run_online(instance: Instance, V: float | None = None, policy: str | Policy = "ours", *, options: Any = None,
               replan: bool = True, iterations_per_slot: int = 100, state_path: str | os.PathLike | None = None,
               start: int = 0, stop: int | None = None,
               progress: Callable[[int, int], None] | None = None,
               on_infeasible: str = "skip", budget_tolerance: float | None = DEFAULT_TOLERANCE,
               check_budgets: bool = True, pricing: str | None = None, preemption: Preemption | None = None,
               availability_aware: bool = True, on_resume: Callable[[int], None] | None = None) -> OnlineRun:
    """Run `policy` over slots start..stop-1 of `instance`; an OnlineRun (online.result) whose
    .rows has one row per slot (see `_row`).

    V: penalty weight (budget units per second of batch time); None: the default rule
    (online.vrule). options: SolveOptions for the search (its replan / iterations_per_slot are
    overridden by the arguments here). budget_tolerance: fraction, every budget within
    (1 + tolerance) of its limit over the run for "ours" (online.tracking); None: no tracking.
    check_budgets: the pre-flight check of the budgets against the cheapest plans (tracked runs,
    and the plain controller "ours" with budget_tolerance None, where it only adds notes).
    pricing: how "ours" prices the budgets: "history" (online.pricing: the offline LP's price
    over the slots seen so far, the search's weights V * price) or "queue" (the queues, the
    article's drift-plus-penalty); None: "history" for a tracked run, else "queue".
    state_path: JSON file of the controller state; if it exists the run continues from it
    (`start` is then ignored) and the returned rows hold every row so far; on_resume(slot):
    called once, when the saved state has been read and found to be this run's, with the slot
    the run continues at (instance.num_slots: it is complete).
    progress(done, total): called after each slot. on_infeasible: "skip" | "raise".
    preemption: what a preemption costs (model.preemption; None: the instance's, if it declares
    one): each slot after one that lost a device of its plan is charged the loss, every policy
    alike (online.preemption); with availability_aware, "ours" also weighs each plan's expected
    loss from per-device hazards learnt from the slots seen so far.
    """
    if not isinstance(instance, Instance):
        raise TypeError(f"instance: expected an Instance (solver.load_instance(path)), got "
                        f"{type(instance).__name__}: {instance!r:.80}")
    for arg, x in (("start", start), ("stop", stop)):
        if x is not None and (isinstance(x, bool) or not isinstance(x, numbers.Integral)):
            raise TypeError(f"{arg}: expected an integer slot index, got {x!r} ({type(x).__name__})")
    if stop is not None and not (0 <= stop <= instance.num_slots):
        raise ValueError(f"stop: expected a slot index in 0..{instance.num_slots} (the instance has "
                         f"{instance.num_slots} slots), got {stop}")
    if V is not None:
        check_V(V)
    if on_infeasible not in ("skip", "raise"):
        raise ValueError(f"on_infeasible must be 'skip' or 'raise', not {on_infeasible!r}")
    _check_arguments(options=options, iterations_per_slot=iterations_per_slot, budget_tolerance=budget_tolerance,
                     preemption=preemption, state_path=state_path, policy=policy,
                     callables={"progress": progress, "on_resume": on_resume},
                     flags={"replan": replan, "check_budgets": check_budgets, "availability_aware": availability_aware})
    pol = policy if isinstance(policy, Policy) else make_policy(
        policy, options=options, replan=replan, iterations_per_slot=iterations_per_slot)
    name = pol.name
    limits = [b.limit for b in instance.budgets]
    tracked = budget_tolerance is not None and isinstance(pol, Ours) and pol.queue_mode == "real" and bool(limits)
    if pricing not in (None, "history", "queue"):
        raise ValueError(f"pricing must be 'history', 'queue' or None, got {pricing!r}")
    if pricing == "history" and not (isinstance(pol, Ours) and pol.queue_mode == "real"):
        raise ValueError(f"pricing='history' prices the budgets for 'ours'; policy {name!r} has no price")
    mode = pricing or ("history" if tracked else "queue")
    priced = mode == "history" and isinstance(pol, Ours) and pol.queue_mode == "real" and bool(limits)
    preempt = preemption if preemption is not None else instance.preemption
    aware = preempt is not None and availability_aware and isinstance(pol, Ours)
    config = run_config(instance, name, V, replan, iterations_per_slot, options, budget_tolerance, mode)
    if preempt is not None:
        config["preemption"] = [float(preempt.restart_s), int(preempt.checkpoint_every), bool(aware)]
    stop = instance.num_slots if stop is None else int(stop)
    opts = replace(options or SolveOptions(), replan=replan, iterations_per_slot=iterations_per_slot)

    if state_path is not None and Path(state_path).exists():
        cs = ControllerState.load(state_path)
        if cs.config != config:
            raise ValueError(f"controller state {state_path} belongs to another run: {_config_diff(cs.config, config)}"
                             f" (delete it to start afresh, or run with the saved settings)")
        pol.load_state_dict(cs.policy_state)
        if on_resume is not None:
            on_resume(cs.next_slot)
    else:
        if not (0 <= start < instance.num_slots):
            raise ValueError(f"start: expected a slot index in 0..{instance.num_slots - 1}, got {start}")
        if stop <= start:
            raise ValueError(f"stop: expected a slot index after start={start} (the run is slots start..stop-1), "
                             f"got {stop}")
        cs = ControllerState(config, int(start), initial_queues(len(limits)), None, pol.state_dict(), [],
                             {"start": int(start)})
    first = int(cs.extra.get("start", start))
    horizon = instance.num_slots - first
    tol = budget_tolerance if budget_tolerance is not None else DEFAULT_TOLERANCE
    vc = VChoice.from_dict(cs.extra["V"]) if cs.extra.get("V") else None

    pre: Preflight | None = None
    check: tuple[Preflight, tuple[str, ...]] | None = None    # the plain controller's: notes only
    if tracked and check_budgets:
        pre = preflight(instance, range(first, instance.num_slots), tol, opts)
    elif check_budgets and limits and isinstance(pol, Ours) and pol.queue_mode == "real":
        check = budget_check(instance, 0.0, opts, range(first, instance.num_slots))
    tracker: Tracker | None = None
    if tracked:
        tracker = (Tracker.from_dict(cs.extra["tracker"]) if cs.extra.get("tracker") else
                   Tracker(tol, horizon, pre.targets, pre.tracked,
                           together=[t and not a for t, a in zip(pre.tracked, pre.attainable)]) if pre else
                   Tracker(tol, horizon, tuple(limits), (True,) * len(limits)))
    history = History.from_dict(cs.extra["history"]) if cs.extra.get("history") else History()
    excess = list(cs.extra.get("excess") or [0.0] * len(limits))   # sum of c / Cbar - 1 so far

    total = max(stop - cs.next_slot, 0)
    planner = SlotPlanner(instance, pol, opts, V=V, tolerance=tol, rule_tracked=budget_tolerance is not None,
                          tracked=tracked, priced=priced, pre=pre, tracker=tracker, history=history, excess=excess,
                          vc=vc, horizon=horizon, carry=cs.extra.get("carry", []))
    for done, t in enumerate(range(cs.next_slot, stop), start=1):
        state = instance.state(t)
        Q = cs.queues
        prev = cs.previous_plan
        # a loss that a slot without a plan could not pay is paid by the next slot that runs
        lost = float(cs.extra.get("pending_preemption", 0.0)) or _preemption_time(
            preempt, prev, state, next((r for r in reversed(cs.rows) if np.isfinite(r["batch_time"])), None),
            iterations_per_slot)
        if aware:
            state = replace(state, risk=risk_at(instance.available, t, preempt))
        sd = planner.decide(t, state, Q, prev, lost, int(cs.rows[-1]["executed"]) if cs.rows else 0)
        d = sd.decision
        if d.plan is None:
            if on_infeasible == "raise":
                raise InfeasibleSlotError(f"slot {t} of {instance.name!r}: policy {name} found no feasible plan"
                                          f" ({d.message or 'no reason given'})")
            row = _row(t, name, shown_V(pol, planner.vc), state, d, None, Q, Q, float("nan"),
                       cs.rows[-1] if cs.rows else None, sd.extra)
            Qn = Q
        else:
            ch = sd.charge
            planner.record(ch.costs)
            Qn = update_queues(Q, ch.costs, limits)
            row = _row(t, name, shown_V(pol, planner.vc), state, d, ch, Q, Qn, ch.objective(sd.W, sd.V),
                       cs.rows[-1] if cs.rows else None, sd.extra)
            prev = d.plan
        cs.rows.append(row)
        cs.extra["pending_preemption"] = lost if d.plan is None else 0.0
        cs.next_slot, cs.queues, cs.previous_plan, cs.policy_state = t + 1, Qn, prev, pol.state_dict()
        cs.extra.update(planner.saved())
        if state_path is not None:
            cs.save(state_path)
        if progress is not None:
            progress(done, total)
    vc = planner.vc
    return run_result(instance, rows_frame(cs.rows), vc, tracker, pre, budget_tolerance if tracked else None, pol,
                   mode if isinstance(pol, Ours) else None, check)


@dataclass
class SlotDecision:
    """One slot's decision (SlotPlanner.decide): the policy's, or the budget tracker's pick in
    its place (`decision`); its charge at the slot's state (None without a plan); the weights W
    (budgets' worth per budget) and V it was chosen at; and the row's extra columns (price_*,
    target_*, allowance_*, cheapest_*, tracker)."""

    decision: Decision
    charge: Charge | None
    W: tuple[float, ...]
    V: float
    extra: dict


class SlotPlanner:
    """The controller's slot step: `decide` plans a slot (the default V from the first slot's
    fastest plan, the price from the history, the policy's search, the budget tracker's pick)
    and `record` books what the executed slot cost (the budget tracker's excess and the
    price's target). run_online records each plan's charged costs; dynpar train's controller
    records the costs it measured (runtime.trainer). `saved` is the state run_online keeps in
    ControllerState.extra to resume.

    pre: the pre-flight check (its slack plans are the tracker's, unless `preflight_slack` is
    False: the slack plan is then searched on each slot's own state, as it must be where that
    state is observed, not the trace's); tracked, priced: whether the budget tracker keeps the
    budgets and the history prices them (run_online's rules); rule_tracked: the default V
    rule's flag (online.vrule.choose_V); horizon: the run's slots; end: the slot after its last
    (default the instance's slot count)."""

    def __init__(self, instance: Instance, pol: Policy, opts: SolveOptions, *, V: float | None, tolerance: float,
                 rule_tracked: bool, tracked: bool, priced: bool, pre: Preflight | None, tracker: Tracker | None,
                 history: History, excess: Sequence[float], vc: VChoice | None, horizon: int,
                 end: int | None = None, carry: Sequence[str] = (), preflight_slack: bool = True) -> None:
        self.instance, self.pol, self.opts = instance, pol, opts
        self.V, self.tolerance, self.rule_tracked = V, tolerance, rule_tracked
        self.tracked, self.priced, self.pre, self.tracker = tracked, priced, pre, tracker
        self.history, self.excess, self.vc, self.horizon = history, list(excess), vc, horizon
        self.end = instance.num_slots if end is None else int(end)
        self.carry, self.preflight_slack = list(carry), preflight_slack
        self.limits = [b.limit for b in instance.budgets]
        self.last_cache: SlotCache | None = None

    def decide(self, t: int, state: SlotState, Q: Sequence[float], prev: Plan | None, lost: float,
               executed: int) -> SlotDecision:
        """Slot t's decision on `state` at queues Q after plan `prev`, charged `lost` seconds of
        preemption; `executed`: the slots with a plan so far (the price's slots left)."""
        instance, pol, opts, limits, tracker = self.instance, self.pol, self.opts, self.limits, self.tracker
        replan, iterations_per_slot = opts.replan, opts.iterations_per_slot
        # shared by every search and charge of this slot; exact entries of the last slot's carried over
        cache = self.last_cache = SlotCache.following(self.last_cache, state)
        fastest = _Fastest(state, opts, cache)
        slack = None
        if self.tracked:
            slack = (self.pre.plan(t) if self.pre is not None and self.preflight_slack
                     else cheapest_plan(state, opts))
        if self.vc is None:
            self.vc = _decide_V(self.V, fastest, self.horizon, self.tolerance, self.rule_tracked)
        Vt = self.vc.V if self.vc is not None else 1.0
        extra: dict[str, Any] = {}
        W = tuple(Q)   # the weights the search and the tracker use: the queues, or V * the price
        slot_plans: list[Plan] = []   # with the price: every plan the slot's searches found (tracker candidates)

        charged: dict[Plan, Charge] = {}   # the slot's plans are charged several times (price, tracker)

        def charge(p: Plan) -> Charge:
            ch = charged.get(p)
            if ch is None:
                ch = charged[p] = charge_plan(p, state, prev, replan=replan, iterations_per_slot=iterations_per_slot,
                                              cache=cache, preemption_time=lost)
            return ch
        if self.priced:
            history = self.history
            W, pr, seen = _priced_weights(state, Vt, slack, history, self.excess, self.horizon, executed, limits,
                                          opts, cache, fastest)
            res = pol.solve(state, W, Vt, prev, keep_candidates=True, cache=cache)
            pool = getattr(res, "candidate_pool", ())
            if pool:   # the priced search's plans join the slot's frontier: the price is learnt again
                history.extend_last(points(pool, limits))
                pr = _price(history, pr.target, state)
                W = tuple((Vt if Vt > 0 else 1.0) * x for x in pr.lam)
            d = Decision(res.plan, res.status if res.plan is not None else "infeasible", res.message,
                         getattr(res, "solve_time", 0.0))
            carried = [p for p in (plan_from_json(js) for js in self.carry) if p is not None]
            plans = [*seen, *(c[0] for c in pool), *([slack] if slack is not None else [])]
            plans += _reshared(plans + carried, state, W, Vt, limits, cache)
            slot_plans = plans
            # every plan of the slot joins its frontier and the price is learnt a last time: the plan
            # chosen at the price is then one of the LP's own points for this slot (ties: its weights)
            history.extend_last(points([(p, *_tc(cache.evaluation(p))) for p in dict.fromkeys(plans)
                                        if not cache.violations(p)], limits))
            pr = _price(history, pr.target, state)
            W = tuple((Vt if Vt > 0 else 1.0) * x for x in pr.lam)
            for k, b in enumerate(instance.budgets):
                extra[f"price_{b.name}"] = pr.lam[k]
                extra[f"target_{b.name}"] = pr.target[k]
            d = _best_at_price(d, plans, cache, charge, W, Vt,
                               lambda p: lp_weight(pr, history, points([(p, *_tc(cache.evaluation(p)))], limits)[0]))
            self.carry = [plan_to_json(p) for p in _top_structures(plans, W, Vt, limits, cache)]
        elif self.tracked:
            res = pol.solve(state, Q, Vt, prev, cache=cache)
            d = Decision(res.plan, res.status if res.plan is not None else "infeasible", res.message,
                         getattr(res, "solve_time", 0.0))
        else:
            d = pol.decide(state, Q, Vt, prev)
        if d.plan is not None:
            bad = d.plan.validate(state)
            if bad:   # a policy must never hand back a wrong plan; treat as infeasible, loudly
                d = Decision(None, "infeasible", f"{pol.name} returned an invalid plan: "
                             + "; ".join(str(v) for v in bad[:3]), d.solve_time)
        if tracker is not None:
            a = tracker.allowance()
            for k, b in enumerate(instance.budgets):
                extra[f"allowance_{b.name}"] = float(a[k])
        if d.plan is None:
            if tracker is not None:
                extra.update({f"cheapest_{b.name}": float("nan") for b in instance.budgets}, tracker="")
            return SlotDecision(d, None, tuple(W), Vt, extra)
        ch = charge(d.plan)
        if tracker is not None:
            ch0 = charge(slack) if slack is not None else None
            tr = track(tracker, d.plan, ch, W, Vt,
                       lambda q: pol.solve(state, q, Vt, prev, keep_candidates=self.priced, cache=cache), charge,
                       slack,
                       remaining=self.end - t - 1,
                       cheapest_now=lambda: pol.solve(state, (1.0,) * len(limits), 0.0, prev, cache=cache),
                       valid=(lambda p: not cache.violations(p)) if self.priced else None,
                       others=slot_plans,
                       resolve_capped=(lambda q, caps, w: pol.solve(state, q, Vt, prev, keep_candidates=True,
                                                                    cache=cache, caps=caps, cap_weight=w))
                       if self.priced else None,
                       alone=(lambda: own_cheapest_plans(state, opts)) if len(limits) >= 2 else None)
            if tr.how != "plan":
                d = Decision(tr.plan, d.status, f"{d.message}; budget tracker: {tr.how}".lstrip("; "),
                             d.solve_time + tr.extra_solve_time)
            ch = tr.charge
            if ch0 is not None:
                tracker.note_slack(t, [b.name for b in instance.budgets], ch0.costs, ch.costs, limits)
            extra.update({f"cheapest_{b.name}": (ch0.costs[k] if ch0 else float("nan"))
                          for k, b in enumerate(instance.budgets)}, tracker=tr.how)
        return SlotDecision(d, ch, tuple(W), Vt, extra)

    def record(self, costs: Sequence[float]) -> None:
        """Book an executed slot's costs (USD, J per iteration; charged or measured): the
        tracker's excess and the price's."""
        if self.tracker is not None:
            self.tracker.record(costs)
        self.excess = [float(e + c / lim - 1.0) for e, c, lim in zip(self.excess, costs, self.limits)]

    def saved(self) -> dict[str, Any]:
        """What ControllerState.extra keeps of this step to resume (JSON-able)."""
        out: dict[str, Any] = {"V": self.vc.to_dict() if self.vc is not None else None}
        if self.tracker is not None:
            out["tracker"] = self.tracker.to_dict()
        if self.priced:
            out.update(history=self.history.to_dict(), excess=self.excess, carry=self.carry)
        return out


def _preemption_time(preempt: Preemption | None, prev: Plan | None, state: SlotState, last: dict | None,
                     iterations: int) -> float:
    """Seconds this slot is charged for a preemption (online.preemption): the last slot that ran
    a plan ran `prev` (`last`: its row) and a device of it is gone now. A slot without a plan
    cannot pay it: the controller carries it to the next slot that runs."""
    if preempt is None or prev is None or last is None:
        return 0.0
    if not preempted(prev, state.available):
        return 0.0
    return preempt.lost_seconds(float(last["batch_time"]), iterations)


def _priced_weights(state: SlotState, V: float, slack: Plan | None, history: History, excess: Sequence[float],
                    horizon: int, executed: int, limits: Sequence[float], opts: SolveOptions, cache: SlotCache,
                    fastest: Callable[[], Any]) -> tuple[tuple[float, ...], Price, list[Plan]]:
    """Record this slot's frontier and price the budgets from the history (online.pricing):
    weights V * lambda. The frontier is the slack plan and the candidate pools of the search
    with every queue 0, with every budget at 1 / BRACKET, 1 and BRACKET times the last price's
    scale s (its largest component; before any price, one reference batch time per budget's
    worth: this slot's fastest batch time) and, for K >= 2, with each budget alone at s. The
    fastest runs a lighter local search (FASTEST_TUNING). Returns the
    weights, the price and the pools' plans. HiGHS failing on the price LP is an error (its
    model status named), never a silent switch to the queues."""
    from ..cost import evaluate
    K = len(limits)
    sopts = replace(opts, replan=False, keep_candidates=True)
    fast = fastest()
    pools = [fast.candidate_pool]
    last = max(history.lam, default=0.0)
    scale = last if last > 0 else (fast.batch_time if fast.plan is not None else 0.0)
    if scale > 0 and np.isfinite(scale):
        weights = [(f * scale,) * K for f in (1.0 / BRACKET, 1.0, BRACKET)]
        if K >= 2:   # each budget alone: the search is a heuristic, and weighing one budget finds other plans
            weights += [tuple(scale if j == k else 0.0 for j in range(K)) for k in range(K)]
        for w in weights:
            pools.append(solve_slot(state, w, 1.0, options=sopts, cache=cache).candidate_pool)
    pts = [points(pool, limits) for pool in pools if pool]
    if slack is not None:
        ev = evaluate(slack, state)
        pts.append(points([(slack, ev.batch_time, ev.costs)], limits))
    history.add(np.vstack(pts) if pts else np.zeros((0, K + 1)))
    left = max(horizon - executed, 1)
    pr = _price(history, _target(history, excess, left, horizon), state)
    scale = V if V > 0 else 1.0
    return tuple(scale * x for x in pr.lam), pr, [c[0] for pool in pools for c in (pool or ())]


def _target(history: History, excess: Sequence[float], left: int, horizon: int) -> list[float]:
    """The price's target use per budget (budgets' worth per slot): 1 - E_k / R less the margin
    m_k (online.pricing, docs/BUDGETS.md "The margin"), R = `left` the slots left (this one
    included) of a run of `horizon` slots:

        m_k = MARGIN / sqrt(n) * min(1, MARGIN_COST * T_fast / lambda_k) * (R - 1) / (H - 1)

    for n >= 2 slots in the history (none for the first: with one slot the LP has no other slot
    to trade against, its price is the slope of this slot's frontier at the target, and any
    margin only pushes the slot off its fastest plan). T_fast (s) is this slot's fastest
    recorded batch time and lambda_k (s per budget's worth) the last price: the margin's
    first-order cost per slot, lambda_k m_k seconds, is at most MARGIN_COST * MARGIN / sqrt(n)
    fastest batch times. (R - 1) / (H - 1) is the share of the run still to insure after this
    slot: none in the last slot, whose reserve no later slot could use. And m_k is at most half
    the distance from 1 - E_k / R down to the least use of budget k the history can reach (the
    mean over its slots of their cheapest point in k): a margin never makes a reachable target
    unreachable (the elastic price is for budgets that cannot be met)."""
    K = len(excess)
    if left < 1 or horizon < left:
        raise ValueError(f"_target: slots left {left} must be in 1..horizon {horizon}")
    slots = [np.asarray(sl, dtype=float).reshape(-1, K + 1) for sl in history.slots if len(sl)]
    n = len(slots)
    low = np.mean([sl[:, 1:].min(axis=0) for sl in slots], axis=0) if slots else np.zeros(K)
    t_fast = float(slots[-1][:, 0].min()) if slots else 0.0
    share = (left - 1) / (horizon - 1) if horizon > 1 else 0.0
    lam = list(history.lam) if len(history.lam) == K else [0.0] * K
    out = []
    for k, e in enumerate(excess):
        g = 1.0 - e / left
        m = margin(n, lam[k], t_fast, share)
        out.append(g - min(m, max(0.5 * (g - low[k]), 0.0)))
    return out


def _top_structures(plans: Sequence[Plan], W: Sequence[float], V: float,
                    limits: Sequence[float], cache: SlotCache) -> list[Plan]:
    """The RESHARE structures (groups, device orders, cuts, schedules) of the valid `plans` with
    the least objective V T + sum_k W_k c_k / Cbar_k (no migration), one plan each, best first."""
    w = np.asarray(W, dtype=float) / np.asarray(limits, dtype=float)
    best: dict[tuple, tuple[float, Plan]] = {}
    for p in plans:
        key = tuple((g.devices, g.cuts, g.schedule, g.recompute, g.micro_batch) for g in p.groups)
        if key in best and best[key][1] == p:
            continue
        if cache.violations(p):
            continue
        ev = cache.evaluation(p)
        obj = V * ev.batch_time + float(w @ np.asarray(ev.costs, dtype=float))
        if key not in best or obj < best[key][0]:
            best[key] = (obj, p)
    return [p for _, p in sorted(best.values(), key=lambda x: x[0])[:RESHARE]]


def _price(history: History, target: Sequence[float], state: SlotState) -> Price:
    """The price of `history` at `target` (History.price), kept as the history's last price;
    HiGHS failing on the LP is an error naming its model status."""
    pr = history.price(target)
    if not pr.ok:
        raise RuntimeError(f"slot {state.t}: the budget price LP over {pr.slots} slots failed "
                           f"(HiGHS model status {pr.status!r})")
    history.lam = list(pr.lam)
    return pr


def _reshared(plans: Sequence[Plan], state: SlotState, W: Sequence[float], V: float, limits: Sequence[float],
              cache: SlotCache) -> list[Plan]:
    """The shares of the slot LP at the price (policies.with_lp_shares) on the RESHARE best
    structures of `plans` (_top_structures; plans carried from the last slot whose devices are
    still there among them): a search at other weights, or the last slot, found the structure,
    the LP fits its shares to this slot and this price."""
    out = []
    for p in _top_structures(plans, W, V, limits, cache):
        q = with_lp_shares(p, state, W, V)
        if q is not None and q != p:
            out.append(q)
    return out


def _tc(ev: Any) -> tuple[float, tuple[float, ...]]:
    return ev.batch_time, ev.costs


def _best_at_price(d: Decision, plans: Sequence[Plan], cache: SlotCache, charge: Callable[[Plan], Charge],
                   W: Sequence[float], V: float, weight: Callable[[Plan], float] | None = None) -> Decision:
    """The search's plan, or the plan of this slot's candidate pools (searches at other weights)
    with the least slot objective V T + sum_k W_k c_k / Cbar_k at the price, charged with
    migration like any plan; the message says when a pool plan is taken. Plans whose objectives
    are tied (within TIE) are told apart by weight(plan), the price LP's weight of the plan's
    point in this slot (pricing.lp_weight), the larger first: at a price where the LP randomises
    this slot between plans, every plan it mixes has the same objective, and the LP's weights
    say which one it mostly takes."""
    seen: set[Plan] = set()
    objs: list[tuple[float, Plan]] = []
    for p in [d.plan, *plans] if d.plan is not None else plans:
        if p in seen:
            continue
        seen.add(p)
        if p is not d.plan and cache.violations(p):
            continue
        objs.append((charge(p).objective(W, V), p))
    if not objs:
        return d
    low = min(o for o, _ in objs)
    tied = [p for o, p in objs if o <= low + TIE * abs(low)]
    best = tied[0]
    if weight is not None and len(tied) > 1:
        best = max(tied, key=weight)   # max keeps the first (the search's plan) among equal weights
    if best is d.plan:
        return d
    return Decision(best, d.status if d.plan is not None else "feasible",
                    f"{d.message}; priced: a plan of the slot's candidate pools has a lower objective at the price"
                    .lstrip("; "), d.solve_time)


def shown_V(pol: Policy, vc: VChoice | None) -> float:
    """The V a run's rows and summary give: the V in force, inf for "v-inf" (the queues ignored),
    0 for "v-zero" (time ignored); nan until the rule has a slot with a plan to set it from."""
    if isinstance(pol, Ours) and pol.queue_mode == "zero":
        return math.inf
    if isinstance(pol, Ours) and pol.queue_mode == "floor":
        return 0.0
    return vc.V if vc is not None else math.nan


def run_result(instance: Instance, rows: pd.DataFrame, vc: VChoice | None, tracker: Tracker | None,
            pre: Preflight | None, tolerance: float | None, pol: Policy, pricing: str | None = None,
            check: tuple[Preflight, tuple[str, ...]] | None = None) -> OnlineRun:
    """The OnlineRun of `rows`: status, message, summary and notes. Notes: the default rule's V = 0
    (VChoice.zero_note, for ours), the pre-flight lines (`pre`: the tracked run's; `check`: the
    plain controller's, budget_check), then the tracker's."""
    status, message = run_status(rows)
    V = shown_V(pol, vc)
    ruled = vc is not None and V == vc.V     # the rule's V is the one in force (not v-inf / v-zero's)
    zero = vc.zero_note() if ruled and isinstance(pol, Ours) else None
    notes = ((zero,) if zero else ()) + tuple(pre.lines if pre else ()) + _queue_priced(pre, pricing, instance) \
        + (check[1] if check else ()) + tuple(tracker.notes if tracker else ())
    s = summarise(rows, instance, tolerance=tolerance)
    if tracker is not None and s.get("preempted_slots"):
        notes += (f"{s['preempted_slots']} slot(s) paid a preemption; those losses are costs no plan of their slot "
                  f"avoids, outside the budget tracker's promise (docs/BUDGETS.md, \"Preemption risk\")",)
    over = [f"{b.name} {100 * s[f'overshoot_{b.name}']:+.2f}%" for b in instance.budgets
            if s["executed_slots"]]
    if over:
        message += "; average cost vs limit: " + ", ".join(over)
    if notes:
        message += "; " + "; ".join(notes)
    s.update({"status": str(status), "success": status.success, "message": message, "notes": list(notes),
              "V": V, "V_rule": vc.to_dict() if ruled else None,
              "budget_tolerance": tolerance, "pricing": pricing,
              "tracker_binding_slots": tracker.binding if tracker else 0})
    for k, b in enumerate(instance.budgets):
        if pre is not None:
            s[f"preflight_cheapest_{b.name}"] = pre.cheapest_avg[k]
            s[f"attainable_{b.name}"] = pre.attainable[k]
            s[f"tracked_limit_{b.name}"] = pre.targets[k]
        elif check is not None:     # at tolerance 0: the limit itself
            s[f"preflight_cheapest_{b.name}"] = check[0].cheapest_avg[k]
            s[f"attainable_{b.name}"] = check[0].attainable[k]
    return OnlineRun(rows, s, status, message, vc if ruled else None, notes)


def _queue_priced(pre: Preflight | None, pricing: str | None, instance: Instance) -> tuple[str, ...]:
    """Under pricing "queue", a tracked run's unattainable budgets are pulled down by their queues
    alone (the tracker judges the attainable ones), which over a short run end above the cheapest
    achievable average (an outside audit: the default instance with money at 0.0010 over 6 slots
    ended +39.0% where the cheapest plans reach +23.9%, and history pricing +24.0%)."""
    if pre is None or pricing != "queue" or all(pre.attainable):
        return ()
    names = ", ".join(b.name for b, a in zip(instance.budgets, pre.attainable) if not a)
    return (f"pricing 'queue': only the queue pulls {names} down (the tracker keeps the attainable budgets), so "
            f"a short run can end above the cheapest achievable average; pricing 'history' (the tracked default) "
            f"spends as little on {names} as it can",)


def budget_check(instance: Instance, tolerance: float = 0.0, options: SolveOptions | None = None,
                 slots: Sequence[int] | None = None) -> tuple[Preflight, tuple[str, ...]]:
    """The pre-flight check (tracking.preflight) for runs the budget tracker does not keep (the
    plain controller, the baselines, `dynpar compare`): the cheapest plans of `slots` (default
    all) against each budget, and one line per budget, or group of budgets, that no run can keep
    within (1 + tolerance) of its limit on average (`unmet_notes`)."""
    pre = preflight(instance, range(instance.num_slots) if slots is None else slots, tolerance, options)
    return pre, unmet_notes(pre, instance, tolerance)


def unmet_notes(pre: Preflight, instance: Instance, tolerance: float) -> tuple[str, ...]:
    """The figures of `pre` for budgets no plan can meet on average within (1 + tolerance) of the
    limit (USD or J per iteration), one line per budget (and one for budgets that can be met
    alone but not together), with nothing about a tracker (tracking.preflight's lines say what
    the tracker does about them)."""
    within = f" within {100 * tolerance:g}%" if tolerance else ""
    lines = []
    for k, b in enumerate(instance.budgets):
        if not pre.tracked[k]:
            best, unit = pre.cheapest_avg[k], "USD" if b.kind == "money" else "J"
            lines.append(f"budget {b.name} cannot be met on average{within}: the least average the cheapest plans of "
                         f"the slots reach is {best:.6g} {unit} per iteration, {100 * (best / b.limit - 1):+.1f}% "
                         f"over its limit {b.limit:.6g} (pre-flight check)")
    together = [b.name for k, b in enumerate(instance.budgets) if pre.tracked[k] and not pre.attainable[k]]
    if together:
        lines.append(f"budgets {' and '.join(together)} cannot be met together on average{within} (each can "
                     f"alone; pre-flight check over the slots' cheapest plans)")
    return tuple(lines)


_SETTING_WORDS = {"V": "V", "budget_tolerance": "budget tolerance", "pricing": "pricing", "policy": "policy",
                  "replan": "re-planning cost", "iterations_per_slot": "iterations per slot",
                  "num_slots": "slots", "instance": "instance", "budgets": "budgets", "options": "search options",
                  "preemption": "preemption"}


def _setting_text(key: str, value: Any) -> str:
    """A saved run's setting `key` (checkpoint.run_config) in words."""
    if value is None:
        return {"V": "the default rule", "budget_tolerance": "off (no budget tracker)"}.get(key, "none")
    if key == "budget_tolerance":
        return f"{100 * float(value):g}%"
    if key == "replan":
        return "charged" if value else "not charged"
    if key == "budgets":
        return ", ".join(f"{n} <= {lim:g}" for n, _, lim in value) or "none"
    if key == "preemption":
        restart, every, aware = value
        return f"{restart:g} s restart, checkpoint every {every} iterations, hazards {'weighed' if aware else 'ignored'}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _config_diff(saved: dict, now: dict) -> str:
    """Each setting where a saved run (`saved`, checkpoint.run_config) and this call differ, in
    words: 'V: saved the default rule, requested 2'."""
    parts = []
    for key in dict.fromkeys([*now, *saved]):
        a, b = saved.get(key), now.get(key)
        if a == b:
            continue
        if key == "inputs" and saved.get("num_slots") != now.get("num_slots"):
            parts.append("inputs: the traces differ from the saved run's, as the slot count does (a run's traces "
                         "are cut to its slots)")
        elif key == "inputs":
            parts.append("inputs: the instance's workload, devices, traces, network or budgets differ from the "
                         "saved run's")
        elif key == "options":
            parts.append("search options: " + _options_diff(str(a), str(b)))
        else:
            parts.append(f"{_SETTING_WORDS.get(key, key)}: saved {_setting_text(key, a)}, requested "
                         f"{_setting_text(key, b)}")
    return "; ".join(parts)


def _fields(text: str) -> dict[str, str]:
    """The top-level fields of a dataclass repr: 'A(x=1, t=(1, 2), u=B(y=3))' -> {'x': '1',
    't': '(1, 2)', 'u': 'B(y=3)'}; {} for text that is not one ('None')."""
    if not text.endswith(")") or "(" not in text:
        return {}
    body, out, depth, start = text[text.index("(") + 1:-1], {}, 0, 0
    for i, ch in enumerate(body + ","):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            key, _, value = body[start:i].strip().partition("=")
            if value:
                out[key] = value
            start = i + 1
    return out


def _options_diff(saved: str, now: str, prefix: str = "") -> str:
    """The fields where two SolveOptions reprs differ, 'name saved X, requested Y' (nested
    SearchTuning fields as tuning.name; None is the defaults, as run_online reads it)."""
    default = repr(SolveOptions()) if not prefix else ""
    a, b = _fields(default if saved == "None" else saved), _fields(default if now == "None" else now)
    parts = []
    for key in dict.fromkeys([*b, *a]):
        x, y = a.get(key, "absent"), b.get(key, "absent")
        if x != y:
            nested = _fields(x) and _fields(y)
            parts.append(_options_diff(x, y, f"{prefix}{key}.") if nested else f"{prefix}{key} saved {x}, requested {y}")
    return ", ".join(parts) or f"saved {_short(saved)}, requested {_short(now)}"


def _short(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """The rows as a DataFrame (an empty frame keeps the slot and status columns)."""
    return pd.DataFrame(rows) if rows else pd.DataFrame({"slot": pd.Series(dtype=int),
                                                         "status": pd.Series(dtype=str)})
