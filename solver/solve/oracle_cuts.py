"""The oracle's cut sets of one ordered group: the exact time (and busy-cost) frontier at every
share the integer shares can reach, under each (schedule, recompute) variant's own memory peaks.

For an ordered group at one micro-batch size u and one variant, `exact_cut_sets` returns, for
every share b = u, 2u, ..., B at which some cut set fits (every stage within its own peak at
b: GPipe stashes b samples, 1F1B stage j keeps u min(k - j, b / u), recomputation keeps stage
inputs; subproblems.cache.SlotCache.group_arrays), the cut sets of least group time
T(b) = alpha b + beta among those that fit (solve.oracle_kernel, an exact label DP). Where the
slot's queues price busy energy (energy and device-energy budgets: q_g = sum_j w_{d_j} busy_j,
cost.costs), it returns instead every cut set on the Pareto frontier of (T(b), q) at each b.

Why that suffices (the exchange argument): in the slot objective W (max_g T_g(b_g) + T_sync +
migration) + sum_g q_g b_g, replacing one group's cuts by a cut set that fits its share b_g
and has no larger T_g(b_g) and no larger q_g changes nothing else, except the terms that depend
on where the cuts lie across groups: the gradient sync (which device holds which bucket),
money egress across priced boundaries, and the migration from the previous plan. So an
oracle over these cut sets is exact relative to them; `frontier_note` says what it leaves out.

Shares between two memory levels share one set of fitting cut sets, and without the cost the
least time min_c u (rho alpha_c + W_c), rho = b / u - 1, is concave in rho: where the optimum at
two shares is the same cut set, it is optimal at every share between (a linear function that
meets a concave one at both ends of an interval, and is above it, equals it there). So the
shares are bisected and most are never solved.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cost.costs import budget_device
from ..model.state import SlotState
from ..subproblems.cache import GroupArrays, SlotCache
from ..subproblems.cuts import min_bottleneck_cuts
from ..subproblems.dp_kernel import maxend_of
from .oracle_kernel import frontier_dp

Cuts = tuple[int, ...]


def busy_weights(state: SlotState, Q: np.ndarray) -> np.ndarray:
    """(n,) per device: weight of one busy second per sample in q_g = sum_k Q_k e_kg
    (cost.costs: energy budgets weigh every device's extra power, a device-energy budget
    its own device's), so that q_g = sum_j w[d_j] busy_seconds_j for every group."""
    w = np.zeros(state.n)
    extra = state.extra_power_w
    for k, b in enumerate(state.budgets):
        if not Q[k] > 0:
            continue
        if b.kind == "energy":
            w += Q[k] * extra
        elif b.kind == "device_energy":
            i, frac = budget_device(state, b.device)
            if i >= 0:
                w[i] += Q[k] * frac * extra[i]
    return w


def egress_unweighed(state: SlotState, Q: np.ndarray) -> bool:
    """True where money egress across priced pipeline boundaries enters q_g (a network with
    egress prices and a positive money weight): the frontier does not weigh it."""
    net = state.network
    return net is not None and net.egress is not None and any(
        Q[k] > 0 and b.kind == "money" for k, b in enumerate(state.budgets))


def _arrays(cache: SlotCache, devices: tuple[int, ...], share: int, schedule: str, recompute: bool
            ) -> tuple[GroupArrays, np.ndarray] | None:
    ga = cache.group_arrays(devices, share, schedule, recompute)
    if ga is None:
        return None
    me = ga.cache.get("maxend")
    if me is None:
        me = ga.cache["maxend"] = maxend_of(ga.need, ga.needs, ga.mem)
    return ga, me


def exact_cut_sets(cache: SlotCache, devices: Sequence[int], schedule: str = "gpipe", recompute: bool = False,
                   w_busy: np.ndarray | None = None, max_share: int | None = None) -> list[Cuts]:
    """The cut sets of `devices` (ordered, k >= 2) on the exact frontier at every share
    u..max_share (default the batch), in order of share (module doc). w_busy: busy_weights,
    or None / all zero for the time frontier alone. cache: the SlotCache of the group's state
    at its micro-batch size (on a state of TP units the variants' peaks are GPipe's: see
    frontier_note)."""
    st = cache.state
    wl = st.workload
    u, L = wl.micro_batch, wl.num_layers
    B = wl.batch if max_share is None else int(max_share)
    d = tuple(int(x) for x in devices)
    k = len(d)
    if k < 2 or k > L:
        raise ValueError(f"exact_cut_sets: expected 2 <= k <= L devices, got k = {k}, L = {L}")
    wq = None if w_busy is None or not np.any(w_busy[list(d)] > 0) else np.asarray(w_busy, dtype=float)[list(d)]
    one_f = schedule == "1f1b"
    # the shares in runs of one fitting set (one maxend); stop at the first share nothing fits
    runs: list[list[int]] = []
    last = None
    for b in range(u, B + 1, u):
        got = _arrays(cache, d, b, schedule, recompute)
        if got is None:
            break
        me = got[1]
        if last is None or not np.array_equal(me, last):
            runs.append([])
            last = me
        runs[-1].append(b)
    found: dict[Cuts, None] = {}
    solved: dict[int, tuple[list[Cuts], float]] = {}

    def solve(b: int) -> tuple[list[Cuts], float]:
        if b not in solved:
            ga, me = _arrays(cache, d, b, schedule, recompute)
            rho = b / u - 1.0
            ub = np.inf       # the time of a cut set known to fit at b: a bound for the DP's pruning
            for c in (min_bottleneck_cuts(st, d, b, cache=cache, schedule=schedule, recompute=recompute),
                      *(solved[x][0][0] for x in solved if solved[x][0] and x > b)):
                if c is not None:
                    gc = cache.group_coeffs(d, c, schedule, recompute)
                    if gc.cap >= b:
                        ub = min(ub, (gc.alpha * b + gc.beta) / u)
            cuts, vals, _ = frontier_dp(np.ascontiguousarray(ga.Fp, dtype=float), np.ascontiguousarray(ga.Gp, dtype=float),
                                     np.ascontiguousarray(ga.lam, dtype=float), me,
                                     np.zeros(k) if wq is None else wq, rho, one_f, wq is not None, ub)
            solved[b] = ([tuple(int(x) for x in row) for row in cuts], float(vals[0]) if len(vals) else np.inf)
        return solved[b]

    def bisect(run: list[int], lo: int, hi: int) -> None:
        a, _ = solve(run[lo])
        c, _ = solve(run[hi])
        found.update(dict.fromkeys(a))
        found.update(dict.fromkeys(c))
        if hi - lo <= 1 or (a and c and a[0] == c[0]):
            return
        mid = (lo + hi) // 2
        bisect(run, lo, mid)
        bisect(run, mid, hi)

    for run in runs:
        if not solve(run[0])[0]:
            break       # one fitting set over the run, empty: none fit at larger shares either
        if wq is None:
            bisect(run, 0, len(run) - 1)
        else:
            for b in run:
                found.update(dict.fromkeys(solve(b)[0]))
    return list(found)


def frontier_note(state: SlotState, Q: np.ndarray, variants: Sequence[tuple[str, bool]]) -> str:
    """What an oracle over exact_cut_sets leaves out in this slot (module doc)."""
    left = ["the cuts' effect on the gradient sync (which device holds which bucket)"]
    if egress_unweighed(state, Q):
        left.append("money egress across priced pipeline boundaries")
    left.append("migration from the previous plan")
    time_only = not np.any(busy_weights(state, Q) > 0)
    what = ("each ordered group's cut sets of least group time" if time_only else
            "each ordered group's cut sets on the (group time, busy cost) Pareto frontier")
    peaks = "under each schedule and recomputation variant's own per-stage memory peaks"
    if state.tp is not None and any(v != ("gpipe", False) for v in variants):
        peaks = "under GPipe's memory peaks for every variant (a state of TP units)"
    return (f"exact relative to {what} at every share u..B (exact label DP, {peaks}, every micro-batch size), "
            f"not every cut set: a cut set off that frontier could only win through " + ", ".join(left))


def _busy_cost(gc, w_busy: np.ndarray) -> float:
    """q of a group from its coefficients: sum_j w[d_j] (F_j + G_j, plus F_j under recomputation)."""
    busy = gc.fwd + gc.bwd + (gc.fwd if gc.recompute else 0.0)
    return float(np.dot(w_busy[list(gc.devices)], busy))


def frontier_entries(sc, devices: tuple[int, ...], micro_batch: int | None, w_busy: np.ndarray) -> list[tuple]:
    """The oracle's structure entries of one ordered group at one micro-batch size (None: the
    workload's u): exact_cut_sets of every allowed variant (sc.variants besides GPipe without
    recomputation), each under its own peaks; on a state of TP units, GPipe's cut sets with
    the variants of solve.schedules.variant_entries. Then only the entries on the
    (T(b), q) frontier at some share b are kept (without a busy cost: of least T(b)), the
    rest being no better at any share. sc: the solve.scoring.Scorer of the slot."""
    from .schedules import entry, variant_entries
    st_u, cache_u = sc.at(micro_batch)
    if len(devices) == 1:
        c = cache_u.single_cuts(devices[0])
        return [] if c is None else [entry(devices, c, micro_batch=micro_batch)]
    if len(devices) > st_u.workload.num_layers:
        return []
    found: list[tuple] = []
    if st_u.tp is None:
        for v in (("gpipe", False), *sc.variants):
            found += [entry(devices, c, *v, micro_batch) for c in exact_cut_sets(cache_u, devices, *v, w_busy)]
    else:
        for c in exact_cut_sets(cache_u, devices, w_busy=w_busy):
            found += [entry(devices, c, micro_batch=micro_batch), *variant_entries(sc, devices, c, micro_batch)]
    return prune_entries(sc, list(dict.fromkeys(found)), w_busy)


def prune_entries(sc, entries: list[tuple], w_busy: np.ndarray) -> list[tuple]:
    """The entries (one ordered group, one micro-batch size) that are on the (T(b), q)
    Pareto frontier among those that fit b, for some share b = u..B (ties: the first)."""
    if len(entries) <= 1:
        return entries
    u, B = sc.u_of(entries[0]), sc.B
    gcs = [sc.coeffs(*e) for e in entries]
    alpha = np.array([g.alpha for g in gcs])
    beta = np.array([g.beta for g in gcs])
    cap = np.array([min(g.cap, B) for g in gcs])
    q = np.array([_busy_cost(g, w_busy) for g in gcs])
    keep = np.zeros(len(entries), dtype=bool)
    for b in range(u, B + 1, u):
        ok = np.flatnonzero(cap >= b)
        if not len(ok):
            break
        t = alpha[ok] * b + beta[ok]
        order = ok[np.lexsort((q[ok], t))]
        best_q = np.inf
        for i in order:
            if q[i] < best_q:
                keep[i] = True
                best_q = q[i]
    return [e for e, k in zip(entries, keep) if k]
