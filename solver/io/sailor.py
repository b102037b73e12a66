"""Read the Sailor planner's measured LLM profiles (../shared/data/profiles/sailor) as workloads.

`llm_info.json` gives, per model, tensor-parallel degree and layer: parameter bytes, the bytes
sent to the next stage (`act_output_bytes`) and the activation bytes the layer keeps for its
backward pass (`act_mem_bytes`), both per sample (one sequence). `profiles/<model>/<gpu>/
profile.json` gives seconds per micro-batch {mbs: {tp: {layer: [fwd, bwd, optimizer step]}}}.
Layer names: embedding (0), head (last), block<i> for the layers shaped like layer 1 (the
transformer blocks), layer<i> otherwise (LLAMA-3-8's final norm). The figures are used as recorded: out_bytes = act_output_bytes, stash_bytes = act_mem_bytes,
param_bytes = params_bytes; the input bytes are layer 0's act_input_bytes.

Measured seconds become per-sample seconds (divided by the micro-batch size) under the device
kind of the hardware table (`SAILOR_KINDS`); FLOPs are those seconds on the reference kind times
its sustained FP32 FLOP/s (peak times `efficiency`), an estimate for kinds without measurements.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import InstanceError
from ..model import Layer, Workload
from .hardware import hardware_spec
from .text import read_text

SAILOR_KINDS = {"A100-40": "A100-SXM4-40GB", "A100-80": "A100-SXM4-80GB", "V100-16": "V100-SXM2-16GB",
                "GH-96": "GH-96"}
"""Sailor's GPU names -> this package's hardware kinds (GH-96, a GH200 96 GB, has no row)."""

SAILOR_DECLARE = {"GH-96": 'kind = "GH-96", like = "H100-SXM5-80GB", memory_gb = 96 (a GH200 with 96 GB, as '
                           'benchmarks/bench_sailor_cluster.py declares it)'}
"""The [[kinds]] fields an instance may declare for a Sailor kind the hardware table lacks."""


@dataclass(frozen=True)
class SailorProfile:
    """One model at one tensor-parallel degree. Bytes per sample; seconds per micro-batch.

    times[kind][mbs] = (forward s, backward s, optimizer-step s) per layer, for a micro-batch of
    mbs samples; kinds are hardware kinds (SAILOR_KINDS). notes: what was left out and why (a
    GPU's profile whose layers do not match llm_info.json is skipped, not guessed)."""

    model: str
    tp: int
    names: tuple[str, ...]
    param_bytes: tuple[float, ...]
    out_bytes: tuple[float, ...]
    saved_bytes: tuple[float, ...]
    input_bytes: float
    times: dict[str, dict[int, tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]]]
    notes: tuple[str, ...] = ()

    @property
    def num_layers(self) -> int:
        return len(self.names)


def load_json(path: Path) -> dict:
    """The JSON document at `path`; InstanceError naming the file when it is absent, a folder,
    not UTF-8 or not JSON."""
    try:
        return json.loads(read_text(path, "JSON file"))
    except json.JSONDecodeError as e:
        raise InstanceError(f"{path}: not valid JSON: {e}") from None


def read_sailor_profile(root: str | Path, model: str, tp: int = 1) -> SailorProfile:
    """The profile of `model` at tensor-parallel degree `tp` from Sailor's folder `root`."""
    root = Path(root)
    path = root / "llm_info.json"
    info = load_json(path)
    if not isinstance(info, dict):
        raise InstanceError(f"{path}: expected {{model: {{tp degree: {{layer: bytes}}}}}}")
    if model not in info:
        raise InstanceError(f"{path}: model: expected one of {sorted(info)}, got {model!r}")
    by_tp = info[model]
    if not isinstance(by_tp, dict) or str(tp) not in by_tp:
        raise InstanceError(f"{path}: {model}: tp: expected one of "
                            f"{sorted(by_tp, key=str) if isinstance(by_tp, dict) else []}, got {tp}")
    idx, rows = _layer_rows(path, f"{model} tp {tp}", by_tp[str(tp)])
    L = len(idx)
    block = rows[1]["params_bytes"] if L > 2 else None
    names = tuple("embedding" if i == 0 else "head" if i == L - 1 else
                  f"block{i - 1}" if rows[i]["params_bytes"] == block else f"layer{i}" for i in range(L))
    times: dict[str, dict[int, tuple]] = {}
    notes: list[str] = []
    folder = root / "profiles" / model
    for gpu_dir in sorted(p for p in folder.glob("*") if p.is_dir()) if folder.is_dir() else []:
        prof = load_json(gpu_dir / "profile.json")
        kind = SAILOR_KINDS.get(gpu_dir.name, gpu_dir.name)
        try:
            for mbs, per_tp in prof.items():
                layers = per_tp.get(str(tp))
                if layers is None:
                    continue
                if sorted(layers, key=int) != idx:
                    notes.append(f"{gpu_dir / 'profile.json'}: mbs {mbs} tp {tp}: {len(layers)} layers, llm_info.json "
                                 f"has {L}: skipped")
                    continue
                cols = [tuple(float(layers[i][c]) for i in idx) for c in range(3)]
                times.setdefault(kind, {})[int(mbs)] = (cols[0], cols[1], cols[2])
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as e:
            raise InstanceError(f"{gpu_dir / 'profile.json'}: not a Sailor profile ({type(e).__name__}: {e}); expected "
                                "{micro-batch size: {tp degree: {layer: [forward s, backward s, update s]}}}") from None
    return SailorProfile(model, int(tp), names, tuple(r["params_bytes"] for r in rows),
                         tuple(r["act_output_bytes"] for r in rows), tuple(r["act_mem_bytes"] for r in rows),
                         rows[0]["act_input_bytes"], times, tuple(notes))


INFO_FIELDS = ("params_bytes", "act_output_bytes", "act_mem_bytes", "act_input_bytes")
"""The fields of llm_info.json's layer entries this reader uses (bytes; per sample but params)."""


def _layer_rows(path: Path, where: str, rows: object) -> tuple[list[str], list[dict[str, float]]]:
    """llm_info.json's layer entries {"0": {field: bytes}, ...} of one model and tp degree: (the
    layer keys in index order, each layer's INFO_FIELDS as floats); InstanceError naming the
    file, the layer and the field for anything else."""
    if not isinstance(rows, dict) or not rows:
        raise InstanceError(f"{path}: {where}: expected {{layer index: {{field: bytes}}}}, got {type(rows).__name__}")
    bad = [k for k in rows if not _is_int(k)]
    if bad:
        raise InstanceError(f"{path}: {where}: layer keys: expected integers 0..{len(rows) - 1}, got {bad[0]!r}")
    order = sorted(rows, key=int)
    if [int(i) for i in order] != list(range(len(order))):
        raise InstanceError(f"{path}: {where}: layers are not 0..{len(order) - 1}")
    out = []
    for i in order:
        entry = rows[i]
        if not isinstance(entry, dict):
            raise InstanceError(f"{path}: {where}: layer {i}: expected {{field: bytes}}, got {type(entry).__name__}")
        row = {}
        for f in INFO_FIELDS:
            if f not in entry:
                raise InstanceError(f"{path}: {where}: layer {i}: missing field {f!r}")
            x = entry[f]
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InstanceError(f"{path}: {where}: layer {i}: {f}: expected a number of bytes, got {x!r}")
            row[f] = float(x)
        out.append(row)
    return order, out


def sailor_workload(profile: SailorProfile, batch: int, micro_batch: int, opt_factor: float = 4.0,
                    reference: str = "A100-SXM4-40GB", efficiency: float = 0.5,
                    optimizer_step: str = "none") -> Workload:
    """A Workload from a profile at micro-batch size `micro_batch`: measured per-sample seconds
    for every kind timed at that size, FLOPs from the reference kind (module doc), and the times
    at every other profiled size dividing `batch` (Workload.measured_by_micro_batch).
    optimizer_step: as Workload.optimizer_step; the measured optimizer-step seconds per layer are
    those recorded at `micro_batch` (Sailor times the step with each micro-batch size's run)."""
    if batch < 1 or micro_batch < 1 or batch % micro_batch:
        raise InstanceError(f"sailor {profile.model}: batch {batch} must be a positive multiple of "
                            f"micro_batch {micro_batch}")
    measured = {kind: (tuple(f / micro_batch for f in t[0]), tuple(b / micro_batch for b in t[1]))
                for kind, by_mbs in profile.times.items() if (t := by_mbs.get(micro_batch)) is not None}
    if reference not in measured:
        raise InstanceError(f"sailor {profile.model}: reference kind {reference!r} has no times at micro-batch "
                            f"{micro_batch}; timed: {sorted(measured)}")
    sustained = hardware_spec(reference).peak_flops * efficiency
    fw, bw = measured[reference]
    layers = tuple(Layer(n, f * sustained, b * sustained, o, h, p) for n, f, b, o, h, p in
                   zip(profile.names, fw, bw, profile.out_bytes, profile.saved_bytes, profile.param_bytes))
    by_u: dict[int, dict] = {}
    for kind, per in profile.times.items():
        for mbs, t in per.items():
            if batch % mbs == 0:
                by_u.setdefault(mbs, {})[kind] = (tuple(f / mbs for f in t[0]), tuple(b / mbs for b in t[1]))
    return Workload(f"{profile.model}-tp{profile.tp}", layers, int(batch), int(micro_batch), float(opt_factor),
                    profile.input_bytes, measured, measured_by_micro_batch=dict(sorted(by_u.items())),
                    optimizer_step=optimizer_step,
                    optimizer_seconds={kind: t[micro_batch][2] for kind, t in profile.times.items()
                                       if micro_batch in t})


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
