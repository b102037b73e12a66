"""Sailor's measured LLM profiles (eth-easl/sailor, SOSP'25; ../shared/data/profiles/sailor,
see its README) as one layer table with every GPU, micro-batch size and TP degree they hold.

Source layout: `<root>/llm_info.json` (bytes per layer and TP degree) and
`<root>/profiles/<MODEL>/<GPU>/profile.json` = `{mbs: {tp: {layer: [fwd_s, bwd_s, opt_s]}}}`,
seconds per micro-batch of mbs samples on one GPU of a TP group of tp (read by
solver.io.sailor). PATH is the model folder `profiles/<MODEL>` (every GPU), one GPU folder or
one profile.json (that GPU only); `<root>` is the nearest ancestor holding llm_info.json.

Written: per sample, seconds = measured / mbs under the kind of solver.io.sailor.SAILOR_KINDS
(GH-96 stays GH-96: declare it in the instance's [[kinds]], as a note says for every kind
written that models/hardware.csv lacks; `--kind GPU=KIND` overrides);
out_bytes = act_output_bytes, stash_bytes = act_mem_bytes, param_bytes = params_bytes at the
smallest TP degree of llm_info.json (1), the other degrees in `@tp<t>` columns; the
optimizer-step seconds per layer as `opt_s:<kind>` (at the plain columns' size and degree:
Workload.optimizer_seconds, for optimizer_step = "measured"). Not written: degrees with
no bytes in llm_info.json, and GPU files whose layers do not match llm_info.json (notes say so).
The bytes are used as recorded: llm_info.json's `*_bytes` are 4 x its `*_floats` although
the runs were mixed precision, so the table is an fp32 table (no `# precision:` line): with
the default optimizer_factor 4 its parameter bytes give 16 bytes of model state per
parameter, the mixed-precision Adam figure (2 + 2 weights and gradients, 4 + 8 fp32 master
and moments). `--precision` records another reading (a 16-bit table keeps its bytes and uses
the mixed factor: do not give it for these files).
"""
from __future__ import annotations

import re
from pathlib import Path

from ...errors import InstanceError
from ..sailor import SAILOR_DECLARE, SAILOR_KINDS, load_json, read_sailor_profile
from .grid import from_grid
from .table import Imported, Times


def _root(path: Path) -> tuple[Path, str, str | None]:
    """(Sailor root, model, GPU folder or None) of a model folder, GPU folder or profile.json."""
    p = path.resolve()
    gpu = None
    if p.is_file():
        p, gpu = p.parent.parent, p.parent.name
    elif (p / "profile.json").is_file():
        p, gpu = p.parent, p.name
    if not p.is_dir():
        raise InstanceError(f"{path}: not found (expected a Sailor profiles/<MODEL> folder or a profile.json)")
    for anc in [p, *p.parents][:4]:
        if (anc / "llm_info.json").is_file():
            return anc, p.name, gpu
    raise InstanceError(f"{path}: no llm_info.json in the folders above it (expected <root>/profiles/<MODEL>/<GPU>/"
                        "profile.json next to <root>/llm_info.json)")


def _grouped(notes: list[str]) -> list[str]:
    """Per-(mbs, tp) notes of one file with the same reason, as one note."""
    groups: dict[tuple[str, str], int] = {}
    rest = []
    for n in notes:
        m = re.match(r"^(.*): mbs \d+ tp \d+: (.*)$", n)
        if m is None:
            rest.append(n)
        else:
            groups[(m.group(1), m.group(2))] = groups.get((m.group(1), m.group(2)), 0) + 1
    return [f"{path}: {count} (mbs, tp) profile(s): {why}" for (path, why), count in groups.items()] + rest


def import_sailor(path: str | Path, minibatch: int | None = None, kinds: dict[str, str] | None = None,
                  precision: str | None = None) -> Imported:
    """The Sailor profile at `path` as an Imported layer table (module doc)."""
    path = Path(path)
    root, model, gpu = _root(path)
    info = load_json(root / "llm_info.json")
    if not isinstance(info, dict) or not isinstance(info.get(model, {}), dict):
        raise InstanceError(f"{root / 'llm_info.json'}: expected {{model: {{tp degree: {{layer: bytes}}}}}}")
    if model not in info:
        raise InstanceError(f"{root / 'llm_info.json'}: model: expected one of {sorted(info)}, got {model!r}")
    try:
        degrees = sorted(int(t) for t in info[model])
    except ValueError as e:
        raise InstanceError(f"{root / 'llm_info.json'}: {model}: tp degrees: expected integers ({e})") from None
    folder = root / "profiles" / model
    gpus = sorted(d.name for d in folder.glob("*") if d.is_dir()) if folder.is_dir() else []
    unused = sorted(set(kinds or {}) - set(gpus))
    if unused:
        raise InstanceError(f"--kind: {', '.join(unused)}: no such GPU in {folder}; its GPUs: {', '.join(gpus)}")
    names = dict(SAILOR_KINDS, **(kinds or {}))
    wanted = None if gpu is None else names.get(gpu, gpu)
    variants: dict[tuple[str, int, int], Times] = {}
    steps: dict[tuple[str, int, int], tuple[float, ...]] = {}
    notes: list[str] = []
    profiles = {}
    for t in degrees:
        prof = read_sailor_profile(root, model, t)
        profiles[t] = prof
        notes += [n for n in prof.notes if gpu is None or n.startswith(str(folder / gpu))]
        for sailor_kind, by_mbs in prof.times.items():
            gpu_name = next((g for g, k in SAILOR_KINDS.items() if k == sailor_kind), sailor_kind)
            kind = names.get(gpu_name, sailor_kind)
            if wanted is not None and kind != wanted:
                continue
            for mbs, (fw, bw, opt) in by_mbs.items():
                variants[(kind, int(mbs), t)] = (tuple(x / mbs for x in fw), tuple(x / mbs for x in bw))
                steps[(kind, int(mbs), t)] = tuple(float(x) for x in opt)
    for prof_file in sorted(folder.glob("*/profile.json")):
        if gpu is not None and prof_file.parent.name != gpu:
            continue
        extra = sorted({int(t) for per_tp in load_json(prof_file).values() for t in per_tp} - set(degrees))
        if extra:
            notes.append(f"{prof_file.parent.name}: tp {', '.join(map(str, extra))} timed but llm_info.json has no "
                         f"bytes for {model} at that degree: not imported")
    notes = _grouped(notes)
    notes.append("bytes as recorded in llm_info.json (4 bytes per float, an fp32 table; with optimizer_factor 4: "
                 "16 bytes of model state per parameter)")
    notes.append("optimizer-step seconds (Sailor's third figure per layer): opt_s:<kind> columns at the plain "
                 "columns' micro-batch size and degree (optimizer_step = \"measured\" in the instance uses them)")
    base_tp = degrees[0]
    base = profiles[base_tp]
    bytes_at = {t: (p.param_bytes, p.out_bytes, p.saved_bytes) for t, p in profiles.items() if t != base_tp}
    source = f"Sailor profile {model} ({root})"
    return from_grid(model, source, base.names, base.param_bytes, base.out_bytes, base.saved_bytes,
                     base.input_bytes, variants, base_tp, minibatch=minibatch, notes=notes, bytes_at=bytes_at,
                     precision=precision, optimizer=steps, declare=SAILOR_DECLARE)
