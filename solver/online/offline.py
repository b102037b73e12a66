"""Offline reference (DESIGN.md section 3, "Baselines"): with the whole trace known, choose one
plan per slot from each slot's candidate set to minimise the average batch time subject to the
averaged budgets,

    minimise   (1/H) sum_t sum_p x_tp T_tp
    subject to sum_p x_tp = 1                                  for every slot t
               (1/H) sum_t sum_p x_tp c_ktp <= Cbar_k          for every budget k
               x_tp in {0, 1}

a MILP in Pyomo solved by HiGHS (appsi_highs, else highs). Budget rows are scaled by 1/Cbar_k.
Candidates dominated in (T, c_1..c_K) within their slot are dropped first (never needed).
The LP relaxation (a stationary randomised choice per slot) is reported as a lower bound.

The reference ignores migration (it is a pairwise, not per-slot, charge): compare it with
the online controller run with replan=False, the article's setting. Units: seconds per
iteration, budget units (USD, J) per iteration.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import baselines
from ..cost import evaluate
from ..model import Instance, Plan, SlotState, plan_from_json
from ..solve import SolveOptions, solve_slot
from ..status import Status


@dataclass(frozen=True)
class Candidate:
    """One feasible plan of one slot: batch_time s/iteration, costs per budget per iteration."""

    plan: Plan
    batch_time: float
    costs: tuple[float, ...]


@dataclass(frozen=True)
class OfflineResult:
    """status: Status.OPTIMAL | INFEASIBLE | ERROR (`.success` when optimal); plans[t] / choice[t]: the chosen plan and its
    index in that slot's (pruned) candidates (None / -1 when not optimal); avg_batch_time:
    seconds per iteration; avg_costs: per budget; lp_bound: the LP relaxation's average batch
    time (nan if not solved); candidates: how many entered the MILP after pruning."""

    status: Status
    message: str
    plans: tuple[Plan | None, ...]
    choice: tuple[int, ...]
    avg_batch_time: float
    avg_costs: tuple[float, ...]
    limits: tuple[float, ...]
    lp_bound: float
    candidates: int
    solve_time: float

    @property
    def success(self) -> bool:
        return self.status.success

    @property
    def ok(self) -> bool:
        """The MILP was solved to optimality (same as success)."""
        return self.status == Status.OPTIMAL


def _as_candidate(c: Any) -> Candidate:
    if isinstance(c, Candidate):
        return c
    plan, T, costs = c
    return Candidate(plan, float(T), tuple(float(x) for x in costs))


def pareto_prune(cands: Sequence[Candidate], rel: float = 1e-12) -> list[Candidate]:
    """Drop duplicates and candidates weakly dominated in (batch_time, costs) by another."""
    pts = sorted({(c.batch_time, *c.costs): c for c in cands}.items())
    kept: list[tuple[tuple, Candidate]] = []
    for key, c in pts:   # sorted by batch time: only earlier ones can dominate
        v = np.asarray(key)
        if any(np.all(np.asarray(k) <= v + rel * np.abs(v)) for k, _ in kept):
            continue
        kept.append((key, c))
    return [c for _, c in kept]


def _solver():
    import pyomo.environ as pyo
    for name in ("appsi_highs", "highs"):
        try:
            s = pyo.SolverFactory(name)
            if s.available(exception_flag=False):
                return s
        except Exception:   # noqa: BLE001, S112 - an unavailable plugin raises on construction
            continue
    raise RuntimeError("no HiGHS solver available to Pyomo (tried appsi_highs and highs)")


def _build(cands: list[list[Candidate]], limits: Sequence[float], relax: bool,
           prefix: tuple[Sequence[float], float] | None = None):
    import pyomo.environ as pyo
    H = len(cands)
    idx = [(t, p) for t in range(H) for p in range(len(cands[t]))]
    m = pyo.ConcreteModel()
    m.I = pyo.Set(initialize=idx, dimen=2)
    m.x = pyo.Var(m.I, domain=pyo.UnitInterval if relax else pyo.Binary)
    m.obj = pyo.Objective(expr=sum(cands[t][p].batch_time * m.x[t, p] for t, p in idx) / H)
    m.one = pyo.Constraint(range(H), rule=lambda mm, t: sum(mm.x[t, p] for p in range(len(cands[t]))) == 1)

    def budget(mm, k):
        lim = float(limits[k])
        scale = 1.0 / lim if lim > 0 else 1.0
        return sum(cands[t][p].costs[k] * scale * mm.x[t, p] for t, p in idx) / H <= lim * scale
    m.budget = pyo.Constraint(range(len(limits)), rule=budget)
    if prefix is not None:
        ref, allow = [float(x) for x in prefix[0]], float(prefix[1])
        if len(ref) != len(limits) or not all(r > 0 for r in ref):
            raise ValueError(f"prefix: expected one reference limit > 0 per budget ({len(limits)}), got {prefix[0]!r}")
        rows = [(t, k) for t in range(H) for k in range(len(limits))]

        def running(mm, t, k):
            return sum((cands[s][p].costs[k] / ref[k] - 1.0) * mm.x[s, p]
                       for s in range(t + 1) for p in range(len(cands[s]))) <= allow
        m.prefix = pyo.Constraint(rows, rule=running)
    return m


def _solve(m, time_limit_s: float | None):
    from pyomo.opt import TerminationCondition as TC
    s = _solver()
    kw = {}
    if time_limit_s is not None:
        if hasattr(s, "config"):       # appsi: solve() sets config.time_limit from its own timelimit argument
            kw["timelimit"] = float(time_limit_s)
        else:
            s.options["time_limit"] = float(time_limit_s)
    try:
        res = s.solve(m, load_solutions=False, **kw)
    except Exception as e:  # noqa: BLE001 - report solver failures as a status, not a crash
        return Status.ERROR, f"HiGHS failed: {e}"
    tc = res.solver.termination_condition
    if tc == TC.optimal:
        m.solutions.load_from(res)
        return Status.OPTIMAL, "optimal"
    if tc in (TC.infeasible, TC.infeasibleOrUnbounded):
        return Status.INFEASIBLE, f"no choice of candidates meets every averaged budget ({tc})"
    if tc == TC.maxTimeLimit:
        return Status.ERROR, f"HiGHS stopped at the time limit of {time_limit_s:g} s before proving an optimum"
    return Status.ERROR, f"HiGHS termination condition {tc}"


def solve_offline(instance: Instance | Sequence[float], candidates_per_slot: Sequence[Iterable[Any]], *,
                  limits: Sequence[float] | None = None, time_limit_s: float | None = None,
                  lp_bound: bool = True, prefix: tuple[Sequence[float], float] | None = None) -> OfflineResult:
    """The offline MILP over given candidates: one list per slot of Candidate or
    (Plan, batch_time, costs). `limits` overrides the instance's budget limits (e.g. to compare
    at the online controller's realised budget use). prefix = (Cbar, A): also keep the running
    excess sum_{s <= t} (c_k(s) / Cbar_k - 1) <= A after every slot t, for every budget (the
    budget tracker's rule with A = eps H: the reference under the same guarantee as the online
    run, which cannot borrow from later slots). time_limit_s: HiGHS's limit per MILP (seconds;
    None: to optimality, the default: until session 31 a limit never reached HiGHS, so every
    figure of the docs was solved to optimality; a limit reached is status "error")."""
    import pyomo.environ as pyo

    t0 = time.perf_counter()
    lims = tuple(float(x) for x in (limits if limits is not None else
                                    (instance if not isinstance(instance, Instance) else
                                     [b.limit for b in instance.budgets])))
    cands = [pareto_prune([_as_candidate(c) for c in slot]) for slot in candidates_per_slot]
    H, K = len(cands), len(lims)
    nan = float("nan")

    def fail(status: Status, msg: str, lp: float = nan) -> OfflineResult:
        return OfflineResult(status, msg, (None,) * H, (-1,) * H, nan, (nan,) * K, lims, lp,
                             sum(map(len, cands)), time.perf_counter() - t0)

    if H == 0:
        return fail(Status.ERROR, "no slots")
    empty = [t for t, c in enumerate(cands) if not c]
    if empty:
        return fail(Status.INFEASIBLE, f"slots without any feasible candidate: {empty[:10]}")
    if any(len(c.costs) != K for s in cands for c in s):
        return fail(Status.ERROR, f"every candidate needs {K} costs")
    lp = nan
    if lp_bound:
        mr = _build(cands, lims, relax=True, prefix=prefix)
        st, _ = _solve(mr, time_limit_s)
        lp = float(pyo.value(mr.obj)) if st == Status.OPTIMAL else nan
        if st == Status.INFEASIBLE:
            return fail(Status.INFEASIBLE, "even the LP relaxation is infeasible: no mix of candidates meets "
                                      "every averaged budget", lp)
    m = _build(cands, lims, relax=False, prefix=prefix)
    st, msg = _solve(m, time_limit_s)
    if st != Status.OPTIMAL:
        return fail(st, msg, lp)
    choice = tuple(max(range(len(cands[t])), key=lambda p: pyo.value(m.x[t, p])) for t in range(H))
    chosen = [cands[t][p] for t, p in enumerate(choice)]
    avgT = float(np.mean([c.batch_time for c in chosen]))
    avgC = tuple(float(np.mean([c.costs[k] for c in chosen])) for k in range(K))
    return OfflineResult(Status.OPTIMAL, msg, tuple(c.plan for c in chosen), choice, avgT, avgC, lims, lp,
                         sum(map(len, cands)), time.perf_counter() - t0)


# ---------------------------------------------------------------- candidate generation


def weight_settings(state: SlotState, scales: Sequence[float] = (0.1, 0.3, 1.0, 3.0, 10.0),
                    T_ref: float = 1.0) -> list[tuple[tuple[float, ...], float]]:
    """(queues, V) pairs that pull the search from the fastest plan to the cheapest.

    Queues are in budget units, as solve_slot takes them (it divides by Cbar_k itself), and V is
    1 / T_ref (T_ref: the fastest plan's batch time, seconds), so each setting weighs one
    reference batch time against s budgets' worth of cost whatever the units: zero queues
    (fastest), every queue s / K for each scale s, for K >= 2 each budget alone at s = 1, and
    V = 0 with every queue 1 (cheapest in sum_k c_k / Cbar_k) and, for K >= 2, each budget alone
    at V = 0 (cheapest in that budget)."""
    if not (T_ref > 0 and np.isfinite(T_ref)):
        raise ValueError(f"weight_settings: T_ref must be a positive number of seconds, got {T_ref}")
    K = len(state.budgets)
    V = 1.0 / float(T_ref)
    out: list[tuple[tuple[float, ...], float]] = [((0.0,) * K, V)]
    out += [((s / max(K, 1),) * K, V) for s in scales]
    alone = [tuple(1.0 if j == k else 0.0 for j in range(K)) for k in range(K)] if K >= 2 else []
    out += [(q, V) for q in alone]
    out.append(((1.0,) * K, 0.0))
    out += [(q, 0.0) for q in alone]
    return out


def slot_candidates(state: SlotState, settings: Sequence[tuple[Sequence[float], float]] | None = None,
                    extra: Iterable[Plan] = (), include_baselines: bool = True,
                    options: Any = None, scales: Sequence[float] = (0.1, 0.3, 1.0, 3.0, 10.0)) -> list[Candidate]:
    """Feasible plans of one slot: the search's kept candidates at each (queues, V) setting
    (default weight_settings(state, scales, T_ref) with T_ref the fastest plan's batch time),
    the baselines, and `extra` plans; each charged by the cost model (no migration)."""
    from dataclasses import replace as dc_replace

    opts = dc_replace(options or SolveOptions(), keep_candidates=True, replan=False)
    plans: list[Plan] = []
    if settings is None:
        fast = solve_slot(state, (0.0,) * len(state.budgets), 1.0, options=opts)
        if fast.plan is not None:
            plans.append(fast.plan)
            plans += [c[0] for c in (fast.candidate_pool or ())]
            settings = weight_settings(state, scales, fast.batch_time)[1:]
        else:
            settings = []
    for Q, V in settings:
        res = solve_slot(state, tuple(Q), V, options=opts)
        if res.plan is not None:
            plans.append(res.plan)
        plans += [c[0] for c in (res.candidate_pool or ())]
    if include_baselines:
        plans += [p for p in (fn(state) for fn in baselines.ALL.values()) if p is not None]
    plans += [p for p in extra if p is not None]
    out, seen = [], set()
    for p in plans:
        if p in seen:
            continue
        seen.add(p)
        if p.validate(state):
            continue
        ev = evaluate(p, state)
        out.append(Candidate(p, ev.batch_time, ev.costs))
    return out


def plans_from_frame(df: Any, num_slots: int) -> list[list[Plan]]:
    """Per slot, the plans recorded in online result frames' plan_json column (several frames ok)."""
    frames = df if isinstance(df, (list, tuple)) else [df]
    out: list[list[Plan]] = [[] for _ in range(num_slots)]
    for f in frames:
        for t, js in zip(f["slot"], f["plan_json"]):
            p = plan_from_json(js)
            if p is not None and 0 <= int(t) < num_slots:
                out[int(t)].append(p)
    return out


def offline_reference(instance: Instance, *, slots: Sequence[int] | None = None,
                      settings_scales: Sequence[float] = (0.1, 0.3, 1.0, 3.0, 10.0),
                      extra_plans: Sequence[Sequence[Plan]] | None = None, include_baselines: bool = True,
                      limits: Sequence[float] | None = None, options: Any = None,
                      time_limit_s: float | None = None,
                      prefix: tuple[Sequence[float], float] | None = None) -> OfflineResult:
    """Build every slot's candidates (search at several weights, baselines, extra plans such as
    an online run's, see plans_from_frame) and solve the offline MILP (prefix: see solve_offline)."""
    cands = reference_candidates(instance, slots=slots, settings_scales=settings_scales, extra_plans=extra_plans,
                                 include_baselines=include_baselines, options=options)
    return solve_offline(instance, cands, limits=limits, time_limit_s=time_limit_s, prefix=prefix)


def reference_candidates(instance: Instance, *, slots: Sequence[int] | None = None,
                         settings_scales: Sequence[float] = (0.1, 0.3, 1.0, 3.0, 10.0),
                         extra_plans: Sequence[Sequence[Plan]] | None = None, include_baselines: bool = True,
                         options: Any = None) -> list[list[Candidate]]:
    """Every slot's candidates for the offline MILP (slot_candidates of each slot)."""
    slots = list(range(instance.num_slots)) if slots is None else list(slots)
    return [slot_candidates(instance.state(t), None, extra_plans[t] if extra_plans is not None else (),
                            include_baselines, options, settings_scales) for t in slots]


def calibrate_budgets(instance: Instance, frac: float = 0.5, slots: Sequence[int] | None = None,
                      options: Any = None) -> Instance:
    """A copy of `instance` whose budget limits sit at `frac` of the way from the average cost
    of the cheapest known plan (baselines.cheapest) to that of the fastest plan (the search with
    empty queues), averaged over `slots` (default all): frac = 0 is as tight as the cheapest
    plan, frac = 1 never binds the fastest plan. Slots without a plan are skipped."""
    from dataclasses import replace as dc_replace


    K = len(instance.budgets)
    cheap, fast = [], []
    for t in (range(instance.num_slots) if slots is None else slots):
        st = instance.state(t)
        c = baselines.cheapest(st)
        r = solve_slot(st, (0.0,) * K, 1.0, options=dc_replace(options or SolveOptions(), replan=False))
        if c is None or r.plan is None:
            continue
        cheap.append(evaluate(c, st).costs)
        fast.append(evaluate(r.plan, st).costs)
    if not cheap:
        raise ValueError(f"calibrate_budgets: no slot of {instance.name!r} has a plan")
    lo, hi = np.mean(cheap, axis=0), np.mean(fast, axis=0)
    lim = lo + frac * (hi - lo)
    for k, b in enumerate(instance.budgets):
        if not lim[k] > 0:
            raise ValueError(f"calibrate_budgets: frac={frac!r} puts budget {b.name!r}'s limit at {lim[k]:.6g} "
                             f"(cheapest {lo[k]:.6g}, fastest {hi[k]:.6g}); expected a limit > 0")
    budgets = tuple(dc_replace(b, limit=float(x)) for b, x in zip(instance.budgets, lim))
    return dc_replace(instance, budgets=budgets)


# ---------------------------------------------------------------- what no online rule can beat


@dataclass(frozen=True)
class OnlineBound:
    """The result of `online_lower_bound`. status: Status.OPTIMAL | INFEASIBLE | ERROR; ratio:
    z*, the least, over every choice of plans in the shared slots, of the largest over the
    traces of (that trace's best average batch time given the shared choice) / (that trace's
    offline optimum); offline: each trace's offline optimum, seconds per iteration; shared:
    the shared slots (0 .. shared - 1); prefix: whether each trace's choice kept the tracker's
    rule after every slot (else only at the end); bound_s: each trace's average batch time at
    the minimising choice (seconds)."""

    status: Status
    message: str
    ratio: float
    offline: tuple[float, ...]
    bound_s: tuple[float, ...]
    shared: int
    prefix: bool
    solve_time: float

    @property
    def ok(self) -> bool:
        return self.status == Status.OPTIMAL


def online_lower_bound(traces: Sequence[Sequence[Iterable[Any]]], shared: int, limits: Sequence[float],
                       tolerance: float, *, prefix: bool = True, time_limit_s: float | None = None) -> OnlineBound:
    """A lower bound on what any online rule can guarantee (docs/BUDGETS.md, "What no online rule
    can do").

    traces: per trace, per slot, the candidates (Candidate or (Plan, batch_time, costs)); every
    trace has the same number of slots H and the same candidates in slots 0 .. shared - 1 (a
    ValueError says where they differ). An online rule sees nothing of a trace before it comes,
    so on traces that agree up to slot shared - 1 it makes the same choices in those slots.
    Each trace must end with every budget k within the tolerance, sum_t (c_k(t) / Cbar_k - 1)
    <= tolerance * H, and with prefix=True after every slot too (the budget tracker's rule, the
    weakest rule that keeps that promise on every trace whose cheapest plans meet the budgets).
    Each trace's offline optimum is the MILP of solve_offline at limits (1 + tolerance) Cbar
    (the same budgets and tolerance, the whole trace known). The MILP here minimises z subject
    to (1/H) sum_t T_j(t) <= z OPT_j for every trace j, the choices of the shared slots common:
    z* is then a lower bound, over these traces, on max_j (online rule's average batch time /
    OPT_j) for every online rule that keeps the tolerance and picks among these candidates."""
    import pyomo.environ as pyo

    t0 = time.perf_counter()
    lims = np.asarray(limits, dtype=float)
    K = len(lims)
    if not traces:
        raise ValueError("online_lower_bound: expected at least one trace, got none")
    if not (tolerance >= 0 and np.isfinite(tolerance)):
        raise ValueError(f"online_lower_bound: tolerance must be a finite fraction >= 0, got {tolerance}")
    if np.any(~(lims > 0)):
        raise ValueError(f"online_lower_bound: every limit must be > 0, got {list(lims)}")
    cands = [[pareto_prune([_as_candidate(c) for c in slot]) for slot in tr] for tr in traces]
    H = len(cands[0])
    if any(len(tr) != H for tr in cands):
        raise ValueError(f"online_lower_bound: every trace needs {H} slots, got {[len(tr) for tr in cands]}")
    if not (0 <= shared <= H):
        raise ValueError(f"online_lower_bound: shared must be in 0..{H}, got {shared}")
    for j, tr in enumerate(cands[1:], start=1):
        for t in range(shared):
            if [(c.batch_time, c.costs) for c in tr[t]] != [(c.batch_time, c.costs) for c in cands[0][t]]:
                raise ValueError(f"online_lower_bound: trace {j} differs from trace 0 in shared slot {t}")
    if any(len(c.costs) != K for tr in cands for s in tr for c in s):
        raise ValueError(f"online_lower_bound: every candidate needs {K} costs")
    nan = float("nan")

    def fail(status: Status, msg: str, opt: Sequence[float] = ()) -> OnlineBound:
        return OnlineBound(status, msg, nan, tuple(opt), (), shared, prefix, time.perf_counter() - t0)

    opt = []
    for j, tr in enumerate(cands):
        r = solve_offline(list(lims * (1 + tolerance)), tr, lp_bound=False, time_limit_s=time_limit_s)
        if not r.ok:
            return fail(r.status, f"trace {j}: the offline optimum is {r.status}: {r.message}", opt)
        opt.append(r.avg_batch_time)
    m = pyo.ConcreteModel()
    idx = [(-1, t, p) for t in range(shared) for p in range(len(cands[0][t]))]
    idx += [(j, t, p) for j, tr in enumerate(cands) for t in range(shared, H) for p in range(len(tr[t]))]
    m.x = pyo.Var(idx, domain=pyo.Binary)
    m.z = pyo.Var()
    m.obj = pyo.Objective(expr=m.z)
    m.rows = pyo.ConstraintList()
    for t in range(shared):
        m.rows.add(sum(m.x[-1, t, p] for p in range(len(cands[0][t]))) == 1)
    times = []
    for j, tr in enumerate(cands):
        def x(t: int, p: int, j: int = j):
            return m.x[-1, t, p] if t < shared else m.x[j, t, p]
        for t in range(shared, H):
            m.rows.add(sum(x(t, p) for p in range(len(tr[t]))) == 1)
        T = sum(tr[t][p].batch_time * x(t, p) for t in range(H) for p in range(len(tr[t]))) / H
        times.append(T)
        m.rows.add(T <= m.z * opt[j])
        for k in range(K):
            run = 0
            for t in range(H):
                run = run + sum((tr[t][p].costs[k] / lims[k] - 1.0) * x(t, p) for p in range(len(tr[t])))
                if prefix or t == H - 1:
                    m.rows.add(run <= tolerance * H)
    st, msg = _solve(m, time_limit_s)
    if st != Status.OPTIMAL:
        return fail(st, msg, opt)
    return OnlineBound(Status.OPTIMAL, msg, float(pyo.value(m.z)), tuple(opt),
                       tuple(float(pyo.value(T)) for T in times), shared, prefix, time.perf_counter() - t0)
