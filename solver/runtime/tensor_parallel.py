"""Tensor-parallel (TP) stages: the Megatron-style split of a stage's nn.Linear layers over
its t ranks, the autograd Functions carrying the TP collectives, and the conversions of a
layer's state (module, optimizer, scheduler) between full and sharded.

What is split (docs/TRAIN.md, "Tensor-parallel stages"): the stage's leaf modules in
execution order (a block is an nn.Linear, a module without parameters, or an nn.Sequential
of those, recursively). An nn.Linear followed, through element-wise activations only
(`ELEMENTWISE`), by another nn.Linear forms a pair: the first is column-parallel (weight and
bias rows split: each rank computes out/t features), the activations run on the shards, the
second is row-parallel (weight columns split, its partial outputs SUM-all-reduced in the
forward, bias added once after). An nn.Linear without a partner is column-parallel with
its output all-gathered. The input of every column-parallel layer has its gradient
SUM-all-reduced in the backward. A `SelfAttention` (nn.MultiheadAttention as a block) is
split by heads: each rank holds num_heads / t heads' query, key and value projection rows
and out_proj's matching columns, its input's gradient all-reduced in backward and its
partial output in forward (TPSelfAttention). Every other module (activations outside a pair,
dropout, any module without parameters) runs on the replicated activation on every rank:
exact, as each rank computes the same values. A block with parameters elsewhere (LayerNorm,
Conv2d, a custom module), an nn.Linear whose out_features t does not divide, or a
SelfAttention whose heads t does not divide or with dropout is refused: `problems` names it.

Shard r of t of a split tensor follows its Layout (dim, groups): the r-th of t equal slices
of each of its `groups` blocks along dim (groups 1 for a Linear's weight and bias; 3 for an
attention's in_proj, whose query, key and value blocks are each cut by heads).
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

ELEMENTWISE = (nn.Tanh, nn.ReLU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Identity,
               nn.Softplus, nn.Hardtanh, nn.ReLU6, nn.Mish)
"""Modules that act on each feature alone, so they may run on a column-parallel shard."""

DEGREES = (1, 2, 4, 8)
COLLECTIVES_OFF: contextvars.ContextVar[bool] = contextvars.ContextVar("dynpar_tp_collectives_off", default=False)
"""True inside `local_only`: TP layers run without their collectives. A context variable, so
it is scoped to the current thread / task and restored on exit, not process-wide state."""


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """TP layers run inside skip their collectives in forward, and in the backward of the
    graph built inside (the pipeline's shape inference on the leader: shapes right, values
    dropped). Scoped by `COLLECTIVES_OFF` (a contextvars.ContextVar): other threads and
    the code after the block see the collectives on."""
    token = COLLECTIVES_OFF.set(True)
    try:
        yield
    finally:
        COLLECTIVES_OFF.reset(token)


def _skip(t: torch.Tensor, local: bool) -> bool:
    return local or t.is_meta


@dataclass
class CollectiveClock:
    """What this rank's TP layers spent in their collectives since the last `take`: how many
    (all-reduces and all-gathers) and their wall seconds, waits for the stage's other ranks
    included (what a TP collective costs the iteration). One per process, given to the layers
    by `attach` (Split.clock); the training loop takes it once per iteration."""

    count: int = 0
    seconds: float = 0.0

    def add(self, t0: float) -> None:
        """One collective that started at perf_counter `t0` has just ended."""
        self.count += 1
        self.seconds += time.perf_counter() - t0

    def take(self) -> tuple[int, float]:
        """(count, seconds) since the last take; resets both."""
        out = (self.count, self.seconds)
        self.count, self.seconds = 0, 0.0
        return out


def _timed(clock: CollectiveClock | None):
    """perf_counter now, for clock.add after the collective (None: not timed)."""
    return time.perf_counter() if clock is not None else 0.0


class _CopyToTP(torch.autograd.Function):
    """Identity forward; SUM all-reduce of the gradient over the TP group in backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, pg: Any, clock: CollectiveClock | None) -> torch.Tensor:
        ctx.pg, ctx.clock, ctx.local = pg, clock, COLLECTIVES_OFF.get()
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if _skip(g, ctx.local):
            return g, None, None
        g = g.contiguous().clone()
        t0 = _timed(ctx.clock)
        dist.all_reduce(g, op=dist.ReduceOp.SUM, group=ctx.pg)
        if ctx.clock is not None:
            ctx.clock.add(t0)
        return g, None, None


class _ReduceFromTP(torch.autograd.Function):
    """SUM all-reduce over the TP group in forward; identity backward."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, pg: Any, clock: CollectiveClock | None) -> torch.Tensor:
        y = y.contiguous().clone()
        if not _skip(y, COLLECTIVES_OFF.get()):
            t0 = _timed(clock)
            dist.all_reduce(y, op=dist.ReduceOp.SUM, group=pg)
            if clock is not None:
                clock.add(t0)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return g, None, None


class _GatherFromTP(torch.autograd.Function):
    """All-gather along the last dimension in forward (rank order); this rank's slice of
    the gradient in backward."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, pg: Any, t: int, r: int, clock: CollectiveClock | None) -> torch.Tensor:
        ctx.r, ctx.n = r, y.shape[-1]
        y = y.contiguous()
        if _skip(y, COLLECTIVES_OFF.get()):
            return torch.cat([y] * t, dim=-1)
        parts = [torch.empty_like(y) for _ in range(t)]
        t0 = _timed(clock)
        dist.all_gather(parts, y, group=pg)
        if clock is not None:
            clock.add(t0)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return g.narrow(-1, ctx.r * ctx.n, ctx.n).contiguous(), None, None, None, None


class _Shard(nn.Module):
    """A module holding shard r of t of a layer: its TP process group `pg` and the rank's
    CollectiveClock, both set by `attach` and shared, not copied, by deepcopy (a process
    group does not deep-copy)."""

    def __init__(self, r: int, t: int) -> None:
        super().__init__()
        self.r, self.t = r, t
        self.pg: Any = None
        self.clock: CollectiveClock | None = None

    def __deepcopy__(self, memo: dict) -> _Shard:
        pg, clock, self.pg, self.clock = self.pg, self.clock, None, None
        try:
            out = copy.copy(self)
            out.__dict__ = copy.deepcopy(self.__dict__, memo)
        finally:
            self.pg, self.clock = pg, clock
        out.pg, out.clock = pg, clock
        return out


class TPLinear(_Shard):
    """Shard r of t of an nn.Linear. kind "col": weight rows and bias split, input gradient
    all-reduced; "colgather": the same with the output all-gathered; "row": weight columns
    split, output all-reduced, then the whole bias added. Parameter names are nn.Linear's."""

    def __init__(self, kind: str, weight: torch.Tensor, bias: torch.Tensor | None, r: int, t: int) -> None:
        super().__init__(r, t)
        self.kind = kind
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "row":
            return _ReduceFromTP.apply(F.linear(x, self.weight), self.pg, self.clock) + (
                self.bias if self.bias is not None else 0.0)
        y = F.linear(_CopyToTP.apply(x, self.pg, self.clock), self.weight, self.bias)
        return _GatherFromTP.apply(y, self.pg, self.t, self.r, self.clock) if self.kind == "colgather" else y

    def extra_repr(self) -> str:
        return f"{self.kind}, shard {self.r} of {self.t}, weight {tuple(self.weight.shape)}"


class SelfAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention as a pipeline block: self-attention of a (batch, sequence,
    embed_dim) input without a mask, returning the attention output alone (batch_first).
    A TP stage splits it by heads (TPSelfAttention); its parameters are nn.MultiheadAttention's."""

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0,
                 device: Any = None, dtype: torch.dtype | None = None) -> None:
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=bias, batch_first=True,
                         device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """x: (batch, sequence, embed_dim) -> the same shape (contiguous: nn.MultiheadAttention
        returns a transposed view, which a pipeline boundary cannot send)."""
        return super().forward(x, x, x, need_weights=False)[0].contiguous()


class _OutProj(nn.Module):
    """The row-parallel shard of an attention's out_proj: weight (embed_dim, embed_dim / t), bias whole."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if bias is not None else None


class TPSelfAttention(_Shard):
    """Shard r of t of a SelfAttention, split by heads (Megatron's attention): this rank's
    num_heads / t heads, h_r = [r h / t, (r + 1) h / t). in_proj_weight / in_proj_bias hold the
    rows of those heads' query, key and value projections, [q_r; k_r; v_r] (each embed_dim / t
    rows: the whole's three blocks each cut in t, layout (0, 3)); the input's gradient is
    all-reduced in backward (as a column-parallel Linear's); out_proj is row-parallel (its
    weight's columns of those heads, output all-reduced in forward, its bias added once).
    Parameter names are nn.MultiheadAttention's."""

    def __init__(self, in_w: torch.Tensor, in_b: torch.Tensor | None, out_w: torch.Tensor,
                 out_b: torch.Tensor | None, heads: int, r: int, t: int) -> None:
        super().__init__(r, t)
        self.heads = heads
        self.in_proj_weight = nn.Parameter(in_w)
        self.in_proj_bias = nn.Parameter(in_b) if in_b is not None else None
        self.out_proj = _OutProj(out_w, out_b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, sequence, embed_dim), whole on every rank -> the same shape, whole."""
        qkv = F.linear(_CopyToTP.apply(x, self.pg, self.clock), self.in_proj_weight, self.in_proj_bias)
        n, s, _ = qkv.shape
        q, k, v = (z.reshape(n, s, self.heads, -1).transpose(1, 2) for z in qkv.chunk(3, dim=-1))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, s, -1)
        y = _ReduceFromTP.apply(F.linear(o, self.out_proj.weight), self.pg, self.clock)
        return y + self.out_proj.bias if self.out_proj.bias is not None else y

    def extra_repr(self) -> str:
        return f"heads {self.heads}, shard {self.r} of {self.t}, in_proj {tuple(self.in_proj_weight.shape)}"


def leaves(block: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    """The block's leaf modules in execution order: (dotted path inside the block, module);
    an nn.Sequential is opened, any other module is one leaf."""
    if isinstance(block, nn.Sequential):
        return [x for name, m in block.named_children() for x in leaves(m, f"{prefix}{name}.")]
    return [(prefix[:-1] if prefix else "", block)]


def problems(blocks: Sequence[nn.Module], first: int, t: int) -> list[str]:
    """Why blocks[k] (layer first + k) cannot be split over t ranks, one line per layer ([] when all can)."""
    out = []
    for k, b in enumerate(blocks):
        first_name: dict[int, str] = {}
        for name, q in b.named_parameters(remove_duplicate=False):
            if id(q) in first_name:
                out.append(f"layer {first + k}: parameters {first_name[id(q)]} and {name} are one tensor (tied); "
                           "TP would split them apart")
            first_name.setdefault(id(q), name)
        for path, m in leaves(b):
            where = f"layer {first + k}" + (f" ({path})" if path else "")
            if isinstance(m, SelfAttention):
                if m.num_heads % t:
                    out.append(f"{where}: SelfAttention({m.embed_dim}, {m.num_heads} heads): num_heads "
                               f"{m.num_heads} is not a multiple of the TP degree {t}")
                elif m.dropout:
                    out.append(f"{where}: SelfAttention: dropout {m.dropout} (TP splits attention without "
                               "dropout: its masks would differ between the ranks' heads)")
                elif m.bias_k is not None or not m._qkv_same_embed_dim:
                    out.append(f"{where}: SelfAttention: add_bias_kv or kdim / vdim other than embed_dim "
                               "is not split by TP")
            elif isinstance(m, nn.Linear):
                if m.out_features % t:
                    out.append(f"{where}: Linear({m.in_features}, {m.out_features}): out_features "
                               f"{m.out_features} is not a multiple of the TP degree {t}")
            elif any(True for _ in m.parameters()):
                out.append(f"{where}: {type(m).__name__} holds parameters and TP splits nn.Linear "
                           "and tensor_parallel.SelfAttention only (inside nn.Sequential blocks)")
    return out


def degrees_for(blocks: Sequence[nn.Module]) -> tuple[int, ...]:
    """The TP degrees (of DEGREES) at which every block can be split: the runtime's search options."""
    return tuple(t for t in DEGREES if t == 1 or not problems(blocks, 0, t))


def stage_roles(blocks: Sequence[nn.Module]) -> list[dict[str, str]]:
    """Per block of one stage, its nn.Linear leaves' kinds ("col", "row", "colgather") by path."""
    flat = [(k, path, m) for k, b in enumerate(blocks) for path, m in leaves(b)]
    out: list[dict[str, str]] = [{} for _ in blocks]
    i = 0
    while i < len(flat):
        k, path, m = flat[i]
        if isinstance(m, SelfAttention):  # self-contained: input whole, output whole
            out[k][path] = "attn"
        elif isinstance(m, nn.Linear):
            j = i + 1
            while j < len(flat) and isinstance(flat[j][2], ELEMENTWISE):
                j += 1
            if j < len(flat) and isinstance(flat[j][2], nn.Linear):
                out[k][path] = "col"
                out[flat[j][0]][flat[j][1]] = "row"
                i = j + 1
                continue
            out[k][path] = "colgather"
        i += 1
    return out


Layout = tuple[int, int]
"""How a parameter is split: (dim, groups). The tensor is cut along `dim` into `groups` equal
blocks and each block into t equal slices; shard r is the r-th slice of every block, in block
order (groups 1: the r-th of t slices; an attention's in_proj, groups 3: its query, key and
value rows of the rank's heads)."""

_LAYOUTS: dict[str, dict[str, Layout | None]] = {
    "col": {"weight": (0, 1), "bias": (0, 1)}, "colgather": {"weight": (0, 1), "bias": (0, 1)},
    "row": {"weight": (1, 1), "bias": None},
    "attn": {"in_proj_weight": (0, 3), "in_proj_bias": (0, 3), "out_proj.weight": (1, 1), "out_proj.bias": None}}


def cut(v: torch.Tensor, layout: Layout, t: int, r: int) -> torch.Tensor:
    """Shard r of t of the whole tensor `v` under `layout` (a view where groups is 1)."""
    d, g = layout
    if g == 1:
        return v.chunk(t, dim=d)[r]
    return torch.cat([blk.chunk(t, dim=d)[r] for blk in v.chunk(g, dim=d)], dim=d)


def join(parts: Sequence[torch.Tensor], layout: Layout) -> torch.Tensor:
    """The whole tensor from its t shards (in shard order) under `layout`: cut's inverse."""
    d, g = layout
    if g == 1:
        return torch.cat(list(parts), dim=d)
    blocks = [p.chunk(g, dim=d) for p in parts]
    return torch.cat([b[j] for j in range(g) for b in blocks], dim=d)


def place(whole: torch.Tensor, shard: torch.Tensor, layout: Layout, t: int, r: int) -> None:
    """Copy shard r of t into its slices of `whole` (in place)."""
    d, g = layout
    n = shard.shape[d] // g
    for j in range(g):
        whole.narrow(d, (j * t + r) * n, n).copy_(shard.narrow(d, j * n, n))


@dataclass
class Split:
    """How one layer is held by one TP rank: shard r of t over `ranks` (the stage's ranks,
    leader first; process group `pg`), its Linear leaves' kinds by path (`roles`). r is the
    rank's position among `ranks` sorted (its rank in `pg`, the order all_gather returns);
    `clock`: the rank's CollectiveClock (None: not timed)."""

    layer: int
    r: int
    t: int
    ranks: tuple[int, ...]
    roles: dict[str, str]
    pg: Any = field(default=None, repr=False, compare=False)
    clock: CollectiveClock | None = field(default=None, repr=False, compare=False)

    def layouts(self, template: nn.Module) -> dict[str, Layout | None]:
        """Parameter name -> its Layout (None: whole on every rank); `template` the whole
        block or its shard (the same names)."""
        out: dict[str, Layout | None] = {}
        for name, _ in template.named_parameters():
            lay = None
            for path, kind in self.roles.items():
                if not path or name.startswith(path + "."):
                    lay = _LAYOUTS[kind].get(name[len(path) + 1:] if path else name)
                    break
            out[name] = lay
        return out

    def dims(self, template: nn.Module) -> dict[str, int | None]:
        """Parameter name -> the dimension it is split along (None: whole on every rank)."""
        return {n: (lay[0] if lay is not None else None) for n, lay in self.layouts(template).items()}


def shard_template(template: nn.Module, split: Split) -> nn.Module:
    """The block with each split nn.Linear replaced by its TPLinear and each SelfAttention by
    its TPSelfAttention (parameters of the shard's shapes, on the template's device, e.g. meta,
    frozen where the template's are)."""
    block = copy.deepcopy(template)
    t, r = split.t, split.r

    def part(v: torch.Tensor | None, lay: Layout | None) -> torch.Tensor | None:
        if v is None:
            return None
        v = v.detach()
        return (cut(v, lay, t, r) if lay is not None else v).clone()
    for path, kind in split.roles.items():
        sub = block.get_submodule(path) if path else block
        lay = _LAYOUTS[kind]
        new: nn.Module
        if kind == "attn":
            new = TPSelfAttention(part(sub.in_proj_weight, lay["in_proj_weight"]),
                                  part(sub.in_proj_bias, lay["in_proj_bias"]),
                                  part(sub.out_proj.weight, lay["out_proj.weight"]),
                                  part(sub.out_proj.bias, lay["out_proj.bias"]), sub.num_heads // t, r, t)
        else:
            new = TPLinear(kind, part(sub.weight, lay["weight"]), part(sub.bias, lay["bias"]), r, t)
        frozen = {n for n, q in sub.named_parameters() if not q.requires_grad}
        for n, q in new.named_parameters():    # a frozen parameter's shard stays frozen
            q.requires_grad_(n not in frozen)
        if not path:
            return new
        parent, _, name = path.rpartition(".")
        setattr(block.get_submodule(parent) if parent else block, name, new)
    return block


def attach(module: nn.Module, pg: Any, clock: CollectiveClock | None = None) -> None:
    """Give every shard (TPLinear, TPSelfAttention) of `module` its process group and the
    rank's collective clock (None: its collectives are not timed)."""
    for m in module.modules():
        if isinstance(m, _Shard):
            m.pg, m.clock = pg, clock


def collective_counts(blocks: Sequence[nn.Module]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward, backward) per block of the whole model: how many TP collectives it runs per
    micro-batch and pass when split (stage_roles over all the blocks, as one stage): a
    row-parallel Linear one all-reduce forward; a column-parallel one the all-reduce of its
    input's gradient backward, none for the model's first block (its input, the data, needs
    no gradient); a gathered one an all-gather forward and that all-reduce backward; a
    SelfAttention one of each (its out_proj's output forward, its input's gradient backward).
    Per block, so a stage cut inside a pair is priced as if the pair were whole (there the
    runtime gathers the first Linear's output: one collective more)."""
    fwd, bwd = [0.0] * len(blocks), [0.0] * len(blocks)
    for k, roles in enumerate(stage_roles(blocks)):
        for kind in roles.values():
            if kind in ("row", "colgather", "attn"):
                fwd[k] += 1.0
            if kind in ("col", "colgather", "attn") and k > 0:
                bwd[k] += 1.0
    return tuple(fwd), tuple(bwd)


def _opt_names(template: nn.Module) -> list[str]:
    return [n for n, _ in template.named_parameters()]


def slice_pack(pack: dict, template: nn.Module, split: Split) -> dict:
    """A full layer's LayerState.pack (runtime.replan) cut to shard split.r: split
    parameters and their optimizer-state tensors of the parameter's shape sliced."""
    lays = split.layouts(template)
    shapes = {n: tuple(p.shape) for n, p in template.named_parameters()}
    names = _opt_names(template)

    def mine(name: str, v: Any) -> Any:
        lay = lays.get(name)
        if lay is None or not isinstance(v, torch.Tensor) or tuple(v.shape) != shapes[name]:
            return v
        return cut(v, lay, split.t, split.r).clone()

    module = {k: mine(k, v) for k, v in pack["module"].items()}
    opt = pack["opt"]
    if opt is not None:
        opt = {**opt, "state": {i: {k: mine(names[int(i)], v) for k, v in st.items()} for i, st in opt["state"].items()}}
    return {**pack, "module": module, "opt": opt}


def gather_pack(pack: dict, template: nn.Module, split: Split) -> dict:
    """The full layer's pack from this rank's shard pack: collective over split.pg (every
    rank of the stage calls it for the same layers in the same order); `template`: the full block."""
    lays = split.layouts(template)
    shapes = {n: tuple(p.shape) for n, p in template.named_parameters()}
    names = _opt_names(template)

    def whole(name: str, v: Any) -> Any:
        lay = lays.get(name)
        if lay is None or not isinstance(v, torch.Tensor) or v.dim() != len(shapes[name]) or \
                tuple(v.shape) == shapes[name]:
            return v
        parts = [torch.empty_like(v) for _ in range(split.t)]
        dist.all_gather(parts, v.contiguous(), group=split.pg)
        return join(parts, lay)

    module = {k: whole(k, v) for k, v in pack["module"].items()}
    opt = pack["opt"]
    if opt is not None:
        opt = {**opt, "state": {i: {k: whole(names[int(i)], v) for k, v in st.items()}
                                for i, st in sorted(opt["state"].items(), key=lambda kv: int(kv[0]))}}
    return {**pack, "module": module, "opt": opt}


def shard_layer(state: Any, template: nn.Module, split: Split, device: torch.device, make_opt: Any,
                make_sched: Any = None) -> Any:
    """The whole layer `state` (replan.LayerState) as shard split.r: module, optimizer and
    scheduler rebuilt from the sliced pack (local, no communication)."""
    from .replan import new_layer
    out = new_layer(shard_template(template, split), device, make_opt, slice_pack(state.pack(), template, split),
                    make_sched)
    attach(out.module, split.pg, split.clock)
    out.split = split
    return out


def unshard_layer(state: Any, template: nn.Module, device: torch.device, make_opt: Any,
                  make_sched: Any = None) -> Any:
    """The whole layer from this rank's shard `state` (collective over its stage's ranks)."""
    from .replan import new_layer
    return new_layer(template, device, make_opt, gather_pack(state.pack(), template, state.split), make_sched)
