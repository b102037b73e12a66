"""Schedule, recomputation and micro-batch choices of the search and the oracle.

A structure entry is (devices, cuts) for a GPipe group without recomputation at the workload's
micro-batch size (the default, so that such structures keep their old keys), (devices, cuts,
schedule, recompute), or (devices, cuts, schedule, recompute, micro_batch) for a group at
another of `Workload.micro_batch_options()` (samples; its times, memory and cuts are those of
`SlotState.at_micro_batch`). The dominance rule below compares choices at one micro-batch size.
For fixed devices and cuts, a variant never has a smaller time (1F1B's upper bound
u C + (b - u)(max F + max G + 2 max lam) is >= GPipe's exact time, recomputation adds each
stage's forward to its backward) nor a smaller cost (busy energy is the same or larger), so a
variant can only pay where it lifts the group's memory cap: `variant_entries` keeps a variant
only when its cap (up to the batch) is above the cap of every choice that dominates it. This
is a valid dominance rule, so the oracle stays exact for the model.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

import numpy as np

from ..cost.pipeline import GroupCoeffs
from ..cost.simulator import simulated_batch_time
from ..model.plan import Group, Plan
from ..model.state import SlotState


class Scorer(Protocol):
    """What these functions use of solve.scoring.Scorer (batch B and micro-batch u in samples)."""

    B: int
    u: int
    variants: tuple[tuple[str, bool], ...]

    def coeffs(self, devices: tuple[int, ...], cuts: tuple[int, ...], schedule: str = "gpipe",
               recompute: bool = False, micro_batch: int | None = None) -> GroupCoeffs: ...

    def cuts(self, devices: tuple[int, ...], min_share: int | None = None,
             micro_batch: int | None = None) -> tuple[int, ...] | None: ...

    def u_of(self, e: tuple) -> int: ...

    def binding_wants(self, s: tuple) -> np.ndarray | None: ...

    def relief(self, kind: tuple, e: tuple, w: int, fix: Callable[[tuple, int], tuple | None]) -> tuple | None: ...

VARIANTS: tuple[tuple[str, bool], ...] = (("1f1b", False), ("gpipe", True), ("1f1b", True))
"""The non-default (schedule, recompute) choices, after ("gpipe", False)."""


def allowed_variants(recompute: bool, one_f_one_b: bool = True) -> tuple[tuple[str, bool], ...]:
    """VARIANTS, without recomputation unless `recompute` (SolveOptions.recompute), without 1F1B
    unless `one_f_one_b` (SolveOptions.one_f_one_b)."""
    return tuple(v for v in VARIANTS if (recompute or not v[1]) and (one_f_one_b or v[0] != "1f1b"))

_ORDER = {"gpipe": 0, "1f1b": 1}


def entry(devices: Sequence[int], cuts: Sequence[int], schedule: str = "gpipe", recompute: bool = False,
          micro_batch: int | None = None) -> tuple:
    """A structure entry; the two-element form for GPipe without recomputation, the
    five-element form only for a micro_batch (samples) other than None (the workload's u)."""
    d, c = tuple(devices), tuple(cuts)
    if micro_batch is not None:
        return (d, c, schedule, bool(recompute), int(micro_batch))
    return (d, c) if (schedule, bool(recompute)) == ("gpipe", False) else (d, c, schedule, bool(recompute))


def group_entry(g: Group, default_u: int | None = None) -> tuple:
    """The structure entry of a plan's group (a micro_batch equal to default_u, the workload's
    u, is the default and left out)."""
    mb = None if g.micro_batch == default_u else g.micro_batch
    return entry(g.devices, g.cuts, g.schedule, g.recompute, mb)


def entry_micro_batch(e: tuple) -> int | None:
    """The entry's micro_batch (None: the workload's u)."""
    return e[4] if len(e) > 4 else None


def plain(structure: Sequence[tuple]) -> tuple:
    """The structure as ((devices, cuts), ...), what sync and optimizer times depend on."""
    return tuple((e[0], e[1]) for e in structure)


def plain_at_micro_batch(structure: Sequence[tuple]) -> tuple:
    """The same groups under GPipe without recomputation, each at its own micro-batch size."""
    return tuple(entry(e[0], e[1], micro_batch=entry_micro_batch(e)) for e in structure)


def _dominates(a: tuple[str, bool], b: tuple[str, bool]) -> bool:
    return a != b and _ORDER[a[0]] <= _ORDER[b[0]] and a[1] <= b[1]


def variant_entries(sc: Scorer, devices: tuple[int, ...], cuts: tuple[int, ...],
                    micro_batch: int | None = None) -> list[tuple]:
    """The non-default entries (schedule, recompute) of an ordered, cut group at one
    micro-batch size worth scoring: those whose memory cap (samples, at most the batch) is
    above the cap of every choice that dominates them (module doc); none for one stage (one
    micro-batch live under any schedule) or when GPipe's cap already holds the batch."""
    if len(devices) < 2:
        return []
    B = sc.B
    u = sc.u if micro_batch is None else micro_batch
    caps = {("gpipe", False): min(sc.coeffs(devices, cuts, "gpipe", False, micro_batch).cap, B)}
    if caps[("gpipe", False)] >= B:
        return []
    for v in sc.variants:
        caps[v] = min(sc.coeffs(devices, cuts, *v, micro_batch).cap, B)
    return [entry(devices, cuts, *v, micro_batch) for v in sc.variants
            if caps[v] >= u and all(caps[v] > caps[w] for w in caps if _dominates(w, v))]


def relieve_each(sc: Scorer, s: tuple, fix: Callable[[tuple, int], tuple | None], kind: tuple, min_stages: int = 1
                 ) -> tuple | None:
    """The loop of every memory relief: for each group of at least `min_stages` stages whose
    memory cap is below the share w it would get without caps (Scorer.binding_wants), fix(entry, w)
    gives its replacement entry, or None to keep it; None when no cap binds or nothing changes.
    `kind` names the relief (with its options) for Scorer.relief, which keeps each answer."""
    want = sc.binding_wants(s)
    if want is None:
        return None
    out, changed = [], False
    for e, w in zip(s, want):
        new = sc.relief(kind, e, int(w), fix) if sc.coeffs(*e).cap < w and len(e[0]) >= min_stages else None
        out.append(e if new is None else new)
        changed = changed or new is not None
    return tuple(out) if changed else None


def relieve_by_schedule(sc: Scorer, s: tuple) -> tuple | None:
    """For each group whose memory cap is below the share it would get without caps: the
    fastest (smallest alpha) variant entry that holds that share, else the one with the largest
    cap, over the group's cuts for one micro-batch and for the 1F1B peak of that share
    (u min(k, share / u) samples); None when no cap binds or nothing changes."""
    def fix(e: tuple, w: int) -> tuple | None:
        d, k = e[0], len(e[0])
        mb, u = entry_micro_batch(e), sc.u_of(e)
        peak = u * min(k, w // u)
        cut_sets = dict.fromkeys(c for c in (sc.cuts(d, None, mb), sc.cuts(d, None if peak <= u else peak, mb))
                                 if c is not None)
        options = []
        for c in cut_sets:
            for v in variant_entries(sc, d, c, mb):
                g = sc.coeffs(*v)
                options.append((g.cap < w, -min(g.cap, w), g.alpha, v))
        best = min(options, key=lambda o: o[:3], default=None)
        return best[3] if best is not None and best[1] < -sc.coeffs(*e).cap else None
    return relieve_each(sc, s, fix, ("schedule",), min_stages=2)


def simulated_note(plan: Plan, state: SlotState, closed_form: float) -> tuple[float, str]:
    """(batch time, message part): the event simulator's batch time (seconds) of a plan with a
    multi-stage 1F1B group, whose closed form is only an upper bound; else closed_form and ""."""
    if not any(g.schedule == "1f1b" and len(g.devices) > 1 for g in plan.groups):
        return closed_form, ""
    t = simulated_batch_time(plan, state)
    return t, (f"; batch time {t:.6g} s from the event simulator (1F1B group; "
               f"the objective uses the closed-form upper bound {closed_form:.6g} s)")
