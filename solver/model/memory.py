"""The memory constraint: bytes each stage's device holds, and the largest share that fits.

Stage j (0-based) of a group of k stages, with n = share / u micro-batches in flight, holds
k_opt * P_j bytes of parameters, gradients and optimizer state plus activations:

    live_j = share                   GPipe with k >= 2 (every micro-batch is stashed)
             u                       a one-stage group (gradient accumulation), any schedule
             u * min(k - j, n)       1F1B (Megatron's non-interleaved order)
    act_j  = live_j * H_j                          without recomputation
             live_j * I_j + u * H_j                with recomputation (the stage input of each
                                                   stashed micro-batch, and one micro-batch's
                                                   recomputed activations during its backward)

H_j: bytes per sample the stage's layers save for their backward pass; I_j: bytes per sample
of the stage's input tensor (the previous layer's output, or the workload's input). The event
simulator (`cost.simulator`) reaches exactly these peaks. `Plan.validate` and the solver's share
caps both use these functions, with the same relative slack MEM_RTOL, so that they always agree.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from numba import njit

from .state import SlotState

NO_CAP = 1 << 60

SCHEDULES = ("gpipe", "1f1b")

MEM_RTOL = 1e-12
"""Relative slack on device memory, shared by share_cap and Plan.validate so that they agree."""


def stage_params_and_stash(state: SlotState, cuts: Sequence[int], devices: Sequence[int] | None = None
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Per stage: parameter bytes P_j and stashed activation bytes per sample H_j that one
    device of the stage holds (its shard at the stage's TP degree, state.degree; devices None:
    degree 1, the whole layers)."""
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    if devices is None or state.tp is None:
        return state.param_prefix[c] - state.param_prefix[start], state.stash_prefix[c] - state.stash_prefix[start]
    degrees = [state.tp[int(d)] for d in devices]
    if len(set(degrees)) == 1:
        pp, sp = state.param_prefix_at(degrees[0]), state.stash_prefix_at(degrees[0])
        return pp[c] - pp[start], sp[c] - sp[start]
    P, H = np.empty(len(c)), np.empty(len(c))
    for j, t in enumerate(degrees):
        pp, sp = state.param_prefix_at(t), state.stash_prefix_at(t)
        P[j], H[j] = pp[c[j]] - pp[start[j]], sp[c[j]] - sp[start[j]]
    return P, H


def stage_input_bytes(state: SlotState, cuts: Sequence[int]) -> np.ndarray:
    """Per stage: bytes per sample of its input tensor I_j (o_0 = the workload's input bytes)."""
    c = np.asarray(cuts, dtype=int)
    wl = state.workload
    return np.concatenate([[wl.input_bytes], wl.out_bytes[c[:-1] - 1]]) if len(c) else np.zeros(0)


def _check_schedule(schedule: str) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")


def live_samples(k: int, share: int, u: int, schedule: str = "gpipe") -> np.ndarray:
    """(k,) samples whose activations stage j keeps at its peak (see the module doc)."""
    _check_schedule(schedule)
    if k == 1:
        return np.array([u], dtype=float)
    if schedule == "gpipe":
        return np.full(k, float(share))
    n = -(-share // u)
    return u * np.minimum(k - np.arange(k), n).astype(float)


def memory_use(state: SlotState, devices: Sequence[int], cuts: Sequence[int], share: int,
               schedule: str = "gpipe", recompute: bool = False) -> np.ndarray:
    """Bytes each stage's device holds: k_opt * P_j plus its peak activations (module doc)."""
    _check_schedule(schedule)
    wl = state.workload
    P, H, _, I = stage_memory(state, devices, cuts)
    return _stage_use(float(wl.opt_factor), int(wl.micro_batch), P, H, I if recompute else H, bool(recompute),
                      schedule == "1f1b", int(share))


@njit(cache=True)
def _stage_use(kopt: float, u: int, P: np.ndarray, H: np.ndarray, X: np.ndarray, recompute: bool,
               one_f_one_b: bool, share: int) -> np.ndarray:
    """memory_use from the stage numbers (X: stage input bytes under recomputation, else H),
    live samples as live_samples gives them: the one formula of Plan.validate and share_cap."""
    k = P.shape[0]
    n = -(-share // u)
    out = np.empty(k)
    for j in range(k):
        live = float(u) if k == 1 else (float(u * min(k - j, n)) if one_f_one_b else float(share))
        out[j] = kopt * P[j] + live * X[j] + u * H[j] if recompute else kopt * P[j] + live * X[j]
    return out


StageMemory = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Per stage of an ordered, cut group: (P_j, H_j, device memory M_j with MEM_RTOL, I_j)."""


def stage_memory(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> StageMemory:
    """The numbers share_cap reads of a group, whatever its schedule (bytes)."""
    P, H = stage_params_and_stash(state, cuts, devices)
    M = state.memory_bytes[np.asarray(devices, dtype=int)] * (1 + MEM_RTOL)
    return (np.ascontiguousarray(P, dtype=float), np.ascontiguousarray(H, dtype=float),
            np.ascontiguousarray(M, dtype=float), np.ascontiguousarray(stage_input_bytes(state, cuts), dtype=float))


def share_cap(state: SlotState, devices: Sequence[int], cuts: Sequence[int],
              schedule: str = "gpipe", recompute: bool = False, memory: StageMemory | None = None) -> int:
    """Largest share (multiple of u) within every stage's memory (as Plan.validate checks it,
    up to MEM_RTOL); 0 when none fits, NO_CAP when memory does not bind. memory: the group's
    stage_memory when the caller has it (the same numbers)."""
    _check_schedule(schedule)
    wl = state.workload
    P, H, M, I = stage_memory(state, devices, cuts) if memory is None else memory
    return int(stage_share_cap(float(wl.opt_factor), int(wl.micro_batch), P, H, M, I if recompute else H,
                          bool(recompute), schedule == "1f1b"))


@njit(cache=True)
def _fits(kopt: float, u: int, P: np.ndarray, H: np.ndarray, M: np.ndarray, X: np.ndarray, recompute: bool,
          one_f_one_b: bool, share: int) -> bool:
    """Every stage's use (_stage_use) within M."""
    use = _stage_use(kopt, u, P, H, X, recompute, one_f_one_b, share)
    for j in range(P.shape[0]):
        if not use[j] <= M[j]:
            return False
    return True


@njit(cache=True)
def stage_share_cap(kopt: float, u: int, P: np.ndarray, H: np.ndarray, M: np.ndarray, X: np.ndarray, recompute: bool,
                    one_f_one_b: bool) -> int:
    """share_cap on the stage numbers (X: stage input bytes under recomputation, else H):
    the least free memory per live sample, rounded to a multiple of u and checked by _fits
    one micro-batch either side."""
    k = P.shape[0]
    free = np.empty(k)
    for j in range(k):
        free[j] = M[j] - kopt * P[j]
        if recompute:
            free[j] = free[j] - u * H[j]
        if free[j] < 0:
            return 0
    if k == 1:
        return NO_CAP if free[0] >= u * X[0] else 0
    b = np.inf
    for j in range(k):
        per = free[j] / X[j] if X[j] > 0 else np.inf
        if one_f_one_b and per >= u * (k - j):      # stage j holds u min(k - j, n): no cap once k - j fit
            per = np.inf
        b = min(b, per)
    if not b / u < NO_CAP:      # inf, or beyond any batch
        return NO_CAP
    cap = int(np.floor(b / u)) * u
    if cap > 0 and not _fits(kopt, u, P, H, M, X, recompute, one_f_one_b, cap):   # b / u rounded up
        cap -= u
    elif _fits(kopt, u, P, H, M, X, recompute, one_f_one_b, cap + u):             # b / u rounded down
        cap += u
    return cap
