"""What an importer returns (`Imported`) and how it is written as a layer table.

The table is the layer-table CSV of solver.io.workloads: the plain columns hold the figures
at the table's micro-batch size and the smallest TP degree profiled (normally 1); every other
measured (kind, micro-batch size, TP degree) is written as `fwd_s:<kind>@mbs<b>@tp<t>` /
`bwd_s:...` and per-degree bytes as `param_bytes@tp<t>` etc. (solver.io.columns).
`# note:` lines say what was estimated or left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...model import Workload
from ..columns import bytes_column, time_column
from ..workloads import BASE_COLUMNS, base_cells, format_number, write_table_csv

Times = tuple[tuple[float, ...], tuple[float, ...]]
"""(forward seconds per sample, backward seconds per sample), one per layer."""


@dataclass(frozen=True)
class Imported:
    """A profile as a layer table.

    workload: the plain table (per-sample FLOP, bytes and measured seconds at micro-batch
    size `micro_batch` and TP degree `tp`); variants: every measured (kind, micro-batch size,
    TP degree) -> Times; bytes_at: TP degree -> (param, out, stash) bytes per layer for degrees
    other than `tp`; notes: what was estimated or left out; source: format and file;
    optimizer: kind -> optimizer-step seconds per iteration of each layer (at degree `tp`)."""

    workload: Workload
    micro_batch: int
    tp: int
    source: str
    variants: dict[tuple[str, int, int], Times] = field(default_factory=dict)
    bytes_at: dict[int, tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    precision: str | None = None
    optimizer: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def kinds(self) -> list[str]:
        """Every measured kind, plain or variant."""
        return sorted(set(self.workload.measured) | {k for k, _, _ in self.variants})


def write_table(imp: Imported, out: str | Path) -> Path:
    """Write `imp` as a layer-table CSV at `out` (the parent folder is created)."""
    out = Path(out)
    wl = imp.workload
    kinds = sorted(wl.measured)
    var = sorted(imp.variants)
    degrees = sorted(imp.bytes_at)
    header = list(BASE_COLUMNS) + [c for k in kinds for c in (time_column("fwd", k), time_column("bwd", k))]
    header += [c for k, b, t in var for c in (time_column("fwd", k, b, t), time_column("bwd", k, b, t))]
    header += [bytes_column(n, t) for t in degrees for n in ("param_bytes", "out_bytes", "stash_bytes")]
    steps = sorted(imp.optimizer)
    header += [f"opt_s:{k}" for k in steps]
    lines = [f"# dynpar layer table {wl.name}: imported from {imp.source}",
             f"# plain columns: micro-batch size {imp.micro_batch}, tensor-parallel degree {imp.tp}; "
             "other sizes and degrees in columns name@mbs<b>@tp<t> (solver.io.columns)"]
    lines += [f"# note: {n}" for n in imp.notes]
    lines.append(f"# input_bytes: {format_number(wl.input_bytes)}")
    if imp.precision:
        lines.append(f"# precision: {imp.precision}")
    rows = []
    for i in range(wl.num_layers):
        row = base_cells(wl, i)
        for key in var:
            fw, bw = imp.variants[key]
            row += [repr(float(fw[i])), repr(float(bw[i]))]
        for t in degrees:
            row += [format_number(x[i]) for x in imp.bytes_at[t]]
        row += [repr(float(imp.optimizer[k][i])) for k in steps]
        rows.append(row)
    return write_table_csv(out, lines, header, rows)
