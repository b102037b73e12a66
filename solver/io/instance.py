"""Instance files: a human-editable TOML cluster + workload + budgets, with CSV traces.

Format (units in the key names; paths are relative to the instance file):

    name = "default"               # optional, default: the file's stem
    num_slots = 20                 # required, >= 1
    description = "..."            # optional free text

    [workload]
    model = "vgg16"                # a CSV path relative to this file (.csv may be left out), else models/<model>.csv
    batch = 192                    # global batch B, >= 1
    micro_batch = 8                # u >= 1; B must be a multiple of u
    optimizer_factor = 4.0         # optional (default 4): bytes held per parameter byte
    input_bytes = 602112           # optional: bytes per input sample (default: the CSV's)
    precision = "fp32"             # optional (default: the table's `# precision:` line, else fp32):
                                   # fp32, or bf16 / fp16 (mixed: the fp32 table's bytes
                                   # halved, fp32 master weights and optimizer state; docs/MODEL.md)
    optimizer_step = "none"        # optional: none, measured (the table's opt_s:<kind> columns), or
                                   # bandwidth (each stage's step takes
                                   # (2 k_opt - 1) P / memory bandwidth; every device needs
                                   # memory_bandwidth_gbs, but for measured kinds under "measured")

    [memory_reserve_gb]            # optional: GB held back per device kind (framework context,
    "V100-SXM2-16GB" = 1.0         # allocator slack), or "default" for every other kind; a key
                                   # that no device takes is refused

    [[devices]]                    # one table per device, names unique
    name = "v100-0"
    kind = "V100-SXM2-16GB"        # a kind (or alias) of models/hardware.csv, or of [[kinds]]
    server = "s0"                  # optional (default: its own server)
    efficiency = 0.5               # optional, in (0, 1]: sustained fraction of peak FLOP/s
    memory_bandwidth_gbs = 900     # optional: memory bandwidth, GB/s (for optimizer_step = "bandwidth")
    # optional overrides of the hardware table: peak_tflops, memory_gb, busy_w, idle_w,
    # price_per_hour (USD)

    [network]                      # optional; defaults shown
    intra_server_gbps = 100.0      # Gbit/s between devices of one server
    inter_server_gbps = 10.0       # Gbit/s between servers
    intra_server_latency_ms = 0.005
    inter_server_latency_ms = 0.1
    tp_collective_latency_ms = 0.0 # per tensor-parallel collective, beyond its ring (a library's
                                   # per-call overhead: about 1 ms for gloo between CPU processes)
    allreduce_latency_ms = 0.0     # per cross-group gradient all-reduce (one per bucket), beyond
                                   # its ring: the same kind of per-call overhead

    [[links]]                      # optional per-pair overrides (symmetric)
    a = "v100-0"
    b = "k80-1"
    gbps = 5.0                     # and/or latency_ms

    [[budgets]]                    # long-term averages per iteration
    name = "money"                 # optional, default: the kind; unique
    kind = "money"                 # money (USD) | energy (J) | device_energy (J, needs device)
    limit = 0.004                  # money 1e-10 .. 1e6 USD, energy 1e-6 .. 1e12 J (solver.io.ranges)
    device = "k80-0"               # only for device_energy

    [traces]                       # optional; a missing trace means constant over the slots
    devices = "default_devices.csv"   # columns slot, device, available (0/1), speed_factor (> 0),
                                      # price_per_hour (USD); every slot x device exactly once;
                                      # available (1), speed_factor and price_per_hour columns may be omitted
    links = "default_links.csv"       # columns slot, a, b, gbps; every listed pair in every slot
                                      # a trace's figure wins over the static one (a device's
                                      # price_per_hour, a [[links]] gbps) in every slot; a static
                                      # figure it replaces is named in the instance's notes

Optional cluster sections, [[kinds]] (device kinds besides the packaged table), [[servers]]
(NIC bandwidth shared by a server's devices, zone), [[egress]] (USD per GB between zones) and
bandwidth fits by message size, are documented in solver.io.cluster.

`name` (and the file's stem when `name` is absent) becomes a folder of the results
(results/<name>/...), so it must be one plain path component: letters, digits and `._+-`,
starting with a letter or digit (so never "..", "/" or "\\"). Every number must lie in its
documented physical range (solver.io.ranges), e.g. price_per_hour 0..1e4 USD per hour.
Files must be UTF-8 text.

Every problem raises one InstanceError naming the file, the field and the value; nothing is
returned half-loaded.
"""
from __future__ import annotations

import csv
import math
import os
import re
import tomllib
import unicodedata
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InstanceError
from ..model import BUDGET_KINDS, Budget, Device, Instance, Workload
from ..model.cluster import budget_names_problem
from ..model.preemption import Preemption
from ..model.workload import PRECISIONS
from . import ranges as R
from .cluster import (FIT_KEYS, KIND_FIELDS, at_precision, check_gpus_per_node, check_measured_kinds, cluster_lines,
                      declared_kinds, kind_spec, link_fit, network_facts)
from .data import packaged_models
from .hardware import GpuSpec, load_hardware
from .text import read_text, repeated_columns
from .workloads import MODELS_DIR, read_workload_csv

__all__ = ["Instance", "load_instance", "save_instance", "write_instance"]

GBIT = 1e9 / 8
NETWORK_DEFAULTS = {"intra_server_gbps": 100.0, "inter_server_gbps": 10.0,
                    "intra_server_latency_ms": 0.005, "inter_server_latency_ms": 0.1}
DEFAULT_EFFICIENCY = 0.5
_TOP = {"name", "num_slots", "description", "workload", "devices", "network", "links", "budgets", "traces",
        "kinds", "servers", "egress", "memory_reserve_gb", "train", "preemption"}
_TRAIN = {"iterations_per_slot"}
_PREEMPTION = {"restart_s", "checkpoint_every"}
_WORKLOAD = {"model", "batch", "micro_batch", "optimizer_factor", "input_bytes", "precision", "optimizer_step"}
_DEVICE = {"name", "kind", "server", "efficiency", "peak_tflops", "memory_gb", "busy_w", "idle_w", "price_per_hour",
           "memory_bandwidth_gbs"}
_LINK = {"a", "b", "gbps", "latency_ms", "fit"}
_BUDGET = {"name", "kind", "limit", "device"}
_TRACES = {"devices", "links"}
_NOTED = ("price_per_hour", "efficiency", "peak_tflops")
"""[[devices]] fields whose value, when set to other than the default, is noted where a trace
(price_per_hour) or measured layer times (efficiency, peak_tflops) make it unused."""
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
"""An instance name: one plain path component (it names the results folder)."""


class _File:
    """Error helpers bound to one file."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, field: str, problem: str, value: Any = None) -> InstanceError:
        got = "" if value is None else f" (got {value!r})"
        return InstanceError(f"{self.path}: {field}: {problem}{got}")

    def table(self, doc: dict, key: str, allowed: set[str], required: bool = False) -> dict:
        value = doc.get(key)
        if value is None:
            if required:
                raise self.error(key, "missing required section")
            return {}
        if not isinstance(value, dict):
            raise self.error(key, "must be a table", value)
        self.known_keys(value, allowed, key)
        return value

    def tables(self, doc: dict, key: str, allowed: set[str]) -> list[dict]:
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(key, "must be an array of tables ([[%s]])" % key, value)
        for i, v in enumerate(value):
            self.known_keys(v, allowed, f"{key}[{i}]")
        return value

    def known_keys(self, table: dict, allowed: set[str], where: str) -> None:
        for k in table:
            if k not in allowed:
                raise self.error(f"{where}.{k}" if where else k, f"unknown field; allowed: {', '.join(sorted(allowed))}",
                                 table[k])

    def string(self, table: dict, key: str, field: str, default: str | None = None) -> str:
        if key not in table:
            if default is None:
                raise self.error(field, "missing required field")
            return default
        v = table[key]
        if not isinstance(v, str) or not v.strip():
            raise self.error(field, "must be a non-empty string", v)
        return v.strip()

    def number(self, table: dict, key: str, field: str, default: float | None = None, *, minimum: float = 0.0,
               strict: bool = False, maximum: float = math.inf, integer: bool = False,
               rng: R.Range | None = None) -> float:
        """table[key] as a number; with `rng`, it must lie in that documented range."""
        if key not in table:
            if default is None:
                raise self.error(field, "missing required field")
            return default
        v = table[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.error(field, "must be a finite number", v)
        if integer and not float(v).is_integer():
            raise self.error(field, "must be an integer", v)
        if rng is not None:
            problem = rng.problem(float(v))
            if problem:
                raise self.error(field, problem, v)
        if v < minimum or (strict and v == minimum) or v > maximum:
            lo = f"> {minimum:g}" if strict else f">= {minimum:g}"
            hi = "" if maximum == math.inf else f" and <= {maximum:g}"
            raise self.error(field, f"must be {lo}{hi}", v)
        return v


def _read_toml(path: Path) -> dict:
    text = read_text(path, "instance file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InstanceError(f"{path}: TOML syntax error: {e}") from None


def _resolve_model(f: _File, model: str) -> tuple[Path, tuple[str, ...]]:
    """The layer table workload.model names: a file of that name (or with .csv) beside the
    instance first, then the packaged table; with a note when a file beside the instance hides
    a packaged table of the same name."""
    base = f.path.parent
    packaged = [p for p in (MODELS_DIR / f"{model}.csv", MODELS_DIR / model) if p.is_file()]
    for cand in (base / model, base / f"{model}.csv"):
        if cand.is_file():
            hidden = [p for p in packaged if p.resolve() != cand.resolve()]
            return cand, ((f"workload.model {model!r}: read from {cand}, beside the instance, not the packaged "
                           f"table of that name",) if hidden else ())
    if packaged:
        return packaged[0], ()
    raise f.error("workload.model", f"unknown model: no file {base / model} or {base / (model + '.csv')}, and no "
                  f"packaged layer table of that name (packaged: {', '.join(packaged_models())})", model)


def _workload(f: _File, doc: dict) -> Workload:
    wl = _workload_bytes(f, doc)
    w = doc["workload"]
    step = f.string(w, "optimizer_step", "workload.optimizer_step", "none")
    allowed = ("none", "bandwidth", "measured") if wl.optimizer_seconds else ("none", "bandwidth")
    if step not in allowed:
        raise f.error("workload.optimizer_step", f"expected one of {', '.join(allowed)}" + (
            "" if wl.optimizer_seconds else " (measured needs opt_s:<kind> columns in the layer table)"), step)
    return replace(wl, optimizer_step=step)


def _workload_bytes(f: _File, doc: dict) -> Workload:
    w = f.table(doc, "workload", _WORKLOAD, required=True)
    model = f.string(w, "model", "workload.model")
    batch = int(f.number(w, "batch", "workload.batch", integer=True, rng=R.SAMPLES))
    micro = int(f.number(w, "micro_batch", "workload.micro_batch", integer=True, rng=R.SAMPLES))
    if batch % micro:
        raise f.error("workload.batch", f"batch {batch} is not a multiple of micro_batch {micro}", batch)
    opt = f.number(w, "optimizer_factor", "workload.optimizer_factor", 4.0, rng=R.OPTIMIZER_FACTOR)
    input_bytes = f.number(w, "input_bytes", "workload.input_bytes", rng=R.INPUT_BYTES) if "input_bytes" in w else None
    table, notes = _resolve_model(f, model)
    wl = read_workload_csv(table, batch, micro, opt, input_bytes)
    if notes:
        wl = replace(wl, notes=wl.notes + notes)
    precision = f.string(w, "precision", "workload.precision", wl.precision)
    if precision not in PRECISIONS:
        raise f.error("workload.precision", f"expected one of {', '.join(sorted(PRECISIONS))}", precision)
    if wl.precision != "fp32":      # the table's bytes are already at its precision (`# precision:` line)
        if precision != wl.precision:
            raise f.error("workload.precision", f"the layer table is already {wl.precision} (its '# precision:' "
                          f"line): leave workload.precision out or give {wl.precision!r}", precision)
        return wl
    return wl.with_precision(precision)


def _devices(f: _File, doc: dict, declared: dict
             ) -> tuple[tuple[Device, ...], np.ndarray, list[str], list[dict[str, float]]]:
    """(devices, efficiency per device, server names, per device its fields of _NOTED set to a
    value other than the default)."""
    table = load_hardware()
    rows = f.tables(doc, "devices", _DEVICE)
    if not rows:
        raise f.error("devices", "missing required field: at least one [[devices]] table")
    devices, eff, servers, seen, reserved, overrides = [], [], [], {}, set(), []
    reserve = f.table(doc, "memory_reserve_gb", set(table) | set(declared) | {"default"})
    for i, d in enumerate(rows):
        at = f"devices[{i}]"
        name = f.string(d, "name", f"{at}.name")
        same = unicodedata.normalize("NFC", name)
        if same in seen:
            raise f.error(f"{at}.name", "duplicate device name" + ("" if seen[same] == name else
                          " (the same characters as an earlier name, written with other Unicode code points)"), name)
        seen[same] = name
        kind = f.string(d, "kind", f"{at}.kind")
        spec: GpuSpec = kind_spec(f, kind, f"{at}.kind", declared, table)
        peak = f.number(d, "peak_tflops", f"{at}.peak_tflops", spec.peak_flops / 1e12, rng=R.PEAK_TFLOPS) * 1e12
        mem = f.number(d, "memory_gb", f"{at}.memory_gb", spec.memory_bytes / 1e9, rng=R.MEMORY_GB) * 1e9
        key = kind if kind in reserve else spec.kind if spec.kind in reserve else "default"
        reserved.add(key)
        held = f.number(reserve, key, f"memory_reserve_gb.{key}", 0.0, rng=R.RESERVE_GB) * 1e9 if key in reserve else 0.0
        if held >= mem:
            raise f.error(f"memory_reserve_gb.{key}", f"reserve leaves no memory on device {name} "
                          f"({mem / 1e9:g} GB)", held / 1e9)
        mem -= held
        bwm = f.number(d, "memory_bandwidth_gbs", f"{at}.memory_bandwidth_gbs", 0.0, rng=R.RESERVE_GB) * 1e9
        busy = f.number(d, "busy_w", f"{at}.busy_w", spec.busy_w, rng=R.POWER_W)
        idle = f.number(d, "idle_w", f"{at}.idle_w", spec.idle_w, rng=R.POWER_W)
        if idle > busy:
            raise f.error(f"{at}.idle_w", f"idle power exceeds busy power {busy:g} W", idle)
        price = f.number(d, "price_per_hour", f"{at}.price_per_hour", spec.price_per_hour, rng=R.PRICE_PER_HOUR)
        eff.append(f.number(d, "efficiency", f"{at}.efficiency", DEFAULT_EFFICIENCY, rng=R.EFFICIENCY))
        servers.append(f.string(d, "server", f"{at}.server", f"__{name}"))
        devices.append(Device(name, spec.kind, peak, mem, busy, idle, price / 3600.0, bwm))
        default = {"price_per_hour": spec.price_per_hour, "efficiency": DEFAULT_EFFICIENCY,
                   "peak_tflops": spec.peak_flops / 1e12}
        overrides.append({k: float(d[k]) for k in _NOTED if k in d and not _same(d[k], default[k])})
    unused = [k for k in reserve if k not in reserved]
    if unused:
        raise f.error(f"memory_reserve_gb.{unused[0]}", "no device takes this reserve (no device of that kind, or "
                      "every one has a reserve of its own); expected a kind of the [[devices]] or 'default'",
                      reserve[unused[0]])
    return tuple(devices), np.array(eff, dtype=float), servers, overrides


_CALL_LATENCIES = {"tp_collective_latency_ms", "allreduce_latency_ms"}
"""[network] keys of per-call collective overheads (milliseconds, 0 when absent)."""


def _check_optimizer_step(f: _File, wl: Workload, devices: tuple[Device, ...]) -> None:
    """The optimizer step charged per stage (cost.optimizer) needs, for every device, measured
    seconds of its kind (optimizer_step = "measured") or its memory bandwidth; the first device
    with neither is an error naming its field (the run would otherwise fail at its first plan)."""
    if wl.optimizer_step == "none":
        return
    for i, d in enumerate(devices):
        measured = wl.optimizer_step == "measured" and d.kind in wl.optimizer_seconds
        if not measured and not d.memory_bandwidth > 0:
            raise f.error(f"devices[{i}].memory_bandwidth_gbs",
                          f"device {d.name!r}: workload.optimizer_step = {wl.optimizer_step!r} needs the memory "
                          "bandwidth of every device" + (" whose kind has no opt_s column" if
                                                         wl.optimizer_step == "measured" else "") +
                          "; expected a number of GB/s > 0, got none")


def _call_latency(f: _File, doc: dict, key: str) -> float:
    """[network] `key` (one of _CALL_LATENCIES, milliseconds) in seconds (0 when absent)."""
    net = f.table(doc, "network", set(NETWORK_DEFAULTS) | set(FIT_KEYS) | _CALL_LATENCIES)
    return f.number(net, key, f"network.{key}", 0.0, rng=R.LATENCY_MS) / 1000.0


def _network(f: _File, doc: dict, names: list[str], servers: list[str]
             ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int, float]]]:
    """(bandwidth bytes/s, latency s), both (n, n), from [network] and [[links]], and
    (k, i, j, gbps) of every links[k] that sets the gbps of the pair i, j."""
    net = f.table(doc, "network", set(NETWORK_DEFAULTS) | set(FIT_KEYS) | _CALL_LATENCIES)
    v = {k: f.number(net, k, f"network.{k}", dflt, rng=R.GBPS if k.endswith("gbps") else R.LATENCY_MS)
         for k, dflt in NETWORK_DEFAULTS.items()}
    same = np.array([[a == b for b in servers] for a in servers])
    bw = np.where(same, v["intra_server_gbps"], v["inter_server_gbps"]) * GBIT
    lat = np.where(same, v["intra_server_latency_ms"], v["inter_server_latency_ms"]) / 1000.0
    index = {n: i for i, n in enumerate(names)}
    seen: dict[frozenset, int] = {}
    set_gbps = []
    for k, link in enumerate(f.tables(doc, "links", _LINK)):
        at = f"links[{k}]"
        i, j = (_device_ref(f, link, key, f"{at}.{key}", index) for key in ("a", "b"))
        if i == j:
            raise f.error(f"{at}.b", "a link needs two different devices", link["b"])
        if frozenset((i, j)) in seen:
            raise f.error(at, f"the pair {names[i]}-{names[j]} is already set by links[{seen[frozenset((i, j))]}]; "
                              "expected one entry per pair")
        seen[frozenset((i, j))] = k
        if "gbps" not in link and "latency_ms" not in link:
            raise f.error(at, "missing required field: gbps or latency_ms")
        if "gbps" in link:
            gbps = f.number(link, "gbps", f"{at}.gbps", rng=R.GBPS)
            bw[i, j] = bw[j, i] = gbps * GBIT
            set_gbps.append((k, i, j, float(gbps)))
        if "latency_ms" in link:
            lat[i, j] = lat[j, i] = f.number(link, "latency_ms", f"{at}.latency_ms", rng=R.LATENCY_MS) / 1000.0
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    return bw, lat, set_gbps


def _device_ref(f: _File, table: dict, key: str, field: str, index: dict[str, int]) -> int:
    name = f.string(table, key, field)
    if name not in index:
        raise f.error(field, f"unknown device; devices: {', '.join(index)}", name)
    return index[name]


def _budgets(f: _File, doc: dict, names: list[str]) -> tuple[Budget, ...]:
    out, seen = [], set()
    for k, b in enumerate(f.tables(doc, "budgets", _BUDGET)):
        at = f"budgets[{k}]"
        kind = f.string(b, "kind", f"{at}.kind")
        if kind not in BUDGET_KINDS:
            raise f.error(f"{at}.kind", f"unknown budget kind; one of {', '.join(BUDGET_KINDS)}", kind)
        name = f.string(b, "name", f"{at}.name", kind)
        if name in seen:
            raise f.error(f"{at}.name", "duplicate budget name", name)
        seen.add(name)
        problem = budget_names_problem(list(seen))
        if problem:
            raise f.error(f"{at}.name", problem, name)
        limit = f.number(b, "limit", f"{at}.limit", rng=R.BUDGET_LIMIT[kind])
        device = None
        if kind == "device_energy":
            device = names[_device_ref(f, b, "device", f"{at}.device", {n: i for i, n in enumerate(names)})]
        elif "device" in b:
            raise f.error(f"{at}.device", f"only a device_energy budget names a device, not {kind!r}", b["device"])
        out.append(Budget(name, kind, float(limit), device))
    return tuple(out)


class _Csv:
    """Rows of a trace CSV with errors naming file, row, column and value."""

    def __init__(self, f: _File, field: str, name: str, required: tuple[str, ...], optional: tuple[str, ...]):
        self.path = (f.path.parent / name)
        if self.path.is_dir():
            raise f.error(field, f"{self.path} is a folder; expected a CSV file", name)
        if not self.path.is_file():
            raise f.error(field, f"trace file not found: {self.path}", name)
        text = read_text(self.path, "trace file")
        reader = csv.reader(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
        header = [h.strip() for h in next(reader, [])]
        twice = repeated_columns(header)
        if twice:
            raise self.error(1, twice[0], "column given twice; expected each column once", None)
        for col in required:
            if col not in header:
                raise self.error(1, col, "missing column", None)
        for col in header:
            if col not in required + optional:
                raise self.error(1, col, f"unknown column; allowed: {', '.join(required + optional)}", None)
        self.header = header
        self.rows = []
        for lineno, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise self.error(lineno, "*", f"{len(row)} cells, header has {len(header)}", ",".join(row))
            self.rows.append((lineno, dict(zip(header, (c.strip() for c in row)))))

    def error(self, lineno: int, col: str, problem: str, value: Any) -> InstanceError:
        got = "" if value is None else f" (got {value!r})"
        return InstanceError(f"{self.path}: row {lineno}: column {col!r}: {problem}{got}")

    def number(self, lineno: int, row: dict, col: str, *, strict: bool = False,
               rng: R.Range | None = None) -> float:
        cell = row[col]
        try:
            v = float(cell)
        except ValueError:
            raise self.error(lineno, col, "not a number", cell) from None
        problem = rng.problem(v) if rng is not None else None      # the whole range where there is one
        if problem is None and (not math.isfinite(v) or v < 0 or (strict and v == 0)):
            problem = "must be > 0" if strict else "must be >= 0"
        if problem:
            raise self.error(lineno, col, problem, cell)
        return v

    def slot(self, lineno: int, row: dict, num_slots: int) -> int:
        cell = row["slot"]
        try:
            t = int(cell)
        except ValueError:
            raise self.error(lineno, "slot", "not an integer", cell) from None
        if not 0 <= t < num_slots:
            raise self.error(lineno, "slot", f"out of range 0..{num_slots - 1}", cell)
        return t

    def device(self, lineno: int, row: dict, col: str, index: dict[str, int]) -> int:
        if row[col] not in index:
            raise self.error(lineno, col, f"unknown device; devices: {', '.join(index)}", row[col])
        return index[row[col]]


def _device_trace(f: _File, name: str, devices: tuple[Device, ...], S: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = _Csv(f, "traces.devices", name, ("slot", "device"), ("available", "speed_factor", "price_per_hour"))
    n = len(devices)
    index = {d.name: i for i, d in enumerate(devices)}
    avail = np.ones((S, n), dtype=bool)
    factor = np.ones((S, n))
    price = np.tile([d.price_per_s for d in devices], (S, 1)).astype(float)
    seen = np.zeros((S, n), dtype=bool)
    for lineno, row in t.rows:
        s, i = t.slot(lineno, row, S), t.device(lineno, row, "device", index)
        if seen[s, i]:
            raise t.error(lineno, "device", f"duplicate row for slot {s}", row["device"])
        seen[s, i] = True
        if "available" in row:
            a = t.number(lineno, row, "available")
            if a not in (0.0, 1.0):
                raise t.error(lineno, "available", "must be 0 or 1", row["available"])
            avail[s, i] = a == 1.0
        if "speed_factor" in row:
            factor[s, i] = t.number(lineno, row, "speed_factor", rng=R.SPEED_FACTOR)
        if "price_per_hour" in row:
            price[s, i] = t.number(lineno, row, "price_per_hour", rng=R.PRICE_PER_HOUR) / 3600.0
    if not seen.all():
        s, i = map(int, np.argwhere(~seen)[0])
        raise f.error("traces.devices", f"{t.path}: {int((~seen).sum())} missing slot x device rows, "
                      f"first: slot {s}, device {devices[i].name!r}", name)
    return avail, factor, price


def _link_trace(f: _File, name: str, devices: tuple[Device, ...], bw: np.ndarray, S: int) -> np.ndarray:
    t = _Csv(f, "traces.links", name, ("slot", "a", "b", "gbps"), ())
    index = {d.name: i for i, d in enumerate(devices)}
    out = np.repeat(bw[None], S, axis=0)
    seen: dict[tuple[int, int], set[int]] = {}
    for lineno, row in t.rows:
        s = t.slot(lineno, row, S)
        i, j = t.device(lineno, row, "a", index), t.device(lineno, row, "b", index)
        if i == j:
            raise t.error(lineno, "b", "a link needs two different devices", row["b"])
        pair = (min(i, j), max(i, j))
        if s in seen.setdefault(pair, set()):
            raise t.error(lineno, "slot", f"duplicate row for link {row['a']}-{row['b']}", row["slot"])
        seen[pair].add(s)
        out[s, i, j] = out[s, j, i] = t.number(lineno, row, "gbps", rng=R.GBPS) * GBIT
    for (i, j), slots in seen.items():
        if len(slots) != S:
            missing = min(set(range(S)) - slots)
            raise f.error("traces.links", f"{t.path}: link {devices[i].name}-{devices[j].name} lacks "
                          f"{S - len(slots)} slot(s), first: slot {missing}", name)
    return out


def load_instance(path: str | Path) -> Instance:
    """Load and validate an instance file; InstanceError (file, field, value) on any problem.

    Where a trace and a static figure both give a value, the trace wins in every slot (a
    device's price_per_hour against the price_per_hour column of traces.devices, a [[links]]
    gbps against traces.links); a static figure set to other than its default and replaced by a
    different one is named in Instance.notes, as is a device's efficiency or peak_tflops that
    does not set its kind's layer times because they are measured."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected the path of an instance file (str or os.PathLike), got {path!r}")
    path = Path(path)
    f = _File(path)
    doc = _read_toml(path)
    f.known_keys(doc, _TOP, "")
    name = f.string(doc, "name", "name", path.stem)
    f.string(doc, "description", "description", "")
    if not NAME_RULE.fullmatch(name):
        field = "name" if "name" in doc else "name (from the file name; set name = \"...\" in the file)"
        raise f.error(field, "must be one plain path component: letters, digits and ._+-, starting with a "
                      "letter or digit (it names the results folder)", name)
    S = int(f.number(doc, "num_slots", "num_slots", integer=True, rng=R.SLOTS))
    workload = _workload(f, doc)
    declared = at_precision(declared_kinds(f, doc), workload.precision)
    check_measured_kinds(f, workload, declared, load_hardware())
    devices, eff, servers, overrides = _devices(f, doc, declared)
    _check_declared_kinds_used(f, doc, workload, devices)
    _check_estimated_kinds(f, doc, workload, devices)
    _check_optimizer_step(f, workload, devices)
    names = [d.name for d in devices]
    check_gpus_per_node(f, [d.kind for d in devices], servers, declared)
    bw, lat, set_gbps = _network(f, doc, names, servers)
    network = network_facts(f, doc, servers, f.tables(doc, "links", _LINK), {n: i for i, n in enumerate(names)})
    budgets = _budgets(f, doc, names)
    traces = f.table(doc, "traces", _TRACES)
    n = len(devices)
    if "devices" in traces:
        avail, factor, price = _device_trace(f, f.string(traces, "devices", "traces.devices"), devices, S)
    else:
        avail, factor = np.ones((S, n), dtype=bool), np.ones((S, n))
        price = np.tile([d.price_per_s for d in devices], (S, 1)).astype(float)
    if "links" in traces:
        bws = _link_trace(f, f.string(traces, "links", "traces.links"), devices, bw, S)
    else:
        bws = np.repeat(bw[None], S, axis=0)
    notes = _measured_notes(workload, devices, overrides) + _trace_notes(traces, devices, overrides, price, set_gbps,
                                                                         bws)
    if notes:
        workload = replace(workload, notes=workload.notes + notes)
    train = f.table(doc, "train", _TRAIN)
    per_slot = int(f.number(train, "iterations_per_slot", "train.iterations_per_slot", integer=True,
                            rng=R.ITERATIONS)) if "iterations_per_slot" in train else None
    return Instance(name, devices, workload, budgets, eff, avail, factor, price, bws, lat, str(path), network,
                    per_slot, _call_latency(f, doc, "tp_collective_latency_ms"),
                    _call_latency(f, doc, "allreduce_latency_ms"), _preemption(f, doc))


def _same(a: float | np.ndarray, b: float) -> bool:
    """a (every element of it) equals b up to rounding (a figure written and read back)."""
    return bool(np.allclose(a, b, rtol=1e-9, atol=0.0))


def _listed(items: list[str], shown: int = 5) -> str:
    """The first `shown` items, comma-separated, and how many more."""
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _estimated_sizes(wl: Workload, kind: str) -> list[int]:
    """The micro-batch sizes (of micro_batch_options) at which the layer times of `kind` are
    FLOP estimates, not measured."""
    return [u for u in wl.micro_batch_options()
            if kind not in (wl.measured if u == wl.micro_batch else wl.measured_by_micro_batch[u])]


def _check_estimated_kinds(f: _File, doc: dict, wl: Workload, devices: tuple[Device, ...]) -> None:
    """A device kind whose layer times are FLOP estimates (at some micro-batch size) needs FLOPs
    in the table: in a table of 0 FLOPs its every layer would take 0 s."""
    if any(l.fwd_flops or l.bwd_flops for l in wl.layers):
        return
    lacking = {d.kind: _estimated_sizes(wl, d.kind) for d in devices}
    kinds = [k if us == [wl.micro_batch] else f"{k} (at micro-batch size(s) {', '.join(map(str, us))})"
             for k, us in sorted(lacking.items()) if us]
    if kinds:
        measured = sorted(set(wl.measured) | {k for per in wl.measured_by_micro_batch.values() for k in per})
        one = len(kinds) == 1
        raise f.error("workload.model", f"kind{'' if one else 's'} {', '.join(kinds)} {'has' if one else 'have'} "
                      f"neither measured times nor FLOPs in layer table {wl.name!r} (every layer's fwd_flops and "
                      f"bwd_flops is 0; measured: {', '.join(measured)}); expected fwd_s:<kind> and bwd_s:<kind> "
                      "columns for every device kind, or FLOP counts", doc["workload"]["model"])


def _check_declared_kinds_used(f: _File, doc: dict, wl: Workload, devices: tuple[Device, ...]) -> None:
    """Every [[kinds]] entry is the kind of a device or of a column of the layer table (as
    every [[servers]] entry is named by a device): another is a typo or a leftover."""
    used = {d.kind for d in devices}
    columns = set(wl.measured) | set(wl.optimizer_seconds) | {k for per in wl.measured_by_micro_batch.values()
                                                              for k in per}
    columns |= {k for v in wl.tp_variants.values() for per in v.by_micro_batch.values() for k in per}
    for i, k in enumerate(f.tables(doc, "kinds", KIND_FIELDS)):
        name = f.string(k, "kind", f"kinds[{i}].kind")
        if name not in used | columns:
            raise f.error(f"kinds[{i}].kind", f"no device has this kind and no column of layer table {wl.name!r} "
                          f"names it; device kinds: {', '.join(sorted(used))}", name)


def _measured_notes(wl: Workload, devices: tuple[Device, ...], overrides: list[dict[str, float]]) -> tuple[str, ...]:
    """One note per kind whose layer times are measured at every micro-batch size and whose
    devices set efficiency or peak_tflops: those do not change its times."""
    by_kind: dict[str, list[str]] = {}
    for i, (d, set_) in enumerate(zip(devices, overrides)):
        if not _estimated_sizes(wl, d.kind):
            by_kind.setdefault(d.kind, []).extend(f"devices[{i}].{k} of {d.name} ({v:g})" for k, v in set_.items()
                                                  if k != "price_per_hour")
    return tuple(f"kind {k}: {_listed(items)} {'is' if len(items) == 1 else 'are'} not used for its layer times, "
                 f"which are measured (layer table {wl.name!r}); only the search's ranking of devices by speed "
                 "sees them" for k, items in sorted(by_kind.items()) if items)


def _trace_notes(traces: dict, devices: tuple[Device, ...], overrides: list[dict[str, float]], price: np.ndarray,
                 set_gbps: list[tuple[int, int, int, float]], bws: np.ndarray) -> tuple[str, ...]:
    """Notes naming the devices' price_per_hour and the [[links]] gbps that a trace replaces with
    another figure in some slot (price: USD per second, bws: bytes/s, both per slot)."""
    prices = [f"devices[{i}].price_per_hour of {d.name} ({o['price_per_hour']:g} USD per hour)"
              for i, (d, o) in enumerate(zip(devices, overrides))
              if "price_per_hour" in o and not _same(price[:, i], o["price_per_hour"] / 3600.0)]
    links = [f"links[{k}].gbps between {devices[i].name} and {devices[j].name} ({g:g} Gbit/s)"
             for k, i, j, g in set_gbps if not _same(bws[:, i, j], g * GBIT)]
    return tuple(f"{_listed(items)} {'is' if len(items) == 1 else 'are'} replaced by {what} {traces[key]!r} in every "
                 "slot (a trace wins over the static figure)"
                 for items, what, key in ((prices, "the price_per_hour column of traces.devices", "devices"),
                                          (links, "traces.links", "links")) if items)


def _preemption(f: _File, doc: dict) -> Preemption | None:
    """The [preemption] table (restart_s, checkpoint_every; both required), or None."""
    if "preemption" not in doc:
        return None
    t = f.table(doc, "preemption", _PREEMPTION)
    return Preemption(float(f.number(t, "restart_s", "preemption.restart_s", rng=R.RESTART_S)),
                      int(f.number(t, "checkpoint_every", "preemption.checkpoint_every", integer=True,
                                   rng=R.ITERATIONS)))


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


def save_instance(instance: Instance, path: str | Path) -> Path:
    """Write `instance` as <path> (TOML) plus <stem>_model.csv, <stem>_devices.csv and
    <stem>_links.csv next to it; load_instance of the result equals `instance` up to float
    rounding. Every pair of devices is written as a [[links]] entry (no servers)."""
    from .workloads import write_workload_csv

    path = Path(path)
    stem, base = path.stem, path.parent
    base.mkdir(parents=True, exist_ok=True)
    wl = instance.workload
    write_workload_csv(wl, base / f"{stem}_model.csv", f"dynpar layer table {wl.name}")
    lines = [f"name = {_toml_value(instance.name)}", f"num_slots = {instance.num_slots}", "",
             "[workload]", f"model = {_toml_value(stem + '_model.csv')}", f"batch = {wl.batch}",
             f"micro_batch = {wl.micro_batch}", f"optimizer_factor = {_toml_value(wl.opt_factor)}",
             f"input_bytes = {_toml_value(wl.input_bytes)}", "",
             "[traces]", f"devices = {_toml_value(stem + '_devices.csv')}",
             f"links = {_toml_value(stem + '_links.csv')}", ""]
    if instance.iterations_per_slot is not None:
        lines += ["[train]", f"iterations_per_slot = {instance.iterations_per_slot}", ""]
    if instance.preemption is not None:
        lines += ["[preemption]", f"restart_s = {_toml_value(instance.preemption.restart_s)}",
                  f"checkpoint_every = {instance.preemption.checkpoint_every}", ""]
    calls = [f"{key} = {_toml_value(v * 1000)}" for key, v in (("tp_collective_latency_ms", instance.tp_collective_latency),
                                                                ("allreduce_latency_ms", instance.allreduce_latency)) if v]
    if calls:
        lines += ["[network]", *calls, ""]
    net = instance.network
    lines += cluster_lines(instance.devices, net, load_hardware())
    for i, (d, e) in enumerate(zip(instance.devices, instance.efficiency)):
        lines += ["[[devices]]", f"name = {_toml_value(d.name)}", f"kind = {_toml_value(d.kind)}",
                  *([f"server = {_toml_value(net.server_names[net.server[i]])}"] if net is not None else []),
                  f"efficiency = {_toml_value(e)}", f"peak_tflops = {_toml_value(d.peak_flops / 1e12)}",
                  f"memory_gb = {_toml_value(d.memory_bytes / 1e9)}", f"busy_w = {_toml_value(d.busy_power_w)}",
                  f"idle_w = {_toml_value(d.idle_power_w)}", f"price_per_hour = {_toml_value(d.price_per_s * 3600)}", ""]
    n = instance.n
    for i in range(n):
        for j in range(i + 1, n):
            lines += ["[[links]]", f"a = {_toml_value(instance.devices[i].name)}",
                      f"b = {_toml_value(instance.devices[j].name)}",
                      f"latency_ms = {_toml_value(instance.latency[i, j] * 1000)}", *link_fit(net, i, j), ""]
    for b in instance.budgets:
        lines += ["[[budgets]]", f"name = {_toml_value(b.name)}", f"kind = {_toml_value(b.kind)}",
                  f"limit = {_toml_value(b.limit)}"] + ([f"device = {_toml_value(b.device)}"] if b.device else []) + [""]
    path.write_text("\n".join(lines))
    with (base / f"{stem}_devices.csv").open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["slot", "device", "available", "speed_factor", "price_per_hour"])
        for s in range(instance.num_slots):
            for i, d in enumerate(instance.devices):
                w.writerow([s, d.name, int(instance.available[s, i]), repr(float(instance.speed_factor[s, i])),
                            repr(float(instance.price[s, i] * 3600))])
    with (base / f"{stem}_links.csv").open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["slot", "a", "b", "gbps"])
        for s in range(instance.num_slots):
            for i in range(n):
                for j in range(i + 1, n):
                    w.writerow([s, instance.devices[i].name, instance.devices[j].name,
                                repr(float(instance.bandwidth[s, i, j] / GBIT))])
    return path


write_instance = save_instance
