"""Pipeline time of one ordered, cut group: stage times and the exact GPipe form.

Its time for a share of b samples (a multiple of the micro-batch u) under a synchronous GPipe
schedule is exactly T_g(b) = alpha_g * b + beta_g (seconds); `cost.simulator` is the event
simulator this is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model.memory import share_cap
from ..model.state import SlotState


def stage_times(state: SlotState, devices: Sequence[int], cuts: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample forward seconds F_j, backward seconds G_j of each stage, and the
    one-way boundary transfer seconds lambda_j (k-1 of them; latency spread over u)."""
    d = np.asarray(devices, dtype=int)
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    F = state.fwd_prefix[d, c] - state.fwd_prefix[d, start]
    G = state.bwd_prefix[d, c] - state.bwd_prefix[d, start]
    if len(d) > 1:
        o = state.workload.out_bytes[c[:-1] - 1]
        lam = o / state.bandwidth[d[:-1], d[1:]] + state.latency[d[:-1], d[1:]] / state.workload.micro_batch
    else:
        lam = np.zeros(0)
    return F, G, lam


def gpipe_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of the exact GPipe group time alpha*b + beta."""
    lmax = float(lam.max()) if len(lam) else 0.0
    alpha = max(float(F.max()), lmax) + max(float(G.max()), lmax)
    beta = u * (float(F.sum()) + float(G.sum()) + 2.0 * float(lam.sum())) - u * alpha
    return alpha, beta


@dataclass(frozen=True)
class GroupCoeffs:
    """Numbers of one ordered, cut group in one slot.

    alpha: seconds per sample; beta: seconds of fill and drain; cap: largest share
    (samples, a multiple of u) that fits in memory, 0 if not even one micro-batch fits,
    or a huge number when memory does not bind; busy_j_per_sample: per stage, joules
    per sample above idle ((Pbusy - P0) * (F_j + G_j)).
    """

    devices: tuple[int, ...]
    cuts: tuple[int, ...]
    alpha: float
    beta: float
    cap: int
    fwd: np.ndarray
    bwd: np.ndarray
    lam: np.ndarray
    busy_j_per_sample: np.ndarray

    def time(self, share: int) -> float:
        return self.alpha * share + self.beta


def group_coeffs(state: SlotState, devices: Sequence[int], cuts: Sequence[int]) -> GroupCoeffs:
    F, G, lam = stage_times(state, devices, cuts)
    alpha, beta = gpipe_coeffs(F, G, lam, state.workload.micro_batch)
    extra_w = state.extra_power_w[np.asarray(devices, dtype=int)]
    return GroupCoeffs(tuple(int(x) for x in devices), tuple(int(x) for x in cuts), alpha, beta,
                       share_cap(state, devices, cuts), F, G, lam, extra_w * (F + G))
