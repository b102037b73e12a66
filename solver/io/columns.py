"""Layer-table columns for figures measured at several micro-batch sizes and tensor-parallel
degrees (what Sailor's and Metis's profiles hold), and how the reader uses them.

Naming scheme (a suffix on the layer table's columns, solver.io.workloads):
- `fwd_s:<kind>@mbs<b>@tp<t>`, `bwd_s:<kind>@mbs<b>@tp<t>`: seconds per sample of each layer on
  one device of kind <kind>, timed at micro-batch size b with the layer split over t devices
  (Megatron-style tensor parallelism; seconds per device of the TP group);
- `param_bytes@tp<t>`, `out_bytes@tp<t>`, `stash_bytes@tp<t>`: the layer's bytes per device at
  TP degree t (the plain columns are the figures at t = 1, or at the smallest t profiled).

The reader (read_workload_csv) checks every such column like the plain ones, and for each kind
takes the `@mbs<u>@tp1` column at the workload's micro-batch size u, when the table has one, in
place of the plain `fwd_s:<kind>` column; the other `@tp1` sizes become
Workload.measured_by_micro_batch, and each degree t > 1 with its `param_bytes@tp<t>` and
`stash_bytes@tp<t>` columns becomes Workload.tp_variants[t] (with its timed sizes), which the
tensor-parallel planner uses (model.units). `out_bytes@tp<t>` must equal out_bytes (the
boundary is sent once per stage, at its degree-1 size); a different figure is an error.

What the `@tp<t>` seconds hold, for every degree of the table: its `# tp_times:` comment line
(model.workload.TP_TIMES, TPVariant.times):
- `with_collectives` (the default, where the line is absent: Sailor's and Metis's profiles time
  a TP layer whole): the shard's compute and its TP collectives; the cost model adds nothing;
- `shard_compute` (`dynpar profile --tp-degrees`, runtime.profiler.profile_tp: shard 0 of t
  timed alone in one process, its collectives skipped): the shard's compute only; the cost
  model adds each layer's TP collectives as for a degree without times (the ring of the
  stage's links plus the per-call `tp_collective_latency`, model.state.tp_collective_seconds),
  so what the estimator fits for them still applies.
"""
from __future__ import annotations

import re

VARIANT = re.compile(r"^(fwd_s|bwd_s):(.+)@mbs(\d+)@tp(\d+)$")
BYTES_VARIANT = re.compile(r"^(param_bytes|out_bytes|stash_bytes)@tp(\d+)$")


def time_column(which: str, kind: str, mbs: int | None = None, tp: int | None = None) -> str:
    """`fwd_s:<kind>` (which = "fwd" or "bwd"), with `@mbs<b>@tp<t>` when both are given."""
    base = f"{which}_s:{kind}"
    return base if mbs is None else f"{base}@mbs{int(mbs)}@tp{int(tp or 1)}"


def bytes_column(name: str, tp: int) -> str:
    """`param_bytes@tp<t>` etc."""
    return f"{name}@tp{int(tp)}"


def variant_columns(header: list[str]) -> tuple[dict[tuple[str, int, int], tuple[str, str]], list[str]]:
    """({(kind, mbs, tp): (fwd column, bwd column)}, problems): the timed variants of a header,
    and one problem per unpaired or malformed variant column."""
    fwd: dict[tuple[str, int, int], str] = {}
    bwd: dict[tuple[str, int, int], str] = {}
    problems = []
    for h in header:
        if "@" not in h:
            continue
        if not h.startswith(("fwd_s:", "bwd_s:")):
            if not BYTES_VARIANT.match(h) or int(BYTES_VARIANT.match(h).group(2)) < 1:
                problems.append(f"column {h!r}: expected fwd_s:<kind>@mbs<b>@tp<t>, bwd_s:... or "
                                "param_bytes|out_bytes|stash_bytes@tp<t> (t >= 1)")
            continue
        m = VARIANT.match(h)
        if m is None or int(m.group(3)) < 1 or int(m.group(4)) < 1:
            problems.append(f"column {h!r}: expected fwd_s:<kind>@mbs<b>@tp<t> with b, t >= 1")
            continue
        key = (m.group(2), int(m.group(3)), int(m.group(4)))
        (fwd if m.group(1) == "fwd_s" else bwd)[key] = h
    for key in sorted(set(fwd) ^ set(bwd)):
        have = fwd.get(key) or bwd.get(key)
        problems.append(f"column {have!r} has no matching {'bwd_s' if key in fwd else 'fwd_s'} column")
    return {k: (fwd[k], bwd[k]) for k in fwd if k in bwd}, problems


def bytes_variants(header: list[str]) -> list[str]:
    """The `<bytes>@tp<t>` columns of a header."""
    return [h for h in header if BYTES_VARIANT.match(h)]
