"""A certificate that the frontier oracle's optimum is exact for the model (solve.oracle).

The frontier oracle (solve.oracle_cuts) tries, per ordered group, the cut sets of least time
(or on the time / busy-cost frontier) at every share. A plan P' with some other cut set can
still beat its optimum O only through the terms that depend on where the cuts of several
groups lie together: the gradient sync T_sync >= 0 and the migration from the previous plan
>= 0 (money egress across priced boundaries is another; where it is priced this certificate is
not attempted). Write D(P) = W z + q.b for a plan's objective without those terms
(subproblems.shares.ShareResult.value; the fixed costs F are >= 0 and dropped too). Replacing
each of P''s cut sets by the frontier cut set of no larger time and cost at its share gives a
plan P* of the same groups and shares with D(P*) <= D(P') <= objective(P'). So if, for every
grouping, every product of frontier entries has min over shares of D >= O (or a valid bound
on D over any cuts, Scorer.device_bound, is >= O), no plan beats O: the oracle is exact for the
model. `certify` checks exactly that, after the oracle's own enumeration, with D raised by W
times a lower bound on the sync that holds for any cuts of the grouping (`sync_lower_bound`).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..cost.costs import cost_coeffs
from ..subproblems.shares import solve_shares
from ..subproblems.water import water_fill

RTOL = 1e-12
"""Relative margin below the optimum at which a structure's D counts as beating it."""


def sync_lower_bound(state, groups: Sequence[tuple[int, ...]]) -> float:
    """Seconds: a lower bound on the gradient sync of these device groups under any cuts
    (cost.sync; 0 for one group, and on a state with a network model or TP units, where the
    bandwidths depend on more than the pair). Each bucket's ring has, for every group g, an
    edge from g's holder to another group, so its slowest link is at most
    bw_cap = min_g max_{x in g, y not in g} bandwidth[x, y] and its largest latency at least
    lat_floor = max_g min_{x in g, y not in g} latency[x, y]; the buckets hold all P parameter
    bytes, at least one bucket when P > 0; and the busiest device carries at least the sum over
    buckets divided by the smallest group's size k_min (each bucket has one holder per group):

        T_sync >= (2 (m - 1) / m * P / bw_cap + 2 (m - 1) * lat_floor) / k_min."""
    m = len(groups)
    P = float(state.param_prefix[-1])
    if m < 2 or P <= 0 or state.network is not None or state.tp is not None:
        return 0.0
    bw_cap, lat_floor = math.inf, 0.0
    for g in groups:
        inside = list(g)
        outside = [d for h in groups if h is not g for d in h]
        bw_cap = min(bw_cap, float(state.bandwidth[np.ix_(inside, outside)].max()))
        lat_floor = max(lat_floor, float(state.latency[np.ix_(inside, outside)].min()))
    if not bw_cap > 0:
        return 0.0
    return (2.0 * (m - 1) / m * P / bw_cap + 2.0 * (m - 1) * lat_floor) / min(len(g) for g in groups)


def decoupled_value(sc, entries: Sequence[tuple], bound: float, sync_lb: float = 0.0) -> float:
    """min over integer shares of D = W (z + sync_lb) + q.b for one structure of entries (inf
    when it has no feasible shares), or a lower bound on it that is already >= bound. sc: the
    slot's solve.scoring.Scorer; sync_lb: sync_lower_bound of its groups (seconds)."""
    gcs = [sc.coeffs(*e) for e in entries]
    us = [sc.u_of(e) for e in entries]
    B = sc.B
    if sum(us) > B or any(g.cap < u for g, u in zip(gcs, us)):
        return math.inf
    alpha = np.array([g.alpha for g in gcs])
    beta = np.array([g.beta for g in gcs])
    cc = cost_coeffs(sc.state, gcs)
    W = sc.V + float(sc.Q @ cc.R)
    q = sc.Q @ cc.e if len(sc.Q) else np.zeros(len(gcs))
    zlb = max(B / float(np.sum(1.0 / alpha)), float(np.max(beta + np.asarray(us) * alpha)))
    lb = W * (zlb + sync_lb) + float(np.min(q)) * B        # q.b >= min q * B as the shares sum to B
    if lb >= bound:
        return lb
    caps = np.minimum(np.array([g.cap for g in gcs], dtype=float), float(B))
    if float(caps.sum()) < B:
        return math.inf
    _, z_lp = water_fill(alpha, beta, float(B), lo=np.asarray(us, dtype=float), cap=caps)   # z >= the continuous least z
    lb = W * (z_lp + sync_lb) + float(np.min(q)) * B
    if lb >= bound:
        return lb
    r = solve_shares(alpha, beta, [g.cap for g in gcs], B, us[0] if len(set(us)) == 1 else us, W, q,
                     lp_bound=False)
    return r.value + W * sync_lb if r.status == "optimal" else math.inf


def certify(sc, groupings: Iterable[list[tuple[int, ...]]], options_of: Callable[[tuple[int, ...]], list[tuple]],
            optimum: float, coupled_single: bool) -> tuple[list[list[tuple[int, ...]]], str]:
    """(the groupings not certified, a note): every grouping some of whose frontier structures
    reach below `optimum` in D (module doc), and either the first such reason or how many
    structures were checked. groupings: the oracle's sets of ordered groups; options_of: its
    frontier entries of an ordered group; coupled_single: whether one-group plans have a
    cut-dependent term (a previous plan to migrate from), else they need no check (their
    frontier optimum is exact)."""
    limit = optimum * (1.0 - RTOL) if optimum > 0 else optimum - RTOL
    checked, failing, why = 0, [], ""
    for groups in groupings:
        if not groups or (len(groups) == 1 and not coupled_single):
            continue
        if len(groups) > sc.B // min(sc.micro_batches) or sc.device_bound(groups) >= limit:
            continue
        per_group = [options_of(g) for g in groups]
        if any(not o for o in per_group):
            continue
        sync_lb = sync_lower_bound(sc.state, groups)
        for entries in itertools.product(*per_group):
            checked += 1
            d = decoupled_value(sc, entries, limit, sync_lb)
            if d < limit:
                failing.append(groups)
                why = why or (f"groups {[list(g) for g in groups]} with frontier cuts reach {d:.6g} with the sync at "
                              f"its lower bound {sync_lb:.3g} s and no migration, below the optimum {optimum:.6g}")
                break
    return failing, why or f"{checked} structures checked"
