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
    as able to send it)."""
    if previous is None:
        return 0.0
    if state.base is not None:
        plan, state = to_physical(plan, state), state.base
    prev = holder_mask(previous, state) if previous_held is None else previous_held
    any_prev = prev > 0
    worst = 0.0
    full = state.workload.opt_factor * state.workload.param_bytes
    for g in plan.groups:
        for unit, (_, a, c) in zip(g.units(), g.stages()):
            t = len(unit)
            for r, d in enumerate(unit):
                frac = _missing_fraction(prev[d, a:c], t, r)
                new = np.flatnonzero(frac > 0) + a
                new = new[full[new] > 0]
                if len(new) == 0:
                    continue
                others = any_prev[:, new].copy()
                others[d] = False
                bw = np.where(others, state.bandwidth[:, d][:, None], -np.inf)   # (n, layers)
                src = np.argmax(bw, axis=0)
                per_src: dict[int, float] = {}
                for s, l in zip(src, new):
                    per_src[int(s)] = per_src.get(int(s), 0.0) + float(full[l] * frac[l - a])
                worst = max(worst, sum(b / state.bandwidth[s, d] + state.latency[s, d] for s, b in per_src.items()))
    return worst


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
