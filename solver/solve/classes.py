"""The class-level search: uniform shapes over classes of interchangeable devices
(SolveOptions(classes="both"), the default, beside the device-level search; "auto" alone).

A slot whose available devices fall into a few large classes of interchangeable devices (a
cloud pool of a few GPU types on like servers: Sailor's 16 A100s and 16 V100s on 8 servers)
is searched the way Megatron-style planners search it, over device classes instead of
devices. A shape (`Shape`) is dp like pipelines, each through a chain of (class, degree t,
stages): one class, or several classes in some order, each at its own degree; every stage a
TP unit of t devices of one server; packed (a pipeline inside as few servers as it can) or
strided (a stage's dp replicas side by side, so its gradient ring stays inside a server). An
option is a shape at one micro-batch size and one (schedule, recomputation) variant. A plan
is one single-class option per class used, or one chain beside at most one single-class option of
each class outside it; its groups share the batch with exact integer shares. The
device-level search (solve.search) scores thousands of structures that differ only in which
of several like devices they use; here a slot has a few hundred to a few thousand options,
screened in closed form.

1. Classes (`device_classes`): devices are alike when every input of a plan's cost is the
   same number for both (solve.symmetry.plan_classes, without the previous plan: migration is
   charged exactly when scoring), every link's figures depend only on the two classes and on
   whether they share a server (solve.symmetry.symmetric_links). A class's servers may hold
   different numbers of its devices (a pool that lost a GPU): the class is then searched
   whole, its servers fullest first, with ragged shapes (`shapes`: pipelines one stage apart
   in depth, so that a pipeline can be a server), and split into parts of one per-server
   count each (`split_uneven`, while at most class_max classes result), and the better plan
   is kept (`solve_by_classes`). A TP unit is t devices of one server, t dividing the largest
   server's count; a server's leftover devices (fewer than t) stay idle at degree t. The
   search applies (`applies`) from
   SearchTuning.class_from_devices available devices, with at most class_max classes of at
   least class_min_size devices each (whole classes).
2. Options (`shapes`, `class_options`): per shape, size u and variant, the min-bottleneck cuts
   of one pipeline for one micro-batch and its coefficients, alpha (s per sample), beta (s) and
   cap (samples), on the unit state of the shape's degrees (the other devices alone). Its
   pipelines are twins, so one cut DP serves them all; at one micro-batch a 1F1B stage stashes
   one micro-batch, as under GPipe, so 1F1B takes GPipe's cuts with the same recomputation
   (the DP's problem is the same: tests/test_classes.py); cut DPs that memory rules out are
   skipped (class_options). A chain never gives a class that dominates another (at least as
   fast and with at least as much memory per device) a higher TP degree than the other could
   have taken (`class_shapes`): on 456 pools (bench_classes' three sets and 296 drawn apart)
   that rule changed no plan and took 1.2-1.8x off the class search's time.
3. Screen (`screen`): an option supplies S(T) = dp min(cap, max(0, (T - sync - beta) / alpha))
   samples within a batch time T, sync being its pipelines' own gradient sync (exact for the
   shape alone at its first cuts). Per class (and per set of classes of the chains) and device
   count, the options on the upper envelope of S at 48 batch times are kept; every combination
   of kept single-class options (a class may be left out), and every kept chain with every
   such combination of the classes outside it, gets the T* at
   which the supplies sum to B, by bisection, and the proxy objective (V + the used devices'
   queue-weighted prices and idle powers) T*. The sync across classes, busy energy, migration
   and integer shares are left to step 4.
4. Exact: the best SearchTuning.class_exact combinations by proxy, and the best
   class_exact_per_set of each set of classes used, are scored on the unit state of their TP
   configuration (solve.scoring.Scorer.score: exact integer shares, sync, migration, costs),
   then re-cut for memory where a cap binds (Scorer.relieve_memory,
   schedules.relieve_by_schedule); then a descent swaps one class's option at a time
   (`_swap_descent`; a chain stays). A combination (or relief) whose lower bound V z_lb
   (Scorer.score) is above the best objective scored so far among combinations of its kind
   (with a chain, or without) is left unscored: it can be neither the result nor the best
   of its kind, from which the descent starts. The best of these and of the fixed candidates
   (baselines, the cheapest plan, the previous plan: solve.incumbents) is the result.

Plans outside these shapes (two shapes in one class, TP degrees mixed inside one class's
stages, stages placed irregularly, a class's devices partly used) are not searched: on such
clusters the device-level search can be better (up to 9.6% on bench_classes' packaged
clusters), which is why the default (classes "both") runs both searches and keeps the better
plan. The result's lower bound is the least of the bounds of the TP configurations visited (as
for the device-level TP descent: a bound over those, not over every way of forming units),
and the message says how many options
and combinations were screened and scored. A time limit (SolveOptions.time_limit_s, one
deadline for the whole solve) stops it between shapes, between exactly scored combinations
(the screen's best is always scored) and in the descent, and the message says how far it got;
the device-level search of "both" then gets what is left. It takes 0.05-0.5 s on 32-48 GPUs
(benchmarks/bench_classes.py).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Sequence

import numpy as np

from ..model.state import SlotState
from ..model.units import Unit
from ..status import Status
from ..subproblems.cache import SlotCache
from .bounds import slot_lower_bound
from .incumbents import score_incumbents
from .options import SlotResult, SolveOptions, deadline_of, past
from .schedules import entry, relieve_by_schedule
from .scoring import Scored, Scorer, better as better_scored, slot_result
from .symmetry import plan_classes, symmetric_links
from .tp import better, physical_result, units_state

GRID = 48
"""Batch times (geometric) at which the screen compares a class's options' supplies."""


@dataclass(frozen=True)
class DeviceClass:
    """Interchangeable available devices: `members` (physical indices, by server then index),
    their kind and how many of them each server that holds any holds, in member order
    (`counts`; one count of all of them when the instance declares no servers)."""
    members: tuple[int, ...]
    kind: str
    counts: tuple[int, ...]
    pool: int = -1
    """The index of the like-device class this is a part of (-1: a whole class; split_uneven
    splits a class whose servers hold different numbers of its devices into parts of one
    count each)."""

    @property
    def name(self) -> str:
        """The kind, with the part's per-server count where the class is split."""
        return self.kind if self.pool < 0 else f"{self.kind} (servers of {self.counts[0]})"

    def degree_fits(self, t: int) -> bool:
        """Whether units of t devices of one server are formed: t divides the largest count."""
        return max(self.counts) % t == 0

    def units(self, t: int) -> list[Unit]:
        """Units of t consecutive members of one server, servers in order; a server's last
        count % t members are in none."""
        out, at = [], 0
        for n in self.counts:
            out += [self.members[at + i:at + i + t] for i in range(0, n - n % t, t)]
            at += n
        return out


@dataclass(frozen=True)
class Shape:
    """dp like pipelines, each through `chain`: (class, degree t, stages) in pipeline order,
    its stages TP units of t devices of that class. Packed: pipeline g takes its class's
    units g p .. g p + p - 1 (a pipeline inside as few servers as it can); strided: units
    j dp + g (the dp replicas of a stage side by side, so its gradient ring stays inside as
    few servers as it can)."""
    chain: tuple[tuple[int, int, int], ...]
    dp: int
    strided: bool
    extra: int = 0
    """Ragged shapes (one class whose servers hold different numbers of its devices): the
    first `extra` pipelines have one stage more than the chain says."""

    @cached_property
    def classes(self) -> tuple[int, ...]:
        return tuple(c for c, _, _ in self.chain)

    @cached_property
    def devices(self) -> int:
        return self.dp * sum(t * p for _, t, p in self.chain) + self.extra * self.chain[0][1]

    def weight(self, w_class: Sequence[float]) -> float:
        """The sum of its devices' weights, w_class[c] for each device of class c."""
        return self.dp * sum(w_class[c] * t * p for c, t, p in self.chain) \
            + self.extra * w_class[self.chain[0][0]] * self.chain[0][1]

    def degrees(self, k: int) -> tuple[int, ...]:
        """Each of k classes' TP degree in this shape (1 for classes it leaves out)."""
        deg = {c: t for c, t, _ in self.chain}
        return tuple(deg.get(c, 1) for c in range(k))

    def groups(self, index: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """The pipelines as device indices of a configuration's unit state, whose class c has
        its units at index[c] (_Configs.get)."""
        out = []
        for g in range(self.dp):
            d: list[int] = []
            for c, _, p in self.chain:
                q = p + (g < self.extra)
                d += [index[c][j * self.dp + g if self.strided else g * p + min(g, self.extra) + j]
                      for j in range(q)]
            out.append(tuple(d))
        return out


@dataclass(frozen=True)
class Option:
    """A shape at micro-batch u (samples) under (schedule, recompute): cuts of one pipeline
    (for one micro-batch), its alpha (s per sample), beta (s) and cap (samples), and sync: the
    gradient sync (s) of the shape's pipelines alone, at the cuts of its first option. A
    ragged shape's shorter pipelines have their own (cuts, alpha, beta, cap) in `short`."""
    shape: Shape
    u: int
    schedule: str
    recompute: bool
    cuts: tuple[int, ...]
    alpha: float
    beta: float
    cap: float
    sync: float = 0.0
    short: tuple[tuple[int, ...], float, float, float] | None = None

    def rows(self) -> list[tuple[int, float, float, float]]:
        """(pipelines, alpha, beta, cap) of its pipelines alike."""
        sh = self.shape
        if self.short is None:
            return [(sh.dp, self.alpha, self.beta, self.cap)]
        return [(sh.extra, self.alpha, self.beta, self.cap), (sh.dp - sh.extra, *self.short[1:])]

    def cuts_of(self, g: int) -> tuple[int, ...]:
        """The cuts of pipeline g (Shape.groups' order)."""
        return self.cuts if self.short is None or g < self.shape.extra else self.short[0]

    def solo(self, B: int) -> float:
        """Seconds its pipelines would take the whole batch in, caps aside (a ranking key)."""
        rows = self.rows()
        return self.sync + max(r[2] for r in rows) + B / sum(r[0] / r[1] for r in rows)

    @property
    def dp(self) -> int:
        return self.shape.dp

    @property
    def devices(self) -> int:
        return self.shape.devices


def device_classes(state: SlotState, cache: SlotCache, most: int | None = None, least: int = 1
                   ) -> list[DeviceClass] | None:
    """The available devices' classes (module doc, step 1), largest first, or None where the
    slot has none (a device unlike every other, asymmetric links), or more than `most`
    classes, or one of fewer than `least` devices (checked before the links)."""
    avail = list(state.available_indices)
    if len(avail) < 2:
        return None
    cls = plan_classes(state, cache)
    by_cls: dict[int, list[int]] = {}
    for d in avail:
        by_cls.setdefault(cls[d], []).append(d)
    if (most is not None and len(by_cls) > most) or min(len(v) for v in by_cls.values()) < least \
            or not symmetric_links(state, cls):
        return None
    server = None if state.network is None else [int(s) for s in state.network.server]
    out = []
    for members in by_cls.values():
        if server is None:
            out.append(DeviceClass(tuple(members), state.devices[members[0]].kind, (len(members),), -1))
            continue
        per: dict[int, list[int]] = {}
        for d in members:
            per.setdefault(server[d], []).append(d)
        servers = sorted(per, key=lambda s: (-len(per[s]), s))      # the fullest first (ragged shapes)
        ordered = tuple(d for s in servers for d in per[s])
        out.append(DeviceClass(ordered, state.devices[members[0]].kind, tuple(len(per[s]) for s in servers), -1))
    return sorted(out, key=lambda c: (-len(c.members), c.members))


def split_uneven(classes: Sequence[DeviceClass], most: int) -> list[DeviceClass]:
    """Each class whose servers hold different numbers of its devices split into parts of one
    count each (largest class first, while there are at most `most` classes), so that each
    part takes its own option (Sailor's 32 GPUs with 3 devices preempted: 76.0 s, where the
    whole classes' ragged shapes reach 83.9 s; the device-level search 74.6 s). A part keeps
    the class's index as its `pool` (-1: not split)."""
    out = list(classes)
    for i, c in enumerate(classes):
        parts: dict[int, list[int]] = {}
        at = 0
        for n in c.counts:
            parts.setdefault(n, []).extend(c.members[at:at + n])
            at += n
        if len(parts) == 1 or len(out) + len(parts) - 1 > most:
            continue
        out.remove(c)
        out += [DeviceClass(tuple(m), c.kind, tuple(n for _ in range(len(m) // n)), i) for n, m in parts.items()]
    return sorted(out, key=lambda c: (-len(c.members), c.members))


def applies(classes: Sequence[DeviceClass] | None, n: int, options: SolveOptions) -> bool:
    """Whether the class-level search runs on a slot of n available devices (module doc)."""
    tune = options.tuning
    return classes is not None and n >= tune.class_from_devices and len(classes) <= tune.class_max \
        and all(len(c.members) >= tune.class_min_size for c in classes)


def _units_of(state: SlotState, classes: Sequence[DeviceClass], degrees: Sequence[int]) -> list[Unit]:
    """Every device's unit under one degree per class (degree 1: alone), each class's units in
    its order, then the other devices alone."""
    units: list[Unit] = []
    for c, t in zip(classes, degrees):
        units += c.units(t)
    used = {d for u in units for d in u}
    return units + [(i,) for i in range(state.n) if i not in used]


class _Configs:
    """Unit states, their caches and Scorers by TP configuration (one degree per class)."""

    def __init__(self, state: SlotState, classes: Sequence[DeviceClass], Q: np.ndarray, V: float,
                 opt: SolveOptions, previous_plan, cache: SlotCache) -> None:
        self.state, self.classes, self.Q, self.V, self.opt, self.prev, self.cache = \
            state, classes, Q, V, opt, previous_plan, cache
        self.known: dict[tuple[int, ...], tuple[SlotState, Scorer, list[list[int]]]] = {}

    def get(self, degrees: tuple[int, ...]) -> tuple[SlotState, Scorer, list[list[int]]]:
        """(unit state, its Scorer, each class's units as device indices of the unit state,
        in the class's order) of `degrees`. At degree 1 everywhere the unit state is the
        physical state (tp.units_state), whose devices keep their physical indices."""
        if degrees not in self.known:
            units = _units_of(self.state, self.classes, degrees)
            ust, ucache = units_state(self.state, units, self.cache)
            physical = ust.members is None
            index, at = [], 0
            for c, t in zip(self.classes, degrees):
                mine = c.units(t)
                index.append([u[0] for u in mine] if physical else list(range(at, at + len(mine))))
                at += len(mine)
            self.known[degrees] = (ust, Scorer(ust, self.Q, self.V, self.opt, self.prev, cache=ucache), index)
        return self.known[degrees]


def _inverted(classes: Sequence[DeviceClass], subset: Sequence[int], degs: Sequence[int], memory: Sequence[float],
              seconds: Sequence[float]) -> bool:
    """Whether a class of the chain that dominates another (at least as fast, seconds per
    sample of the whole model on one device, and at least as much memory, one of them
    strictly) has a higher TP degree than the other, which could have had that degree."""
    for (a, ta), (b, tb) in itertools.permutations(zip(subset, degs), 2):
        if ta > tb and seconds[a] <= seconds[b] and memory[a] >= memory[b] \
                and (seconds[a] < seconds[b] or memory[a] > memory[b]) and classes[b].degree_fits(ta):
            return True
    return False


def shapes(classes: Sequence[DeviceClass], degrees: Sequence[int], L: int, memory: Sequence[float],
           mixed: bool = True, seconds: Sequence[float] | None = None) -> list[Shape]:
    """Every shape (module doc, step 2) of at most L stages (the class search passes the layers
    and SearchTuning.max_depth, 16, the less). One class's: its degrees t dividing its largest
    server's count (DeviceClass.degree_fits); dp = 1 .. units pipelines of p = min(units // dp,
    L) units, the deepest for each dp; in a class whose servers hold different numbers of its
    devices, where dp does not divide the units, ragged instead: dp pipelines of which
    units % dp have one stage more, so that with the class's servers in decreasing count a
    pipeline can be a server. Then chains through each set of two or more classes, at a TP
    degree each (`mixed`, SearchTuning.class_mixed_degrees; else one degree for the chain;
    with `seconds`, none where a dominating class has the higher degree: `_inverted`), in
    every order of up to 3 classes, else in decreasing and increasing order of memory per
    device (`memory`, bytes), dp dividing every class's units at its degree, each class's
    p_c = units_c / dp. Packed, and strided where dp > 1."""
    out: list[Shape] = []

    def add(chain: tuple[tuple[int, int, int], ...], dp: int, extra: int = 0) -> None:
        out.append(Shape(chain, dp, False, extra))
        if dp > 1 and any(p > 1 for _, _, p in chain):
            out.append(Shape(chain, dp, True, extra))

    for ci, c in enumerate(classes):
        uneven = len(set(c.counts)) > 1
        for t in degrees:
            if c.degree_fits(t):
                units = len(c.units(t))
                for dp in range(1, units + 1):
                    p = min(units // dp, L)
                    if uneven and units % dp and units // dp < L:
                        add(((ci, t, units // dp),), dp, units % dp)
                    elif dp == units // p:
                        add(((ci, t, p),), dp)
    for k in range(2, len(classes) + 1):
        for subset in itertools.combinations(range(len(classes)), k):
            by_memory = sorted(subset, key=lambda ci: (-memory[ci], ci))
            fitting = [[t for t in degrees if classes[ci].degree_fits(t)] for ci in subset]
            for degs in itertools.product(*fitting) if mixed else ((t,) * k for t in degrees):
                if not all(t in ts for t, ts in zip(degs, fitting)) \
                        or (seconds is not None and _inverted(classes, subset, degs, memory, seconds)):
                    continue
                deg = dict(zip(subset, degs))
                units = {ci: len(classes[ci].units(deg[ci])) for ci in subset}
                orders = itertools.permutations(subset) if len(subset) <= 3 else \
                    dict.fromkeys([tuple(by_memory), tuple(reversed(by_memory))])
                for order in orders:
                    for dp in range(1, min(units.values()) + 1):
                        if any(x % dp for x in units.values()):
                            continue
                        chain = tuple((ci, deg[ci], units[ci] // dp) for ci in order)
                        if sum(p for _, _, p in chain) <= L:
                            add(chain, dp)
    return out


def class_shapes(state: SlotState, classes: Sequence[DeviceClass], degrees: Sequence[int],
                 opt: SolveOptions) -> list[Shape]:
    """shapes() of the class search on a slot: at most min(L, SearchTuning.max_depth) stages,
    chains ordered by each class's memory (bytes per device), mixed degrees as the tuning
    says, none where a class that dominates another has the higher degree (`_inverted`, by
    the seconds per sample of the whole model on one device of each class)."""
    L = state.workload.num_layers
    memory = [float(state.devices[c.members[0]].memory_bytes) for c in classes]
    seconds = [float(state.fwd_prefix[c.members[0], L] + state.bwd_prefix[c.members[0], L]) for c in classes]
    return shapes(classes, degrees, min(L, opt.tuning.max_depth), memory, opt.tuning.class_mixed_degrees, seconds)


def class_options(configs: _Configs, degrees: Sequence[int], deadline: float = math.inf
                  ) -> tuple[list[Option], int]:
    """Every shape's options (module doc, step 2). Memory at one micro-batch depends on a
    pipeline's devices in order, not on its links, and is monotone in the depth and in the
    micro-batch size (fewer devices hold more layers each, a larger size stashes more per
    micro-batch): so shapes with the same chain of (class, degree) and more pipelines (fewer
    stages of each class) are skipped at a size, and recomputation choice, once one with fewer
    did not fit there, and at every larger size once the first did not. A strided shape takes
    its packed twin's cuts (the same devices in the same order: only the links differ, which
    the exact scoring prices; its coefficients are its own). Returns the options and how many
    of the shapes were visited: all of them, unless `deadline` (perf_counter seconds) passed
    first (SolveOptions.time_limit_s)."""
    state, classes = configs.state, configs.classes
    k = len(classes)
    out: list[Option] = []
    failed: dict[tuple, int] = {}       # (chain's classes and degrees, u, rc) -> least dp that did not fit
    packed_cuts: dict[tuple, tuple] = {}     # (chain, dp, u, rc) -> the packed shape's cuts, its shorter pipelines'
    visited = 0
    for shape in class_shapes(state, classes, degrees, configs.opt):
        if past(deadline):
            break
        visited += 1
        try:
            ust, sc, index = configs.get(shape.degrees(k))
        except ValueError:              # units that cannot be formed here (no servers declared)
            continue
        variants = sc.variants if configs.opt.schedules else ()
        schedules = {rc: [x for x, r in (("gpipe", False), *variants) if r == rc] for rc in (False, True)}
        family = tuple((c, t) for c, t, _ in shape.chain)
        groups = shape.groups(index)
        d, d2 = groups[0], (groups[-1] if shape.extra else None)     # d2: a shorter pipeline of a ragged shape
        mine: list[dict] = []          # each option's fields but sync (known once the first is)
        for u in sorted(sc.micro_batches):
            mb = sc.mb(u)
            for rc in (False, True):
                if not schedules[rc] or any(failed.get((family, v, rc), math.inf) <= shape.dp
                                            for v in sc.micro_batches if v <= u):
                    continue
                twin = (shape.chain, shape.dp, u, rc)
                if shape.strided and twin in packed_cuts:
                    cuts, cuts2 = packed_cuts[twin]
                else:
                    cuts = sc.cuts(d, None, mb, ("gpipe", rc))
                    cuts2 = None if d2 is None or cuts is None else sc.cuts(d2, None, mb, ("gpipe", rc))
                packed_cuts.setdefault(twin, (cuts, cuts2))
                if cuts is None or (d2 is not None and cuts2 is None):
                    key = (family, u, rc)
                    failed[key] = min(failed.get(key, math.inf), shape.dp)
                    continue
                for schedule in schedules[rc]:
                    gc = sc.coeffs(d, cuts, schedule, rc, mb)
                    gc2 = gc if d2 is None else sc.coeffs(d2, cuts2, schedule, rc, mb)
                    if all(math.isfinite(g.alpha) and g.alpha > 0 and g.cap >= u for g in (gc, gc2)):
                        short = None if d2 is None else (cuts2, float(gc2.alpha), float(gc2.beta),
                                                         float(min(gc2.cap, sc.B)))
                        mine.append(dict(shape=shape, u=u, schedule=schedule, recompute=rc, cuts=cuts,
                                         alpha=float(gc.alpha), beta=float(gc.beta),
                                         cap=float(min(gc.cap, sc.B)), short=short))
        if mine:
            first = Option(**mine[0])
            ts = sc.sync(tuple((g, first.cuts_of(i)) for i, g in enumerate(groups))) if len(groups) > 1 else 0.0
            out += [Option(**o, sync=ts) for o in mine]
    return out, visited


def _supply(opts: Sequence[Option], T: np.ndarray) -> np.ndarray:
    """(options, times) samples each option's pipelines take in batch time T (module doc)."""
    owner, n, a, b, cap = _row_arrays([(o,) for o in opts])
    out = np.zeros((len(opts), len(T)))
    per_row = n[:, None] * np.minimum(cap[:, None], np.maximum(0.0, (T[None, :] - b[:, None]) / a[:, None]))
    np.add.at(out, owner, per_row)
    return out


def _row_arrays(combos: Sequence[Sequence[Option]]) -> tuple[np.ndarray, ...]:
    """(combination index, pipelines, alpha, beta + sync, cap) per row of Option.rows over
    the combinations' options."""
    rows = [(i, n, a, b + o.sync, cap) for i, x in enumerate(combos) for o in x for n, a, b, cap in o.rows()]
    owner, n, a, b, cap = (np.array(col) for col in zip(*rows))
    return owner.astype(int), n.astype(float), a.astype(float), b.astype(float), cap.astype(float)


Combination = tuple[Option, ...]
"""Options of disjoint classes: at most one single-class option per class, or one chain first
and at most one single-class option of each class outside it."""


def screen(options: Sequence[Option], n_classes: int, B: int, V: float, w_dev: Sequence[float],
           classes: Sequence[DeviceClass], keep: int, per_class_set: int) -> list[Combination]:
    """The `keep` combinations of least proxy objective (module doc, step 3), and the
    `per_class_set` best of each set of classes used (apart by the classes of their chain, if
    any), best first; those that cannot take the batch are left out."""
    if not options:
        return []
    lo = min(b + o.sync + o.u * a for o in options for _, a, b, _ in o.rows())
    hi = max(b + o.sync + B * a for o in options for _, a, b, _ in o.rows())
    T = np.geomspace(max(lo, 1e-12), max(hi, lo * 2, 1e-9), GRID)

    def envelope(mine: list[Option]) -> list[Option]:
        """Per device count, the options of largest supply at some batch time of the grid."""
        chosen: dict[int, Option] = {}
        by_count: dict[int, list[int]] = {}
        for i, o in enumerate(mine):
            by_count.setdefault(o.devices, []).append(i)
        S = _supply(mine, T)
        for idx in by_count.values():
            for j in set(np.argmax(S[idx], axis=0).tolist()):
                chosen[idx[j]] = mine[idx[j]]
        return list(chosen.values())

    kept: list[list[Option | None]] = []
    for ci in range(n_classes):
        mine = [o for o in options if o.shape.classes == (ci,)]
        kept.append([None, *(envelope(mine) if mine else [])])
    combos: list[Combination] = [tuple(o for o in x if o is not None) for x in itertools.product(*kept)]
    combos = [x for x in combos if x]
    chains: dict[tuple[int, ...], list[Option]] = {}
    for o in options:
        if len(o.shape.chain) > 1:
            chains.setdefault(tuple(sorted(o.shape.classes)), []).append(o)
    for used, mine in chains.items():      # a chain, with any kept single-class options of the other classes
        rest = [kept[ci] if ci not in used else [None] for ci in range(n_classes)]
        for o in envelope(mine):
            combos += [(o, *(x for x in others if x is not None)) for others in itertools.product(*rest)]
    if not combos:
        return []
    row, dp, a, b, cap = _row_arrays(combos)
    ok = np.bincount(row, weights=dp * cap, minlength=len(combos)) >= B
    lo_t = np.zeros(len(combos))
    hi_t = np.full(len(combos), hi * 2 + 1.0)
    for _ in range(60):
        mid = 0.5 * (lo_t + hi_t)
        got = np.bincount(row, weights=dp * np.minimum(cap, np.maximum(0.0, (mid[row] - b) / a)), minlength=len(combos))
        enough = got >= B
        hi_t = np.where(enough, mid, hi_t)
        lo_t = np.where(enough, lo_t, mid)
    w_class = [float(np.mean([w_dev[d] for d in c.members])) for c in classes]
    weight = np.array([V + sum(o.shape.weight(w_class) for o in x) for x in combos])
    proxy = np.where(ok, weight * hi_t, np.inf)
    order = [i for i in np.argsort(proxy, kind="stable").tolist() if np.isfinite(proxy[i])]
    chosen_ids = set(order[:keep])
    per_set: dict[tuple, int] = {}
    for i in order:
        first = combos[i][0].shape
        used = (tuple(sorted(c for o in combos[i] for c in o.shape.classes)),
                tuple(sorted(first.classes)) if len(first.chain) > 1 else ())
        if per_set.get(used, 0) < per_class_set:
            per_set[used] = per_set.get(used, 0) + 1
            chosen_ids.add(i)
    return [combos[i] for i in order if i in chosen_ids]


def _structure(sc: Scorer, index: Sequence[Sequence[int]], combo: Combination) -> tuple:
    """The structure of a combination on its configuration's unit state."""
    return tuple(entry(d, o.cuts_of(g), o.schedule, o.recompute, sc.mb(o.u))
                 for o in combo for g, d in enumerate(o.shape.groups(index)))


def _score_combo(sc: Scorer, s: tuple, source: str, bound: float = math.inf) -> Scored | None:
    """Score s, then its memory reliefs where a cap binds (the best of them); each left
    unscored where its own lower bound (Scorer.score) is above `bound`, so that the result is
    exact whenever the best of them is below `bound`."""
    best = sc.score(s, source=source, bound=bound)
    fixes = [("+mem", sc.relieve_memory)]
    if sc.opt.schedules:
        fixes.append(("+schedule", lambda x: relieve_by_schedule(sc, x)))
    for how, fix in fixes:
        s2 = fix(s)
        if s2 is not None:
            got = sc.score(s2, source=source + how, bound=bound)
            if got is not None and (best is None or better_scored(got, best)):
                best = got
    return best


def swap_candidates(options: Sequence[Option], swaps: int, B: int) -> dict[int, list[Option]]:
    """Per class, its best `swaps` single-class shapes, each at its best micro-batch size and
    schedule by the time it would take the whole batch alone, caps aside (Option.solo)."""
    per_class: dict[int, list[Option]] = {}
    for o in sorted((o for o in options if len(o.shape.chain) == 1), key=lambda o: o.solo(B)):
        mine = per_class.setdefault(o.shape.chain[0][0], [])
        if len(mine) < swaps and all(x.shape != o.shape for x in mine):
            mine.append(o)
    return per_class


def _swap_descent(exact, scored: dict, per_class: dict[int, list[Option]], k: int,
                  chained: bool = False, deadline: float = math.inf) -> None:
    """From the best exactly scored combination, replace one class's single-class option by
    each of that class's candidates (`per_class`: swap_candidates), add the class where it is
    left out, or leave it out (a chain stays as it is); keep the first change that lowers the exact
    objective; until none does. Among combinations without a chain, or (chained) with one: a
    chain over every class leaves nothing to swap, and the best single-class combination must
    still get its descent. Stops once `deadline` has passed. The screen leaves out the sync
    between classes, so its ranking of a class's options beside other classes can be wrong (on
    A100 + V100 + GH-96 GPT-Neo-2.7 servers the best combination of the screen was 5.9% above
    this descent's)."""
    while not past(deadline):
        live = [(x, v) for x, v in scored.items() if v is not None and (len(x[0].shape.chain) > 1) == chained]
        if not live:
            return
        best_combo, best = min(live, key=lambda kv: (kv[1].objective, kv[1].batch_time))
        chain = best_combo[:1] if len(best_combo[0].shape.chain) > 1 else ()
        by_class = {o.shape.chain[0][0]: o for o in best_combo[len(chain):]}
        fixed = set(chain[0].shape.classes) if chain else set()
        improved = False
        for c in range(k):
            if c in fixed:
                continue
            cands: list[Option | None] = [None] if c in by_class and (len(by_class) > 1 or chain) else []
            cands += [o for o in per_class.get(c, []) if o is not by_class.get(c)]
            for o in cands:
                trial = dict(by_class)
                if o is None:
                    del trial[c]
                else:
                    trial[c] = o
                got = exact(chain + tuple(trial[x] for x in sorted(trial)))
                if got is not None and better_scored(got, best):
                    improved = True
                    break
            if improved:
                break
        if not improved:
            return


def describe_option(o: Option, classes: Sequence[DeviceClass]) -> str:
    """'V100-SXM2-16GB dp4 pp4 tp1 u1 1f1b' or 'dp4 pp(4 V100-SXM2-16GB + 4 T4) tp1 u4 gpipe strided'."""
    sh = o.shape
    how = o.schedule + (" rc" if o.recompute else "") + (" strided" if sh.strided else "")
    t = sh.chain[0][1]
    if len(sh.chain) == 1:
        c, _, p = sh.chain[0]
        pp = f"pp{p}" if not sh.extra else f"pp{p + 1} x{sh.extra} + pp{p} x{sh.dp - sh.extra}"
        return f"{classes[c].name} dp{sh.dp} {pp} tp{t} u{o.u} {how}"
    if len({x for _, x, _ in sh.chain}) > 1:
        stages = " + ".join(f"{p} {classes[c].name} tp{x}" for c, x, p in sh.chain)
        return f"dp{sh.dp} pp({stages}) u{o.u} {how}"
    stages = " + ".join(f"{p} {classes[c].name}" for c, _, p in sh.chain)
    return f"dp{sh.dp} pp({stages}) tp{t} u{o.u} {how}"


def solve_by_classes(state: SlotState, classes: Sequence[DeviceClass], Q: np.ndarray, V: float,
                     previous_plan, opt: SolveOptions, cache: SlotCache, t0: float) -> SlotResult | None:
    """The class-level search (module doc); a class in no shape that holds the model is left
    out. Where a class's servers hold different numbers of its devices, the search runs on the
    whole classes (ragged shapes) and on their parts (split_uneven), and the better plan is
    kept, with the lesser lower bound: each is better on some preempted pools
    (bench_classes --lost). None when no combination has a plan: the caller then runs the
    device-level search and says so."""
    res = _solve_on(state, classes, Q, V, previous_plan, opt, cache, t0)
    parts = split_uneven(classes, opt.tuning.class_max)
    if len(parts) == len(classes):
        return res
    by_parts = _solve_on(state, parts, Q, V, previous_plan, opt, cache, t0)
    if by_parts is None or res is None:
        return res or by_parts
    lb = min(res.lower_bound, by_parts.lower_bound)
    if better(by_parts, res):
        return replace(by_parts, lower_bound=lb, solve_time=time.perf_counter() - t0,
                       message=f"{by_parts.message}; on the whole classes {res.objective:.6g}")
    return replace(res, lower_bound=lb, solve_time=time.perf_counter() - t0,
                   message=f"{res.message}; on the classes split by servers' counts {by_parts.objective:.6g}")


def _solve_on(state: SlotState, classes: Sequence[DeviceClass], Q: np.ndarray, V: float,
              previous_plan, opt: SolveOptions, cache: SlotCache, t0: float) -> SlotResult | None:
    """solve_by_classes on one list of classes."""
    degrees = tuple(sorted({1, *opt.tp_degrees}))
    deadline = deadline_of(opt, t0)
    configs = _Configs(state, classes, Q, V, opt, previous_plan if opt.replan else None, cache)
    options, visited = class_options(configs, degrees, deadline)
    _, sc0, _ = configs.get(tuple(1 for _ in classes))
    combos = screen(options, len(classes), sc0.B, V, sc0._w_list, classes, opt.tuning.class_exact,
                    opt.tuning.class_exact_per_set)
    best: SlotResult | None = None
    bounds = [slot_lower_bound(state, Q, V)]
    k = len(classes)
    scored: dict[Combination, Scored | None] = {}

    kind_best = {False: math.inf, True: math.inf}      # least objective scored, without / with a chain

    def exact(combo: Combination) -> Scored | None:
        """The combination scored exactly; left unscored (None) where its lower bound is above
        the best of its kind so far, which it then cannot beat (nor become its kind's best,
        from which the swap descent starts)."""
        if combo not in scored:
            degs = [1] * k
            for o in combo:
                for c, t, _ in o.shape.chain:
                    degs[c] = t
            ust, sc, index = configs.get(tuple(degs))
            kind = len(combo[0].shape.chain) > 1
            got = scored[combo] = _score_combo(sc, _structure(sc, index, combo),
                                               " + ".join(describe_option(o, classes) for o in combo), kind_best[kind])
            if got is not None:
                kind_best[kind] = min(kind_best[kind], got.objective)
        return scored[combo]

    for i, combo in enumerate(combos):
        if i and past(deadline):        # the screen's best is always scored
            break
        exact(combo)
    per_class = swap_candidates(options, opt.tuning.class_swaps, sc0.B)
    for chained in (False, True):
        _swap_descent(exact, scored, per_class, k, chained, deadline)
    # the fixed candidates on the physical slot, then each configuration's best
    phys = Scorer(state, Q, V, opt, previous_plan, cache=cache)
    score_incumbents(state, phys, Q, previous_plan, recut_previous=False)
    cut = ""
    if past(deadline):
        n_shapes = len(class_shapes(state, classes, degrees, opt))
        cut = (f" (time limit {opt.time_limit_s:g} s: {visited} of {n_shapes} shapes visited, "
               f"{sum(x in scored for x in combos)} of {len(combos)} screened combinations scored)")
    for degs, (ust, sc, _) in configs.known.items():
        if sc.best is None:
            continue
        bounds.append(slot_lower_bound(ust, Q, V))
        res = physical_result(slot_result(ust, sc, Q, V, Status.FEASIBLE, f"best: {sc.best.source}", t0), ust)
        if better(res, best):
            best = res
    if best is None and (not cut or phys.best is None):     # no combination has a plan (in the time given)
        return None
    if phys.best is not None:
        res = slot_result(state, phys, Q, V, Status.FEASIBLE, f"best: {phys.best.source} (a fixed candidate)", t0)
        if better(res, best):
            best = res
    finite = [b for b in bounds if not math.isnan(b)]
    lb = min(finite) if finite else best.lower_bound
    msg = (f"class-level search over {len(classes)} device classes "
           f"({', '.join(f'{len(c.members)} {c.name}' for c in classes)}): {len(options)} options of uniform "
           f"shapes, {len(scored)} combinations scored exactly{cut}; {best.message}; lower bound over the TP "
           f"configurations visited")
    return SlotResult(best.plan, best.batch_time, best.costs, best.objective, best.status, msg,
                      time.perf_counter() - t0, sum(sc.count for _, sc, _ in configs.known.values()) + phys.count,
                      best.migration_time, best.evaluation, best.candidate_pool, lb)
