"""Where a training process computes: CPU with gloo, or its own CUDA GPU with NCCL.

`--accelerator cpu` (the default): every process computes on the CPU (one torch thread)
and talks over gloo. `--accelerator cuda`: process k of a node binds to GPU `LOCAL_RANK`
(torchrun sets it; a job spawned on one machine uses its rank), never to `rank % count`,
and the collectives run over NCCL. CUDA kernels are asynchronous, so every stage timing
the estimator reads is taken between two device synchronisations (`synchronizer`).
The CUDA path is written for one GPU per process; it was not measured on this project's
CPU-only CI machine.
"""
from __future__ import annotations

import os
from typing import Callable

import torch

from .spec import SpecError

ACCELERATORS = ("cpu", "cuda")


def place(accelerator: str, rank: int) -> tuple[torch.device, str]:
    """(device, process-group backend) of this process; SpecError when CUDA is asked for
    and absent, or when LOCAL_RANK names a GPU this node lacks."""
    if accelerator not in ACCELERATORS:
        raise SpecError(f"--accelerator: expected one of {', '.join(ACCELERATORS)}, got {accelerator!r}")
    if accelerator == "cpu":
        return torch.device("cpu"), "gloo"
    if not torch.cuda.is_available():
        raise SpecError("--accelerator cuda: torch sees no CUDA device here (torch.cuda.is_available() is False)")
    local = int(os.environ.get("LOCAL_RANK", rank))
    count = torch.cuda.device_count()
    if local >= count:
        raise SpecError(f"--accelerator cuda: LOCAL_RANK {local} but this node has {count} GPU(s); "
                        "run at most one process per GPU")
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    return dev, "nccl"


def synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for the kernels queued on `device` (a no-op on the CPU)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
