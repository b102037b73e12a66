"""State migration between slots: every layer's parameters, buffers and optimizer state
go from one current holder to each new holder that lacks them (point-to-point)."""
from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
from torch import nn

OptFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
SchedFactory = Callable[[torch.optim.Optimizer], Any]
_TAG = 1 << 20


@dataclass
class LayerState:
    """One held layer: its module, its own optimizer and LR scheduler (None for a layer
    without parameters; sched None without a scheduler). One optimizer per layer equals
    one over all parameters for element-wise optimizers (SGD, momentum, Adam) and makes a
    layer's state movable; so does one scheduler per optimizer for a schedule of the
    iteration count. split: the layer's shard when a tensor-parallel stage holds it
    (runtime.tensor_parallel.Split; None: the whole layer)."""

    module: nn.Module
    opt: torch.optim.Optimizer | None
    sched: Any = None
    split: Any = None

    def pack(self) -> dict:
        return {"module": self.module.state_dict(),
                "opt": self.opt.state_dict() if self.opt is not None else None,
                "sched": self.sched.state_dict() if self.sched is not None else None}


def new_layer(template: nn.Module, device: torch.device, make_opt: OptFactory,
              state: dict | None = None, make_sched: SchedFactory | None = None) -> LayerState:
    """A layer built from `template` (possibly on the meta device) on `device`; loads
    `state` (from LayerState.pack) when given, else copies the template's values. The
    scheduler is made before the optimizer's state is loaded, then loaded itself (the
    order torch's LR schedulers resume in)."""
    if state is None:
        mod = copy.deepcopy(template).to(device)
    else:
        mod = retie(copy.deepcopy(template).to_empty(device=device), template)
        mod.load_state_dict(state["module"])
        for (m, name), (tm, _) in zip(constant_buffers(mod), constant_buffers(template)):
            value = tm._buffers[name]
            if value.is_meta:
                raise ValueError(f"non-persistent buffer {name!r} of {type(tm).__name__}: the template holds no value "
                                 "for it (make templates with replan.meta_template)")
            m._buffers[name] = value.detach().to(device).clone()
    params = list(mod.parameters())
    opt = make_opt(params) if params else None
    sched = make_sched(opt) if opt is not None and make_sched is not None else None
    if opt is not None and state is not None and state["opt"] is not None:
        opt.load_state_dict(state["opt"])
        _keep_state_dtypes(opt, state["opt"])
    if sched is not None and state is not None:
        if state.get("sched") is None:
            raise ValueError("layer state has no scheduler state, the job has a scheduler (make_scheduler)")
        sched.load_state_dict(state["sched"])
    return LayerState(mod, opt, sched)


def _keep_state_dtypes(opt: torch.optim.Optimizer, saved: dict) -> None:
    """Give each optimizer state tensor back the dtype it was saved in: torch's
    Optimizer.load_state_dict casts floating state to its parameter's dtype (NAdam's float32
    mu_product became float64), and the next steps then round differently from an unmoved
    optimizer's (1e-11 .. 1e-10 off in float64 after a migration, a resume or a TP split)."""
    params = [q for g in opt.param_groups for q in g["params"]]
    index = [i for g in saved["param_groups"] for i in g["params"]]
    for i, q in zip(index, params):
        for key, value in saved["state"].get(i, {}).items():
            now = opt.state[q].get(key)
            if torch.is_tensor(value) and torch.is_tensor(now) and now.dtype != value.dtype:
                opt.state[q][key] = now.to(value.dtype)


def constant_buffers(module: nn.Module) -> list[tuple[nn.Module, str]]:
    """(submodule, name) of every non-persistent buffer of `module` (a causal mask, a fixed
    positional table: not in state_dict, so neither migrations nor checkpoints carry it), in
    module order."""
    return [(m, name) for m in module.modules() for name in sorted(m._non_persistent_buffers_set)
            if m._buffers.get(name) is not None]


def retie(module: nn.Module, like: nn.Module) -> nn.Module:
    """`module` (a copy of `like` moved across devices) with its parameters tied where `like`'s
    are: Module.to / to_empty between the meta device and another give each submodule its own
    new parameters, which unties a pair."""
    first: dict[int, str] = {}
    for name, q in like.named_parameters(remove_duplicate=False):
        if id(q) in first:
            owner, _, leaf = name.rpartition(".")
            setattr(module.get_submodule(owner) if owner else module, leaf, module.get_parameter(first[id(q)]))
        first.setdefault(id(q), name)
    return module


def meta_template(block: nn.Module) -> nn.Module:
    """A copy of `block` on the meta device (shapes only, for building layers elsewhere) that
    keeps its parameters tied where the block's are (retie: a migrated block with a tied pair
    had one parameter more than its optimizer state) and the values of its non-persistent
    buffers, on the CPU: new_layer restores them after loading a state (they are constants of
    the model, the same in every copy)."""
    out = retie(copy.deepcopy(block).to("meta"), block)
    for (m, name), (src, _) in zip(constant_buffers(out), constant_buffers(block)):
        m._buffers[name] = src._buffers[name].detach().to("cpu").clone()
    return out


def send_obj(obj: object, dst: int, device: torch.device) -> None:
    """Send a picklable object of tensors to rank dst (length, then bytes)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = torch.frombuffer(bytearray(buf.getbuffer()), dtype=torch.uint8).to(device)
    dist.send(torch.tensor([data.numel()], dtype=torch.int64, device=device), dst=dst, tag=_TAG)
    dist.send(data, dst=dst, tag=_TAG + 1)


def recv_obj(src: int, device: torch.device) -> object:
    """Receive what send_obj sent from rank src; tensors land on `device`."""
    n = torch.empty(1, dtype=torch.int64, device=device)
    dist.recv(n, src=src, tag=_TAG)
    data = torch.empty(int(n.item()), dtype=torch.uint8, device=device)
    dist.recv(data, src=src, tag=_TAG + 1)
    return torch.load(io.BytesIO(data.cpu().numpy().tobytes()), map_location=device, weights_only=True)


def transfers(old: Sequence[tuple[int, ...]], new: Sequence[tuple[int, ...]]
              ) -> dict[tuple[int, int], list[int]]:
    """(source rank, destination rank) -> layers to send: each layer from its first
    current holder to every new holder that does not hold it now. Sorted by pair."""
    out: dict[tuple[int, int], list[int]] = {}
    for layer, (have, want) in enumerate(zip(old, new)):
        for dst in want:
            if dst not in have:
                out.setdefault((have[0], dst), []).append(layer)
    return dict(sorted(out.items()))


def migrate(rank: int, held: dict[int, LayerState], old: Sequence[tuple[int, ...]],
            new: Sequence[tuple[int, ...]], templates: Sequence[nn.Module], make_opt: OptFactory,
            device: torch.device, make_sched: SchedFactory | None = None) -> dict[int, LayerState]:
    """Move layer states from the `old` holders to the `new` ones (per layer, rank tuples)
    and return what this rank holds afterwards. Every rank calls this with the same
    arguments but its own `held`; blocking sends in one global order cannot deadlock.
    A rank leaving the plan sends what it is the first holder of before it drops it."""
    got: dict[int, LayerState] = {}
    for (src, dst), layers in transfers(old, new).items():
        if rank == src:
            send_obj({i: held[i].pack() for i in layers}, dst, device)
        elif rank == dst:
            states = recv_obj(src, device)
            for i in layers:
                got[i] = new_layer(templates[i], device, make_opt, states[i], make_sched)
    keep = {i: s for i, s in held.items() if rank in new[i]}
    keep.update(got)
    return keep
