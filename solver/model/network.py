"""Network facts beyond the per-pair bandwidth matrix: servers and their shared NICs,
message-size-dependent bandwidth fits and egress prices (all optional; an instance without
them has `network=None` and every time and cost is what it was before they existed).

Units: bytes, bytes/s, seconds, USD per byte.

- **Servers and NICs.** Each device sits in one server; `nic[s]` is the bytes/s of server s's
  network card in each direction (full duplex; inf where none was declared). Traffic between
  two devices of different servers leaves through the sender's NIC and enters through the
  receiver's. When c devices of one server send across servers at once, each gets at most
  nic / c (and likewise for c receivers), besides its own link's bandwidth.
- **Bandwidth fits** (Sailor's form): for a pair with a fit (a, b, c), the bandwidth of a
  message of m bytes is `(a x^2 + b x + c) * 1e9` bytes/s with `x = log2(m / 1e6)`, capped at
  the pair's bandwidth (the instance's gbps or its trace) and floored at FIT_FLOOR x that cap
  (the quadratic falls to 0 and below far outside the message sizes it was fitted on).
- **Egress prices**: USD per byte sent from device i to device j (0 inside a zone).

Where they enter: cost.pipeline.stage_times (a group's boundaries all run at once: fits at
the micro-batch's message size, NICs shared among the group's senders), cost.sync.sync_time
(every bucket's ring at once: fits at the bucket's size, NICs shared among the ring senders)
and cost.costs (egress into money). Two simplifications, both conservative or neutral for a
plan's figures: transfers of different groups are not counted against each other's NICs,
and the cut DPs (subproblems.cuts) see the fits but not the NIC sharing (which depends on
all of a group's cuts at once); every plan is then scored with the figures above, so the
search and evaluate agree. Re-planning transfers
(cost.migration) use the pair bandwidth and pay no egress.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

FIT_FLOOR = 0.01
"""A fitted bandwidth is never taken below this fraction of the pair's cap."""


@dataclass(frozen=True, eq=False)
class Network:
    """server: (n,) int, the server index of each device; server_names: one per index;
    nic: (servers,) bytes/s per direction (inf: not declared); fit: (n, n, 3) coefficients
    (a, b, c) of the bandwidth fit in GB/s, NaN where a pair has none, or None; egress: (n, n)
    USD per byte sent from i to j, or None; zones: the zone of each server (None: none given)."""

    server: np.ndarray
    server_names: tuple[str, ...]
    nic: np.ndarray
    fit: np.ndarray | None = None
    egress: np.ndarray | None = None
    zones: tuple[str | None, ...] = ()

    @cached_property
    def shares_nics(self) -> bool:
        """True when some server declares a finite NIC bandwidth."""
        return bool(np.isfinite(self.nic).any())

    @cached_property
    def server_list(self) -> list[int]:
        """server as Python ints (the same indices)."""
        return [int(s) for s in self.server]

    @cached_property
    def nic_list(self) -> list[float]:
        """nic as Python floats (the same numbers)."""
        return [float(x) for x in self.nic]


def fitted_bandwidth(fit: np.ndarray, cap: np.ndarray, message_bytes: np.ndarray) -> np.ndarray:
    """Bytes/s of messages of `message_bytes` under fits (..., 3) with caps (...) in bytes/s;
    entries whose fit is NaN get their cap."""
    fit = np.asarray(fit, dtype=float)
    cap = np.asarray(cap, dtype=float)
    m = np.maximum(np.asarray(message_bytes, dtype=float), 1.0)
    x = np.log2(m / 1e6)
    bw = (fit[..., 0] * x * x + fit[..., 1] * x + fit[..., 2]) * 1e9
    out = np.clip(bw, FIT_FLOOR * cap, cap)
    return np.where(np.isnan(fit[..., 0]), cap, out)


def effective_bandwidth(network: Network | None, bandwidth: np.ndarray, src: np.ndarray, dst: np.ndarray,
                        message_bytes: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Bytes/s of transfers src[k] -> dst[k] of message_bytes[k] bytes that all run at once:
    the pair's bandwidth (at that message size where a fit is given), and, for transfers
    between servers, at most the sender's NIC over the number of distinct devices of its
    server sending across servers in this set (likewise for receivers). weights[i]: how many
    physical devices index i stands for (a tensor-parallel stage, model.tp), each sending at
    once; None: one each."""
    src = np.asarray(src, dtype=int)
    dst = np.asarray(dst, dtype=int)
    bw = np.asarray(bandwidth[src, dst], dtype=float)
    if network is None or len(src) == 0:
        return bw
    if network.fit is not None:
        bw = fitted_bandwidth(network.fit[src, dst], bw, np.broadcast_to(message_bytes, bw.shape))
    return nic_limits(network, bw, src, dst, weights)


def nic_limits(network: Network, bw: np.ndarray, src: np.ndarray, dst: np.ndarray,
               weights: np.ndarray | None = None) -> np.ndarray:
    """effective_bandwidth's second step: the pairs' bandwidths `bw` (bytes/s, fits applied)
    with each cross-server transfer limited by its servers' NICs shared as described there."""
    if network.shares_nics:
        if len(src) <= SMALL:
            return _nic_limited(network, bw, src.tolist(), dst.tolist(), weights)
        s_src, s_dst = network.server[src], network.server[dst]
        cross = s_src != s_dst
        if cross.any():
            n_out = _distinct_per_server(src[cross], s_src[cross], len(network.nic), weights)
            n_in = _distinct_per_server(dst[cross], s_dst[cross], len(network.nic), weights)
            lim = np.minimum(network.nic[s_src] / np.maximum(n_out[s_src], 1),
                             network.nic[s_dst] / np.maximum(n_in[s_dst], 1))
            bw = np.where(cross, np.minimum(bw, lim), bw)
    return bw


SMALL = 64
"""Transfer sets up to this size take effective_bandwidth's NIC limits in plain Python
(`_nic_limited`: the same floats, without numpy's per-call overhead)."""


def _nic_limited(network: Network, bw: np.ndarray, src: list[int], dst: list[int],
                 weights: np.ndarray | None) -> np.ndarray:
    """effective_bandwidth's NIC limits for a short transfer list: each cross-server transfer
    at most its sender's NIC over the distinct devices (weighted) of the sender's server in
    the list that send across servers, likewise for receivers."""
    server = network.server_list
    s_src, s_dst = [server[a] for a in src], [server[b] for b in dst]
    senders: dict[int, set[int]] = {}
    receivers: dict[int, set[int]] = {}
    for a, b, sa, sb in zip(src, dst, s_src, s_dst):
        if sa != sb:
            senders.setdefault(sa, set()).add(a)
            receivers.setdefault(sb, set()).add(b)
    if not senders:
        return bw

    def count(devs: set[int]) -> float:
        if weights is None:
            return float(len(devs))
        total = 0.0
        for d in sorted(devs):          # np.bincount's order: increasing device index
            total += float(weights[d])
        return total

    n_out = {s: count(d) for s, d in senders.items()}
    n_in = {s: count(d) for s, d in receivers.items()}
    nic = network.nic_list
    out = bw.copy()
    for k, (sa, sb) in enumerate(zip(s_src, s_dst)):
        if sa != sb:
            lim = min(nic[sa] / max(n_out[sa], 1.0), nic[sb] / max(n_in[sb], 1.0))
            if lim < out[k]:
                out[k] = lim
    return out


def _distinct_per_server(devices: np.ndarray, servers: np.ndarray, num_servers: int,
                         weights: np.ndarray | None = None) -> np.ndarray:
    """(servers,) how many distinct devices of each server appear in `devices` (each counted
    weights[device] times when given)."""
    size = int(devices.max()) + 1 if len(devices) else 0
    server_of = np.zeros(size, dtype=int)
    server_of[devices] = servers                 # each device lies in one server
    seen = np.zeros(size, dtype=bool)
    seen[devices] = True
    distinct = np.flatnonzero(seen)
    w = None if weights is None else np.asarray(weights, dtype=float)[distinct]
    return np.bincount(server_of[distinct], weights=w, minlength=num_servers)


def egress_usd(network: Network | None, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> float:
    """USD of sending nbytes[k] from src[k] to dst[k] (0 without egress prices)."""
    if network is None or network.egress is None or len(src) == 0:
        return 0.0
    return float(np.sum(network.egress[np.asarray(src, dtype=int), np.asarray(dst, dtype=int)] * nbytes))
