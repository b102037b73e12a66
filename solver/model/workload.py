"""The training job: layers in order, per-sample FLOP and bytes, batch and micro-batch.

Units: FLOP per sample, bytes per sample (activations) or per model (parameters), seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Workload:
    """A DNN training job: layers in order, batch B samples, micro-batch u samples.

    input_bytes: bytes per sample of the input (o_0).
    opt_factor: bytes held per parameter byte (weights + grads + optimizer state).
    measured: optional per device kind, (forward seconds per sample per layer,
    backward seconds per sample per layer); used instead of FLOPs / speed for
    devices of that kind (the speed factor of the slot still divides them).
    """

    name: str
    layers: tuple[Layer, ...]
    batch: int
    micro_batch: int
    opt_factor: float = 4.0
    input_bytes: float = 0.0
    measured: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)

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
        return Workload(self.name, self.layers, batch, micro_batch or self.micro_batch,
                        self.opt_factor, self.input_bytes, self.measured)
