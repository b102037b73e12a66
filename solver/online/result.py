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

import json
from dataclasses import asdict, dataclass, field

import pandas as pd

from ..status import Status
from .vrule import VChoice


@dataclass(frozen=True, eq=False)
class OnlineRun:
    """rows: one row per slot; summary: summarise()'s dict plus status, message, notes and the V
    in force; V: the VChoice (None when no slot ran); notes: one line each. Two runs are equal
    when every field is (the rows by DataFrame.equals, the rest as JSON, where NaN equals NaN);
    a run is not hashable."""

    rows: pd.DataFrame
    summary: dict
    status: Status
    message: str
    V: VChoice | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    __hash__ = None     # type: ignore[assignment]  # its rows are a DataFrame

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OnlineRun):
            return NotImplemented
        return self.rows.equals(other.rows) and _as_json(self) == _as_json(other)

    @property
    def success(self) -> bool:
        return self.status.success


def _as_json(run: OnlineRun) -> str:
    """Every field of `run` but its rows, as JSON (NaN written as NaN, so equal to NaN)."""
    fields = {"summary": run.summary, "status": run.status.value, "message": run.message,
              "V": None if run.V is None else asdict(run.V), "notes": list(run.notes)}
    return json.dumps(fields, sort_keys=True, default=repr, allow_nan=True)


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
