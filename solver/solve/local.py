"""Local search over device sets (move, swap, drop, add, split, merge) and the polish of cuts
and orders of one structure (coordinate descent, group by group)."""
from __future__ import annotations

import itertools
import math
import time
from typing import Iterable, Sequence

from ..model.state import SlotState
from .families import balanced_partition, chain_chunks
from .orders import group_orders, nn_order
from .schedules import entry_micro_batch, variant_entries
from .scoring import Scored, Scorer, better


SPLIT_ALL_UP_TO = 6
"""Groups of up to this many devices also try every split into two parts of two or more
devices (at most 25 at 6): pairings such as two short 1F1B pipelines of a fast and a slow device
are not reached from one pipeline by improving single-device moves."""


def _splits(g: frozenset) -> Iterable[frozenset]:
    """One part of each split of g into two parts of two or more devices (the part holding
    g's smallest index)."""
    first, *others = sorted(g)
    for r in range(1, len(others) - 1):
        for pick in itertools.combinations(others, r):
            yield frozenset((first, *pick))


def halves(state: SlotState, g: frozenset) -> tuple[frozenset, ...]:
    """The two-part splits `neighbours` tries for every group: speed-balanced (LPT) and the
    fast-link chain cut at half its speed, each as (part, part) frozensets, in that order
    (parts of one device included; a split that leaves one part is left out)."""
    out = []
    for part in balanced_partition(state, sorted(g), 2), chain_chunks(state, nn_order(state, g), 2):
        if len(part) == 2:
            out.append(tuple(frozenset(p) for p in part))
    return tuple(out)


def neighbours(state: SlotState, groups: list[frozenset], avail: Sequence[int], max_depth: int,
               split_all: bool = False, split=halves) -> Iterable[tuple[str, list[frozenset]]]:
    """Device-set moves: move, swap, drop, add (to a group or alone), split (`split`: halves,
    or the caller's memo of it; with split_all, every split of a group of up to SPLIT_ALL_UP_TO
    devices, also with an unused device added), merge; with split_all, replace (a used device
    by an unused one: a slower device that costs less energy in place of a fast one is neither
    a drop nor an add that improves alone) and replace-two (two devices of a group by two
    unused ones)."""
    used = set().union(*groups) if groups else set()
    unused = [d for d in avail if d not in used]
    m = len(groups)
    for gi, g in enumerate(groups):
        for d in g:
            rest = [x for i, x in enumerate(groups) if i != gi]
            smaller = g - {d}
            base = rest + ([smaller] if smaller else [])
            yield "drop", base
            for hi in range(m):
                if hi != gi and len(groups[hi]) < max_depth:
                    yield "move", [x if i != hi else x | {d} for i, x in enumerate(groups) if i != gi] + (
                        [smaller] if smaller else [])
            if smaller:
                yield "alone", base + [frozenset({d})]
    for gi in range(m):
        for hi in range(gi + 1, m):
            for d in groups[gi]:
                for e in groups[hi]:
                    yield "swap", [x if i not in (gi, hi) else (x - {d} | {e} if i == gi else x - {e} | {d})
                                   for i, x in enumerate(groups)]
            if len(groups[gi]) + len(groups[hi]) <= max_depth:
                yield "merge", [x for i, x in enumerate(groups) if i not in (gi, hi)] + [groups[gi] | groups[hi]]
    if m > 2 and len(used) <= max_depth:
        yield "merge-all", [frozenset(used)]
    for d in unused:
        yield "add-alone", groups + [frozenset({d})]
        for gi in range(m):
            if len(groups[gi]) < max_depth:
                yield "add", [x | {d} if i == gi else x for i, x in enumerate(groups)]
    for gi, g in enumerate(groups):
        if len(g) >= 2:
            rest = [x for i, x in enumerate(groups) if i != gi]
            for part in split(state, g):
                yield "split", rest + list(part)
            if split_all and len(g) <= SPLIT_ALL_UP_TO:     # every split into two parts of two or more
                for part in _splits(g):
                    yield "split", rest + [part, g - part]
            if split_all and len(g) < SPLIT_ALL_UP_TO:      # ... and of the group with an unused device added
                for d in unused:
                    for part in _splits(g | {d}):
                        yield "add-split", rest + [part, (g | {d}) - part]
    if split_all:       # a used device replaced by an unused one: a drop and an add that alone need not improve
        for gi, g in enumerate(groups):
            for d in g:
                for e in unused:
                    yield "replace", [x if i != gi else x - {d} | {e} for i, x in enumerate(groups)]
            # two at once (bench_quality seed 61000 slot 8: three fast devices in 1F1B, where the
            # two slow ones with more memory beside the first run GPipe 6.5% cheaper; either
            # replacement alone needs recomputation and costs more)
            for out in itertools.combinations(sorted(g), 2):
                for into in itertools.combinations(unused, 2):
                    yield "replace-two", [x if i != gi else x - set(out) | set(into) for i, x in enumerate(groups)]


def ordered_neighbours(groups: list[tuple[int, ...]], avail: Sequence[int], max_depth: int
                       ) -> Iterable[tuple[str, list[tuple[int, ...]]]]:
    """Moves that keep the order of every group: an unused device inserted at each position of
    a group or put in place of one of its devices, a device of another group moved to each
    position of a group, a device removed."""
    used = {d for g in groups for d in g}
    unused = [d for d in avail if d not in used]
    for gi, g in enumerate(groups):
        for j in range(len(g)):
            for d in unused:
                yield "replace-at", groups[:gi] + [g[:j] + (d,) + g[j + 1:]] + groups[gi + 1:]
        if len(g) > 1:
            for j in range(len(g)):
                yield "remove", groups[:gi] + [g[:j] + g[j + 1:]] + groups[gi + 1:]
        if len(g) >= max_depth:
            continue
        for d in unused:
            for j in range(len(g) + 1):
                yield "insert", groups[:gi] + [g[:j] + (d,) + g[j:]] + groups[gi + 1:]
        for hi, h in enumerate(groups):
            if hi == gi:
                continue
            for d in h:
                rest = tuple(x for x in h if x != d)
                for j in range(len(g) + 1):
                    new = [g[:j] + (d,) + g[j:] if i == gi else (rest if i == hi else x) for i, x in enumerate(groups)]
                    yield "move-at", [x for x in new if x]


def _cannot_win(sc: Scorer, groups: list[tuple[int, ...]]) -> bool:
    """True when these ordered groups, each at its min-bottleneck cuts for one micro-batch,
    already bound the objective above the incumbent's: any cuts and any memory relief in these
    orders only raise a group's alpha_g, so with t_g >= 1 / alpha_g and T = sum_g t_g the batch
    time is at least B / T, and the objective at least V times it (score_groups drops a group
    with no cuts, which only lowers T). Where every group is sure to be kept
    (Scorer.surely_cut), the weight is Scorer.w_floor of their devices (prices and idle power
    at the queues' weights) and the batch time is also at least (B + u sum_g w_g t_g - u m) / T
    and u max_g w_g, with w_g = Scorer.work_floor (a group's time is alpha_g (b_g - u) + u
    times its stages' summed seconds, b_g >= u). Their reliefs in other orders are then not
    tried either.

    The groups whose cuts are known come first (t_g = 1 / alpha_g), and until a group's cut
    DP has run, t_g is Scorer.throughput_ceiling (compute alone, any order, or the bound on a
    one-device edit of a group, Scorer.note_edits): once the bound with those ceilings already
    exceeds the incumbent, the remaining DPs are skipped."""
    if sc.best is None or not sc.V > 0:
        return False
    u, m = sc.u, len(groups)
    w = [sc.work_floor(d) for d in groups]
    sure = [sc.surely_cut(d) for d in groups]
    priced = sc.best.objective / sc.w_floor(groups)     # the least batch time that could still win, all kept

    def beaten(t: list[float]) -> bool:
        T = sum(t)
        if all(sure):
            limit = priced
            if u * max(w) > limit:
                return True
            if T < math.inf and (sc.B + u * sum(x * y for x, y in zip(w, t)) - u * m) / T > limit:
                return True
        else:
            limit = sc.best.objective / sc.V
        return T < math.inf and sc.B / T > limit

    t = [sc.throughput_ceiling(d) for d in groups]
    for i in sorted(range(m), key=lambda i: not sc.known_cuts(groups[i])):
        if beaten(t):
            return True
        c = sc.cuts(groups[i])
        if c is None:
            return False
        a = sc.coeffs(groups[i], c).alpha
        if not a > 0:
            return False
        t[i], sure[i] = 1.0 / a, True
    return beaten(t)


def local_search(state: SlotState, sc: Scorer, start: Scored, max_depth: int, deadline: float,
                 max_iter: int, ordered: bool = False) -> Scored:
    """Best-improvement descent over `neighbours` from `start`, at most `max_iter` moves (each
    neighbour cut with min-bottleneck cuts and exact shares). In slots of up to
    SearchTuning.small_devices devices (whose work budget is more than the search needs) the
    neighbours include every split of small groups, and at a local optimum the order-keeping
    moves (`ordered_neighbours`: a device inserted into or removed from a group where it
    stands, not re-chained) are tried before stopping, and each neighbour is also scored with
    its groups in their least-alpha orders (Scorer.alpha_order) where those differ from the
    chains; larger slots keep their budget for the other starts and the polish (with
    `ordered`, they too try the order-keeping moves at each local optimum). A partition whose
    neighbours an earlier descent of this solve scanned in full, finding none better than a plan
    no better than the current one, is not scanned again (Scorer.memo "plain optima"; the last
    local search starts where the first ended). Stops at a local optimum, when the work budget
    is spent or past `deadline` (perf_counter seconds)."""
    avail = state.available_indices
    rich = len(avail) <= sc.tuning.small_devices
    cur = start

    def late() -> bool:
        return sc.exhausted() or (deadline < math.inf and time.perf_counter() > deadline)

    scored: set = set()         # symmetry keys of the structures scored in this descent
    kept = sc.memo("halves")

    def split(state: SlotState, g: frozenset) -> tuple:
        got = kept.get(g)
        if got is None:
            got = kept[g] = halves(state, g)
        return got

    optima = sc.memo("plain optima")     # (device sets, max_depth) -> a plan no `neighbours` move beat

    for _ in range(max_iter):
        groups = [frozenset(g.devices) for g in cur.plan.groups]
        best = cur
        seen: set = set()
        known = optima.get((frozenset(groups), max_depth))
        # an earlier descent scanned these sets' neighbours in full and none beat `known`, so
        # none beats a cur at least as good (the last local search starts where the first ended)
        scan = known is None or better(known, cur)
        moves = neighbours(state, groups, avail, max_depth, split_all=rich, split=split) if scan else ()
        complete = True
        for name, ng in moves:
            if late():
                complete = False
                break
            key = frozenset(ng)
            if not ng or key in seen:
                continue
            seen.add(key)
            chains = [sc.nn(g) for g in ng]
            tries = [(chains, "")]
            if rich:
                alpha = [sc.alpha_order(g) for g in ng]
                if alpha != chains:
                    tries.append((alpha, "+alpha"))
            for orders, tag in tries:
                twin = sc.symmetry.key(orders)
                if twin is not None:
                    if twin in scored:      # like devices swapped: scored already, not better than cur
                        continue
                    scored.add(twin)
                cand = sc.score_groups(orders, source=f"ls-{name}{tag}")
                if cand is not None and better(cand, best):
                    best = cand
        if best is cur and complete and scan:
            optima[(frozenset(groups), max_depth)] = cur
        if best is cur and (rich or ordered):
            tried: set = set()
            if not rich:
                sc.note_edits([g.devices for g in cur.plan.groups])
            for name, ng in ordered_neighbours([g.devices for g in cur.plan.groups], avail, max_depth):
                if late():
                    break
                key = tuple(ng)
                if not ng or key in tried:
                    continue
                tried.add(key)
                if not rich and _cannot_win(sc, ng):
                    continue
                cand = sc.score_groups(ng, source=f"ls-{name}")
                if cand is not None and better(cand, best):
                    best = cand
        if best is cur:
            break
        cur = best
    return cur




NUDGES = (1, 2, 4, 8)
"""Layers by which polish moves one cut point of a group, each way (small slots)."""


def nudged_cuts(cuts: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The cut sets with one inner cut point moved by each of NUDGES layers either way, every
    stage kept non-empty: the DPs minimise GPipe's alpha (within memory), not the group time
    alpha share + beta that a schedule's fill and drain or 1F1B's 2 max lam per sample add to,
    so the best cuts can lie a few layers off theirs."""
    out = []
    for j in range(len(cuts) - 1):
        lo, hi = (cuts[j - 1] if j else 0) + 1, cuts[j + 1] - 1
        for step in NUDGES:
            for c in (cuts[j] - step, cuts[j] + step):
                if lo <= c <= hi:
                    out.append(cuts[:j] + (c,) + cuts[j + 1:])
    return out


def polish(state: SlotState, sc: Scorer, cur: Scored, deadline: float, all_up_to: int, rounds: int,
           relocate: bool = False) -> Scored:
    """Per group, try other orders (group_orders, every order up to `all_up_to` devices, and in
    slots of up to SearchTuning.small_devices devices or with `relocate` every single-device
    relocation of groups of up to orders.RELOCATE_UP_TO devices) with
    their min-bottleneck cuts for one micro-batch and for the group's share (under 1F1B or
    recomputation also those for its own per-stage peaks at that share, and every order's
    frontier cut sets for those peaks), the frontier cut sets of the current order and, where the
    objective weighs busy energy, its least-energy cut sets under its own variant
    (Scorer.busy_cuts) (in those
    small slots also its cuts nudged by a few layers, nudged_cuts, and every order under each
    schedule variant that lifts its memory cap, schedules.variant_entries); one group at a time,
    keeping improvements (coordinate descent, at most `rounds` rounds). Where groups may train at
    several micro-batch sizes, each group is also tried at every other size
    (Scorer.micro_batch_entries)."""
    rich = len(state.available_indices) <= sc.tuning.small_devices
    for _ in range(rounds):
        improved = False
        for gi in range(len(cur.structure)):
            d, how = cur.structure[gi][0], cur.structure[gi][2:]
            mb = entry_micro_batch(cur.structure[gi])
            share = cur.plan.groups[gi].share
            def options():
                variant = (how[0], how[1]) if how else ("gpipe", False)
                orders = group_orders(state, d, all_up_to, relocate=rich or relocate)
                for o in orders:
                    yield from ((o, c, *how) for c in (sc.cuts(o, None, mb), sc.cuts(o, share, mb)) if c is not None)
                    if variant != ("gpipe", False) and len(o) > 1:     # cuts for the variant's own peaks
                        c = sc.cuts(o, share, mb, variant)
                        if c is not None:
                            yield (o, c, *how)
                yield from ((d, c, *how) for c in sc.frontier(d, None, mb) + sc.frontier(d, share, mb))
                yield from ((d, c, *how) for c in sc.busy_cuts(d, share, mb, variant))
                if variant != ("gpipe", False) and len(d) > 1:
                    # 1F1B pays 2 max lam per sample on top of the stages: its best cuts trade
                    # alpha for beta more than GPipe's, so every order's frontier is tried
                    for o in orders:
                        yield from ((o, c, *how) for c in sc.frontier(o, share, mb, variant))
                if len(sc.micro_batches) > 1:
                    yield from sc.micro_batch_entries(cur.structure[gi], share)
                if rich:
                    yield from ((d, c, *how) for c in nudged_cuts(cur.structure[gi][1]))
                    # every order under every schedule variant that lifts its memory cap (the
                    # orders above keep the group's own variant, so a GPipe group re-cut for its
                    # share never met the 1F1B pipeline of its cuts for one micro-batch)
                    for o in orders:
                        for c in dict.fromkeys(x for x in (sc.cuts(o, None, mb), sc.cuts(o, share, mb))
                                               if x is not None):
                            yield from variant_entries(sc, o, c, mb)

            tried = set()
            for e in options():
                if sc.exhausted() or (deadline < math.inf and time.perf_counter() > deadline):
                    return cur
                if e in tried:
                    continue
                tried.add(e)
                s = cur.structure[:gi] + (e,) + cur.structure[gi + 1:]
                cand = sc.score(s, source="polish", prune=True)
                if cand is not None and better(cand, cur):
                    cur, improved = cand, True
        if not improved:
            break
    return cur


def merge_at_sizes(sc: Scorer, cur: Scored, deadline: float) -> Scored:
    """Every two groups of `cur` merged into one (their devices in fast-link chain order) at
    every allowed micro-batch size, cut for one micro-batch and for the two shares together
    (Scorer.size_entries); the best improvement kept, until none improves. A larger
    micro-batch needs more activation memory per stage, so a deeper pipeline is what lets it
    fit, and polish, which changes one group at a time, cannot deepen a group: Sailor's
    GPT-Neo-2.7 case, where the search at u = 1 ends with two 8-stage V100 pipelines, trains
    them 13% faster as one 16-stage 1F1B pipeline at u = 8. The pairs whose groups already
    relieve memory (recomputation counts 2, a schedule other than GPipe 1) come first, so a
    work budget that runs out leaves the least promising ones."""
    def pressure(e: tuple) -> int:
        return (2 if len(e) > 3 and e[3] else 0) + (1 if len(e) > 2 and e[2] != "gpipe" else 0)

    while True:
        s, shares = cur.structure, cur.plan.shares
        best = cur
        pairs = sorted(itertools.combinations(range(len(s)), 2),
                       key=lambda p: -(pressure(s[p[0]]) + pressure(s[p[1]])))
        for i, j in pairs:
            d = sc.nn(frozenset(s[i][0]) | frozenset(s[j][0]))
            rest = tuple(x for k, x in enumerate(s) if k not in (i, j))
            for e in dict.fromkeys(sc.size_entries(d, None) + sc.size_entries(d, shares[i] + shares[j])):
                if sc.exhausted() or (deadline < math.inf and time.perf_counter() > deadline):
                    return best
                cand = sc.score(rest + (e,), source="merge@u", prune=True)
                if cand is not None and better(cand, best):
                    best = cand
        if best is cur:
            return cur
        cur = best
