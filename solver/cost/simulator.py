"""Discrete-event simulator of pipeline groups: the ground truth for the closed forms.

A group of k stages trains on a share of b samples split into micro-batches of u samples.
Per sample, stage j computes forward F_j and backward G_j seconds; the link between
stage j and j+1 carries activations forward and gradients back, lam_j seconds per sample
each way (lam already includes the link latency divided by u). A micro-batch of s samples
takes s * F_j, s * G_j and s * lam_j. When b is not a multiple of u the last micro-batch is
shorter (b mod u samples); the closed form of `cost.pipeline.gpipe_coeffs` only covers whole
micro-batches.

Resources: every stage serves one operation at a time, in a fixed order given by the schedule
(`stage_order`). A link serves its transfers first come first served (ties: the earlier
request); duplex="half" (the default) makes one queue for both directions, duplex="full"
one per direction.

Schedules (stage j is 0-based, j = 0 .. k-1):
- "gpipe": every stage runs all forwards (micro-batch 0..n-1), then all backwards (0..n-1):
  GPipe's flush. A one-stage group runs F, B, F, B, ... (gradient accumulation), so it
  holds one micro-batch, as the cost model's memory rule says.
- "1f1b": PipeDream-flush in Megatron's non-interleaved order: min(k - 1 - j, n) warm-up
  forwards, then one forward / one backward until the forwards are done, then the remaining
  backwards. Stage j then stashes at most min(k - j, n) micro-batches.

Recomputation (recompute=True): a stage keeps only each micro-batch's stage input during
the forward and runs the forward again inside the backward, so a backward of s samples takes
s * (F_j + G_j).

Memory: a micro-batch is stashed on a stage from the start of its forward to the end of its
backward (`peak_stash` counts them). Given per-sample bytes `saved` (H_j: what the stage's
layers save for their backward) and `inputs` (I_j: the stage's input tensor), a stashed
micro-batch of s samples holds s * H_j bytes, or s * I_j under recomputation, where a running
backward also holds the recomputed s * H_j on top; `peak_bytes` is the per-stage maximum.
`simulate_plan` runs every group of a plan in a slot state.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
from numba import njit

from ..model.memory import stage_input_bytes, stage_params_and_stash
from ..model.plan import to_units
from .optimizer import optimizer_step_time
from .pipeline import stage_times
from .sync import sync_time

if TYPE_CHECKING:
    from ..model.plan import Plan
    from ..model.state import SlotState

SCHEDULES = ("gpipe", "1f1b")
DUPLEX = ("half", "full")


@dataclass(frozen=True)
class Op:
    """One operation of the simulated iteration, in seconds from its start. kind: "F" / "B"
    (a stage's forward / backward of micro-batch `micro_batch`, `where` = stage, 0-based) or
    "sendF" / "sendB" (its activations / gradients over link `where`, stage where -> where+1)."""

    kind: str
    where: int
    micro_batch: int
    start: float
    end: float


@dataclass(frozen=True)
class SimResult:
    """makespan: seconds from the first forward to the last backward; stage_busy: compute
    seconds per stage; link_busy: transfer seconds per link (both directions); peak_stash:
    per stage, most micro-batches stashed at once; peak_bytes: per stage, most activation
    bytes held at once (0 when no bytes were given); sizes: micro-batch sizes (samples);
    ops: every operation with its start and end, in the order they started."""

    makespan: float
    stage_busy: tuple[float, ...]
    link_busy: tuple[float, ...]
    peak_stash: tuple[int, ...]
    sizes: tuple[int, ...]
    ops: tuple[Op, ...] = ()
    peak_bytes: tuple[float, ...] = ()


def micro_batches(b: int, u: int) -> list[int]:
    """Sizes of the micro-batches of a share of b samples: whole u's, then the remainder."""
    if b < 1 or u < 1:
        raise ValueError(f"share b={b} and micro-batch u={u} must be >= 1")
    return [u] * (b // u) + ([b % u] if b % u else [])


def stage_order(schedule: str, j: int, k: int, n: int) -> list[tuple[str, int]]:
    """Operations ("F" | "B", micro-batch) of stage j (0-based) of k in the order it runs them."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")
    if schedule == "gpipe" and k > 1:
        return [("F", m) for m in range(n)] + [("B", m) for m in range(n)]
    warm = min(k - 1 - j, n)
    order = [("F", m) for m in range(warm)]
    for m in range(warm, n):
        order += [("F", m), ("B", m - warm)]
    return order + [("B", m) for m in range(n - warm, n)]


def stage_codes(schedule: str, j: int, k: int, n: int) -> np.ndarray:
    """stage_order as integers: micro-batch m's forward as m, its backward as -1 - m."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")
    m = np.arange(n, dtype=np.int64)
    if schedule == "gpipe" and k > 1:
        return np.concatenate([m, -1 - m])
    warm = min(k - 1 - j, n)
    mid = np.empty(2 * (n - warm), dtype=np.int64)
    mid[0::2] = m[warm:]
    mid[1::2] = -1 - m[:n - warm]
    return np.concatenate([m[:warm], mid, -1 - m[n - warm:]])


def simulate(F: Sequence[float], G: Sequence[float], lam: Sequence[float], u: int, b: int,
             schedule: str = "gpipe", *, recompute: bool = False,
             saved: Sequence[float] | None = None, inputs: Sequence[float] | None = None,
             duplex: str = "half") -> SimResult:
    """Simulate one iteration of a k-stage group on b samples (seconds, bytes per sample;
    see the module doc)."""
    k = len(F)
    if len(G) != k or len(lam) != k - 1:
        raise ValueError(f"need k forward, k backward and k-1 link times; got {len(F)}, {len(G)}, {len(lam)}")
    if duplex not in DUPLEX:
        raise ValueError(f"unknown duplex {duplex!r}; expected one of {DUPLEX}")
    H = [0.0] * k if saved is None else [float(x) for x in saved]
    I = [0.0] * k if inputs is None else [float(x) for x in inputs]
    if len(H) != k or len(I) != k:
        raise ValueError(f"need k saved and k input byte counts; got {len(H)}, {len(I)} for k={k}")
    sizes = micro_batches(b, u)
    n = len(sizes)
    orders = [stage_order(schedule, j, k, n) for j in range(k)]
    nxt = [0] * k                        # index of the next operation in each stage's order
    stage_free = [True] * k
    queues = 2 if duplex == "full" else 1
    link_free = [[True] * queues for _ in range(k - 1)]
    link_queue: list[list[list[tuple[float, int, str, int]]]] = [[[] for _ in range(queues)] for _ in range(k - 1)]
    arrived: set[tuple[str, int, int]] = set()   # inputs delivered: ("F"|"B", stage, mb)
    stash, peak = [0] * k, [0] * k
    held, peak_b = [0.0] * k, [0.0] * k
    keep = I if recompute else H         # bytes per sample a stashed micro-batch holds
    stage_busy, link_busy = [0.0] * k, [0.0] * (k - 1)
    events: list[tuple[float, int, str, int, int]] = []  # (time, seq, kind, where, mb)
    ops: list[Op] = []
    seq = 0

    def push(t: float, kind: str, where: int, m: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, where, m))
        seq += 1

    def hold(j: int, x: float) -> None:
        held[j] += x
        peak_b[j] = max(peak_b[j], held[j])

    def dispatch(now: float) -> None:
        """Start every operation whose resource is free and whose input has arrived."""
        for j in range(k):
            if stage_free[j] and nxt[j] < n * 2:
                op, m = orders[j][nxt[j]]
                # stage 0 owns the inputs; the last stage's own F(m) precedes B(m) in its order,
                # so neither needs a delivery
                if (op, j, m) in arrived or (op == "F" and j == 0) or (op == "B" and j == k - 1):
                    stage_free[j], nxt[j] = False, nxt[j] + 1
                    s = sizes[m]
                    if op == "F":
                        dur = s * F[j]
                        stash[j] += 1
                        peak[j] = max(peak[j], stash[j])
                        hold(j, s * keep[j])
                    else:
                        dur = s * (G[j] + (F[j] if recompute else 0.0))
                        if recompute:
                            hold(j, s * H[j])
                    stage_busy[j] += dur
                    push(now + dur, "done" + op, j, m)
                    ops.append(Op(op, j, m, now, now + dur))
        for i in range(k - 1):
            for q in range(queues):
                if link_free[i][q] and link_queue[i][q]:
                    _, _, direction, m = heapq.heappop(link_queue[i][q])
                    link_free[i][q] = False
                    dur = sizes[m] * lam[i]
                    link_busy[i] += dur
                    push(now + dur, "sent" + direction, i, m)
                    ops.append(Op("send" + direction, i, m, now, now + dur))

    def request(i: int, direction: str, now: float, m: int) -> None:
        nonlocal seq
        q = (0 if direction == "F" else 1) if queues == 2 else 0
        heapq.heappush(link_queue[i][q], (now, seq, direction, m))
        seq += 1

    now = 0.0
    dispatch(now)
    while events:
        now = events[0][0]
        while events and events[0][0] == now:   # apply every event of this instant, then dispatch
            _, _, kind, where, m = heapq.heappop(events)
            if kind == "doneF":
                stage_free[where] = True
                if where < k - 1:           # activations go over link `where` to the next stage
                    request(where, "F", now, m)
            elif kind == "doneB":
                stage_free[where] = True
                stash[where] -= 1
                held[where] -= sizes[m] * (keep[where] + (H[where] if recompute else 0.0))
                if where > 0:               # gradients go back over link `where - 1`
                    request(where - 1, "B", now, m)
            else:                            # a transfer over link `where` has arrived
                link_free[where][(0 if kind == "sentF" else 1) if queues == 2 else 0] = True
                arrived.add(("F", where + 1, m) if kind == "sentF" else ("B", where, m))
        dispatch(now)
    if any(x != 2 * n for x in nxt):
        raise RuntimeError(f"deadlock: stages stopped after {nxt} of {2 * n} operations")
    return SimResult(now, tuple(stage_busy), tuple(link_busy), tuple(peak), tuple(sizes), tuple(ops),
                     tuple(peak_b))


def makespan(F: Sequence[float], G: Sequence[float], lam: Sequence[float], u: int, b: int,
             schedule: str = "gpipe", *, recompute: bool = False) -> float:
    """The makespan `simulate` gives with full-duplex links (seconds), without the event queue.

    With full-duplex links every link direction serves one stage's sends in that stage's own
    order (forwards in micro-batch order, backwards in its B order), so the simulation is the
    recurrence: an operation starts at max(its stage free, its input arrived) and a transfer at
    max(its sender done, its link direction free); operations are taken stage by stage as their
    inputs become known (`_makespan_kernel`, compiled). The same max and + in the same order as
    the simulator, so the same value; O(k n) in all."""
    k = len(F)
    if len(G) != k or len(lam) != k - 1:
        raise ValueError(f"need k forward, k backward and k-1 link times; got {len(F)}, {len(G)}, {len(lam)}")
    sizes = np.asarray(micro_batches(b, u), dtype=float)
    n = len(sizes)
    ops = np.empty((k, 2 * n), dtype=np.int64)
    for j in range(k):
        ops[j] = stage_codes(schedule, j, k, n)
    Gr = np.asarray(G, dtype=float) + (np.asarray(F, dtype=float) if recompute else 0.0)
    out = _makespan_kernel(np.asarray(F, dtype=float), Gr, np.asarray(lam, dtype=float).reshape(max(k - 1, 0)),
                           sizes, ops)
    if out < 0:
        raise RuntimeError("deadlock: the stage orders wait on each other")
    return float(out)


@njit(cache=True)
def _makespan_kernel(F: np.ndarray, G: np.ndarray, lam: np.ndarray, sizes: np.ndarray, ops: np.ndarray) -> float:
    """makespan's recurrence. ops[j, i]: stage j's i-th operation, m >= 0 for F(m), -1 - m for
    B(m); G already holds any recomputed forward. -1.0 on a deadlock."""
    k, two_n = ops.shape
    n = two_n // 2
    arr_f = np.full((k, n), -1.0)
    arr_b = np.full((k, n), -1.0)
    link_f = np.zeros(max(k - 1, 1))
    link_b = np.zeros(max(k - 1, 1))
    free = np.zeros(k)
    nxt = np.zeros(k, dtype=np.int64)
    left = two_n * k
    while left > 0:
        moved = False
        for j in range(k):
            while nxt[j] < two_n:
                code = ops[j, nxt[j]]
                fwd = code >= 0
                m = code if fwd else -1 - code
                if fwd:
                    ready = 0.0 if j == 0 else arr_f[j, m]
                else:
                    ready = 0.0 if j == k - 1 else arr_b[j, m]
                if ready < 0.0:
                    break
                end = max(free[j], ready) + sizes[m] * (F[j] if fwd else G[j])
                free[j] = end
                nxt[j] += 1
                left -= 1
                moved = True
                if fwd and j < k - 1:
                    link_f[j] = max(end, link_f[j]) + sizes[m] * lam[j]
                    arr_f[j + 1, m] = link_f[j]
                elif not fwd and j > 0:
                    link_b[j - 1] = max(end, link_b[j - 1]) + sizes[m] * lam[j - 1]
                    arr_b[j - 1, m] = link_b[j - 1]
        if not moved:
            return -1.0
    out = free.max()
    if k > 1:
        out = max(out, link_f.max(), link_b.max())
    return out


@dataclass(frozen=True)
class PlanSimulation:
    """A plan simulated in one slot. group_times: seconds per group (its pipeline's makespan);
    sync_time: seconds of the cross-group gradient sync (the cost model's); optimizer_time:
    seconds of the optimizer step (cost.optimizer); batch_time: max group time + sync +
    optimizer step; peak_stash: per group, per stage, most micro-batches stashed at
    once; peak_memory: per group, per stage, bytes held at the peak (k_opt * P_j + the peak
    activation bytes); groups: each group's SimResult."""

    group_times: tuple[float, ...]
    sync_time: float
    batch_time: float
    peak_stash: tuple[tuple[int, ...], ...]
    peak_memory: tuple[tuple[float, ...], ...]
    groups: tuple[SimResult, ...]
    optimizer_time: float = 0.0


def simulate_plan(plan: "Plan", state: "SlotState", duplex: str = "full") -> PlanSimulation:
    """Simulate every group of a structurally valid plan under its own schedule, recomputation
    and micro-batch size (links full duplex by default), with the cost model's sync time (a plan
    with TP stages on its units, model.units)."""
    if plan.uses_tp:
        state, plan = to_units(plan, state)
    results = []
    memory = []
    for g in plan.groups:
        st = state.at_micro_batch(g.micro_batch)
        wl = st.workload
        F, G, lam = stage_times(st, g.devices, g.cuts)
        P, H = stage_params_and_stash(st, g.cuts, g.devices)
        r = simulate(F, G, lam, wl.micro_batch, g.share, g.schedule, recompute=g.recompute,
                     saved=H, inputs=stage_input_bytes(st, g.cuts), duplex=duplex)
        results.append(r)
        memory.append(tuple(float(x) for x in wl.opt_factor * P + r.peak_bytes))
    structure = [(g.devices, g.cuts) for g in plan.groups]
    ts = sync_time(state, structure)
    to = optimizer_step_time(state, structure)
    times = tuple(r.makespan for r in results)
    return PlanSimulation(times, ts, max(times) + ts + to, tuple(r.peak_stash for r in results),
                          tuple(memory), tuple(results), to)


def simulated_batch_time(plan: "Plan", state: "SlotState") -> float:
    """simulate_plan(plan, state).batch_time (full-duplex links), by `makespan`: no per-op
    records or memory peaks, a fraction of the time."""
    if plan.uses_tp:
        state, plan = to_units(plan, state)
    times = []
    for g in plan.groups:
        st = state.at_micro_batch(g.micro_batch)
        F, G, lam = stage_times(st, g.devices, g.cuts)
        times.append(makespan(F, G, lam, st.workload.micro_batch, g.share, g.schedule, recompute=g.recompute))
    structure = [(g.devices, g.cuts) for g in plan.groups]
    return max(times) + sync_time(state, structure) + optimizer_step_time(state, structure)
