"""Discrete-event simulator of ONE pipeline group: the ground truth for the closed form.

A group of k stages trains on a share of b samples split into micro-batches of u samples.
Per sample, stage j computes forward F_j and backward G_j seconds; the link between
stage j and j+1 carries activations forward and gradients back, lam_j seconds per sample
each way (lam already includes the link latency divided by u). A micro-batch of s samples
takes s * F_j, s * G_j and s * lam_j. When b is not a multiple of u the last micro-batch is
shorter (b mod u samples); the closed form of `costmodel.gpipe_coeffs` only covers whole
micro-batches.

Resources: every stage and every link serves one operation at a time. A stage runs its
operations in a fixed order given by the schedule (`_stage_order`); a link serves its
transfers, in both directions, first come first served (ties: the earlier request).

Schedules:
- "gpipe": every stage runs all forwards (micro-batch 1..n), then all backwards (1..n).
  This is GPipe's flush: the last stage starts the backward of micro-batch 1 only when it has
  finished ALL its forwards, and every other stage follows the gradients back.
- "1f1b": PipeDream-flush (Megatron order): stage j (1-based) runs min(k - j, n) warm-up
  forwards, then alternates one forward / one backward until its forwards are done, then
  drains the remaining backwards. Stage j then stashes at most min(k - j + 1, n) micro-batches.

A micro-batch is stashed on a stage from the start of its forward to the end of its backward.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

SCHEDULES = ("gpipe", "1f1b")


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
    per stage, most micro-batches stashed at once; sizes: micro-batch sizes (samples);
    ops: every operation with its start and end, in the order they started."""

    makespan: float
    stage_busy: tuple[float, ...]
    link_busy: tuple[float, ...]
    peak_stash: tuple[int, ...]
    sizes: tuple[int, ...]
    ops: tuple[Op, ...] = ()


def micro_batches(b: int, u: int) -> list[int]:
    """Sizes of the micro-batches of a share of b samples: whole u's, then the remainder."""
    if b < 1 or u < 1:
        raise ValueError(f"share b={b} and micro-batch u={u} must be >= 1")
    return [u] * (b // u) + ([b % u] if b % u else [])


def _stage_order(schedule: str, j: int, k: int, n: int) -> list[tuple[str, int]]:
    """Operations ("F" | "B", micro-batch) of stage j (0-based) in the order it runs them."""
    if schedule == "gpipe":
        return [("F", m) for m in range(n)] + [("B", m) for m in range(n)]
    if schedule == "1f1b":
        warm = min(k - 1 - j, n)
        order = [("F", m) for m in range(warm)]
        for m in range(warm, n):
            order += [("F", m), ("B", m - warm)]
        return order + [("B", m) for m in range(n - warm, n)]
    raise ValueError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")


def simulate(F: Sequence[float], G: Sequence[float], lam: Sequence[float], u: int, b: int,
             schedule: str = "gpipe") -> SimResult:
    """Simulate one iteration of a k-stage group on b samples (seconds; see module doc)."""
    k = len(F)
    if len(G) != k or len(lam) != k - 1:
        raise ValueError(f"need k forward, k backward and k-1 link times; got {len(F)}, {len(G)}, {len(lam)}")
    sizes = micro_batches(b, u)
    n = len(sizes)
    orders = [_stage_order(schedule, j, k, n) for j in range(k)]
    nxt = [0] * k                        # index of the next operation in each stage's order
    stage_free = [True] * k
    link_free = [True] * (k - 1)
    link_queue: list[list[tuple[float, int, str, int]]] = [[] for _ in range(k - 1)]
    arrived: set[tuple[str, int, int]] = set()   # inputs delivered: ("F"|"B", stage, mb)
    stash, peak = [0] * k, [0] * k
    stage_busy, link_busy = [0.0] * k, [0.0] * (k - 1)
    events: list[tuple[float, int, str, int, int]] = []  # (time, seq, kind, where, mb)
    ops: list[Op] = []
    seq = 0

    def push(t: float, kind: str, where: int, m: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, where, m))
        seq += 1

    def dispatch(now: float) -> None:
        """Start every operation whose resource is free and whose input has arrived."""
        for j in range(k):
            if stage_free[j] and nxt[j] < n * 2:
                op, m = orders[j][nxt[j]]
                # stage 1 owns the inputs; the last stage's own F(m) precedes B(m) in its order
                # (in GPipe after ALL its forwards: the flush), so both need no delivery
                if (op, j, m) in arrived or (op == "F" and j == 0) or (op == "B" and j == k - 1):
                    stage_free[j], nxt[j] = False, nxt[j] + 1
                    dur = sizes[m] * (F[j] if op == "F" else G[j])
                    stage_busy[j] += dur
                    if op == "F":
                        stash[j] += 1
                        peak[j] = max(peak[j], stash[j])
                    push(now + dur, "done" + op, j, m)
                    ops.append(Op(op, j, m, now, now + dur))
        for i in range(k - 1):
            if link_free[i] and link_queue[i]:
                _, _, direction, m = heapq.heappop(link_queue[i])
                link_free[i] = False
                link_busy[i] += sizes[m] * lam[i]
                push(now + sizes[m] * lam[i], "sent" + direction, i, m)
                ops.append(Op("send" + direction, i, m, now, now + sizes[m] * lam[i]))

    now = 0.0
    dispatch(now)
    while events:
        now = events[0][0]
        while events and events[0][0] == now:   # apply every event of this instant, then dispatch
            _, _, kind, where, m = heapq.heappop(events)
            if kind == "doneF":
                stage_free[where] = True
                if where < k - 1:           # activations go over link `where` to the next stage
                    heapq.heappush(link_queue[where], (now, seq, "F", m))
                    seq += 1
            elif kind == "doneB":
                stage_free[where] = True
                stash[where] -= 1
                if where > 0:               # gradients go back over link `where - 1`
                    heapq.heappush(link_queue[where - 1], (now, seq, "B", m))
                    seq += 1
            else:                            # a transfer over link `where` has arrived
                link_free[where] = True
                arrived.add(("F", where + 1, m) if kind == "sentF" else ("B", where, m))
        dispatch(now)
    if any(x != 2 * n for x in nxt):
        raise RuntimeError(f"deadlock: stages stopped after {nxt} of {2 * n} operations")
    return SimResult(now, tuple(stage_busy), tuple(link_busy), tuple(peak), tuple(sizes), tuple(ops))
