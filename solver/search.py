"""The per-slot solver: tentative search over groupings and partitions + exact batch shares
(DESIGN.md section 3, "Per-slot solution: tentative search + linear solving").

A *structure* is a tuple of ordered, cut groups ((devices, cuts), ...). For a structure every
number of the slot problem is fixed and the shares come from `shares.solve_shares` with

    W = V + sum_k Q_k R_k,   q_g = sum_k Q_k e_kg,
    objective = W (z + T_sync + migration / iterations_per_slot) + q.b + sum_k Q_k F_k

(= V T + sum_k Q_k c_k, plus the amortised migration time charged like batch time), where
Q_k here is the weight queue_k / Cbar_k (queues are kept in budget units; costmodel.budget_weights).
The search scores candidate structures from several families (data parallel over the devices
that hold the model, link-locality clusters, speed-balanced groups, contiguous chunks of a
fast-link chain, single pipelines, the previous plan, every baseline, the cheapest plan), then
improves the best ones by local moves (move, swap, drop, add a device; split, merge groups) and
polishes cuts (frontier cut sets) and orders of the winner. Every baseline plan is scored with
its own shares and with re-optimised shares, so the result never loses to a baseline.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from . import baselines
from .costmodel import Evaluation, GroupCoeffs, budget_weights, cost_coeffs, evaluate, sync_time
from .cuts import frontier_cuts, min_bottleneck_cuts
from .model import SlotState
from .plan import Group, Plan
from .replan import holder_mask, migration_time
from .shares import solve_shares, water_fill

Ordered = tuple[int, ...]
Structure = tuple[tuple[Ordered, tuple[int, ...]], ...]


@dataclass(frozen=True)
class SolveOptions:
    """exact: use the exhaustive oracle (n <= 6); max_groups: at most this many groups;
    local_search: improve by local moves; frontier: cut sets per group tried in the polish;
    replan: charge migration from previous_plan; iterations_per_slot: iterations the migration
    time is amortised over; keep_candidates: return every scored plan; max_structures:
    deterministic work budget, the most structures the search tries after the fixed candidates
    (work units, see default_work_budget; None: default_work_budget(n, L)); time_limit_s: optional extra wall-clock limit (seconds,
    opt-in: it makes results depend on machine load); the fixed candidates (baselines, cheapest,
    previous plan) are always scored."""

    exact: bool = False
    max_groups: int | None = None
    local_search: bool = True
    frontier: int = 4
    replan: bool = True
    iterations_per_slot: int = 100
    keep_candidates: bool = False
    time_limit_s: float | None = None
    max_structures: float | None = None


@dataclass(frozen=True)
class SlotResult:
    """Outcome of one slot. batch_time: predicted seconds per iteration (no migration);
    costs: per budget in state order; objective: V T + sum Q_k c_k (+ W * migration /
    iterations when re-planning is charged); status: "optimal" (exact), "feasible"
    (heuristic) or "infeasible" (plan None); solve_time, migration_time: seconds;
    candidates: structures scored; candidate_pool: (Plan, batch_time, costs) when asked."""

    plan: Plan | None
    batch_time: float
    costs: tuple[float, ...]
    objective: float
    status: str
    message: str
    solve_time: float
    candidates: int = 0
    migration_time: float = 0.0
    evaluation: Evaluation | None = None
    candidate_pool: tuple = ()


@dataclass
class Scored:
    objective: float
    batch_time: float
    plan: Plan
    structure: Structure
    migration: float
    source: str


def check_queues(state: SlotState, queues: Sequence[float]) -> np.ndarray:
    """The cost weights Q_k / Cbar_k (costmodel.budget_weights) of queues given in budget
    order and in budget units; () means all zero. ValueError on a length mismatch."""
    K = len(state.budgets)
    if len(queues) == 0:
        return np.zeros(K)
    if len(queues) != K:
        names = ", ".join(b.name for b in state.budgets) or "none"
        raise ValueError(f"got {len(queues)} queue values but the state has {K} budgets ({names})")
    q = np.asarray(queues, dtype=float)
    if not np.all(np.isfinite(q)) or np.any(q < 0):
        raise ValueError(f"queues must be finite and >= 0, got {tuple(queues)}")
    return budget_weights([b.limit for b in state.budgets], q)


def infeasible_reason(state: SlotState) -> str | None:
    """Why no plan can exist in this state, or None."""
    if not state.available_indices:
        return f"slot {state.t}: no device is available"
    return None


class Scorer:
    """Scores structures in one state for fixed queues and V; caches group coefficients by
    (devices, cuts), cuts by (devices, min share) and sync times by structure."""

    def __init__(self, state: SlotState, Q: np.ndarray, V: float, options: SolveOptions,
                 previous_plan: Plan | None) -> None:
        self.state, self.Q, self.V, self.opt = state, Q, float(V), options
        wl = state.workload
        self.B, self.u, self.L = wl.batch, wl.micro_batch, wl.num_layers
        self.prev = previous_plan if options.replan else None
        self.prev_held = holder_mask(self.prev, state) if self.prev is not None else None
        self._coeffs: dict[tuple, GroupCoeffs] = {}
        self._cuts: dict[tuple, tuple | None] = {}
        self._frontier: dict[tuple, list] = {}
        self._sync: dict[Structure, float] = {}
        self._seen: dict[tuple, Scored | None] = {}
        self.deadline = math.inf
        self.budget = math.inf          # structures the search may still try (work budget)
        self.tries = 0
        idx = np.asarray(state.available_indices, dtype=int)
        self._inv_fwd = np.zeros(state.n)
        self._inv_bwd = np.zeros(state.n)
        if len(idx):
            self._inv_fwd[idx] = 1.0 / np.maximum(state.fwd_prefix[idx, self.L], 1e-300)
            self._inv_bwd[idx] = 1.0 / np.maximum(state.bwd_prefix[idx, self.L], 1e-300)
        self._w_dev = np.zeros(state.n)    # per device: price / idle-power weight in W
        for k, b in enumerate(state.budgets):
            if Q[k] > 0 and b.kind == "money":
                self._w_dev += Q[k] * np.asarray(state.price, dtype=float)
            elif Q[k] > 0 and b.kind == "energy":
                self._w_dev += Q[k] * np.array([d.idle_power_w for d in state.devices])
        self.all_orders_up_to = 4 if len(state.available_indices) <= 6 and self.L <= 24 else 0
        self.best: Scored | None = None
        self.pool: list[Scored] = []
        self.count = 0

    # ---- caches -------------------------------------------------------------------------
    def coeffs(self, devices: Ordered, cuts: tuple[int, ...]) -> GroupCoeffs:
        key = (devices, cuts)
        c = self._coeffs.get(key)
        if c is None:
            c = self._coeffs[key] = baselines.group_coeffs(self.state, devices, cuts)
        return c

    def cuts(self, devices: Ordered, min_share: int | None = None) -> tuple[int, ...] | None:
        key = (devices, min_share)
        if key not in self._cuts:
            self.tries += self.cut_work(len(devices))
            self._cuts[key] = min_bottleneck_cuts(self.state, devices, min_share)
        return self._cuts[key]

    def frontier(self, devices: Ordered, min_share: int | None = None) -> list[tuple[int, ...]]:
        key = (devices, min_share)
        if key not in self._frontier:
            self.tries += 2 * self.cut_work(len(devices))
            self._frontier[key] = frontier_cuts(self.state, devices, self.opt.frontier, min_share)
        return self._frontier[key]

    def cut_work(self, k: int) -> float:
        """Work units (one unit ~ scoring one structure) of the cut DPs of a k-device group:
        a few DPs of k stages over (L - k + 1)^2 (start, end) pairs."""
        if k <= 1:
            return 0.0
        return k * (0.8 + (self.L - k + 1) ** 2 / 4000.0)

    def sync(self, s: Structure) -> float:
        v = self._sync.get(s)
        if v is None:
            v = self._sync[s] = sync_time(self.state, s)
        return v

    def exhausted(self) -> bool:
        """True when the work budget (or the opt-in wall-clock limit) is spent."""
        return self.tries >= self.budget or (self.deadline < math.inf and time.perf_counter() > self.deadline)

    def device_bound(self, groups: Sequence[Ordered]) -> float:
        """A lower bound on the objective of any cuts and shares of these device groups:
        W z with z >= B / sum_g 1 / alpha_lb(g) (compute alone; FLOP-based: work over the summed
        speed, measured times: per-layer fastest member over k) and W from device prices and
        idle powers (busy energy and F are >= 0)."""
        st = self.state
        inv = 0.0
        used: list[int] = []
        measured = bool(st.workload.measured)
        for g in groups:
            d = list(g)
            used += d
            if not measured:
                a = 1.0 / float(self._inv_fwd[d].sum()) + 1.0 / float(self._inv_bwd[d].sum())
            else:
                a = (float(st.layer_fwd_seconds[d].min(axis=0).sum())
                     + float(st.layer_bwd_seconds[d].min(axis=0).sum())) / len(d)
            inv += 1.0 / a if a > 0 else math.inf
        W = self.V + float(self._w_dev[used].sum())
        return W * self.B / inv if inv > 0 else 0.0

    # ---- scoring ------------------------------------------------------------------------
    def score(self, s: Structure, shares: Sequence[int] | None = None, source: str = "",
              prune: bool = False) -> Scored | None:
        """Score a structure (exact integer shares unless given); None when infeasible, or
        (with prune) when a lower bound shows it cannot beat the incumbent."""
        if not s:
            return None
        key = (s, None if shares is None else tuple(shares))
        if key in self._seen:
            return self._seen[key]
        if self.opt.max_groups is not None and len(s) > self.opt.max_groups:
            return None
        self.tries += 1
        gcs = [self.coeffs(d, c) for d, c in s]
        m = len(gcs)
        if m > self.B // self.u or any(g.cap < self.u for g in gcs):
            self._seen[key] = None
            return None
        alpha = np.array([g.alpha for g in gcs])
        beta = np.array([g.beta for g in gcs])
        best = self.best
        # z >= B / sum(1/alpha) and z >= max beta + u alpha: a bound before anything costly
        zlb = max(self.B / float(np.sum(1.0 / alpha)), float(np.max(beta + self.u * alpha)))
        if prune and best is not None and self.V * zlb > best.objective:
            return None
        cc = cost_coeffs(self.state, gcs)
        W = self.V + float(self.Q @ cc.R)
        q = self.Q @ cc.e if len(self.Q) else np.zeros(m)
        if prune and best is not None:
            lb = W * zlb + float(np.min(q)) * self.B + float(self.Q @ cc.F)
            if lb > best.objective:
                return None
            if W * (zlb + self.sync(s)) + float(np.min(q)) * self.B + float(self.Q @ cc.F) > best.objective:
                return None
        self._seen[key] = None
        if shares is None:
            r = solve_shares(alpha, beta, [g.cap for g in gcs], self.B, self.u, W, q, lp_bound=False)
            if r.status != "optimal":
                return None
            b = np.array(r.shares, dtype=float)
        else:
            b = np.asarray(shares, dtype=float)
            if len(b) != m or any(x > g.cap for x, g in zip(b, gcs)):
                return None
        self.count += 1
        z = float(np.max(alpha * b + beta))
        ts = self.sync(s)
        plan = Plan(tuple(Group(d, c, int(x)) for (d, c), x in zip(s, b)))
        mig = 0.0
        if self.prev is not None:
            mig = migration_time(self.prev, plan, self.state, self.prev_held)
        obj = W * (z + ts + mig / max(self.opt.iterations_per_slot, 1)) + float(q @ b) + float(self.Q @ cc.F)
        sc = Scored(obj, z + ts, plan, s, mig, source)
        self._seen[key] = sc
        if self.opt.keep_candidates:
            self.pool.append(sc)
        if self.best is None or better(sc, self.best):
            self.best = sc
        return sc

    def score_groups(self, groups: Iterable[Ordered], source: str = "", prune: bool = True) -> Scored | None:
        """Cut every ordered group (min-bottleneck, one micro-batch of memory) and score; groups
        that cannot hold the model are dropped. When a memory cap binds, re-cut those groups
        for a larger share and score again."""
        groups = list(groups)
        if prune and self.best is not None and (self.exhausted()
                                                or self.device_bound(groups) > self.best.objective):
            return None
        s = []
        for d in groups:
            c = self.cuts(d)
            if c is not None:
                s.append((d, c))
        if not s:
            return None
        sc = self.score(tuple(s), source=source, prune=prune)
        if self.exhausted():
            return sc
        s2 = self.relieve_memory(tuple(s))
        if s2 is not None:
            cand = self.score(s2, source=source + "+mem", prune=prune)
            if cand is not None and (sc is None or better(cand, sc)):
                sc = cand
        return sc

    def wanted_shares(self, s: Structure) -> np.ndarray:
        """Shares (samples, multiples of u) the structure would get if memory did not bind."""
        gcs = [self.coeffs(d, c) for d, c in s]
        b, _ = water_fill([g.alpha for g in gcs], [g.beta for g in gcs], float(self.B), lo=float(self.u))
        return np.maximum(np.ceil(b / self.u - 1e-9), 1).astype(int) * self.u

    def relieve_memory(self, s: Structure) -> Structure | None:
        """When a group's memory cap is below the share it would get without caps: re-cut it
        (trying the current, memory-rich-first and speed orders) to hold that share; None when
        no cap binds or nothing changes."""
        if len(s) > self.B // self.u:
            return None
        if all(self.coeffs(d, c).cap >= self.B for d, c in s):
            return None            # no cap can bind
        want = self.wanted_shares(s)
        out, changed = [], False
        for (d, c), w in zip(s, want):
            if self.coeffs(d, c).cap >= w:
                out.append((d, c))
                continue
            options = []
            for o in group_orders(self.state, d, self.all_orders_up_to):
                c2 = self.cuts(o, int(w))
                if c2 is not None:
                    options.append((self.coeffs(o, c2).alpha, o, c2))
            if options:
                out.append(min(options)[1:])
                changed = True
            else:
                out.append((d, c))
        return tuple(out) if changed else None


def better(a: Scored, b: Scored) -> bool:
    """a strictly better than b: smaller objective, ties (1e-12 relative) by batch time."""
    tol = 1e-12 * max(1.0, abs(a.objective), abs(b.objective))
    if a.objective < b.objective - tol:
        return True
    return abs(a.objective - b.objective) <= tol and a.batch_time < b.batch_time * (1 - 1e-12)


# ---- candidate families -------------------------------------------------------------------
def nn_order(state: SlotState, devices: Iterable[int]) -> Ordered:
    """Pipeline order keeping fast links adjacent: start at the fastest device, then always
    the remaining device with the fastest link from the last one (ties: faster device)."""
    rest = sorted(devices, key=lambda d: (-state.speed[d], d))
    if len(rest) <= 2:
        return tuple(rest)
    out = [rest.pop(0)]
    while rest:
        last = out[-1]
        nxt = max(rest, key=lambda d: (state.bandwidth[last, d], state.speed[d], -d))
        rest.remove(nxt)
        out.append(nxt)
    return tuple(out)


def speed_order(state: SlotState, devices: Iterable[int]) -> Ordered:
    """Fastest first."""
    return tuple(sorted(devices, key=lambda d: (-state.speed[d], d)))


def memory_order(state: SlotState, devices: Iterable[int]) -> Ordered:
    """Most memory first (the first stages stash the most activations in CNNs), ties by speed."""
    return tuple(sorted(devices, key=lambda d: (-state.devices[d].memory_bytes, -state.speed[d], d)))


def clusters(state: SlotState, devices: Sequence[int], threshold: float) -> list[list[int]]:
    """Connected components of the links with bandwidth >= threshold (both directions)."""
    left = set(devices)
    out = []
    while left:
        stack = [min(left)]
        left.discard(stack[0])
        comp = []
        while stack:
            i = stack.pop()
            comp.append(i)
            for j in list(left):
                if min(state.bandwidth[i, j], state.bandwidth[j, i]) >= threshold:
                    left.discard(j)
                    stack.append(j)
        out.append(sorted(comp))
    return out


def balanced_partition(state: SlotState, devices: Sequence[int], m: int) -> list[list[int]]:
    """m groups of similar total speed (LPT: fastest first to the slowest group so far)."""
    groups: list[list[int]] = [[] for _ in range(m)]
    load = [0.0] * m
    for d in sorted(devices, key=lambda d: (-state.speed[d], d)):
        g = min(range(m), key=lambda i: (load[i], i))
        groups[g].append(d)
        load[g] += float(state.speed[d])
    return [g for g in groups if g]


def chain_chunks(state: SlotState, chain: Sequence[int], m: int) -> list[list[int]]:
    """Cut a device chain into m contiguous pieces of similar total speed."""
    sp = np.array([state.speed[d] for d in chain], dtype=float)
    cum = np.cumsum(sp) / sp.sum()
    bounds = [0]
    for i in range(1, m):
        b = int(np.searchsorted(cum, i / m)) + 1
        bounds.append(min(max(b, bounds[-1] + 1), len(chain) - (m - i)))
    bounds.append(len(chain))
    return [list(chain[a:b]) for a, b in zip(bounds, bounds[1:]) if b > a]


def _levels(n: int, cap: int = 16) -> list[int]:
    """1..n when small, else powers of two and n."""
    if n <= cap:
        return list(range(1, n + 1))
    return sorted({1 << i for i in range(n.bit_length())} | {n})


def families(state: SlotState, sc: Scorer, max_depth: int) -> list[tuple[str, list[Ordered]]]:
    """Candidate groupings (lists of ordered groups)."""
    avail = list(state.available_indices)
    n = len(avail)
    out: list[tuple[str, list[Ordered]]] = []
    by_speed = speed_order(state, avail)
    for k in _levels(min(n, max_depth, sc.L)):
        if k > 1:
            out.append((f"pipe{k}", [nn_order(state, by_speed[:k])]))
    chain = list(nn_order(state, avail))
    sizes = _levels(n, 12)
    for m in sorted({max(1, -(-n // k)) for k in sizes}):
        if -(-n // m) <= max_depth:
            out.append((f"chunks{m}", [nn_order(state, g) for g in chain_chunks(state, chain, m)]))
            out.append((f"balanced{m}", [nn_order(state, g) for g in balanced_partition(state, avail, m)]))
    if n > 1:
        idx = np.array(avail)
        bws = np.unique(np.minimum(state.bandwidth[np.ix_(idx, idx)], state.bandwidth[np.ix_(idx, idx)].T)
                        [~np.eye(n, dtype=bool)])
        for thr in bws[::-1][: 4]:
            cl = clusters(state, avail, float(thr))
            groups = []
            for c in cl:   # a cluster deeper than max_depth is split by speed balance
                parts = -(-len(c) // max_depth)
                groups += [nn_order(state, g) for g in balanced_partition(state, c, parts)]
            out.append((f"clusters{thr:.3g}", groups))
    holders = baselines.holders(state)
    for j in _levels(len(holders)):
        out.append((f"dp{j}", [(d,) for d in holders[:j]]))
    return out


# ---- local search -------------------------------------------------------------------------
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
                 max_iter: int = 30) -> Scored:
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


def group_orders(state: SlotState, d: Ordered, all_up_to: int = 4) -> list[Ordered]:
    """Orders to try for a group: every order up to `all_up_to` devices, else the current one,
    speed, memory and reversed orders and every adjacent transposition of the current one."""
    if len(d) <= all_up_to:
        return list(itertools.permutations(d))
    out = [d, speed_order(state, d), memory_order(state, d), tuple(reversed(d))]
    for i in range(len(d) - 1):
        out.append(d[:i] + (d[i + 1], d[i]) + d[i + 2:])
    return list(dict.fromkeys(out))


def polish(state: SlotState, sc: Scorer, cur: Scored, deadline: float, all_up_to: int = 4) -> Scored:
    """Per group, try other orders (group_orders) with their min-bottleneck cuts for one
    micro-batch and for the group's share, and the frontier cut sets of the current order; one
    group at a time, keeping improvements (coordinate descent, at most three rounds)."""
    for _ in range(3):
        improved = False
        for gi in range(len(cur.structure)):
            d, _ = cur.structure[gi]
            share = cur.plan.groups[gi].share
            def options():
                for o in group_orders(state, d, all_up_to):
                    yield from ((o, c) for c in (sc.cuts(o), sc.cuts(o, share)) if c is not None)
                yield from ((d, c) for c in sc.frontier(d) + sc.frontier(d, share))

            tried = set()
            for o, c in options():
                if sc.exhausted() or (deadline < math.inf and time.perf_counter() > deadline):
                    return cur
                if (o, c) in tried:
                    continue
                tried.add((o, c))
                s = cur.structure[:gi] + ((o, c),) + cur.structure[gi + 1:]
                cand = sc.score(s, source="polish", prune=True)
                if cand is not None and better(cand, cur):
                    cur, improved = cand, True
        if not improved:
            break
    return cur


# ---- the solver ----
def default_work_budget(n: int, L: int) -> int:
    """Structures the search may try after the fixed candidates when
    SolveOptions.max_structures is None (deterministic: the result does not depend on machine
    load): generous for the small slots the oracle checks, bounded for large pools.
    One work unit is scoring one structure; cutting a k-device group costs Scorer.cut_work(k)
    units (so deep models spend the budget faster). Small slots (n <= 6) finish the whole search
    well inside their budget (a few hundred units)."""
    if n <= 6:
        return 5000
    if n <= 8:
        return 400
    return 1500 if n <= 16 else 4000


def _result(state: SlotState, sc: Scorer, Q: np.ndarray, V: float, status: str, message: str,
            t0: float) -> SlotResult:
    best = sc.best
    if best is None:
        return SlotResult(None, math.inf, (), math.inf, "infeasible", message, time.perf_counter() - t0, sc.count)
    if best.plan.validate(state):   # never expected: fall back to the best valid candidate
        valid = [s for s in sc._seen.values() if s is not None and not s.plan.validate(state)]
        if not valid:
            return SlotResult(None, math.inf, (), math.inf, "infeasible",
                              f"slot {state.t}: no candidate passed Plan.validate", time.perf_counter() - t0, sc.count)
        best = min(valid, key=lambda s: (s.objective, s.batch_time))
        message += " (fell back: the best candidate failed Plan.validate)"
    plan = best.plan
    ev = evaluate(plan, state)
    pool = tuple((s.plan, s.batch_time, tuple(evaluate(s.plan, state).costs)) for s in sc.pool) \
        if sc.opt.keep_candidates else ()
    return SlotResult(plan, ev.batch_time, ev.costs, best.objective, status, message,
                      time.perf_counter() - t0, sc.count, best.migration, ev, pool)


def solve_slot(state: SlotState, queues: Sequence[float] = (), V: float = 1.0, *,
               previous_plan: Plan | None = None, options: SolveOptions | None = None) -> SlotResult:
    """Choose the plan minimising V T + sum_k Q_k c_k / Cbar_k (+ amortised migration) in this
    slot. queues: in budget order and budget units (solver.queues); V: weight of one second of
    batch time against one budget's worth of cost. Returns a SlotResult (status, message).
    """
    t0 = time.perf_counter()
    opt = options or SolveOptions()
    Q = check_queues(state, queues)
    if not (np.isfinite(V) and V >= 0):
        raise ValueError(f"V must be finite and >= 0, got {V}")
    if opt.exact:
        from .oracle import solve_exact
        return solve_exact(state, queues, V, previous_plan=previous_plan if opt.replan else None,
                           iterations_per_slot=opt.iterations_per_slot, keep_candidates=opt.keep_candidates)
    why = infeasible_reason(state)
    if why:
        return SlotResult(None, math.inf, (), math.inf, "infeasible", why, time.perf_counter() - t0)
    sc = Scorer(state, Q, V, opt, previous_plan)
    n = len(state.available_indices)
    small = n <= 6 and sc.L <= 24          # small slots: all orders of groups up to 4 devices
    max_depth = min(n, sc.L, 8 if n > 16 else 16)
    deadline = t0 + opt.time_limit_s if opt.time_limit_s is not None else math.inf
    sc.deadline = deadline

    # 1. the baselines (own shares and re-optimised), the cheapest plan, the previous plan
    fixed = [(name, f(state)) for name, f in baselines.ALL.items()]
    fixed.append(("cheapest", baselines.cheapest(state, Q, [p for _, p in fixed])))
    if previous_plan is not None and not previous_plan.validate(state):
        fixed.append(("previous", previous_plan))
    for name, p in fixed:
        if p is None:
            continue
        s = tuple((g.devices, g.cuts) for g in p.groups)
        sc.score(s, p.shares, source=name)
        sc.score(s, source=name + "+lp")
        if name == "previous":
            sc.score_groups([g.devices for g in p.groups], source="previous-recut", prune=False)
    # 2. candidate families (from here on the work budget counts)
    sc.tries = 0
    sc.budget = opt.max_structures if opt.max_structures is not None else default_work_budget(n, sc.L)
    for name, groups in families(state, sc, max_depth):
        if sc.exhausted():
            break
        sc.score_groups(groups, source=name)
    if sc.best is None:
        return SlotResult(None, math.inf, (), math.inf, "infeasible",
                          f"slot {state.t}: no device or group of available devices can hold the model "
                          f"({state.workload.name}) with one micro-batch", time.perf_counter() - t0, sc.count)
    # 3. local search from the best few distinct structures, then polish the winner
    if opt.local_search:
        starts = sorted({id(s): s for s in sc._seen.values() if s is not None}.values(),
                        key=lambda s: (s.objective, s.batch_time))[:3]
        for s in starts:
            if sc.exhausted():
                break
            local_search(state, sc, s, max_depth, deadline)
        top = sorted({s.structure: s for s in sc._seen.values() if s is not None}.values(),
                     key=lambda s: (s.objective, s.batch_time))[:5 if small else 2]
        for s in top:
            polish(state, sc, s, deadline, 4 if small else 2)
        local_search(state, sc, sc.best, max_depth, deadline, max_iter=5)
        polish(state, sc, sc.best, deadline, 4 if small else 2)
    return _result(state, sc, Q, V, "feasible", f"tentative search: {sc.count} structures scored ({sc.tries:.0f} work units), "
                   f"best from {sc.best.source}", t0)
