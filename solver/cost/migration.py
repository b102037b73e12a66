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
(physical, or TP units: then read as its physical plan). A device of a degree-t TP stage needs k_opt times its shard's bytes unless
    it held the whole layer or that very shard; the source is the previous holder of any part of
    the layer with the fastest link (a simplification: a shard of another split is taken as
    able to send it)."""
    if previous is None:
        return 0.0
    if state.base is not None:
        plan, state = to_physical(plan, state), state.base
    prev = holder_mask(previous, state) if previous_held is None else previous_held
    any_prev = prev > 0
    worst = 0.0
    for g in plan.groups:
        for unit, (_, a, c) in zip(g.units(), g.stages()):
            t = len(unit)
            nbytes = state.workload_at(t).opt_factor * state.workload_at(t).param_bytes
            for r, d in enumerate(unit):
                code = FULL if t == 1 else FULL * t + r
                have = (prev[d, a:c] == FULL) | (prev[d, a:c] == code)
                new = np.flatnonzero(~have) + a
                new = new[nbytes[new] > 0]
                if len(new) == 0:
                    continue
                bw = np.where(any_prev[:, new], state.bandwidth[:, d][:, None], -np.inf)   # (n, layers)
                src = np.argmax(bw, axis=0)
                per_src: dict[int, float] = {}
                for s, l in zip(src, new):
                    per_src[int(s)] = per_src.get(int(s), 0.0) + float(nbytes[l])
                worst = max(worst, sum(b / state.bandwidth[s, d] + state.latency[s, d] for s, b in per_src.items()))
    return worst
