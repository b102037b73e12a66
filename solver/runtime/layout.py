"""Who holds what under a plan: per-rank stage, per-layer holders, gradient buckets."""
from __future__ import annotations

from dataclasses import dataclass

from ..cost.simulator import micro_batches
from ..model import Plan
from ..model.plan import layer_holders


@dataclass(frozen=True)
class StageRole:
    """The stage one rank runs: group index, stage index, layers [first, end), the
    ranks before/after it in the pipeline (None at the ends; the neighbours' leaders), the
    group's share and sample offset in the global batch, and the stage's ranks, leader
    first, when it is tensor-parallel (() otherwise)."""

    group: int
    stage: int
    first: int
    end: int
    prev: int | None
    next: int | None
    share: int
    offset: int
    tp: tuple[int, ...] = ()

    @property
    def leader(self) -> int | None:
        """The rank that runs the stage's pipeline messages (None: a stage of one rank)."""
        return self.tp[0] if self.tp else None

    @property
    def layers(self) -> range:
        return range(self.first, self.end)


def roles(plan: Plan) -> dict[int, StageRole]:
    """rank -> its StageRole (every rank of a TP stage: runtime.tensor_parallel); ranks
    absent from the plan idle this slot."""
    out: dict[int, StageRole] = {}
    offset = 0
    for gi, g in enumerate(plan.groups):
        for j, ((d, a, b), unit) in enumerate(zip(g.stages(), g.units())):
            prev = g.devices[j - 1] if j > 0 else None
            nxt = g.devices[j + 1] if j + 1 < len(g.devices) else None
            for r in unit:
                out[r] = StageRole(gi, j, a, b, prev, nxt, g.share, offset, unit if len(unit) > 1 else ())
        offset += g.share
    return out


def layer_units(plan: Plan, num_layers: int) -> list[tuple[tuple[int, ...], ...]]:
    """Per layer, the ranks of each stage holding it (one tuple per group that covers it,
    leader first, then its TP peers), in group order."""
    out: list[list[tuple[int, ...]]] = [[] for _ in range(num_layers)]
    for g in plan.groups:
        for (_, a, b), unit in zip(g.stages(), g.units()):
            for layer in range(a, min(b, num_layers)):
                out[layer].append(tuple(unit))
    return [tuple(u) for u in out]


def flat_holders(units: list[tuple[tuple[int, ...], ...]]) -> list[tuple[int, ...]]:
    """Per layer, every rank holding (a shard of) it: layer_units flattened. The first is the
    first group's leader (who writes the layer's checkpoint and sends it in migrations)."""
    return [tuple(r for u in us for r in u) for us in units]


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
