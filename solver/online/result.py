"""The result of an online run (the one result contract, solver.status).

`run_online` returns an `OnlineRun`: `.rows` is the per-slot pandas DataFrame (one row per
slot, see controller._row), `.summary` the dict of online.summary.summarise (averages,
overshoot, bounds, the V in force), `.status` a Status, `.success` and `.message`.

    FEASIBLE    every slot ran (also a run over no slot at all);
    PARTIAL     some slots had no feasible plan and were skipped (listed in the message);
    INFEASIBLE  slots were asked for and none ran.

A budget that cannot be met does not change the status (every slot still ran); `.notes` holds
its one-line explanation (and any in-run note of the budget tracker), and `.message` ends with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..status import Status
from .vrule import VChoice


@dataclass(frozen=True)
class OnlineRun:
    """rows: one row per slot; summary: summarise()'s dict plus status, message, notes and the V
    in force; V: the VChoice (None when no slot ran); notes: one line each."""

    rows: pd.DataFrame
    summary: dict
    status: Status
    message: str
    V: VChoice | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def success(self) -> bool:
        return self.status.success


def run_status(rows: pd.DataFrame) -> tuple[Status, str]:
    """Status and the first part of the message from the rows' status column."""
    n = len(rows)
    skipped = [int(t) for t, s in zip(rows["slot"], rows["status"]) if s == "infeasible"] if n else []
    ran = n - len(skipped)
    if n == 0:
        return Status.FEASIBLE, "no slot to run"
    if ran == 0:
        return Status.INFEASIBLE, f"no slot of {n} had a feasible plan"
    if skipped:
        more = "" if len(skipped) <= 10 else f" and {len(skipped) - 10} more"
        return Status.PARTIAL, (f"{ran} of {n} slots ran; no feasible plan in slots "
                                f"{', '.join(map(str, skipped[:10]))}{more} (skipped)")
    return Status.FEASIBLE, f"{n} of {n} slots ran"
