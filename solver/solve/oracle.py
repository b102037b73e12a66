"""Exhaustive per-slot oracle for small slots (DESIGN.md section 3: "An exhaustive oracle").

Enumerates every non-empty selection of the available devices (n <= 6), every set partition of
it into groups and every order inside each group (8,463 sets of ordered groups at n = 6), and
for each ordered group either every memory-feasible cut set (`all_cuts`: then the result is
exact for the model) or the frontier cut sets of `cuts.frontier_cuts` (for one micro-batch and
for the whole batch of memory; exact relative to them). Shares are exact integers
(`shares.solve_shares`). Structures are skipped only by valid lower bounds (never by
heuristics). The baselines and the previous plan are scored too, so the oracle never loses to
them even when it works on frontier cuts.
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Iterator, Sequence

import numpy as np

from .. import baselines
from ..model import Plan, SlotState, share_cap
from ..subproblems.cuts import frontier_cuts, min_bottleneck_cuts
from .options import SlotResult, SolveOptions
from .scoring import Scorer, _result, check_queues, infeasible_reason

MAX_DEVICES = 6
ALL_CUTS_LIMIT = 20_000   # ordered-group cut sets enumerated in all, for the automatic choice


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


def solve_exact(state: SlotState, queues: Sequence[float] = (), V: float = 1.0, *,
                all_cuts: bool | None = None, previous_plan: Plan | None = None,
                iterations_per_slot: int = 100, keep_candidates: bool = False) -> SlotResult:
    """Exhaustive optimum of V T + sum Q_k c_k (+ amortised migration from previous_plan).
    all_cuts None: every cut set when that is at most ALL_CUTS_LIMIT ordered-group cut sets,
    else the frontier cut sets. ValueError above MAX_DEVICES available devices."""
    t0 = time.perf_counter()
    Q = check_queues(state, queues)
    if not (np.isfinite(V) and V >= 0):
        raise ValueError(f"V must be finite and >= 0, got {V}")
    avail = list(state.available_indices)
    if len(avail) > MAX_DEVICES:
        raise ValueError(f"solve_exact enumerates at most {MAX_DEVICES} available devices, "
                         f"slot {state.t} has {len(avail)}")
    why = infeasible_reason(state)
    if why:
        return SlotResult(None, math.inf, (), math.inf, "infeasible", why, time.perf_counter() - t0)
    L, B = state.workload.num_layers, state.workload.batch
    if all_cuts is None:
        all_cuts = _count_all_cuts(len(avail), L) <= ALL_CUTS_LIMIT
    opt = SolveOptions(exact=True, iterations_per_slot=iterations_per_slot, keep_candidates=keep_candidates)
    sc = Scorer(state, Q, V, opt, previous_plan)
    cut_options: dict[tuple[int, ...], list[tuple[int, ...]]] = {}

    def options_of(g: tuple[int, ...]) -> list[tuple[int, ...]]:
        if g not in cut_options:
            if all_cuts:
                cut_options[g] = all_cut_sets(state, g)
            else:
                found = dict.fromkeys(frontier_cuts(state, g, 8) + frontier_cuts(state, g, 8, B))
                mb = min_bottleneck_cuts(state, g)
                if mb is not None:
                    found[mb] = None
                cut_options[g] = list(found)
        return cut_options[g]

    # incumbents first (they make the bounds bite): baselines, cheapest, previous plan
    fixed = [p for p in (f(state) for f in baselines.ALL.values())]
    fixed.append(baselines.cheapest(state, Q, fixed))
    if previous_plan is not None and not previous_plan.validate(state):
        fixed.append(previous_plan)
    for p in fixed:
        if p is not None:
            s = tuple((g.devices, g.cuts) for g in p.groups)
            sc.score(s, p.shares, source="baseline")
            sc.score(s, source="baseline+lp")
    for groups in ordered_groupings(avail):
        if not groups or len(groups) > B // state.workload.micro_batch:
            continue
        if sc.best is not None and sc.device_bound(groups) > sc.best.objective:
            continue
        per_group = [options_of(g) for g in groups]
        if any(not o for o in per_group):
            continue
        for cuts in itertools.product(*per_group):
            sc.score(tuple(zip(groups, cuts)), source="oracle", prune=True)
    if sc.best is None:
        return SlotResult(None, math.inf, (), math.inf, "infeasible",
                          f"slot {state.t}: no group of available devices can hold the model "
                          f"({state.workload.name}) with one micro-batch", time.perf_counter() - t0, sc.count)
    what = "exact for the model (every cut set)" if all_cuts else "exact relative to frontier cuts"
    return _result(state, sc, Q, V, "optimal", f"oracle: {what}; {sc.count} structures scored", t0)
