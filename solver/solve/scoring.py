"""Scoring structures in one slot: group coefficients, cuts and sync times cached per state,
exact integer shares, the objective with amortised migration, and valid lower bounds.

A *structure* is a tuple of ordered, cut groups ((devices, cuts), ...). For a structure every
number of the slot problem is fixed and the shares come from `subproblems.shares.solve_shares` with

    W = V + sum_k Q_k R_k,   q_g = sum_k Q_k e_kg,
    objective = W (z + T_sync + migration / iterations_per_slot) + q.b + sum_k Q_k F_k

(= V T + sum_k Q_k c_k, plus the amortised migration time charged like batch time; with a
preemption risk on the state, W ((z + T_sync) (1 + kappa) + ... + extra) with the plan's
expected loss per iteration kappa (z + T_sync) + extra, model.preemption, and the shares at the
weight W (1 + kappa)), where
Q_k here is the weight queue_k / Cbar_k (queues are kept in budget units; cost.costs.budget_weights).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from ..cost.costs import CostCoeffs, cost_coeffs, idle_rates
from ..cost.evaluate import Evaluation, evaluate
from ..cost.migration import MigrationFrom
from ..cost.pipeline import GroupCoeffs, float_sum
from ..cost.sync import sync_floor, sync_lower_bound
from ..model.plan import Group, Plan
from ..model.state import SlotState
from ..status import Status
from ..subproblems.cache import SlotCache, slot_cache
from ..subproblems.cuts import busy_cuts, frontier_cuts, min_bottleneck_cuts
from .bounds import price_weights, slot_lower_bound
from ..subproblems.shares import solve_shares
from ..subproblems.water import water_fill
from .options import SlotResult, SolveOptions
from .oracle_cuts import busy_weights
from .orders import Ordered, group_orders, memory_order, nn_order, speed_order
from .symmetry import Symmetry
from .schedules import (allowed_variants, entry, entry_micro_batch, plain, relieve_by_schedule, relieve_each,
                        simulated_note, variant_entries)

Structure = tuple[tuple, ...]
"""((devices, cuts), ...), an entry (devices, cuts, schedule, recompute) where a group is not
GPipe without recomputation, (devices, cuts, schedule, recompute, micro_batch) where it trains
at another micro-batch size than the workload's (solve.schedules)."""


VARIANT_FRONTIERS = 3
"""(order, variant) pairs of a memory-bound group whose frontier cut sets relieve_by_variant_cuts
also tries (small slots only; each frontier costs two cut DPs' work)."""


@dataclass
class Scored:
    objective: float
    batch_time: float
    plan: Plan
    structure: Structure
    migration: float
    source: str


_UNSEEN = object()
"""Scorer.cuts' marker of a key not looked up yet (None is a result: no cut set fits)."""


class Scorer:
    """Scores structures in one state for fixed queues and V. Group coefficients, cuts and
    evaluations come from `cache` (the caller's SlotCache of this state; a new one when None);
    the Scorer keeps what depends on its work budget and queues: cuts by (devices, min share)
    (each first call is charged), sync times by structure, scored structures."""

    def __init__(self, state: SlotState, Q: np.ndarray, V: float, options: SolveOptions,
                 previous_plan: Plan | None, *, cache: SlotCache | None = None) -> None:
        self.state, self.Q, self.V, self.opt = state, Q, float(V), options
        self.cache = slot_cache(state, cache)
        wl = state.workload
        self.B, self.u, self.L = wl.batch, wl.micro_batch, wl.num_layers
        self.micro_batches = (self.u,) + tuple(u for u in wl.micro_batch_options() if u != self.u and self.B % u == 0)
        """The micro-batch sizes (samples) a group may train at, the workload's u first."""
        self._caches: dict[int, SlotCache] = {self.u: self.cache}
        self.prev = previous_plan if options.replan else None
        self.migration = MigrationFrom(self.prev, state) if self.prev is not None else None
        self.prev_held = self.migration.held if self.migration is not None else None
        self._caps = None if options.caps is None else (
            np.asarray(options.caps, dtype=float), np.asarray([b.limit for b in state.budgets], dtype=float))
        """SolveOptions.caps and the budgets' limits, as arrays (_over_caps)."""
        self._cuts: dict[tuple, tuple | None] = {}
        self._levels: dict[tuple, list[tuple[int, tuple | None, int | None]]] = {}  # (devices, mb, variant) -> (w, cuts, cap)
        self._frontier: dict[tuple, list] = {}
        self._sync: dict[Structure, float] = {}
        self._seen: dict[tuple, Scored | None] = {}
        self._groups_done: dict[tuple, tuple[Scored | None, int]] = {}   # score_groups' complete calls
        self.pruned_charged = 0         # score calls charged a try and pruned (a repeat is charged again)
        self._group_throughput: dict[tuple, float] = {}     # (ordered group, u) -> 1 / alpha_lb
        self._edit_bounds: dict[tuple[int, ...], float] = {}     # ordered group -> lower bound on its alpha
        self._work_floor: dict[frozenset, float] = {}          # device set -> work_floor
        self._nn: dict[frozenset, Ordered] = {}
        self._memos: dict[str, dict] = {}
        self._risk_memo: dict[frozenset, tuple[float, float]] = {}
        self._alpha_order: dict[frozenset, Ordered] = {}
        self._wanted: dict[Structure, np.ndarray] = {}
        self._reliefs: dict[tuple, tuple | None] = {}
        self.deadline = math.inf
        self.budget = math.inf          # structures the search may still try (work budget)
        self.tries = 0
        self.improved_at = 0.0         # tries when the best last improved by more than improve_rel
        self.extended = False          # whether the search went on past its budget (exhausted)
        self.held = 0                  # while no plan: most samples a scored structure's groups held
        idx = np.asarray(state.available_indices, dtype=int)
        inv_fwd, inv_bwd = np.zeros(state.n), np.zeros(state.n)     # per device: samples per second
        if len(idx):
            inv_fwd[idx] = 1.0 / np.maximum(state.fwd_prefix[idx, self.L], 1e-300)
            inv_bwd[idx] = 1.0 / np.maximum(state.bwd_prefix[idx, self.L], 1e-300)
        self._inv_fwd_list, self._inv_bwd_list = inv_fwd.tolist(), inv_bwd.tolist()
        self._sync_floor = sync_floor(state)
        self._sync_memo: dict = {}          # per ordered group: sync_lower_bound's terms
        self._binding: dict = {}            # per structure: binding_wants
        self._w_dev = price_weights(state, Q)     # per device: price / idle-power weight in W
        self._busy_w = busy_weights(state, Q)     # per device: weight of one busy second per sample in q
        self.busy_weighted = bool(np.any(self._busy_w > 0))
        """Whether the objective weighs some device's busy joules (an energy budget's queue > 0)."""
        self._busy: dict[tuple, list[tuple[int, ...]]] = {}
        self._busy_share: tuple[Scored | None, float] = (None, 0.0)      # the incumbent, its busy_share
        self._busy_floor: dict[frozenset, float] = {}
        self._w_list = self._w_dev.tolist()
        self._no_weights = not np.any(Q) and all(math.isfinite(x) for x in state.price) \
            and all(math.isfinite(d.idle_power_w) for d in state.devices)
        """Every queue weight is 0 and every price and idle power finite: the cost terms of
        the objective are 0 for every plan, so score skips cost.costs.cost_coeffs."""
        kinds = [b.kind for b in state.budgets]
        plain = (not self._no_weights and set(kinds) <= {"money", "energy"} and kinds.count("energy") <= 1
                 and (state.network is None or state.network.egress is None)
                 and all(math.isfinite(float(x)) for x in Q))
        self._energy_weight = None if not plain else float(Q[kinds.index("energy")]) if "energy" in kinds else 0.0
        """Where the cost terms are money without egress and at most one energy budget (finite
        weights): the weight of busy joules in q (0.0 without an energy budget), so score
        builds W and q without cost.costs.cost_coeffs (the same floats); else None."""
        self._W_memo: dict[tuple, float] = {}      # groups' device orders -> W (the plain case above)
        self._params, self._param_room = param_room(state)
        self._room_list = self._param_room.tolist()
        self._rooms: dict[int, tuple[float, list[float]]] = {}
        self.variants = allowed_variants(options.recompute and (options.recompute_tp or state.tp is None
                                                               or max(state.tp) == 1),
                                         options.one_f_one_b) if options.schedules else ()
        """The (schedule, recompute) variants this search may choose besides GPipe (none without
        SolveOptions.schedules: every path that offers one reads them here)."""
        t = self.tuning = options.tuning
        self.n_avail = len(state.available_indices)
        self.all_orders_up_to = t.all_orders_small if t.small(self.n_avail, self.L) \
            else t.all_orders_deep_small if self.n_avail <= t.small_devices else t.all_orders_memory
        self.best: Scored | None = None
        self.pool: list[Scored] = []
        self.count = 0
        self._count0 = 0                # structures scored before the current work budget

    # ---- caches -------------------------------------------------------------------------
    def at(self, micro_batch: int | None) -> tuple[SlotState, SlotCache]:
        """The state of a group at `micro_batch` samples (None: the workload's u) and its cache."""
        u = self.u if micro_batch is None else int(micro_batch)
        if u not in self._caches:
            self._caches[u] = SlotCache(self.state.at_micro_batch(u), dp_backend=self.cache.dp_backend)
        return self._caches[u].state, self._caches[u]

    def _room_at(self, u: int) -> tuple[float, list[float]]:
        """param_room of the state at micro-batch size u (the need grows with u)."""
        got = self._rooms.get(u)
        if got is None:
            params, room = param_room(self.at(u)[0])
            got = self._rooms[u] = (params, room.tolist())
        return got

    def u_of(self, e: tuple) -> int:
        """The micro-batch size (samples) of a structure entry."""
        mb = entry_micro_batch(e)
        return self.u if mb is None else int(mb)

    def mb(self, u: int) -> int | None:
        """The entry form of micro-batch size u: None for the workload's own."""
        return None if u == self.u else int(u)

    def coeffs(self, devices: Ordered, cuts: tuple[int, ...], schedule: str = "gpipe",
               recompute: bool = False, micro_batch: int | None = None) -> GroupCoeffs:
        if micro_batch is None:
            return self.cache.group_coeffs(devices, cuts, schedule, recompute)
        return self.at(micro_batch)[1].group_coeffs(devices, cuts, schedule, recompute)

    def cuts(self, devices: Ordered, min_share: int | None = None,
             micro_batch: int | None = None, variant: tuple[str, bool] = ("gpipe", False)) -> tuple[int, ...] | None:
        """Min-bottleneck cuts of an ordered group within memory for min_share samples (None:
        one micro-batch), each stage at its own peak under `variant` (schedule, recompute);
        None when no cut set fits. Each first call is charged cut_work."""
        key = (devices, min_share) if micro_batch is None else (devices, min_share, int(micro_batch))
        if variant != ("gpipe", False):
            key += variant
        got = self._cuts.get(key, _UNSEEN)
        if got is not _UNSEEN:
            return got
        params, room = (self._params, self._room_list) if micro_batch is None else self._room_at(int(micro_batch))
        if float_sum([room[d] for d in devices]) < params:
            got = None          # the group cannot hold the model at one micro-batch
        else:
            got = self._cuts_at_level(devices, min_share, micro_batch, variant)
        self._cuts[key] = got
        return got

    def _cuts_at_level(self, devices: Ordered, min_share: int | None, micro_batch: int | None,
                       variant: tuple[str, bool]) -> tuple[int, ...] | None:
        """cuts() for a key not seen yet. The DP's feasible cut sets for w samples shrink as w
        grows, so the cut set c0 it chose for a smaller w0 (None: one micro-batch) is also its
        choice for w whenever c0 holds w (its cap under the variant >= w): the least of a set
        is the least of any subset that holds it. Likewise no cut set for w0 means none for w.
        Such a reuse costs no DP and no work; otherwise the DP is charged cut_work (and runs
        unless a group of the same signature ran it: SlotCache.twin_cuts), so twins change
        the search's time, never its path."""
        u = self.u if micro_batch is None else int(micro_batch)
        w = u if min_share is None else int(min_share)
        levels = self._levels.setdefault((devices, micro_batch, variant), [])
        for w0, c0, cap0 in levels:
            if w0 <= w and (c0 is None or cap0 >= w):
                return c0
        self.tries += self.cut_work(len(devices))
        st, cache = self.at(micro_batch)
        c = min_bottleneck_cuts(st, devices, min_share, cache=cache, schedule=variant[0], recompute=variant[1])
        levels.append((w, c, None if c is None else self.coeffs(devices, c, *variant, micro_batch).cap))
        return c

    def frontier(self, devices: Ordered, min_share: int | None = None,
                 micro_batch: int | None = None, variant: tuple[str, bool] = ("gpipe", False)) -> list[tuple[int, ...]]:
        """frontier_cuts of an ordered group (as cuts: memory for min_share samples, each stage
        at its own peak under `variant`); each first call is charged twice cut_work."""
        key = (devices, min_share) if micro_batch is None else (devices, min_share, int(micro_batch))
        if variant != ("gpipe", False):
            key += variant
        if key not in self._frontier:
            self.tries += 2 * self.cut_work(len(devices))
            st, cache = self.at(micro_batch)
            self._frontier[key] = frontier_cuts(st, devices, self.opt.frontier, min_share, cache=cache,
                                                relax=self.tuning.frontier_relax, seeds=self.tuning.frontier_seeds,
                                                schedule=variant[0], recompute=variant[1])
        return self._frontier[key]

    def busy_cuts(self, devices: Ordered, min_share: int | None = None, micro_batch: int | None = None,
                  variant: tuple[str, bool] = ("gpipe", False)) -> list[tuple[int, ...]]:
        """subproblems.cuts.busy_cuts of an ordered group at the objective's busy-second weights
        ([] where none weighs), under the best min-alpha point relaxed by SearchTuning.busy_relax;
        each first call is charged twice cut_work, as frontier."""
        if not self.busy_weighted or len(devices) < 2:
            return []
        key = (devices, min_share, micro_batch, variant)
        if key not in self._busy:
            self.tries += 2 * self.cut_work(len(devices))
            st, cache = self.at(micro_batch)
            self._busy[key] = busy_cuts(st, devices, [self._busy_w[d] for d in devices], min_share, cache=cache,
                                        relax=self.tuning.busy_relax, seeds=1, schedule=variant[0],
                                        recompute=variant[1])
        return self._busy[key]

    def busy_floor(self, devices: Ordered) -> float:
        """A lower bound on the objective's busy-joule term per sample of a group of these devices
        at the workload's micro-batch size (not at others: their per-sample seconds differ), any
        order and cuts: per layer, the least over its members of its busy-second weight
        (busy_weights: busy power above idle included) x forward plus backward seconds."""
        key = frozenset(devices)
        got = self._busy_floor.get(key)
        if got is None:
            st, d = self.state, sorted(key)
            per = (st.layer_fwd_seconds[d] + st.layer_bwd_seconds[d]) * self._busy_w[d][:, None]
            got = self._busy_floor[key] = float(per.min(axis=0).sum()) * (1.0 - 1e-9)
        return got

    def busy_share(self) -> float:
        """The part of the incumbent's objective that pays for busy joules (0 without one)."""
        b = self.best
        if b is None or not self.busy_weighted or not b.objective > 0:
            return 0.0
        if self._busy_share[0] is not b:
            paid = sum(g.share * self._busy_paid(e) for e, g in zip(b.structure, b.plan.groups))
            self._busy_share = (b, paid / b.objective)
        return self._busy_share[1]

    def _busy_paid(self, e: tuple) -> float:
        """The objective's busy-joule term per sample of a structure entry: per stage, its
        weight (busy_weights) times its busy seconds (forward plus backward, plus the forward
        again under recomputation, as cost.pipeline's busy_j_per_sample)."""
        gc = self.coeffs(*e)
        busy = gc.fwd + gc.bwd + (gc.fwd if gc.recompute else 0.0)
        return float(np.dot(self._busy_w[list(e[0])], busy))

    def busy_recut(self, s: Structure, best: Scored | None, source: str, prune: bool) -> Scored | None:
        """`best` or better: each group of s re-cut in turn by busy_cuts under GPipe and every
        variant, for its share in `best` (where best scored s; one group: the whole batch; else
        one micro-batch). Where energy weighs, the least-energy cuts can put more layers on an
        efficient device than the bottleneck allows (an outside audit's slot: the optimum is a
        1F1B pipeline of a T4 and a K80 cut at 13 of VGG-16's 16 layers, where the balanced cut
        is 8). Skipped where busy joules are less than SearchTuning.busy_recut_share of the
        incumbent's objective; for a structure `best` scored, where its objective less the busy
        joules above each group's floor (busy_floor) is no better than the incumbent (an estimate,
        not a bound: a re-cut is scored with fresh shares and may change a group's time and
        memory cap; on 48 small slots it skipped no re-cut that would have won); else where
        device_bound plus the whole batch at the least group floor is above the incumbent (a
        bound, at the workload's micro-batch size, where every structure score_groups builds
        is)."""
        if self.busy_share() < self.tuning.busy_recut_share:
            return best
        shares = [g.share for g in best.plan.groups] if best is not None and best.structure == s else None
        if self.best is not None:
            if shares is not None:      # re-cuts save at most the busy joules above each group's floor
                save = sum(b * (self._busy_paid(e) - self.busy_floor(e[0])) for e, b in zip(s, shares))
                if best.objective - save >= self.best.objective:
                    return best
            else:
                groups = [e[0] for e in s]
                if self.device_bound(groups) + self.B * min(self.busy_floor(g) for g in groups) > self.best.objective:
                    return best
        for i, e in enumerate(s):
            if len(e[0]) < 2:
                continue
            share = shares[i] if shares is not None else self.B if len(s) == 1 else None
            mb = entry_micro_batch(e)
            for v in (("gpipe", False),) + tuple(self.variants):
                for c in self.busy_cuts(e[0], share, mb, v):
                    if self.exhausted():
                        return best
                    new = s[:i] + (entry(e[0], c, *v, micro_batch=mb),) + s[i + 1:]
                    cand = self.score(new, source=source + "+busy", prune=prune)
                    if cand is not None and (best is None or better(cand, best)):
                        best = cand
        return best

    def evaluation(self, plan: Plan) -> Evaluation:
        """cost.evaluate of a plan, each group's coefficients at its own micro-batch size."""
        if all(g.micro_batch in (None, self.u) for g in plan.groups):
            return self.cache.evaluation(plan)
        return evaluate(plan, self.state, [self.coeffs(g.devices, g.cuts, g.schedule, g.recompute,
                                                       self.mb(g.micro_batch or self.u)) for g in plan.groups],
                        check=False)

    @property
    def symmetry(self) -> Symmetry:
        """The structure keys of this state under its like devices (solve.symmetry; built on
        first use)."""
        got = self.__dict__.get("_symmetry")
        if got is None:
            got = self._symmetry = Symmetry(self.state, self.cache, self.prev_held)
        return got

    def known_cuts(self, devices: Ordered) -> bool:
        """True when cuts(devices) (one micro-batch, GPipe) has run already: asking again is free."""
        return (devices, None) in self._cuts

    def surely_cut(self, devices: Ordered) -> bool:
        """True when this order is known to have cuts for one micro-batch (cuts ran and found
        some, or note_edits bounded it: a finite edit bound means a cut set fits), so
        score_groups keeps the group in this order; False when unknown or known not to."""
        return self._cuts.get((devices, None)) is not None or devices in self._edit_bounds

    def throughput_ceiling(self, devices: Ordered) -> float:
        """An upper bound (samples per second, possibly inf) on 1 / alpha of this order at its
        min-bottleneck cuts for one micro-batch at the workload's size: device_bound's compute
        bound, or where note_edits bounded this order, one over that bound if less."""
        inv = self._throughput([devices], self.u)
        lb = self._edit_bounds.get(devices)
        return min(inv, 1.0 / lb) if lb is not None and lb > 0 else inv

    def work_floor(self, devices: Ordered) -> float:
        """A lower bound (seconds per sample) on the forward plus backward seconds of a
        pipeline of these devices summed over its stages, for any order and cuts: per layer,
        the least of its members' (less a relative 1e-9 for the prefix sums' rounding)."""
        key = frozenset(devices)
        got = self._work_floor.get(key)
        if got is None:
            st, d = self.state, sorted(key)
            per_layer = st.layer_fwd_seconds[d] + st.layer_bwd_seconds[d]
            got = self._work_floor[key] = float(per_layer.min(axis=0).sum()) * (1.0 - 1e-9)
        return got

    def note_edits(self, groups: Sequence[Ordered]) -> None:
        """Bound the alpha of every one-device edit of these ordered groups by the available
        devices outside each (SlotCache.edit_alpha_bounds), for throughput_ceiling."""
        for g in groups:
            others = [d for d in self.state.available_indices if d not in g]
            got = self.cache.edit_alpha_bounds(tuple(g), others)
            if got is None:
                return
            self._edit_bounds.update(got)

    def nn(self, devices: frozenset) -> Ordered:
        """orders.nn_order of a device set, kept per set (it depends only on the set)."""
        o = self._nn.get(devices)
        if o is None:
            o = self._nn[devices] = nn_order(self.state, devices)
        return o

    def memo(self, name: str) -> dict:
        """A dict kept for the length of this Scorer (one state, one solve) under `name`, for a
        caller's pure functions of the state (solve.local's splits)."""
        return self._memos.setdefault(name, {})

    def alpha_order(self, devices: frozenset) -> Ordered:
        """The order of a device set with the least GPipe alpha (seconds/sample) under its
        min-bottleneck cuts for one micro-batch, among every order where
        SearchTuning.alpha_order_work affords them, else the fast-link chain's orders
        (orders.group_orders with every relocation); the chain itself on ties, and for sets of
        one device or beyond SearchTuning.alpha_orders_up_to. Kept per set."""
        o = self._alpha_order.get(devices)
        if o is not None:
            return o
        o = chain = self.nn(devices)
        k = len(chain)
        if 2 <= k <= self.tuning.alpha_orders_up_to:
            every = math.factorial(k) * self.cut_work(k) <= self.tuning.alpha_order_work
            best = math.inf
            for cand in group_orders(self.state, chain, k if every else 0, relocate=True):
                c = self.cuts(cand)
                if c is not None:
                    a = self.coeffs(cand, c).alpha
                    if a < best * (1 - 1e-12):
                        best, o = a, cand
        self._alpha_order[devices] = o
        return o

    def relief_orders(self, d: Ordered) -> list[Ordered]:
        """The orders the memory reliefs re-cut a group in: group_orders up to the every-order
        size, adjacent swaps only where a cut DP is cheap (SearchTuning.relief_transpose_work)."""
        return group_orders(self.state, d, self.all_orders_up_to,
                            transpose=self.cut_work(len(d)) <= self.tuning.relief_transpose_work)

    def cut_work(self, k: int) -> float:
        """Work units (one unit ~ scoring one structure) of one cut DP call of a k-device
        group: a fixed part and k (L - k + 1)^2 (stage, start, end) triples (SearchTuning.cut_work_*)."""
        if k <= 1:
            return 0.0
        return self.tuning.cut_work_call + k * (self.L - k + 1) ** 2 / self.tuning.cut_work_pairs

    def sync(self, s: Structure) -> float:
        """cost.sync.sync_time of a structure (seconds; 0 for one group), kept per structure."""
        if len(s) == 1:
            return 0.0
        v = self._sync.get(s)
        if v is None:
            v = self._sync[s] = self.cache.sync_time(plain(s))
        return v

    def exhausted(self) -> bool:
        """True when the work budget (or the opt-in wall-clock limit) is spent. A search that
        has scored fewer than SearchTuning.min_structures structures under this budget, or is
        still improving, runs on past it: the latter stops once its tries reach
        SearchTuning.patience times those at its last improvement by more than improve_rel (so
        the last half of its work, at patience 2, found nothing better); both stop at
        extend_cap times the budget."""
        if self.deadline < math.inf and time.perf_counter() > self.deadline:
            return True
        if self.tries < self.budget:
            return False
        t = self.tuning
        if self.count - self._count0 < t.min_structures and self.tries < t.extend_cap * self.budget:
            return False
        if self.tries >= min(t.extend_cap * self.budget, t.patience * self.improved_at):
            return True
        self.extended = True
        return False

    def restart_budget(self, budget: float) -> None:
        """Count tries from 0 against a new work budget (a later phase of its own)."""
        self.tries, self.budget, self.improved_at = 0, budget, 0.0
        self._count0 = self.count
        self.extended = False

    def device_bound(self, groups: Sequence[Ordered]) -> float:
        """A lower bound on the objective of any cuts and shares of these device groups:
        W z with z >= B / sum_g 1 / alpha_lb(g) (compute alone; FLOP-based: work over the summed
        speed, measured times: per-layer fastest member over k) and W from device prices and
        idle powers (busy energy and F are >= 0), plus W times a lower bound on the sync
        (cost.sync.sync_lower_bound: each group's devices must all-reduce every parameter byte
        over their fastest links)."""
        mbs = self.micro_batches
        inv = self._throughput(groups, mbs[0]) if len(mbs) == 1 else max(self._throughput(groups, u) for u in mbs)
        W = self.w_floor(groups)
        z = W * self.B / inv if inv > 0 else 0.0
        ts = sync_lower_bound(self._sync_floor, groups, self._sync_memo)
        return z + W * ts if ts > 0 else z

    def least_holding_depth(self) -> int:
        """The fewest available devices whose parameter room (param_room) can hold the model:
        no shallower group holds it, so the search's groups go at least this deep whatever
        SearchTuning.depth says (LLAMA-3-8 at tp 1 needs 9 or more of Sailor's A100-40s, where
        the depth for 32 devices is 8)."""
        total = 0.0
        rooms = sorted((self._room_list[d] for d in self.state.available_indices), reverse=True)
        for k, r in enumerate(rooms, 1):
            total += r
            if total >= self._params:
                return k
        return len(rooms)

    def room(self, d: int) -> float:
        """Device d's parameter room (param_room): the most of the model's bytes it can hold."""
        return self._room_list[d]

    def device_weight(self, d: int) -> float:
        """Device d's queue-weighted price and idle power per second (bounds.price_weights)."""
        return self._w_list[d]

    def w_floor(self, groups: Sequence[Ordered]) -> float:
        """V plus the queue-weighted prices and idle powers of the groups' devices: W of any plan
        on them is at least this (per second; device-energy budgets and egress only add)."""
        if self._no_weights:
            return self.V
        return self.V + float_sum([self._w_list[d] for g in groups for d in g])

    def _throughput(self, groups: Sequence[Ordered], u: int) -> float:
        """sum over groups of 1 / alpha_lb (samples per second), every group at micro-batch u;
        the largest over u bounds groups at any mix of sizes (device_bound)."""
        st = self.state if u == self.u else self.at(u)[0]
        inv = 0.0
        measured = bool(st.workload.measured)
        memo = self._group_throughput
        for g in groups:
            key = (g if isinstance(g, tuple) else tuple(g), u)
            v = memo.get(key)
            if v is None:
                d = list(g)
                if not measured:
                    f, b = self._inv_fwd_list, self._inv_bwd_list
                    a = 1.0 / float_sum([f[i] for i in d]) + 1.0 / float_sum([b[i] for i in d])
                else:
                    a = (float(st.layer_fwd_seconds[d].min(axis=0).sum())
                         + float(st.layer_bwd_seconds[d].min(axis=0).sum())) / len(d)
                v = memo[key] = 1.0 / a if a > 0 else math.inf
            inv += v
        return inv

    def scored(self) -> list[Scored]:
        """Every feasible structure scored so far, in scoring order."""
        return [s for s in self._seen.values() if s is not None]

    # ---- scoring ------------------------------------------------------------------------
    def score(self, s: Structure, shares: Sequence[int] | None = None, source: str = "",
              prune: bool = False, bound: float = math.inf) -> Scored | None:
        """Score a structure (exact integer shares unless given); None when infeasible, or
        (with prune) when a lower bound shows it cannot beat the incumbent, or when one shows
        its objective above `bound` (a caller's incumbent elsewhere: solve.classes)."""
        if not s:
            return None
        key = (s, None if shares is None else tuple(shares))
        if key in self._seen:
            return self._seen[key]
        if self.opt.max_groups is not None and len(s) > self.opt.max_groups:
            return None
        self.tries += 1
        gcs = [self.coeffs(*e) for e in s]
        m = len(gcs)
        us = [self.u_of(e) for e in s]
        if sum(us) > self.B or any(g.cap < u for g, u in zip(gcs, us)):
            self._seen[key] = None
            return None
        if self.best is None:
            self.held = max(self.held, int(min(float(self.B), float_sum([min(float(g.cap), self.B) for g in gcs]))))
        a_list = [g.alpha for g in gcs]
        b_list = [g.beta for g in gcs]
        best = self.best
        # z >= B / sum(1/alpha) and z >= max beta + u alpha: a bound before anything costly
        # (plain floats, the same values as numpy's)
        zlb = max(self.B / float_sum([1.0 / a for a in a_list]), max(b + u * a for a, b, u in zip(a_list, b_list, us)))
        if self.V * zlb > bound:        # its objective W (z + ...) + q b + qF >= V zlb: above the caller's bound
            return None
        if prune and best is not None:
            if self.V * zlb > best.objective:
                self.pruned_charged += 1
                return None
            if m > 1:       # before the cost coefficients and the exact sync: their floors
                ts_lb = sync_lower_bound(self._sync_floor, [e[0] for e in s], self._sync_memo)
                w_lb = self.w_floor([e[0] for e in s])
                if ts_lb > 0 and w_lb * (zlb + ts_lb) > best.objective:
                    self.pruned_charged += 1
                    return None
        cc = None
        if self._no_weights:    # every queue 0: the cost terms vanish (the same floats as below)
            W, q, qF, q_min = self.V, np.zeros(m), 0.0, 0.0
        elif self._energy_weight is not None:
            W, q = self._plain_weights(s, gcs)
            qF, q_min = 0.0, min(q)
        else:
            cc = cost_coeffs(self.state, gcs)
            W = self.V + float(self.Q @ cc.R)
            q = self.Q @ cc.e if len(self.Q) else np.zeros(m)
            qF = float(self.Q @ cc.F)
            q_min = float(q.min())
        if prune and best is not None:
            lb = W * zlb + q_min * self.B + qF
            if lb > best.objective:
                self.pruned_charged += 1
                return None
            if W * (zlb + self.sync(s)) + q_min * self.B + qF > best.objective:
                self.pruned_charged += 1
                return None
        self._seen[key] = None
        kappa, extra = self._risk_terms(s) if self.state.risk is not None else (0.0, 0.0)
        Wz = W * (1.0 + kappa) if kappa else W
        if shares is None and m == 1:      # solve_shares' one-group case: the whole batch when it fits
            if not (gcs[0].cap >= self.B and math.isfinite(a_list[0]) and a_list[0] > 0 and math.isfinite(b_list[0])
                    and math.isfinite(q[0]) and math.isfinite(W) and W >= 0 and self.B % us[0] == 0):
                return None
            b = [float(self.B)]
        elif shares is None:
            r = solve_shares(np.array(a_list), np.array(b_list), [g.cap for g in gcs], self.B,
                             us[0] if len(set(us)) == 1 else us, Wz, q, lp_bound=False)
            if r.status != "optimal":
                return None
            b = [float(x) for x in r.shares]
        else:
            given = np.asarray(shares, dtype=float)
            if len(given) != m or any(x > g.cap or x % u for x, g, u in zip(given, gcs, us)):
                return None
            b = given.tolist()
        self.count += 1
        z = max(a * x + c for a, x, c in zip(a_list, b, b_list))
        ts = self.sync(s)
        plan = Plan(tuple(Group(e[0], e[1], int(x), *e[2:]) for e, x in zip(s, b)))
        mig = 0.0
        if self.migration is not None:
            mig = self.migration.seconds(plan, self.state)
        qb = 0.0 if self._no_weights else float(q[0] * b[0]) if m == 1 else float(np.asarray(q) @ np.array(b))
        obj = W * ((z + ts) * (1.0 + kappa) + mig / max(self.opt.iterations_per_slot, 1) + extra) + qb + qF
        if self._caps is not None:
            obj += self._over_caps(cc if cc is not None else cost_coeffs(self.state, gcs),
                                   z + ts + mig / max(self.opt.iterations_per_slot, 1), b)
        sc = Scored(obj, z + ts, plan, s, mig, source)
        self._seen[key] = sc
        if self.opt.keep_candidates:
            self.pool.append(sc)
        if self.best is None or better(sc, self.best):
            if self.best is None or obj < self.best.objective * (1 - self.tuning.improve_rel):
                self.improved_at = self.tries
            self.best = sc
        return sc

    def no_plan(self) -> str:
        """Why a search that scored every structure it built ended without a plan: no group held
        the model with one micro-batch, or some did but none held the whole batch together."""
        st = self.state
        if self.held > 0:
            return (f"slot {st.t}: groups of available devices hold the model ({st.workload.name}) with one "
                    f"micro-batch, but none the search built holds the whole batch of {self.B} samples "
                    f"(at most {self.held} together)")
        return (f"slot {st.t}: no device or group of available devices can hold the model "
                f"({st.workload.name}) with one micro-batch")

    def _over_caps(self, cc: CostCoeffs, T: float, b: Sequence[float]) -> float:
        """SolveOptions.cap_weight times the budgets' worth by which c_k / Cbar_k (the structure's
        cost coefficients at batch time T seconds, migration's share included as online.charge
        adds it, and shares b) exceeds SolveOptions.caps."""
        caps, limits = self._caps
        return self.opt.cap_weight * float(np.maximum(cc.costs(T, b) / limits - caps, 0.0).sum())

    def _plain_weights(self, s: Structure, gcs: Sequence[GroupCoeffs]) -> tuple[float, list[float]]:
        """(W per second, q per sample of each group) where only money without egress and at
        most one energy budget weigh (Scorer._energy_weight): cost.costs.cost_coeffs' rows
        are then the idle rates R and one row of busy joules per sample, so q_g = Q_energy
        busy_g (every other row is 0: numpy's product Q e rounds once, as this does); W is
        V + Q R in numpy's own operations, kept per device order (it depends on nothing else)."""
        key = tuple(e[0] for e in s)
        W = self._W_memo.get(key)
        if W is None:
            W = self._W_memo[key] = self.V + float(self.Q @ idle_rates(self.state, [d for g in key for d in g]))
        w = self._energy_weight
        return W, [w * float(g.busy_j) for g in gcs]

    def _risk_terms(self, s: Structure) -> tuple[float, float]:
        """(kappa, extra seconds per iteration) of the preemption risk of a structure's devices
        (model.preemption), kept per device set."""
        devs = frozenset(d for e in s for d in e[0])
        got = self._risk_memo.get(devs)
        if got is None:
            got = self._risk_memo[devs] = self.state.risk.terms(devs, self.opt.iterations_per_slot)
        return got

    def score_groups(self, groups: Iterable[Ordered], source: str = "", prune: bool = True,
                     variant_cuts: bool = False) -> Scored | None:
        """Cut every ordered group (min-bottleneck, one micro-batch of memory) and score; groups
        that cannot hold the model are dropped. When a memory cap binds, re-cut those groups
        for a larger share and score again. Every group at the workload's u (other sizes:
        solve.micro_batch, which searches each size on its own state, and micro_batch_entries).
        variant_cuts: each 1F1B / recomputation variant's own cuts are tried whatever the
        number of devices (by default only up to SearchTuning.large_devices).

        A repeated call (the local search meets the same neighbours from one step to the next)
        returns what the first returned, charging the tries it would charge again, without
        re-walking the cuts and reliefs: every structure it scores is then known or still
        pruned (the incumbent only improves), so the answer and the work count are those of a
        full call. Only calls that ran without the budget or a deadline stopping them, and
        repeats that cannot reach the budget, take that path."""
        groups = list(groups)
        if prune and self.best is not None and (self.exhausted()
                                                or self.device_bound(groups) > self.best.objective):
            return None
        key = (tuple(groups), prune, variant_cuts)
        done = self._groups_done.get(key)
        if done is not None and self.deadline == math.inf and self.tries + done[1] < self.budget:
            self.tries += done[1]
            self.pruned_charged += done[1]
            return done[0]
        p0 = self.pruned_charged
        sc = self._score_groups(groups, source, prune, variant_cuts)
        if self.deadline == math.inf and self.tries < self.budget:
            self._groups_done[key] = (sc, self.pruned_charged - p0)
        return sc

    def _score_groups(self, groups: list[Ordered], source: str, prune: bool, variant_cuts: bool = False
                      ) -> Scored | None:
        s = []
        for d in groups:
            c = self.cuts(d)
            if c is None and len(d) > 1:      # no cuts hold one micro-batch in this order: another may
                d, c = self.fitting_order(d, None)
            e = (d, c) if c is not None else self.rescue_fit(d) if self.best is None else None
            if e is not None:
                s.append(e)
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
        if self.opt.schedules and not self.exhausted():
            base = s2 if s2 is not None else tuple(s)
            # a schedule on the cuts for one micro-batch may beat re-cutting for GPipe's memory
            # (whose re-cut groups then hold their share and get no schedule): both are tried in
            # slots of up to small_devices devices (above, the second try spent the budget the
            # local search needed: bench_budget seeds 57000+, 86.2% within 1% of 16x, from 93.1%)
            rich = s2 is not None and self.n_avail <= self.tuning.small_devices
            for b in (base, tuple(s)) if rich else (base,):
                s3 = relieve_by_schedule(self, b)
                if s3 is not None:
                    cand = self.score(s3, source=source + "+schedule", prune=prune)
                    if cand is not None and (sc is None or better(cand, sc)):
                        sc = cand
            # the variant cuts pay up to large_devices; above, their DPs (orders x variants per
            # group) spent the budget before the dp x pp shapes (Sailor's 32 GPUs: 65.4 s -> 72-86 s)
            s4 = None if self.exhausted() or (self.n_avail > self.tuning.large_devices and not variant_cuts) \
                else self.relieve_by_variant_cuts(base)
            relieved = [s4]
            if self.n_avail <= self.tuning.small_devices and not self._no_weights and not self.exhausted():
                # the fastest relief may not be the cheapest: recomputation buys memory with
                # compute that costs energy, so where budgets weigh, each variant's own is scored
                # (fuzzed slot 801195: 1F1B without recomputation, 2.4% below the search's)
                relieved += [self.relieve_by_variant_cuts(base, only=v) for v in self.variants]
            for x in dict.fromkeys(relieved):
                if x is not None and x != s3:
                    cand = self.score(x, source=source + "+schedule-cuts", prune=prune)
                    if cand is not None and (sc is None or better(cand, sc)):
                        sc = cand
        if self.n_avail <= self.tuning.small_devices and self.busy_weighted and not self.exhausted():
            sc = self.busy_recut(sc.structure if sc is not None and len(sc.structure) == len(s)
                                 else s2 if s2 is not None else tuple(s), sc, source, prune)
        if self.n_avail <= self.tuning.small_devices and not self.exhausted():
            sc = self.aligned(sc.structure if sc is not None and len(sc.structure) == len(s) else tuple(s),
                              sc, source, prune)
        return sc

    def aligned(self, s: Structure, best: Scored | None, source: str, prune: bool) -> Scored | None:
        """`best` or better: groups of s with the same number of stages (two or more), schedule
        and micro-batch size all given one cut set, each of their own cuts and frontier cut sets
        (for one micro-batch and, where `best` scored s, for their shares) in turn. The gradient
        sync all-reduces each layer over the devices holding it, so groups cut alike sync in
        as many rings as they have stages, where groups cut apart pay a ring per distinct
        holder set: with few micro-batches per group (where a group's time hardly depends on
        its cuts) that outweighs each group's own best cuts (fuzzed slot 801044: BERT on four
        K80s at 2 samples, two 2-stage groups cut alike at layer 5, 4.9% below one pipeline;
        their own cuts, 10 and 11, score 45% above it)."""
        classes: dict[tuple, list[int]] = {}
        for i, e in enumerate(s):
            if len(e[0]) >= 2:
                classes.setdefault((len(e[0]), *e[2:]), []).append(i)
        shares = [g.share for g in best.plan.groups] if best is not None and best.structure == s else None
        for members in classes.values():
            if len(members) < 2:
                continue
            cut_sets: list[tuple[int, ...]] = []
            for i in members:
                d, c, mb = s[i][0], s[i][1], entry_micro_batch(s[i])
                cut_sets += [c, *self.frontier(d, None, mb)]
                if shares is not None:
                    cut_sets += self.frontier(d, shares[i], mb)
            for c in dict.fromkeys(cut_sets):
                new = tuple((e[0], c, *e[2:]) if i in members else e for i, e in enumerate(s))
                if new == s or self.exhausted():
                    continue
                cand = self.score(new, source=source + "+aligned", prune=prune)
                if cand is not None and (best is None or better(cand, best)):
                    best = cand
        return best

    def relieve_by_variant_cuts(self, s: Structure, only: tuple[str, bool] | None = None) -> Structure | None:
        """(score_groups calls it in slots of up to SearchTuning.large_devices devices.) For each
        group whose memory cap is below the share it would get without caps: cuts
        found for each 1F1B / recomputation variant's own per-stage peak memory (stage j of a
        1F1B pipeline stashes u min(k - j, n) samples, so late stages may hold more layers
        than GPipe's cuts give them), over the group's orders (relief_orders, the reversed speed
        and memory orders: the least-stashing last stage on the fastest or richest device; above
        SearchTuning.small_devices devices, every variant in the group's first order, its speed
        order and the reverse of that, and only the variant that wins there in the other orders), and
        in slots of up to SearchTuning.small_devices devices the variant's frontier cut sets of
        the VARIANT_FRONTIERS best of those;
        the entry holding that share in the least time (alpha share + beta), else the largest
        cap; with `only`, among that (schedule, recompute) variant's entries. None when no cap
        binds or nothing changes."""
        def fix(e: tuple, w: int) -> tuple | None:
            gc = self.coeffs(*e)
            d = e[0]
            mb = entry_micro_batch(e)
            orders = self.relief_orders(d)
            orders += [tuple(reversed(speed_order(self.state, d))), tuple(reversed(memory_order(self.state, d)))]
            options = []

            def add(o: Ordered, c: tuple[int, ...], v: tuple[str, bool]) -> None:
                g = self.coeffs(o, c, *v, mb)
                if g.cap >= self.u_of(e):
                    options.append((g.cap < w, -min(g.cap, w), g.time(min(g.cap, w)),
                                    entry(o, c, *v, micro_batch=mb)))

            variants = self.variants if only is None else (only,)
            lazy = self.n_avail > self.tuning.small_devices and len(variants) > 1
            order_list = list(dict.fromkeys(orders))
            if lazy:   # every variant in the anchors: the first order, the speed order and its reverse
                fast = speed_order(self.state, d)
                anchors = list(dict.fromkeys([order_list[0], fast, tuple(reversed(fast))]))
                order_list = anchors + [o for o in order_list if o not in anchors]
            for i, o in enumerate(order_list):
                for v in variants:
                    c = self.cuts(o, w, mb, v)
                    if c is not None:
                        add(o, c, v)
                if self.exhausted():
                    break
                if lazy and options and i >= len(anchors) - 1:
                    # beyond small slots, the other orders only under the variant that won in
                    # the anchors (bench_budget seeds 96000+: the variants of every order were
                    # over half the work of deep slots at n = 8-16, which then scored 25
                    # structures in their budget). A 1F1B stage stashes more the earlier it
                    # runs, so which variant wins turns on which end the slow devices are at:
                    # on bench_fidelity's Metis-style cluster plain 1F1B wins only with the
                    # V100s first (8.892 s; 10.420 s when the first order alone decided)
                    variants = (min(options, key=lambda x: x[:3])[3][2:4],)
                    lazy = False
            if self.n_avail <= self.tuning.small_devices:
                # the variant's alpha-beta frontier of the best few (order, variant) pairs: with
                # few micro-batches a cut of larger alpha and smaller fill-and-drain is faster
                for x in sorted(options, key=lambda x: x[:3])[:VARIANT_FRONTIERS]:
                    o, v = x[3][0], (x[3][2], x[3][3])
                    for c in self.frontier(o, w, mb, v):
                        add(o, c, v)
            best = min(options, key=lambda x: x[:3], default=None)
            if best is not None and (-best[1] > min(gc.cap, w) or (not best[0] and best[2] < gc.time(w))):
                return best[3]
            return None
        return relieve_each(self, s, fix, ("variant-cuts", only), min_stages=2)

    def micro_batch_entries(self, e: tuple, share: int | None = None) -> list[tuple]:
        """The group of entry e at every other allowed micro-batch size: its devices with
        min-bottleneck cuts for one micro-batch and for `share` samples (samples), under
        GPipe and under the variants that lift its memory cap there (schedules.variant_entries)."""
        return self.size_entries(e[0], share, skip=self.u_of(e))

    def size_entries(self, d: Ordered, share: int | None = None, skip: int | None = None) -> list[tuple]:
        """The ordered group d at every allowed micro-batch size but `skip` (samples): the
        entries of micro_batch_entries."""
        out: list[tuple] = []
        for u in self.micro_batches:
            if u == skip:
                continue
            mb = self.mb(u)
            cut_sets = dict.fromkeys(c for c in (self.cuts(d, None, mb),
                                                 self.cuts(d, share, mb) if share and share > u else None)
                                     if c is not None)
            for c in cut_sets:
                out += [entry(d, c, micro_batch=mb), *variant_entries(self, d, c, mb)]
        return out

    def relief(self, kind: tuple, e: tuple, w: int, fix: Callable[[tuple, int], tuple | None]) -> tuple | None:
        """fix(e, w) of the memory relief `kind` (schedules.relieve_each), kept: a relief of one
        entry for one share reads only this slot's cut DPs and coefficients, so a later call
        (the local search meets the same group at the same share in many neighbours) returns
        the same entry. An answer that the work budget or deadline may have cut short
        (`exhausted` after the call) is not kept, so a raised budget recomputes it."""
        key = (kind, e, w)
        got = self._reliefs.get(key, _UNSEEN)
        if got is _UNSEEN:
            got = fix(e, w)
            if not self.exhausted():
                self._reliefs[key] = got
        return got

    def binding_wants(self, s: Structure) -> np.ndarray | None:
        """The shares (samples) the structure's groups would get if memory did not bind
        (wanted_shares), or None when no cap can bind (every cap holds the batch) or the
        groups' micro-batches alone exceed it: the preamble of every memory relief (kept per
        structure: score_groups' reliefs ask for the same structure up to three times)."""
        got = self._binding.get(s, _UNSEEN)
        if got is _UNSEEN:
            B = self.B
            got = self._binding[s] = None if (sum(self.u_of(e) for e in s) > B
                                              or all(self.coeffs(*e).cap >= B for e in s)) else self.wanted_shares(s)
        return got

    def wanted_shares(self, s: Structure) -> np.ndarray:
        """Shares (samples, multiples of each group's u) the structure would get if memory did
        not bind (kept per structure: the three memory reliefs of score_groups ask for them)."""
        got = self._wanted.get(s)
        if got is None:
            got = self._wanted[s] = self._wanted_shares(s)
            got.flags.writeable = False
        return got

    def _wanted_shares(self, s: Structure) -> np.ndarray:
        gcs = [self.coeffs(*e) for e in s]
        us = np.array([self.u_of(e) for e in s])
        lo = float(us[0]) if np.all(us == us[0]) else us.astype(float)
        b, _ = water_fill([g.alpha for g in gcs], [g.beta for g in gcs], float(self.B), lo=lo)
        return np.maximum(np.ceil(b / us - 1e-9), 1).astype(int) * us

    def rescue_fit(self, d: Ordered) -> tuple | None:
        """While the search has no plan at all: the entry of a group that holds one micro-batch
        in none of the orders fitting_order tries, from every order of its devices (groups of
        up to all_orders_up_to devices; else the three orders) under GPipe and then each
        (schedule, recompute) variant the search may choose (at one micro-batch only
        recomputation lowers a stage's peak). Without it an outside fuzz found 11 slots the
        search called infeasible (the small device must sit mid-pipeline; or recomputation is
        needed). None when no order and variant holds it."""
        if len(d) < 2:
            return None
        m = memory_order(self.state, d)
        orders = list(itertools.permutations(sorted(d))) if len(d) <= self.all_orders_up_to else \
            list(dict.fromkeys([d, m, tuple(reversed(m))]))
        for v in [("gpipe", False), *self.variants]:
            for o in orders:
                c = self.cuts(tuple(o), None, None, variant=v)
                if c is not None:
                    return entry(tuple(o), c, *v)
        return None

    def fitting_order(self, d: Ordered, mb: int | None) -> tuple[Ordered, tuple | None]:
        """(order, cuts) of the first of the memory-rich-first order and its reverse (the
        richest device at the start or at the end of the model) whose min-bottleneck cuts hold
        one micro-batch; (d, None) when neither does. Two cut DPs: a group that does not fit in
        the order it was built in is common when memory binds, so more orders would spend the
        work budget on groups that mostly cannot fit."""
        m = memory_order(self.state, d)
        for o in dict.fromkeys([m, tuple(reversed(m))]):
            if o == d:
                continue
            c = self.cuts(o, None, mb)
            if c is not None:
                return o, c
        return d, None

    def relieve_memory(self, s: Structure) -> Structure | None:
        """When a group's memory cap is below the share it would get without caps: re-cut it
        (trying the current, memory-rich-first and speed orders) to hold that share; None when
        no cap binds or nothing changes."""
        def fix(e: tuple, w: int) -> tuple | None:
            mb = entry_micro_batch(e)
            options = []
            for o in self.relief_orders(e[0]):
                c2 = self.cuts(o, w, mb)
                if c2 is not None:
                    options.append((self.coeffs(o, c2, "gpipe", False, mb).alpha, o, c2))
            return entry(*min(options)[1:], micro_batch=mb) if options else None
        return relieve_each(self, s, fix, ("memory",))


def param_room(state: SlotState) -> tuple[float, np.ndarray]:
    """(the bytes the whole model needs at one micro-batch, per device the most of them it can
    hold): a necessary condition for a group to hold the model, checked before its cut DP
    costs any work.

    Stage j of any schedule, with or without recomputation, holds at least k_opt P_l + u H_l
    bytes for each of its layers l at one micro-batch (model.memory: the live samples are at
    least u, and recomputation keeps u H_j during the backward). At TP degree t a device holds
    need_l(t) = k_opt P_l(t) + u H_l(t) >= rho_t need_l(1) with rho_t = min_l need_l(t) / need_l(1);
    so device d can take layers needing at most M_d / rho_t of the whole need_l(1). A group whose
    devices' sum is below sum_l need_l(1) cannot hold the model, whatever its cuts."""
    wl = state.workload
    need = wl.opt_factor * np.asarray(wl.param_bytes, dtype=float) + wl.micro_batch * np.asarray(wl.stash_bytes, float)
    room = np.array(state.memory_bytes, dtype=float)
    if state.tp is not None:
        pos = need > 0
        rho: dict[int, float] = {}
        for i, t in enumerate(state.tp):
            if t > 1 and pos.any():
                if t not in rho:
                    wt = state.workload_at(t)
                    need_t = wt.opt_factor * np.asarray(wt.param_bytes, float) + wt.micro_batch * np.asarray(wt.stash_bytes, float)
                    rho[t] = max(float(np.min(need_t[pos] / need[pos])), 1e-12)
                room[i] /= rho[t]
    return float(need.sum()), room * (1 + 1e-9)


def better(a: Scored, b: Scored) -> bool:
    """a strictly better than b: smaller objective, ties (1e-12 relative) by batch time."""
    tol = 1e-12 * max(1.0, abs(a.objective), abs(b.objective))
    if a.objective < b.objective - tol:
        return True
    return abs(a.objective - b.objective) <= tol and a.batch_time < b.batch_time * (1 - 1e-12)


def slot_result(state: SlotState, sc: Scorer, Q: np.ndarray, V: float, status: Status, message: str,
                t0: float) -> SlotResult:
    """The SlotResult of the Scorer's best plan (`status`, `message`; t0: perf_counter seconds
    at the start of the solve)."""
    best = sc.best
    if best is None:
        return SlotResult.infeasible(message, time.perf_counter() - t0, sc.count)
    if best.plan.validate(state):   # never expected: fall back to the best valid candidate
        valid = [s for s in sc.scored() if not s.plan.validate(state)]
        if not valid:
            return SlotResult.infeasible(f"slot {state.t}: no candidate passed Plan.validate",
                                         time.perf_counter() - t0, sc.count)
        best = min(valid, key=lambda s: (s.objective, s.batch_time))
        message += " (fell back: the best candidate failed Plan.validate)"
    plan = best.plan
    ev = sc.evaluation(plan)
    pool = tuple((s.plan, s.batch_time, tuple(sc.evaluation(s.plan).costs)) for s in sc.pool) \
        if sc.opt.keep_candidates else ()
    single = None
    if len(state.available_indices) == 1:       # its only plans (one per micro-batch size), without migration
        d = state.available_indices[0]
        alone = Scorer(state, Q, V, sc.opt, None, cache=sc.cache)
        objs = [alone.score((entry((d,), (state.workload.num_layers,), micro_batch=alone.mb(u)),))
                for u in alone.micro_batches]
        single = min((o.objective for o in objs if o is not None), default=math.inf)
    batch_time, how = simulated_note(plan, state, ev.batch_time)
    return SlotResult(plan, batch_time, ev.costs_at(batch_time), best.objective, status, message + how,
                      time.perf_counter() - t0, sc.count, best.migration, ev, pool,
                      slot_lower_bound(state, Q, V, single))
