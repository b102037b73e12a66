"""Exhaustive per-slot oracle for small slots (DESIGN.md section 3: "An exhaustive oracle").

Enumerates every non-empty selection of the available devices (n <= 6), every set partition of
it into groups and every order inside each group (8,463 sets of ordered groups at n = 6), and
for each ordered group, at each micro-batch size (Workload.micro_batch_options), either
- every memory-feasible cut set (`all_cuts`; each also under 1F1B and with recomputation where
  that lifts its memory cap, solve.schedules.variant_entries, a dominance rule): the result
  is then exact for the model; or
- for GPipe, 1F1B, and each with recomputation (SolveOptions.recompute), the cut sets of least
  group time at every share u..B that fit under that variant's own per-stage peaks, or, where
  the queues price busy energy, every cut set on the (group time, busy cost) Pareto frontier at
  each share (solve.oracle_cuts, an exact label DP). The result is then exact relative to those
  cut sets: a cut set off them is no better at its share in time and cost, and could only win
  through the terms that couple the groups' cuts (the gradient sync's bucket holders, money
  egress across priced boundaries, migration from the previous plan); the message says so.
Shares are exact integers (`shares.solve_shares`; sizes mixed across groups:
subproblems.shares.mixed_shares). Structures are skipped only by valid lower bounds (never by
heuristics). The baselines and the previous plan are scored too, so the oracle never loses to
them. The ring order of the gradient sync needs no enumeration: the cost model takes each
bucket's best ring (cost.sync, exact up to 7 groups). TP: every way of forming TP units of the
given degrees is solved so (solve.tp.all_unit_sets); on those unit states the variants' cut sets
are GPipe's (their cache has no per-variant peaks), which the message says too.
"""
from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

from ..model import Plan, SlotState, share_cap
from ..status import Status
from ..subproblems.cache import SlotCache, slot_cache
from ..subproblems.cuts import frontier_cuts_all_levels, min_bottleneck_cuts
from .incumbents import score_incumbents
from .inputs import check_queues, check_state, check_V, infeasible_reason
from .options import SearchTuning, SlotResult, SolveOptions
from .oracle_certificate import certify
from .oracle_cuts import busy_weights, egress_unweighed, frontier_entries, frontier_note
from .schedules import entry, variant_entries
from .scoring import Scorer, slot_result
from .tp import all_unit_sets, better, check_degrees, solve_units, tp_applies

MAX_DEVICES = 6
"""Most available devices the oracle enumerates (8,463 sets of ordered groups at 6; 7 would
take about ten times longer)."""


def ordered_groupings(devices: Sequence[int]) -> Iterator[list[tuple[int, ...]]]:
    """Every set of disjoint ordered groups over a subset of `devices` (the empty one too)."""
    devices = list(devices)
    if not devices:
        yield []
        return
    first, others = devices[0], devices[1:]
    yield from ordered_groupings(others)
    for r in range(len(others) + 1):
        for comp in itertools.combinations(others, r):
            left = [x for x in others if x not in comp]
            tails = list(ordered_groupings(left))
            for perm in itertools.permutations((first, *comp)):
                for tail in tails:
                    yield [perm, *tail]


def all_cut_sets(state: SlotState, devices: Sequence[int]) -> list[tuple[int, ...]]:
    # state: the slot at the group's micro-batch size (SlotState.at_micro_batch)
    """Every cut set of an ordered group that holds one micro-batch in memory."""
    L, u = state.workload.num_layers, state.workload.micro_batch
    k = len(devices)
    out = []
    for c in itertools.combinations(range(1, L), k - 1):
        cuts = (*c, L)
        if share_cap(state, devices, cuts) >= u:
            out.append(cuts)
    return out


def _count_all_cuts(n: int, L: int) -> int:
    return sum(math.comb(n, k) * math.factorial(k) * math.comb(L - 1, k - 1) for k in range(1, min(n, L) + 1))


def solve_exact(state: SlotState, queues: Sequence[float] | None = (), V: float = 1.0, *,
                all_cuts: bool | None = None, previous_plan: Plan | None = None,
                iterations_per_slot: int = 100, keep_candidates: bool = False,
                cache: SlotCache | None = None, tuning: SearchTuning | None = None,
                tp_degrees: Sequence[int] = (1,), recompute: bool = True) -> SlotResult:
    """Exhaustive optimum of V T + sum Q_k c_k (+ amortised migration from previous_plan);
    queues and V as for solve_slot (solve.inputs).
    all_cuts None: every cut set when that is at most tuning.oracle_all_cuts_limit ordered-group
    cut sets, else tuning.oracle_frontier frontier cut sets per group (SearchTuning). cache: the caller's SlotCache of this state (a new one when
    None). tp_degrees: where the slot has servers, every way of forming TP units of these
    degrees is enumerated too (solve.tp.all_unit_sets), each solved exactly. ValueError above
    MAX_DEVICES available devices. recompute: False leaves activation recomputation out of the
    variants (SolveOptions.recompute)."""
    t0 = time.perf_counter()
    tune = tuning or SearchTuning()
    Q = check_queues(check_state(state), queues)
    V = check_V(V)
    avail = list(state.available_indices)
    if len(avail) > MAX_DEVICES:
        raise ValueError(f"solve_exact enumerates at most {MAX_DEVICES} available devices, "
                         f"slot {state.t} has {len(avail)}")
    check_degrees(tp_degrees)
    if tp_applies(state, tp_degrees):
        return _exact_over_units(state, queues, V, all_cuts, previous_plan, iterations_per_slot, keep_candidates,
                                 cache, tune, tp_degrees, t0, recompute)
    why = infeasible_reason(state)
    if why:
        return SlotResult.infeasible(why, time.perf_counter() - t0)
    L, B = state.workload.num_layers, state.workload.batch
    opt = SolveOptions(exact=True, iterations_per_slot=iterations_per_slot, keep_candidates=keep_candidates,
                       tuning=tune, recompute=recompute)
    cache = slot_cache(state, cache)
    sc = Scorer(state, Q, V, opt, previous_plan, cache=cache)
    if all_cuts is None:
        all_cuts = _count_all_cuts(len(avail), L) * len(sc.micro_batches) <= tune.oracle_all_cuts_limit
    cut_options: dict[tuple[int, ...], list[tuple[int, ...]]] = {}

    w_busy = busy_weights(state, Q)

    def options_of(g: tuple[int, ...]) -> list[tuple]:
        if g not in cut_options:
            cut_options[g] = []
            for u in sc.micro_batches:
                mb = sc.mb(u)
                st_u = sc.at(mb)[0]
                if all_cuts:
                    cut_options[g] += [e for c in all_cut_sets(st_u, g) for e in [entry(g, c, micro_batch=mb),
                                                                                  *variant_entries(sc, g, c, mb)]]
                else:
                    cut_options[g] += frontier_entries(sc, g, mb, w_busy)
        return cut_options[g]

    # incumbents first (they make the bounds bite): baselines, cheapest, previous plan
    score_incumbents(state, sc, Q, previous_plan, recut_previous=False)
    for groups in ordered_groupings(avail):
        if not groups or len(groups) > B // min(sc.micro_batches):
            continue
        if sc.best is not None and sc.device_bound(groups) > sc.best.objective:
            continue
        per_group = [options_of(g) for g in groups]
        if any(not o for o in per_group):
            continue
        for entries in itertools.product(*per_group):
            sc.score(entries, source="oracle", prune=True)
    if sc.best is None:
        return SlotResult.infeasible(sc.no_plan(), time.perf_counter() - t0, sc.count)
    if all_cuts:
        what = "exact for the model (every cut set)"
    elif egress_unweighed(state, Q) or (state.tp is not None and sc.variants):
        what = frontier_note(state, Q, sc.variants)       # the frontier is not exact there: no certificate
    else:
        what = _certified(sc, avail, options_of, lambda g: _rescue_options(sc, g, tune), tune)
    # OPTIMAL only where proven for the model; the optimum over a restricted set of cut sets is FEASIBLE
    status = Status.OPTIMAL if what.startswith("exact for the model") else Status.FEASIBLE
    return slot_result(state, sc, Q, V, status, f"oracle: {what}; {sc.count} structures scored", t0)


def _rescue_options(sc: Scorer, g: tuple[int, ...], tune: SearchTuning) -> tuple[list[tuple] | None, list[tuple]]:
    """(every, earlier) entries of an ordered group for a grouping the certificate did not
    clear: every cut set with its variants (None where more than tune.oracle_all_cuts_limit at
    some size), and the earlier oracle's candidates: GPipe frontier cut sets at every GPipe
    memory level, the min-alpha cuts, and their variants."""
    every: list[tuple] | None = []
    earlier: list[tuple] = []
    for u in sc.micro_batches:
        mb = sc.mb(u)
        st_u, cache_u = sc.at(mb)
        if every is not None and math.comb(st_u.workload.num_layers - 1, len(g) - 1) <= tune.oracle_all_cuts_limit:
            every += [e for c in all_cut_sets(st_u, g) for e in [entry(g, c, micro_batch=mb),
                                                                   *variant_entries(sc, g, c, mb)]]
        else:
            every = None
        fr = {"cache": cache_u, "relax": tune.frontier_relax, "seeds": tune.frontier_seeds}
        cuts = list(dict.fromkeys(frontier_cuts_all_levels(st_u, g, tune.oracle_frontier, sc.B, **fr)))
        mbc = min_bottleneck_cuts(st_u, g, cache=cache_u)
        if mbc is not None and mbc not in cuts:
            cuts.append(mbc)
        earlier += [e for c in cuts for e in [entry(g, c, micro_batch=mb), *variant_entries(sc, g, c, mb)]]
    return every, earlier


def _certified(sc: Scorer, avail: list[int], options_of, rescue_of, tune: SearchTuning) -> str:
    """The frontier oracle's exactness, in words: solve.oracle_certificate on every grouping;
    a grouping it does not clear is scored again with every cut set of its groups where their
    product has at most tune.oracle_all_cuts_limit structures (then exact), else with the
    frontier and the earlier oracle's cut sets (_rescue_options), and is checked again against
    the new optimum."""
    failing, why = certify(sc, ordered_groupings(avail), options_of, sc.best.objective, sc.prev is not None)
    if not failing:
        return (f"exact for the model (per ordered group the exact time / cost frontier of cut sets at every share; "
                f"certified that no cut set off it wins through the sync or migration: {why})")
    left = []
    for groups in failing:
        got = [rescue_of(g) for g in groups]
        full = all(every is not None for every, _ in got) and \
            math.prod(len(every) for every, _ in got) <= tune.oracle_all_cuts_limit
        if full:
            per_group = [every for every, _ in got]
        else:
            per_group = [list(dict.fromkeys(options_of(g) + earlier)) for g, (_, earlier) in zip(groups, got)]
            left.append(groups)
        for entries in itertools.product(*per_group):
            sc.score(entries, source="oracle", prune=True)
    done = len(failing) - len(left)
    if left:
        left, why = certify(sc, left, options_of, sc.best.objective, sc.prev is not None)
    if not left:
        return (f"exact for the model (per ordered group the exact time / cost frontier of cut sets at every share, "
                f"certified that no cut set off it wins through the sync or migration, and {done} groupings the "
                f"certificate did not clear scored with every cut set)")
    return (f"{frontier_note(sc.state, sc.Q, sc.variants)}; the optimum over those cut sets, not certified for every "
            f"cut set: {why}; {done} groupings scored with every "
            f"cut set, {len(left)} with the frontier and the earlier oracle's cut sets (GPipe frontier at every "
            f"GPipe memory level)")


def _exact_over_units(state: SlotState, queues, V: float, all_cuts: bool | None, previous_plan: Plan | None,
                      iterations_per_slot: int, keep_candidates: bool, cache: SlotCache | None,
                      tune: SearchTuning, degrees: Sequence[int], t0: float, recompute: bool) -> SlotResult:
    """solve_exact on every set of TP units of the slot (solve.tp.all_unit_sets); the best."""
    best, count, bounds, restricted = None, 0, [], 0
    cache = slot_cache(state, cache)

    def solve(ust: SlotState, ucache: SlotCache) -> SlotResult:
        return solve_exact(ust, queues, V, all_cuts=all_cuts, previous_plan=previous_plan,
                           iterations_per_slot=iterations_per_slot, keep_candidates=keep_candidates,
                           cache=ucache, tuning=tune, recompute=recompute)

    for units in all_unit_sets(state, degrees):
        res, _ = solve_units(state, units, solve, cache)
        count += 1
        if res.plan is not None:
            bounds.append(res.lower_bound)
            restricted += "exact for the model" not in res.message
        if better(res, best):
            best = res
    if best is None or best.plan is None:
        return SlotResult.infeasible(f"slot {state.t}: no set of TP units (degrees {tuple(degrees)}) can hold the "
                                     f"model ({state.workload.name}) with one micro-batch", time.perf_counter() - t0)
    finite = [b for b in bounds if not math.isnan(b)]
    # OPTIMAL only where every unit set's optimum is exact for the model (else a better plan may lie off one's frontier)
    return replace(best, solve_time=time.perf_counter() - t0, lower_bound=min(finite) if finite else best.lower_bound,
                   status=Status.FEASIBLE if restricted else best.status,
                   message=(f"oracle over all {count} ways of forming TP units of degrees {tuple(degrees)}: "
                            + (f"exact only relative to the frontier cut sets of {restricted} of them (a plan "
                               f"off those may be better), for the model on the others" if restricted else
                               "exact for the model on each")
                            + f"; the best: {best.message}"))
