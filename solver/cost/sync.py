"""Cross-group gradient synchronisation: bucketed ring all-reduces (seconds per iteration)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model.network import effective_bandwidth
from ..model.state import SlotState

Structure = Sequence[tuple[Sequence[int], Sequence[int]]]
"""Groups without shares: ((devices, cuts), ...)."""


def buckets(state: SlotState, structure: Structure) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The sync's rings: (cols, nxt, nbytes) with cols[g, b] the device of group g holding
    bucket b, nxt[g, b] its ring successor (the holder in group g+1, cyclically) and nbytes[b]
    the bucket's parameter bytes; None for one group or no parameter bytes."""
    m = len(structure)
    if m <= 1:
        return None
    pp = state.param_prefix
    cut_all = np.array(sorted({int(x) for _, c in structure for x in c}), dtype=int)
    starts = np.concatenate([[0], cut_all[:-1]])
    nbytes = pp[cut_all] - pp[starts]
    keep = nbytes > 0
    if not keep.any():
        return None
    starts, nbytes = starts[keep], nbytes[keep]
    cols = np.empty((m, len(starts)), dtype=int)
    for gi, (d, c) in enumerate(structure):
        cols[gi] = np.asarray(d, dtype=int)[np.searchsorted(np.asarray(c, dtype=int), starts, side="right")]
    return cols, np.concatenate((cols[1:], cols[:1])), nbytes


def sync_time(state: SlotState, structure: Structure) -> float:
    """Seconds of the cross-group gradient all-reduce (bucketed rings), 0 for one group.

    Layers held by the same devices in every group form one bucket, reduced on the ring of
    those devices in group order: 2(m-1)/m * bytes / slowest ring link + 2(m-1) * largest
    ring latency. The result is the largest per-device sum of buckets. Every device holds one
    contiguous layer range of its group, so the buckets are the segments between the union
    of all groups' cut points (segments without parameter bytes cost nothing). With a
    state.network, every bucket's ring runs at once: the bandwidth at the bucket's size, and a
    server's NIC shared by its distinct devices with a ring edge to another server.

    Tensor parallelism (state.tp): a stage of t devices holds its bucket in t shards and runs
    t rings at once, one per shard; a ring edge between stages of degrees t_a and t_b moves
    the bucket over min(t_a, t_b) links in parallel (each physical device of a server counts
    against its NIC), so its bandwidth is min(t_a, t_b) times the per-link figure.
    """
    rings = buckets(state, structure)
    if rings is None:
        return 0.0
    cols, nxt, nbytes = rings
    m = len(structure)
    par = 1.0 if state.tp is None else np.minimum(np.asarray(state.tp)[cols], np.asarray(state.tp)[nxt])
    if state.network is None:
        bw = (state.bandwidth[cols, nxt] * par).min(axis=0)
    else:
        weights = None if state.tp is None else np.asarray(state.tp)
        bw = (effective_bandwidth(state.network, state.bandwidth, cols.ravel(), nxt.ravel(),
                                  np.broadcast_to(nbytes / par, cols.shape).ravel(), weights).reshape(cols.shape)
              * par).min(axis=0)
    lat = state.latency[cols, nxt].max(axis=0)
    cost = 2.0 * (m - 1) / m * nbytes / bw + 2.0 * (m - 1) * lat
    per_device = np.bincount(cols.ravel(), weights=np.broadcast_to(cost, cols.shape).ravel(), minlength=state.n)
    return float(per_device.max())
