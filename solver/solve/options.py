"""Options and result of the per-slot solver."""
from __future__ import annotations

from dataclasses import dataclass

from ..cost.evaluate import Evaluation
from ..model.plan import Plan


@dataclass(frozen=True)
class SolveOptions:
    """exact: use the exhaustive oracle (n <= 6); max_groups: at most this many groups;
    local_search: improve by local moves; frontier: cut sets per group tried in the polish;
    replan: charge migration from previous_plan; iterations_per_slot: iterations the migration
    time is amortised over; keep_candidates: return every scored plan; max_structures:
    deterministic work budget, the most structures the search tries after the fixed candidates
    (work units, see default_work_budget; None: default_work_budget(n, L)); time_limit_s: optional extra wall-clock limit (seconds,
    opt-in: it makes results depend on machine load); the fixed candidates (baselines, cheapest,
    previous plan) are always scored."""

    exact: bool = False
    max_groups: int | None = None
    local_search: bool = True
    frontier: int = 4
    replan: bool = True
    iterations_per_slot: int = 100
    keep_candidates: bool = False
    time_limit_s: float | None = None
    max_structures: float | None = None


@dataclass(frozen=True)
class SlotResult:
    """Outcome of one slot. batch_time: predicted seconds per iteration (no migration);
    costs: per budget in state order; objective: V T + sum Q_k c_k (+ W * migration /
    iterations when re-planning is charged); status: "optimal" (exact), "feasible"
    (heuristic) or "infeasible" (plan None); solve_time, migration_time: seconds;
    candidates: structures scored; candidate_pool: (Plan, batch_time, costs) when asked."""

    plan: Plan | None
    batch_time: float
    costs: tuple[float, ...]
    objective: float
    status: str
    message: str
    solve_time: float
    candidates: int = 0
    migration_time: float = 0.0
    evaluation: Evaluation | None = None
    candidate_pool: tuple = ()


def default_work_budget(n: int, L: int) -> int:
    """Structures the search may try after the fixed candidates when
    SolveOptions.max_structures is None (deterministic: the result does not depend on machine
    load): generous for the small slots the oracle checks, bounded for large pools.
    One work unit is scoring one structure; cutting a k-device group costs Scorer.cut_work(k)
    units (so deep models spend the budget faster). Small slots (n <= 6) finish the whole search
    well inside their budget (a few hundred units)."""
    if n <= 6:
        return 5000
    if n <= 8:
        return 400
    return 1500 if n <= 16 else 4000
