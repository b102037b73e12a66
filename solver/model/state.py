"""What is true in one slot (`SlotState`, all the per-slot solver sees) and the instance
whose traces produce one state per slot.

Units throughout: seconds, bytes, FLOP, FLOP/s, watts, US dollars. Everything is frozen.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .cluster import Budget, Device, budget_names_problem
from .network import Network
from .preemption import Preemption, PreemptionRisk
from .workload import Workload


def measurement_notes(devices, workload: Workload) -> tuple[str, ...]:
    """One note per device kind without measured times in a workload that has some: its
    per-layer times are FLOP estimates (FLOPs / sustained FLOP/s); and one when the table has
    measured optimizer-step seconds that the workload does not charge (optimizer_step), or one
    per kind present whose charged measured seconds are all 0."""
    notes = ()
    if workload.measured:
        missing = sorted({d.kind for d in devices} - set(workload.measured))
        at = f"tp {workload.tp_degree} and micro-batch {workload.micro_batch}"
        notes = tuple(f"kind {k}: layer table {workload.name!r} has no measured times for it at {at} (measured there: "
                      f"{', '.join(sorted(workload.measured))}{measured_elsewhere(workload, k)}); its times at {at} "
                      "are FLOP estimates" for k in missing)
    if workload.optimizer_step == "measured":
        kinds = {d.kind for d in devices}
        notes += tuple(f"layer table {workload.name!r}: measured optimizer-step seconds of kind {k} are 0 for "
                       f"every layer; its step is charged 0 s (a profile that did not measure it?)"
                       for k, secs in sorted(workload.optimizer_seconds.items()) if k in kinds and not any(secs))
    if workload.optimizer_seconds and workload.optimizer_step != "measured":
        notes += (f"layer table {workload.name!r} has measured optimizer-step seconds (opt_s:"
                  f"{', opt_s:'.join(sorted(workload.optimizer_seconds))}), not charged: optimizer_step is "
                  f"{workload.optimizer_step!r} (set optimizer_step = \"measured\" in [workload] to charge them)",)
    return notes


def measured_elsewhere(workload: Workload, kind: str) -> str:
    """'; its times are measured at tp 2 (micro-batch 1), tp 4 (micro-batch 1, 2)' where the
    table times `kind` at other micro-batch sizes (Workload.measured_by_micro_batch, at tp 1) or
    TP degrees (tp_variants); '' where it times it nowhere."""
    at: dict[int, set[int]] = {}
    for t, per_u in [(1, workload.measured_by_micro_batch)] + [(t, v.by_micro_batch) for t, v in
                                                               sorted(workload.tp_variants.items())]:
        at.setdefault(t, set()).update(u for u, per in per_u.items() if kind in per)
    where = [f"tp {t} (micro-batch {', '.join(map(str, sorted(us)))})" for t, us in sorted(at.items()) if us]
    return f"; its times are measured at {', '.join(where)}" if where else ""


TP_ALLREDUCES = 2
"""All-reduces of a layer's output activation per pass (forward, and again backward) in a
tensor-parallel stage: Megatron's two per transformer block (after attention, after the MLP;
Shoeybi et al. 2019), applied to every layer of an estimated table."""


def tp_collective_seconds(out_bytes: np.ndarray, t: int, bandwidth: float, latency: float,
                          micro_batch: int, count: np.ndarray | None = None, overhead: float = 0.0) -> np.ndarray:
    """(L,) seconds per sample of one pass's TP collectives per layer among t devices: each is
    priced as a ring all-reduce of the micro-batch's output plus a fixed per-call overhead,
    2 (t-1)/t * u o / bw + 2 (t-1) * latency + overhead (seconds), per sample (divided by u);
    `count` per layer of them (Workload.tp_collectives), else TP_ALLREDUCES per layer.
    `overhead`: SlotState.tp_collective_latency (0 unless the instance declares it or the
    training loop's estimator fits it)."""
    if t <= 1:
        return np.zeros(len(out_bytes))
    ring = (2.0 * (t - 1) / t * np.asarray(out_bytes, dtype=float) / bandwidth
            + (2.0 * (t - 1) * latency + overhead) / micro_batch)
    n = TP_ALLREDUCES if count is None else np.asarray(count, dtype=float)
    return n * ring


@dataclass(frozen=True, eq=False)
class SlotState:
    """What is true in slot t: the only input of the per-slot solver.

    available[i]: device i may be used; speed[i]: effective FLOP/s (peak times
    efficiency times this slot's speed factor; a TP unit's: all its devices'); speed_factor[i]: the slot's factor
    alone (divides measured per-layer times); price[i]: USD per second held;
    bandwidth[i, j]: bytes/s from i to j (inf on the diagonal); latency[i, j]: seconds;
    network: servers' shared NICs, bandwidth fits and egress prices (model.network), or None.

    Tensor parallelism (model.tp builds such states): tp[i] is how many physical devices
    device i stands for (a stage of tp[i] same-kind devices of one server; None: 1 each),
    members[i] their indices in `base`, the physical state, and tp_link[i] = (bytes/s,
    seconds) of the slowest link and the largest latency among them (the TP collectives' ring);
    tp_collective_latency: seconds each TP collective costs beyond its ring (a library's
    per-call overhead, e.g. about 1 ms for gloo on CPU processes; 0: none, the default);
    allreduce_latency: seconds each cross-group gradient all-reduce (one per bucket,
    cost.sync) costs beyond its ring, the same kind of per-call overhead (0: none, the default).
    risk: the preemption risk the planner weighs (model.preemption; None: none, the default).
    """

    t: int
    devices: tuple[Device, ...]
    workload: Workload
    budgets: tuple[Budget, ...]
    available: np.ndarray
    speed: np.ndarray
    speed_factor: np.ndarray
    price: np.ndarray
    bandwidth: np.ndarray
    latency: np.ndarray
    network: Network | None = None
    tp: tuple[int, ...] | None = None
    members: tuple[tuple[int, ...], ...] | None = None
    base: "SlotState | None" = None
    tp_link: np.ndarray | None = None
    tp_collective_latency: float = 0.0
    allreduce_latency: float = 0.0
    risk: PreemptionRisk | None = None

    def __post_init__(self) -> None:
        if self.risk is not None and len(self.risk.hazard) != len(self.devices):
            raise ValueError(f"SlotState.risk: expected a hazard per device ({len(self.devices)}), "
                             f"got {len(self.risk.hazard)}")

    @property
    def n(self) -> int:
        return len(self.devices)

    @cached_property
    def notes(self) -> tuple[str, ...]:
        """What the user should know about this slot's figures (measurement_notes, and the
        workload's own notes: what its reader left out)."""
        avail = [d for d, a in zip(self.devices, self.available) if a]
        return tuple(self.workload.notes) + measurement_notes(avail, self.workload)

    def degree(self, i: int) -> int:
        """How many physical devices device i stands for (1 without tensor parallelism)."""
        return 1 if self.tp is None else self.tp[i]

    def workload_at(self, t: int) -> Workload:
        """The per-device workload of a stage of degree t (Workload.at_tp), cached per state."""
        if t == 1:
            return self.workload
        cache = self.__dict__.setdefault("_at_tp", {})
        if t not in cache:
            cache[t] = self.workload.at_tp(t)
        return cache[t]

    def param_prefix_at(self, t: int) -> np.ndarray:
        """(L+1,) prefix sums of the parameter bytes one device of a degree-t stage holds."""
        return self.param_prefix if t == 1 else self._prefixes_at(t)[0]

    def stash_prefix_at(self, t: int) -> np.ndarray:
        """(L+1,) prefix sums of the saved activation bytes per sample of one device of a
        degree-t stage."""
        return self.stash_prefix if t == 1 else self._prefixes_at(t)[1]

    def _prefixes_at(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        cache = self.__dict__.setdefault("_prefix_at", {})
        if t not in cache:
            wl = self.workload_at(t)
            cache[t] = (np.concatenate([[0.0], np.cumsum(wl.param_bytes)]),
                        np.concatenate([[0.0], np.cumsum(wl.stash_bytes)]))
        return cache[t]

    @cached_property
    def available_indices(self) -> tuple[int, ...]:
        """Indices of the available devices, ascending (kept: the state is frozen)."""
        return tuple(int(i) for i in np.flatnonzero(self.available))

    def device_index(self, name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise KeyError(f"no device named {name!r}")

    def at_micro_batch(self, u: int | None) -> "SlotState":
        """This slot with the workload at micro-batch u (None or the workload's own u: self);
        cached per state. ValueError when the workload has no times at u."""
        if u is None or u == self.workload.micro_batch:
            return self
        cache = self.__dict__.setdefault("_at_micro_batch", {})
        if u not in cache:
            cache[u] = replace(self, workload=self.workload.at_micro_batch(u))
            cache[u].__dict__["_micro_batch_root"] = self
        return cache[u]

    def link_memo(self, name: str) -> dict:
        """The memo dict `name` for results that depend on the devices, links, TP degrees and
        parameter bytes alone, not on the micro-batch size: one dict shared by this state and
        its at_micro_batch copies (cost.sync's ring choices)."""
        root = self.__dict__.get("_micro_batch_root", self)
        return root.__dict__.setdefault(name, {})

    @cached_property
    def device_names(self) -> list[str]:
        """Each device's name, in index order (for messages)."""
        return [d.name for d in self.devices]

    @cached_property
    def bandwidth_rows(self) -> list[list[float]]:
        """bandwidth as Python lists (the same numbers): for code that reads it entry by entry,
        where numpy scalars cost the most."""
        return self.bandwidth.tolist()

    @cached_property
    def latency_rows(self) -> list[list[float]]:
        """latency as Python lists (the same numbers), like bandwidth_rows."""
        return self.latency.tolist()

    @cached_property
    def memory_bytes(self) -> np.ndarray:
        """(n,) usable memory of each device, bytes."""
        return np.array([d.memory_bytes for d in self.devices], dtype=float)

    @cached_property
    def extra_power_w(self) -> np.ndarray:
        """(n,) busy minus idle power of each device, watts."""
        return np.array([d.busy_power_w - d.idle_power_w for d in self.devices], dtype=float)

    @cached_property
    def layer_fwd_seconds(self) -> np.ndarray:
        """(n, L) forward seconds per sample of each layer on each device this slot."""
        return self._layer_seconds(0)

    @cached_property
    def layer_bwd_seconds(self) -> np.ndarray:
        """(n, L) backward seconds per sample of each layer on each device this slot."""
        return self._layer_seconds(1)

    def _layer_seconds(self, which: int) -> np.ndarray:
        """layer_fwd_seconds (which 0) or layer_bwd_seconds (1); a row computed once per
        (kind, degree, speed factor, speed, TP link), every input it has."""
        wl = self.workload
        flops = wl.fwd_flops if which == 0 else wl.bwd_flops
        out = np.empty((self.n, wl.num_layers))
        done: dict[tuple, int] = {}
        for i, d in enumerate(self.devices):
            t = self.degree(i)
            key = (d.kind, t, float(self.speed_factor[i]), float(self.speed[i]),
                   None if self.tp_link is None else tuple(np.asarray(self.tp_link[i], dtype=float).tolist()))
            if key in done:
                out[i] = out[done[key]]
                continue
            done[key] = i
            m = self.workload_at(t).measured.get(d.kind) if t > 1 else None
            if m is not None:
                out[i] = np.asarray(m[which], dtype=float) / max(self.speed_factor[i], 1e-300)
                if not wl.tp_times_include_collectives(t):    # a shard's compute alone
                    out[i] += self.tp_collectives_per_sample(i, which)
                continue
            m = wl.measured.get(d.kind)
            if m is not None:
                out[i] = np.asarray(m[which], dtype=float) / (t * max(self.speed_factor[i], 1e-300))
            else:               # a unit's speed is already its t devices' FLOP/s
                out[i] = flops / max(self.speed[i], 1e-300)
            if t > 1:
                out[i] += self.tp_collectives_per_sample(i, which)
        return out

    def tp_collectives_per_sample(self, i: int, which: int) -> np.ndarray:
        """(L,) seconds per sample of the TP collectives of each layer in pass `which` (0:
        forward, 1: backward) on device i (a unit of degree t; zeros for t = 1); part of
        layer_fwd_seconds / layer_bwd_seconds unless the table's times measured at t include
        them (Workload.tp_times_include_collectives; a "shard_compute" variant's do not)."""
        t, wl = self.degree(i), self.workload
        if t <= 1 or (wl.tp_times_include_collectives(t)
                      and self.workload_at(t).measured.get(self.devices[i].kind) is not None):
            return np.zeros(wl.num_layers)
        count = wl.tp_collectives[which] if wl.tp_collectives is not None else None
        return tp_collective_seconds(wl.out_bytes, t, *self.tp_link[i], wl.micro_batch, count,
                                     self.tp_collective_latency)

    @cached_property
    def fwd_prefix(self) -> np.ndarray:
        """(n, L+1) prefix sums of layer_fwd_seconds: stage a..b = p[:, b] - p[:, a]."""
        return np.concatenate([np.zeros((self.n, 1)), np.cumsum(self.layer_fwd_seconds, axis=1)], axis=1)

    @cached_property
    def bwd_prefix(self) -> np.ndarray:
        return np.concatenate([np.zeros((self.n, 1)), np.cumsum(self.layer_bwd_seconds, axis=1)], axis=1)

    @cached_property
    def param_prefix(self) -> np.ndarray:
        """(L+1,) prefix sums of parameter bytes."""
        return np.concatenate([[0.0], np.cumsum(self.workload.param_bytes)])

    @cached_property
    def stash_prefix(self) -> np.ndarray:
        """(L+1,) prefix sums of stashed activation bytes per sample."""
        return np.concatenate([[0.0], np.cumsum(self.workload.stash_bytes)])


@dataclass(frozen=True, eq=False)
class Instance:
    """A cluster, a workload, budgets and the per-slot traces of its changing parts.

    Arrays over slots (S = num_slots, n devices): available (S, n) bool; speed_factor
    (S, n) multiplies each device's peak_flops * efficiency; price (S, n) USD/s;
    bandwidth (S, n, n) bytes/s; latency (n, n) seconds. efficiency (n,) is the
    sustained fraction of peak FLOP/s. source: the file it was loaded from, if any; network:
    servers, shared NICs, bandwidth fits and egress prices (model.network), None when the file
    declares none; iterations_per_slot: training iterations per slot ([train] table: how often
    `dynpar train` asks the controller), None when the file gives none; tp_collective_latency:
    seconds each tensor-parallel collective costs beyond its ring ([network]
    tp_collective_latency_ms; 0 by default), SlotState's; allreduce_latency: seconds each
    cross-group gradient all-reduce costs beyond its ring ([network] allreduce_latency_ms; 0 by
    default), SlotState's; preemption: what a preemption costs ([preemption] restart_s,
    checkpoint_every; model.preemption), None when the file declares none.
    """

    name: str
    devices: tuple[Device, ...]
    workload: Workload
    budgets: tuple[Budget, ...]
    efficiency: np.ndarray
    available: np.ndarray
    speed_factor: np.ndarray
    price: np.ndarray
    bandwidth: np.ndarray
    latency: np.ndarray
    source: str | None = None
    network: Network | None = None
    iterations_per_slot: int | None = None
    tp_collective_latency: float = 0.0
    allreduce_latency: float = 0.0
    preemption: Preemption | None = None

    def __post_init__(self) -> None:
        problem = budget_names_problem([b.name for b in self.budgets])
        if problem:
            raise ValueError(f"budgets: {problem}")

    @property
    def notes(self) -> tuple[str, ...]:
        """measurement_notes of all the instance's devices, and the workload's own notes."""
        return tuple(self.workload.notes) + measurement_notes(self.devices, self.workload)

    @property
    def num_slots(self) -> int:
        return int(self.available.shape[0])

    @property
    def n(self) -> int:
        return len(self.devices)

    def state(self, t: int) -> SlotState:
        """The SlotState of slot t (0-based)."""
        if isinstance(t, bool) or not isinstance(t, numbers.Integral):
            raise TypeError(f"slot: expected an integer slot index, got {t!r} ({type(t).__name__})")
        if not (0 <= t < self.num_slots):
            raise IndexError(f"slot {t} out of range: instance {self.name!r} has {self.num_slots} slots")
        peak = np.array([d.peak_flops for d in self.devices])
        bw = np.array(self.bandwidth[t], dtype=float)
        np.fill_diagonal(bw, np.inf)
        lat = np.array(self.latency, dtype=float)
        np.fill_diagonal(lat, 0.0)
        return SlotState(t, self.devices, self.workload, self.budgets,
                         np.asarray(self.available[t], dtype=bool),
                         peak * self.efficiency * self.speed_factor[t],
                         np.asarray(self.speed_factor[t], dtype=float),
                         np.asarray(self.price[t], dtype=float), bw, lat, self.network,
                         tp_collective_latency=float(self.tp_collective_latency),
                         allreduce_latency=float(self.allreduce_latency))

    def states(self):
        return (self.state(t) for t in range(self.num_slots))

    def head(self, slots: int) -> "Instance":
        """The same instance restricted to its first min(slots, num_slots) slots: `slots` is an
        upper bound (benchmarks cut every instance to at most so many), at least 1."""
        if isinstance(slots, bool) or not isinstance(slots, numbers.Integral):
            raise TypeError(f"slots: expected an integer, got {slots!r} ({type(slots).__name__})")
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        s = min(int(slots), self.num_slots)
        return replace(self, available=self.available[:s], speed_factor=self.speed_factor[:s],
                       price=self.price[:s], bandwidth=self.bandwidth[:s])
