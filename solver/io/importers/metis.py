"""Metis profiles (SamsungLabs/Metis, USENIX ATC'24; its README "Profile Data Guide" and
`data_loader.py`): one JSON file per device type, TP degree and batch size, named
`DeviceType.<GPU>_tp<t>_bs<b>.json`, holding

    model.num_layers, model.parameters.parameters_per_layer_bytes (whole layer, every file alike),
    model.parameters.activation_parameters_bytes (optional: bytes after each layer),
    execution_time.layer_compute_total_ms (forward + backward ms per layer, per batch of b, per
    GPU of the TP group), execution_memory.layer_memory_total_mb (optional: MiB per layer,
    activations + gradients + optimizer state).

PATH is a folder of such files or one file. Written per sample: forward = 1/3 and backward =
2/3 of layer_compute_total_ms / 1000 / b (the file gives only their sum; backward = 2 x forward
as everywhere in this package); param_bytes = parameters_per_layer_bytes / t (Metis's own rule);
out_bytes = activation_parameters_bytes / b, else `activation_bytes` (one figure per sample for
every layer, `--activation-bytes`), else an error saying to pass it; stash_bytes = the growth of
layer_memory_total_mb per extra sample (least squares over the batch sizes profiled at that
device type and degree, at least two), else out_bytes (a lower bound), with a note. GPU names
become kinds through the hardware table's aliases (A100 -> A100-SXM4-40GB, ...) or `--kind`.
Not written: forward_backward_time_ms - sum(layers) (Metis's "fb_sync"), optimizer and
all-reduce times (notes say so).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ...errors import InstanceError
from ..hardware import hardware_spec
from .grid import from_grid
from .table import Imported, Times

FILE = re.compile(r"^DeviceType\.(\w+?)_tp(\d+)_bs(\d+)\.json$")
MIB = 2 ** 20


def _read(p: Path) -> dict:
    try:
        doc = json.loads(p.read_text())
        model, times = doc["model"], doc["execution_time"]
        params = [float(x) for x in model["parameters"]["parameters_per_layer_bytes"]]
        compute = [float(x) for x in times["layer_compute_total_ms"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise InstanceError(f"{p}: not a Metis profile ({type(e).__name__}: {e}); expected model.parameters."
                            "parameters_per_layer_bytes and execution_time.layer_compute_total_ms") from None
    if len(params) != len(compute):
        raise InstanceError(f"{p}: {len(params)} parameters_per_layer_bytes but {len(compute)} layer_compute_total_ms")
    em = doc.get("execution_memory", {})
    if not isinstance(em, dict):
        raise InstanceError(f"{p}: execution_memory: expected an object holding layer_memory_total_mb, got "
                            f"{type(em).__name__}")
    mem = em.get("layer_memory_total_mb")
    if mem is not None and (not isinstance(mem, list) or
                            any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in mem)):
        raise InstanceError(f"{p}: execution_memory.layer_memory_total_mb: expected a list of MiB per layer, got "
                            f"{mem!r:.80}")
    act = model["parameters"].get("activation_parameters_bytes")
    return {"params": params, "compute": compute, "mem": mem, "act": act, "name": model.get("model_name")}


def import_metis(path: str | Path, minibatch: int | None = None, kinds: dict[str, str] | None = None,
                 precision: str | None = None, activation_bytes: float | None = None) -> Imported:
    """The Metis profile files at `path` as an Imported layer table (module doc)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("*.json")) if path.is_dir() else []
    matched = [(f, FILE.match(f.name)) for f in files]
    notes = [f"{f.name}: not named DeviceType.<GPU>_tp<t>_bs<b>.json: skipped" for f, m in matched if m is None]
    matched = [(f, m) for f, m in matched if m is not None]
    if not matched:
        raise InstanceError(f"{path}: no Metis profile (files named DeviceType.<GPU>_tp<t>_bs<b>.json)")
    for f, m in matched:
        if int(m.group(2)) < 1 or int(m.group(3)) < 1:
            raise InstanceError(f"{f}: tp and bs in the name: expected integers >= 1, got tp{m.group(2)} bs{m.group(3)}")
    docs = {(m.group(1), int(m.group(2)), int(m.group(3))): (f, _read(f)) for f, m in matched}
    first_file, first = next(iter(docs.values()))
    L = len(first["params"])
    for (gpu, t, b), (f, d) in docs.items():
        if d["params"] != first["params"]:
            raise InstanceError(f"{f}: parameters_per_layer_bytes differ from {first_file.name}'s (one model per folder)")
    unused = sorted(set(kinds or {}) - {gpu for gpu, _, _ in docs})
    if unused:
        raise InstanceError(f"--kind: {', '.join(unused)}: no such GPU in {path}; its GPUs: "
                            f"{', '.join(sorted({gpu for gpu, _, _ in docs}))}")
    kind_of = {gpu: (kinds or {}).get(gpu) or _kind(gpu) for gpu, _, _ in docs}
    variants: dict[tuple[str, int, int], Times] = {}
    for (gpu, t, b), (f, d) in docs.items():
        total = np.asarray(d["compute"]) / 1000.0 / b
        variants[(kind_of[gpu], b, t)] = (tuple(total / 3.0), tuple(2.0 * total / 3.0))
    degrees = sorted({t for _, t, _ in docs})
    base_tp = degrees[0]
    act = next(((f, d) for (_, _, b), (f, d) in docs.items() if d["act"] is not None), None)
    if act is not None:
        b = int(FILE.match(act[0].name).group(3))
        try:
            out = [float(x) / b for x in act[1]["act"]]
        except (TypeError, ValueError) as e:
            raise InstanceError(f"{act[0]}: model.parameters.activation_parameters_bytes: expected numbers, got "
                                f"{act[1]['act']!r} ({e})") from None
        if len(out) != L:
            raise InstanceError(f"{act[0]}: {len(out)} activation_parameters_bytes for {L} layers")
    elif activation_bytes is not None:
        out = [float(activation_bytes)] * L
        notes.append(f"out_bytes: {activation_bytes:g} bytes per sample after every layer, as given "
                     "(--activation-bytes)")
    else:
        raise InstanceError(f"{path}: Metis profiles have no model.parameters.activation_parameters_bytes, so the "
                            "bytes crossing a cut are unknown; pass --activation-bytes B (bytes per sample after "
                            "each layer, e.g. sequence x hidden x 2 for a 16-bit GPT)")
    stash = {t: _stash(docs, t, L) for t in degrees}
    for t, s in stash.items():
        if s is None:
            notes.append(f"stash_bytes at tp {t}: layer_memory_total_mb is missing, of the wrong length or at one "
                         "batch size only: the boundary activation (out_bytes) is used, a lower bound")
            continue
        falling = [i for i, x in enumerate(s) if x < 0]
        if falling:
            notes.append(f"stash_bytes at tp {t}: layer_memory_total_mb falls with the batch size at "
                         f"{len(falling)} layer(s) ({', '.join(f'layer{i}' for i in falling[:5])}"
                         f"{', ...' if len(falling) > 5 else ''}): their boundary activation (out_bytes) is used, "
                         "a lower bound")
            stash[t] = [out[i] if x < 0 else x for i, x in enumerate(s)]
    param = {t: [p / t for p in first["params"]] for t in degrees}
    notes.append("times: Metis gives forward + backward per layer; split 1/3 forward, 2/3 backward")
    notes.append("not imported: fb_sync (forward_backward_time_ms - layer sum), optimizer_time_ms and the "
                 "all-reduce times (no per-layer term in the layer table)")
    bytes_at = {t: (tuple(param[t]), tuple(out), tuple(stash[t] or out)) for t in degrees if t != base_tp}
    if precision is None:
        notes.append("precision not recorded (Metis files do not say): the bytes are read as fp32; pass "
                     "--precision fp16 or bf16 if the profile ran in mixed precision")
    names = [f"layer{i}" for i in range(L)]
    name = path.stem if path.is_file() else path.name
    return from_grid(name, f"Metis profiles {path}", names, param[base_tp], out, stash[base_tp] or out, 0.0,
                     variants, base_tp, minibatch=minibatch, notes=notes, bytes_at=bytes_at, precision=precision)


def _kind(gpu: str) -> str:
    """The hardware kind of a Metis GPU name (an alias such as A100), else the name itself."""
    try:
        return hardware_spec(gpu).kind
    except KeyError:
        return gpu


def _stash(docs: dict, tp: int, L: int) -> list[float] | None:
    """Per-layer bytes per sample: the least-squares slope of layer memory against batch size
    over the files of one device type at TP degree tp (None without two usable sizes); a
    layer whose memory falls with the batch size has a negative slope (the caller says so)."""
    for gpu in sorted({g for g, t, _ in docs if t == tp}):
        pts = [(b, d["mem"]) for (g, t, b), (_, d) in docs.items()
               if g == gpu and t == tp and isinstance(d["mem"], list) and len(d["mem"]) == L]
        if len({b for b, _ in pts}) >= 2:
            bs = np.array([b for b, _ in pts], dtype=float)
            mem = np.array([m for _, m in pts], dtype=float) * MIB
            db = bs - bs.mean()
            slope = (db[:, None] * (mem - mem.mean(axis=0))).sum(axis=0) / float((db * db).sum())
            return [float(x) for x in slope]
    return None
