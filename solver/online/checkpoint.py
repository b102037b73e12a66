"""The controller's saved state: everything needed to continue a run, as JSON.

With state_path, run_online writes the controller state (queues, previous plan, the policy's
own state, next slot and every row so far) to a JSON file after each slot (atomically), and a
later call with the same path continues from it: a run stopped after slot t and resumed gives
exactly the rows of an unbroken run (solve_time aside). `extra` holds the run's first slot, the V
in force (online.vrule) and the budget tracker's state (online.tracking). A saved run resumes only
with the same settings and inputs (`run_config`, `inputs_digest`), and only as it was written: the
file carries a SHA-256 of its own contents (`content_digest`), so a state changed by hand or
damaged (a queue, a row, the next slot) is refused rather than continued.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..model.plan import Plan, plan_from_dict, plan_to_dict
from ..model.state import Instance

STATE_VERSION = 3


def content_digest(payload: dict) -> str:
    """SHA-256 of `payload` as JSON gives it back (keys sorted): the same for the dict written
    and the dict read from the file."""
    canonical = json.dumps(json.loads(json.dumps(payload, allow_nan=True)), sort_keys=True, allow_nan=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class ControllerState:
    """Everything needed to continue a run: JSON-able."""

    config: dict
    next_slot: int
    queues: tuple[float, ...]
    previous_plan: Plan | None
    policy_state: dict
    rows: list[dict]
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        payload = {"version": STATE_VERSION, "config": self.config, "next_slot": self.next_slot,
                   "queues": list(self.queues),
                   "previous_plan": None if self.previous_plan is None else plan_to_dict(self.previous_plan),
                   "policy_state": self.policy_state, "rows": self.rows, "extra": self.extra}
        return {**payload, "digest": content_digest(payload)}

    @classmethod
    def from_dict(cls, d: Any) -> "ControllerState":
        if not isinstance(d, dict):
            raise ValueError(f"expected a JSON object, got {type(d).__name__}")
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"controller state version {d.get('version')!r}, expected {STATE_VERSION}")
        payload = {k: v for k, v in d.items() if k != "digest"}
        if d.get("digest") != content_digest(payload):
            raise ValueError("its contents differ from what the run wrote (the SHA-256 in 'digest' does not "
                             "match: changed by hand or damaged)")
        prev = d.get("previous_plan")
        return cls(d["config"], int(d["next_slot"]), tuple(float(q) for q in d["queues"]),
                   None if prev is None else plan_from_dict(prev), d.get("policy_state", {}), list(d["rows"]),
                   dict(d.get("extra") or {}))

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file, then rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), allow_nan=True))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ControllerState":
        """The state saved at `path`; ValueError naming the file when it is not one."""
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"controller state {path}: not a saved run ({type(e).__name__}: {e}); delete it to "
                             f"start afresh") from None


def inputs_digest(instance: Instance) -> str:
    """A SHA-256 of everything in `instance` that plans depend on (workload, devices, network,
    traces, budgets: every field but where it was read from, arrays by their bytes), so that a saved run is resumed only
    on the same inputs."""
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, np.ndarray):
            h.update(f"array{x.shape}{x.dtype}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            h.update(type(x).__name__.encode())
            for f in dataclasses.fields(x):
                if f.name == "source":      # where the instance was read from: moving its folder changes nothing
                    continue
                h.update(f.name.encode())
                feed(getattr(x, f.name))
        elif isinstance(x, (tuple, list)):
            h.update(f"seq{len(x)}".encode())
            for v in x:
                feed(v)
        elif isinstance(x, dict):
            h.update(f"map{len(x)}".encode())
            for k in sorted(x, key=repr):
                feed(k)
                feed(x[k])
        else:
            h.update(repr(x).encode())
    feed(instance)
    return h.hexdigest()


def run_config(instance: Instance, policy: str, V: float | None, replan: bool, iterations_per_slot: int,
               options: Any, budget_tolerance: float | None = None, pricing: str = "queue") -> dict:
    """The settings a saved run must match to be resumed (JSON-ready)."""
    return {"instance": instance.name, "num_slots": instance.num_slots, "policy": policy,
            "V": None if V is None else float(V), "budget_tolerance": budget_tolerance, "pricing": pricing,
            "replan": bool(replan), "iterations_per_slot": int(iterations_per_slot),
            "options": repr(options), "budgets": [[b.name, b.kind, float(b.limit)] for b in instance.budgets],
            "inputs": inputs_digest(instance)}
