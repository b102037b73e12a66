"""Static facts of the cluster: devices (FLOP/s, bytes, watts, USD/s) and the budgets."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

BUDGET_KINDS = ("money", "energy", "device_energy")


@dataclass(frozen=True)
class Device:
    """One accelerator of the pool (static properties).

    peak_flops: FLOP/s at full efficiency; memory_bytes: usable memory;
    busy_power_w / idle_power_w: watts while computing / while held idle;
    price_per_s: base price in USD per second held; kind: hardware type
    (a key of the measured per-layer times, e.g. "V100-SXM2-16GB"); memory_bandwidth: bytes/s
    of its own memory (0: unknown), for the optimizer-step estimate (cost.optimizer).
    """

    name: str
    kind: str
    peak_flops: float
    memory_bytes: float
    busy_power_w: float
    idle_power_w: float
    price_per_s: float
    memory_bandwidth: float = 0.0


def budget_names_problem(names: Sequence[str]) -> str | None:
    """What is wrong with a set of budget names (None: nothing): a name given twice, or one
    that is another's prefixed by "ok_" (its bound_<name> and the other's bound_ok_<name> are
    one key of a run's summary)."""
    seen: set[str] = set()
    for x in names:
        if x in seen:
            return f"budget name {x!r} given twice; expected each budget's name once"
        seen.add(x)
    clash = next((x for x in names if x.startswith("ok_") and x[3:] in seen), None)
    if clash is not None:
        return (f"budget names {clash[3:]!r} and {clash!r}: a run's summary would write bound_{clash} for both "
                f"(the bound of {clash!r} and whether {clash[3:]!r}'s holds); rename one")
    return None


@dataclass(frozen=True)
class Budget:
    """A long-term average budget per iteration: limit in USD (money) or joules (energy).

    kind "device_energy" caps the energy of the single device named by `device`.
    """

    name: str
    kind: str
    limit: float
    device: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, numbers.Real) \
                or not (math.isfinite(self.limit) and self.limit > 0):
            raise ValueError(f"budget {self.name!r}: limit: expected a finite number > 0, got {self.limit!r}")
