"""Activation recomputation of a stage (a plan group's `recompute`): the stage's layers run
under torch.utils.checkpoint, so only each micro-batch's stage input is kept between its
forward and its backward, and the layers' forward runs again inside the backward, as the cost
model charges it (model.memory: live_j I_j + u H_j; cost.pipeline: G + F).

Per-sample dropout (runtime.seeding) reads the rows of the micro-batch in flight from the
runtime's state, which a 1F1B schedule has moved on by the time a micro-batch's backward
recomputes; so the rows are read at the forward and set again for the recomputation, which
then draws the same masks and gives the same gradients as training without recomputation.
Likewise the recomputation runs in the context variables of its forward: a forward run with
the TP collectives off (tensor_parallel.local_only: the pipeline's shape inference on a TP
stage's leader) is recomputed with them off, whenever its backward runs.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import seeding


def run_layers(mods: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """x through `mods` in order."""
    for mod in mods:
        x = mod(x)
    return x


def run_recomputed(mods: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """x through `mods` in order, checkpointed (module doc)."""
    step, first = seeding.rows_now()
    scope = contextvars.copy_context()

    def forward(inp: torch.Tensor) -> torch.Tensor:
        rows = seeding.micro_batch(step, first) if step is not None else contextlib.nullcontext()
        with rows:
            return scope.run(run_layers, mods, inp)

    return checkpoint(forward, x, use_reentrant=False)


class Recomputed(nn.Module):
    """`inner` whose activations are recomputed in the backward (run_recomputed)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_recomputed([self.inner], x)
