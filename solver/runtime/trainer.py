"""The training loop of `dynpar train`: one process per device, the online controller on rank 0.

Every slot (`iterations_per_slot` iterations) rank 0 observes the slot's state (the
instance's trace, limited to the devices present in this job, with the speed factors and
the link estimates (extra latency, bandwidth scale) the estimator drew from the last measurements: runtime.estimator), lets the policy plan it with
the previous plan (migration charged, solver.online.charge_plan), and broadcasts the plan;
every rank migrates blocks and optimizer state to the new holders (runtime.replan) and
trains the slot's iterations (GPipe per group over isend/recv, gradients all-reduced across
groups: every iteration equals single-process full-batch training). A tensor-parallel
stage's ranks hold shards of its layers (runtime.tensor_parallel; its leader in the pipeline,
its peers following: runtime.tp_stage; gradients across groups by shard: runtime.tp_sync);
shards are gathered whole to migrate and to checkpoint. At the slot's end the
ranks report their measured stage compute and iteration seconds to rank 0, whose queues
advance by the measured costs (the cost model's linear costs at the measured batch time plus
the slot's measured migration or checkpoint-restore seconds over its iterations:
cost.costs.cost_coeffs). Checkpoints (runtime.ckpt) every `checkpoint_every` iterations
and after each re-plan; a restarted job resumes from the newest one and re-plans for the
devices then present.

Ranks and devices: rank r runs the instance's device `devices[r]` (an index), given by
the launcher (spawned) or resolved from the device map (torchrun, runtime.binding). A
device named in `cpu_quota` runs in a cgroup of its own (runtime.cpuquota: raised weight,
optional CPU quota and core pin); rank 0 leaves it while it plans.
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..cost import cost_coeffs, group_coeffs
from ..model import Group, Instance, Plan, plan_from_dict, plan_from_json, plan_to_dict
from ..model.state import SlotState
from ..model.plan import plan_to_json
from ..online.charge import charge_plan
from ..online.controller import SlotPlanner, rows_frame, run_result
from ..online.policies import Decision, make_policy
from ..online.pricing import History
from ..online.tracking import Tracker, preflight
from ..online.vrule import VChoice
from ..online.queues import initial_queues, update_queues
from ..online.summary import summarise
from ..solve.options import SolveOptions
from . import ckpt, cpuquota, nodeload
from .estimator import estimate, observed_state, predicted_compute
from .feed import RowFeed
from .layout import StageRole, buckets, flat_holders, layer_units, roles
from .pipeline import pipeline_step, sync_and_step
from .placement import place, synchronizer
from .replan import LayerState, meta_template, migrate, new_layer
from .spec import (Batches, SpecError, blocks_of, check_layer_count, check_loss, check_optimizer, input_shapes,
                   load_factory, tp_refusal)
from .speeds import Speeds, contexts, shares_of
from .tensor_parallel import (
    CollectiveClock,
    Split,
    collective_counts,
    degrees_for,
    gather_pack,
    problems,
    shard_layer,
    stage_roles,
    unshard_layer,
)
from .tp_stage import TPFollower
from .tp_sync import allreduce_pieces, tp_buckets
from .tpipe import TorchStage


@dataclass(frozen=True)
class TrainConfig:
    """One training job.

    model: the MODULE:FACTORY reference (runtime.spec); steps: iterations in all;
    checkpoint_dir: folder of checkpoints (runtime.ckpt), also where slots.csv and
    summary.json go unless `out`; iterations_per_slot: iterations between controller
    decisions; checkpoint_every: iterations between checkpoints (0: only after re-plans);
    V: the controller's penalty weight; policy: a solver.online policy name; budget_tolerance:
    for "ours" on an instance with budgets, the budget tracker's tolerance (a fraction; the
    controller then prices the budgets from its history as `dynpar run` does, and books the
    measured costs: docs/TRAIN.md "Budgets in the training loop"), None: the plain queue
    controller at V; repeat: device
    name -> r, its stage compute is done r times (emulated slow device, real work);
    kill: (device name, step) drill: that device's process kills itself with SIGKILL just
    before iteration `step`; timeout_s: collective timeout (seconds); engine: "torch"
    (groups of several stages run torch.distributed.pipelining: runtime.tpipe) or "hand"
    (every group on the hand-written GPipe of runtime.pipeline); plans: plan JSON per slot
    (the last one repeats) used instead of the policy's (benchmarks, tests; status "given");
    accelerator: "cpu" (gloo) or "cuda" (GPU LOCAL_RANK, NCCL: runtime.placement);
    cpu_quota: device name -> fraction of one core its process may use (emulated slower
    device, the kernel's CPU quota: runtime.cpuquota), cpu_period_us its period; cpu_pin:
    device name -> the one core its process runs on (a device with a cpu_quota only);
    contention: k -> rho, the prior relative CPU-time rate of a device while k of the plan's
    devices compute on its node (runtime.speeds; 1 when not given); probe_alone: in a
    data-parallel slot (`probe_ranks`), one iteration per device runs that device alone on the
    whole batch (the others compute nothing and all-reduce zeros: the same full-batch step),
    which measures its speed alone (context 1) in the job's own conditions (measured as a
    predictor of the next slot on that device alone, it was no better than the node-rate
    prior: docs/TRAIN.md, "Ours' first slot on p0 alone"; off by default)."""

    model: str
    steps: int
    checkpoint_dir: str
    iterations_per_slot: int = 10
    checkpoint_every: int = 0
    V: float = 1.0
    policy: str = "ours"
    out: str | None = None
    repeat: dict[str, int] = field(default_factory=dict)
    kill: tuple[str, int] | None = None
    timeout_s: float = 60.0
    engine: str = "torch"
    plans: tuple[str, ...] = ()
    accelerator: str = "cpu"
    cpu_quota: dict[str, float] = field(default_factory=dict)
    cpu_period_us: int = cpuquota.PERIOD_US
    cpu_pin: dict[str, int] = field(default_factory=dict)
    contention: dict[int, float] = field(default_factory=dict)
    probe_alone: bool = False
    budget_tolerance: float | None = 0.01

    def tracked(self, instance: Instance) -> bool:
        """Whether the budget tracker keeps this job's budgets: policy ours with a tolerance, on an
        instance with budgets, its plans not given."""
        return self.budget_tolerance is not None and self.policy == "ours" and bool(instance.budgets) \
            and not self.plans

    def identity(self, instance: Instance) -> dict[str, Any]:
        """What a checkpoint must agree with to be resumed by this job."""
        wl = instance.workload
        return {"instance": instance.name, "model": self.model, "layers": wl.num_layers, "batch": wl.batch,
                "micro_batch": wl.micro_batch, "iterations_per_slot": self.iterations_per_slot,
                "policy": "given" if self.plans else self.policy, "V": float(self.V),
                "budget_tolerance": None if self.plans else self.budget_tolerance,
                "budgets": [[b.name, b.kind, float(b.limit)] for b in instance.budgets]}


RUNTIME_OPTIONS = SolveOptions(tp_degrees=(1,))
"""The controller's search options without a model to check (no tensor parallelism; activation
recomputation, which the runtime runs with torch.utils.checkpoint: runtime.recompute);
`runtime_options` gives those of a model."""


def runtime_options(blocks: Sequence[torch.nn.Module] | None, cfg: TrainConfig | None = None,
                    no_tp: str | None = None) -> SolveOptions:
    """The controller's search options for a job on `blocks`: the TP degrees at which every
    block can be split (runtime.tensor_parallel.degrees_for), none with emulated slow devices
    (`repeat`, whose extra passes would repeat the TP collectives), where `no_tp` says why
    not (spec.tp_refusal: the optimizer) or on the hand-written engine (cfg.engine "hand",
    which runs TP in one-stage groups only); recomputation anywhere, TP stages included (their
    leader and peers checkpointed alike: runtime.tp_stage); 1F1B except on the hand-written
    engine (GPipe only)."""
    base = replace(RUNTIME_OPTIONS, one_f_one_b=False) if cfg is not None and cfg.engine == "hand" else RUNTIME_OPTIONS
    if blocks is None or no_tp or (cfg is not None and (cfg.engine == "hand" or
                                                        any(int(r) > 1 for r in cfg.repeat.values()))):
        return base
    return replace(base, tp_degrees=degrees_for(blocks))


def pipelined_1f1b(g: Group) -> bool:
    """A 1F1B group of several stages (a one-stage group runs no schedule)."""
    return g.schedule == "1f1b" and g.num_stages > 1


def short_1f1b(g: Group, micro_batch: int) -> bool:
    """A pipelined 1F1B group with fewer micro-batches than stages, which torch.distributed.
    pipelining's 1F1B refuses (the cost model prices it: the GPipe makespan, less memory on
    the last stages)."""
    return pipelined_1f1b(g) and g.share // (g.micro_batch or micro_batch) < g.num_stages


def one_f_one_b_as_gpipe(plan: Plan, state: SlotState, engine: str = "torch") -> tuple[Plan, list[str]]:
    """`plan` with each pipelined 1F1B group the engine cannot run (`short_1f1b` ones on the
    torch engine, every one on the hand-written GPipe engine: plans of the baselines or the
    previous slot bring them) run as GPipe where the GPipe plan fits the slot's memory, and a
    note for each; otherwise `plan` unchanged (`unsupported` then names the group). With n < k
    micro-batches both schedules take the same n + k - 1 steps; otherwise the charge of the
    GPipe plan is the prediction."""
    u = state.workload.micro_batch
    which = [gi for gi, g in enumerate(plan.groups) if short_1f1b(g, u) or (engine == "hand" and pipelined_1f1b(g))]
    if not which:
        return plan, []
    alt = Plan(tuple(replace(g, schedule="gpipe") if gi in which else g for gi, g in enumerate(plan.groups)))
    if alt.validate(state):
        return plan, []
    notes = []
    for gi in which:
        g = plan.groups[gi]
        why = ("torch's 1F1B needs one micro-batch per stage at least; the same batch time" if short_1f1b(g, u)
               else "the hand-written engine runs GPipe only; its batch time priced as GPipe's")
        notes.append(f"group {gi}: 1F1B with {g.share // (g.micro_batch or u)} micro-batches over {g.num_stages} "
                     f"stages runs as GPipe ({why}, its memory checked)")
    return alt, notes


def unsupported(plan: Plan, engine: str = "torch", blocks: Sequence[torch.nn.Module] | None = None,
                no_tp: str | None = None, micro_batch: int | None = None) -> list[str]:
    """The plan features this runtime cannot execute (schedules other than GPipe and 1F1B,
    1F1B or a TP stage inside a pipeline on the hand-written engine, 1F1B with fewer
    micro-batches than stages (`micro_batch`: the workload's, when given), a TP stage whose
    layers cannot be split: runtime.tensor_parallel.problems, any TP stage when `blocks` is not
    given or where `no_tp` says why not: spec.tp_refusal), one line each."""
    out = []
    for gi, g in enumerate(plan.groups):
        sched = getattr(g, "schedule", "gpipe")
        if sched not in ("gpipe", "1f1b"):
            out.append(f"group {gi}: schedule {sched!r} (the runtime executes 'gpipe' and '1f1b')")
        elif engine == "hand" and pipelined_1f1b(g):
            out.append(f"group {gi}: schedule '1f1b' needs engine 'torch' (the hand-written path is GPipe)")
        elif micro_batch is not None and short_1f1b(g, micro_batch):
            out.append(f"group {gi}: 1F1B with {g.share // (g.micro_batch or micro_batch)} micro-batches over "
                       f"{g.num_stages} stages (torch's 1F1B needs one per stage at least, and this group's GPipe "
                       "does not fit its memory)")
        for j, ((d, a, b), peers) in enumerate(zip(g.stages(), g.tp_peers or ())):
            if not peers:
                continue
            where = (f"group {gi}, stage {j} (layers {a}..{b - 1}): tensor parallelism of degree "
                     f"{1 + len(peers)} over devices {[d, *peers]}")
            if blocks is None:
                out.append(f"{where} (no model given to check that its layers split)")
            elif no_tp:
                out.append(f"{where}: {no_tp}")
            elif engine == "hand" and g.num_stages > 1:
                out.append(f"{where} inside a pipeline needs engine 'torch'")
            else:
                out.extend(f"{where}: {p}" for p in problems(blocks[a:b], a, 1 + len(peers)))
    return out


def to_ranks(plan: Plan, rank_of: dict[int, int]) -> Plan:
    """The plan with device indices (TP peers included) replaced by the ranks running them."""
    return Plan(tuple(replace(g, devices=tuple(rank_of[d] for d in g.devices),
                              tp_peers=tuple(tuple(rank_of[d] for d in p) for p in g.tp_peers))
                      for g in plan.groups))


class Controller:
    """Rank 0's online controller: queues, previous plan, speed estimates and rows."""

    def __init__(self, instance: Instance, cfg: TrainConfig, present: np.ndarray,
                 saved: dict[str, Any] | None, node_of: dict[int, str] | None = None,
                 blocks: Sequence[torch.nn.Module] | None = None, no_tp: str | None = None) -> None:
        """blocks: the model's pipeline blocks (templates suffice), for the TP degrees the
        search may use (runtime_options); None: no TP. no_tp: why the job cannot run TP at
        all (spec.tp_refusal), or None."""
        self.inst, self.cfg, self.present, self.no_tp = instance, cfg, present, no_tp
        if blocks is not None and len(runtime_options(blocks, cfg, no_tp).tp_degrees) > 1:
            # the model's TP stages run the runtime's split: price its collectives, not Megatron's rule
            wl = instance.workload
            self.inst = replace(instance, workload=replace(wl, tp_collectives=collective_counts(blocks)))
        self.blocks = blocks
        self.node_of = dict(node_of or {})  # device index -> node name (runtime.speeds contexts)
        self.policy = make_policy(cfg.policy, options=runtime_options(blocks, cfg, no_tp), replan=True,
                                  iterations_per_slot=cfg.iterations_per_slot)
        self.limits = [b.limit for b in instance.budgets]
        s = saved or {}
        self.planner = self._planner(s.get("planner") or {}, runtime_options(blocks, cfg, no_tp))
        self.before: dict[str, Any] | None = None     # the planner's state before the pending slot's decision
        self.queues = tuple(s.get("queues", initial_queues(len(self.limits))))
        prev = s.get("previous_plan")
        self.previous: Plan | None = plan_from_dict(prev) if prev else None
        self.speeds = Speeds.from_state(s.get("speeds"), s.get("factors"), cfg.contention)
        self.delta = float(s.get("delta", 0.0))
        self.beta = float(s.get("beta", 1.0))
        self.tp_latency = float(s.get("tp_latency", instance.tp_collective_latency))
        self.ar_latency = float(s.get("allreduce_latency", instance.allreduce_latency))
        self.rows: list[dict] = list(s.get("rows", []))
        self.restarts = int(s.get("restarts", 0)) + (1 if saved else 0)
        if s.get("policy_state"):
            self.policy.load_state_dict(s["policy_state"])
        self.pending: dict[str, Any] | None = None

    def _planner(self, saved: dict[str, Any], options: SolveOptions) -> SlotPlanner | None:
        """The budget tracker and history price of `dynpar run` (online.controller.SlotPlanner)
        for "ours" on an instance with budgets, unless cfg.budget_tolerance is None or the plans
        are given (None then: the plain controller). Its horizon is the slots this job trains
        (steps / iterations per slot, rounded up); its pre-flight check is on the instance's
        trace (the notes and the levels the tracker keeps), each slot's slack plan is searched on
        the slot's observed state; `saved`: its state in a checkpoint (SlotPlanner.saved)."""
        cfg, inst = self.cfg, self.inst
        if not cfg.tracked(inst):
            return None
        tol = cfg.budget_tolerance
        horizon = min(inst.num_slots, -(-cfg.steps // cfg.iterations_per_slot))
        opts = replace(options, replan=True, iterations_per_slot=cfg.iterations_per_slot)
        pre = preflight(inst, range(horizon), tol, opts)
        for line in pre.lines:      # budgets no plan meets on average, as dynpar run says them
            print(f"note: {line}", file=sys.stderr, flush=True)
        tracker = (Tracker.from_dict(saved["tracker"]) if saved.get("tracker") else
                   Tracker(tol, horizon, pre.targets, pre.tracked,
                           together=[t and not a for t, a in zip(pre.tracked, pre.attainable)]))
        tracker.horizon = horizon   # a job resumed with more --steps keeps the tolerance over all its slots
        return SlotPlanner(inst, self.policy, opts, V=cfg.V, tolerance=tol, rule_tracked=True, tracked=True,
                           priced=True, pre=pre, tracker=tracker,
                           history=History.from_dict(saved["history"]) if saved.get("history") else History(),
                           excess=saved.get("excess") or [0.0] * len(self.limits),
                           vc=VChoice.from_dict(saved["V"]) if saved.get("V") else None, horizon=horizon,
                           end=horizon, carry=saved.get("carry", []), preflight_slack=False)

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps. Inside a slot (decided, not yet finished) the planner's
        is its state before that slot's decision, since a job resumed from it decides the slot
        again (an outside audit: the slot's frontier and tracker count were booked twice)."""
        planner = None
        if self.planner is not None:
            planner = self.before if self.pending is not None and self.before is not None else self.planner.saved()
        return {"planner": planner,
                "queues": list(self.queues), "speeds": self.speeds.state_dict(),
                "delta": self.delta, "beta": self.beta, "tp_latency": self.tp_latency,
                "allreduce_latency": self.ar_latency,
                "previous_plan": plan_to_dict(self.previous) if self.previous else None,
                "rows": self.rows, "restarts": self.restarts, "policy_state": self.policy.state_dict()}

    def decide(self, t: int) -> Plan:
        """Slot t's plan. The policy plans on the speeds with every present device busy
        (runtime.speeds: each device's context k is the present devices on its node); the
        chosen plan is then priced (batch time, costs, migration) on the speeds of its own
        contexts, the prediction the slot is measured against."""
        raw = self.inst.state(t)
        everyone = {d: sum(1 for e in np.flatnonzero(self.present) if self.node_of.get(int(e), "") ==
                           self.node_of.get(int(d), "")) for d in map(int, np.flatnonzero(self.present))}
        state = observed_state(raw, self.present, self.unmeasured(raw, self.speeds.factors(everyone)[0])[0],
                               self.delta, self.beta, self.tp_latency, self.ar_latency)
        if self.cfg.plans:
            d = Decision(plan_from_json(self.cfg.plans[min(t, len(self.cfg.plans) - 1)]), "given")
            bad = d.plan.validate(state)
            if bad:
                raise RuntimeError(f"slot {t}: the given plan does not fit: " + "; ".join(str(v) for v in bad[:3]))
            sd = None
        elif self.planner is not None:
            self.before = json.loads(json.dumps(self.planner.saved()))    # a copy: decide changes the state
            sd = self.planner.decide(t, state, self.queues, self.previous, 0.0, len(self.rows))
            d = sd.decision
        else:
            d, sd = self.policy.decide(state, self.queues, self.cfg.V, self.previous), None
        if d.plan is None:
            raise RuntimeError(f"slot {t}: policy {self.cfg.policy} found no feasible plan on devices "
                               f"{list(state.available_indices)} ({d.message or 'no reason given'})")
        plan, as_gpipe = one_f_one_b_as_gpipe(d.plan, state, self.cfg.engine)
        if as_gpipe:
            d = replace(d, plan=plan)
        bad = unsupported(d.plan, self.cfg.engine, self.blocks, self.no_tp, state.workload.micro_batch)
        if bad:
            raise RuntimeError(f"slot {t}: the plan needs what the runtime cannot execute: {'; '.join(bad)}")
        k_of = contexts(d.plan, self.node_of)
        used, notes = self.speeds.factors(k_of)
        used, more = self.unmeasured(raw, used, d.plan.devices)
        notes = [*as_gpipe, *notes, *more]
        state = observed_state(raw, self.present, used, self.delta, self.beta, self.tp_latency, self.ar_latency)
        ch = charge_plan(d.plan, state, self.previous, replan=True,
                         iterations_per_slot=self.cfg.iterations_per_slot)
        self.pending = {"t": t, "state": state, "decision": d, "charge": ch, "plan": d.plan, "k_of": k_of,
                        "factors": used, "notes": notes, "slot": sd}
        return d.plan

    def unmeasured(self, raw: SlotState, factors: dict[int, float],
                   devices: Sequence[int] | None = None) -> tuple[dict[int, float], list[str]]:
        """`factors` with every present device never measured (of `devices`, default all)
        priced at its trace factor times the median ratio, measured factor over trace factor,
        of the measured devices of its kind on its node, where there are such (the profile's
        seconds drift with the machine: on this project's machine under load p0 measured at
        0.48-0.54 of its profile, and p1, unmeasured at its trace's 1, then looked twice as
        fast as p0 and was chosen alone: +176% to +225% slower than predicted); said in a
        note. Without measured devices of its kind and node, the trace's factor stays."""
        out, said = dict(factors), []
        for d in (devices if devices is not None else map(int, np.flatnonzero(self.present))):
            d = int(d)
            if d in out or d in self.speeds.wall:
                continue
            kind, node = self.inst.devices[d].kind, self.node_of.get(d, "")
            peers = sorted(e for e in self.speeds.wall if e in factors and self.inst.devices[e].kind == kind
                           and self.node_of.get(e, "") == node and raw.speed_factor[e] > 0)
            if not peers:
                continue
            r = float(np.median([factors[e] / float(raw.speed_factor[e]) for e in peers]))
            out[d] = float(raw.speed_factor[d]) * r
            said.append(f"{d}: x{r:.3g} of its trace factor (device(s) {', '.join(map(str, peers))} measured)")
        notes = [f"not measured yet, priced as the measured devices of its kind and node drifted: {'; '.join(said)}"] \
            if said else []
        return out, notes

    def finish(self, measured: dict[str, Any]) -> dict:
        """Close the pending slot with what the ranks measured; return its row: the columns
        of `dynpar run` (batch_time, migration_time, charged_time: predicted; cost_<budget>:
        measured, predicted_cost_<budget>: the cost model's; queues) and the measured ones."""
        p = self.pending
        state, ch, plan = p["state"], p["charge"], p["plan"]
        n_it = max(int(measured.get("ran", self.cfg.iterations_per_slot)), 1)   # fewer in a slot resumed inside
        t_meas = measured["batch_time"]
        charged = t_meas + (measured["migration_s"] + measured["restore_s"]) / n_it
        co = cost_coeffs(state, [group_coeffs(state, g.devices, g.cuts) for g in plan.groups])
        costs = tuple(float(c) for c in co.costs(charged, plan.shares))
        Qn = update_queues(self.queues, costs, self.limits)
        sd = p["slot"]
        if sd is not None:
            self.planner.record(costs)
        d = p["decision"]
        row: dict[str, Any] = {"slot": p["t"], "policy": self.policy.name, "V": float(self.cfg.V),
                               "plan": plan.summary(state), "plan_json": plan_to_json(plan),
                               "n_groups": len(plan.groups), "n_devices": len(plan.devices),
                               "batch_time": ch.batch_time, "migration_time": ch.migration_time,
                               "charged_time": ch.charged_time, "measured_charged_time": charged}
        for k, b in enumerate(state.budgets):
            row[f"cost_{b.name}"] = costs[k]
            row[f"predicted_cost_{b.name}"] = ch.costs[k]
        for k, b in enumerate(state.budgets):
            row[f"queue_{b.name}_before"] = float(self.queues[k])
            row[f"queue_{b.name}_after"] = float(Qn[k])
        row.update(sd.extra if sd is not None else {})
        row.update({"objective": ch.objective(sd.W, sd.V) if sd is not None else ch.objective(self.queues, self.cfg.V),
                    "solve_time": float(d.solve_time), "status": d.status, "message": d.message})
        pred = predicted_compute(plan, state)
        row.update({"measured_batch_time": t_meas, "measured_migration_time": measured["migration_s"],
                    "measured_restore_time": measured["restore_s"],
                    "measured_iterations": measured["iterations"], "restarts": self.restarts,
                    "iteration_times": json.dumps([round(v, 6) for v in measured.get("iteration_s", [])]),
                    "node_load": json.dumps({str(d): v for d, v in measured.get("node", {}).items()}),
                    "compute_times": json.dumps({str(d): [round(v, 6) for v in xs]
                                                 for d, xs in measured.get("compute_s", {}).items()}),
                    "compute_cpu_times": json.dumps({str(d): [None if v is None else round(v, 6) for v in xs]
                                                     for d, xs in measured.get("compute_cpu_s", {}).items()}),
                    "predicted_compute": json.dumps({str(d): v for d, v in pred.items()}),
                    "measured_compute": json.dumps({str(d): v for d, v in measured["compute"].items()}),
                    "measured_parts": json.dumps({str(d): v for d, v in measured.get("parts", {}).items()}),
                    "devices_present": int(self.present.sum()), "extra_latency_used": self.delta,
                    "bandwidth_scale_used": self.beta, "tp_collective_latency_used": self.tp_latency,
                    "allreduce_latency_used": self.ar_latency})
        syncs = [v["sync"] for v in measured.get("parts", {}).values()]
        tp_comm = {d: v["tp_comm"] for d, v in measured.get("parts", {}).items() if "tp_comm" in v}
        est = estimate(p["factors"], self.delta, self.beta, plan, self.inst.state(p["t"]), self.present,
                       measured["compute"], t_meas, min(syncs) if syncs else None, tp_comm, self.tp_latency,
                       self.ar_latency)
        # a TP rank's factor is fitted on its compute outside its collectives (estimator, step 4),
        # so its share of a core is of the same seconds: its thread is blocked, not computing, in them
        shares = shares_of({d: w - float(tp_comm.get(d, 0.0)) for d, w in measured["compute"].items()},
                           measured.get("compute_cpu", {}))
        self.speeds.update({d: est.factors[d] for d in measured["compute"] if d in est.factors}, shares, p["k_of"])
        alone = probe_factors(measured.get("probe", {}), state, self.inst.workload.num_layers)
        if alone:  # each device alone on the whole batch in this slot (TrainConfig.probe_alone): context 1
            self.speeds.update({d: f for d, (f, _) in alone.items()}, {d: sh for d, (_, sh) in alone.items()},
                               {d: 1 for d in alone})
        row.update({"extra_latency": est.delta, "bandwidth_scale": est.beta, "tp_collective_latency": est.tp_latency,
                    "allreduce_latency": est.allreduce_latency,
                    "refit_batch_time": est.refit_batch_time,
                    "speed_factors": json.dumps({str(d): v for d, v in sorted(est.factors.items())}),
                    "speed_factors_used": json.dumps({str(d): p["factors"][d] for d in sorted(plan.devices)
                                                      if d in p["factors"]}),
                    "speed_contexts": json.dumps({str(d): k for d, k in sorted(p["k_of"].items())}),
                    "core_shares": json.dumps({str(d): v for d, v in sorted(shares.items())}),
                    "cpu_factors": json.dumps({str(d): v for d, v in sorted(self.speeds.kappa.items())}),
                    "node_rates": json.dumps({str(k): self.speeds.rho(k) for k in sorted(set(p["k_of"].values()))}),
                    "probe_alone": json.dumps({str(d): {"compute_s": m, "cpu_s": c, "factor": alone[d][0]}
                                               for d, (m, c) in sorted(measured.get("probe", {}).items())}),
                    "estimator_note": "; ".join([*p["notes"], *([est.note] if est.note else [])])})
        self.delta, self.beta, self.tp_latency = est.delta, est.beta, est.tp_latency
        self.ar_latency = est.allreduce_latency
        self.queues, self.previous = Qn, plan
        self.rows.append(row)
        self.pending = None
        return row


def probe_ranks(rplan: Plan, cfg: TrainConfig, num_layers: int, remaining: int) -> list[int]:
    """The ranks (in order) that each run one iteration alone on the whole batch in this slot
    (TrainConfig.probe_alone), [] for none: only where every group is one stage holding every
    layer (data parallelism: each rank holds the whole model), without TP, on the CPU, with
    at least two groups, and with two measured iterations left besides the slot's first and
    the probes (`remaining`: the slot's iterations)."""
    if (not cfg.probe_alone or cfg.accelerator != "cpu" or len(rplan.groups) < 2
            or any(g.num_stages > 1 or any(g.tp_peers) or tuple(g.cuts) != (num_layers,) for g in rplan.groups)):
        return []
    ranks = sorted(d for g in rplan.groups for d in g.devices)
    return ranks if remaining >= len(ranks) + 3 else []


def probe_factors(probed: dict[int, tuple[float, float | None]], state: SlotState,
                  num_layers: int) -> dict[int, tuple[float, float | None]]:
    """Device -> (its wall speed factor alone, its compute's share of a core) from its probe
    iteration (`probed`: device -> compute seconds, CPU seconds): phi = phi_used * P / M, P the
    compute the cost model predicts for it alone on the whole batch at the slot's factor."""
    out: dict[int, tuple[float, float | None]] = {}
    for d, (m, c) in probed.items():
        if not m > 0:
            raise RuntimeError(f"probe of device {d}: expected positive compute seconds, got {m}")
        alone = Plan((Group((d,), (num_layers,), state.workload.batch),))
        pred = predicted_compute(alone, state)[d]
        out[d] = (float(state.speed_factor[d]) * pred / m, (c / m) if c is not None else None)
    return out


def _median(xs: Sequence[float]) -> float:
    xs = list(xs[1:]) if len(xs) > 1 else list(xs)
    return float(statistics.median(xs)) if xs else float("nan")


def _cpu_median(xs: Sequence[float | None], accelerator: str) -> float | None:
    """The median CPU seconds of a rank's compute (the first iteration left out), None where
    not measured or where the compute waits on a device rather than a core (CUDA)."""
    if accelerator != "cpu" or not xs or any(x is None for x in xs):
        return None
    return _median([float(x) for x in xs])


def _log(row: dict, instance: Instance) -> str:
    q = " ".join(f"Q_{b.name}={row[f'queue_{b.name}_after']:.3g}" for b in instance.budgets)
    c = " ".join(f"{b.name}={row[f'cost_{b.name}']:.3g}" for b in instance.budgets)
    return (f"slot {row['slot']}: {row['plan']} | predicted {row['batch_time']:.4g} s, measured "
            f"{row['measured_batch_time']:.4g} s/iter, migration {row['measured_migration_time']:.3g} s, "
            f"restore {row['measured_restore_time']:.3g} s"
            + (f" | costs {c} | {q}" if instance.budgets else " | no budgets")
            + (f" | tracker: {row['tracker']}, price " + " ".join(f"{b.name}={row[f'price_{b.name}']:.3g}"
                                                              for b in instance.budgets)
               if "tracker" in row else ""))


def train_worker(rank: int, world: int, init: str, instance: Instance, cfg: TrainConfig,
                 devices: Sequence[int] | tuple[str, str]) -> None:
    """One process's whole job. devices: the instance device index of each rank, or (under
    torchrun) this process's own (device name, NODE:LOCAL_RANK) as resolved by
    runtime.binding; the ranks then all-gather their devices."""
    torch.set_num_threads(1)
    dev, backend = place(cfg.accelerator, rank)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg.timeout_s),
                            **({"device_id": dev} if dev.type == "cuda" else {}))
    quota = None
    try:
        where = None
        if isinstance(devices, tuple) and len(devices) == 2 and isinstance(devices[0], str):
            devices, where = gather_devices(instance, devices, world)
        me = instance.devices[list(devices)[rank]].name
        cpuquota.check(cfg.cpu_quota, cfg.cpu_pin, [d.name for d in instance.devices])
        if me in cfg.cpu_quota:
            quota = cpuquota.enter(me, float(cfg.cpu_quota[me]), cfg.cpu_period_us, cfg.cpu_pin.get(me))
        _train(rank, instance, cfg, list(devices), where, dev, quota)
        dist.barrier()
    finally:
        dist.destroy_process_group()
        if quota is not None:
            cpuquota.leave(quota)


def gather_devices(instance: Instance, mine: tuple[str, str], world: int) -> tuple[list[int], list[str]]:
    """Every rank's device index and NODE:LOCAL_RANK (collective); one device run by two
    ranks is an error."""
    got: list[Any] = [None] * world
    dist.all_gather_object(got, mine)
    names = [g[0] for g in got]
    index = {d.name: i for i, d in enumerate(instance.devices)}
    seen: dict[str, int] = {}
    for r, n in enumerate(names):
        if n not in index:
            raise SpecError(f"device map: rank {r} binds to {n!r}, not a device of {instance.name!r}")
        if n in seen:
            raise SpecError(f"device map: ranks {seen[n]} and {r} both bind to device {n!r}")
        seen[n] = r
    return [index[n] for n in names], [g[1] for g in got]


def _train(rank: int, inst: Instance, cfg: TrainConfig, devices: list[int], where: list[str] | None,
           dev: torch.device, quota: cpuquota.Quota | None = None) -> None:
    wl = inst.workload
    spec = load_factory(cfg.model)
    check_optimizer(spec.make_optimizer)     # also its lazy imports, before any timing
    blocks = blocks_of(spec.model)
    L, B = len(blocks), wl.batch
    check_layer_count(L, wl.name, wl.num_layers)
    data = Batches(spec.data, B)
    if dev.type == "cpu":       # a factory for cuda may build its model on the GPU
        check_loss(blocks, spec.loss, data, autocast=spec.autocast)
    feed = RowFeed(data, dev)
    shapes = input_shapes(blocks, data.example(), spec.autocast_context(dev))
    templates = [meta_template(b) for b in blocks]
    has_params = [any(True for _ in b.parameters()) for b in blocks]
    rank_of = {d: r for r, d in enumerate(devices)}
    me = inst.devices[devices[rank]].name
    repeat = int(cfg.repeat.get(me, 1))
    present = np.zeros(inst.n, dtype=bool)
    present[devices] = True
    ident = cfg.identity(inst)

    found = ckpt.latest(cfg.checkpoint_dir)
    meta = ckpt.read_meta(found) if found else None
    if meta is not None:
        ckpt.same_job(found, meta, ident)
    step = start = int(meta["step"]) if meta else 0
    node_of = {d: where[r].rsplit(":", 1)[0] for r, d in enumerate(devices)} if where else {}
    ctl = Controller(inst, cfg, present, meta["controller"] if meta else None, node_of, templates,
                     tp_refusal(spec.make_optimizer)) if rank == 0 else None
    if cfg.steps > inst.num_slots * cfg.iterations_per_slot:
        raise SpecError(f"--steps: expected <= num_slots * iterations_per_slot = "
                        f"{inst.num_slots * cfg.iterations_per_slot}, got {cfg.steps}")

    held: dict[int, LayerState] = {}
    holders: list[tuple[int, ...]] | None = None
    tp_key: Any = None
    units: list[tuple[tuple[int, ...], ...]] = []
    groups: dict[tuple[int, ...], Any] = {}
    fresh = True
    tstage: TorchStage | None = None
    tp_clock = CollectiveClock()  # this rank's TP collectives, taken once per iteration
    core = nodeload.own_core() if cfg.accelerator == "cpu" else None
    others, own = nodeload.OtherCores(core), nodeload.OwnCore(core)  # slots.csv node_load
    out = Path(cfg.out or cfg.checkpoint_dir)
    pids: list[Any] = [None] * len(devices)
    dist.all_gather_object(pids, os.getpid())
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        (out / "ranks.json").write_text(json.dumps(
            [{"rank": r, "device": inst.devices[d].name, "pid": pids[r], **({"where": where[r]} if where else {})}
             for r, d in enumerate(devices)], indent=1))
    while step < cfg.steps:
        t = step // cfg.iterations_per_slot
        slot_end = min((t + 1) * cfg.iterations_per_slot, cfg.steps)
        with cpuquota.outside(quota if ctl else None):
            box = [ctl.decide(t) if ctl else None]
        dist.broadcast_object_list(box, src=0)
        plan = box[0]
        rplan = to_ranks(plan, rank_of)
        units = layer_units(rplan, L)
        new = flat_holders(units)
        new_tp = tuple((g.units(), g.cuts) for g in rplan.groups if any(g.tp_peers))
        for key in sorted({tuple(sorted(u)) for g in rplan.groups for u in g.units() if len(u) > 1}):
            if key not in groups:  # the TP stages' groups, before any shard needs one
                groups[key] = dist.new_group(list(key))
        splits = _splits(rplan, rank, templates, groups, tp_clock)
        if fresh:
            dist.barrier()  # every rank started: the restore time excludes start-up
        t0 = time.perf_counter()
        if fresh:
            mine = [i for i in range(L) if rank in new[i]]
            held = (ckpt.load_blocks(found, mine, templates, spec.make_optimizer, dev, spec.make_scheduler)
                    if found else
                    {i: new_layer(blocks[i], dev, spec.make_optimizer, None, spec.make_scheduler) for i in mine})
        else:
            if (new != holders or new_tp != tp_key) and (new_tp or tp_key):  # shards move as whole layers
                held = {i: unshard_layer(s, templates[i], dev, spec.make_optimizer, spec.make_scheduler)
                        if s.split is not None else s for i, s in sorted(held.items())}
            held = migrate(rank, held, holders, new, templates, spec.make_optimizer, dev, spec.make_scheduler)
        for i, sp in splits.items():
            if held[i].split is None:
                held[i] = shard_layer(held[i], templates[i], sp, dev, spec.make_optimizer, spec.make_scheduler)
        tp_key = new_tp
        restored = fresh
        replanned = holders is not None and new != holders
        holders = new
        dist.barrier()
        mig = time.perf_counter() - t0
        bucket_groups = []
        pieces = rplan.uses_tp
        for key, layers in (tp_buckets(rplan, templates, has_params) if pieces else buckets(rplan, L, has_params)).items():
            if key not in groups:  # every rank creates every subgroup, in the same order
                groups[key] = dist.new_group(list(key))
            bucket_groups.append((key, layers, groups[key]))
        reduce = ((lambda bg=bucket_groups, h=held: allreduce_pieces(rank, h, templates, bg)) if pieces else None)
        role = roles(rplan).get(rank)
        if role is not None and role.tp and repeat > 1:
            raise SpecError(f"--repeat {me}={repeat}: {me} holds a tensor-parallel stage (emulated slow devices "
                            "run without TP)")
        piped = [g for g in rplan.groups if g.num_stages > 1] if cfg.engine == "torch" else []
        for key in sorted({tuple(sorted(g.devices)) for g in piped}):
            if key not in groups:
                groups[key] = dist.new_group(list(key))
        if tstage is not None:
            tstage.close()
            tstage = None
        if role is not None and any(rank in g.devices for g in piped):
            g = rplan.groups[role.group]
            tstage = TorchStage(role, {i: held[i].module for i in role.layers}, g.devices,
                                groups[tuple(sorted(g.devices))], g.schedule, g.micro_batch or wl.micro_batch, B,
                                spec.loss, dev, repeat, spec.autocast,
                                groups[tuple(sorted(role.tp))] if role.tp else None, g.recompute)
        elif role is not None and role.tp and any(rank in g.all_devices for g in piped):
            g = rplan.groups[role.group]
            tstage = TPFollower(role, torch.nn.Sequential(*(held[i].module for i in role.layers)),
                                groups[tuple(sorted(role.tp))], shapes[role.first][0], shapes[role.first][1],
                                g.micro_batch or wl.micro_batch, B, dev, spec.autocast, synchronizer(dev),
                                g.recompute)
        if replanned or fresh:
            _checkpoint(cfg, step, rank, held, holders, ctl, ident, plan, units, templates)
        fresh = False
        mine_layers = list(role.layers) if role is not None else []
        owned = [i for i in mine_layers if rank in units[i][0]]
        elapsed, compute, piped_s, sync_s, step_s, cpu, compute_cpu, tp_s = [], [], [], [], [], [], [], []
        alone = role is not None and role.prev is None and role.next is None
        others.reset()
        own.start()
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        probes = probe_ranks(rplan, cfg, L, slot_end - step)
        probed: dict[int, tuple[float, float]] = {}
        done = 0
        while step < slot_end:
            if cfg.kill and cfg.kill == (me, step):
                os.kill(os.getpid(), signal.SIGKILL)
            dist.barrier()
            if probes and 1 <= done <= len(probes):
                # probes[done - 1] alone on the whole batch; the others' gradients are zeros, so the
                # all-reduce gives everyone the full-batch gradient (the same step as any plan)
                if rank == probes[done - 1]:
                    s0, th0 = time.perf_counter(), time.thread_time()
                    x, y = data.rows(step, 0, B)
                    pipeline_step(StageRole(0, 0, 0, L, None, None, B, 0), {i: held[i].module for i in range(L)},
                                  x.to(dev), y.to(dev), spec.loss, wl.micro_batch, B, shapes[0][0], shapes[0][1],
                                  dev, None, repeat, step, spec.autocast)
                    probed[devices[rank]] = (time.perf_counter() - s0, time.thread_time() - th0)
                sync_and_step(rank, held, mine_layers, bucket_groups, spec.clip_norm, owned, dev, reduce)
                done += 1
                step += 1
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < slot_end:
                    _checkpoint(cfg, step, rank, held, holders, ctl, ident, plan, units, templates)
                continue
            done += 1
            tp_clock.take()
            if elapsed:
                others.start()  # the slot's first iteration, left out of the medians, is left out of u too
            s0, p0, th0 = time.perf_counter(), time.process_time(), time.thread_time()
            c = 0.0
            c_cpu: float | None = None
            if role is not None:
                rows = (role.offset, role.offset + role.share)
                x, y = feed.get(step, *rows)
                if tstage is not None:
                    f, b = tstage.step(x if role.prev is None else None, y if role.next is None else None, step)
                    c_cpu = tstage.clock.cpu_s
                else:
                    f, b = pipeline_step(role, {i: held[i].module for i in role.layers},
                                         x if role.prev is None else None, y if role.next is None else None,
                                         spec.loss, rplan.groups[role.group].micro_batch or wl.micro_batch, B,
                                         shapes[role.first][0], shapes[role.first][1], dev, None, repeat, step,
                                         spec.autocast, rplan.groups[role.group].recompute)
                c = f + b
            s1 = time.perf_counter()
            others.stop()
            tp_s.append(tp_clock.take()[1])
            if alone:
                c_cpu = time.thread_time() - th0
            sy = sync_and_step(rank, held, mine_layers, bucket_groups, spec.clip_norm, owned, dev, reduce)
            s2 = time.perf_counter()
            elapsed.append(s2 - s0)
            cpu.append((time.process_time() - p0) / max(s2 - s0, 1e-12))
            # a one-stage group waits for nothing: its whole step (rows, loss, scaling) is its compute
            compute.append(s1 - s0 if alone else c)
            compute_cpu.append(c_cpu)
            piped_s.append(s1 - s0)
            sync_s.append(sy)
            step_s.append(s2 - s1 - sy)
            step += 1
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < slot_end:
                _checkpoint(cfg, step, rank, held, holders, ctl, ident, plan, units, templates)
        report = [None] * dist.get_world_size()
        dist.all_gather_object(report, (devices[rank], role is not None, elapsed, compute, mig, restored,
                                        {"pipeline": piped_s, "sync": sync_s, "step": step_s,
                                         "cpu_share": cpu, **_peak(dev),
                                         **({"tp_comm": tp_s} if role is not None and role.tp
                                                              else {})}, compute_cpu,
                                        nodeload.report(others, own), probed))
        if ctl:
            it = np.max(np.array([r[2] for r in report]), axis=0)
            moved = max(r[4] for r in report)
            measured = {"batch_time": _median(list(it)), "iteration_s": [float(v) for v in it],
                        "migration_s": 0.0 if restored else moved,
                        "restore_s": moved if restored else 0.0,
                        "iterations": len(it), "ran": done,
                        "compute": {r[0]: _median(r[3]) for r in report if r[1]},
                        "compute_cpu": {r[0]: _cpu_median(r[7], cfg.accelerator) for r in report if r[1]},
                        "parts": {r[0]: {k: _median(v) for k, v in r[6].items()} for r in report if r[1]},
                        "node": {r[0]: r[8] for r in report},
                        "probe": {d: v for r in report for d, v in r[9].items()},
                        "compute_s": {r[0]: [float(v) for v in r[3]] for r in report if r[1]},
                        "compute_cpu_s": {r[0]: [None if v is None else float(v) for v in r[7]]
                                          for r in report if r[1]}}
            with cpuquota.outside(quota):
                print(_log(ctl.finish(measured), inst), flush=True)
                _write_results(ctl, inst, out)
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
            # at a slot's end: after the controller booked the slot (its row, queues, tracker), so a
            # job resumed from here does not lose the slot (an outside audit: checkpointed before)
            _checkpoint(cfg, step, rank, held, holders, ctl, ident, plan, units, templates)
    feed.close()
    if step > start:   # a job that had nothing left to train leaves its newest checkpoint as it was
        _checkpoint(cfg, step, rank, held, holders, ctl, ident, None, units, templates)
        if rank == 0:
            _write_results(ctl, inst, out)


def _peak(dev: torch.device) -> dict[str, list[float]]:
    """On a GPU: {"peak_bytes": [the most bytes torch's allocator held on it this slot]}."""
    return {"peak_bytes": [float(torch.cuda.max_memory_allocated(dev))]} if dev.type == "cuda" else {}


def _splits(rplan: Plan, rank: int, templates: Sequence[torch.nn.Module], groups: dict,
            clock: CollectiveClock | None = None) -> dict[int, Split]:
    """Layer -> this rank's shard of it, for the layers of this rank's stage when that
    stage is tensor-parallel (plan in ranks; `groups`: sorted ranks -> process group;
    `clock`: the rank's CollectiveClock, timing the shards' collectives)."""
    for g in rplan.groups:
        for (_, a, b), unit in zip(g.stages(), g.units()):
            if rank in unit and len(unit) > 1:
                roles_ = stage_roles(templates[a:b])
                pg = groups[tuple(sorted(unit))]
                return {i: Split(i, sorted(unit).index(rank), len(unit), tuple(unit), roles_[i - a], pg, clock)
                        for i in range(a, b)}
    return {}


def _checkpoint(cfg: TrainConfig, step: int, rank: int, held: dict[int, LayerState],
                holders: list[tuple[int, ...]], ctl: Controller | None, ident: dict, plan: Plan | None,
                units: list[tuple[tuple[int, ...], ...]], templates: Sequence[torch.nn.Module]) -> None:
    """Save at `step`. The controller's state is the one before deciding slot step //
    iterations_per_slot, with the running plan as the previous plan (what a resumed job
    migrates from). A layer whose first holder is a TP stage is gathered whole to its
    leader first (collective over the stage's ranks), so block files hold whole layers."""
    packs = {}
    for i, s in sorted(held.items()):
        if s.split is not None and units[i][0] == s.split.ranks:
            full = gather_pack(s.pack(), templates[i], s.split)
            if rank == s.split.ranks[0]:  # the leader writes
                packs[i] = full
    meta = None
    if ctl is not None:
        state = ctl.state_dict()
        if plan is not None:
            state["previous_plan"] = plan_to_dict(plan)
        meta = {"identity": ident, "controller": state, "seed_state": {"step": step}, "config": asdict(cfg)}
    ckpt.save(cfg.checkpoint_dir, step, rank, held, holders, meta, packs)


def budget_note(instance: Instance, cfg: TrainConfig) -> str | None:
    """The line that says how the training loop's controller keeps the instance's budgets (None
    without budgets or with given plans): as `dynpar run` does (ours with a tolerance), or by
    the queues alone."""
    if not instance.budgets or cfg.plans:
        return None
    names = ", ".join(b.name for b in instance.budgets)
    if cfg.tracked(instance):
        return (f"budgets ({names}): kept within {100 * cfg.budget_tolerance:g}% by dynpar run's budget tracker and "
                "history price on the measured costs; the tracker admits plans by their predicted costs, so a "
                "slot that costs more than predicted can take the run past the tolerance (docs/TRAIN.md)")
    if cfg.policy != "ours":
        return (f"budgets ({names}): policy {cfg.policy} is not kept to them (only ours is tracked); its queues "
                "advance by the measured costs as bookkeeping, and bound the overshoot (bound_<budget> in "
                "summary.json) only where the policy weighs them (docs/TRAIN.md)")
    return (f"budgets ({names}): dynpar train's controller prices them by their virtual queues on the measured "
            f"costs at V = {cfg.V:g} (--V; the article's drift-plus-penalty controller), without the budget "
            "tracker (--budget-tolerance off): the average cost is bounded only by guarantee (a), the final queue "
            "over the slots (bound_<budget> in summary.json) (docs/TRAIN.md)")


def _write_results(ctl: Controller, inst: Instance, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    df = rows_frame(ctl.rows)
    df.to_csv(out / "slots.csv", index=False)
    note = budget_note(inst, ctl.cfg)
    pl = ctl.planner
    if pl is not None and len(df):    # dynpar run's summary of a tracked run, from the measured costs
        summary = run_result(inst, df, pl.vc, pl.tracker, pl.pre, pl.tolerance, ctl.policy, "history").summary
        summary["notes"] = [note, *summary["notes"]]
    else:
        summary = summarise(df, inst)
        summary.update(V=float(ctl.cfg.V), pricing="queue" if inst.budgets else None, budget_tolerance=None,
                       notes=[note] if note else [])
    if len(df):
        summary["avg_measured_batch_time"] = float(df["measured_batch_time"].mean())
        summary["restarts"] = int(ctl.restarts)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))


def final_state(checkpoint_dir: str | os.PathLike, num_blocks: int) -> dict[str, torch.Tensor]:
    """The trained parameters and buffers of the newest checkpoint, keyed like the
    nn.Sequential of the blocks ('<block>.<name>')."""
    path = ckpt.latest(checkpoint_dir)
    if path is None:
        raise FileNotFoundError(f"no checkpoint in {checkpoint_dir}")
    out = {}
    for i in range(num_blocks):
        st = torch.load(path / f"block-{i:04d}.pt", map_location="cpu", weights_only=True)
        out.update({f"{i}.{k}": v for k, v in st["module"].items()})
    return out
