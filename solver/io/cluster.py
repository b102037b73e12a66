"""The cluster description of an instance file beyond devices and links: declared device
kinds, servers (nodes) with their shared NIC and zone, bandwidth fits by message size and
egress prices between zones. Everything here is optional; an instance without it loads as
before (`Instance.network` is None and every figure is unchanged).

    [[kinds]]                      # device kinds besides the packaged hardware table
    kind = "H800"                  # a new name, or a packaged kind whose figures it replaces
    like = "H100-SXM5-80GB"        # optional: start from this packaged kind's figures
    peak_tflops = 51.2             # peak FP32, 1e12 FLOP/s        } required
    memory_gb = 80                 # usable memory, 1e9 bytes      } unless
    busy_w = 700                   # watts while computing         } `like`
    price_per_hour = 8.0           # USD per device-hour           } is given
    idle_w = 210                   # optional (default: 30% of busy_w)
    peak_tflops_bf16 = 756         # optional peaks at _bf16 and _fp16, used when the workload's
                                   # precision is that one (else peak_tflops)
    gpus_per_node = 8              # optional: a server holds at most this many of the kind

    [[servers]]                    # optional: the servers that devices name in `server` (all of them)
    name = "n0"
    nic_gbps = 100                 # optional: the server's NIC, Gbit/s in each direction,
                                   # shared by its devices' traffic to other servers
    zone = "us-central1-a"         # optional: the zone, for egress prices

    [[egress]]                     # optional: USD per GB (1e9 bytes) sent between two zones,
    a = "us-central1-a"            # both directions; zones without an entry cost nothing
    b = "us-west1-b"
    usd_per_gb = 0.02

    [network]                      # besides the gbps and latency defaults:
    intra_server_fit = [a, b, c]   # optional Sailor-form fits: bandwidth in GB/s of a message
    inter_server_fit = [a, b, c]   # of m bytes = a x^2 + b x + c, x = log2(m / 1e6), capped at
                                   # the pair's gbps (model.network: floored at 1% of it)
    # and per pair: [[links]] fit = [a, b, c]

How the cost model uses them (model.network): a device kind named by [[kinds]] is found
before the packaged table; transfers between servers share each server's NIC (c devices of a
server sending across servers at once get nic / c each); pipeline boundaries use the fit at
the micro-batch's message size and sync rings at the bucket's size; money pays egress for
every byte that crosses a priced zone boundary (Sailor's `gcp_communication_cost.json` gives
0 inside a zone, 0.01 USD/GB inside a region and 0.02 across regions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..model.network import Network
from . import ranges as R
from .hardware import IDLE_FRACTION, GpuSpec, hardware_spec

GBIT = 1e9 / 8
PRECISIONS = ("fp16", "bf16")
KIND_FIELDS = {"kind", "like", "peak_tflops", "memory_gb", "busy_w", "idle_w", "price_per_hour", "gpus_per_node",
               *(f"peak_tflops_{p}" for p in PRECISIONS)}
SERVER_FIELDS = {"name", "nic_gbps", "zone"}
EGRESS_FIELDS = {"a", "b", "usd_per_gb"}
FIT_KEYS = ("intra_server_fit", "inter_server_fit")
EGRESS_RANGE = R.Range(0, 100, "USD per GB")
GPUS_PER_NODE = R.Range(1, 1024, "devices")


@dataclass(frozen=True)
class DeclaredKind:
    """A device kind declared in the instance: its spec (peak FP32 FLOP/s, bytes, watts,
    USD per hour), peak FLOP/s per other precision, and the most devices a server holds."""

    spec: GpuSpec
    peaks: dict[str, float] = field(default_factory=dict)
    gpus_per_node: int | None = None


def declared_kinds(f: Any, doc: dict) -> dict[str, DeclaredKind]:
    """The [[kinds]] tables (f: the instance file's error helper)."""
    out: dict[str, DeclaredKind] = {}
    for i, k in enumerate(f.tables(doc, "kinds", KIND_FIELDS)):
        at = f"kinds[{i}]"
        name = f.string(k, "kind", f"{at}.kind")
        if name in out:
            raise f.error(f"{at}.kind", "duplicate declared kind", name)
        base = None
        if "like" in k:
            like = f.string(k, "like", f"{at}.like")
            try:
                base = hardware_spec(like)
            except KeyError as e:
                raise f.error(f"{at}.like", e.args[0].split("; ", 1)[1], like) from None

        def num(key: str, rng: R.Range, default: float | None) -> float:
            if default is None and key not in k:
                raise f.error(f"{at}.{key}", "missing required field (or give `like`)")
            return f.number(k, key, f"{at}.{key}", default, rng=rng)

        peak = num("peak_tflops", R.PEAK_TFLOPS, base and base.peak_flops / 1e12) * 1e12
        mem = num("memory_gb", R.MEMORY_GB, base and base.memory_bytes / 1e9) * 1e9
        busy = num("busy_w", R.POWER_W, base and base.busy_w)
        idle_default = base.idle_w if base is not None and "busy_w" not in k else IDLE_FRACTION * busy
        idle = num("idle_w", R.POWER_W, idle_default)
        if idle > busy:
            raise f.error(f"{at}.idle_w", f"idle power exceeds busy power {busy:g} W", idle)
        price = num("price_per_hour", R.PRICE_PER_HOUR, base and base.price_per_hour)
        peaks = {p: f.number(k, f"peak_tflops_{p}", f"{at}.peak_tflops_{p}", rng=R.PEAK_TFLOPS) * 1e12
                 for p in PRECISIONS if f"peak_tflops_{p}" in k}
        gpn = int(f.number(k, "gpus_per_node", f"{at}.gpus_per_node", integer=True, rng=GPUS_PER_NODE)) \
            if "gpus_per_node" in k else None
        spec = GpuSpec(name, name, peak, mem, busy, idle, price, False, "instance file", "instance file")
        out[name] = DeclaredKind(spec, peaks, gpn)
    return out


def at_precision(declared: dict[str, DeclaredKind], precision: str) -> dict[str, DeclaredKind]:
    """The declared kinds with the peak FLOP/s of `precision` where they declare one."""
    return {k: replace(d, spec=replace(d.spec, peak_flops=d.peaks[precision])) if precision in d.peaks else d
            for k, d in declared.items()}


def kind_spec(f: Any, kind: str, field_name: str, declared: dict[str, DeclaredKind], table: dict) -> GpuSpec:
    """The spec of a device's kind: declared first, then the packaged table (or an alias);
    an unknown kind is an error listing both."""
    if kind in declared:
        return declared[kind].spec
    try:
        return hardware_spec(kind, table)
    except KeyError:
        known = sorted(declared) + sorted(table)
        raise f.error(field_name, f"unknown hardware kind; known: {', '.join(known)} (declare others in "
                      f"[[kinds]])", kind) from None


def check_measured_kinds(f: Any, workload: Any, declared: dict[str, DeclaredKind], table: dict) -> None:
    """Every measured column fwd_s:<kind> of the layer table names a declared or packaged kind
    exactly (an alias such as V100 is not enough: devices are matched by their exact kind, so
    the column would be silently unused)."""
    known = set(declared) | set(table)
    by_u = getattr(workload, "measured_by_micro_batch", {}) or {}
    steps = getattr(workload, "optimizer_seconds", {}) or {}
    for k in sorted(set(workload.measured) | {k for per in by_u.values() for k in per} | set(steps)):
        if k not in known:
            try:
                hint = f" ({k!r} is an alias of {hardware_spec(k, table).kind}: name the column by the exact kind)"
            except KeyError:
                hint = " (declare the kind in [[kinds]] or rename the column)"
            kinds = ", ".join(sorted(declared) + sorted(table))
            col = f"fwd_s:{k}" if k in workload.measured or any(k in per for per in by_u.values()) else f"opt_s:{k}"
            raise f.error("workload.model", f"layer table {workload.name!r}: column '{col}' matches no device "
                          f"kind{hint}; kinds: {kinds}", k)


def check_gpus_per_node(f: Any, kinds: list[str], servers: list[str], declared: dict[str, DeclaredKind]) -> None:
    """No server holds more devices of a declared kind than its gpus_per_node."""
    count: dict[tuple[str, str], int] = {}
    for i, (k, s) in enumerate(zip(kinds, servers)):
        count[(k, s)] = count.get((k, s), 0) + 1
        limit = declared[k].gpus_per_node if k in declared else None
        if limit is not None and count[(k, s)] > limit:
            raise f.error(f"devices[{i}].server", f"server holds more than gpus_per_node = {limit} devices of "
                          f"kind {k}", s)


def fit_value(f: Any, table: dict, key: str, field_name: str) -> np.ndarray | None:
    """A [a, b, c] bandwidth fit (GB/s against log2(MB)), or None when absent."""
    if key not in table:
        return None
    v = table[key]
    if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                         and math.isfinite(x) for x in v)):
        raise f.error(field_name, "must be [a, b, c], three finite numbers (GB/s = a x^2 + b x + c, "
                      "x = log2(message bytes / 1e6))", v)
    if v[2] <= 0:
        raise f.error(field_name, "c, the fitted GB/s at 1 MB messages, must be > 0", v)
    return np.array(v, dtype=float)


def network_facts(f: Any, doc: dict, servers: list[str], links: list[dict], index: dict[str, int],
                  ) -> Network | None:
    """Servers, NICs, fits and egress prices as a Network, or None when the file gives none of
    them (so that old instances keep network=None)."""
    rows = f.tables(doc, "servers", SERVER_FIELDS)
    net = doc.get("network") if isinstance(doc.get("network"), dict) else {}
    fits = {k: fit_value(f, net, k, f"network.{k}") for k in FIT_KEYS}
    link_fits = [(k, fit_value(f, link, "fit", f"links[{k}].fit")) for k, link in enumerate(links)]
    egress_rows = f.tables(doc, "egress", EGRESS_FIELDS)
    if not rows and not egress_rows and all(v is None for v in fits.values()) \
            and all(v is None for _, v in link_fits):
        return None
    names = list(dict.fromkeys(servers))
    declared: dict[str, dict] = {}
    for i, s in enumerate(rows):
        name = f.string(s, "name", f"servers[{i}].name")
        if name in declared:
            raise f.error(f"servers[{i}].name", "duplicate server name", name)
        if name not in names:
            raise f.error(f"servers[{i}].name", f"no device names this server; servers: {', '.join(names)}", name)
        declared[name] = {"nic": f.number(s, "nic_gbps", f"servers[{i}].nic_gbps", rng=R.GBPS) * GBIT
                          if "nic_gbps" in s else math.inf,
                          "zone": f.string(s, "zone", f"servers[{i}].zone") if "zone" in s else None}
    if declared:   # a device naming a server the table lacks is a typo, not a server with an unlimited NIC
        for i, s in enumerate(servers):
            if s not in declared and not s.startswith("__"):
                raise f.error(f"devices[{i}].server", f"expected a server declared in [[servers]] "
                              f"({', '.join(declared)}); declare it there (nic_gbps may be left out)", s)
    sidx = {s: i for i, s in enumerate(names)}
    server = np.array([sidx[s] for s in servers], dtype=int)
    nic = np.array([declared.get(s, {}).get("nic", math.inf) for s in names], dtype=float)
    n = len(servers)
    fit = None
    if any(v is not None for v in fits.values()) or any(v is not None for _, v in link_fits):
        same = server[:, None] == server[None, :]
        fit = np.full((n, n, 3), np.nan)
        for key, mask in (("intra_server_fit", same), ("inter_server_fit", ~same)):
            if fits[key] is not None:
                fit[mask] = fits[key]
        for k, v in link_fits:
            if v is not None:
                i, j = index[links[k]["a"]], index[links[k]["b"]]
                fit[i, j] = fit[j, i] = v
        np.fill_diagonal(fit[..., 0], np.nan)
    egress = _egress(f, egress_rows, [declared.get(s, {}).get("zone") for s in servers]) if egress_rows else None
    return Network(server, tuple(names), nic, fit, egress, tuple(declared.get(s, {}).get("zone") for s in names))


def _egress(f: Any, rows: list[dict], zones: list[str | None]) -> np.ndarray:
    """(n, n) USD per byte between the devices' zones."""
    known = sorted({z for z in zones if z is not None})
    price: dict[tuple[str, str], float] = {}
    for i, e in enumerate(rows):
        a, b = (f.string(e, key, f"egress[{i}].{key}") for key in ("a", "b"))
        if a == b:
            raise f.error(f"egress[{i}].b", "a and b must be two different zones (inside a zone is free)", b)
        for key, z in (("a", a), ("b", b)):
            if z not in known:
                raise f.error(f"egress[{i}].{key}", f"no server is in this zone; zones: {', '.join(known) or 'none'} "
                              "(give [[servers]] a zone)", z)
        usd = f.number(e, "usd_per_gb", f"egress[{i}].usd_per_gb", rng=EGRESS_RANGE) / 1e9
        if (a, b) in price:
            raise f.error(f"egress[{i}]", f"duplicate zone pair {a}-{b}")
        price[(a, b)] = price[(b, a)] = usd
    n = len(zones)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j and zones[i] is not None and zones[j] is not None and zones[i] != zones[j]:
                out[i, j] = price.get((zones[i], zones[j]), 0.0)
    return out


def _toml(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(float(v))


def cluster_lines(devices: tuple, network: Network | None, table: dict) -> list[str]:
    """TOML lines of the [[kinds]] (kinds not in the packaged table, with the figures of their
    first device), [[servers]] and [[egress]] an instance needs to load again (save_instance);
    pair fits go into its [[links]] (link_fit)."""
    lines: list[str] = []
    seen: set[str] = set()
    for d in devices:
        if d.kind in table or d.kind in seen:
            continue
        seen.add(d.kind)
        lines += ["[[kinds]]", f"kind = {_toml(d.kind)}", f"peak_tflops = {_toml(d.peak_flops / 1e12)}",
                  f"memory_gb = {_toml(d.memory_bytes / 1e9)}", f"busy_w = {_toml(d.busy_power_w)}",
                  f"idle_w = {_toml(d.idle_power_w)}", f"price_per_hour = {_toml(d.price_per_s * 3600)}", ""]
    if network is None:
        return lines
    zones = network.zones or (None,) * len(network.server_names)
    for name, nic, zone in zip(network.server_names, network.nic, zones):
        lines += ["[[servers]]", f"name = {_toml(name)}"] + ([f"nic_gbps = {_toml(nic / GBIT)}"] if math.isfinite(nic) else []) \
            + ([f"zone = {_toml(zone)}"] if zone is not None else []) + [""]
    if network.egress is not None:
        pairs: dict[tuple[str, str], float] = {}
        for i, j in zip(*np.nonzero(network.egress)):
            za, zb = zones[network.server[i]], zones[network.server[j]]
            if (zb, za) not in pairs:
                pairs[(za, zb)] = float(network.egress[i, j]) * 1e9
        for (za, zb), usd in pairs.items():
            lines += ["[[egress]]", f"a = {_toml(za)}", f"b = {_toml(zb)}", f"usd_per_gb = {_toml(usd)}", ""]
    return lines


def link_fit(network: Network | None, i: int, j: int) -> list[str]:
    """The `fit = [a, b, c]` line of the pair (i, j), if it has a fit."""
    if network is None or network.fit is None or np.isnan(network.fit[i, j, 0]):
        return []
    return ["fit = [" + ", ".join(repr(float(x)) for x in network.fit[i, j]) + "]"]
