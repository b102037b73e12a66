"""Contention-aware speed factors: a device's speed as its CPU-time speed times the share of a
core it gets, the share depending on how many of the job's processes on its node compute.

Why (measured on this project's 2-core machine, one pinned process per core under load from
other jobs): a compute-bound process got 0.99-1.00 of its core while the job's other process
on the node idled, and 0.80-0.88 while both computed, because the other jobs' processes then
had no free core and took their time from the job's; its CPU seconds per iteration did not
change with the plan. A speed factor fitted on wall seconds in a data-parallel slot therefore
priced the same device 10-23% too slow once the planner moved to that device alone (ours'
usual re-plan in benchmarks/bench_train.py: every such first slot was measured faster than
predicted).

The model. For device d and a plan, k_d is the number of the plan's devices whose processes
run on d's node (runtime.trainer: the torchrun node; a spawned job is one node), negated when
d is a stage of a multi-stage group (its context is then its own: a stage computes beside the
others for only part of the iteration; in the recorded runs p0's CPU-time factor was a median
0.905 as a pipeline stage, 0.83 in data parallelism, 1.01 alone, and a pipeline slot priced on
a data-parallel ratio made ours' move from it to p0 alone measure 53% slower than predicted). d's speed
factor under the plan is
    phi_d = a_d * rho(k_d) * sigma_d(k_d),
a_d its CPU-time factor alone on its node (plan-independent), rho(k) the node's relative
CPU-time rate while k of the plan's devices compute on it (rho(1) = 1: cores that share caches
and memory bandwidth run slower side by side; `TrainConfig.contention` gives a prior for the
one-stage contexts k >= 2, e.g. measured once per machine as bench_train does, else 1; a
pipeline context's rho is 1 until learned), and sigma_d(k) the share of a core
d's stage compute got (CPU seconds of the compute thread over the compute's wall seconds, at
most 1) in the latest slot that ran d at context k. After a slot with d measured (wall factor
phi, share s at context k): sigma_d(k) = s and a_d = phi / (s * rho(k)); once some device has
been measured both alone (k = 1) and at k, rho(k) is the median over such devices of the ratio
of their latest CPU-time factors there, replacing the prior. A device measured at one context
but not yet at k is assumed to get its whole core there (sigma 1, as under `dynpar profile`,
which runs alone), and the row's estimator note says so. A device never measured keeps the
trace's factor. Without CPU seconds (the CUDA path, whose compute waits on the device, or the
hand-written pipeline) sigma is 1 and rho is not used: the plain per-device wall factor.

Why rho: with the compute timed on its own thread, busy ranks got 0.79-1.00 of their core in
every kind of slot (median 0.98), yet p0's CPU-time factor was a median 0.83 in data-parallel
slots (p1 computing on the other core) against 1.01 alone, over the same two runs; without a
prior for rho, ours' first one-device slot after data parallelism was measured 10-30% faster
than predicted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..model import Plan


def contexts(plan: Plan, node_of: Mapping[int, str]) -> dict[int, int]:
    """Device index -> its context: k, how many of the plan's devices run on its node
    (`node_of`: device index -> node name; devices missing from it share one node), negated
    for a stage of a multi-stage group (a stage waits for its neighbours, so it computes
    beside the others for only part of the iteration: a context of its own)."""
    devs = list(plan.devices)
    staged = {d for g in plan.groups if g.num_stages > 1 for d in g.all_devices}
    out = {}
    for d in devs:
        k = sum(1 for e in devs if node_of.get(e, "") == node_of.get(d, ""))
        out[d] = -k if d in staged else k
    return out


@dataclass
class Speeds:
    """The estimator's speed memory: kappa (device -> CPU-time factor alone on its node, a_d),
    sigma ((device, k) -> share of a core), the latest wall factors (device -> phi, what the
    last slot measured), prior (k -> rho(k) given) and seen ((device, k) -> the latest CPU-time
    factor measured at k, for learning rho)."""

    kappa: dict[int, float] = field(default_factory=dict)
    sigma: dict[tuple[int, int], float] = field(default_factory=dict)
    wall: dict[int, float] = field(default_factory=dict)
    prior: dict[int, float] = field(default_factory=dict)
    seen: dict[tuple[int, int], float] = field(default_factory=dict)

    def rho(self, k: int) -> float:
        """The node's relative CPU-time rate at context k (contexts): learned (the median over
        devices measured alone and at k of their CPU-time factor ratio), else the prior (for
        one-stage contexts k >= 2 only), else 1."""
        if k == 1:
            return 1.0
        ratios = sorted(v / self.seen[(d, 1)] for (d, kk), v in self.seen.items()
                        if kk == k and (d, 1) in self.seen and self.seen[(d, 1)] > 0)
        if ratios:
            m = len(ratios)
            return ratios[m // 2] if m % 2 else 0.5 * (ratios[m // 2 - 1] + ratios[m // 2])
        return float(self.prior.get(k, 1.0)) if k > 1 else 1.0

    def factors(self, k_of: Mapping[int, int]) -> tuple[dict[int, float], list[str]]:
        """(device -> phi under contexts `k_of` (device -> k), notes): kappa * sigma for every
        measured device (sigma 1 where d was measured at other contexts but not at its k,
        noted; a device measured without CPU seconds has no shares and kappa is its wall
        factor); devices without a k keep their latest wall factor."""
        out, assumed = dict(self.wall), []
        for d, kap in self.kappa.items():
            k = k_of.get(d)
            if k is None:
                continue
            if not any(e == d for e, _ in self.sigma):  # no CPU seconds: kappa is the wall factor
                out[d] = kap
                continue
            s = self.sigma.get((d, k))
            if s is None:
                s = 1.0
                assumed.append(f"{d}@{k}")
            out[d] = kap * self.rho(k) * s
        notes = [(f"device(s) {', '.join(assumed)} not measured at that many busy devices on the node: "
                  "a whole core assumed (share 1)")] if assumed else []
        return out, notes

    def update(self, wall: Mapping[int, float], shares: Mapping[int, float | None], k_of: Mapping[int, int]) -> None:
        """After a slot: `wall` the fitted wall factors of the measured devices, `shares`
        their compute's CPU share (None: not measured), `k_of` their contexts."""
        for d, phi in wall.items():
            s = shares.get(d)
            self.wall[d] = float(phi)
            if s is None or not s > 0:  # no CPU seconds: the plain wall factor
                self.kappa[d] = float(phi)
                self.sigma = {key: v for key, v in self.sigma.items() if key[0] != d}
                continue
            s, k = min(float(s), 1.0), int(k_of[d])     # one compute thread: above 1 core is timer noise
            self.sigma[(d, k)] = s
            self.seen[(d, k)] = float(phi) / s
            self.kappa[d] = float(phi) / (s * self.rho(k))

    def state_dict(self) -> dict[str, Any]:
        return {"kappa": {str(d): v for d, v in self.kappa.items()},
                "sigma": [[d, k, v] for (d, k), v in sorted(self.sigma.items())],
                "wall": {str(d): v for d, v in self.wall.items()},
                "prior": {str(k): v for k, v in self.prior.items()},
                "seen": [[d, k, v] for (d, k), v in sorted(self.seen.items())]}

    @classmethod
    def from_state(cls, s: Mapping[str, Any] | None, legacy: Mapping[str, float] | None = None,
                   prior: Mapping[int, float] | None = None) -> "Speeds":
        """From state_dict's output (its saved prior replaced by `prior` when given);
        `legacy`: a checkpoint's plain factors (device -> phi) from before contexts, taken as
        wall factors and CPU-time factors with no shares."""
        given = {int(k): float(v) for k, v in (prior or {}).items()}
        if not s:
            f = {int(d): float(v) for d, v in (legacy or {}).items()}
            return cls(dict(f), {}, dict(f), given)
        return cls({int(d): float(v) for d, v in s["kappa"].items()},
                   {(int(d), int(k)): float(v) for d, k, v in s["sigma"]},
                   {int(d): float(v) for d, v in s["wall"].items()},
                   given or {int(k): float(v) for k, v in s.get("prior", {}).items()},
                   {(int(d), int(k)): float(v) for d, k, v in s.get("seen", [])})


def shares_of(compute: Mapping[int, float], compute_cpu: Mapping[int, float | None]) -> dict[int, float | None]:
    """Device -> CPU seconds over wall seconds of its compute (None where not measured)."""
    out: dict[int, float | None] = {}
    for d, w in compute.items():
        c = compute_cpu.get(d)
        out[d] = (float(c) / float(w)) if c is not None and w > 0 else None
    return out

