"""One rule for the inputs of solve_slot and solve_exact.

- queues: None or () mean every queue is zero; otherwise exactly one number in [0, QUEUE_MAX]
  per budget of the state, in budget order and budget units (a list, tuple or 1-D array; bool
  and str are not numbers here).
- V: a real number in [0, V_MAX] (seconds of batch time weigh V against one budget's worth of
  cost); bool and str are rejected.
- state: a SlotState (`instance.state(t)`), not the Instance itself.
A wrong type raises TypeError, a wrong value ValueError; each message names the argument and
the value.
"""
from __future__ import annotations

import numbers
from typing import Mapping, Sequence

import numpy as np

from ..cost.costs import budget_weights
from ..model.state import SlotState


V_MAX = 1e12
"""Largest V (1/s). The objective's terms V T and Q_k c_k / Cbar_k overflow to inf and NaN near
the float range (V = 1e308: the search then ranks plans on garbage). At 1e12 a picosecond of
batch time already weighs a whole budget's worth; the default rule's eps H / T_ref
(online.vrule: eps < 1, H <= 1e6 slots) stays below it for batch times above a microsecond."""
QUEUE_MAX = 1e24
"""Largest queue, or weight Q_k, in budgets' worth: V_MAX times 1e12, since priced runs hand the
search V lambda_k (online.pricing: lambda_k in seconds of batch time per budget's worth). At
it, Q_k c_k / Cbar_k stays below 1e60 for costs up to 1e24 and limits down to 1e-12."""


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def check_state(state: object) -> SlotState:
    """state itself; TypeError unless a SlotState (an Instance is named: its slots are
    `instance.state(t)`)."""
    if not isinstance(state, SlotState):
        hint = " (one slot of an Instance is instance.state(t))" if hasattr(state, "num_slots") else ""
        raise TypeError(f"state: expected a SlotState{hint}, got {type(state).__name__}: {state!r:.80}")
    return state


def check_V(V: object) -> float:
    """V as a float; TypeError unless a real number, ValueError unless in [0, V_MAX]."""
    if not _is_real(V):
        raise TypeError(f"V: expected a finite real number >= 0 and <= {V_MAX:g}, got {V!r} ({type(V).__name__})")
    v = float(V)
    if not 0 <= v <= V_MAX:
        raise ValueError(f"V: expected a finite real number >= 0 and <= {V_MAX:g}, got {V!r}")
    return v


def check_queues(state: SlotState, queues: Sequence[float] | None) -> np.ndarray:
    """The cost weights Q_k / Cbar_k (cost.costs.budget_weights) of queues given by the rule
    of this module; zeros for None or ()."""
    K = len(state.budgets)
    names = ", ".join(b.name for b in state.budgets) or "none"
    if queues is None:
        return np.zeros(K)
    if isinstance(queues, (str, bytes, Mapping)) or not hasattr(queues, "__len__"):
        raise TypeError(f"queues: expected None or a sequence of {K} numbers (one per budget: {names}), "
                        f"got {queues!r} ({type(queues).__name__})")
    if isinstance(queues, np.ndarray) and queues.ndim != 1:
        raise ValueError(f"queues: expected a 1-D sequence of {K} numbers, got an array of shape {queues.shape}")
    values = list(queues)
    if not values:
        return np.zeros(K)
    if len(values) != K:
        raise ValueError(f"queues: expected {K} values (one per budget: {names}) or none, "
                         f"got {len(values)}: {tuple(values)!r}")
    for k, (q, b) in enumerate(zip(values, state.budgets)):
        expected = f"queues[{k}] ({b.name}): expected a finite real number >= 0 and <= {QUEUE_MAX:g}"
        if not _is_real(q):
            raise TypeError(f"{expected}, got {q!r} ({type(q).__name__})")
        if not 0 <= float(q) <= QUEUE_MAX:
            raise ValueError(f"{expected}, got {q!r}")
    return budget_weights([b.limit for b in state.budgets], np.asarray(values, dtype=float))


def infeasible_reason(state: SlotState) -> str | None:
    """Why no plan can exist in this state, or None."""
    if not state.available_indices:
        return f"slot {state.t}: no device is available"
    return None
