"""Profile importers: `dynpar import-profile --format {pipedream,dapple,sailor,metis} PATH
--out FILE` writes one layer table (solver.io.workloads's CSV, with solver.io.columns's
@mbs<b>@tp<t> columns) holding every measured device kind, micro-batch size and TP degree of
the profile. Each module documents its format and source: graphs (pipedream, dapple), sailor,
metis. Every importer returns an `Imported` whose notes say what was estimated or left out.

--kind: KIND (the kind a single-kind profile was measured on) or GPU=KIND[,GPU=KIND] (how a
profile's GPU names map to kinds). --precision: recorded as `# precision: P` in the table.
"""
from __future__ import annotations

import math
from pathlib import Path

from ...errors import InstanceError
from ...model.workload import PRECISIONS
from .table import Imported, write_table

FORMATS = ("pipedream", "dapple", "sailor", "metis")

__all__ = ["FORMATS", "Imported", "import_any", "parse_kinds", "write_table"]


def parse_kinds(kind: str | None) -> tuple[str | None, dict[str, str]]:
    """(single kind, {GPU name: kind}) of a --kind value."""
    if not kind:
        return None, {}
    if "=" not in kind:
        return kind.strip(), {}
    out = {}
    for part in kind.split(","):
        gpu, sep, k = part.partition("=")
        if not sep or not gpu.strip() or not k.strip():
            raise InstanceError(f"--kind: expected KIND or GPU=KIND[,GPU=KIND], got {kind!r}")
        out[gpu.strip()] = k.strip()
    return None, out


def import_any(fmt: str, path: str | Path, *, minibatch: int | None = None, kind: str | None = None,
               precision: str | None = None, activation_bytes: float | None = None) -> Imported:
    """Import the profile at `path` in format `fmt` (one of FORMATS)."""
    if fmt not in FORMATS:
        raise InstanceError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    path = Path(path)
    if not path.exists():
        raise InstanceError(f"{path}: not found")
    if activation_bytes is not None and fmt != "metis":
        raise InstanceError(f"--activation-bytes: only Metis profiles lack the boundary bytes; a {fmt} profile "
                            f"has its own (got {activation_bytes!r})")
    if activation_bytes is not None and not (math.isfinite(activation_bytes) and activation_bytes >= 0):
        raise InstanceError(f"--activation-bytes: expected a finite number of bytes >= 0, got {activation_bytes!r}")
    if precision is not None and precision not in PRECISIONS:
        raise InstanceError(f"--precision: expected one of {', '.join(sorted(PRECISIONS))}, got {precision!r}")
    single, mapping = parse_kinds(kind)
    if fmt in ("pipedream", "dapple"):
        if mapping:
            raise InstanceError(f"--kind: a {fmt} profile holds one kind: give KIND, not GPU=KIND ({kind!r})")
        from .graphs import import_graph
        return import_graph(path, fmt, minibatch, single, precision)
    if single is not None:
        raise InstanceError(f"--kind: a {fmt} profile names its GPUs: give GPU=KIND[,GPU=KIND], got {kind!r}")
    if fmt == "sailor":
        from .sailor import import_sailor
        return import_sailor(path, minibatch, mapping, precision)
    from .metis import import_metis
    return import_metis(path, minibatch, mapping, precision, activation_bytes)
