"""The data-parallel gradient all-reduce across groups when some stages are tensor-parallel.

Each parameter of a layer held by several groups is reduced in pieces:
- where every TP holder splits it along the same dimension d, in T chunks along d (T the
  least common multiple of the TP holders' degrees): chunk c is SUM-all-reduced among the
  one rank per group that holds it (shard c // (T / t) of a degree-t stage, runtime.tensor_parallel.Split;
  the whole tensor of a degree-1 holder), so each shard is summed among the holders of the same slice;
- otherwise (TP holders split it differently, or keep it whole: a bias of a row-parallel
  layer, a parameter outside any split Linear) the whole tensor among every holding rank,
  each rank contributing its shard in place and zeros elsewhere, and a TP stage's whole
  copy from its shard-0 rank only (the others: zeros). Adding zeros is exact, so the sum is
  the groups' sum either way.
Pieces with the same rank set form one bucket (one flat all-reduce), visited in sorted
order by every rank, as runtime.layout.buckets does without TP.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..model import Plan
from .layout import layer_units
from .tensor_parallel import Split, stage_roles


@dataclass(frozen=True)
class Piece:
    """Parameter `name` of `layer`: chunk `chunk` of `of` along `dim`, or (dim None) the whole tensor."""

    layer: int
    name: str
    dim: int | None = None
    chunk: int = 0
    of: int = 1


def stage_dims(plan: Plan, templates: Sequence[nn.Module]) -> dict[tuple[int, int], dict[str, int | None]]:
    """(group index, layer) -> parameter name -> split dimension, for every layer of a TP stage."""
    out = {}
    for gi, g in enumerate(plan.groups):
        for (_, a, b), unit in zip(g.stages(), g.units()):
            if len(unit) > 1:
                roles = stage_roles(templates[a:b])
                for k, layer in enumerate(range(a, b)):
                    out[(gi, layer)] = Split(layer, 0, len(unit), tuple(unit), roles[k]).dims(templates[layer])
    return out


def tp_buckets(plan: Plan, templates: Sequence[nn.Module], has_params: Sequence[bool]
               ) -> dict[tuple[int, ...], list[Piece]]:
    """Sorted rank set -> the pieces (module docstring) it all-reduces; plan in ranks."""
    units = layer_units(plan, len(templates))
    dims = stage_dims(plan, templates)
    group_of = {u: gi for gi, g in enumerate(plan.groups) for u in g.units()}
    out: dict[tuple[int, ...], list[Piece]] = {}
    for layer, us in enumerate(units):
        if not has_params[layer] or len(us) < 2:
            continue
        for name, p in templates[layer].named_parameters():
            split = {u: dims[(group_of[u], layer)][name] for u in us if len(u) > 1}
            ds = set(split.values())
            T = math.lcm(*(len(u) for u in split)) if split else 1
            if split and len(ds) == 1 and None not in ds and p.shape[next(iter(ds))] % T == 0:
                d = next(iter(ds))
                for c in range(T):
                    key = tuple(sorted(sorted(u)[c // (T // len(u))] for u in us))
                    out.setdefault(key, []).append(Piece(layer, name, d, c, T))
            else:
                key = tuple(sorted(r for u in us for r in u))
                out.setdefault(key, []).append(Piece(layer, name))
    return dict(sorted(out.items()))


def _view(grad: torch.Tensor, piece: Piece, split: Split | None) -> torch.Tensor:
    """This rank's part of a chunk piece inside its (shard) gradient."""
    per, idx = (piece.of, piece.chunk) if split is None else (piece.of // split.t,
                                                               piece.chunk - split.r * (piece.of // split.t))
    size = grad.shape[piece.dim] // per
    return grad.narrow(piece.dim, idx * size, size)


def allreduce_pieces(rank: int, held: Mapping[int, Any], templates: Sequence[nn.Module],
                     bucket_groups: Sequence[tuple[tuple[int, ...], list[Piece], Any]]) -> None:
    """SUM-all-reduce each bucket this rank belongs to (module docstring); held[i] has
    `.module` and `.split` (runtime.replan.LayerState)."""
    for ranks, pieces, pg in bucket_groups:
        if rank not in ranks:
            continue
        parts, places = [], []
        for pc in pieces:
            st = held[pc.layer]
            p = dict(st.module.named_parameters())[pc.name]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            split: Split | None = st.split
            if pc.dim is not None:
                parts.append(_view(p.grad, pc, split).reshape(-1))
                places.append((p, pc, split, None))
                continue
            d = split.dims(templates[pc.layer])[pc.name] if split is not None else None
            full = torch.zeros(templates[pc.layer].get_parameter(pc.name).shape, dtype=p.dtype, device=p.device)
            if split is None:
                full = p.grad
            elif d is None:
                full = p.grad if split.r == 0 else full
            else:
                n = p.shape[d]
                full.narrow(d, split.r * n, n).copy_(p.grad)
            parts.append(full.reshape(-1))
            places.append((p, pc, split, d))
        flat = torch.cat(parts)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=pg)
        off = 0
        for (p, pc, split, d), part in zip(places, parts):
            res = flat[off:off + part.numel()]
            off += part.numel()
            if pc.dim is not None:
                _view(p.grad, pc, split).copy_(res.view_as(_view(p.grad, pc, split)))
            elif split is None or d is None:
                p.grad = res.view_as(p).clone()
            else:
                n = p.shape[d]
                p.grad = res.view(templates[pc.layer].get_parameter(pc.name).shape).narrow(d, split.r * n, n).clone()


def counted(state: Any, name: str) -> bool:
    """Whether this rank counts parameter `name` of a layer it owns in the global gradient
    norm: always without TP; a split parameter's shard on every TP rank, a whole one on the
    stage's shard-0 rank only."""
    split: Split | None = getattr(state, "split", None)
    return split is None or split.r == 0 or split.dims(state.module)[name] is not None
