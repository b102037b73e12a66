"""Start a training job's processes on this machine, watch them, and record lost devices.

One process per device the job runs (the instance's devices, or those named, less those
recorded as lost). When a process dies from a signal (kill -9, out of memory), its device is
appended to CHECKPOINT_DIR/lost.json, the other processes are stopped, and the launch fails
with one line; running the same command again resumes from the newest checkpoint on the
devices left (delete lost.json to bring a device back). A process that fails with an error
(not a signal) records nothing: its first line is the launch's error.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Sequence

from ..errors import DynparError
from ..model import Instance
from . import cpuquota
from .spec import error_line
from .trainer import TrainConfig, train_worker

LOST = "lost.json"


class TrainFailed(DynparError, RuntimeError):
    """A worker died or failed; the message says which and how to resume."""


def lost_devices(checkpoint_dir: str | os.PathLike) -> list[str]:
    p = Path(checkpoint_dir) / LOST
    return list(json.loads(p.read_text())) if p.exists() else []


def _record_lost(checkpoint_dir: str | os.PathLike, names: Sequence[str]) -> None:
    p = Path(checkpoint_dir) / LOST
    p.parent.mkdir(parents=True, exist_ok=True)
    have = lost_devices(checkpoint_dir)
    p.write_text(json.dumps(have + [n for n in names if n not in have]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, init: str, instance: Instance, cfg: TrainConfig,
           devices: list[int], err_dir: str) -> None:
    try:
        train_worker(rank, world, init, instance, cfg, devices)
    except BaseException as e:  # one line for the launcher; the traceback to a file
        Path(err_dir, f"rank-{rank}.err").write_text(error_line(e)[:600])
        Path(err_dir, f"rank-{rank}.trace").write_text(traceback.format_exc())
        sys.exit(1)


def launch(instance: Instance, cfg: TrainConfig, device_names: Sequence[str] | None = None,
           start_method: str = "forkserver") -> list[str]:
    """Run the job on one process per device; return the device names it ran on.
    Raises TrainFailed (a worker died or failed) after stopping every process."""
    names = [d.name for d in instance.devices]
    wanted = list(device_names) if device_names else names
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise TrainFailed(f"--devices: unknown device(s) {unknown}; devices: {', '.join(names)}")
    lost = lost_devices(cfg.checkpoint_dir)
    run_on = [n for n in wanted if n not in lost]
    if not run_on:
        raise TrainFailed(f"every device is recorded lost in {Path(cfg.checkpoint_dir) / LOST}")
    devices = [names.index(n) for n in run_on]
    cpuquota.check(cfg.cpu_quota, cfg.cpu_pin, names)
    world = len(devices)
    init = f"tcp://127.0.0.1:{_free_port()}"
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", "solver.runtime.trainer"])
    with tempfile.TemporaryDirectory() as err_dir:
        procs = [ctx.Process(target=_entry, args=(r, world, init, instance, cfg, devices, err_dir), daemon=False)
                 for r in range(world)]
        for p in procs:
            p.start()
        failed, killed = _watch(procs)
        for p in procs:
            cpuquota.remove(p.pid)
        if failed is None:
            return run_on
        if killed:
            dead = [run_on[r] for r in sorted(killed)]
            _record_lost(cfg.checkpoint_dir, dead)
            raise TrainFailed(f"device(s) {', '.join(dead)} died (signal {killed[min(killed)]}); recorded in "
                              f"{Path(cfg.checkpoint_dir) / LOST}; run the same command to resume from the newest "
                              f"checkpoint on the {world - len(dead)} device(s) left")
        # the cause: the first error written that is not a peer's connection closing on a failed rank
        # (a rank's own error is written after its process group is torn down, so its peers' often come first)
        errs = sorted(Path(err_dir).glob("rank-*.err"),
                      key=lambda p: (peer_closed(p.read_text()), p.stat().st_mtime_ns, int(p.stem.split("-")[1])))
        first = errs[0].read_text() if errs else f"rank {failed} exited with status {procs[failed].exitcode}"
        raise TrainFailed(f"rank {errs[0].stem.split('-')[1] if errs else failed}: {first}")


PEER_CLOSED = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "remote worker crashing",
               "remote process exited")
"""What a collective raises on a rank whose peer failed (gloo, NCCL): never the cause itself."""


def peer_closed(text: str) -> bool:
    """Whether an error's text is a collective's on a rank whose peer failed (PEER_CLOSED)."""
    return any(x in text for x in PEER_CLOSED)


def _watch(procs: list, grace_s: float = 3.0) -> tuple[int | None, dict[int, int]]:
    """Wait for every process; on the first failure stop the others. Returns the failed
    rank (None: all succeeded) and {rank: signal} of those a signal killed before the
    launcher stopped the rest."""
    while True:
        codes = [p.exitcode for p in procs]
        bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            first = min(bad, key=lambda r: (codes[r] >= 0, r))  # a signal death is the cause
            signalled = {r: -codes[r] for r in bad if codes[r] < 0}
            deadline = time.monotonic() + grace_s
            for p in procs:
                while p.exitcode is None and time.monotonic() < deadline:
                    p.join(0.05)
            for p in procs:
                if p.exitcode is None:
                    p.kill()
                    p.join()
            return first, signalled
        if all(c == 0 for c in codes):
            return None, {}
        time.sleep(0.05)
