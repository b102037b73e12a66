"""What a training job is made of (`TrainSpec`), loaded from a `MODULE:FACTORY` string, and
the checks that refuse model semantics the runtime would get silently wrong.

The factory is called with no argument in every process and returns a TrainSpec (or the
tuple (model, loss, make_optimizer, data)):
- model: an nn.Sequential, or a module with a `pipeline_blocks()` method returning the
  blocks in execution order (each block's output is the next block's only input);
- loss: callable (output, target) -> mean loss over the micro-batch: the mean of a per-sample
  loss, since the runtime weighs micro-batches by their sample counts (check_loss refuses a
  sum, or a token mean over samples with different numbers of counted tokens);
- make_optimizer: callable (iterable of parameters) -> torch.optim.Optimizer, element-wise
  (SGD, momentum, Adam: the runtime keeps one optimizer per block), stepped once per iteration
  with no closure (check_optimizer);
- data: an object with `get(i) -> (x, y)` giving global batch i (TensorBatches), or a
  map-style dataset (`__len__`, `__getitem__(j) -> (x_j, y_j)`); batch i is then the samples
  (i*B .. i*B+B-1) mod len, and each process reads only the rows of its own group.
Optional training-loop features (TrainSpec fields; the 4-tuple form has none of them):
- clip_norm: gradient clipping to this global L2 norm over all parameters of the model,
  all stages and groups together (torch.nn.utils.clip_grad_norm_ on the whole model);
- make_scheduler: callable (optimizer) -> torch.optim.lr_scheduler.LRScheduler, stepped once
  per iteration after the optimizer step. The runtime keeps one optimizer (and so one
  scheduler) per block; a schedule that depends only on the iteration count (StepLR,
  LambdaLR, cosine, warm-up...) is then the same for every block. ReduceLROnPlateau (driven
  by a metric) is refused;
- autocast: None (full precision) or torch.bfloat16 / torch.float16: forward passes and
  the loss run under torch.autocast(device type, dtype); parameters, gradients and the
  optimizer stay in the model's dtype.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils.data import TensorDataset

from ..errors import DynparError
from .seeding import seed_dropout


class SpecError(DynparError, ValueError):
    """The factory, the model or the data cannot be trained correctly by the runtime."""


@dataclass
class TrainSpec:
    """model, loss, make_optimizer, data: see the module docstring."""

    model: nn.Module
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    data: Any
    clip_norm: float | None = None
    make_scheduler: Callable[[torch.optim.Optimizer], Any] | None = None
    autocast: torch.dtype | None = None

    def check(self) -> "TrainSpec":
        """SpecError naming the field when an optional feature is set to what the runtime
        cannot honour; returns self."""
        if self.clip_norm is not None and not (float(self.clip_norm) > 0):
            raise SpecError(f"clip_norm: expected a positive norm or None, got {self.clip_norm!r}")
        if self.autocast not in (None, torch.bfloat16, torch.float16):
            raise SpecError(f"autocast: expected None, torch.bfloat16 or torch.float16, got {self.autocast!r}")
        if self.make_scheduler is not None:
            probe = self.make_optimizer([nn.Parameter(torch.zeros(1))])
            sched = self.make_scheduler(probe)
            if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau):
                raise SpecError("make_scheduler: ReduceLROnPlateau steps on a metric, not once per iteration; "
                                "use a schedule of the iteration count (StepLR, LambdaLR, ...)")
            if not callable(getattr(sched, "step", None)) or not callable(getattr(sched, "state_dict", None)):
                raise SpecError(f"make_scheduler: expected an LRScheduler (step, state_dict), got "
                                f"{type(sched).__name__}")
        return self

    def autocast_context(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The forward passes' context: torch.autocast when `autocast` is set."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.autocast)


def factory_of(ref: str) -> Any:
    """The callable FACTORY of `MODULE:FACTORY`, imported, not called (SpecError naming the part;
    an error raised while importing the module counts as not importable)."""
    mod_name, sep, attr = (x.strip() for x in ref.partition(":"))
    if not sep or not mod_name or not attr:
        raise SpecError(f"--model: expected MODULE:FACTORY, got {ref!r}")
    try:
        module = importlib.import_module(mod_name)
    except Exception as e:  # ImportError, or the module's own error while importing
        why = " ".join(str(e).split()) or type(e).__name__
        raise SpecError(f"--model: expected MODULE:FACTORY with an importable MODULE, got {ref!r} "
                        f"(cannot import {mod_name!r}: {why})") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise SpecError(f"--model: expected MODULE:FACTORY with FACTORY a callable of MODULE, got {ref!r} "
                        f"(module {mod_name!r} has no callable {attr!r})")
    return fn


def load_factory(ref: str) -> TrainSpec:
    """Import `MODULE:FACTORY`, call it and return its TrainSpec (SpecError naming the part; an
    error the factory raises is one, naming it)."""
    fn = factory_of(ref)
    try:
        out = fn()
    except Exception as e:
        raise SpecError(f"--model: {ref.strip()}: the factory raised {error_line(e)}") from None
    if isinstance(out, TrainSpec):
        return out.check()
    if isinstance(out, tuple) and len(out) == 4:
        return TrainSpec(*out)
    raise SpecError(f"--model: {ref} returned {type(out).__name__}; expected a TrainSpec or "
                    "(model, loss, make_optimizer, data)")


def listed_blocks(model: nn.Module) -> list[nn.Module]:
    """The pipeline blocks `model` lists, not copied: an nn.Sequential's children or
    `model.pipeline_blocks()` (SpecError when it lists none or is neither)."""
    if isinstance(model, nn.Sequential):
        blocks = list(model)
    elif callable(getattr(model, "pipeline_blocks", None)):
        blocks = list(model.pipeline_blocks())
    else:
        raise SpecError(f"model: expected an nn.Sequential or a module with pipeline_blocks(), "
                        f"got {type(model).__name__}")
    if not blocks:
        raise SpecError("model: no pipeline block")
    return blocks


def check_layer_count(num_blocks: int, workload_name: str, num_layers: int) -> None:
    """SpecError unless the model's pipeline blocks are the workload's layers, one for one."""
    if num_blocks != num_layers:
        raise SpecError(f"model: {num_blocks} pipeline blocks, the instance's workload {workload_name!r} has "
                        f"{num_layers} layers")


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The pipeline blocks of `model`, deep-copied (the caller's model is never touched),
    with every nn.Dropout seeded per sample (runtime.seeding), and a copy of a leaf input for
    a block with an in-place module (`_copy_leaf_input`)."""
    blocks = listed_blocks(model)
    check_semantics(blocks)
    out = copy.deepcopy(blocks)  # the caller's model is never touched
    seed_dropout(out)
    for b in out:
        if any(getattr(m, "inplace", False) is True for m in b.modules()):
            b.register_forward_pre_hook(_copy_leaf_input)
    return out


def _copy_leaf_input(block: nn.Module, args: tuple) -> tuple | None:
    """A block with an in-place module gets a copy of an input that is a leaf requiring grad
    (a pipeline stage's received activation, a profiled block's input: autograd refuses an
    in-place change of such a leaf; inside one process the input is another block's output and
    nothing is copied). The same values, so the same training."""
    if args and isinstance(args[0], torch.Tensor) and args[0].is_leaf and args[0].requires_grad:
        return (args[0].clone(), *args[1:])
    return None


def check_semantics(blocks: Sequence[nn.Module]) -> None:
    """Refuse what the runtime would train wrong: parameters shared by two blocks (tied
    weights), batch normalisation (statistics per group, not per global batch), running
    statistics of any norm (InstanceNorm's track_running_stats: updated per micro-batch and
    per recomputation), nn.Embedding with max_norm (it rescales the rows each group sees, so
    the replicas drift apart), and randomness runtime.seeding does not draw per sample:
    dropout modules other than nn.Dropout, RReLU, nn.MultiheadAttention's and the recurrent
    modules' own dropout. Randomness drawn by functional calls inside a block (F.dropout)
    cannot be seen: don't."""
    owner: dict[int, str] = {}
    tied: list[str] = []
    for i, b in enumerate(blocks):
        for name, p in b.named_parameters(remove_duplicate=False):
            where = f"block {i} {name}"
            if id(p) in owner and not owner[id(p)].startswith(f"block {i} "):
                tied.append(f"{owner[id(p)]} = {where}")
            owner.setdefault(id(p), where)
    if tied:
        raise SpecError("model: parameters shared across pipeline blocks are not supported "
                        f"(their gradients would not be summed): {'; '.join(tied)}")
    bn = found(blocks, lambda m: isinstance(m, nn.modules.batchnorm._BatchNorm))
    if bn:
        raise SpecError("model: BatchNorm is not supported (its statistics would be per group, "
                        f"not per global batch); use LayerNorm or GroupNorm: {', '.join(bn)}")
    stats = found(blocks, lambda m: isinstance(m, nn.modules.batchnorm._NormBase) and m.track_running_stats)
    if stats:
        raise SpecError("model: running statistics (track_running_stats) are not supported (they would be updated "
                        f"per micro-batch, not per global batch): {', '.join(stats)}")
    renorm = found(blocks, lambda m: isinstance(m, nn.Embedding) and m.max_norm is not None)
    if renorm:
        raise SpecError("model: nn.Embedding with max_norm is not supported (each group would rescale only the rows "
                        f"it sees, and the replicas would drift apart): {', '.join(renorm)}")
    drop = found(blocks, lambda m: (isinstance(m, nn.modules.dropout._DropoutNd) and type(m) is not nn.Dropout
                                    and m.p > 0) or (isinstance(m, nn.RReLU) and m.lower != m.upper)
                 or (isinstance(m, (nn.MultiheadAttention, nn.RNNBase)) and m.dropout > 0))
    if drop:
        raise SpecError("model: only nn.Dropout is seeded per sample (runtime.seeding); other random modules "
                        f"would draw what depends on the plan: {', '.join(drop)}")


def found(blocks: Sequence[nn.Module], test: Callable[[nn.Module], bool]) -> list[str]:
    """'block i path (Type)' of every module of `blocks` that passes `test`."""
    return [f"block {i} {n or type(m).__name__} ({type(m).__name__})" for i, b in enumerate(blocks)
            for n, m in b.named_modules() if test(m)]


ELEMENTWISE_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta",
                          "ASGD", "Rprop")
"""torch.optim optimizers whose update of each element reads only that element's gradient and
state: a tensor-parallel shard's update then equals the whole parameter's. Others (Adafactor's
row and column statistics, LBFGS) would update a shard differently."""


def tp_refusal(make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]) -> str | None:
    """Why tensor parallelism cannot train with this optimizer (None: it can): the optimizer
    must be one of ELEMENTWISE_OPTIMIZERS (an instance of that torch.optim class)."""
    opt = make_optimizer([nn.Parameter(torch.zeros(2, 2))])
    if any(type(opt) is getattr(torch.optim, n, None) for n in ELEMENTWISE_OPTIMIZERS):
        return None
    return (f"optimizer {type(opt).__name__} is not element-wise (TP shards a parameter, and its update must "
            f"not read other elements; element-wise: {', '.join(ELEMENTWISE_OPTIMIZERS)})")


def error_line(e: BaseException) -> str:
    """'Type: message' of an error on one line (its whitespace collapsed)."""
    return f"{type(e).__name__}: {' '.join(str(e).split()) or 'no message'}"


def check_optimizer(make_optimizer: Callable[[Iterable[nn.Parameter]], Any]) -> None:
    """SpecError naming make_optimizer unless it builds, on a probe parameter, an optimizer with
    step, zero_grad, state_dict and load_state_dict whose step() runs with no closure (the
    runtime steps each block's optimizer once per iteration that way; LBFGS, which needs a
    closure, is refused here rather than in a worker)."""
    probe = nn.Parameter(torch.zeros(2))
    try:
        opt = make_optimizer([probe])
    except Exception as e:
        raise SpecError(f"make_optimizer: fails on a probe parameter: {error_line(e)}") from None
    missing = [m for m in ("step", "zero_grad", "state_dict", "load_state_dict") if not callable(getattr(opt, m, None))]
    if missing:
        raise SpecError(f"make_optimizer: expected a torch.optim.Optimizer (step, zero_grad, state_dict, "
                        f"load_state_dict), got {type(opt).__name__} without {', '.join(missing)}")
    probe.grad = torch.zeros_like(probe)
    try:
        opt.step()
    except Exception as e:
        raise SpecError(f"make_optimizer: {type(opt).__name__}.step() fails when called with no closure, as the "
                        f"runtime calls it once per iteration: {error_line(e)}") from None


LOSS_RTOL = {torch.float64: 1e-9, torch.float32: 1e-5}
"""Relative tolerance of check_loss's per-sample mean test by the output's dtype (2e-2 for
16-bit outputs and autocast: the batched and one-sample passes round differently)."""


def check_loss(blocks: Sequence[nn.Module], loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               data: "Batches", samples: int = 4, autocast: torch.dtype | None = None) -> None:
    """SpecError naming `loss` unless, on the first `samples` samples of batch 0 (a forward
    pass on CPU, on private copies in eval mode, under torch.autocast with `autocast` when
    given), loss(output, target) is a real scalar tensor equal to the mean of the samples' own
    losses (within LOSS_RTOL).

    The runtime splits a batch into groups' shares and micro-batches of sizes the plan picks
    and weighs each micro-batch's loss by its sample count, which is single-process training
    only for a per-sample mean. A loss that weighs samples otherwise (a sum, or a token mean
    where samples have different numbers of counted tokens, e.g. ignore_index padding) would
    train differently under every plan, so it is refused here."""
    if not callable(loss):
        raise SpecError(f"loss: expected a callable (output, target) -> mean loss over the micro-batch, got "
                        f"{type(loss).__name__}")
    try:
        x, y = data.rows(0, 0, max(1, min(int(samples), data.batch)))
    except Exception as e:      # the factory's dataset, failing as a worker's would
        raise SpecError(f"data: reading the first samples of batch 0 failed: {error_line(e)}") from None
    context = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with torch.no_grad(), context:
        for i, b in enumerate(blocks):
            x = forward_checked(copy.deepcopy(b).eval(), x, i)
        whole = _loss_value(loss, x, y, "the first samples")
        if len(x) < 2:
            return
        each = [_loss_value(loss, x[j:j + 1], y[j:j + 1], f"sample {j}") for j in range(len(x))]
    mean = sum(each) / len(each)
    rtol = LOSS_RTOL.get(x.dtype, 2e-2) if autocast is None else 2e-2
    if abs(whole - mean) > rtol * max(abs(whole), abs(mean), 1e-12):
        raise SpecError(f"loss: expected the mean over the micro-batch of a per-sample loss (the runtime weighs "
                        f"micro-batches by their sample counts), got {whole:.6g} on samples 0-{len(x) - 1} of batch 0 "
                        f"where their own losses average {mean:.6g}: a sum, or a token mean over samples with "
                        f"different numbers of counted tokens (ignore_index padding), trains differently under "
                        f"every plan; average each sample's tokens first, then the samples")


def _loss_value(loss: Callable, out: torch.Tensor, target: torch.Tensor, what: str) -> float:
    try:
        v = loss(out, target)
    except Exception as e:
        raise SpecError(f"loss: fails on the model's output for {what} of batch 0: {error_line(e)}") from None
    if not isinstance(v, torch.Tensor) or v.numel() != 1 or not v.is_floating_point():
        shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
        raise SpecError(f"loss: expected a scalar floating-point tensor (the mean loss over the micro-batch), got "
                        f"{shape} for {what} of batch 0")
    return float(v.detach().reshape(()).item())


class Batches:
    """Uniform access to global batch i, or only some of its rows, whatever the data is."""

    def __init__(self, data: Any, batch: int) -> None:
        self.data, self.batch = data, int(batch)
        self._get = callable(getattr(data, "get", None))
        if not self._get and not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
            raise SpecError(f"data: expected get(i) or a map-style dataset, got {type(data).__name__}")
        if self._get and getattr(data, "batch", batch) != batch:
            raise SpecError(f"data: batches of {data.batch} samples, expected the batch being trained or profiled, "
                            f"{batch} (the instance's workload batch, or dynpar profile --batch)")
        if not self._get and len(data) == 0:
            raise SpecError(f"data: the dataset ({type(data).__name__}) is empty; expected samples to train on")

    def rows(self, i: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows start..stop-1 of global batch i (inputs, targets); a plain TensorDataset of
        (inputs, targets), not a subclass, is indexed at once (the same rows as item by item)."""
        if self._get:
            x, y = self.data.get(i)
            return x[start:stop], y[start:stop]
        n = len(self.data)
        if type(self.data) is TensorDataset and len(self.data.tensors) == 2:   # a subclass may override __getitem__
            idx = torch.arange(i * self.batch + start, i * self.batch + stop) % n
            return self.data.tensors[0][idx], self.data.tensors[1][idx]
        items = [self.data[(i * self.batch + j) % n] for j in range(start, stop)]
        return torch.stack([a for a, _ in items]), torch.stack([torch.as_tensor(b) for _, b in items])

    def example(self) -> torch.Tensor:
        """One input sample (a batch of one), for shapes."""
        return self.rows(0, 0, 1)[0]


def input_shapes(blocks: Sequence[nn.Module], example: torch.Tensor,
                 context: contextlib.AbstractContextManager | None = None
                 ) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Per block, the per-sample shape and dtype of its input, then those of the model's
    output (len(blocks) + 1 entries): a one-sample forward pass on private copies in eval
    mode (no dropout draw, no statistic of the caller's touched), inside `context` (the
    training's autocast: TrainSpec.autocast_context) when given."""
    out = []
    x = example[:1]
    with torch.no_grad(), (context or contextlib.nullcontext()):
        for i, b in enumerate(blocks):
            out.append((tuple(x.shape[1:]), x.dtype))
            m = copy.deepcopy(b).eval()
            x = forward_checked(m, x, i)
    out.append((tuple(x.shape[1:]), x.dtype))
    return out


def forward_checked(block: nn.Module, x: torch.Tensor, i: int) -> torch.Tensor:
    """block(x) for block i of the model; SpecError naming the block when its forward fails on
    the data or returns anything but one tensor (a block's output is the next block's only
    input)."""
    try:
        y = block(x)
    except Exception as e:
        why = " ".join(str(e).split()) or type(e).__name__
        raise SpecError(f"model: block {i} ({type(block).__name__}) fails on its input of shape "
                        f"{tuple(x.shape)}: {type(e).__name__}: {why}") from None
    if not isinstance(y, torch.Tensor):
        raise SpecError(f"model: block {i} ({type(block).__name__}) returns {type(y).__name__}; expected one tensor "
                        "(each block's output is the next block's only input)")
    return y
