"""A reserved or limited core for one training process: a cgroup of its own (Linux cgroup
cpu controller) with a raised scheduling weight, an optional CPU quota and an optional pin.

`dynpar train --cpu-quota DEVICE=FRACTION,... [--cpu-pin DEVICE=CORE,...]` puts the process
of each named device in a cgroup with
- a raised weight (v1 cpu.shares 8192, v2 cpu.weight 800; the default is 1024 / 100): a busy
  device gets most of its core even while other jobs' processes are runnable there;
- FRACTION < 1: a quota of FRACTION * period CPU microseconds per period (v1
  cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max), a slower device; FRACTION >= 1: no quota;
- CORE: the process runs on that core only (sched_setaffinity of every thread: `pin_threads`).

What it emulates, measured on this project's 2-core KVM machine: one pinned process per core
at FRACTION 1 is a device with a core of its own (a compute-bound process got 0.90-1.00 of its
core at load average 6, against 0.49 at the default weight), so its speed does not depend on how
many of the job's processes compute at once. Quotas are coarse: the kernel enforces them per
period and tick, so a process whose quota equalled its period got 0.50 of a core at a 1 ms
period and 0.91 at 10 ms (PERIOD_US is 10 ms), and a stage that waits (pipeline bubbles) may
run at full speed for the rest of a period: its speed then depends on the plan.

Needs write access to the cgroup cpu controller (root, or a delegated cgroup); otherwise a
SpecError says why before any training. A killed process leaves an empty cgroup folder, which
the launcher removes.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .spec import SpecError

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
PERIOD_US = 10000
WEIGHT_V1 = 8192  # cpu.shares (default 1024)
WEIGHT_V2 = 800  # cpu.weight (default 100)
PREFIX = "dynpar-quota-"


def _root() -> tuple[Path, int]:
    """(cgroup folder of the cpu controller, version)."""
    if (V1 / "cpu.cfs_quota_us").exists():
        return V1, 1
    if (V2 / "cgroup.controllers").exists() and "cpu" in (V2 / "cgroup.controllers").read_text().split():
        return V2, 2
    raise SpecError("--cpu-quota: no cgroup cpu controller found (looked for /sys/fs/cgroup/cpu/cpu.cfs_quota_us "
                    "and cpu in /sys/fs/cgroup/cgroup.controllers)")


def check_fraction(device: str, fraction: float) -> None:
    if not (0.01 <= fraction <= 64.0):
        raise SpecError(f"--cpu-quota: expected a fraction of a core in [0.01, 64] for {device}, got {fraction!r}")


def check(quota: dict[str, float], pin: dict[str, int], names: list[str]) -> None:
    """The job's quotas and pins against its device names (SpecError naming the flag)."""
    for flag, given in (("--cpu-quota", quota), ("--cpu-pin", pin)):
        bad = [n for n in given if n not in names]
        if bad:
            raise SpecError(f"{flag}: unknown device(s) {bad}; devices: {', '.join(names)}")
    for n, f in quota.items():
        check_fraction(n, float(f))
    alone = [n for n in pin if n not in quota]
    if alone:
        raise SpecError(f"--cpu-pin: device(s) {alone} have no --cpu-quota (a pin goes with the device's "
                        f"cgroup; give FRACTION 1 for a whole core)")
    cores = os.cpu_count() or 1
    for n, c in pin.items():
        if not 0 <= int(c) < cores:
            raise SpecError(f"--cpu-pin: expected a core in 0..{cores - 1} for {n}, got {c}")


def pin_threads(cpus: set[int] | frozenset[int]) -> list[int]:
    """Set the affinity of every thread of this process to `cpus` (os.sched_setaffinity(0)
    sets the calling thread's only); returns the thread ids set. Threads that end meanwhile
    are skipped. Why: the default process group's gloo threads (a TCP loop, two run loops, the
    store's) start in init_process_group, before the rank pins itself; pinning only the main
    thread left them free to run on the other device's core (seen in /proc/PID/task/*/status:
    Cpus_allowed_list 0-1 beside the pinned 0)."""
    done = []
    for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, FileNotFoundError):
            continue
        done.append(tid)
    return done


@dataclass(frozen=True)
class Quota:
    """A process's quota cgroup (its folder) and the cores it ran on before being pinned."""

    path: Path
    cpus: frozenset[int]


def enter(device: str, fraction: float, period_us: int = PERIOD_US, cpu: int | None = None) -> Quota:
    """Move this process (all its threads) into a new cgroup limited to `fraction` of a core
    (1 or more: no limit, only the raised weight), pinned to core `cpu` when given (for
    `leave`)."""
    check_fraction(device, fraction)
    root, version = _root()
    path = root / f"{PREFIX}{os.getpid()}"
    before = frozenset(os.sched_getaffinity(0))
    quota = max(1000, round(fraction * period_us))  # the kernel's least quota is 1 ms
    period = period_us if quota == round(fraction * period_us) else round(quota / fraction)
    try:
        path.mkdir(exist_ok=True)
        if version == 1:
            if fraction < 1:
                (path / "cpu.cfs_period_us").write_text(str(period))
                (path / "cpu.cfs_quota_us").write_text(str(quota))
            (path / "cpu.shares").write_text(str(WEIGHT_V1))
        else:
            (path / "cpu.max").write_text(f"{quota} {period}" if fraction < 1 else f"max {period}")
            (path / "cpu.weight").write_text(str(WEIGHT_V2))
        (path / "cgroup.procs").write_text(str(os.getpid()))
        if cpu is not None:
            pin_threads({cpu})
    except OSError as e:
        remove(os.getpid())
        raise SpecError(f"--cpu-quota: cannot limit device {device} to {fraction} of a core in {path}: "
                        f"{e.strerror or e} (needs write access to the cgroup cpu controller)") from None
    return Quota(path, before)


def leave(quota: Quota) -> None:
    """Move this process back to the parent cgroup, remove its quota cgroup and unpin it."""
    pin_threads(quota.cpus)
    try:
        (quota.path.parent / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        return
    remove(os.getpid())


@contextlib.contextmanager
def outside(quota: Quota | None) -> Iterator[None]:
    """Run the block outside the quota, on the cores it had before (rank 0's controller:
    planning is not the emulated device's work and is not part of any measured iteration)."""
    if quota is None:
        yield
        return
    pinned = frozenset(os.sched_getaffinity(0))
    (quota.path.parent / "cgroup.procs").write_text(str(os.getpid()))
    os.sched_setaffinity(0, quota.cpus)
    try:
        yield
    finally:
        (quota.path / "cgroup.procs").write_text(str(os.getpid()))
        pin_threads(pinned)  # threads the block started too


def remove(pid: int) -> None:
    """Remove the (empty) quota cgroup of process `pid`, if any: a killed process leaves it."""
    for root in (V1, V2):
        path = root / f"{PREFIX}{pid}"
        if path.is_dir():
            try:
                path.rmdir()
            except OSError:
                pass
