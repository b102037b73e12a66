"""The per-slot solver: `solve_slot` (tentative search) and `solve_exact` (the oracle)."""
from .options import SlotResult, SolveOptions
from .oracle import solve_exact
from .search import solve_slot

__all__ = ["SlotResult", "SolveOptions", "solve_exact", "solve_slot"]
