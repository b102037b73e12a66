"""The table of real accelerators, `models/hardware.csv`: kind -> static specification.

Columns (one row per device kind as a framework sees it, so one K80 GPU is half a board):
kind, name, fp32_tflops (peak FP32, 1e12 FLOP/s), memory_gb (1e9 bytes), busy_w (TDP,
watts while computing), idle_w (watts while held idle; assumed 30% of TDP), price_per_hour
(USD per device-hour), price_estimated (1 where no price record was found and the figure
is an estimate), spec_source and price_source (where the figures come from), note.
Spec figures come from Epoch AI's ML hardware data set (via ../shared/data/hardware),
prices from the SkyNomad artifact where recorded.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import InstanceError
from . import ranges as R
from .data import models_dir
from .text import read_text, repeated_columns

HARDWARE_CSV = models_dir() / "hardware.csv"
"""The packaged hardware table (solver/data/models/hardware.csv; the checkout's models/ links to it)."""
IDLE_FRACTION = 0.3
"""Assumed idle power as a fraction of TDP (documented assumption, used in the table)."""

ALIASES = {
    "V100": "V100-SXM2-16GB",
    "P100": "P100-PCIe-16GB",
    "A100": "A100-SXM4-40GB",
    "H100": "H100-SXM5-80GB",
    "H200": "H200-SXM-141GB",
}

_NUMERIC = ("fp32_tflops", "memory_gb", "busy_w", "idle_w", "price_per_hour")
_TEXT = ("name", "price_estimated", "spec_source", "price_source", "note")
_RANGES = {"fp32_tflops": R.PEAK_TFLOPS, "memory_gb": R.MEMORY_GB, "busy_w": R.POWER_W, "idle_w": R.POWER_W,
           "price_per_hour": R.PRICE_PER_HOUR}


@dataclass(frozen=True)
class GpuSpec:
    """One device kind: peak FP32 FLOP/s, memory bytes, busy/idle watts, USD per hour."""

    kind: str
    name: str
    peak_flops: float
    memory_bytes: float
    busy_w: float
    idle_w: float
    price_per_hour: float
    price_estimated: bool
    spec_source: str
    price_source: str


def _parse_row(path: Path, lineno: int, row: dict[str, str]) -> GpuSpec:
    values = {}
    for col in _NUMERIC:
        cell = (row.get(col) or "").strip()
        try:
            v = float(cell)
        except ValueError:
            raise InstanceError(f"{path}: row {lineno}: column {col!r}: not a number: {cell!r}") from None
        if not math.isfinite(v) or v < 0 or (v == 0 and col != "price_per_hour"):
            raise InstanceError(f"{path}: row {lineno}: column {col!r}: must be positive: {cell!r}")
        problem = _RANGES[col].problem(v)
        if problem:
            raise InstanceError(f"{path}: row {lineno}: column {col!r}: {problem} (got {cell!r})")
        values[col] = v
    kind = (row.get("kind") or "").strip()
    if not kind:
        raise InstanceError(f"{path}: row {lineno}: column 'kind': empty")
    return GpuSpec(kind, (row.get("name") or kind).strip(), values["fp32_tflops"] * 1e12,
                   values["memory_gb"] * 1e9, values["busy_w"], values["idle_w"],
                   values["price_per_hour"], (row.get("price_estimated") or "0").strip() == "1",
                   (row.get("spec_source") or "").strip(), (row.get("price_source") or "").strip())


@lru_cache(maxsize=8)
def _load_cached(path: str) -> tuple[GpuSpec, ...]:
    p = Path(path)
    text = read_text(p, "hardware table")
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in ("kind", *_NUMERIC) if c not in header]
    if missing:
        raise InstanceError(f"{p}: missing column(s) {', '.join(map(repr, missing))}")
    twice = repeated_columns(header)
    if twice:
        raise InstanceError(f"{p}: column(s) {', '.join(map(repr, twice))} given twice; expected each column once")
    unknown = [h for h in header if h not in ("kind", *_NUMERIC, *_TEXT)]
    if unknown:
        raise InstanceError(f"{p}: unknown column(s) {', '.join(map(repr, unknown))}; allowed: "
                            f"{', '.join(('kind', *_NUMERIC, *_TEXT))}")
    specs, seen = [], set()
    for lineno, row in enumerate(reader, start=2):
        spec = _parse_row(p, lineno, row)
        if spec.kind in seen:
            raise InstanceError(f"{p}: row {lineno}: column 'kind': duplicate kind {spec.kind!r}")
        seen.add(spec.kind)
        specs.append(spec)
    return tuple(specs)


def load_hardware(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """The hardware table as kind -> GpuSpec (default: models/hardware.csv)."""
    return {s.kind: s for s in _load_cached(str(Path(path or HARDWARE_CSV).resolve()))}


def hardware_spec(kind: str, table: dict[str, GpuSpec] | None = None) -> GpuSpec:
    """The spec of `kind` (an exact kind or an alias such as "V100"); KeyError names the known kinds."""
    table = table if table is not None else load_hardware()
    spec = table.get(kind) or table.get(ALIASES.get(kind, ""))
    if spec is None:
        raise KeyError(f"unknown hardware kind {kind!r}; known: {', '.join(sorted(table))}")
    return spec
