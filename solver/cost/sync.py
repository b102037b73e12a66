"""Cross-group gradient synchronisation: bucketed ring all-reduces (seconds per iteration)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model.state import SlotState

Structure = Sequence[tuple[Sequence[int], Sequence[int]]]
"""Groups without shares: ((devices, cuts), ...)."""


def holders(devices: Sequence[int], cuts: Sequence[int], num_layers: int) -> np.ndarray:
    """(L,) the device holding each layer in this group."""
    c = np.asarray(cuts, dtype=int)
    sizes = np.diff(np.concatenate([[0], c]))
    out = np.repeat(np.asarray(devices, dtype=int), sizes)
    assert len(out) == num_layers
    return out


def sync_time(state: SlotState, structure: Structure) -> float:
    """Seconds of the cross-group gradient all-reduce (bucketed rings), 0 for one group.

    Layers held by the same devices in every group form one bucket, reduced on the ring of
    those devices in group order: 2(m-1)/m * bytes / slowest ring link + 2(m-1) * largest
    ring latency. The result is the largest per-device sum of buckets. Every device holds one
    contiguous layer range of its group, so the buckets are the segments between the union
    of all groups' cut points (segments without parameter bytes cost nothing).
    """
    m = len(structure)
    if m <= 1:
        return 0.0
    pp = state.param_prefix
    cut_all = np.array(sorted({int(x) for _, c in structure for x in c}), dtype=int)
    starts = np.concatenate([[0], cut_all[:-1]])
    nbytes = pp[cut_all] - pp[starts]
    keep = nbytes > 0
    if not keep.any():
        return 0.0
    starts, nbytes = starts[keep], nbytes[keep]
    cols = np.empty((m, len(starts)), dtype=int)
    for gi, (d, c) in enumerate(structure):
        cols[gi] = np.asarray(d, dtype=int)[np.searchsorted(np.asarray(c, dtype=int), starts, side="right")]
    nxt = np.concatenate((cols[1:], cols[:1]))
    bw = state.bandwidth[cols, nxt].min(axis=0)
    lat = state.latency[cols, nxt].max(axis=0)
    cost = 2.0 * (m - 1) / m * nbytes / bw + 2.0 * (m - 1) * lat
    per_device = np.bincount(cols.ravel(), weights=np.broadcast_to(cost, cols.shape).ravel(), minlength=state.n)
    return float(per_device.max())
