"""Mixes of plans: how close the average use of a choice of one plan per slot can come to a
bound, with the choice relaxed to a mix (an LP; docs/BUDGETS.md, "Budgets that cannot be met
together" and "The budget tracker").

Slot t offers plans j with use Y_tj (a K-vector, budgets' worth per iteration: c_k / Cbar_k,
or c_k / Cbar_k - 1). A mix puts weight pi_tj >= 0 on them, sum_j pi_tj = 1. `least_excess`
solves

    s* = min s   subject to   (1/n) sum_t sum_j pi_tj Y_tjk <= b_k + s   for every active k,

the least common amount by which the bounds b must grow for some mix to keep every active
budget within them (s* <= 0: a mix keeps every bound). A mix is a relaxation of one plan per
slot: over many slots a run can take the plans in the mix's proportions, so s* is what the
slots' plans can reach, not what one run of them is guaranteed to.

With `integral=True` the same model is a MILP with pi_tj in {0, 1}: one plan per slot, as a
run takes them. Its s is what a run of these plans can reach knowing the whole trace (an upper
bound of the best one-plan-per-slot level over all plans; the LP's s* is a lower bound of it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..subproblems.highs import quiet_highs


@dataclass(frozen=True)
class Excess:
    """s*: the least common growth of the bounds (budgets' worth; <= 0 where a mix keeps
    them); binding[k]: budget k's row limits s* (a positive dual; for the MILP, the row is tight
    at the choice found); status: HiGHS' model status in words ("Time limit reached" for a
    MILP stopped with a choice found: its s is then that choice's, an upper bound)."""

    s: float
    binding: tuple[bool, ...]
    status: str

    @property
    def ok(self) -> bool:
        return self.status == "Optimal" or (self.status == "Time limit reached" and np.isfinite(self.s))


def least_excess(slots: Sequence[np.ndarray], bounds: Sequence[float], active: Sequence[bool],
                 integral: bool = False, time_limit_s: float = 10.0,
                 grows: Sequence[bool] | None = None) -> Excess:
    """The LP of the module docstring over `slots` (each an array of shape (m_t, K), m_t >= 1),
    `bounds` b (K) and `active` (K bools: the budgets whose rows are in the LP); with
    `integral`, the MILP (one plan per slot), stopped after `time_limit_s` seconds; with
    `grows` (K bools), only those active rows grow by s and the other active rows keep b_k
    (status "Infeasible" where no choice keeps them)."""
    import highspy

    if not len(slots) or any(len(y) == 0 for y in slots):
        raise ValueError(f"least_excess: expected at least one plan in each of at least one slot, got sizes "
                         f"{[len(y) for y in slots]}")
    Ys = [np.asarray(y, dtype=float).reshape(len(y), -1) for y in slots]
    act = np.flatnonzero(np.asarray(active, dtype=bool))
    K, n = len(bounds), len(Ys)
    if len(act) == 0:
        return Excess(-np.inf, (False,) * K, "Optimal")
    g = np.ones(len(act)) if grows is None else np.asarray(grows, dtype=float)[act]
    if not g.any():
        raise ValueError(f"least_excess: expected at least one active budget in grows, got active {list(active)}, "
                         f"grows {list(grows)}")
    sizes = [len(y) for y in Ys]
    Y = np.vstack(Ys)[:, act] / n
    N, A = len(Y), len(act)
    # columns: pi (N), then s (free); rows: A budget rows (Y pi - s <= b), n slot rows (sum pi = 1)
    slot_of = np.repeat(np.arange(n), sizes)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = N + 1, A + n
    inf = highspy.kHighsInf
    lp.col_cost_ = np.r_[np.zeros(N), 1.0]
    lp.col_lower_ = np.r_[np.zeros(N), -inf]
    lp.col_upper_ = np.full(N + 1, inf)
    lp.row_lower_ = np.r_[np.full(A, -inf), np.ones(n)]
    lp.row_upper_ = np.r_[np.asarray(bounds, dtype=float)[act], np.ones(n)]
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.r_[np.arange(0, (A + 1) * N + 1, A + 1), (A + 1) * N + A].astype(np.int32)
    lp.a_matrix_.index_ = np.r_[np.column_stack([np.tile(np.arange(A), (N, 1)), A + slot_of]).ravel(),
                                np.arange(A)].astype(np.int32)
    lp.a_matrix_.value_ = np.r_[np.column_stack([Y, np.ones(N)]).ravel(), -g]
    if integral:
        lp.integrality_ = [highspy.HighsVarType.kInteger] * N + [highspy.HighsVarType.kContinuous]
    h = quiet_highs()
    if integral:
        h.setOptionValue("time_limit", float(time_limit_s))
    h.passModel(lp)
    h.run()
    ms = h.getModelStatus()
    status = h.modelStatusToString(ms)
    sol = h.getSolution()
    found = ms == highspy.HighsModelStatus.kOptimal or (
        integral and ms == highspy.HighsModelStatus.kTimeLimit and sol.value_valid)
    if not found:
        return Excess(np.nan, (False,) * K, status)
    s_val = float(sol.col_value[N])
    tight = np.zeros(K, dtype=bool)
    if integral:
        tight[act] = np.asarray(sol.row_value[:A], dtype=float) >= np.asarray(bounds, dtype=float)[act] - 1e-9
    else:
        tight[act] = -np.asarray(sol.row_dual[:A], dtype=float) > 1e-9
    return Excess(s_val, tuple(bool(x) for x in tight), status)
