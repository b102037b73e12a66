"""Local search over device sets (move, swap, drop, add, split, merge) and the polish of cuts
and orders of one structure (coordinate descent, group by group)."""
from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

from ..model.state import SlotState
from .families import balanced_partition, chain_chunks
from .orders import group_orders, nn_order
from .schedules import entry_micro_batch
from .scoring import Scored, Scorer, better


def neighbours(state: SlotState, groups: list[frozenset], avail: Sequence[int], max_depth: int
               ) -> Iterable[tuple[str, list[frozenset]]]:
    """Device-set moves: move, swap, drop, add (to a group or alone), split, merge."""
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
            for part in balanced_partition(state, sorted(g), 2), chain_chunks(state, nn_order(state, g), 2):
                if len(part) == 2:
                    yield "split", [x for i, x in enumerate(groups) if i != gi] + [frozenset(p) for p in part]


def local_search(state: SlotState, sc: Scorer, start: Scored, max_depth: int, deadline: float,
                 max_iter: int) -> Scored:
    """Best-improvement descent over `neighbours` from `start`, at most `max_iter` moves (each
    neighbour cut with min-bottleneck cuts and exact shares); stops at a local optimum, when
    the work budget is spent or past `deadline` (perf_counter seconds)."""
    avail = state.available_indices
    cur = start
    for _ in range(max_iter):
        groups = [frozenset(g.devices) for g in cur.plan.groups]
        best = cur
        seen: set = set()
        for name, ng in neighbours(state, groups, avail, max_depth):
            if sc.exhausted() or (deadline < math.inf and time.perf_counter() > deadline):
                break
            key = frozenset(ng)
            if not ng or key in seen:
                continue
            seen.add(key)
            cand = sc.score_groups([nn_order(state, g) for g in ng], source=f"ls-{name}")
            if cand is not None and better(cand, best):
                best = cand
        if best is cur:
            break
        cur = best
    return cur




def polish(state: SlotState, sc: Scorer, cur: Scored, deadline: float, all_up_to: int, rounds: int) -> Scored:
    """Per group, try other orders (group_orders, every order up to `all_up_to` devices) with
    their min-bottleneck cuts for one micro-batch and for the group's share, and the frontier
    cut sets of the current order; one group at a time, keeping improvements (coordinate
    descent, at most `rounds` rounds). Where groups may train at several micro-batch sizes, each
    group is also tried at every other size (Scorer.micro_batch_entries)."""
    for _ in range(rounds):
        improved = False
        for gi in range(len(cur.structure)):
            d, how = cur.structure[gi][0], cur.structure[gi][2:]
            mb = entry_micro_batch(cur.structure[gi])
            share = cur.plan.groups[gi].share
            def options():
                for o in group_orders(state, d, all_up_to):
                    yield from ((o, c, *how) for c in (sc.cuts(o, None, mb), sc.cuts(o, share, mb)) if c is not None)
                yield from ((d, c, *how) for c in sc.frontier(d, None, mb) + sc.frontier(d, share, mb))
                if len(sc.micro_batches) > 1:
                    yield from sc.micro_batch_entries(cur.structure[gi], share)

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
