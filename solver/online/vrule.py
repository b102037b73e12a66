"""The scale-free default V: V expressed against the instance's own batch time and horizon
(docs/BUDGETS.md, "The default V").

The slot objective is V T + sum_k Q_k c_k / Cbar_k with the queues in budget units
(online.queues), so V is in 1/s and its right size depends on how long an iteration takes:
V = 1 is tiny against a 10 s iteration and huge against a 10 ms one. The rule is

    V = v / T_ref,     v = eps * H

with T_ref the fastest plan's batch time in the first executed slot (the search with every
queue 0), seconds; eps the budget tolerance (a fraction) and H the run's horizon in slots.

Derivation (drift-plus-penalty). The slot objective takes a plan that is cheaper in budget k by
Delta c_k and slower by Delta T exactly when Q_k Delta c_k / Cbar_k > V Delta T, so the queue
rises until it pays for the trade at the margin: Q_k* ~ V Delta T / (Delta c_k / Cbar_k)
= v mu_k, where mu_k = (Delta T / T_ref) / (Delta c_k / Cbar_k) is the instance's exchange rate
between relative batch time and relative cost, free of the time unit and the budget's unit.
Guarantee (a) bounds the overshoot at the horizon by Q_k(H) / H ~ v mu_k / H, so asking it to
be at most eps gives v = eps H / mu_k. The rule takes the neutral rate mu = 1 (one reference
batch time per budget's worth, the rate at which the slot objective weighs its two terms
alike). Bound (b) gives the same scaling with worst-case constants: Q <= (V Delta T + C) /
delta + ymax, i.e. Q(H) / H <= (v rho / delta + ymax) / H with rho = Delta T / T_ref: linear in
v and shrinking as 1 / H, so a longer horizon affords a proportionally larger V.

An instance whose margin is steeper than mu = 1 would overshoot more than eps under the rule
alone; the budget tracker (online.tracking) is what makes the tolerance a guarantee, whatever
V is, and the rule only sets how the batch time is traded until the tracker binds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..solve.inputs import V_MAX


@dataclass(frozen=True)
class VChoice:
    """The V in force and where it came from.

    V: 1/s; v: dimensionless (V * T_ref); T_ref: seconds (nan when V was given); horizon:
    slots; tolerance: fraction; rule: "default" (this module), "default-untracked" (this module with the
    budget tracker off: the tolerance only sets the scale) or "given" (the caller's V)."""

    V: float
    v: float
    T_ref: float
    horizon: int
    tolerance: float
    rule: str

    def describe(self) -> str:
        if self.rule == "given":
            return f"V = {self.V:.4g} 1/s (given)"
        eps = (f"tolerance {100 * self.tolerance:g}%" if self.rule == "default" else
               f"eps {100 * self.tolerance:g}%, the default tolerance, for scale only: the budget tracker is off")
        return (f"V = {self.V:.4g} 1/s = v / T_ref with v = eps H = {self.v:.4g}, T_ref = {self.T_ref:.4g} s "
                f"(horizon {self.horizon} slots, {eps})")

    def zero_note(self) -> str | None:
        """One line when the default rule gave V = 0 (a tolerance of 0: v = eps H = 0), which
        weighs batch time not at all (the cheapest plans); None otherwise."""
        if self.rule == "given" or self.V != 0:
            return None
        return ("budget tolerance 0: the default rule V = eps H / T_ref gives V = 0, so batch time carries no "
                "weight and ours takes the cheapest plans; fix V (--V, run_online's V=) to keep every budget "
                "at its limit while weighing batch time, or give a tolerance > 0 (off / None: no budget tracker)")

    def to_dict(self) -> dict:
        return {"V": self.V, "v": self.v, "T_ref": self.T_ref, "horizon": self.horizon,
                "tolerance": self.tolerance, "rule": self.rule}

    @classmethod
    def from_dict(cls, d: dict) -> "VChoice":
        return cls(float(d["V"]), float(d["v"]), float(d["T_ref"]), int(d["horizon"]), float(d["tolerance"]),
                   str(d["rule"]))


def default_v(horizon: int, tolerance: float) -> float:
    """v = eps * H (module docstring). Raises ValueError on a bad argument."""
    if horizon < 1:
        raise ValueError(f"default_v: horizon must be >= 1 slot, got {horizon}")
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"default_v: tolerance must be a finite fraction >= 0, got {tolerance}")
    return tolerance * horizon


def choose_V(T_ref: float, horizon: int, tolerance: float, tracked: bool = True) -> VChoice:
    """The default V = eps H / T_ref from the fastest plan's batch time T_ref (seconds)."""
    if not (T_ref > 0 and math.isfinite(T_ref)):
        raise ValueError(f"choose_V: reference batch time must be positive and finite, got {T_ref}")
    v = default_v(horizon, tolerance)
    if v / float(T_ref) > V_MAX:
        raise ValueError(f"the default V rule gives V = eps H / T_ref = {v:g} / {T_ref:g} s = {v / T_ref:.4g} 1/s "
                         f"(tolerance {tolerance:g}, horizon {horizon} slots, fastest batch time {T_ref:g} s), "
                         f"expected at most {V_MAX:g}: give V (--V) or a smaller tolerance")
    return VChoice(v / float(T_ref), v, float(T_ref), int(horizon), float(tolerance),
                   "default" if tracked else "default-untracked")


def given_V(V: float, horizon: int, tolerance: float) -> VChoice:
    """The caller's V, recorded the same way (v and T_ref unknown: nan)."""
    if not (math.isfinite(V) and V >= 0):
        raise ValueError(f"V must be finite and >= 0, got {V}")
    nan = float("nan")
    return VChoice(float(V), nan, nan, int(horizon), float(tolerance), "given")
