"""An Imported table from times measured on a grid of (device kind, micro-batch size, TP
degree), the shape of Sailor's and Metis's profiles."""
from __future__ import annotations

from typing import Sequence

from ...errors import InstanceError
from ...model import Layer, Workload
from ..hardware import load_hardware
from .table import Imported, Times

REFERENCE = "A100-SXM4-40GB"
"""Preferred kind whose measured seconds, times its sustained FLOP/s, give the FLOP columns."""
EFFICIENCY = 0.5
"""Sustained fraction of peak FP32 FLOP/s used for that conversion (the instances' default)."""


def from_grid(name: str, source: str, names: Sequence[str], param: Sequence[float], out: Sequence[float],
              stash: Sequence[float], input_bytes: float, variants: dict[tuple[str, int, int], Times],
              base_tp: int, *, minibatch: int | None = None, notes: Sequence[str] = (),
              bytes_at: dict | None = None, precision: str | None = None,
              optimizer: dict[tuple[str, int, int], tuple[float, ...]] | None = None,
              declare: dict[str, str] | None = None) -> Imported:
    """The plain columns at micro-batch size `minibatch` (default: the smallest timed at
    base_tp) and TP degree base_tp; FLOPs from the reference kind's seconds x TP degree x its
    sustained FLOP/s (an estimate for kinds without measurements: a note says so). optimizer:
    (kind, mbs, tp) -> optimizer-step seconds per layer; those at the plain columns' size and
    degree are kept. A kind the packaged hardware table lacks gets a note (`undeclared_notes`;
    `declare`: kind -> the [[kinds]] fields to suggest for it)."""
    if not variants:
        raise InstanceError(f"{source}: no measured times")
    sizes = sorted({b for _, b, t in variants if t == base_tp}) or sorted({b for _, b, _ in variants})
    if minibatch is not None and minibatch not in sizes:
        raise InstanceError(f"{source}: --minibatch {minibatch}: no times at that micro-batch size and tp {base_tp}; "
                            f"timed: {', '.join(map(str, sizes))}")
    mbs = minibatch if minibatch is not None else sizes[0]
    measured = {k: v for (k, b, t), v in variants.items() if b == mbs and t == base_tp}
    notes = list(notes)
    for k in sorted({k for k, _, _ in variants} - set(measured)):
        timed = sorted((b, t) for kk, b, t in variants if kk == k)
        notes.append(f"kind {k}: no times at micro-batch {mbs}, tp {base_tp} (timed at "
                     f"{', '.join(f'mbs {b} tp {t}' for b, t in timed)}): only in its @mbs@tp columns")
    table = load_hardware()
    known = sorted((k for k in variants if k[0] in table),
                   key=lambda k: (k[2] != base_tp, k[1] != mbs, k[0] != REFERENCE, k))
    if not known:
        raise InstanceError(f"{source}: no measured kind is in the packaged hardware table "
                            f"({', '.join(sorted({k for k, _, _ in variants}))}), so seconds cannot become FLOPs; "
                            "pass --kind GPU=KIND to name a packaged kind")
    ref = known[0]
    sustained = table[ref[0]].peak_flops * EFFICIENCY * ref[2]
    fw, bw = variants[ref]
    layers = tuple(Layer(n, f * sustained, b * sustained, o, h, p)
                   for n, f, b, o, h, p in zip(names, fw, bw, out, stash, param))
    notes.append(f"fwd_flops, bwd_flops: {ref[0]}'s seconds at micro-batch {ref[1]}, tp {ref[2]} x {ref[2]} x "
                 f"{EFFICIENCY:g} x its peak FP32 FLOP/s: estimates, used only for kinds without measured times")
    notes += undeclared_notes(sorted({k for k, _, _ in variants} - set(table)), declare or {})
    wl = Workload(name, layers, mbs, mbs, 4.0, float(input_bytes), measured)
    steps = {k: v for (k, b, t), v in (optimizer or {}).items() if b == mbs and t == base_tp}
    return Imported(wl, mbs, base_tp, source, dict(variants), dict(bytes_at or {}), tuple(notes), precision, steps)


def undeclared_notes(kinds: Sequence[str], declare: dict[str, str]) -> list[str]:
    """One note per written kind that the packaged hardware table (models/hardware.csv) lacks:
    the instance loader refuses a measured column of a kind it does not know, whether or not a
    device is of that kind, so an instance using the table declares it in [[kinds]]; the
    fields suggested are `declare[kind]`, else a `like` to fill in."""
    return [f"kind {k}: not in the packaged hardware table (models/hardware.csv): an instance using this table "
            f"declares it in [[kinds]] even where no device is of that kind (else the loader refuses column "
            f"'fwd_s:{k}'): " + declare.get(k, f'kind = "{k}", like = "<a packaged kind>" (and its own '
                                               f'memory_gb, peak_tflops, ...)') for k in kinds]
