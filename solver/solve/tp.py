"""Choosing tensor-parallel degrees: the per-slot search (and the oracle) over TP units.

A TP configuration gives each device kind one degree t (SolveOptions.tp_degrees), and may give
a (kind, server) pool a degree of its own: inside every server, the available devices of that
kind, in index order, form units of t devices (the remainder stays alone); where a pool's
devices differ in speed (a straggler, a trace's speed factors), the configuration is also tried
with its units matched by speed (`speed_matched`), since a unit computes at its slowest
device's pace (fuzzed slot 801157: the two slow K80s of three paired, the fast one alone,
2.6% below index order's pair), and in small slots with only some of the pool's devices in
units, the slowest (fuzzed slot 803196: of four V100s, the two slowest as one TP stage in front
of a pipeline through the other two; the search, pairing all four or none, was 10.3% above
it). The search runs unchanged on the configuration's unit state (model.units), its plan is read
back over physical devices (Group.tp_peers), and the best configuration wins. Configurations are
visited by coordinate descent from the best of degree 1 everywhere and "every kind at degree t"
for each t: each kind in turn tries each other degree with the others fixed, keeping a change
when the objective falls (one kind at a time from degree 1 misses plans where two kinds move
together, such as one pipeline through A100s and V100s both at tp 4); then, in slots with few
pools (SearchTuning.tp_pool_steps_up_to), each pool in turn tries each degree of its own. A trial
whose lower bound is no better than the incumbent's objective is skipped. Trials run at one
micro-batch size on SearchTuning.tp_explore of the work budget (solve.search._search_tp), the
winner then at every size on the full budget: |kinds| (|degrees| - 1) + |degrees| searches (plus
(|degrees| - 1) per pool with the pool steps), each on fewer devices than the slot.
The oracle (n <= 6) instead tries every partition of each server's same-kind devices into
units of allowed sizes.

TP is considered only where the instance declares servers (a TP stage lies inside one server)
and some server holds two or more available devices of one kind; elsewhere the solve is the
degree-1 one, unchanged.

Degree 1 is always searched, whatever SolveOptions.tp_degrees holds: the descent starts from
degree 1 everywhere, a pool's devices left over by its units stay alone, and degree 1's own
result is kept where it wins (SearchTuning.tp_recheck), so that TP never loses to no TP. The
degrees > 1 of tp_degrees are those a stage may have besides 1 (`--tp-degrees 4`: stages of
degree 1 or 4); the message says so when tp_degrees leaves 1 out.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from ..model.plan import to_physical
from ..model.state import SlotState
from ..model.units import Unit, unit_state
from ..subproblems.cache import SlotCache
from .options import SlotResult

Configuration = tuple[tuple[str | tuple[str, int], int], ...]
"""((kind, degree), ..., ((kind, server), degree), ...): each kind's degree, then the servers
whose pool of that kind uses another degree (per-pool steps of the descent); sorted by str."""


def configuration(degrees: dict) -> Configuration:
    """The canonical Configuration of {kind or (kind, server): degree}: a server's entry equal
    to its kind's degree is dropped."""
    kept = {k: t for k, t in degrees.items() if isinstance(k, str) or t != degrees.get(k[0], 1)}
    return tuple(sorted(kept.items(), key=str))


def same_kind_pools(state: SlotState) -> dict[tuple[str, int], list[int]]:
    """{(kind, server): available device indices in index order} (servers from the network)."""
    pools: dict[tuple[str, int], list[int]] = {}
    if state.network is None:
        return pools
    for i in state.available_indices:
        pools.setdefault((state.devices[i].kind, int(state.network.server[i])), []).append(i)
    return pools


def allowed_degrees(state: SlotState, degrees: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """{kind: degrees > 1 of `degrees` that fit in some server's pool of that kind}."""
    out: dict[str, set[int]] = {}
    for (kind, _), pool in same_kind_pools(state).items():
        out.setdefault(kind, set()).update(t for t in degrees if 1 < t <= len(pool))
    return {k: tuple(sorted(v)) for k, v in sorted(out.items()) if v}


def tp_applies(state: SlotState, degrees: Sequence[int]) -> bool:
    """True when some kind may form a unit of degree > 1 in this slot."""
    return state.tp is None and bool(allowed_degrees(state, degrees))


def configuration_units(state: SlotState, config: Configuration, matched: bool = False,
                        few: int | None = None) -> list[Unit]:
    """The units of a configuration: per (kind, server) pool, chunks of the kind's degree in
    index order, the rest alone; then every device outside the pools (unavailable ones) alone.
    With `matched`, a pool whose devices differ in speed is cut by `speed_matched` instead where
    that holds more throughput. With `few`, each pool forms at most that many units, of its
    slowest devices (in speed order), the others alone."""
    deg = dict(config)
    speed = [float(x) for x in state.speed]
    units: list[Unit] = []
    for (kind, server), pool in sorted(same_kind_pools(state).items(), key=lambda kv: kv[1][0]):
        t = deg.get((kind, server), deg.get(kind, 1))
        full = len(pool) // t * t
        plain = [tuple(pool[i:i + t]) for i in range(0, full, t)] + [(i,) for i in pool[full:]]
        if few is not None and t > 1:
            slow = sorted(pool, key=lambda i: (speed[i], i))[:min(few, len(pool) // t) * t]
            plain = [tuple(sorted(slow[i:i + t])) for i in range(0, len(slow), t)] + \
                [(i,) for i in pool if i not in slow]
        elif matched and t > 1:
            other = speed_matched(pool, t, speed)
            if unit_throughput(other, speed) > unit_throughput(plain, speed) * (1 + 1e-12):
                plain = other
        units += plain
    used = {i for u in units for i in u}
    return units + [(i,) for i in range(state.n) if i not in used]


def unit_throughput(units: Sequence[Unit], speed: Sequence[float]) -> float:
    """Sum over units of t times its slowest device's speed (FLOP/s): a TP unit computes in
    lockstep, at its slowest shard's pace."""
    return sum(len(u) * min(speed[i] for i in u) for u in units)


def speed_matched(pool: Sequence[int], t: int, speed: Sequence[float]) -> list[Unit]:
    """The pool cut into len(pool) // t units of t devices and the rest alone, of the most
    `unit_throughput`: among devices sorted by speed, an optimal cut takes the units as runs of t
    consecutive ones once the devices left alone are set aside (exchange argument), so a DP
    over that order chooses which to leave alone,

        f_i(j, p) = max(f_{i-1}(j - 1, p) + s_i,  f_{i-1}(j, p - 1 mod t) + [p = 1] t s_i),

    j devices alone and p devices in the open unit after the i slowest (s_i the i-th speed;
    a unit's first device is its slowest). Units list their devices in index order, then
    the devices alone."""
    order = sorted(pool, key=lambda i: (speed[i], i))
    r = len(order) % t
    f: dict[tuple[int, int], tuple[float, tuple]] = {(0, 0): (0.0, ())}
    for d in order:
        g: dict[tuple[int, int], tuple[float, tuple]] = {}
        for (j, p), (v, picks) in f.items():
            steps = [((j, (p + 1) % t), v + (t * speed[d] if p == 0 else 0.0), picks + ((d, False),))]
            if j < r:
                steps.append(((j + 1, p), v + speed[d], picks + ((d, True),)))
            for key, val, got in steps:
                if key not in g or val > g[key][0]:
                    g[key] = (val, got)
        f = g
    picks = f[(r, 0)][1]
    members = [d for d, alone in picks if not alone]
    return [tuple(sorted(members[i:i + t])) for i in range(0, len(members), t)] + \
        [(d,) for d, alone in picks if alone]


def partitions(pool: Sequence[int], sizes: Sequence[int]) -> Iterator[list[Unit]]:
    """Every partition of `pool` into blocks whose sizes are in `sizes` (1 always allowed),
    each block in index order."""
    pool = list(pool)
    if not pool:
        yield []
        return
    first, rest = pool[0], pool[1:]
    for t in sorted({1, *sizes}):
        if t > len(pool):
            continue
        for comp in itertools.combinations(rest, t - 1):
            left = [x for x in rest if x not in comp]
            for tail in partitions(left, sizes):
                yield [(first, *comp), *tail]


def all_unit_sets(state: SlotState, degrees: Sequence[int]) -> Iterator[list[Unit]]:
    """Every way of forming units in this slot (oracle): the product over (kind, server) pools
    of their partitions into allowed sizes, plus the other devices alone."""
    pools = sorted(same_kind_pools(state).values(), key=lambda p: p[0])
    inside = {i for p in pools for i in p}
    rest = [(i,) for i in range(state.n) if i not in inside]
    for combo in itertools.product(*(list(partitions(p, [t for t in degrees if t > 1])) for p in pools)):
        yield [u for part in combo for u in part] + rest


Solver = Callable[[SlotState, SlotCache], SlotResult]
"""solve(unit state, its cache) -> SlotResult over the units (the previous plan, over physical
devices, is the solver's own: the Scorer charges migration physically and solve.incumbents
reads it over the units where it can)."""


def units_state(state: SlotState, units: list[Unit], cache: SlotCache) -> tuple[SlotState, SlotCache]:
    """The unit state of `units` and its cache, kept in the slot's cache (`state` and `cache`
    themselves for degree 1 everywhere)."""
    if all(len(u) == 1 for u in units):
        return state, cache
    key = tuple(units)
    if key not in cache.units:
        ust = unit_state(state, units)
        cache.units[key] = (ust, SlotCache(ust, dp_backend=cache.dp_backend))
    return cache.units[key]


def solve_units(state: SlotState, units: list[Unit], solve: Solver, cache: SlotCache
                ) -> tuple[SlotResult, SlotState]:
    """`solve` on the unit state of `units` (units_state), the result's plans read back over
    physical devices."""
    ust, ucache = units_state(state, units, cache)
    return physical_result(solve(ust, ucache), ust), ust


def physical_result(res: SlotResult, ust: SlotState) -> SlotResult:
    """A unit state's SlotResult with its plans over physical devices (res itself on a
    physical state)."""
    if res.plan is None or ust.members is None:
        return res
    pool = tuple((to_physical(p, ust), *rest) for p, *rest in res.candidate_pool)
    return replace(res, plan=to_physical(res.plan, ust), candidate_pool=pool)


def better(a: SlotResult, b: SlotResult | None) -> bool:
    """a has a plan and beats b (none, or a larger objective; ties by batch time)."""
    if a.plan is None:
        return False
    if b is None or b.plan is None:
        return True
    return (a.objective, a.batch_time) < (b.objective, b.batch_time)


@dataclass
class Descent:
    """What search_configurations found: the best result (over physical devices), its
    configuration and unit state, the searches run, the configurations skipped because their
    lower bound was no better than the incumbent's objective, and every lower bound seen (of
    the searched and of the skipped configurations: together a bound over all visited), and
    the configurations and full searches not started because the time limit had passed."""
    best: SlotResult
    config: Configuration
    state: SlotState
    cache: SlotCache
    runs: int = 0
    pruned: int = 0
    pool_steps: bool = False
    bounds: list[float] = field(default_factory=list)
    late: int = 0
    degree_one: bool = False
    """The result is degree 1 everywhere's full search, which beat the descent's choice."""
    kept_previous: bool = False
    """The result keeps the previous plan on its own TP units, which beat every search."""
    visited: list[SlotState] = field(default_factory=list)
    """The unit states of the configurations visited (searched or skipped by their bound), the
    slot's own first."""
    degrees: tuple[int, ...] = ()
    """The degrees asked for (SolveOptions.tp_degrees), for the message."""


Bound = Callable[[SlotState], float]
"""bound(unit state) -> a value no plan of that state (as the explore Solver searches it) is below."""


def search_configurations(state: SlotState, degrees: Sequence[int], explore: Solver, bound: Bound,
                          cache: SlotCache, plain: SlotResult, max_pools: int = 0,
                          stop: Callable[[], bool] = lambda: False, partial: bool = False,
                          all_sets_up_to: int = 0) -> Descent:
    """Coordinate descent over TP configurations (module doc) from `plain`, the degree-1
    result of `explore`: each trial configuration whose lower bound (`bound` on its unit
    state) is below the incumbent's objective is searched by `explore`. Where the slot has at
    most `max_pools` (kind, server) pools, a second pass gives each pool in turn each allowed
    degree of its own (SearchTuning.tp_pool_steps_up_to). Once `stop()` is true (a time limit
    has passed), the configurations not yet tried are counted in Descent.late, not searched.
    Each configuration is tried with its units in index order and matched by speed
    (configuration_units); with `partial` (small slots), also with 1, 2, ... units per pool,
    of its slowest devices, and where the slot has at most `all_sets_up_to` ways of forming
    units (all_unit_sets, SearchTuning.tp_all_sets_up_to), every one of them after the descent."""
    allowed = allowed_degrees(state, degrees)
    one = configuration({k: 1 for k in allowed})
    out = Descent(plain, one, state, cache, bounds=[plain.lower_bound], visited=[state],
                  degrees=tuple(sorted(set(degrees))))
    tried = {tuple(sorted(configuration_units(state, one)))}

    most = max((len(p) for p in same_kind_pools(state).values()), default=0) // 2
    ways = [(False, None), (True, None)] + ([(False, k) for k in range(1, most)] if partial else [])

    def visit(units: list[Unit], cfg: Configuration) -> bool:
        """Search the unit state of `units` unless its units were tried or its bound is no
        better than the incumbent; False once the time limit has passed."""
        key = tuple(sorted(units))
        if key in tried:        # configurations that form the same units are one
            return True
        tried.add(key)
        if stop():
            out.late += 1
            return False
        ust, ucache = units_state(state, units, cache)
        out.visited.append(ust)
        lb = bound(ust)
        if out.best.plan is not None and lb >= out.best.objective:
            out.pruned += 1
            out.bounds.append(lb)
            return True
        res = explore(ust, ucache)
        out.runs += 1
        out.bounds.append(res.lower_bound)
        if better(res, out.best):
            out.best, out.config, out.state, out.cache = physical_result(res, ust), cfg, ust, ucache
        return True

    def trial(cfg: Configuration) -> None:
        for matched, few in ways:
            if not visit(configuration_units(state, cfg, matched, few), cfg):
                return

    # every kind at each degree at once first: a plan may need two kinds to move together
    # (LLAMA-3-8 on Sailor's A100s and V100s: one pipeline through both at tp 4, 4180 s, where
    # one kind at a time from tp 1 stops at 6037 s)
    for t in sorted({t for ts in allowed.values() for t in ts}):
        trial(configuration({k: max([1, *(x for x in ts if x <= t)]) for k, ts in allowed.items()}))
    for kind, ts in allowed.items():
        for t in (1, *ts):
            trial(configuration({**dict(out.config), kind: t}))
    pools = {key: pool for key, pool in same_kind_pools(state).items() if len(pool) > 1}
    out.pool_steps = len(pools) <= max_pools
    if out.pool_steps:              # then each server's pool on its own: stages of one kind at several degrees
        for (kind, server), pool in pools.items():
            for t in (1, *(t for t in allowed.get(kind, ()) if t <= len(pool))):
                trial(configuration({**dict(out.config), (kind, server): t}))
    if partial and all_sets_up_to > 0:     # small slots: every way of forming units where there are few
        sets = list(itertools.islice(all_unit_sets(state, degrees), all_sets_up_to + 1))
        if len(sets) <= all_sets_up_to:
            for units in sets:
                if not visit(units, unit_configuration(state, units)):
                    break
    return out


def unit_configuration(state: SlotState, units: list[Unit]) -> Configuration:
    """A Configuration naming `units` for messages: each (kind, server) pool at the size of its
    largest unit."""
    sizes: dict = {}
    for u in units:
        if len(u) > 1:
            key = (state.devices[u[0]].kind, int(state.network.server[u[0]]) if state.network is not None else 0)
            sizes[key] = max(sizes.get(key, 1), len(u))
    return configuration(sizes)


def describe_configuration(config: Configuration, state: SlotState | None = None) -> str:
    """'A100-SXM4-40GB tp1, V100-SXM2-16GB tp4, V100-SXM2-16GB in server n3 tp2' style text
    (server names from the state's network, else indices)."""
    def server(s: int) -> str:
        return state.network.server_names[s] if state is not None and state.network is not None else str(s)
    return ", ".join(f"{k} tp{t}" if isinstance(k, str) else f"{k[0]} in server {server(k[1])} tp{t}"
                     for k, t in config) or "tp1"


def check_degrees(degrees: Sequence[int]) -> None:
    """ValueError unless `degrees` is a non-empty sequence of integers >= 1 (SolveOptions.tp_degrees)."""
    if isinstance(degrees, (str, bytes)) or not degrees or any(
            isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in degrees):
        raise ValueError(f"tp_degrees: expected a non-empty sequence of integers >= 1, got {degrees!r}")


def tp_result(best: SlotResult, found: Descent, solve_time: float, state: SlotState,
              bound: Bound | None = None) -> SlotResult:
    """The chosen configuration's result, with the whole solve's time, the smallest lower bound
    of the configurations visited (a bound over those, not over every way of forming units)
    and the configuration in the message (Descent.degree_one / kept_previous: what beat the
    descent's choice; the degrees asked for when they leave out 1, which is searched anyway:
    module doc). bound: where the descent's bounds hold for one
    micro-batch size only and the result may use others, the bound of a unit state over
    every size (solve.bounds.slot_lower_bound), taken over the visited configurations instead."""
    finite = [b for b in (found.bounds if bound is None else map(bound, found.visited)) if not math.isnan(b)]
    lb = min(finite) if finite else best.lower_bound
    skipped = f", {found.pruned} skipped by their lower bound" if found.pruned else ""
    how = "each kind's degree, then each server's" if found.pool_steps else "each kind's degree"
    chosen = describe_configuration(found.config, state)
    if found.degree_one:
        chosen = f"tp1 (its full search beat the descent's {chosen})"
    elif found.kept_previous:
        chosen = f"the previous plan's units (keeping it beat the descent's {chosen})"
    late = f", {found.late} configurations or full searches not started (time limit)" if found.late else ""
    asked = f"degrees {', '.join(map(str, found.degrees))} (degree 1 is always searched too), " \
        if found.degrees and 1 not in found.degrees else ""
    msg = f"{best.message}; TP: {asked}{found.runs + 1} configurations searched{skipped}{late} (coordinate descent " \
          f"over {how}), chosen: {chosen}; lower bound over the configurations visited"
    return replace(best, solve_time=solve_time, lower_bound=lb, message=msg)
