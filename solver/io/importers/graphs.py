"""PipeDream and DAPPLE profile graphs: the same text format (solver.io.pipedream).

- **pipedream** (msr-fiddle/pipedream's profiler, `profiles/<model>/graph.txt`; see
  ../shared/data/README.md): minibatch from the Input node's image tensor, else the known
  profiler setting of the model folder, else `--minibatch`; the profiling GPU is not stated
  (very likely a V100: default kind V100-SXM2-16GB, `--kind` to change).
- **dapple** (AlibabaPAI/DAPPLE `profiling_results/<model>-...-pbs-<N>.txt` and the HPGO
  planner's `profiles/`): PipeDream's format written by DAPPLE's profiler; lists `[a; b]` for
  multi-output layers, edges indented by a space and a tab; the profiled batch is the file
  name's `pbs-<N>` (DAPPLE's "profile batch size"), else as for pipedream. DAPPLE's data were
  profiled on NVIDIA V100 GPUs (its PLANNER_REPRODUCTION.md): default kind V100-SXM2-16GB.

Both hold one device kind at one batch size and no tensor parallelism: the table has one
plain measured column pair. Names come from the file (graph.txt: its folder).
"""
from __future__ import annotations

import re
from pathlib import Path

from ...errors import InstanceError
from .. import pipedream
from .table import Imported

PBS = re.compile(r"pbs-(\d+)")


def import_graph(path: str | Path, fmt: str, minibatch: int | None = None, kind: str | None = None,
                 precision: str | None = None) -> Imported:
    """A PipeDream (fmt "pipedream") or DAPPLE (fmt "dapple") graph as an Imported table."""
    path = Path(path)
    note = ""
    if fmt == "dapple" and minibatch is None and (m := PBS.search(path.stem)):
        minibatch = int(m.group(1))
        note = f"profiled batch {minibatch} from the file name (pbs-{minibatch})"
    wl = pipedream.import_profile(path, kind=kind or pipedream.DEFAULT_KIND, minibatch=minibatch)
    if minibatch is None:
        mb = pipedream.profiled_minibatch(pipedream.parse_profile(path), path)
        note = (f"profiled minibatch {mb}: inferred from the graph (its Input node's image bytes, or the model "
                "folder's known setting); --minibatch N sets it")
    else:
        mb = minibatch
        try:
            inferred = pipedream.profiled_minibatch(pipedream.parse_profile(path), path)
        except InstanceError:
            inferred = None
        if inferred is not None and inferred != mb:
            note = ", ".join(x for x in (note, f"--minibatch {mb} used, where the graph says {inferred} (its Input "
                                               "node's image bytes, or the model folder's known setting)") if x)
    notes = tuple(n for n in (note, pipedream.BOUNDARY_NOTE,
                              f"fwd_flops, bwd_flops: the measured seconds x 0.5 x {wl.measured and next(iter(wl.measured))}'s "
                              "peak FP32 FLOP/s: estimates, used only for kinds without measured times") if n)
    source = f"{'DAPPLE' if fmt == 'dapple' else 'PipeDream'} profile {path.name}"
    kind_name = next(iter(wl.measured))
    return Imported(wl, mb, 1, source, {(kind_name, mb, 1): wl.measured[kind_name]}, {}, notes,
                    precision or "fp32")
