"""The memory constraint: bytes each stage's device holds, and the largest share that fits.

A stage holds k_opt * P_j bytes of parameters, gradients and optimizer state, plus stashed
activations: share * H_j under GPipe with two or more stages, one micro-batch u * H_j for a
one-stage group. `Plan.validate` and the solver's share caps both use these functions, with
the same relative slack MEM_RTOL, so that they always agree.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .state import SlotState

NO_CAP = 1 << 60


MEM_RTOL = 1e-12
"""Relative slack on device memory, shared by share_cap and Plan.validate so that they agree."""


def stage_params_and_stash(state: SlotState, cuts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per stage: parameter bytes P_j and stashed activation bytes per sample H_j."""
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    return state.param_prefix[c] - state.param_prefix[start], state.stash_prefix[c] - state.stash_prefix[start]


def memory_use(state: SlotState, devices: Sequence[int], cuts: Sequence[int], share: int) -> np.ndarray:
    """Bytes each stage's device holds: k_opt * P_j plus stashed activations
    (share * H_j under GPipe with >= 2 stages; one micro-batch for a one-stage group)."""
    P, H = stage_params_and_stash(state, cuts)
    wl = state.workload
    live = wl.micro_batch if len(devices) == 1 else share
    return wl.opt_factor * P + live * H


def share_cap(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> int:
    """Largest share (multiple of u) within every stage's memory (as Plan.validate checks it,
    up to MEM_RTOL); 0 when none fits."""
    wl = state.workload
    u = wl.micro_batch
    P, H = stage_params_and_stash(state, cuts)
    M = state.memory_bytes[np.asarray(devices, dtype=int)] * (1 + MEM_RTOL)
    free = M - wl.opt_factor * P
    if np.any(free < 0):
        return 0
    if len(devices) == 1:
        return NO_CAP if free[0] >= u * H[0] else 0
    with np.errstate(divide="ignore"):
        per = np.where(H > 0, free / np.where(H > 0, H, 1.0), np.inf)
    b = float(per.min())
    if not np.isfinite(b):
        return NO_CAP
    cap = int(np.floor(b / u)) * u

    def fits(share: int) -> bool:
        return bool(np.all(memory_use(state, devices, cuts, share) <= M))

    if cap > 0 and not fits(cap):        # b / u rounded up across an integer
        cap -= u
    elif fits(cap + u):                  # b / u rounded down across an integer
        cap += u
    return cap
