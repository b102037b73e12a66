"""Per-slot caches, owned by the caller: one `SlotCache` per `SlotState`, passed explicitly
(keyword `cache=`) to the cut DPs (`subproblems.cuts`), the baselines and the search's Scorer.

Nothing here is global: a cache lives as long as its owner keeps it, and two states never
share entries. A function given no cache makes a throwaway one, so results never depend on
whether a cache was passed (only the time does).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..cost.evaluate import Evaluation, evaluate
from ..cost.migration import MigrationFrom
from ..cost.pipeline import GroupCoeffs, group_coeffs, stage_times
from ..cost.sync import sync_time
from ..model.memory import StageMemory, share_cap, stage_memory
from ..model.network import fitted_bandwidth
from ..model.plan import Plan
from ..model.state import SlotState
from . import dp_kernel, edit_bounds
from .dp_kernel import plain_group_arrays

Cuts = tuple[int, ...]
INF = float("inf")
DP_BACKENDS = ("compiled", "numpy")
MAX_CARRIED_COEFFS = 100_000
"""SlotCache.following carries at most this many group coefficients (the newest), so that a
long run of unchanged slots does not grow the cache without bound."""
MAX_STAGE_TIMES = 100_000
"""SlotCache keeps the stage times of at most this many (device order, cuts), and the sync
times of at most this many structures (the oldest go)."""
MAX_BASE_BYTES = 64 << 20
"""SlotCache keeps about this many bytes each of share-free group arrays (device orders), of
boundary rows (device pairs) and of shared DP scratch (counted by its last-layer arrays, which
the frontiers kept beside them are far smaller than); the oldest go first."""


@dataclass(frozen=True, eq=False)
class GroupArrays:
    """Numbers of one ordered group for the cut DPs. Fp, Gp: (k, L+1) prefix sums of forward /
    backward seconds per sample on each stage's device (stage a..c-1 costs Fp[j, c] - Fp[j, a]);
    lam[j, c]: seconds per sample across the boundary after stage j when it ends at layer c
    (inf where c is not a cut point); need[a, c]: bytes a stage a..c-1 needs for `share`
    samples; mem[j]: memory of stage j's device (bytes); cache: the DPs' scratch for this
    group (cost windows, frontiers), kept with it; dp: the cut DP implementation
    (SlotCache.dp_backend); needs: on a state of TP units whose stages differ in degree, the
    need matrix of each stage's degree (need is then stage 0's), else None."""

    devices: tuple[int, ...]
    L: int
    u: int
    Fp: np.ndarray
    Gp: np.ndarray
    lam: np.ndarray
    need: np.ndarray
    mem: np.ndarray
    cache: dict = field(default_factory=dict, repr=False)
    dp: str = "compiled"
    needs: tuple[np.ndarray, ...] | None = None

    def stage_need(self, j: int) -> np.ndarray:
        """The need matrix of stage j."""
        return self.need if self.needs is None else self.needs[j]

    @property
    def nbytes(self) -> int:
        """Rough bytes of these arrays with their DP scratch (fits masks and up to five
        cost-matrix sets of k stages over (L - k + 2)^2 pairs)."""
        k = len(self.devices)
        return 48 * k * (self.L - k + 2) ** 2 + 1024


class SlotCache:
    """What the solver computes more than once in one slot, for one `state`.

    Public API (each entry is computed on first use and kept):
    - `need(share)`: (L+1, L+1) bytes a stage of layers a..c-1 needs for `share` samples;
    - `group_arrays(devices, min_share)`: the cut DPs' arrays of an ordered group (None when
      it has no device or more devices than layers);
    - `single_cuts(device)`: (L,) when the device holds the whole model with one micro-batch,
      else None;
    - `group_coeffs(devices, cuts, schedule, recompute)`: `cost.pipeline.group_coeffs`;
    - `evaluation(plan)`: `cost.evaluate` with the cached group coefficients;
    - `violations(plan)`: `plan.validate(state)`, kept per plan;
    - `migration(previous, plan)`: `cost.migration.migration_time`, receivers kept per previous plan;
    - `baselines`: each baseline's plan, built once per state (baselines.ALL).

    Bounds: at most `max_need_matrices` memory-need matrices (one per share) and about
    `max_array_bytes` bytes of group arrays are kept; the oldest go first.

    dp_backend: the cut DPs' implementation, "compiled" (subproblems.dp_kernel, default) or
    "numpy" (the vectorised reference); both give the same values and cuts.
    """

    def __init__(self, state: SlotState, *, max_need_matrices: int = 32,
                 max_array_bytes: int = 256 << 20, dp_backend: str = "compiled") -> None:
        if dp_backend not in DP_BACKENDS:
            raise ValueError(f"dp_backend: expected one of {DP_BACKENDS}, got {dp_backend!r}")
        self.dp_backend = dp_backend
        self.state = state
        self.max_need_matrices = int(max_need_matrices)
        self.max_array_bytes = int(max_array_bytes)
        self._need: dict[int, np.ndarray] = {}
        self._input_row: np.ndarray | None = None
        self._lives: dict[tuple, np.ndarray] = {}         # _live's rows, per (k, share, schedule, recompute)
        self._maxend_all: np.ndarray | None = None
        self._arrays: dict[tuple, GroupArrays] = {}
        self._arrays_bytes = 0
        self._pairs: dict[tuple[int, int], np.ndarray] = {}
        self._pair_rows: dict[int, np.ndarray] = {}         # per link class (_link), where devices are alike
        self._bases: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._bases_bytes = 0
        self._scratch_bytes = 0
        self._scratches: dict[tuple, dict] = {}
        self._single: dict[int, Cuts | None] = {}
        self._coeffs: dict[tuple, GroupCoeffs] = {}
        self._twin_coeffs: dict[tuple, GroupCoeffs] = {}
        self._twin_cuts: dict[tuple, object] = {}
        self._signatures: dict[tuple[int, ...], tuple] = {}
        self._device_class: list[int] | None = None
        self._alike = False
        self._server_of: list[int] | None = None      # each device's server index (a network), as ints
        self._link_class: dict[tuple, int] = {}
        self._pair_class: dict[tuple[int, int], int] = {}
        self._sync: dict[tuple, float] = {}
        self._stages: dict[tuple, tuple[tuple[np.ndarray, np.ndarray, np.ndarray], StageMemory]] = {}
        """Per (devices, cuts): stage_times and stage_memory, shared by every schedule."""
        self._evaluations: dict[Plan, Evaluation] = {}
        self._violations: dict[Plan, tuple] = {}
        self._migrations: dict[Plan, MigrationFrom] = {}
        self.units: dict[tuple, tuple[SlotState, "SlotCache"]] = {}
        """Per set of TP units (solve.tp): its unit state and that state's own SlotCache."""
        self.sizes: dict[int, "SlotCache"] = {}
        """Per micro-batch size (samples): the SlotCache of this state at that size alone (at_size)."""
        self.carried = 0
        """Entries taken from an earlier slot's cache (SlotCache.following)."""
        self.baselines: dict[str, Plan | None] = {}
        """Per baseline constructor (its function name, baselines.ALL): its plan in this state
        (None: it has none)."""

    @classmethod
    def following(cls, previous: "SlotCache | None", state: SlotState) -> "SlotCache":
        """A cache of `state` that starts with the entries of `previous` (an earlier slot's
        cache) that are exact for it: the memory-need matrices when the workload is the same
        object, and every group's cut-DP arrays, coefficients and single-device cuts whose
        devices all have unchanged inputs (`unchanged_devices`). Plan evaluations (prices),
        baselines and TP unit states (availability) are not carried. `carried` counts the
        entries taken."""
        cache = cls(state, dp_backend=previous.dp_backend if previous is not None else "compiled")
        keep = unchanged_devices(previous.state, state) if previous is not None else None
        if keep is None:
            return cache
        cache._need.update(previous._need)
        for key, ga in previous._arrays.items():
            if keep.issuperset(key[0]):
                cache._keep(key, ga)
        coeffs = list(previous._coeffs.items())[-MAX_CARRIED_COEFFS:]
        cache._coeffs.update((k, gc) for k, gc in coeffs if keep.issuperset(k[0]))
        cache._single.update((d, c) for d, c in previous._single.items() if d in keep)
        cache.carried = len(cache._need) + len(cache._arrays) + len(cache._coeffs) + len(cache._single)
        return cache

    def at_size(self, state: SlotState) -> "SlotCache":
        """The SlotCache of `state`, this cache's state with every group at one micro-batch size
        (solve.micro_batch.single_size), kept here so that every search at that size shares it;
        this cache itself when `state` is its own."""
        if state is self.state:
            return self
        u = int(state.workload.micro_batch)
        got = self.sizes.get(u)
        if got is None or got.state is not state:
            got = self.sizes[u] = SlotCache(state, dp_backend=self.dp_backend)
        return got

    def check(self, state: SlotState) -> None:
        """ValueError unless this cache belongs to `state` (entries of one state are wrong
        for another)."""
        if state is not self.state:
            raise ValueError(f"cache: this SlotCache belongs to slot {self.state.t} of another "
                             f"state object, got slot {state.t}; make one SlotCache per state")

    def need(self, share: int, tp: int = 1) -> np.ndarray:
        """(L+1, L+1) bytes one device of a degree-`tp` stage a..c-1 needs for `share` samples."""
        s = int(share)
        key = s if tp == 1 else (s, int(tp))
        m = self._need.get(key)
        if m is None:
            st = self.state
            wl = st.workload_at(tp)
            pp, sp = st.param_prefix_at(tp), st.stash_prefix_at(tp)
            # fits iff free >= 0 and free >= (s - 1e-9 u) H, free = M - k_opt P (as share_cap rounds)
            m = wl.opt_factor * (pp[None, :] - pp[:, None]) + (s - 1e-9 * wl.micro_batch) * (sp[None, :] - sp[:, None])
            if len(self._need) >= self.max_need_matrices:
                self._need.pop(next(iter(self._need)))
            self._need[key] = m
        return m

    def recompute_need(self, live: int, tp: int = 1) -> np.ndarray:
        """(L+1, L+1) bytes one device of a degree-`tp` stage a..c-1 needs under recomputation
        with `live` stashed samples (model.memory: k_opt P + live I_a + u H, P and H its shard,
        I_a the stage's whole input bytes per sample), with the same 1e-9 u slack on the live
        samples as `need`."""
        key = ("recompute", int(live), int(tp))
        m = self._need.get(key)
        if m is None:
            st = self.state
            wl = st.workload
            pp, sp = st.param_prefix_at(tp), st.stash_prefix_at(tp)
            inp = np.concatenate([[wl.input_bytes], wl.out_bytes])
            m = (wl.opt_factor * (pp[None, :] - pp[:, None]) + wl.micro_batch * (sp[None, :] - sp[:, None])
                 + (live - 1e-9 * wl.micro_batch) * inp[:, None])
            if len(self._need) >= self.max_need_matrices:
                self._need.pop(next(iter(self._need)))
            self._need[key] = m
        return m

    def group_arrays(self, devices: Sequence[int], min_share: int | None = None, schedule: str = "gpipe",
                     recompute: bool = False) -> GroupArrays | None:
        """Arrays of an ordered group for stages within memory for `min_share` samples (default,
        and always for one device: one micro-batch); None when it has no device or more devices
        than layers. Under another (schedule, recompute) than GPipe without recomputation, stage j
        must hold its own peak (model.memory: 1F1B keeps u min(k - j, share / u) samples,
        recomputation stage inputs; on TP units their shards at their degree), and the backward
        side of the DP is F + G under recomputation. The share-free arrays (Fp, Gp, lam) are
        computed once per device order; the DPs' scratch is shared by the groups whose stages
        fit the same layer ranges (`_scratch`)."""
        st = self.state
        wl = st.workload
        L, u = wl.num_layers, wl.micro_batch
        k = len(devices)
        if k == 0 or k > L:
            return None
        s = u if (min_share is None or k == 1) else max(int(min_share), u)
        dev = devices if type(devices) is tuple else tuple(int(x) for x in devices)
        if (schedule, bool(recompute)) != ("gpipe", False) and k > 1:
            return self._variant_arrays(dev, s, schedule, bool(recompute))
        key = (dev, s)
        ga = self._arrays.get(key)
        if ga is not None:
            return ga
        Fp, Gp, lam, mem = self._base(dev)
        if st.tp is None:
            need, needs = self.need(s), None
        else:
            need = self.need(s, st.degree(dev[0]))
            needs = None if len({st.degree(i) for i in dev}) == 1 else tuple(self.need(s, st.degree(i)) for i in dev)
        ga = GroupArrays(dev, L, u, Fp, Gp, lam, need, mem, self._scratch(dev, False, need, needs, mem),
                         dp=self.dp_backend, needs=needs)
        return self._keep(key, ga)

    def _plain(self) -> bool:
        """Whether the fused compiled kernels apply: compiled DPs, no TP units, no fitted bandwidths."""
        st = self.state
        return self.dp_backend == "compiled" and st.tp is None and (st.network is None or st.network.fit is None)

    def plain_applies(self, k: int) -> bool:
        """Whether plain_rule gives arguments for a group of k devices: _plain, 2 <= k <= L."""
        return 2 <= k <= self.state.workload.num_layers and self._plain()

    def plain_rule(self, devices: Sequence[int], min_share: int | None = None, schedule: str = "gpipe",
                   recompute: bool = False) -> tuple | None:
        """dp_rule on a state where _plain holds, in the form of dp_kernel.plain_cut_candidates'
        arguments (the state's prefix rows, links and the order, which the kernel turns into
        the group's rows: nothing kept here); None elsewhere (plain_applies)."""
        k = len(devices)
        if not self.plain_applies(k):
            return None
        st = self.state
        wl = st.workload
        u = wl.micro_batch
        d = np.asarray(devices, dtype=np.int64)
        return (st.fwd_prefix, st.bwd_prefix, wl.out_bytes, st.bandwidth, st.latency, int(u), d,
                st.param_prefix, st.stash_prefix, self._inputs(), float(wl.opt_factor),
                self._live(k, min_share, schedule, recompute), bool(recompute), st.memory_bytes[d])

    def _live(self, k: int, min_share: int | None, schedule: str, recompute: bool) -> np.ndarray:
        """Per stage of a k-stage group, the live samples of `need` /
        `recompute_need`: s - 1e-9 u, with s the share, or 1F1B's u min(k - j, share / u)."""
        key = (k, min_share, schedule, bool(recompute))
        got = self._lives.get(key)
        if got is None:
            u = self.state.workload.micro_batch
            s = u if min_share is None else max(int(min_share), u)
            variant = (schedule, bool(recompute)) != ("gpipe", False)
            n = -(-s // u)
            got = self._lives[key] = np.array([(s if not variant or schedule == "gpipe" else u * min(k - j, n))
                                               - 1e-9 * u for j in range(k)])
        return got

    def dp_rule(self, devices: Sequence[int], min_share: int | None = None, schedule: str = "gpipe",
                recompute: bool = False) -> tuple | None:
        """The arguments of dp_kernel.cut_candidates (before its relax and seeds) for the group
        arrays that group_arrays(devices, min_share, schedule, recompute) would build, where the
        kernel applies (compiled DPs, 2 <= k <= L devices, every stage of one TP degree); else
        None: (Fp, Gp, lam) of the order (_base), the memory rule's prefixes and k_opt at that
        degree, per stage the live samples (_live), the recomputation flag and the devices'
        memory. plain_rule is the cheaper form where it applies."""
        st = self.state
        k = len(devices)
        wl = st.workload
        L, u = wl.num_layers, wl.micro_batch
        if self.dp_backend != "compiled" or k < 2 or k > L:
            return None
        dev = devices if type(devices) is tuple else tuple(int(x) for x in devices)
        rule = self._memory_rule(dev, k, min_share, schedule, recompute)
        if rule is None:
            return None
        t, wt, live, recompute = rule
        Fp, Gp, lam, mem = self._base(dev)
        return (Fp, Gp, lam, st.param_prefix_at(t), st.stash_prefix_at(t), self._inputs(), float(wt.opt_factor),
                float(u), live, bool(recompute), mem)

    def edit_alpha_bounds(self, devices: tuple[int, ...], others: Sequence[int]
                          ) -> dict[tuple[int, ...], float] | None:
        """Lower bounds (seconds per sample) on GPipe's alpha at the min-bottleneck cuts for one
        micro-batch of every one-device edit of the order `devices` (edit_bounds: each device
        of `others` inserted at each position or put in place of each device, each device
        removed), keyed by the edited order; only edits whose bound is finite (inf means that
        no cut set of that order fits, which the caller leaves to the DP). None where the
        fused kernels do not apply (_plain) or a layer time is negative."""
        if not self._plain() or not others:
            return None
        st = self.state
        if self._maxend_all is None:
            wl = st.workload
            if np.any(np.diff(st.fwd_prefix, axis=1) < 0) or np.any(np.diff(st.bwd_prefix, axis=1) < 0):
                self._maxend_all = np.empty((0, 0), dtype=np.int64)
            else:       # every device a row of one-micro-batch GPipe stages (one live figure for all)
                self._maxend_all = dp_kernel.maxend_rule(st.param_prefix, st.stash_prefix, self._inputs(),
                                                         float(wl.opt_factor), float(wl.micro_batch),
                                                         self._live(st.n, None, "gpipe", False), False,
                                                         np.asarray(st.memory_bytes, dtype=float))
        if self._maxend_all.shape[0] == 0:
            return None
        g = np.asarray(devices, dtype=np.int64)
        cand = np.asarray(others, dtype=np.int64)
        ins, rep, rem = edit_bounds.edit_bounds(st.fwd_prefix, st.bwd_prefix, st.workload.out_bytes, st.bandwidth,
                                                st.latency, int(st.workload.micro_batch), g, cand, self._maxend_all)
        out: dict[tuple[int, ...], float] = {}
        k = len(devices)
        for i, x in enumerate(others):
            for p in range(k + 1):
                out[devices[:p] + (x,) + devices[p:]] = float(ins[i, p])
            for p in range(k):
                out[devices[:p] + (x,) + devices[p + 1:]] = float(rep[i, p])
        for p in range(k):
            out[devices[:p] + devices[p + 1:]] = float(rem[p])
        return {key: v for key, v in out.items() if v < np.inf}

    def stage_ends(self, devices: Sequence[int], share: int, schedule: str, recompute: bool, stages: int,
                   position: int) -> np.ndarray | None:
        """(len(devices), L + 1) int64: row i, the last layer c such that devices[i], as stage
        `position` of a `stages`-stage group holding `share` samples under (schedule,
        recompute), holds the stage [a, c) by the cut DPs' own memory rule (dp_rule's live
        samples and prefixes, dp_kernel.maxend_rule); a where no layer fits. None where the
        compiled DPs do not apply (another dp_backend, or devices of mixed TP degrees)."""
        st = self.state
        dev = tuple(int(x) for x in devices)
        if self.dp_backend != "compiled" or not dev:
            return None
        rule = self._memory_rule(dev, stages, share, schedule, recompute)
        if rule is None:
            return None
        t, wt, live, recompute = rule
        return dp_kernel.maxend_rule(st.param_prefix_at(t), st.stash_prefix_at(t), self._inputs(), float(wt.opt_factor),
                                     float(st.workload.micro_batch), np.full(len(dev), float(live[position])),
                                     bool(recompute), np.asarray(st.memory_bytes, dtype=float)[list(dev)])

    def _memory_rule(self, dev: tuple[int, ...], k: int, min_share: int | None, schedule: str, recompute: bool
                     ) -> tuple | None:
        """(TP degree t, the workload at t, per stage the live samples, recompute) of the cut DPs'
        memory rule for a k-stage group of the devices `dev` holding min_share samples (None: one
        micro-batch): each variant's own per-stage peaks (_live), on TP units at their degree;
        None for devices of mixed TP degrees."""
        st, wl = self.state, self.state.workload
        if st.tp is None:
            return 1, wl, self._live(k, min_share, schedule, recompute), bool(recompute)
        degrees = {st.degree(i) for i in dev}
        if len(degrees) > 1:
            return None
        t = degrees.pop()
        return t, st.workload_at(t), self._live(k, min_share, schedule, recompute), bool(recompute)

    def _inputs(self) -> np.ndarray:
        """(L+1,) input bytes per sample of a stage starting at each layer (recompute_need's)."""
        if self._input_row is None:
            wl = self.state.workload
            self._input_row = np.concatenate([[wl.input_bytes], wl.out_bytes])
        return self._input_row

    def _base(self, dev: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(Fp, Gp, lam, mem) of a device order (GroupArrays), which do not depend on the share."""
        got = self._bases.get(dev)
        if got is not None:
            return got
        st = self.state
        wl = st.workload
        L, u, k = wl.num_layers, wl.micro_batch, len(dev)
        d = np.asarray(dev, dtype=int)
        mem = st.memory_bytes[d]
        if st.tp is None and (st.network is None or st.network.fit is None):
            Fp, Gp, lam = plain_group_arrays(st.fwd_prefix, st.bwd_prefix, wl.out_bytes, st.bandwidth, st.latency,
                                             int(u), d)
        else:
            Fp, Gp = st.fwd_prefix[d], st.bwd_prefix[d]
            lam = np.full((max(k - 1, 0), L + 1), INF)
            for j in range(k - 1):
                lam[j] = self._pair_row(dev[j], dev[j + 1])
        got = (Fp, Gp, lam, mem)
        self._bases_bytes += sum(x.nbytes for x in got)
        while self._bases and self._bases_bytes > MAX_BASE_BYTES:
            self._bases_bytes -= sum(x.nbytes for x in self._bases.pop(next(iter(self._bases))))
        self._bases[dev] = got
        return got

    def _pair_row(self, a: int, b: int) -> np.ndarray:
        """(L+1,) seconds per sample across a boundary a -> b ending at each layer c (inf at 0
        and L): the boundary's bytes over the pair's bandwidth, at the micro-batch's message
        size where the network fits one (model.network), plus the latency over u."""
        row = self._pairs.get((a, b))
        if row is None:
            self.device_classes()
            if self._alike:         # links of one class (SlotCache._link) have the same row
                c = self._link(a, b)
                row = self._pair_rows.get(c)
                if row is None:
                    row = self._pair_rows[c] = self._new_pair_row(a, b)
            else:
                row = self._new_pair_row(a, b)
            if len(self._pairs) * row.nbytes >= MAX_BASE_BYTES:
                self._pairs.pop(next(iter(self._pairs)))
            self._pairs[(a, b)] = row
        return row

    def _new_pair_row(self, a: int, b: int) -> np.ndarray:
        """The row of _pair_row, computed."""
        st = self.state
        wl = st.workload
        L, u = wl.num_layers, wl.micro_batch
        row = np.full(L + 1, INF)
        bw = st.bandwidth[a, b]
        lat = st.latency[a, b] / u
        o = wl.out_bytes[: L - 1]
        if st.network is None or st.network.fit is None:
            row[1:L] = o / bw + lat
        else:
            row[1:L] = o / fitted_bandwidth(st.network.fit[a, b][None, :], bw, o * u) + lat
        return row

    def _scratch(self, dev: tuple[int, ...], recompute: bool, need: np.ndarray,
                 needs: tuple[np.ndarray, ...] | None, mem: np.ndarray) -> dict:
        """The cut DPs' scratch dict of a group: with the compiled DPs, one dict per (device
        order, recomputation, last layer each stage may end at from each start), since every
        entry they keep there is a function of Fp, Gp, lam and those last layers alone
        (subproblems.cuts; shares whose memory levels agree share their frontiers). The numpy
        reference keeps its own per group."""
        maxend = dp_kernel.maxend_of(need, needs, mem)
        if self.dp_backend != "compiled":
            return {"maxend": maxend}
        key = (dev, recompute, maxend.tobytes())
        got = self._scratches.get(key)
        if got is None:
            self._scratch_bytes += maxend.nbytes
            while self._scratches and self._scratch_bytes > MAX_BASE_BYTES:
                self._scratch_bytes -= self._scratches.pop(next(iter(self._scratches)))["maxend"].nbytes
            got = self._scratches[key] = {"maxend": maxend}
        return got

    def _variant_arrays(self, devices: tuple[int, ...], s: int, schedule: str, recompute: bool) -> GroupArrays:
        key = (devices, s, schedule, recompute)
        ga = self._arrays.get(key)
        if ga is not None:
            return ga
        base = self.group_arrays(devices, s)
        u, k = base.u, len(devices)
        n = -(-s // u)
        live = [s if schedule == "gpipe" else u * min(k - j, n) for j in range(k)]
        degree = self.state.degree
        needs = tuple(self.recompute_need(x, degree(d)) if recompute else self.need(x, degree(d))
                      for x, d in zip(live, devices))
        Gp = base.Fp + base.Gp if recompute else base.Gp
        ga = GroupArrays(devices, base.L, u, base.Fp, Gp, base.lam, needs[0], base.mem,
                         self._scratch(devices, recompute, needs[0], needs, base.mem), dp=self.dp_backend, needs=needs)
        return self._keep(key, ga)

    def _keep(self, key: tuple, ga: GroupArrays) -> GroupArrays:
        """Store group arrays under key, dropping the oldest beyond max_array_bytes."""
        used = self._arrays_bytes + ga.nbytes
        while self._arrays and used > self.max_array_bytes:
            used -= self._arrays.pop(next(iter(self._arrays))).nbytes
        self._arrays_bytes = used
        self._arrays[key] = ga
        return ga

    def single_cuts(self, device: int) -> Cuts | None:
        """(L,) when `device` alone holds the whole model with one micro-batch, else None."""
        d = int(device)
        if d not in self._single:
            L = self.state.workload.num_layers
            self._single[d] = (L,) if share_cap(self.state, (d,), (L,)) >= self.state.workload.micro_batch else None
        return self._single[d]

    def signature(self, devices: Sequence[int]) -> tuple:
        """A key that two ordered groups share only when every input of their cut DPs and group
        coefficients is the same number: per position the device's class (the same forward and
        backward prefix seconds, memory, busy power, TP degree and server NIC), per boundary the
        link's class (bandwidth, latency, bandwidth fit, whether it stays in one server), and
        which positions share a server (NIC contention). Groups of like devices on like servers
        (a cluster's symmetry) share it, so their cuts (twin_cuts) and coefficients are computed
        once. Kept per device order."""
        dev = devices if type(devices) is tuple else tuple(int(x) for x in devices)
        self.device_classes()
        if not self._alike:
            return dev                          # no two devices alike: every group is its own class
        got = self._signatures.get(dev)
        if got is None:
            cls, pairs = self._device_class, self._pair_class
            links = []
            for ab in zip(dev[:-1], dev[1:]):
                c = pairs.get(ab)
                links.append(self._link(*ab) if c is None else c)
            servers = None
            if self._server_of is not None:     # per position, the first position on its server
                first: dict[int, int] = {}
                server_of = self._server_of
                servers = tuple([first.setdefault(server_of[d], i) for i, d in enumerate(dev)])
            got = (tuple([cls[d] for d in dev]), tuple(links), servers)
            if len(self._signatures) >= MAX_STAGE_TIMES:
                self._signatures.pop(next(iter(self._signatures)))
            self._signatures[dev] = got
        return got

    def device_classes(self) -> list[int]:
        """Per device, its class of `signature` (equal for devices whose cut-DP and group-
        coefficient inputs are the same numbers)."""
        if self._device_class is None:
            self._device_class = self._classes()
            self._alike = len(set(self._device_class)) < len(self._device_class)
            net = self.state.network
            self._server_of = None if net is None else [int(x) for x in net.server]
        return self._device_class

    def _classes(self) -> list[int]:
        """A class per device: equal for devices whose per-device inputs are equal (signature)."""
        st, net = self.state, self.state.network
        ids: dict[tuple, int] = {}
        out = []
        for d in range(st.n):
            key = (st.fwd_prefix[d].tobytes(), st.bwd_prefix[d].tobytes(), float(st.memory_bytes[d]),
                   float(st.extra_power_w[d]), st.degree(d),
                   None if st.members is None else len(st.members[d]),
                   None if net is None else float(net.nic[net.server[d]]))
            out.append(ids.setdefault(key, len(ids)))
        return out

    def _link(self, a: int, b: int) -> int:
        """The class of the link a -> b (kept per pair)."""
        got = self._pair_class.get((a, b))
        if got is None:
            st, net = self.state, self.state.network
            key = (float(st.bandwidth[a, b]), float(st.latency[a, b]),
                   None if net is None or net.fit is None else net.fit[a, b].tobytes(),
                   None if net is None else bool(net.server[a] == net.server[b]))
            got = self._pair_class[(a, b)] = self._link_class.setdefault(key, len(self._link_class))
        return got

    def twin_cuts(self, key: tuple, devices: Sequence[int], compute):
        """compute() (the cut sets of an ordered group: subproblems.cuts), or what it gave for a
        group of the same signature under the same `key` (share, variant, options): their DP
        inputs are the same numbers, so their cut sets are too."""
        full = (self.signature(devices),) + key
        if full not in self._twin_cuts:
            if len(self._twin_cuts) >= MAX_STAGE_TIMES:
                self._twin_cuts.pop(next(iter(self._twin_cuts)))
            self._twin_cuts[full] = compute()
        return self._twin_cuts[full]

    def group_coeffs(self, devices: Sequence[int], cuts: Sequence[int], schedule: str = "gpipe",
                     recompute: bool = False) -> GroupCoeffs:
        """`cost.pipeline.group_coeffs` of an ordered, cut group (those of a group with the same
        signature and cuts, relabelled, when one was computed)."""
        key = (tuple(devices), tuple(cuts), schedule, bool(recompute))
        gc = self._coeffs.get(key)
        if gc is None:
            twin_key = (self.signature(key[0]),) + key[1:]
            twin = self._twin_coeffs.get(twin_key)
            if twin is not None:
                gc = self._coeffs[key] = replace(twin, devices=key[0])
                return gc
            st = self.state
            times = memory = None
            if st.network is not None or st.tp is not None:     # no compiled path: share the stage numbers
                got = self._stages.get(key[:2])
                if got is None:
                    if len(self._stages) >= MAX_STAGE_TIMES:
                        self._stages.pop(next(iter(self._stages)))
                    got = self._stages[key[:2]] = (stage_times(st, devices, cuts), stage_memory(st, devices, cuts))
                times, memory = got
            gc = self._coeffs[key] = group_coeffs(st, devices, cuts, schedule, recompute, times, memory)
            if len(self._twin_coeffs) >= MAX_STAGE_TIMES:
                self._twin_coeffs.pop(next(iter(self._twin_coeffs)))
            self._twin_coeffs[twin_key] = gc
        return gc

    def sync_time(self, structure: tuple) -> float:
        """`cost.sync.sync_time` of a structure ((devices, cuts), ...), kept per structure."""
        v = self._sync.get(structure)
        if v is None:
            if len(self._sync) >= MAX_STAGE_TIMES:
                self._sync.pop(next(iter(self._sync)))
            v = self._sync[structure] = sync_time(self.state, structure)
        return v

    def violations(self, plan: Plan) -> tuple:
        """`plan.validate(state)` as a tuple (empty when the plan is feasible), kept per plan: the
        online controller checks each of a slot's plans (thousands on 256 devices) several times."""
        v = self._violations.get(plan)
        if v is None:
            v = self._violations[plan] = tuple(plan.validate(self.state))
        return v

    def migration(self, previous: Plan | None, plan: Plan) -> float:
        """`cost.migration.migration_time(previous, plan, state)` (seconds); the receivers' times
        from the last few previous plans are kept."""
        if previous is None:
            return 0.0
        m = self._migrations.get(previous)
        if m is None:
            if len(self._migrations) >= 4:
                self._migrations.pop(next(iter(self._migrations)))
            m = self._migrations[previous] = MigrationFrom(previous, self.state)
        return float(m.seconds(plan, self.state))

    def evaluation(self, plan: Plan) -> Evaluation:
        """`cost.evaluate` of a structurally valid plan (the same numbers); groups at another
        micro-batch size than the workload's get their coefficients at that size (evaluate's own)."""
        ev = self._evaluations.get(plan)
        if ev is None:
            u = self.state.workload.micro_batch
            coeffs = [self.group_coeffs(g.devices, g.cuts, g.schedule, g.recompute) for g in plan.groups] \
                if not plan.uses_tp and all(g.micro_batch in (None, u) for g in plan.groups) else None
            ev = self._evaluations[plan] = evaluate(plan, self.state, coeffs, check=False)
        return ev


def unchanged_devices(a: SlotState, b: SlotState) -> set[int] | None:
    """The devices whose inputs to group coefficients and cut DPs are the same in states a and
    b (the same Device, FLOP/s, speed factor and every link from and to it; prices and
    availability do not enter them), or None when the states differ in what every group uses
    (devices, workload, network or TP units)."""
    if a.n != b.n or a.workload is not b.workload or a.network is not b.network \
            or a.tp is not None or b.tp is not None:
        return None
    same = (np.array([x == y for x, y in zip(a.devices, b.devices)], dtype=bool)
            & (a.speed == b.speed) & (a.speed_factor == b.speed_factor)
            & (a.bandwidth == b.bandwidth).all(axis=1) & (a.bandwidth == b.bandwidth).all(axis=0)
            & (a.latency == b.latency).all(axis=1) & (a.latency == b.latency).all(axis=0))
    return {int(i) for i in np.flatnonzero(same)}


def slot_cache(state: SlotState, cache: SlotCache | None = None) -> SlotCache:
    """`cache` after checking that it belongs to `state`, or a new (throwaway) one."""
    if cache is None:
        return SlotCache(state)
    cache.check(state)
    return cache
