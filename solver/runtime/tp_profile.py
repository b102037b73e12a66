"""Per-layer seconds of a tensor-parallel shard: `dynpar profile --tp-degrees` (the layer
table's `@tp<t>` columns, `# tp_times: shard_compute`; solver.io.columns).

The whole model is split as one stage (tensor_parallel.stage_roles: Megatron pairs
column- then row-parallel, a lone Linear gathered, attention by heads; other modules whole on
every rank), and each block's shard is timed by `profiler.profile_module` on the shard
outputs of the blocks before it, forward and backward, as seconds per sample. The shards of
a layer have equal shapes. Two modes (TP_MODES):

- "group" (the default): t processes on this machine (gloo, one torch thread each unless
  told), each timing its own shard with the collectives on, every collective's seconds
  left out of its pass (tensor_parallel.CollectiveClock; waits for the other ranks
  included); a layer's figure is the mean over the ranks. What a shard costs beside its
  collectives inside a running TP group is what this measures: on this 2-core machine the
  TP-2 ranks of a job computed 2-3x the seconds that the same shard takes alone in one
  process (docs/TRAIN.md, "What a TP shard computes"), the per-call work the collectives
  leave on the rank's cores (gloo's threads, the wake-ups) falling between them.
- "local": shard 0 alone in this process, the collectives skipped
  (tensor_parallel.local_only: an all-reduce costs nothing, an all-gather is a
  concatenation of t copies): the shard's arithmetic without any of that.

Either way the seconds exclude the collectives themselves, which the cost model adds
(model.state.tp_collective_seconds: the ring of the stage's links plus the per-call
`tp_collective_latency` the training loop's estimator fits).
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import DynparError
from ..model.workload import TPVariant
from .profiler import profile_module

TP_MODES = ("group", "local")


def _shards(model: nn.Sequential, t: int, r: int) -> nn.Sequential:
    """Shard r of t of every block of `model` split as one stage (parameters cut from the
    model's, which is not changed). ValueError naming the layer where a block does not split."""
    from .tensor_parallel import Split, problems, shard_template, stage_roles
    if isinstance(t, bool) or not isinstance(t, int) or t < 2:
        raise ValueError(f"tp degree: expected an integer >= 2, got {t!r}")
    blocks = list(model)
    why = problems(blocks, 0, t)
    if why:
        raise ValueError(f"tp degree {t}: {why[0]}" + (f" (and {len(why) - 1} more)" if len(why) > 1 else ""))
    roles = stage_roles(blocks)
    return nn.Sequential(*(shard_template(b, Split(k, r, t, tuple(range(t)), roles[k])) for k, b in enumerate(blocks)))


def _variant(wl: Any, micro_batch: int, kind: str) -> TPVariant:
    return TPVariant(tuple(float(x) for x in wl.param_bytes), tuple(float(x) for x in wl.stash_bytes),
                     {int(micro_batch): dict(wl.measured)}, times="shard_compute")


def profile_tp_local(model: nn.Sequential, example: torch.Tensor, kind: str, t: int, batch: int,
                     micro_batch: int, repeats: int = 5) -> TPVariant:
    """Mode "local" (module doc): shard 0 of t timed on `example` (n samples) in this process,
    its collectives skipped. Returns a TPVariant of times "shard_compute": seconds per sample
    forward and backward, parameter bytes and saved activation bytes per sample of one rank.
    ValueError naming the layer when a block does not split over t ranks, and when t is not
    an integer >= 2."""
    from .tensor_parallel import local_only
    shards = _shards(model, t, 0)
    with local_only():
        wl = profile_module(shards, example, kind, batch, micro_batch, repeats, name=f"tp{t}", private=False)
    return _variant(wl, micro_batch, kind)


def _rank(rank: int, factory: str, kind: str, t: int, batch: int, micro_batch: int, repeats: int,
          threads: int, init: str, folder: str) -> None:
    """One process of mode "group": rank `rank` of t times its shard and writes its figures."""
    import torch.distributed as dist

    from .seeding import batch_context
    from .spec import Batches, blocks_of, load_factory
    from .tensor_parallel import CollectiveClock, attach
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=t)
    try:
        spec = load_factory(factory)
        shards = _shards(nn.Sequential(*blocks_of(spec.model)), t, rank)
        clock = CollectiveClock()
        attach(shards, dist.group.WORLD, clock)
        x = Batches(spec.data, batch).rows(0, 0, micro_batch)[0]
        dist.barrier()
        with batch_context(0), spec.autocast_context(x.device):
            wl = profile_module(shards, x, kind, batch, micro_batch, repeats, name=f"tp{t}", exclude=clock,
                                    private=False)
        f, b = wl.measured[kind]
        Path(folder, f"rank{rank}.json").write_text(json.dumps({
            "fwd": list(f), "bwd": list(b), "param_bytes": [float(v) for v in wl.param_bytes],
            "stash_bytes": [float(v) for v in wl.stash_bytes], "collective_s": clock.seconds}))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _leave()


class ProfileFailed(DynparError, RuntimeError):
    """A rank of a mode "group" profile died or raised; the message says which and why."""


def _leave() -> None:
    """End a rank that has written its figures without the interpreter's teardown: on this
    machine about 1 in 15 group runs aborted there ("terminate called without an active
    exception", SIGABRT after both ranks had returned, their files written), which the
    parent read as a failed profile. Nothing is left to flush but stdout and stderr.
    (Training workers, runtime.launch, start by forkserver, whose children already end
    with os._exit; torch's spawn children end with sys.exit and a full teardown.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _cause(e: Exception) -> str:
    """One line for a failed rank: its exception's last line, or how it exited."""
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException
    if isinstance(e, ProcessRaisedException):
        last = [ln for ln in str(e).splitlines() if ln.strip()]
        return f"rank {e.error_index} raised {last[-1].strip() if last else 'an exception'}"
    if isinstance(e, ProcessExitedException) and e.signal_name:
        return f"rank {e.error_index} was killed by {e.signal_name}"
    return f"rank {getattr(e, 'error_index', '?')} exited with status {getattr(e, 'exit_code', '?')}"


def profile_tp_group(factory: str, kind: str, t: int, batch: int, micro_batch: int, repeats: int = 5,
                     threads: int = 1) -> TPVariant:
    """Mode "group" (module doc): t spawned processes on this machine (gloo on a free loopback
    port), rank r timing shard r of t of the model `factory` (MODULE:FACTORY returning a
    TrainSpec) on the first micro-batch of its data, its collectives' seconds left out; per
    layer the mean over the ranks. Returns a TPVariant of times "shard_compute". ValueError
    naming the layer when a block does not split over t ranks (checked before any process
    starts); ProfileFailed, in one line, when a rank dies or raises."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    from .spec import blocks_of, load_factory
    _shards(nn.Sequential(*blocks_of(load_factory(factory).model)), t, 0)    # refusals, here and named
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            mp.start_processes(_rank, args=(factory, kind, t, batch, micro_batch, repeats, threads,
                                            f"tcp://127.0.0.1:{port}", tmp), nprocs=t, start_method="spawn")
        except ProcessException as e:
            raise ProfileFailed(f"tp degree {t}: {_cause(e)}") from None
        ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(t)]
    fwd = tuple(statistics.fmean(r["fwd"][i] for r in ranks) for i in range(len(ranks[0]["fwd"])))
    bwd = tuple(statistics.fmean(r["bwd"][i] for r in ranks) for i in range(len(ranks[0]["bwd"])))
    return TPVariant(tuple(ranks[0]["param_bytes"]), tuple(ranks[0]["stash_bytes"]),
                     {int(micro_batch): {kind: (fwd, bwd)}}, times="shard_compute")
