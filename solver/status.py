"""The one result contract: every result type (slot result, online run, offline solve, runtime
run) carries a `Status`, a `.success` flag and a human-readable message.

`Status` is a `StrEnum`, so `res.status == "optimal"` and JSON output keep working.
"""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """What a result means.

    OPTIMAL: proven optimal (for the model: the oracle's "exact for the model"; an LP or MILP
    solved to optimality);
    FEASIBLE: every constraint holds, optimality not proven (heuristic search, the oracle's
    optimum over a restricted set of cut sets that the message names, or a run whose every slot
    has a feasible plan); PARTIAL: a run in which some slots had no feasible plan
    (they are listed, and skipped); INFEASIBLE: no feasible plan exists or none was found
    (the message says why); ERROR: a solver or worker failed (the message says which).
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    PARTIAL = "partial"
    INFEASIBLE = "infeasible"
    ERROR = "error"

    @property
    def success(self) -> bool:
        """True for OPTIMAL and FEASIBLE: the result can be used as it is."""
        return self in (Status.OPTIMAL, Status.FEASIBLE)
