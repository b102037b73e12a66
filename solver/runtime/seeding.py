"""Dropout that does not depend on the plan: per-sample masks from (seed, step, sample, site).

The runtime replaces every nn.Dropout of the pipeline blocks (in its own copies) by
SeededDropout. In training mode, the mask of sample j of global batch `step` at dropout
site k (the k-th dropout module of the model, in block order) is drawn by a torch.Generator
seeded with hash(seed, step, j, k), independently of which process, group or micro-batch
runs it; so every plan, and single-process training (`batch_context(step)` around a
whole-batch forward), draw the same masks. The runtime tells the modules which samples a
forward pass holds with `micro_batch(step, first)`: rows first.. of global batch `step`.
"""
from __future__ import annotations

import contextlib
import hashlib
from typing import Iterator

import torch
from torch import nn

_STATE = {"step": None, "first": 0}


@contextlib.contextmanager
def micro_batch(step: int, first: int) -> Iterator[None]:
    """Forward passes inside hold rows first, first+1, ... of global batch `step`."""
    old = dict(_STATE)
    _STATE.update(step=int(step), first=int(first))
    try:
        yield
    finally:
        _STATE.update(old)


def batch_context(step: int) -> contextlib.AbstractContextManager:
    """For single-process training: the forward pass holds the whole global batch `step`."""
    return micro_batch(step, 0)


def set_micro_batch(step: int, first: int) -> None:
    """micro_batch without a context (the torch pipelining path sets it from a hook)."""
    _STATE.update(step=int(step), first=int(first))


def rows_now() -> tuple[int | None, int]:
    """(step, first): the global batch and first row that forward passes now hold (step None:
    none set)."""
    return _STATE["step"], _STATE["first"]


def _seed(seed: int, step: int, sample: int, site: int) -> int:
    h = hashlib.blake2b(f"{seed}:{step}:{sample}:{site}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


class SeededDropout(nn.Module):
    """nn.Dropout(p) with the per-sample masks of the module docstring."""

    def __init__(self, p: float, site: int, seed: int = 0) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout p: expected 0 <= p < 1, got {p}")
        self.p, self.site, self.seed = float(p), int(site), int(seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        step, first = _STATE["step"], _STATE["first"]
        if step is None:
            raise RuntimeError("SeededDropout in training mode outside runtime.seeding.micro_batch(step, first)")
        masks = []
        for j in range(x.shape[0]):
            g = torch.Generator().manual_seed(_seed(self.seed, step, first + j, self.site))
            masks.append(torch.rand(x.shape[1:], generator=g, dtype=torch.float64) >= self.p)
        keep = torch.stack(masks).to(device=x.device)
        return x * keep.to(x.dtype) / (1.0 - self.p)


def seed_dropout(blocks: list[nn.Module], seed: int = 0) -> int:
    """Replace, in place, every nn.Dropout of `blocks` by a SeededDropout (sites numbered
    in block order, then module order within a block); return how many."""
    site = 0
    for i, b in enumerate(blocks):
        if type(b) is nn.Dropout:
            blocks[i] = SeededDropout(b.p, site, seed)
            site += 1
            continue
        for parent in list(b.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Dropout:
                    setattr(parent, name, SeededDropout(child.p, site, seed))
                    site += 1
    return site
