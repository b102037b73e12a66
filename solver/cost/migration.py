"""Re-planning cost: moving parameters and optimizer state when a plan changes (DESIGN.md,
"Beyond the article").

A device that holds a layer in the new plan but did not hold it in the previous one receives
k_opt * p_l bytes (weights, gradients, optimizer state) from the previous holder of that layer
with the fastest link to it (any previous holder; a departing device hands over before it
leaves). Layers from one source travel as one message (one latency). Transfers into one device
are serial, devices receive in parallel: the migration time is the largest per-receiver sum.
"""
from __future__ import annotations

import numpy as np

from ..model import Plan, SlotState
from ..model.plan import to_physical


FULL = 256
"""Holding code of a whole layer (degree 1); a TP shard is FULL * t + rank."""


def holder_mask(plan: Plan, state: SlotState) -> np.ndarray:
    """(n, L) int over the physical devices: 0 where device i does not hold layer l, FULL where
    it holds all of it, FULL * t + r where it holds shard r of a degree-t TP stage. `plan` is
    over physical devices (given a state of TP units, its physical state is used)."""
    if state.base is not None:
        state = state.base
    L = state.workload.num_layers
    held = np.zeros((state.n, L), dtype=np.int64)
    for g in plan.groups:
        for unit, (_, a, c) in zip(g.units(), g.stages()):
            t = len(unit)
            for r, d in enumerate(unit):
                held[d, a:c] = FULL if t == 1 else FULL * t + r
    return held


def migration_time(previous: Plan | None, plan: Plan, state: SlotState,
                   previous_held: np.ndarray | None = None) -> float:
    """Seconds to move state into every device of `plan` that newly holds a layer or a shard;
    0 when previous is None or no device gains one. previous_held: holder_mask(previous) if
    already computed. `previous` is over physical devices, `plan` over the devices of `state`
    (physical, or TP units: then read as its physical plan). Shard r of a degree-t TP stage is
    the slice [r/t, (r+1)/t) of each of its layers' model state; a device receives the part of
    its slice it did not hold (k_opt p_l times that fraction) from the other previous holder of
    the layer with the fastest link (a simplification: any holder of part of the layer is taken
    as able to send it). Many plans from one previous plan: `MigrationFrom`."""
    if previous is None:
        return 0.0
    return MigrationFrom(previous, state, previous_held).seconds(plan, state)


class MigrationFrom:
    """`migration_time` from one previous plan in one slot, for many plans: each receiver's
    seconds (device, layers a..c-1, shard r of degree t) are kept, since the plans a search or
    the online controller compares share most of their stages. `state` may be a state of TP
    units (its physical state is used); previous_held: holder_mask(previous) if computed."""

    MAX_KEPT = 1 << 20
    """Receivers kept at most; the memo starts again beyond it."""

    def __init__(self, previous: Plan, state: SlotState, previous_held: np.ndarray | None = None) -> None:
        self.state = state.base if state.base is not None else state
        self.held = holder_mask(previous, self.state) if previous_held is None else previous_held
        self._any = self.held > 0
        self._full = self.state.workload.opt_factor * self.state.workload.param_bytes
        self._receive: dict[tuple[int, int, int, int, int], float] = {}

    def seconds(self, plan: Plan, state: SlotState) -> float:
        """migration_time(previous, plan, state): the largest receiver's seconds."""
        if state.base is not None:
            plan = to_physical(plan, state)
        worst = 0.0
        for g in plan.groups:
            for unit, (_, a, c) in zip(g.units(), g.stages()):
                t = len(unit)
                for r, d in enumerate(unit):
                    key = (d, a, c, t, r)
                    v = self._receive.get(key)
                    if v is None:
                        if len(self._receive) >= self.MAX_KEPT:
                            self._receive.clear()
                        v = self._receive[key] = self._receiver_seconds(d, a, c, t, r)
                    worst = max(worst, v)
        return worst

    def _receiver_seconds(self, d: int, a: int, c: int, t: int, r: int) -> float:
        """Seconds device d takes to receive what shard r of degree t of layers a..c-1 lacks:
        one message per source (the previous holder with the fastest link to d), serial."""
        st = self.state
        frac = _missing_fraction(self.held[d, a:c], t, r)
        new = np.flatnonzero(frac > 0) + a
        new = new[self._full[new] > 0]
        if len(new) == 0:
            return 0.0
        others = self._any[:, new].copy()
        others[d] = False
        bw = np.where(others, st.bandwidth[:, d][:, None], -np.inf)   # (n, layers)
        src = np.argmax(bw, axis=0)
        per_src: dict[int, float] = {}
        for s, l in zip(src, new):
            per_src[int(s)] = per_src.get(int(s), 0.0) + float(self._full[l] * frac[l - a])
        return sum(b / st.bandwidth[s, d] + st.latency[s, d] for s, b in per_src.items())


def _missing_fraction(held: np.ndarray, t: int, r: int) -> np.ndarray:
    """Per layer, the fraction of the whole layer's state that shard r of degree t lacks, given
    the holding codes `held` of the device: shard r covers [r/t, (r+1)/t) of the layer, a held
    shard q of degree s covers [q/s, (q+1)/s); the missing part is the first minus the overlap."""
    lo, hi = r / t, (r + 1) / t
    s = held // FULL
    q = held % FULL
    s_safe = np.maximum(s, 1)
    overlap = np.where(held > 0, np.clip(np.minimum(hi, (q + 1) / s_safe) - np.maximum(lo, q / s_safe), 0, None), 0.0)
    out = (hi - lo) - overlap
    return np.where(out > 1e-12, out, 0.0)
