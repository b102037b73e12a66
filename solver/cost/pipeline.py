"""Pipeline time of one ordered, cut group: stage times, the exact GPipe form, the 1F1B bound.

Its time for a share of b samples (a multiple of the micro-batch u) under a synchronous GPipe
schedule is exactly T_g(b) = alpha_g * b + beta_g (seconds). 1F1B has no such exact form; the
planner uses the upper bound u (C + (n - 1)(max F + max G + 2 max lam)), C = sum F + sum G +
2 sum lam, n = b / u, which is again alpha * b + beta (`one_f_one_b_coeffs`). Recomputation
adds each stage's forward to its backward. `cost.simulator` is the event simulator all of
this is tested against (docs/MODEL.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model.memory import SCHEDULES, share_cap
from ..model.network import effective_bandwidth
from ..model.state import SlotState


def stage_times(state: SlotState, devices: Sequence[int], cuts: Sequence[int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample forward seconds F_j, backward seconds G_j of each stage, and the
    one-way boundary transfer seconds lambda_j (k-1 of them; latency spread over u). With a
    state.network, the boundaries of the group run at once: bandwidth at the micro-batch's
    message size, and a server's NIC shared by its devices that send across servers."""
    d = np.asarray(devices, dtype=int)
    c = np.asarray(cuts, dtype=int)
    start = np.concatenate([[0], c[:-1]])
    F = state.fwd_prefix[d, c] - state.fwd_prefix[d, start]
    G = state.bwd_prefix[d, c] - state.bwd_prefix[d, start]
    if len(d) > 1:
        o = state.workload.out_bytes[c[:-1] - 1]
        u = state.workload.micro_batch
        bw = state.bandwidth[d[:-1], d[1:]] if state.network is None else \
            effective_bandwidth(state.network, state.bandwidth, d[:-1], d[1:], o * u)
        lam = o / bw + state.latency[d[:-1], d[1:]] / u
    else:
        lam = np.zeros(0)
    return F, G, lam


def gpipe_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of the exact GPipe group time alpha*b + beta."""
    lmax = float(lam.max()) if len(lam) else 0.0
    alpha = max(float(F.max()), lmax) + max(float(G.max()), lmax)
    beta = u * (float(F.sum()) + float(G.sum()) + 2.0 * float(lam.sum())) - u * alpha
    return alpha, beta


def one_f_one_b_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int) -> tuple[float, float]:
    """(alpha seconds/sample, beta seconds) of the 1F1B upper bound alpha*b + beta:
    alpha = max F + max G + 2 max lam, beta = u (sum F + sum G + 2 sum lam) - u alpha."""
    lmax = float(lam.max()) if len(lam) else 0.0
    alpha = float(F.max()) + float(G.max()) + 2.0 * lmax
    beta = u * (float(F.sum()) + float(G.sum()) + 2.0 * float(lam.sum())) - u * alpha
    return alpha, beta


def schedule_coeffs(F: np.ndarray, G: np.ndarray, lam: np.ndarray, u: int, schedule: str = "gpipe",
                    recompute: bool = False) -> tuple[float, float]:
    """(alpha, beta) of a schedule: GPipe's exact form or 1F1B's upper bound; recomputation
    runs the forward again in the backward (G + F)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {SCHEDULES}, got {schedule!r}")
    Gr = G + F if recompute else G
    return (gpipe_coeffs if schedule == "gpipe" else one_f_one_b_coeffs)(F, Gr, lam, u)


@dataclass(frozen=True)
class GroupCoeffs:
    """Numbers of one ordered, cut group in one slot.

    alpha: seconds per sample; beta: seconds of fill and drain; cap: largest share
    (samples, a multiple of u) that fits in memory, 0 if not even one micro-batch fits,
    or a huge number when memory does not bind; busy_j_per_sample: per stage, joules
    per sample above idle ((Pbusy - P0) * (F_j + G_j), plus F_j again under recomputation);
    schedule, recompute: as in the plan's Group (`exact` is False where alpha * b + beta is
    the 1F1B upper bound rather than the exact time).
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
    schedule: str = "gpipe"
    recompute: bool = False

    @property
    def exact(self) -> bool:
        return self.schedule == "gpipe" or len(self.devices) == 1

    def time(self, share: int) -> float:
        return self.alpha * share + self.beta


def group_coeffs(state: SlotState, devices: Sequence[int], cuts: Sequence[int],
                 schedule: str = "gpipe", recompute: bool = False) -> GroupCoeffs:
    F, G, lam = stage_times(state, devices, cuts)
    alpha, beta = schedule_coeffs(F, G, lam, state.workload.micro_batch, schedule, recompute)
    extra_w = state.extra_power_w[np.asarray(devices, dtype=int)]
    busy = F + G + F if recompute else F + G
    return GroupCoeffs(tuple(int(x) for x in devices), tuple(int(x) for x in cuts), alpha, beta,
                       share_cap(state, devices, cuts, schedule, recompute), F, G, lam, extra_w * busy,
                       schedule, bool(recompute))
