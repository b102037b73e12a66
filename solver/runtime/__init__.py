"""Torch adapter: run plans on real processes, migrate state between slots, profile models.

Imports torch; the core (solver/*.py) never imports this package.

    from solver.runtime import run, Slot, TensorBatches
    result = run(model, [Slot(plan, steps=5)], TensorBatches(x, y, B), loss_fn, make_opt,
                 world_size=4, micro_batch=4)
"""
from __future__ import annotations

import sys

try:
    import torch  # noqa: F401
except ImportError:
    _NEEDS = "solver.runtime needs torch: pip install 'dynpar[torch]' (or the CPU build: pip install torch)"
    if sys.argv[:1] == ["-m"]:     # `python -m solver.runtime`, while Python locates the module: one line
        raise SystemExit(f"python -m solver.runtime: error: {_NEEDS}") from None
    raise ImportError(_NEEDS) from None

from .checks import PlanMismatchError, check_plan, check_slots
from .layout import StageRole, buckets, layer_holders, micro_sizes, roles
from .pipeline import Pad
from .profiler import measure_matmul_flops, profile_module
from .spec import TrainSpec
from .runtime import (
           RunResult,
           Slot,
           TensorBatches,
           make_job,
           run,
           run_here,
           under_torchrun,
           worker,
           worker_from_env,
)

__all__ = ["Pad", "PlanMismatchError", "RunResult", "Slot", "StageRole", "TensorBatches", "buckets",
           "check_plan", "check_slots", "layer_holders", "measure_matmul_flops", "micro_sizes",
           "make_job", "profile_module", "roles", "run", "run_here", "TrainSpec", "under_torchrun", "worker",
           "worker_from_env"]
