"""The batch-share LP written in Pyomo: the readable reference formulation.

Same LP as solver.subproblems.shares.ShareLP (continuous b, u <= b_g <= min(cap_g, B)); built afresh on
every call, so it is for tests and reports, never for the search's hot path. Pyomo is imported
lazily (0.5-1.2 s).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..subproblems.shares import LPSolution


def solve_shares_lp_pyomo(alpha: Sequence[float], beta: Sequence[float], cap: Sequence[float], B: float,
                          u: float, W: float, q: Sequence[float], solver: str = "appsi_highs") -> LPSolution:
    """minimise W z + sum_g q_g b_g  s.t.  alpha_g b_g + beta_g <= z, sum_g b_g = B, u <= b_g <= cap_g.

    alpha s/sample, beta s, cap/B/u samples, W per second, q per sample. Returns the optimum
    (b samples, z = max group time of b, value) with status "optimal", or status "infeasible" /
    "error" with the solver's termination condition; nothing is loaded unless it is optimal.
    """
    import pyomo.environ as pyo
    from pyomo.opt import TerminationCondition

    m = len(alpha)
    hi = [min(float(x), float(B)) for x in cap]
    md = pyo.ConcreteModel()
    md.G = pyo.RangeSet(0, m - 1)
    md.b = pyo.Var(md.G, bounds=lambda _, g: (float(u), hi[g]))
    md.z = pyo.Var()
    md.time = pyo.Constraint(md.G, rule=lambda md, g: float(alpha[g]) * md.b[g] + float(beta[g]) <= md.z)
    md.batch = pyo.Constraint(expr=sum(md.b[g] for g in md.G) == float(B))
    md.obj = pyo.Objective(expr=float(W) * md.z + sum(float(q[g]) * md.b[g] for g in md.G))
    res = pyo.SolverFactory(solver).solve(md, load_solutions=False)
    tc = res.solver.termination_condition
    nan = float("nan")
    if tc != TerminationCondition.optimal:
        status = "infeasible" if tc == TerminationCondition.infeasible else "error"
        return LPSolution((), nan, nan, status, f"{solver}: termination condition {tc}")
    md.solutions.load_from(res)
    b = np.array([pyo.value(md.b[g]) for g in md.G])
    z = float(np.max(np.asarray(alpha, dtype=float) * b + np.asarray(beta, dtype=float)))
    return LPSolution(tuple(float(x) for x in b), z, float(W) * z + float(np.dot(q, b)), "optimal")
