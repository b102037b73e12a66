"""The training job: layers in order, per-sample FLOP and bytes, batch and micro-batch.

Units: FLOP per sample, bytes per sample (activations) or per model (parameters), seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping

import numpy as np


@dataclass(frozen=True)
class Layer:
    """One layer, per sample.

    fwd_flops / bwd_flops: FLOP per sample; out_bytes: output activation bytes per
    sample (what crosses a cut after this layer); stash_bytes: activation bytes per
    sample kept for the backward pass; param_bytes: parameter bytes (fp32 weights).
    """

    name: str
    fwd_flops: float
    bwd_flops: float
    out_bytes: float
    stash_bytes: float
    param_bytes: float


PRECISIONS = {"fp32": 4, "bf16": 2, "fp16": 2}
"""Training precision -> bytes per weight, gradient and activation element. bf16 and fp16 are
mixed precision: 16-bit weights, gradients and activations, fp32 master weights and optimizer
state (Micikevicius et al. 2018, "Mixed Precision Training")."""
FP32_MASTER_BYTES = 4


def mixed_opt_factor(fp32_opt_factor: float, element_bytes: int) -> float:
    """Bytes held per parameter byte at `element_bytes`-byte weights, from the fp32 factor.

    fp32: bytes per parameter = 4 weights + 4 gradients + S optimizer state = 4 k (k = the fp32
    factor, 4 for Adam: S = 8). Mixed: e weights + e gradients + 4 fp32 master + S, over e."""
    if element_bytes == 4:
        return float(fp32_opt_factor)
    state = 4.0 * fp32_opt_factor - 8.0
    if state < 0:
        raise ValueError(f"opt_factor: expected >= 2 (weights and gradients), got {fp32_opt_factor}")
    return (2.0 * element_bytes + FP32_MASTER_BYTES + state) / element_bytes


OPTIMIZER_STEPS = ("none", "measured", "bandwidth")

Times = Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]]
"""{device kind: (forward seconds per sample per layer, backward seconds per sample per layer)}."""

TP_TIMES = ("with_collectives", "shard_compute")
"""What a TPVariant's measured seconds hold (TPVariant.times; a layer table's `# tp_times:` line)."""


@dataclass(frozen=True)
class TPVariant:
    """The layer table at tensor-parallel degree t > 1, per device of a stage of t devices.

    param_bytes / stash_bytes: per layer, the parameter bytes one device holds and the
    activation bytes per sample it saves for its backward pass (its shard); by_micro_batch:
    {u: {kind: (forward, backward seconds per sample per layer)}} measured at degree t.
    Sailor's profiles have all three.
    times: what those seconds hold (TP_TIMES). "with_collectives" (the default, as Sailor's
    and Metis's profiles time a TP layer): the shard's compute and its TP collectives, so the
    cost model adds nothing to them. "shard_compute" (what `dynpar profile --tp-degrees`
    measures: shard 0 of t run alone, its collectives skipped): the shard's compute only, and
    the cost model adds the layer's TP collectives (model.state.tp_collective_seconds: the
    ring of the unit's links plus SlotState.tp_collective_latency per call), as it does for a
    table without times at t."""

    param_bytes: tuple[float, ...]
    stash_bytes: tuple[float, ...]
    by_micro_batch: Mapping[int, Times] = field(default_factory=dict)
    times: str = "with_collectives"

    def __post_init__(self) -> None:
        if self.times not in TP_TIMES:
            raise ValueError(f"TPVariant.times: expected one of {TP_TIMES}, got {self.times!r}")

    @property
    def collectives_included(self) -> bool:
        """True when the measured seconds include the TP collectives (times "with_collectives")."""
        return self.times == "with_collectives"


@dataclass(frozen=True)
class Workload:
    """A DNN training job: layers in order, batch B samples, micro-batch u samples.

    input_bytes: bytes per sample of the input (o_0).
    opt_factor: bytes held per parameter byte (weights + grads + optimizer state).
    measured: optional per device kind, (forward seconds per sample per layer,
    backward seconds per sample per layer); used instead of FLOPs / speed for
    devices of that kind (the speed factor of the slot still divides them).
    precision: the element precision the byte figures are in (PRECISIONS); `with_precision`
    converts an fp32 table (activation, parameter and gradient bytes, and opt_factor).
    measured_by_micro_batch: optional {u: {kind: (forward, backward seconds per sample per
    layer)}}, times measured at several micro-batch sizes (per-sample time falls as u grows);
    a group of a plan may then train at any of those u (`micro_batch_options`,
    `at_micro_batch`). Empty: the workload's own u (and `measured`) only.
    optimizer_step: how the optimizer step (once per iteration, after the gradient sync) is
    charged (OPTIMIZER_STEPS): "none" (0 s, the default), "measured" (`optimizer_seconds` per
    kind, else the bandwidth estimate) or "bandwidth" (always the estimate; cost.optimizer).
    optimizer_seconds: {kind: seconds per iteration per layer}, measured.
    tp_variants: {t: TPVariant}, the table at tensor-parallel degrees t > 1 (per device), where
    measured; `at_tp` estimates any other t (model.tp documents the rule).
    tp_unsplit_stash: per layer, bytes per sample of the saved activations that tensor
    parallelism does not divide (Megatron's 10 s h of a block's 34 s h + 5 a s^2: layer norms,
    dropout masks and the block's input; io.transformer fills it), or None when unknown: then
    `at_tp` keeps all of them whole on every device (an upper bound, and a note in the plan).
    tp_degree: the degree this table is at (1 for a plain table; `at_tp` sets it).
    tp_collectives: optional (forward, backward) per layer, how many TP collectives the layer
    runs per micro-batch and pass in a tensor-parallel stage (the training runtime's split,
    runtime.tensor_parallel.collective_counts); None: model.state.TP_ALLREDUCES per layer and
    pass (Megatron's transformer block).
    notes: what the layer table's reader left out, for the user (columns timed at micro-batch
    sizes that do not divide the batch); model.state.measurement_notes shows them.
    """

    name: str
    layers: tuple[Layer, ...]
    batch: int
    micro_batch: int
    opt_factor: float = 4.0
    input_bytes: float = 0.0
    measured: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    precision: str = "fp32"
    measured_by_micro_batch: Mapping[int, Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]]] = \
        field(default_factory=dict)
    optimizer_step: str = "none"
    optimizer_seconds: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    tp_variants: Mapping[int, TPVariant] = field(default_factory=dict)
    tp_unsplit_stash: tuple[float, ...] | None = None
    tp_degree: int = 1
    tp_collectives: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        c = self.tp_collectives
        if c is not None and (len(c) != 2 or any(len(x) != len(self.layers) for x in c)
                              or any(not v >= 0 for x in c for v in x)):
            raise ValueError(f"tp_collectives: expected (forward, backward) counts >= 0 for each of the "
                             f"{len(self.layers)} layers, got {c!r}")

    def micro_batch_options(self) -> tuple[int, ...]:
        """Micro-batch sizes a group may choose: those with measured times, else the workload's u."""
        return tuple(sorted(self.measured_by_micro_batch)) or (self.micro_batch,)

    def at_micro_batch(self, u: int) -> "Workload":
        """This workload trained at micro-batch u (one of micro_batch_options): its measured
        times are those taken at u."""
        if u == self.micro_batch:
            return self
        if u not in self.micro_batch_options():
            raise ValueError(f"micro_batch: expected one of {self.micro_batch_options()}, got {u!r}")
        out = replace(self, micro_batch=int(u), measured=dict(self.measured_by_micro_batch[u]))
        out.__dict__["_tp_layers"] = self.__dict__.setdefault("_tp_layers", {})    # shared: no layer depends on u
        return out

    def at_tp(self, t: int) -> "Workload":
        """The per-device table of a stage held by t devices (tensor parallelism, t >= 1).

        From `tp_variants[t]` where present: its bytes, and its times measured at t for this
        workload's u (`measured`; other kinds keep no measured times: the state estimates them,
        model.tp; whether the state adds the TP collectives to them is the variant's `times`,
        `tp_times_include_collectives`). Otherwise estimated: parameter bytes / t; saved activation bytes
        unsplit + (stash - unsplit) / t with `tp_unsplit_stash` (all unsplit when None); no
        measured times. out_bytes (the stage boundary, sent once per stage) and the FLOPs (of the
        whole layer) are unchanged. ValueError unless t is an integer >= 1."""
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
            raise ValueError(f"tp: expected an integer >= 1, got {t!r}")
        t = int(t)
        if t == self.tp_degree:
            return self
        if self.tp_degree != 1:
            raise ValueError(f"tp: the table is already at degree {self.tp_degree}; convert the degree-1 table")
        known = self.__dict__.setdefault("_tp_tables", {})      # kept: the unit states of one slot share the table
        if t not in known:
            known[t] = self._at_tp(t)
        return known[t]

    def _at_tp(self, t: int) -> "Workload":
        var = self.tp_variants.get(t)
        if var is not None:
            P, H = var.param_bytes, var.stash_bytes
            by_u = {u: dict(m) for u, m in var.by_micro_batch.items()}
        else:
            P = tuple(l.param_bytes / t for l in self.layers)
            whole = self.tp_unsplit_stash or tuple(l.stash_bytes for l in self.layers)
            H = tuple(w + (l.stash_bytes - w) / t for w, l in zip(whole, self.layers))
            by_u = {}
        shared = self.__dict__.setdefault("_tp_layers", {})
        layers = shared.get(t)
        if layers is None:
            layers = shared[t] = tuple(replace(l, param_bytes=float(p), stash_bytes=float(h))
                                       for l, p, h in zip(self.layers, P, H))
        return replace(self, layers=layers, measured=by_u.get(self.micro_batch, {}),
                       measured_by_micro_batch=by_u if self.measured_by_micro_batch else {},
                       optimizer_seconds={k: tuple(x / t for x in v) for k, v in self.optimizer_seconds.items()},
                       tp_variants={}, tp_degree=t)

    def tp_measured(self, t: int) -> bool:
        """True when the table has figures measured at degree t (t = 1: always)."""
        return t == 1 or t in self.tp_variants

    def tp_times_include_collectives(self, t: int) -> bool:
        """True when the seconds measured at degree t > 1 (`tp_variants[t]`) include the TP
        collectives (TPVariant.times "with_collectives"); False for "shard_compute" and
        where nothing was measured at t (the cost model then adds the collectives)."""
        var = self.tp_variants.get(t)
        return var is not None and var.collectives_included

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @cached_property
    def fwd_flops(self) -> np.ndarray:
        return np.array([l.fwd_flops for l in self.layers], dtype=float)

    @cached_property
    def bwd_flops(self) -> np.ndarray:
        return np.array([l.bwd_flops for l in self.layers], dtype=float)

    @cached_property
    def out_bytes(self) -> np.ndarray:
        return np.array([l.out_bytes for l in self.layers], dtype=float)

    @cached_property
    def stash_bytes(self) -> np.ndarray:
        return np.array([l.stash_bytes for l in self.layers], dtype=float)

    @cached_property
    def param_bytes(self) -> np.ndarray:
        return np.array([l.param_bytes for l in self.layers], dtype=float)

    @property
    def total_flops(self) -> float:
        """Forward plus backward FLOP per sample of the whole model."""
        return float(self.fwd_flops.sum() + self.bwd_flops.sum())

    def with_batch(self, batch: int, micro_batch: int | None = None) -> "Workload":
        return replace(self, batch=batch, micro_batch=micro_batch or self.micro_batch)

    def with_precision(self, precision: str) -> "Workload":
        """This fp32 workload trained at `precision`: activation bytes (out, stash, input) and
        parameter bytes (what is all-reduced: the gradients) scale by element bytes / 4, and
        opt_factor becomes `mixed_opt_factor` (bytes held per scaled parameter byte). Seconds and
        FLOPs are unchanged: give times measured at that precision."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {sorted(PRECISIONS)}, got {precision!r}")
        if self.precision != "fp32":
            raise ValueError(f"precision: the workload is already {self.precision}; convert an fp32 table")
        e = PRECISIONS[precision]
        if e == 4:
            return self
        f = e / 4.0
        layers = tuple(replace(l, out_bytes=l.out_bytes * f, stash_bytes=l.stash_bytes * f,
                               param_bytes=l.param_bytes * f) for l in self.layers)
        tpv = {t: replace(v, param_bytes=tuple(x * f for x in v.param_bytes),
                          stash_bytes=tuple(x * f for x in v.stash_bytes)) for t, v in self.tp_variants.items()}
        unsplit = None if self.tp_unsplit_stash is None else tuple(x * f for x in self.tp_unsplit_stash)
        return replace(self, layers=layers, opt_factor=mixed_opt_factor(self.opt_factor, e),
                       input_bytes=self.input_bytes * f, precision=precision, tp_variants=tpv,
                       tp_unsplit_stash=unsplit)
