"""Baseline plans, each a special case of our model (DESIGN.md section 3, "Baselines").

Every constructor takes a SlotState (and, optionally, `cache=`: the caller's SlotCache of that
state) and returns a Plan that passes Plan.validate, or None when the baseline has no feasible
plan in that state. Reconstructions (the originals are systems,
not planners over our model; we keep what each one decides and score it with our cost model):

- even_dp   synchronous DDP: every available device that holds the whole model is its own
            group (the fastest B/u of them at most); shares even in micro-batches, the
            remainder of B/u going one each to the fastest devices.
- lb_bsp    LB-BSP: the same groups; shares proportional to speed (1 / per-sample time),
            largest-remainder rounding in micro-batches, at least one each.
- gpipe     one group of all available devices in index order (the first L if more than L
            layers); cuts balance compute *as if devices were identical* (GPipe's partitioner
            balances layer cost, it does not know device speeds or links); share B; cuts must
            fit the whole batch's stashed activations in memory, else None.
- dapple    m equal groups of k consecutive available devices (index order = DAPPLE's
            topology-aware placement), m = n // k; homogeneous balanced cuts, even shares;
            the (m, k) with the smallest batch time under our cost model; 1F1B (DAPPLE's
            early-backward schedule), cuts within memory for its peak stash.
- pipedream PipeDream's planner with uniform stage replication (m replicas of a k-stage
            pipeline): cuts and (m, k) chosen by its own heterogeneity-blind estimate (mean
            device time per layer, mean link bandwidth and latency, ring all-reduce of each
            stage's parameters); scored synchronously under 1F1B (PipeDream-flush, its
            one-forward-one-backward order with a flush per batch), even shares.

A 1F1B stage keeps at most min(k, share / u) micro-batches (model.memory), so its cuts are
those for one_f_one_b_peak(k, share, u) samples; a one-stage group stays "gpipe" (gradient
accumulation: one micro-batch live under either schedule).
- hetpipe   HetPipe's virtual workers: static groups from static device data (peak FLOP/s,
            index): ceil(n/4) workers balanced by peak speed (LPT); in a slot, each worker's
            available members in index order, heterogeneity-aware min-bottleneck cuts (HetPipe
            partitions for its GPUs' speeds and memory), even shares; workers that cannot
            hold their share are dropped.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from ..cost.sync import sync_floor, sync_lower_bound
from ..model import Group, Plan, SlotState, share_cap
from ..subproblems.cache import SlotCache, slot_cache
from ..subproblems.cuts import balanced_cuts, blind_cuts, min_bottleneck_cuts

Cutter = Callable[[Sequence[int], int], tuple[int, ...] | None]
"""Cuts of an ordered group for a share (samples), or None when it cannot hold it."""


def _memo(f: Callable[..., Plan | None]) -> Callable[..., Plan | None]:
    """Keep a baseline's plan in the caller's SlotCache (`cache.baselines`), so that it is
    built once per state however many solves of that state ask for it; a state that is not a
    SlotState is a TypeError naming what it is."""
    name = f.__name__

    @functools.wraps(f)
    def built(state: SlotState, *args, cache: SlotCache | None = None, **kw) -> Plan | None:
        if not isinstance(state, SlotState):
            raise TypeError(f"{name}: expected a SlotState (instance.state(t)), got {type(state).__name__}")
        if cache is None or args or kw:
            return f(state, *args, cache=cache, **kw)
        cache.check(state)
        if name not in cache.baselines:
            cache.baselines[name] = f(state, cache=cache)
        return cache.baselines[name]
    return built


def _checked(plan: Plan | None, state: SlotState) -> Plan | None:
    return plan if plan is not None and not plan.validate(state) else None


def one_f_one_b_peak(k: int, share: int, u: int) -> int:
    """Samples a 1F1B stage of a k-stage group keeps at most: u * min(k, share / u)."""
    return u * min(k, -(-share // u))


def _schedule(k: int, one_f_one_b: bool) -> str:
    return "1f1b" if one_f_one_b and k > 1 else "gpipe"


def _unchecked_equal_groups(state: SlotState, chunks: Sequence[Sequence[int]], cutter: Cutter,
                            one_f_one_b: bool = False) -> Plan | None:
    """_equal_groups without Plan.validate: the cutters guarantee memory for each share, the
    chunks are distinct available devices (the caller validates the plan it keeps); with
    one_f_one_b, multi-stage groups run 1F1B."""
    wl = state.workload
    shares = even_split(len(chunks), wl.batch, wl.micro_batch)
    groups = []
    for ch, s in zip(chunks, shares):
        cuts = cutter(ch, s)
        if cuts is None:
            return None
        groups.append(Group(tuple(ch), cuts, s, _schedule(len(ch), one_f_one_b)))
    return Plan(tuple(groups))


def per_sample_time(state: SlotState, d: int) -> float:
    """Seconds per sample of the whole model (forward + backward) on device d."""
    return float(state.fwd_prefix[d, -1] + state.bwd_prefix[d, -1])


def holders(state: SlotState, *, cache: SlotCache | None = None) -> list[int]:
    """Available devices that hold the whole model with one micro-batch, fastest first."""
    sc = slot_cache(state, cache)
    hs = [d for d in state.available_indices if sc.single_cuts(d) is not None]
    return sorted(hs, key=lambda d: (per_sample_time(state, d), d))


def even_split(m: int, B: int, u: int, caps: Sequence[int] | None = None) -> list[int] | None:
    """m shares (samples), multiples of u summing to B, as even as possible, each >= u: the
    remainder micro-batches go one each to the first groups; with caps (samples), no share
    above its cap, the excess handed to the smallest shares with room (first first). None when
    impossible (m < 1, B not a multiple of u, fewer than m micro-batches, caps too small)."""
    if m <= 0 or B % u != 0 or B // u < m:
        return None
    n = B // u
    units = [n // m + (1 if g < n % m else 0) for g in range(m)]
    if caps is not None:
        cap_u = [max(int(c) // u, 0) for c in caps]
        if sum(cap_u) < n or min(cap_u) < 1:
            return None
        over = 0
        for g in range(m):
            if units[g] > cap_u[g]:
                over += units[g] - cap_u[g]
                units[g] = cap_u[g]
        while over:
            room = [g for g in range(m) if units[g] < cap_u[g]]
            g = min(room, key=lambda x: units[x])
            units[g] += 1
            over -= 1
    return [x * u for x in units]


def proportional_split(weights: Sequence[float], B: int, u: int, caps: Sequence[int] | None = None) -> list[int] | None:
    """Shares (samples) proportional to weights, whole micro-batches, >= u each, <= caps;
    largest-remainder rounding; None when infeasible."""
    N = B // u
    w = np.asarray(weights, dtype=float)
    m = len(w)
    capn = np.full(m, N) if caps is None else np.minimum(np.asarray(caps, dtype=np.int64) // u, N)
    if m > N or np.any(capn < 1) or capn.sum() < N:
        return None
    x = N * w / w.sum()
    n = np.clip(np.floor(x).astype(np.int64), 1, capn)
    while n.sum() < N:
        room = np.where(n < capn, x - n, -np.inf)
        n[int(np.argmax(room))] += 1
    while n.sum() > N:
        spare = np.where(n > 1, x - n, np.inf)
        n[int(np.argmin(spare))] -= 1
    return [int(v) * u for v in n]


def _singletons(state: SlotState, devs: Sequence[int], shares: Sequence[int]) -> Plan:
    L = state.workload.num_layers
    pairs = sorted(zip(devs, shares))
    return Plan(tuple(Group((d,), (L,), s) for d, s in pairs))


@_memo
def even_dp(state: SlotState, *, cache: SlotCache | None = None) -> Plan | None:
    wl = state.workload
    hs = holders(state, cache=cache)[: wl.batch // wl.micro_batch]
    if not hs:
        return None
    return _checked(_singletons(state, hs, even_split(len(hs), wl.batch, wl.micro_batch)), state)


@_memo
def lb_bsp(state: SlotState, *, cache: SlotCache | None = None) -> Plan | None:
    wl = state.workload
    hs = holders(state, cache=cache)[: wl.batch // wl.micro_batch]
    if not hs:
        return None
    shares = proportional_split([1.0 / per_sample_time(state, d) for d in hs], wl.batch, wl.micro_batch)
    return _checked(_singletons(state, hs, shares), state) if shares else None


@_memo
def gpipe(state: SlotState, *, cache: SlotCache | None = None) -> Plan | None:
    wl = state.workload
    devs = state.available_indices[: wl.num_layers]
    if not devs:
        return None
    cuts = balanced_cuts(state, devs, min_share=wl.batch, cache=cache)
    if cuts is None:
        return None
    return _checked(Plan((Group(tuple(devs), cuts, wl.batch),)), state)


def _equal_groups(state: SlotState, chunks: Sequence[Sequence[int]], cutter: Cutter,
                  one_f_one_b: bool = False) -> Plan | None:
    plan = _unchecked_equal_groups(state, chunks, cutter, one_f_one_b)
    return None if plan is None else _checked(plan, state)


def _configs(state: SlotState) -> list[tuple[int, int]]:
    """(m groups, k devices each) with m * k <= available, k <= L, m <= B/u; every k up to 16
    available devices, powers of two and n itself beyond (as DAPPLE's planner on real clusters)."""
    wl = state.workload
    n = len(state.available_indices)
    ks = range(1, n + 1) if n <= 16 else sorted({1 << i for i in range(n.bit_length())} | {n})
    out = []
    for k in (k for k in ks if k <= min(n, wl.num_layers)):
        m = min(n // k, wl.batch // wl.micro_batch)
        if m >= 1:
            out.append((m, k))
    return out


@_memo
def dapple(state: SlotState, *, cache: SlotCache | None = None) -> Plan | None:
    sc = slot_cache(state, cache)
    avail = state.available_indices
    u = state.workload.micro_batch
    ranked = []
    for i, (m, k) in enumerate(_configs(state)):
        chunks = [avail[j * k:(j + 1) * k] for j in range(m)]
        plan = _unchecked_equal_groups(
            state, chunks, lambda ch, b: balanced_cuts(state, ch, min_share=one_f_one_b_peak(len(ch), b, u), cache=sc),
            one_f_one_b=True)
        if plan is not None:
            slowest = max(sc.group_coeffs(g.devices, g.cuts, g.schedule, g.recompute).time(g.share)
                          for g in plan.groups)
            ranked.append((slowest, i, plan))
    # a plan's batch time is its slowest group's time plus sync and optimizer seconds (>= 0): in
    # order of that bound, the search stops at the first bound above the best time (ties: the
    # first configuration wins); a plan whose bound with the sync's floor (cost.sync.
    # sync_lower_bound, less a relative 1e-9 for rounding) is above it is not evaluated either
    floor = sync_floor(state)
    best, key = None, (np.inf, -1)
    for slowest, i, plan in sorted(ranked, key=lambda r: r[:2]):
        if (slowest, i) >= key:
            if slowest > key[0]:
                break
            continue
        if slowest + sync_lower_bound(floor, [g.devices for g in plan.groups]) * (1 - 1e-9) > key[0]:
            continue
        t = sc.evaluation(plan).batch_time       # the plan is structurally valid by construction
        if (t, i) < key and not plan.validate(state):
            best, key = plan, (t, i)
    return best


def _pipedream_cuts(state: SlotState, devices: Sequence[int], share: int, w: np.ndarray, comm: np.ndarray,
                    cache: SlotCache) -> tuple[float, tuple[int, ...] | None]:
    """PipeDream-style cuts: min over cuts of the slowest of (stage time at the mean device
    speed: w, the available devices' mean forward + backward prefix, seconds per sample; the
    activation transfer at the mean bandwidth: comm, seconds per sample across a boundary
    after each layer); returns (that bottleneck s/sample, cuts)."""
    if len(devices) == 1:
        cuts = min_bottleneck_cuts(state, devices, cache=cache)
        t = float(np.mean([per_sample_time(state, d) for d in state.available_indices]))
        return t, cuts
    return blind_cuts(state, devices, w, np.broadcast_to(comm, (len(devices) - 1, len(comm))), share, cache=cache)


@_memo
def pipedream(state: SlotState, *, cache: SlotCache | None = None) -> Plan | None:
    wl = state.workload
    avail = state.available_indices
    if not avail:
        return None
    idx = np.array(avail)
    if len(idx) > 1:
        off = ~np.eye(len(idx), dtype=bool)
        bw = float(np.mean(state.bandwidth[np.ix_(idx, idx)][off]))
        lat = float(np.mean(state.latency[np.ix_(idx, idx)][off]))
    else:
        bw, lat = np.inf, 0.0
    sc = slot_cache(state, cache)
    w = (state.fwd_prefix[list(avail)] + state.bwd_prefix[list(avail)]).mean(axis=0)
    L = wl.num_layers
    comm = np.full(L + 1, np.inf)
    comm[1:L] = 2.0 * (wl.out_bytes[: L - 1] / bw + lat / wl.micro_batch)
    ranked = []
    for i, (m, k) in enumerate(_configs(state)):
        chunks = [avail[j * k:(j + 1) * k] for j in range(m)]
        shares = even_split(m, wl.batch, wl.micro_batch)
        t, cuts = _pipedream_cuts(state, chunks[0], one_f_one_b_peak(k, shares[0], wl.micro_batch), w, comm, sc)
        if cuts is None:
            continue
        stage_params = np.diff(np.concatenate([[0.0], state.param_prefix[list(cuts)]]))
        sync = 2.0 * (m - 1) / m * float(stage_params.max()) / bw + 2.0 * (m - 1) * lat if m > 1 else 0.0
        est = t * shares[0] + sync
        if est < np.inf:
            ranked.append((est, i, chunks, cuts))
    # the least estimate whose plan fits (ties: the first configuration); plans built in that order
    for _, _, chunks, cuts in sorted(ranked, key=lambda r: r[:2]):
        plan = _equal_groups(state, chunks, lambda ch, b, c=cuts: c if share_cap(
            state, ch, c, _schedule(len(ch), True)) >= b else None, one_f_one_b=True)
        if plan is not None:
            return plan
    return None


def virtual_workers(state: SlotState, size: int = 4) -> list[list[int]]:
    """HetPipe's static virtual workers over all devices (not only available ones):
    ceil(n / size) workers, devices assigned fastest-peak first to the worker with the least
    total peak FLOP/s (ties: lowest index); each worker listed in index order."""
    n = state.n
    m = max(1, -(-n // size))
    order = sorted(range(n), key=lambda d: (-state.devices[d].peak_flops, d))
    load = [0.0] * m
    vws: list[list[int]] = [[] for _ in range(m)]
    for d in order:
        g = min(range(m), key=lambda i: (load[i], len(vws[i]), i))
        vws[g].append(d)
        load[g] += state.devices[d].peak_flops
    return [sorted(v) for v in vws]


@_memo
def hetpipe(state: SlotState, groups: Sequence[Sequence[int]] | None = None, *,
            cache: SlotCache | None = None) -> Plan | None:
    sc = slot_cache(state, cache)
    wl = state.workload
    vws = [list(g) for g in (groups if groups is not None else virtual_workers(state))]
    members = [[d for d in g if state.available[d]][: wl.num_layers] for g in vws]
    members = [g for g in members if g][: wl.batch // wl.micro_batch]
    while members:
        plan = _equal_groups(state, members, lambda ch, b: min_bottleneck_cuts(state, ch, min_share=b, cache=sc))
        if plan is not None:
            return plan
        shares = even_split(len(members), wl.batch, wl.micro_batch)
        bad = [i for i, (g, b) in enumerate(zip(members, shares)) if min_bottleneck_cuts(state, g, min_share=b, cache=sc) is None]
        members = [g for i, g in enumerate(members) if i not in bad[:1]] if bad else members[:-1]
    return None


ALL: dict[str, Callable[..., Plan | None]] = {
    "even-dp": even_dp, "lb-bsp": lb_bsp, "gpipe": gpipe,
    "dapple": dapple, "pipedream": pipedream, "hetpipe": hetpipe,
}

LABELS = {"even-dp": "even DP", "lb-bsp": "LB-BSP", "gpipe": "GPipe",
          "dapple": "DAPPLE", "pipedream": "PipeDream", "hetpipe": "HetPipe"}
"""The name a user reads for each baseline of ALL."""


def cost_weights(state: SlotState, queues: Sequence[float]) -> np.ndarray:
    """Weights of the budgets when choosing the cheapest plan: the queues when any is
    positive, else 1 / limit (so each budget counts relative to its limit)."""
    q = np.asarray(queues, dtype=float) if len(queues) else np.zeros(len(state.budgets))
    if np.any(q > 0):
        return q
    return np.array([1.0 / b.limit if b.limit > 0 else 0.0 for b in state.budgets])


def cheapest(state: SlotState, queues: Sequence[float] = (), plans: Sequence[Plan | None] | None = None,
             *, cache: SlotCache | None = None) -> Plan | None:
    """The cheapest plan we know without search (a Slater witness for the queue bound): among
    every single holder running the whole batch and every baseline plan (`plans`, if already
    built by the constructors of ALL in this state, which return only plans that pass
    Plan.validate), the least sum_k w_k c_k (w = cost_weights); ties and budget-less states
    by batch time."""
    sc = slot_cache(state, cache)
    wl = state.workload
    L = wl.num_layers
    w = cost_weights(state, queues)
    singles = [Plan((Group((d,), (L,), wl.batch),)) for d in holders(state, cache=sc)]
    if plans is None:
        plans = [f(state, cache=sc) for f in ALL.values()]
    cands = [(p, False) for p in singles] + [(p, True) for p in plans if p is not None]
    floor = _single_cost_floor(state, w)
    best, key = None, None
    for p, checked in cands:
        if key is not None and len(p.groups) == 1 and p.groups[0].devices in floor:
            # a single holder costs at least its floor (batch time >= B x its seconds per
            # sample): one that cannot reach the best key is neither validated nor evaluated
            c_lo, t_lo = floor[p.groups[0].devices]
            if c_lo > key[0] + 1e-9 * abs(key[0]) or (not np.any(w) and t_lo > key[1] * (1 + 1e-9)):
                continue
        if not checked and p.validate(state):
            continue
        ev = sc.evaluation(p)
        k = (float(np.dot(w, ev.costs)) if len(w) else 0.0, ev.batch_time)
        if key is None or k < key:
            best, key = p, k
    return best


def _single_cost_floor(state: SlotState, w: np.ndarray) -> dict[tuple[int, ...], tuple[float, float]]:
    """Per available device d (as a one-device group): lower bounds on (sum_k w_k c_k, batch
    time) of the whole batch on d alone: the time is at least B x its forward + backward
    seconds per sample, money at least its price times that time and energy its busy power
    (idle power plus the busy extra over its compute, solve.bounds) times it (egress and
    per-device budgets are >= 0, w >= 0)."""
    B = state.workload.batch
    extra = np.maximum(state.extra_power_w, 0.0)
    out = {}
    for d in state.available_indices:
        t = B * per_sample_time(state, d)
        rate = 0.0
        for wk, b in zip(w, state.budgets):
            if b.kind == "money":
                rate += float(wk) * float(state.price[d])
            elif b.kind == "energy":
                rate += float(wk) * (float(state.devices[d].idle_power_w) + float(extra[d]))
        out[(d,)] = (rate * t if rate > 0 else 0.0, t)
    return out


__all__ = ["ALL", "LABELS", "cheapest", "dapple", "even_dp", "even_split", "gpipe", "hetpipe", "holders",
           "lb_bsp", "pipedream", "proportional_split", "virtual_workers"]
