"""Tensor parallelism (TP): a pipeline stage held by t devices of one kind inside one server.

The t devices of a stage split every layer of it Megatron-style (Shoeybi et al. 2019): each
holds 1/t of the parameters, gradients and optimizer state and the split part of the saved
activations (Workload.at_tp), computes 1/t of the layer and joins the layer's all-reduces of
the output activation over the server's links (model.state.tp_collective_seconds), unless
the table has times measured at t (Sailor's profiles), which include them. The pipeline
boundary is sent once per stage, by its first device; the data-parallel gradient sync runs
among the holders of the same shard (cost.sync).

The cost model sees such a stage as one *unit*: `unit_state` turns a slot and a set of units
(tuples of physical device indices, leader first) into a SlotState whose devices are the
units, each with degree t (state.tp), the members' summed price and power, the leader's links
and the smallest member memory; every cost function then works unchanged on it. A physical
plan names its units through `Group.tp_peers`; model.plan's `to_units` and `to_physical`
convert.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from .network import Network
from .state import SlotState

Unit = tuple[int, ...]


def unit_problems(state: SlotState, unit: Sequence[int]) -> list[str]:
    """Why `unit` cannot hold a TP stage in `state` ([] when it can): known distinct devices,
    one kind, one server (declared by the instance's network; without servers only t = 1)."""
    if len(unit) == 1:
        return []
    u = [int(x) for x in unit]
    names = [state.devices[i].name if 0 <= i < state.n else f"index {i}" for i in u]
    if not u:
        return ["a TP stage has no device"]
    if any(not (0 <= i < state.n) for i in u):
        return [f"TP stage {names}: device index out of range 0..{state.n - 1}"]
    if len(set(u)) != len(u):
        return [f"TP stage {names}: a device appears twice"]
    out = []
    kinds = sorted({state.devices[i].kind for i in u})
    if len(kinds) > 1:
        out.append(f"TP stage {names}: expected devices of one kind, got {kinds}")
    if state.network is None:
        out.append(f"TP stage {names}: the instance declares no servers, and a TP stage must lie in one server")
    else:
        servers = sorted({state.network.server_names[state.network.server[i]] for i in u})
        if len(servers) > 1:
            out.append(f"TP stage {names}: expected devices of one server, got servers {servers}")
    return out


def unit_state(state: SlotState, units: Sequence[Sequence[int]]) -> SlotState:
    """The slot seen with `units` (disjoint tuples of physical device indices, leader first) as
    its devices (module doc). ValueError naming the unit when one cannot hold a TP stage."""
    if state.tp is not None:
        raise ValueError("unit_state: expected a physical slot state, got one already made of TP units")
    units = [tuple(int(x) for x in u) for u in units]
    seen: set[int] = set()
    for u in units:
        why = unit_problems(state, u)
        if why:
            raise ValueError(why[0])
        if seen & set(u):
            raise ValueError(f"unit_state: device(s) {sorted(seen & set(u))} in two units")
        seen |= set(u)
    lead = np.array([u[0] for u in units], dtype=int)
    devices = tuple(_unit_device(state, u) for u in units)
    tp_link = np.array([_unit_link(state, u) for u in units], dtype=float).reshape(len(units), 2)
    bw = state.bandwidth[np.ix_(lead, lead)].copy()
    np.fill_diagonal(bw, np.inf)
    lat = state.latency[np.ix_(lead, lead)].copy()
    np.fill_diagonal(lat, 0.0)
    net = state.network
    if net is not None:
        net = Network(net.server[lead], net.server_names, net.nic,
                      None if net.fit is None else net.fit[np.ix_(lead, lead)],
                      None if net.egress is None else net.egress[np.ix_(lead, lead)], net.zones)
    return replace(state, devices=devices,
                   available=np.array([all(state.available[i] for i in u) for u in units], dtype=bool),
                   speed=np.array([len(u) * min(state.speed[i] for i in u) for u in units], dtype=float),
                   speed_factor=np.array([min(state.speed_factor[i] for i in u) for u in units], dtype=float),
                   price=np.array([sum(state.price[i] for i in u) for u in units], dtype=float),
                   bandwidth=bw, latency=lat, network=net, tp=tuple(len(u) for u in units),
                   members=tuple(units), base=state, tp_link=tp_link,
                   risk=None if state.risk is None else state.risk.for_units(units))


def _unit_device(state: SlotState, unit: Unit):
    if len(unit) == 1:
        return state.devices[unit[0]]
    ds = [state.devices[i] for i in unit]
    return replace(ds[0], name="+".join(d.name for d in ds), memory_bytes=min(d.memory_bytes for d in ds),
                   busy_power_w=sum(d.busy_power_w for d in ds), idle_power_w=sum(d.idle_power_w for d in ds),
                   price_per_s=sum(d.price_per_s for d in ds))


def _unit_link(state: SlotState, unit: Unit) -> tuple[float, float]:
    """(slowest bytes/s, largest latency) over the ordered pairs of the unit ((inf, 0) for one)."""
    if len(unit) == 1:
        return float("inf"), 0.0
    idx = np.array(unit, dtype=int)
    off = ~np.eye(len(idx), dtype=bool)
    return float(state.bandwidth[np.ix_(idx, idx)][off].min()), float(state.latency[np.ix_(idx, idx)][off].max())
