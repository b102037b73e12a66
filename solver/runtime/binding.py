"""Which instance device a process runs: by node name and LOCAL_RANK, never by join order.

Device map (flag --device-map): comma-separated `KEY=DEVICE` entries, KEY = `NODE:LOCAL_RANK`
(or `LOCAL_RANK` alone, for any node), DEVICE = a device name of the instance. NODE is the
--node-name flag, else $DYNPAR_NODE, else the host name. Under torchrun the global RANK follows
rendezvous join order and so says nothing about the device; LOCAL_RANK and the node do.
Without a map, a single-node job binds LOCAL_RANK k to the instance's k-th device; a job of
several nodes needs the map.
"""
from __future__ import annotations

import os
import socket

from ..model import Instance
from .spec import SpecError


def parse_map(text: str) -> dict[str, str]:
    """`KEY=DEVICE,...` -> {KEY: DEVICE} (SpecError on a malformed or repeated key)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, dev = part.partition("=")
        if not sep or not key.strip() or not dev.strip():
            raise SpecError(f"--device-map: expected KEY=DEVICE, got {part!r}")
        if key.strip() in out:
            raise SpecError(f"--device-map: key {key.strip()!r} appears twice")
        out[key.strip()] = dev.strip()
    return out


def node_name(flag: str | None = None) -> str:
    return flag or os.environ.get("DYNPAR_NODE") or socket.gethostname()


def my_device(instance: Instance, device_map: dict[str, str], node: str, local_rank: int,
              single_node: bool) -> str:
    """The device name this process runs (SpecError naming the missing key)."""
    names = [d.name for d in instance.devices]
    for key in (f"{node}:{local_rank}", str(local_rank)):
        if key in device_map:
            dev = device_map[key]
            if dev not in names:
                raise SpecError(f"--device-map: {key}={dev}: no device {dev!r} in {instance.name!r} "
                                f"(devices: {', '.join(names)})")
            return dev
    if device_map or not single_node:
        raise SpecError(f"--device-map: no entry for {node}:{local_rank} (node {node!r}, LOCAL_RANK "
                        f"{local_rank})" + ("" if device_map else "; a job of several nodes needs a map"))
    if local_rank >= len(names):
        raise SpecError(f"LOCAL_RANK {local_rank}: the instance has only {len(names)} devices")
    return names[local_rank]


def from_env(instance: Instance, device_map: str, node: str | None) -> tuple[str, str]:
    """For a process torchrun started (LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE): its
    device name (my_device) and where it runs, `NODE:LOCAL_RANK`."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    single = os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE")) == os.environ.get("WORLD_SIZE")
    name = node_name(node)
    return my_device(instance, parse_map(device_map), name, local, single), f"{name}:{local}"
