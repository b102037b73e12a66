"""The data-parallel gradient all-reduce across groups when some stages are tensor-parallel.

Each parameter of a layer held by several groups is reduced in pieces:
- where every TP holder splits it with the same layout (dimension d and groups g:
  runtime.tensor_parallel.Layout), in T chunks (T the least common multiple of the TP
  holders' degrees; chunk c is the c-th of T slices of each of the g blocks along d, so shard
  r of a degree-t stage holds chunks r T/t .. (r + 1) T/t - 1): chunk c is SUM-all-reduced among the
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
from .tensor_parallel import Layout, Split, cut, place, stage_roles


@dataclass(frozen=True)
class Piece:
    """Parameter `name` of `layer`: chunk `chunk` of `of` along `dim` in each of its `groups`
    blocks (module docstring), or (dim None) the whole tensor."""

    layer: int
    name: str
    dim: int | None = None
    chunk: int = 0
    of: int = 1
    groups: int = 1


def stage_dims(plan: Plan, templates: Sequence[nn.Module]) -> dict[tuple[int, int], dict[str, Layout | None]]:
    """(group index, layer) -> parameter name -> its Layout (None: whole), for every layer of a TP stage."""
    out = {}
    for gi, g in enumerate(plan.groups):
        for (_, a, b), unit in zip(g.stages(), g.units()):
            if len(unit) > 1:
                roles = stage_roles(templates[a:b])
                for k, layer in enumerate(range(a, b)):
                    out[(gi, layer)] = Split(layer, 0, len(unit), tuple(unit), roles[k]).layouts(templates[layer])
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
            lay = next(iter(ds)) if len(ds) == 1 else None
            if split and lay is not None and p.shape[lay[0]] % (lay[1] * T) == 0:
                for c in range(T):
                    key = tuple(sorted(sorted(u)[c // (T // len(u))] for u in us))
                    out.setdefault(key, []).append(Piece(layer, name, lay[0], c, T, lay[1]))
            else:
                key = tuple(sorted(r for u in us for r in u))
                out.setdefault(key, []).append(Piece(layer, name))
    return dict(sorted(out.items()))


def _views(grad: torch.Tensor, piece: Piece, split: Split | None) -> list[torch.Tensor]:
    """This rank's parts of a chunk piece inside its (shard) gradient, one per block."""
    per, idx = (piece.of, piece.chunk) if split is None else (piece.of // split.t,
                                                               piece.chunk - split.r * (piece.of // split.t))
    block = grad.shape[piece.dim] // piece.groups
    size = block // per
    return [grad.narrow(piece.dim, j * block + idx * size, size) for j in range(piece.groups)]


def allreduce_pieces(rank: int, held: Mapping[int, Any], templates: Sequence[nn.Module],
                     bucket_groups: Sequence[tuple[tuple[int, ...], list[Piece], Any]]) -> None:
    """SUM-all-reduce each bucket this rank belongs to (module docstring); held[i] has
    `.module` and `.split` (runtime.replan.LayerState). As pipeline.allreduce_grads: frozen
    parameters take no part, and one that no holder's forward used keeps no gradient."""
    for ranks, pieces, pg in bucket_groups:
        if rank not in ranks:
            continue
        parts, places, owners = [], [], {}
        for pc in pieces:
            st = held[pc.layer]
            p = dict(st.module.named_parameters())[pc.name]
            if not p.requires_grad:
                continue
            owners.setdefault((pc.layer, pc.name), (p, p.grad is not None))
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            split: Split | None = st.split
            if pc.dim is not None:
                parts.append(torch.cat([v.reshape(-1) for v in _views(p.grad, pc, split)]))
                places.append((p, pc, split, None))
                continue
            lay = split.layouts(templates[pc.layer])[pc.name] if split is not None else None
            full = torch.zeros(templates[pc.layer].get_parameter(pc.name).shape, dtype=p.dtype, device=p.device)
            if split is None:
                full = p.grad
            elif lay is None:
                full = p.grad if split.r == 0 else full
            else:
                place(full, p.grad, lay, split.t, split.r)
            parts.append(full.reshape(-1))
            places.append((p, pc, split, lay))
        if not parts:
            continue
        flags = torch.tensor([float(had) for _, had in owners.values()], dtype=parts[0].dtype,
                             device=parts[0].device)
        flat = torch.cat(parts + [flags])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=pg)
        off = 0
        for (p, pc, split, lay), part in zip(places, parts):
            res = flat[off:off + part.numel()]
            off += part.numel()
            if pc.dim is not None:
                k = 0
                for v in _views(p.grad, pc, split):
                    v.copy_(res[k:k + v.numel()].view_as(v))
                    k += v.numel()
            elif split is None or lay is None:
                p.grad = res.view_as(p).clone()
            else:
                whole = res.view(templates[pc.layer].get_parameter(pc.name).shape)
                p.grad = cut(whole, lay, split.t, split.r).clone()
        for (p, _), used in zip(owners.values(), flat[-len(owners):]):
            if not used > 0:       # no holder's forward used it: no gradient, as in single-process training
                p.grad = None


def counted(state: Any, name: str) -> bool:
    """Whether this rank counts parameter `name` of a layer it owns in the global gradient
    norm: always without TP; a split parameter's shard on every TP rank, a whole one on the
    stage's shard-0 rank only."""
    split: Split | None = getattr(state, "split", None)
    return split is None or split.r == 0 or split.dims(state.module)[name] is not None
