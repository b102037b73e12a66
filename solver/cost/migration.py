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
from ..model.plan import layer_holders


def holder_mask(plan: Plan, state: SlotState) -> np.ndarray:
    """(n, L) bool: device i holds layer l in some group of the plan."""
    L = state.workload.num_layers
    held = np.zeros((state.n, L), dtype=bool)
    for layer, devices in enumerate(layer_holders(plan, L)):
        held[list(devices), layer] = True
    return held


def migration_time(previous: Plan | None, plan: Plan, state: SlotState,
                   previous_held: np.ndarray | None = None) -> float:
    """Seconds to move state into every device of `plan` that newly holds a layer; 0 when
    previous is None or no device gains a layer. previous_held: holder_mask(previous) if
    already computed."""
    if previous is None:
        return 0.0
    prev = holder_mask(previous, state) if previous_held is None else previous_held
    wl = state.workload
    nbytes = wl.opt_factor * wl.param_bytes
    worst = 0.0
    for g in plan.groups:
        for d, a, c in g.stages():
            new = np.flatnonzero(~prev[d, a:c]) + a
            new = new[nbytes[new] > 0]
            if len(new) == 0:
                continue
            bw = np.where(prev[:, new], state.bandwidth[:, d][:, None], -np.inf)   # (n, layers)
            src = np.argmax(bw, axis=0)
            per_src: dict[int, float] = {}
            for s, l in zip(src, new):
                per_src[int(s)] = per_src.get(int(s), 0.0) + float(nbytes[l])
            t = sum(b / state.bandwidth[s, d] + state.latency[s, d] for s, b in per_src.items())
            worst = max(worst, t)
    return worst
