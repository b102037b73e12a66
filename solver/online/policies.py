"""Per-slot policies for the online controller: ours, the baselines and the ablations.

A policy is a small object with `decide(state, queues, V, previous_plan) -> Decision` and a
JSON-able `state_dict()` / `load_state_dict(d)` (so a stopped run resumes exactly). The
controller (`online.py`) charges whatever plan comes back with the same cost model and the
same migration accounting, whichever policy chose it.

Names (`POLICY_NAMES`):
  "ours"        solve_slot with the queues, V and the previous plan;
  "even-dp", "lb-bsp", "gpipe", "dapple", "pipedream"
                the baseline's plan of this slot (recomputed each slot);
  "hetpipe"     HetPipe's virtual workers decided at slot 0 and kept while the plan is still
                valid; recomputed ("re-cut") only when it breaks (a device left);
  "frozen"      our slot-0 plan kept while valid, else re-solved (and the new one kept);
  "shares-only" DAPPLE's groups and cuts, shares optimised by the LP of the slot problem;
  "cuts-only"   our groups and cuts (full search), shares reset to even;
  "v-inf"       ours with the budget ignored (queues treated as 0: V -> infinity);
  "v-zero"      ours at V = 0 (cheapest): minimise sum_k max(Q_k, 1) c_k / Cbar_k; the floor
                keeps the slot problem non-degenerate while queues are empty.

Fallback (documented, never silent): a baseline or ablation whose plan is None or fails
Plan.validate falls back to even DP over the available devices that hold the whole model
(the fastest B/u of them at most); the Decision's status is then "fallback" and its message
says why. When even that is impossible the status is "infeasible" and the plan None.
"""
from __future__ import annotations

import math

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np

from .. import baselines
from ..cost import budget_weights, cost_coeffs, group_coeffs
from ..errors import InfeasibleSlotError
from ..model import Plan, SlotState, plan_from_dict, plan_to_dict, share_cap
from ..model.plan import to_units
from ..solve import SolveOptions, solve_slot
from ..subproblems.shares import solve_shares

BASELINE_NAMES = tuple(baselines.ALL)
ABLATION_NAMES = ("frozen", "shares-only", "cuts-only", "v-inf", "v-zero")
POLICY_NAMES = ("ours", *BASELINE_NAMES, *ABLATION_NAMES)


@dataclass(frozen=True)
class Decision:
    """What a policy chose for one slot.

    status: "optimal" | "feasible" (from the search), "baseline", "kept" (a static plan
    reused), "fallback" (documented substitute), or "infeasible" (plan is None);
    solve_time: seconds of wall clock spent deciding.
    """

    plan: Plan | None
    status: str
    message: str = ""
    solve_time: float = 0.0


# ---------------------------------------------------------------- helpers


def _units(plan: Plan, state: SlotState) -> tuple[Plan, SlotState]:
    """(plan, state) with TP stages as their units (model.plan.to_units): a stage's numbers are
    its unit's; a plan without TP stages unchanged."""
    if not plan.uses_tp:
        return plan, state
    ust, up = to_units(plan, state)
    return up, ust


def with_even_shares(plan: Plan, state: SlotState) -> Plan | None:
    """The same groups and cuts with shares as even as possible within memory (each group's cap
    under its own schedule, recomputation and micro-batch size; shares in units of the least
    common multiple of the groups' sizes); None if impossible."""
    physical, (plan, state) = plan, _units(plan, state)
    caps = [share_cap(state.at_micro_batch(g.micro_batch), g.devices, g.cuts, g.schedule, g.recompute)
            for g in plan.groups]
    unit = math.lcm(*(g.micro_batch or state.workload.micro_batch for g in plan.groups))
    if state.workload.batch % unit:
        return None
    shares = baselines.even_split(len(plan.groups), state.workload.batch, unit, caps)
    if shares is None:
        return None
    return Plan(tuple(replace(g, share=s) for g, s in zip(physical.groups, shares)))


def with_lp_shares(plan: Plan, state: SlotState, queues: Sequence[float], V: float) -> Plan | None:
    """The same groups and cuts with shares from the slot LP (solver.subproblems.shares.solve_shares):
    minimise W z + sum_g q_g b_g, W = V + sum_k w_k R_k, q_g = sum_k w_k e_kg, w_k = Q_k / Cbar_k;
    each group's coefficients under its own schedule, recomputation and micro-batch size (a TP
    stage's those of its unit)."""
    physical, (plan, state) = plan, _units(plan, state)

    coeffs = [group_coeffs(state.at_micro_batch(g.micro_batch), g.devices, g.cuts, g.schedule, g.recompute)
              for g in plan.groups]
    us = [g.micro_batch or state.workload.micro_batch for g in plan.groups]
    cc = cost_coeffs(state, coeffs)
    Q = budget_weights([b.limit for b in state.budgets], queues)
    W = float(V + (Q @ cc.R if len(Q) else 0.0))
    q = (Q @ cc.e) if len(Q) else np.zeros(len(coeffs))
    res = solve_shares(np.array([c.alpha for c in coeffs]), np.array([c.beta for c in coeffs]),
                       np.array([c.cap for c in coeffs]), state.workload.batch,
                       us[0] if len(set(us)) == 1 else us, W, np.asarray(q, dtype=float), lp_bound=False)
    if res.status != "optimal" or len(res.shares) != len(plan.groups):
        return None
    return Plan(tuple(replace(g, share=int(s)) for g, s in zip(physical.groups, res.shares)))


def _valid(plan: Plan | None, state: SlotState) -> bool:
    return plan is not None and not plan.validate(state)


def _with_fallback(plan: Plan | None, state: SlotState, name: str, status: str, t0: float) -> Decision:
    if _valid(plan, state):
        return Decision(plan, status, "", time.perf_counter() - t0)
    why = f"{name} has no plan" if plan is None else (
        f"{name}'s plan is invalid: " + "; ".join(str(v) for v in plan.validate(state)[:3]))
    fb = baselines.even_dp(state)
    if fb is not None and not fb.validate(state):
        return Decision(fb, "fallback", f"{why}; fell back to even DP over devices that fit",
                        time.perf_counter() - t0)
    return Decision(None, "infeasible", f"{why}; no device holds the whole model for even DP",
                    time.perf_counter() - t0)


def _from_result(res: Any, t0: float) -> Decision:
    plan = getattr(res, "plan", None)
    status = getattr(res, "status", "infeasible" if plan is None else "feasible")
    return Decision(plan, status if plan is not None else "infeasible",
                    getattr(res, "message", ""), time.perf_counter() - t0)


# ---------------------------------------------------------------- policies

class Policy:
    """Base: a stateless policy. Subclasses set `name` and implement `decide`."""

    name = "policy"

    def decide(self, state: SlotState, queues: Sequence[float], V: float,
               previous_plan: Plan | None) -> Decision:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, d: dict) -> None:
        pass


class Ours(Policy):
    """The drift-plus-penalty search (solver.solve.solve_slot).

    queue_mode: "real" (the controller's queues), "zero" (budget ignored, V -> infinity)
    or "floor" (V = 0 with each queue at least 1, i.e. weight >= 1/Cbar_k: cheapest).
    """

    def __init__(self, name: str = "ours", options: Any = None, replan: bool = True,
                 iterations_per_slot: int = 100, queue_mode: str = "real") -> None:
        self.name = name
        self.options = options
        self.replan = replan
        self.iterations_per_slot = iterations_per_slot
        self.queue_mode = queue_mode

    def _options(self):
        base = self.options if self.options is not None else SolveOptions()
        return replace(base, replan=self.replan, iterations_per_slot=self.iterations_per_slot)

    def weights(self, state: SlotState, queues: Sequence[float], V: float) -> tuple[tuple[float, ...], float]:
        """(queues, V) handed to the search under this policy's queue mode."""
        if self.queue_mode == "zero":
            return (0.0,) * len(queues), (V if V > 0 else 1.0)
        if self.queue_mode == "floor":
            return tuple(max(float(q), 1.0) for q in queues), 0.0
        return tuple(float(q) for q in queues), float(V)

    def solve(self, state: SlotState, queues: Sequence[float], V: float, previous_plan: Plan | None,
              keep_candidates: bool = False, cache: Any = None, caps: tuple[float, ...] | None = None,
              cap_weight: float = 0.0):
        """solve_slot under this policy's queue mode; keep_candidates: return the scored pool too;
        cache: the slot's SlotCache, shared by the solves of one slot (the same results); caps,
        cap_weight: SolveOptions' (the budget tracker's capped search)."""
        Q, v = self.weights(state, queues, V)
        opts = replace(self._options(), keep_candidates=True) if keep_candidates else self._options()
        if caps is not None:
            opts = replace(opts, caps=caps, cap_weight=cap_weight)
        try:
            return solve_slot(state, Q, v, previous_plan=previous_plan if self.replan else None, options=opts,
                              cache=cache)
        except InfeasibleSlotError as e:
            return _Infeasible(str(e))

    def decide(self, state, queues, V, previous_plan):
        t0 = time.perf_counter()
        return _from_result(self.solve(state, queues, V, previous_plan), t0)


@dataclass(frozen=True)
class _Infeasible:
    message: str
    plan: None = None
    status: str = "infeasible"


class Baseline(Policy):
    """A baseline recomputed every slot, with the documented fallback."""

    def __init__(self, name: str, fn: Callable[[SlotState], Plan | None]) -> None:
        self.name = name
        self.fn = fn

    def decide(self, state, queues, V, previous_plan):
        t0 = time.perf_counter()
        return _with_fallback(self.fn(state), state, self.name, "baseline", t0)


class Static(Policy):
    """A plan decided once and kept while it stays valid; re-decided when it breaks.

    Used for HetPipe (decide = the hetpipe baseline) and for the frozen ablation
    (decide = our search at the current queues and V)."""

    def __init__(self, name: str, decide_once: Callable[[SlotState, Sequence[float], float, Plan | None], Decision]) -> None:
        self.name = name
        self.decide_once = decide_once
        self.kept: Plan | None = None

    def decide(self, state, queues, V, previous_plan):
        t0 = time.perf_counter()
        if self.kept is not None and not self.kept.validate(state):
            return Decision(self.kept, "kept", "static plan kept", time.perf_counter() - t0)
        d = self.decide_once(state, queues, V, previous_plan)
        if d.plan is not None:
            why = "decided at first slot" if self.kept is None else "re-decided: kept plan no longer valid"
            self.kept = d.plan
            d = replace(d, message=f"{why}; {d.message}".rstrip("; "))
        return d

    def state_dict(self) -> dict:
        return {"kept": None if self.kept is None else plan_to_dict(self.kept)}

    def load_state_dict(self, d: dict) -> None:
        k = d.get("kept")
        self.kept = None if k is None else plan_from_dict(k)


class SharesOnly(Policy):
    """DAPPLE's groups and cuts; only the shares optimised by the slot LP."""

    name = "shares-only"

    def decide(self, state, queues, V, previous_plan):
        t0 = time.perf_counter()
        base = _with_fallback(baselines.dapple(state), state, "dapple", "baseline", t0)
        if base.plan is None:
            return base
        p = with_lp_shares(base.plan, state, queues, V)
        if not _valid(p, state):
            return replace(base, status="fallback", message=(base.message + "; LP shares failed, even shares kept").lstrip("; "),
                           solve_time=time.perf_counter() - t0)
        return Decision(p, "feasible" if base.status == "baseline" else "fallback", base.message,
                        time.perf_counter() - t0)


class CutsOnly(Policy):
    """Our groups, orders and cuts (full search at the queues and V); shares reset to even."""

    name = "cuts-only"

    def __init__(self, ours: Ours) -> None:
        self.ours = ours

    def decide(self, state, queues, V, previous_plan):
        t0 = time.perf_counter()
        res = self.ours.solve(state, queues, V, previous_plan)
        if res.plan is None:
            return _with_fallback(None, state, "cuts-only (search)", "feasible", t0)
        p = with_even_shares(res.plan, state)
        return _with_fallback(p, state, "cuts-only (even shares)", "feasible", t0)


def make_policy(name: str, *, options: Any = None, replan: bool = True,
                iterations_per_slot: int = 100) -> Policy:
    """A fresh policy object by name (see POLICY_NAMES); ValueError for an unknown name."""
    kw = dict(options=options, replan=replan, iterations_per_slot=iterations_per_slot)
    if name == "ours":
        return Ours("ours", **kw)
    if name == "v-inf":
        return Ours("v-inf", queue_mode="zero", **kw)
    if name == "v-zero":
        return Ours("v-zero", queue_mode="floor", **kw)
    if name in BASELINE_NAMES:
        fn = baselines.ALL[name]
        if name == "hetpipe":
            return Static("hetpipe", lambda s, q, v, p: _with_fallback(fn(s), s, "hetpipe", "baseline",
                                                                       time.perf_counter()))
        return Baseline(name, fn)
    if name == "frozen":
        ours = Ours("frozen", **kw)
        return Static("frozen", ours.decide)
    if name == "shares-only":
        return SharesOnly()
    if name == "cuts-only":
        return CutsOnly(Ours("cuts-only", **kw))
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
