"""Exhaustive per-slot oracle for small slots (DESIGN.md section 3: "An exhaustive oracle").

Enumerates every non-empty selection of the available devices (n <= 6), every set partition of
it into groups and every order inside each group (8,463 sets of ordered groups at n = 6), and
for each ordered group either every memory-feasible cut set (`all_cuts`: then the result is
exact for the model) or the frontier cut sets of `cuts.frontier_cuts` at every memory level
the integer shares can reach (`cuts.frontier_cuts_all_levels`: each share u..B at which the
stages that fit change), with the min-alpha cuts; exact relative to them. Shares are exact integers
(`shares.solve_shares`). Structures are skipped only by valid lower bounds (never by
heuristics). Each cut set is also tried under 1F1B and with activation recomputation where
that lifts its memory cap (solve.schedules.variant_entries; a dominance rule, so still exact).
The baselines and the previous plan are scored too, so the oracle never loses to
them even when it works on frontier cuts.
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Iterator, Sequence

from ..model import Plan, SlotState, share_cap
from ..status import Status
from ..subproblems.cache import SlotCache, slot_cache
from ..subproblems.cuts import frontier_cuts_all_levels, min_bottleneck_cuts
from .incumbents import score_incumbents
from .inputs import check_queues, check_V, infeasible_reason
from .options import SearchTuning, SlotResult, SolveOptions
from .schedules import variant_entries
from .scoring import Scorer, slot_result

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
                cache: SlotCache | None = None, tuning: SearchTuning | None = None) -> SlotResult:
    """Exhaustive optimum of V T + sum Q_k c_k (+ amortised migration from previous_plan);
    queues and V as for solve_slot (solve.inputs).
    all_cuts None: every cut set when that is at most tuning.oracle_all_cuts_limit ordered-group
    cut sets, else tuning.oracle_frontier frontier cut sets per group (SearchTuning). cache: the caller's SlotCache of this state (a new one when
    None). ValueError above MAX_DEVICES available devices."""
    t0 = time.perf_counter()
    tune = tuning or SearchTuning()
    Q = check_queues(state, queues)
    V = check_V(V)
    avail = list(state.available_indices)
    if len(avail) > MAX_DEVICES:
        raise ValueError(f"solve_exact enumerates at most {MAX_DEVICES} available devices, "
                         f"slot {state.t} has {len(avail)}")
    why = infeasible_reason(state)
    if why:
        return SlotResult.infeasible(why, time.perf_counter() - t0)
    L, B = state.workload.num_layers, state.workload.batch
    if all_cuts is None:
        all_cuts = _count_all_cuts(len(avail), L) <= tune.oracle_all_cuts_limit
    opt = SolveOptions(exact=True, iterations_per_slot=iterations_per_slot, keep_candidates=keep_candidates,
                       tuning=tune)
    cache = slot_cache(state, cache)
    sc = Scorer(state, Q, V, opt, previous_plan, cache=cache)
    cut_options: dict[tuple[int, ...], list[tuple[int, ...]]] = {}

    def options_of(g: tuple[int, ...]) -> list[tuple[int, ...]]:
        if g not in cut_options:
            if all_cuts:
                cut_options[g] = all_cut_sets(state, g)
            else:
                fr = dict(cache=cache, relax=tune.frontier_relax, seeds=tune.frontier_seeds)
                found = dict.fromkeys(frontier_cuts_all_levels(state, g, tune.oracle_frontier, B, **fr))
                mb = min_bottleneck_cuts(state, g, cache=cache)
                if mb is not None:
                    found[mb] = None
                cut_options[g] = list(found)
            cut_options[g] = [e for c in cut_options[g]
                              for e in [(g, c), *variant_entries(sc, g, c)]]
        return cut_options[g]

    # incumbents first (they make the bounds bite): baselines, cheapest, previous plan
    score_incumbents(state, sc, Q, previous_plan, recut_previous=False)
    for groups in ordered_groupings(avail):
        if not groups or len(groups) > B // state.workload.micro_batch:
            continue
        if sc.best is not None and sc.device_bound(groups) > sc.best.objective:
            continue
        per_group = [options_of(g) for g in groups]
        if any(not o for o in per_group):
            continue
        for entries in itertools.product(*per_group):
            sc.score(entries, source="oracle", prune=True)
    if sc.best is None:
        return SlotResult.infeasible(
            f"slot {state.t}: no group of available devices can hold the model "
            f"({state.workload.name}) with one micro-batch", time.perf_counter() - t0, sc.count)
    what = "exact for the model (every cut set)" if all_cuts else (
        f"exact relative to the frontier cut sets (up to {tune.oracle_frontier} per ordered group and "
        f"memory level, at every share level u..B, plus the min-alpha cuts), not every cut set")
    return slot_result(state, sc, Q, V, Status.OPTIMAL, f"oracle: {what}; {sc.count} structures scored", t0)
