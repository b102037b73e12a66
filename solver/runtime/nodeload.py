"""What the node's cores did around a rank's compute: slots.csv `node_load` (a diagnostic).

Per device and slot (`report`): `other_cores_busy`, u, the busy fraction of the node's other
cores during this rank's compute (the slot's first iteration left out), and, on its own core
over the whole slot, `own_core_others_s` (seconds other processes ran there: the core's busy
seconds less this process's CPU seconds; all its threads run on the core it is pinned to,
runtime.cpuquota.pin_threads) and `own_core_free_s` (wall seconds less this process's CPU
seconds). The kernel's CPU seconds per core come from cgroup v1 `cpuacct.usage_percpu` of the
root cgroup (nanoseconds), else `/proc/stat` (ticks of 1 / USER_HZ s). A rank not pinned to
exactly one core, or a node where neither is readable, reports None (nothing is estimated).

Why it is recorded (docs/TRAIN.md, "What the node rate is not"): it tested whether the node's
visible load explains the drift of a device's CPU-time rate between slots. It does not: under
load from other jobs, bench_train's p0 saw its other core busy 0.80-0.98 of its compute in
every slot, alone or beside p1, while its CPU seconds per sample alone ranged 119-217
microseconds from job to job at the same u.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

PERCPU = Path("/sys/fs/cgroup/cpuacct/cpuacct.usage_percpu")
PROC_STAT = Path("/proc/stat")


def _usage_ns() -> list[int] | None:
    """CPU nanoseconds used so far on each core (all tasks), or None where unreadable."""
    try:
        return [int(x) for x in PERCPU.read_text().split()]
    except (OSError, ValueError):
        pass
    try:
        tick = 1e9 / os.sysconf("SC_CLK_TCK")
        out = []
        for line in PROC_STAT.read_text().splitlines():
            head, *vals = line.split()
            if head.startswith("cpu") and head != "cpu":
                v = [int(x) for x in vals]
                out.append(round((v[0] + v[1] + v[2] + v[5] + v[6]) * tick))  # user nice system irq softirq
        return out or None
    except (OSError, ValueError):
        return None


def own_core() -> int | None:
    """The one core this process may run on, None when it may run on several."""
    cpus = os.sched_getaffinity(0)
    return next(iter(cpus)) if len(cpus) == 1 else None


class OtherCores:
    """Busy seconds of the cores other than this rank's own (`core`) over start/stop windows,
    summed; `fraction()` is u in [0, 1], None where nothing could be measured."""

    def __init__(self, core: int | None) -> None:
        probe = _usage_ns() if core is not None else None
        self.core = core if probe is not None and core is not None and core < len(probe) else None
        self.others = (len(probe) - 1) if self.core is not None and probe else 0
        self.busy_s = 0.0
        self.wall_s = 0.0
        self._t: float | None = None
        self._u: list[int] | None = None

    @property
    def enabled(self) -> bool:
        return self.core is not None and self.others > 0

    def reset(self) -> None:
        self.busy_s = self.wall_s = 0.0

    def start(self) -> None:
        if self.enabled:
            self._u, self._t = _usage_ns(), time.perf_counter()

    def stop(self) -> None:
        """Close the window opened by `start` and add it to the sums."""
        if not self.enabled or self._u is None or self._t is None:
            return
        u, t = _usage_ns(), time.perf_counter()
        if u is not None and len(u) == len(self._u):
            self.busy_s += sum(b - a for k, (a, b) in enumerate(zip(self._u, u)) if k != self.core) / 1e9
            self.wall_s += t - self._t
        self._u = self._t = None

    def fraction(self) -> float | None:
        """u: the other cores' busy seconds over (wall seconds * their number), clipped to [0, 1]
        (the kernel's counters and the wall clock are read a few microseconds apart); None when
        no window was measured."""
        if not self.enabled or self.wall_s <= 0:
            return None
        return min(1.0, max(0.0, self.busy_s / (self.wall_s * self.others)))


class OwnCore:
    """Other processes' seconds on this rank's own core over a window (a slot): the core's busy
    seconds less this process's CPU seconds (all its threads run on the core it is pinned to),
    and the core's free seconds (wall less this process's CPU seconds). Their ratio over the
    node's ranks is b, the share of a free core that other jobs take (runtime.speeds)."""

    def __init__(self, core: int | None) -> None:
        probe = _usage_ns() if core is not None else None
        self.core = core if probe is not None and core is not None and core < len(probe) else None
        self._start: tuple[int, float, float] | None = None

    def start(self) -> None:
        u = _usage_ns() if self.core is not None else None
        self._start = (u[self.core], time.perf_counter(), time.process_time()) if u is not None else None

    def stop(self) -> tuple[float, float] | None:
        """(other processes' busy seconds on the core, the core's free seconds) since `start`;
        None where not measured."""
        if self._start is None or self.core is None:
            return None
        u = _usage_ns()
        if u is None:
            return None
        busy0, t0, p0 = self._start
        mine = time.process_time() - p0
        others = (u[self.core] - busy0) / 1e9 - mine
        free = (time.perf_counter() - t0) - mine
        return max(0.0, others), max(0.0, free)


def report(others: OtherCores, own: OwnCore) -> dict[str, float | None]:
    """A slot's node_load entry of one rank (module doc); closes `own`'s window."""
    bg = own.stop()
    return {"other_cores_busy": others.fraction(), "own_core_others_s": bg[0] if bg else None,
            "own_core_free_s": bg[1] if bg else None}
