"""Sharded checkpoints of a training job: one file per block, one metadata file.

Layout under the checkpoint folder DIR:
    DIR/ckpt-<step>/block-<i>.pt   block i's parameters, buffers, optimizer and LR-scheduler state
                                   (LayerState.pack), written by the block's first holder;
    DIR/ckpt-<step>/meta.json      written by rank 0: the step (iterations done = the data
                                   position), the job's config, the controller state;
    DIR/LATEST                     the name of the newest complete checkpoint.
A checkpoint is written into ckpt-<step>.tmp and renamed once every block is on disk (all
ranks pass a barrier), then LATEST is replaced atomically, so a kill at any moment leaves
the previous checkpoint intact. The two newest are kept. Every process reads the blocks it
holds under the plan it resumes with, whatever wrote them (one machine or a shared folder).

Randomness: dropout masks are a function of (seed, step, sample, site) (runtime.seeding)
and the data of the step, so the step in meta.json is the whole RNG and data state.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from .replan import LayerState, OptFactory, SchedFactory, new_layer
from .spec import SpecError

KEEP = 2


def _name(step: int) -> str:
    return f"ckpt-{step:08d}"


def save(folder: str | os.PathLike, step: int, rank: int, held: dict[int, LayerState],
         holders: Sequence[tuple[int, ...]], meta: dict[str, Any] | None,
         packs: dict[int, dict] | None = None) -> None:
    """Collective: every rank writes the blocks it is first holder of (packs[i] where given:
    a tensor-parallel layer gathered whole, else held[i].pack()); rank 0 (`meta` given
    there) writes meta.json and publishes the checkpoint."""
    root = Path(folder)
    tmp = root / (_name(step) + ".tmp")
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist.barrier()
    for i, s in held.items():
        if holders[i] and holders[i][0] == rank:
            torch.save(packs[i] if packs and i in packs else s.pack(), tmp / f"block-{i:04d}.pt")
    dist.barrier()
    if rank == 0:
        if meta is None:
            raise ValueError("rank 0 must give the checkpoint's metadata")
        (tmp / "meta.json").write_text(json.dumps({**meta, "step": int(step)}, allow_nan=True))
        final = root / _name(step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        latest = root / "LATEST.tmp"
        latest.write_text(final.name)
        os.replace(latest, root / "LATEST")
        done = sorted(p for p in root.glob("ckpt-*") if p.is_dir() and not p.name.endswith(".tmp"))
        for old in done[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def latest(folder: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of `folder`, or None."""
    root = Path(folder)
    marker = root / "LATEST"
    if not marker.exists():
        return None
    path = root / marker.read_text().strip()
    if not (path / "meta.json").exists():
        raise FileNotFoundError(f"checkpoint {path} named by {marker} is incomplete (no meta.json)")
    return path


def read_meta(path: Path) -> dict[str, Any]:
    return json.loads((path / "meta.json").read_text())


def same_job(path: Path, meta: dict[str, Any], ident: dict[str, Any]) -> None:
    """SpecError naming what differs (checkpoint's value, this job's) unless the checkpoint at
    `path` with metadata `meta` belongs to the job of identity `ident` (TrainConfig.identity)."""
    theirs = meta.get("identity") or {}
    if theirs != ident:
        def words(k: str, v: Any) -> str:
            if v is None:
                return "off" if k == "budget_tolerance" else "absent"
            return f"{100 * v:.12g}%" if k == "budget_tolerance" else str(v)
        diff = "; ".join(f"{k}: checkpoint {words(k, theirs.get(k))}, this job {words(k, v)}"
                         for k, v in ident.items() if theirs.get(k) != v)
        raise SpecError(f"checkpoint {path} belongs to another job: {diff}")


def load_blocks(path: Path, blocks: Sequence[int], templates: Sequence[nn.Module],
                make_opt: OptFactory, device: torch.device,
                make_sched: SchedFactory | None = None) -> dict[int, LayerState]:
    """The LayerStates of `blocks` restored from checkpoint `path` onto `device`
    (optimizer and LR scheduler state included)."""
    out = {}
    for i in blocks:
        f = path / f"block-{i:04d}.pt"
        if not f.exists():
            raise FileNotFoundError(f"checkpoint {path} lacks block {i} ({f.name})")
        out[i] = new_layer(templates[i], device, make_opt, torch.load(f, map_location=device, weights_only=True),
                           make_sched)
    return out
