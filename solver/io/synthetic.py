"""Seeded random workloads, slot states and instances for tests and benchmarks.

Device kinds are drawn from a few real GPU profiles (peak FP32 FLOP/s, memory, TDP,
USD/h from models/hardware.csv's sources); layers are drawn around a CNN/transformer
mix. Everything is reproducible from the seed.
"""
from __future__ import annotations

import numpy as np

from ..model import Budget, Device, Instance, Layer, SlotState, Workload

GB = 1e9
# name: (peak FP32 FLOP/s, memory bytes, TDP watts, USD per hour)
KINDS = {
    "K80": (4.07e12, 12 * GB, 150.0, 0.90),
    "T4": (8.14e12, 16 * GB, 70.0, 0.98),
    "V100": (15.67e12, 16 * GB, 300.0, 3.06),
    "A100": (19.49e12, 40 * GB, 400.0, 4.10),
}


def random_device(rng: np.random.Generator, name: str, kinds: tuple[str, ...] = tuple(KINDS)) -> Device:
    kind = kinds[int(rng.integers(len(kinds)))]
    peak, mem, tdp, usd_h = KINDS[kind]
    return Device(name, kind, peak, mem, tdp, 0.3 * tdp, usd_h / 3600.0)


def random_workload(rng: np.random.Generator, L: int, batch: int = 64, micro_batch: int = 4,
                    scale: float = 1.0) -> Workload:
    """L layers with per-sample FLOPs around 1-20 GFLOP in total, activations 0.1-5 MB,
    parameters 0-50 MB per layer; `scale` multiplies FLOPs, activations and parameters."""
    layers = []
    for i in range(L):
        f = float(rng.uniform(0.05, 1.0)) * 1e9 * scale * 20 / max(L, 1)
        out = float(rng.uniform(0.1, 5.0)) * 1e6 * scale
        p = float(rng.choice([0.0, rng.uniform(0.1, 50.0)])) * 1e6 * scale
        layers.append(Layer(f"layer{i}", f, 2 * f, out, out, p))
    return Workload(f"random-L{L}", tuple(layers), batch, micro_batch, 4.0, 0.6e6 * scale)


def random_network(rng: np.random.Generator, n: int, servers: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(bandwidth bytes/s, latency s): fast inside a server, 1-25 Gbit/s between."""
    servers = servers or max(1, n // 4)
    where = rng.integers(servers, size=n)
    inter = rng.uniform(1.0, 25.0, size=(n, n)) * 1e9 / 8
    inter = np.minimum(inter, inter.T)
    bw = np.where(where[:, None] == where[None, :], 100e9 / 8, inter)
    lat = np.where(where[:, None] == where[None, :], 5e-6, rng.uniform(5e-5, 1e-3, size=(n, n)))
    lat = np.maximum(lat, lat.T)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    return bw, lat


def default_budgets(money_per_iter: float = 0.01, energy_per_iter: float = 2000.0) -> tuple[Budget, ...]:
    return (Budget("money", "money", money_per_iter), Budget("energy", "energy", energy_per_iter))


def random_state(seed: int | np.random.Generator, n: int = 4, L: int = 8, batch: int = 64,
                 micro_batch: int = 4, p_available: float = 1.0, scale: float = 1.0,
                 budgets: tuple[Budget, ...] | None = None) -> SlotState:
    """One random slot: n devices of mixed kinds, L layers; at least one device available."""
    rng = np.random.default_rng(seed)
    devices = tuple(random_device(rng, f"d{i}") for i in range(n))
    wl = random_workload(rng, L, batch, micro_batch, scale)
    bw, lat = random_network(rng, n)
    avail = rng.random(n) < p_available
    if not avail.any():
        avail[int(rng.integers(n))] = True
    factor = rng.uniform(0.5, 1.0, size=n)
    eff = 0.5
    speed = np.array([d.peak_flops for d in devices]) * eff * factor
    price = np.array([d.price_per_s for d in devices]) * rng.uniform(0.5, 1.5, size=n)
    return SlotState(0, devices, wl, budgets if budgets is not None else default_budgets(),
                     avail, speed, factor, price, bw, lat)


def random_instance(seed: int, n: int = 6, L: int = 12, slots: int = 20, batch: int = 64,
                    micro_batch: int = 4, p_leave: float = 0.1,
                    budgets: tuple[Budget, ...] | None = None) -> Instance:
    """A random instance whose devices come and go, slow down and change price per slot."""
    rng = np.random.default_rng(seed)
    devices = tuple(random_device(rng, f"d{i}") for i in range(n))
    wl = random_workload(rng, L, batch, micro_batch)
    bw, lat = random_network(rng, n)
    avail = rng.random((slots, n)) >= p_leave
    avail[:, 0] = True
    factor = rng.uniform(0.6, 1.0, size=(slots, n))
    price = np.array([d.price_per_s for d in devices])[None, :] * rng.uniform(0.5, 1.5, size=(slots, n))
    bws = np.repeat(bw[None], slots, axis=0) * rng.uniform(0.7, 1.0, size=(slots, 1, 1))
    return Instance(f"random-{seed}", devices, wl, budgets if budgets is not None else default_budgets(),
                    np.full(n, 0.5), avail, factor, price, bws, lat)
