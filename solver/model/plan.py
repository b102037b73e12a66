"""A plan for one slot: ordered groups of devices, cut points, batch shares.

Group g runs a pipeline over `devices` (device indices of the slot state, in
pipeline order); stage j holds layers cuts[j-1] .. cuts[j]-1 (0-based, with an
implicit cuts[-1] = 0), so `cuts` is strictly increasing and ends at L. The
group trains on `share` samples of the global batch per iteration, under its pipeline
`schedule` ("gpipe" or "1f1b"), recomputing its forward in the backward when `recompute`,
in micro-batches of `micro_batch` samples (None: the workload's u; otherwise one of
`Workload.micro_batch_options`, and the group's times are those measured at that size).
With tensor parallelism, stage j is held by devices[j] and its `tp_peers[j]` (same kind, same
server; model.units), so its degree is 1 + len(tp_peers[j]); tp_peers = () means degree 1
everywhere.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Sequence

from .memory import MEM_RTOL, SCHEDULES, memory_use
from .state import SlotState, measurement_notes
from .units import Unit, unit_problems, unit_state


@dataclass(frozen=True)
class Violation:
    """One broken constraint: `constraint` is a stable name, `detail` says where."""

    constraint: str
    detail: str

    def __str__(self) -> str:
        return f"{self.constraint}: {self.detail}"


@dataclass(frozen=True)
class Group:
    """One pipeline: devices in stage order, cut points, share (samples), schedule
    ("gpipe" | "1f1b") and recompute (keep only each micro-batch's stage input and run the
    forward again in the backward)."""

    devices: tuple[int, ...]
    cuts: tuple[int, ...]
    share: int
    schedule: str = "gpipe"
    recompute: bool = False
    micro_batch: int | None = None
    tp_peers: tuple[tuple[int, ...], ...] = ()

    @property
    def num_stages(self) -> int:
        return len(self.devices)

    @property
    def degrees(self) -> tuple[int, ...]:
        """TP degree of each stage (1 + its peers)."""
        if not self.tp_peers:
            return (1,) * len(self.devices)
        return tuple(1 + len(p) for p in self.tp_peers)

    def units(self) -> list[Unit]:
        """Per stage, every device holding it: the stage's device, then its TP peers."""
        if not self.tp_peers:
            return [(d,) for d in self.devices]
        return [(d, *p) for d, p in zip(self.devices, self.tp_peers)]

    @property
    def all_devices(self) -> tuple[int, ...]:
        """Every device of the group, TP peers included, in stage order."""
        return tuple(d for u in self.units() for d in u)

    def stages(self) -> list[tuple[int, int, int]]:
        """(device, first layer, end layer exclusive) per stage."""
        out, start = [], 0
        for d, c in zip(self.devices, self.cuts):
            out.append((d, start, c))
            start = c
        return out


@dataclass(frozen=True)
class Plan:
    groups: tuple[Group, ...]

    @property
    def devices(self) -> tuple[int, ...]:
        """Every device the plan holds (TP peers included), in group then stage order."""
        return tuple(d for g in self.groups for d in g.all_devices)

    @property
    def uses_tp(self) -> bool:
        """True when some stage has TP peers."""
        return any(any(g.tp_peers) for g in self.groups)

    @property
    def shares(self) -> tuple[int, ...]:
        return tuple(g.share for g in self.groups)

    def validate(self, state: SlotState) -> list[Violation]:
        """Every broken constraint of this plan in `state`; [] when feasible. TypeError unless
        state is a SlotState."""
        if not isinstance(state, SlotState):
            raise TypeError(f"validate: state: expected a SlotState (instance.state(t)), got "
                            f"{type(state).__name__}: {state!r:.80}")
        v: list[Violation] = []
        L = state.workload.num_layers
        B, u = state.workload.batch, state.workload.micro_batch
        if not self.groups:
            return [Violation("nonempty", "the plan has no group")]
        v += structure_violations(self, L, state.n, B, state.device_names)
        options = state.workload.micro_batch_options()
        for gi, g in enumerate(self.groups):
            where = f"group {gi}"
            u = state.workload.micro_batch
            if g.micro_batch is not None:
                if g.micro_batch in options:
                    u = g.micro_batch
                else:
                    v.append(Violation("micro_batch", f"{where} micro_batch: expected one of {options}, "
                                                      f"got {g.micro_batch!r}"))
            if len(g.devices) == 0 or len(g.cuts) != len(g.devices):
                continue
            for d in g.all_devices:
                if 0 <= d < state.n and not state.available[d]:
                    v.append(Violation("available", f"device {state.devices[d].name} is unavailable in slot {state.t}"))
            if g.share < u:
                v.append(Violation("share_positive", f"{where} share {g.share} < one micro-batch ({u})"))
            if g.share % u != 0:
                v.append(Violation("share_multiple", f"{where} share {g.share} is not a multiple of u={u}"))
            if g.schedule not in SCHEDULES:
                v.append(Violation("schedule", f"{where} schedule: expected one of {SCHEDULES}, got {g.schedule!r}"))
            for u in g.units():
                v += [Violation("tp_stage", f"{where}: {why}") for why in unit_problems(state, u)]
        if any(x.constraint in ("known_device", "cuts_match_stages", "stage_nonempty", "layers_covered",
                                "schedule", "micro_batch", "tp_peers", "tp_stage", "device_once") for x in v):
            return v
        ustate, uplan = to_units(self, state) if self.uses_tp else (state, self)
        for gi, g in enumerate(uplan.groups):
            for d, used in zip(g.devices, memory_use(ustate.at_micro_batch(g.micro_batch), g.devices, g.cuts, g.share,
                                                          g.schedule, g.recompute)):
                cap = ustate.devices[d].memory_bytes
                if used > cap * (1 + MEM_RTOL):
                    v.append(Violation("memory", f"group {gi} device {ustate.devices[d].name} needs "
                                                  f"{used:.4g} B > {cap:.4g} B"))
        return v

    def describe(self, state: SlotState, notes: bool = True) -> str:
        """Readable multi-line summary: groups, stages with layer ranges, shares, and (with
        `notes`) the plan's notes."""
        lines = []
        for gi, g in enumerate(self.groups):
            stages = ", ".join(f"{'+'.join(state.devices[x].name for x in u)}[{a}:{b}]"
                               + (f" tp{len(u)}" if len(u) > 1 else "")
                               for u, (_, a, b) in zip(g.units(), g.stages()))
            how = "" if (g.schedule, g.recompute) == ("gpipe", False) else \
                f" ({g.schedule}{', recompute' if g.recompute else ''})"
            lines.append(f"group {gi}: share {g.share:>5} | {stages}{how}")
        if notes:
            lines += [f"note: {n}" for n in self.notes(state)]
        return "\n".join(lines)

    def notes(self, state: SlotState) -> tuple[str, ...]:
        """What the plan's figures rest on that the user should know: kinds of its one-device
        stages whose layer times are FLOP estimates in a workload with measured times, and the
        estimates behind its TP stages (tp_notes)."""
        alone = [state.devices[u[0]] for g in self.groups for u in g.units() if len(u) == 1]
        return measurement_notes(alone, state.workload) + tp_notes(self, state)

    def summary(self, state: SlotState) -> str:
        """One-line summary for tables: groups separated by ' | ', stages by '>'."""
        return " | ".join(
            f"{g.share}:" + ">".join("+".join(state.devices[x].name for x in u) for u in g.units())
            for g in self.groups)


def structure_violations(plan: Plan, num_layers: int, num_devices: int, batch: int,
                         names: Sequence[str] | None = None) -> list[Violation]:
    """What any plan must meet whatever the slot, for a model of `num_layers` layers over
    devices 0..num_devices-1 and a batch of `batch` samples: at least one group; per group at
    least one device, one cut point per device, known devices, each used once, non-empty
    stages ending at the last layer; shares summing to the batch. `names`: device names for
    the messages. The one structural check: Plan.validate (a slot's numbers) and the runtime's
    check_plan (the module list's and the process world's) both use it."""
    if not plan.groups:
        return [Violation("nonempty", "the plan has no group")]
    v: list[Violation] = []
    seen: set[int] = set()
    for gi, g in enumerate(plan.groups):
        where = f"group {gi}"
        if len(g.devices) == 0:
            v.append(Violation("nonempty", f"{where} has no device"))
            continue
        if len(g.cuts) != len(g.devices):
            v.append(Violation("cuts_match_stages",
                               f"{where} has {len(g.devices)} devices but {len(g.cuts)} cut points"))
            continue
        if g.tp_peers and len(g.tp_peers) != len(g.devices):
            v.append(Violation("tp_peers", f"{where} has {len(g.devices)} stages but {len(g.tp_peers)} "
                                           f"tp_peers entries (expected one per stage, or none)"))
            continue
        for d in g.all_devices:
            if not (0 <= d < num_devices):
                v.append(Violation("known_device", f"{where} names device index {d}, but there are "
                                                    f"{num_devices} devices (0..{num_devices - 1})"))
                continue
            if d in seen:
                name = f"{names[d]} (index {d})" if names is not None else f"index {d}"
                v.append(Violation("device_once", f"device {name} appears twice"))
            seen.add(d)
        prev = 0
        for j, c in enumerate(g.cuts):
            if c <= prev:
                v.append(Violation("stage_nonempty", f"{where} stage {j} ends at layer {c} <= its start {prev}"))
            prev = max(prev, c)
        if g.cuts and g.cuts[-1] != num_layers:
            v.append(Violation("layers_covered", f"layer count mismatch: {where} ends at layer "
                                                 f"{g.cuts[-1]}, the model has {num_layers} layers"))
    total = sum(g.share for g in plan.groups)
    if total != batch:
        v.append(Violation("shares_sum", f"shares sum to {total}, the batch is {batch}"))
    return v


def layer_holders(plan: Plan, num_layers: int) -> list[tuple[int, ...]]:
    """Per layer, the devices holding it, in group order (one per group that covers it): the
    one per-layer holder map (gradient buckets, sync rings, migration all derive from it)."""
    out: list[list[int]] = [[] for _ in range(num_layers)]
    for g in plan.groups:
        for d, a, b in g.stages():
            for layer in range(a, min(b, num_layers)):
                out[layer].append(d)
    return [tuple(h) for h in out]


def _group_dict(g: Group) -> dict:
    d = {"devices": [int(x) for x in g.devices], "cuts": [int(c) for c in g.cuts], "share": int(g.share)}
    if g.schedule != "gpipe":
        d["schedule"] = g.schedule
    if g.recompute:
        d["recompute"] = True
    if g.micro_batch is not None:
        d["micro_batch"] = int(g.micro_batch)
    if g.tp_peers:
        d["tp_peers"] = [[int(x) for x in p] for p in g.tp_peers]
    return d


def plan_to_dict(plan: Plan) -> dict:
    """{"groups": [{"devices": [...], "cuts": [...], "share": b}, ...]} (device indices);
    "schedule", "recompute", "micro_batch" and "tp_peers" appear only where they differ from
    "gpipe", false, the workload's u and no TP."""
    return {"groups": [_group_dict(g) for g in plan.groups]}


def plan_from_dict(d: dict) -> Plan:
    """Inverse of plan_to_dict; ValueError on a malformed dict."""
    try:
        return Plan(tuple(Group(tuple(int(x) for x in g["devices"]), tuple(int(x) for x in g["cuts"]),
                                int(g["share"]), str(g.get("schedule", "gpipe")),
                                _flag(g.get("recompute", False)),
                                None if g.get("micro_batch") is None else int(g["micro_batch"]),
                                tuple(tuple(int(x) for x in p) for p in g.get("tp_peers", ())))
                          for g in d["groups"]))
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed plan JSON: {e!r} in {d!r}") from e


def _flag(x: object) -> bool:
    if not isinstance(x, bool):
        raise ValueError(f"malformed plan JSON: recompute: expected true or false, got {x!r}")
    return x


def plan_to_json(plan: Plan | None) -> str:
    """Compact JSON of a plan; "null" for None."""
    return json.dumps(None if plan is None else plan_to_dict(plan), separators=(",", ":"))


def plan_from_json(text: str) -> Plan | None:
    d = json.loads(text)
    return None if d is None else plan_from_dict(d)


def to_units(plan: Plan, state: SlotState) -> tuple[SlotState, Plan]:
    """(unit state, the plan over its units) for a physical plan: one unit per stage of the
    plan (Group.units), then every other device of the slot alone (model.units)."""
    units = [u for g in plan.groups for u in g.units()]
    used = {i for u in units for i in u}
    units += [(i,) for i in range(state.n) if i not in used]
    index = {u: k for k, u in enumerate(units)}
    groups = tuple(replace(g, devices=tuple(index[u] for u in g.units()), tp_peers=()) for g in plan.groups)
    return unit_state(state, units), Plan(groups)


def to_physical(plan: Plan, ustate: SlotState) -> Plan:
    """A plan over the units of `ustate` as a plan over physical devices: each stage's device
    becomes its unit's leader, the rest its TP peers (none when every unit has one device)."""
    if ustate.members is None:
        return plan
    groups = []
    for g in plan.groups:
        units = [ustate.members[d] for d in g.devices]
        peers = tuple(u[1:] for u in units)
        groups.append(replace(g, devices=tuple(u[0] for u in units), tp_peers=peers if any(peers) else ()))
    return Plan(tuple(groups))


def from_physical(plan: Plan, ustate: SlotState) -> Plan | None:
    """A physical plan over the units of `ustate`, or None when some stage of it is not one of
    its units (the inverse of to_physical)."""
    if ustate.members is None:
        return plan
    index = {u: k for k, u in enumerate(ustate.members)}
    groups = []
    for g in plan.groups:
        try:
            groups.append(replace(g, devices=tuple(index[u] for u in g.units()), tp_peers=()))
        except KeyError:
            return None
    return Plan(tuple(groups))


def tp_notes(plan: Plan, state: SlotState) -> tuple[str, ...]:
    """What a TP plan's figures rest on: degrees without measured times for a kind (its times
    are its degree-1 times or FLOP estimates over t plus the modelled all-reduces), measured
    optimizer steps taken over t, and tables without a TP split of the saved activations (kept
    whole on every device)."""
    wl = state.workload
    out: list[str] = []
    for kind, t in sorted({(state.devices[u[0]].kind, len(u)) for g in plan.groups for u in g.units()
                           if len(u) > 1}):
        if not wl.tp_measured(t) or kind not in wl.at_tp(t).measured:
            base = "its measured tp-1 times" if kind in wl.measured else "FLOP estimates"
            out.append(f"kind {kind} at tp {t}: no times measured at that degree in {wl.name!r}; its times are "
                       f"{base} / {t} plus the modelled TP all-reduces")
        if wl.optimizer_step == "measured" and kind in wl.optimizer_seconds:
            out.append(f"kind {kind} at tp {t}: its optimizer step is the measured tp-1 seconds / {t} (each "
                       f"device steps 1/{t} of the parameters)")
        if not wl.tp_measured(t) and wl.tp_unsplit_stash is None:
            out.append(f"tp {t}: {wl.name!r} does not say which saved activations TP splits; all are kept "
                       f"whole on every device (an upper bound)")
    return tuple(dict.fromkeys(out))
