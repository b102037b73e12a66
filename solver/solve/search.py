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
import numbers
import time
from dataclasses import replace
from typing import Iterable, Sequence

from ..model.plan import Plan
from ..model.state import SlotState
from ..status import Status
from ..subproblems.cache import SlotCache, slot_cache
from .bounds import slot_lower_bound
from .classes import applies, device_classes, solve_by_classes
from .families import families, split_pipes
from .gc_pause import paused
from .incumbents import score_incumbents
from .inputs import check_queues, check_state, check_V, infeasible_reason
from .local import local_search, polish
from .micro_batch import micro_batch_sizes, single_size, solve_by_micro_batch, with_micro_batch
from . import rescue
from .options import SlotResult, SolveOptions, deadline_of, past, screening, time_left
from .orders import memory_order, nn_order
from .oracle import solve_exact
from .schedules import entry
from .scoring import Scored, Scorer, slot_result
from .sources import describe
from .tp import (Descent, allowed_degrees, better, check_degrees, physical_result, search_configurations, tp_applies,
                 tp_result, units_state)


def solve_slot(state: SlotState, queues: Sequence[float] | None = (), V: float = 1.0, *,
               previous_plan: Plan | None = None, options: SolveOptions | None = None,
               cache: SlotCache | None = None) -> SlotResult:
    """Choose the plan minimising V T + sum_k Q_k c_k / Cbar_k (+ amortised migration) in this
    slot. queues: None or () for all zero, else one finite number >= 0 per budget, in budget
    order and budget units (solver.online.queues); V: a finite number >= 0, the weight of one
    second of batch time against one budget's worth of cost (the rule: solve.inputs; TypeError
    or ValueError naming the argument otherwise); cache: the caller's SlotCache of this state
    (to share cut DPs and evaluations with other solves of the same slot; a new one when None).
    Returns a SlotResult (status, message).
    """
    check_state(state)
    opt = options or SolveOptions()
    if not isinstance(opt, SolveOptions):
        raise TypeError(f"options: expected a SolveOptions or None, got {type(opt).__name__}")
    with paused(opt.pause_gc):
        return _solve_slot(state, queues, V, previous_plan, opt, cache)


def _solve_slot(state: SlotState, queues: Sequence[float] | None, V: float, previous_plan: Plan | None,
                opt: SolveOptions, cache: SlotCache | None) -> SlotResult:
    """solve_slot with the collector as SolveOptions.pause_gc leaves it."""
    t0 = time.perf_counter()
    Q = check_queues(state, queues)
    V = check_V(V)
    if opt.caps is not None:
        _check_caps(state, opt)
    if opt.exact:
        if not opt.one_f_one_b:
            raise ValueError("one_f_one_b: the exact oracle searches every schedule; expected True with exact=True, "
                             "got False")
        if opt.time_limit_s is not None:
            raise ValueError(f"time_limit_s: the exact oracle runs to completion; expected None with exact=True, "
                             f"got {opt.time_limit_s!r}")
        return solve_exact(state, queues, V, previous_plan=previous_plan if opt.replan else None,
                           iterations_per_slot=opt.iterations_per_slot, keep_candidates=opt.keep_candidates,
                           cache=cache, tuning=opt.tuning, tp_degrees=opt.tp_degrees, recompute=opt.recompute)
    check_degrees(opt.tp_degrees)
    if opt.classes not in ("both", "auto", "off"):
        raise ValueError(f"classes: expected 'both', 'auto' or 'off', got {opt.classes!r}")
    if opt.classes != "off":
        res = _with_classes(state, queues, Q, V, previous_plan, opt, slot_cache(state, cache), t0)
    elif not tp_applies(state, opt.tp_degrees):
        res = _search(state, queues, Q, V, previous_plan, opt, cache, t0)
    else:
        res = _search_tp(state, queues, Q, V, previous_plan, opt, slot_cache(state, cache), t0)
    return _unfit_degrees(state, opt.tp_degrees, res)


def _unfit_degrees(state: SlotState, degrees: Sequence[int], res: SlotResult) -> SlotResult:
    """res, its message saying which asked-for TP degrees no server's pool of one kind can hold
    in this slot (not tried, rather than dropped unsaid); nothing on a state without servers
    (no network model) or one already in TP units."""
    if state.network is None or state.tp is not None:   # no servers: TP is not on offer at all
        return res
    fit = {t for ts in allowed_degrees(state, degrees).values() for t in ts}
    unfit = sorted({t for t in degrees if t > 1 and t not in fit})
    note = (f"tp degree {', '.join(map(str, unfit))}: no server holds that many available devices of one kind "
            f"in slot {state.t}, not tried")
    if not unfit or note in res.message:     # the class search's inner solve has said it already
        return res
    return replace(res, message=f"{res.message}; {note}")


def _check_caps(state: SlotState, opt: SolveOptions) -> None:
    """SolveOptions.caps: one number per budget, not NaN (inf: no cap); cap_weight finite, >= 0;
    not with the exact oracle, which scores without them."""
    caps = tuple(opt.caps)
    if len(caps) != len(state.budgets) or any(not isinstance(c, numbers.Real) or math.isnan(c) for c in caps):
        raise ValueError(f"caps: expected one number per budget ({len(state.budgets)}), got {opt.caps!r}")
    if not (math.isfinite(opt.cap_weight) and opt.cap_weight >= 0):
        raise ValueError(f"cap_weight: expected a finite number >= 0, got {opt.cap_weight!r}")
    if opt.exact:
        raise ValueError("caps: the exact oracle scores without them; expected caps=None with exact=True, "
                         f"got {opt.caps!r}")


def _with_classes(state: SlotState, queues: Sequence[float] | None, Q, V: float, previous_plan: Plan | None,
                  opt: SolveOptions, cache: SlotCache, t0: float) -> SlotResult:
    """SolveOptions.classes "both" or "auto" (solve.classes): where the slot is a pool of few
    large classes of like devices, the class-level search; with "both" the device-level search
    too, and the better of the two (its lower bound the lesser of theirs); elsewhere, and where
    the class-level search finds no plan, the device-level search alone (with "auto" the
    message says why)."""
    tune = opt.tuning
    found = None if len(state.available_indices) < tune.class_from_devices or state.tp is not None \
        or infeasible_reason(state) else device_classes(state, cache, tune.class_max, tune.class_min_size)
    by_class = None
    if applies(found, len(state.available_indices), opt):
        by_class = solve_by_classes(state, found, Q, V, previous_plan, opt, cache, t0)
        if by_class is not None and opt.classes == "auto":
            return by_class
        why = "no shape of the device classes holds the model"
    else:
        why = (f"not {tune.class_from_devices} or more available devices in at most {tune.class_max} "
               f"classes of {tune.class_min_size} or more like devices with like links")
    rest = time_left(opt, deadline_of(opt, t0))        # one deadline for both searches
    res = solve_slot(state, queues, V, previous_plan=previous_plan, options=replace(rest, classes="off"), cache=cache)
    if by_class is None:
        return res if opt.classes == "both" else \
            replace(res, message=f"{res.message} (classes auto: {why}; searched device by device)")
    lb = min(res.lower_bound, by_class.lower_bound)
    if better(by_class, res):
        return replace(by_class, solve_time=time.perf_counter() - t0, lower_bound=lb,
                       message=f"{by_class.message}; the device-level search's best was {res.objective:.6g}")
    return replace(res, solve_time=time.perf_counter() - t0, lower_bound=lb,
                   message=f"{res.message}; the class-level search's best was {by_class.objective:.6g}")


def _search_tp(state: SlotState, queues: Sequence[float] | None, Q, V: float, previous_plan: Plan | None,
               opt: SolveOptions, cache: SlotCache, t0: float) -> SlotResult:
    """TP configurations (solve.tp) screened at one micro-batch size, then every size on the
    winner: the coordinate descent runs at the workload's own size u (at the smallest size
    when no configuration has a plan at u), each trial on SearchTuning.tp_explore of the work
    budget and skipped when its lower bound at that size is no better than the incumbent; the
    winning configuration is then searched on the full budget at every size and polished with
    mixed sizes (solve.micro_batch), its screen reused, and not searched again where the budget
    never stopped the screen. Degree 1 everywhere, when its screen came within
    SearchTuning.tp_recheck of the winner's, is searched in full too at every size, as the
    degree-1 search would, so that TP does not lose to it. Other configurations
    that lose at u are not searched at other sizes (the oracle, n <= 6, tries every one).
    A time limit (opt.time_limit_s) is one deadline for all of it: each search gets the time
    left, and once it has passed no further configuration or full search is started (the
    message says how many were left out)."""
    n = len(state.available_indices)
    deadline = deadline_of(opt, t0)
    full = opt.max_structures if opt.max_structures is not None else opt.tuning.work_budget(n)
    trial_opt = opt if opt.tuning.tp_explore >= 1 else screening(opt, opt.tuning.tp_explore * full)
    sizes = micro_batch_sizes(state)

    complete: set[tuple[int, int]] = set()     # (unit state id, size) whose screening the budget never stopped

    def descend(u: int) -> tuple[Descent, dict[int, SlotResult]]:
        """The descent at micro-batch size u; its screening searches by unit state id."""
        screened: dict[int, SlotResult] = {}

        def explore(ust: SlotState, uc: SlotCache) -> SlotResult:
            one = single_size(ust, u)
            how: dict = {}
            res = _search(one, queues, Q, V, previous_plan, time_left(trial_opt, deadline), uc.at_size(one),
                          time.perf_counter(), how)
            if res.plan is not None and u != state.workload.micro_batch:
                # its groups train at u, not at the workload's size (the descent's best may be
                # returned as it is: fuzzed slot 803121, shares of 5 at u = 8)
                res = replace(res, plan=with_micro_batch(res.plan, u))
            screened[id(ust)] = res
            if not how["ran_out"]:
                complete.add((id(ust), u))
            return res

        def bound(ust: SlotState) -> float:
            return slot_lower_bound(single_size(ust, u), Q, V)

        return search_configurations(state, opt.tp_degrees, explore, bound, cache, explore(state, cache),
                                      opt.tuning.tp_pool_steps_up_to, stop=lambda: past(deadline),
                                      partial=n <= opt.tuning.small_devices,
                                      all_sets_up_to=opt.tuning.tp_all_sets_up_to), screened

    for u in dict.fromkeys([sizes[0], min(sizes)]):
        found, screened = descend(u)
        if found.best.plan is not None:
            break

    def finish(ust: SlotState, uc: SlotCache) -> SlotResult | None:
        """The configuration of unit state ust on the full budget at every size (its screen at u
        reused), over physical devices; None when its screen already is that."""
        full_already = trial_opt is opt or (id(ust), u) in complete     # a full-budget search would repeat it
        if len(sizes) == 1 and full_already:
            return None
        if past(deadline):
            found.late += 1
            return None
        found.runs += 1
        left = time_left(opt, deadline)
        if len(sizes) == 1:
            one = single_size(ust, u)
            return physical_result(_search(one, queues, Q, V, previous_plan, left, uc.at_size(one),
                                           time.perf_counter()), ust)
        done = {u: screened[id(ust)]} if id(ust) in screened else {}
        return physical_result(solve_by_micro_batch(ust, queues, Q, V, _without_tp, previous_plan=previous_plan,
                                                    options=left, cache=uc,
                                                    **{"known" if full_already else "screened": done}), ust)

    # the descent's bounds are at size u; a result at other sizes needs each configuration's over every size
    every_size = None if len(sizes) == 1 else (lambda ust: slot_lower_bound(ust, Q, V))
    best = found.best
    one = screened.get(id(state))
    recheck = found.state is not state and one is not None and one.plan is not None \
        and one.objective <= (1 + opt.tuning.tp_recheck) * found.best.objective
    res = finish(found.state, found.cache)
    if res is not None and better(res, best):
        best = res
    if recheck:
        # degree 1 screened close to the chosen configuration: search it as the degree-1 search
        # would (every size screened, the best in full, mixed sizes polished), its screen at u
        # reused, so that TP never loses to it (the winner's competitive sizes alone missed
        # mixed-size plans: on Sailor's GPT-Neo-2.7 case, A100 groups at u = 1 beside a V100
        # group at u = 8, 13% faster than the TP plan)
        res = finish(state, cache)
        if res is not None and better(res, best):
            best, found.degree_one = res, True
    kept = _previous_kept(state, Q, V, previous_plan, opt, cache)
    if kept is not None:        # its units are visited too: the lower bound covers them
        found.visited.append(kept[1])
        found.bounds.append(slot_lower_bound(kept[1], Q, V))
        kept = kept[0]
    if kept is not None and better(kept, best):
        best, found.degree_one, found.kept_previous = kept, False, True
    return tp_result(best, found, time.perf_counter() - t0, state, bound=every_size)


def _previous_kept(state: SlotState, Q, V: float, previous_plan: Plan | None, opt: SolveOptions,
                   cache: SlotCache) -> tuple[SlotResult, SlotState] | None:
    """A previous plan with TP stages, kept (and re-shared), scored on the unit state of its own
    units at every micro-batch size (over physical devices): the descent's configurations need
    not form its units, nor its screens hold its sizes, so without this a TP result could lose
    to keeping the previous plan. Returns (that result, the unit state), or None when there is
    none, it has no TP stage or it is not valid in this slot."""
    if previous_plan is None or not previous_plan.uses_tp or previous_plan.validate(state):
        return None
    own = [u for g in previous_plan.groups for u in g.units()]
    used = {d for u in own for d in u}
    units = sorted(own + [(i,) for i in range(state.n) if i not in used])
    try:
        ust, uc = units_state(state, units, cache)
    except ValueError:      # its units cannot be formed in this slot any more
        return None
    sc = Scorer(ust, Q, V, opt, previous_plan, cache=uc)
    score_incumbents(ust, sc, Q, previous_plan, recut_previous=False)
    if sc.best is None:
        return None
    return physical_result(slot_result(ust, sc, Q, V, Status.FEASIBLE, "the previous plan's TP units: "
                                       f"best: {describe(sc.best.source)}", time.perf_counter()), ust), ust


def _deep_rescue(state: SlotState, sc: Scorer, max_depth: int) -> None:
    """The last try of a slot where no family's group holds the model: one pipeline of the k
    devices of most memory, memory-rich first, at every depth k from the least that could hold
    the model to max_depth (the families try some depths only), under each (schedule,
    recompute) variant from the most frugal (1F1B with recomputation: deep pipelines stash the
    most in their first stages), cut to hold the whole batch. An outside fuzz's slots needed 10 and 16 such devices where
    the families tried 8 and 16 of other sets."""
    avail = list(state.available_indices)
    by_room = sorted(avail, key=lambda d: (-sc.room(d), -state.speed[d], d))
    for k in range(max(2, sc.least_holding_depth()), min(len(avail), max_depth, sc.L) + 1):
        o = memory_order(state, by_room[:k])
        for v in reversed(sc.variants):
            c = sc.cuts(o, sc.B, None, variant=v)    # one pipeline takes the whole batch
            if c is not None and sc.score((entry(o, c, *v),), source=f"roomy{k}") is not None:
                return
    _any_order_rescue(state, sc, max_depth)


def _any_order_rescue(state: SlotState, sc: Scorer, max_depth: int) -> None:
    """After _deep_rescue: one pipeline holding the whole batch over any order of any subset of
    the devices of most memory (rescue.chain_order), under GPipe and each variant, the fewest
    stages first for 1F1B; its order re-cut by the min-bottleneck DP and scored (an outside
    audit's slots the search had called infeasible: 7 of 266 in tight memory)."""
    devs = rescue.candidates(list(state.available_indices), sc.room)
    n, L, B = len(devs), sc.L, sc.B
    deepest = min(n, max_depth, L)
    for v in (("gpipe", False), *sc.variants):
        if v[0] == "gpipe":
            tab = sc.cache.stage_ends(devs, B, *v, stages=1, position=0)
            got = [] if tab is None else [rescue.chain_order(lambda p: tab, n, L)]
        else:
            got = []
            for k in range(max(2, sc.least_holding_depth()), deepest + 1):
                tabs = [sc.cache.stage_ends(devs, B, *v, stages=k, position=p) for p in range(k)]
                if any(t is None for t in tabs):
                    break
                got.append(rescue.chain_order(lambda p: tabs[p], n, L, stages=k))
                if got[-1] is not None:
                    break
        for rows in got:
            if rows is None or len(rows) > deepest:
                continue
            o = tuple(devs[i] for i in rows)
            c = sc.cuts(o, B, None, variant=v) if len(o) > 1 else sc.cache.single_cuts(o[0])
            if c is not None and sc.score((entry(o, c, *v),), source=f"fitted{len(o)}") is not None:
                return


def _search(state: SlotState, queues: Sequence[float] | None, Q, V: float, previous_plan: Plan | None,
            opt: SolveOptions, cache: SlotCache | None, t0: float, report: dict | None = None) -> SlotResult:
    """The tentative search on one state (physical, or one TP configuration's units); queues as
    given to solve_slot, Q their checked weights. TP configurations are solve_slot's (outside),
    micro-batch sizes solve_by_micro_batch's (inside, each size searched at degree 1 only).
    report: when given, report["ran_out"] is set False when the search finished on one size
    without its work budget or time limit ever stopping it (so a larger budget would search
    the same way and return the same result), else True."""
    if report is not None:
        report["ran_out"] = True
    why = infeasible_reason(state)
    if why:
        return SlotResult.infeasible(why, time.perf_counter() - t0)
    if len(micro_batch_sizes(state)) > 1:    # groups may choose their micro-batch size
        return solve_by_micro_batch(state, queues, Q, V, _without_tp, previous_plan=previous_plan, options=opt,
                                    cache=cache)
    cache = slot_cache(state, cache)
    sc = Scorer(state, Q, V, opt, previous_plan, cache=cache)
    n = len(state.available_indices)
    tune = opt.tuning
    small = tune.small(n, sc.L)
    deadline = deadline_of(opt, t0)
    sc.deadline = deadline

    # 1. the baselines (own shares and re-optimised), the cheapest plan, the previous plan
    score_incumbents(state, sc, Q, previous_plan, recut_previous=True)
    # 2. candidate families (from here on the work budget counts)
    budget = opt.max_structures if opt.max_structures is not None else tune.work_budget(n)
    sc.restart_budget(budget)
    deepest, depth = min(n, sc.L), tune.depth(n, sc.L)
    max_depth = min(deepest, max(depth, sc.least_holding_depth()))
    while True:
        for name, groups in families(state, sc, max_depth, tune):
            if sc.exhausted():
                break
            sc.score_groups(groups, source=name)
        if opt.schedules and sc.best is not None and any(len(e) > 2 for e in sc.best.structure):
            # memory binds in this slot: dp x pp shapes of the fastest devices, on a quarter more budget
            sc.budget = max(sc.budget, sc.tries) + 0.25 * budget
            for name, groups in split_pipes(state, sc, max_depth, tune):
                if sc.exhausted():
                    break
                sc.score_groups(groups, source=name, variant_cuts=True)
        if sc.best is not None or max_depth >= deepest:
            break
        # no group of up to max_depth devices holds the model: deeper groups, on a budget of their own
        max_depth = min(deepest, 2 * max_depth)
        sc.budget = sc.tries + budget
    deeper = "" if max_depth <= depth else (f"; groups of up to {max_depth} devices, beyond SearchTuning's "
                                            f"depth {depth}: no shallower group holds the model")
    if sc.best is None:
        _deep_rescue(state, sc, max_depth)
    if sc.best is None:
        return SlotResult.infeasible(
            sc.no_plan() + ("" if opt.schedules else " under GPipe without recomputation (schedules=False)"),
            time.perf_counter() - t0, sc.count)
    extend_with_rest(state, sc)
    # 3. local search from the best few distinct groupings, then polish the winner
    if opt.local_search:
        for s in distinct_groupings(sc.scored(), tune.local_starts):
            if sc.exhausted():
                break
            local_search(state, sc, s, max_depth, deadline, tune.local_max_iter)
        top = sorted({s.structure: s for s in sc.scored()}.values(),
                     key=lambda s: (s.objective, s.batch_time))[:tune.polish_top_small if small else tune.polish_top]
        orders = tune.all_orders_small if small else tune.all_orders_polish
        sc.budget = max(sc.budget, sc.tries + tune.polish_floor * budget)
        for s in top:
            polish(state, sc, s, deadline, orders, tune.polish_rounds)
        sc.budget = max(sc.budget, sc.tries + tune.final_floor * budget)
        local_search(state, sc, sc.best, max_depth, deadline, tune.final_local_max_iter,
                     ordered=n <= tune.final_ordered_devices)
        sc.budget = max(sc.budget, sc.tries + tune.final_floor * budget)
        polish(state, sc, sc.best, deadline, orders, tune.polish_rounds, relocate=tune.final_relocate)
    if report is not None:      # tries only grow and the budget only rises: below the first budget, never stopped
        report["ran_out"] = sc.tries >= budget or past(deadline)
    return slot_result(state, sc, Q, V, Status.FEASIBLE,
                       f"tentative search: {sc.count} structures scored ({sc.tries:.0f} work units"
                       f"{past_budget(sc)}); best: {describe(sc.best.source)}{deeper}", t0)


def distinct_groupings(scored: Iterable[Scored], k: int) -> list[Scored]:
    """The best k scored structures (objective, then batch time) of distinct groupings (device
    sets of the groups): the local search's moves depend on the grouping alone, so two starts
    that differ only in cuts or orders would walk the same neighbours (with the aligned cuts
    of Scorer.aligned, one grouping filled all three starts of fingerprint slot
    rand-n8-L16-s10, which then missed a 3-stage pipeline 6% faster)."""
    out, seen = [], set()
    for s in sorted(scored, key=lambda s: (s.objective, s.batch_time)):
        key = frozenset(frozenset(e[0]) for e in s.structure)
        if key not in seen:
            seen.add(key)
            out.append(s)
            if len(out) == k:
                break
    return out


def past_budget(sc: Scorer) -> str:
    """The message part saying that a search went on past its work budget while it was still
    improving (Scorer.exhausted), or that its time limit stopped it, or ""."""
    if past(sc.deadline):
        return ", stopped by the time limit"
    return ", past its work budget while still improving" if sc.extended else ""


def _without_tp(state: SlotState, queues: Sequence[float] | None, V: float, *, options: SolveOptions,
                **kw) -> SlotResult:
    """solve_slot without TP configurations (they are chosen outside the micro-batch sizes)."""
    return solve_slot(state, queues, V, options=replace(options, tp_degrees=(1,)), **kw)


def extend_with_rest(state: SlotState, sc: Scorer) -> None:
    """Score the best structure so far plus one pipeline of the available devices it leaves out
    (in memory order, its reverse and the fast-link chain), outside the work budget (three cut
    DPs): the devices too small or slow for the families' groupings may still add throughput as
    a data-parallel group of their own (e.g. tensor-parallel V100 stages beside A100 pipelines)."""
    used = {d for e in sc.best.structure for d in e[0]}
    rest = [d for d in state.available_indices if d not in used]
    if not rest:
        return
    groups = [e[0] for e in sc.best.structure]
    m = memory_order(state, rest)
    for order in dict.fromkeys([m, tuple(reversed(m)), nn_order(state, rest)]):
        sc.score_groups(groups + [order], source="best+rest", prune=False)
