"""Who holds what under a plan: per-rank stage, per-layer holders, gradient buckets."""
from __future__ import annotations

from dataclasses import dataclass

from ..cost.simulator import micro_batches
from ..model import Plan
from ..model.plan import layer_holders


@dataclass(frozen=True)
class StageRole:
    """The stage one rank runs: group index, stage index, layers [first, end), the
    ranks before/after it in the pipeline (None at the ends), and the group's share and
    sample offset in the global batch."""

    group: int
    stage: int
    first: int
    end: int
    prev: int | None
    next: int | None
    share: int
    offset: int

    @property
    def layers(self) -> range:
        return range(self.first, self.end)


def roles(plan: Plan) -> dict[int, StageRole]:
    """rank -> its StageRole; ranks absent from the plan idle this slot."""
    out: dict[int, StageRole] = {}
    offset = 0
    for gi, g in enumerate(plan.groups):
        for j, (d, a, b) in enumerate(g.stages()):
            prev = g.devices[j - 1] if j > 0 else None
            nxt = g.devices[j + 1] if j + 1 < len(g.devices) else None
            out[d] = StageRole(gi, j, a, b, prev, nxt, g.share, offset)
        offset += g.share
    return out


def buckets(plan: Plan, num_layers: int, has_params: list[bool]) -> dict[tuple[int, ...], list[int]]:
    """Gradient buckets: sorted holder-rank set -> the layers (with parameters) it holds,
    in layer order. Only sets of >= 2 ranks need an all-reduce. Keys iterate sorted, so
    every rank visits them (and creates their process groups) in the same order."""
    out: dict[tuple[int, ...], list[int]] = {}
    for layer, h in enumerate(layer_holders(plan, num_layers)):
        if has_params[layer] and len(h) >= 2:
            out.setdefault(tuple(sorted(h)), []).append(layer)
    return dict(sorted(out.items()))


micro_sizes = micro_batches
"""Split a share into micro-batches of `micro_batch`, the last one shorter: the cost model's
own splitter (cost.simulator.micro_batches), so the runtime runs the micro-batches it times."""
