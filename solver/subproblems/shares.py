"""Batch shares of a fixed candidate structure (DESIGN.md section 3, "Per-slot solution").

For m groups with group time alpha_g * b_g + beta_g (alpha s/sample, beta s), memory cap
cap_g (samples; model.memory.NO_CAP when unbounded, 0 when not even one micro-batch fits):

    minimise   W * z + sum_g q_g b_g
    subject to alpha_g b_g + beta_g <= z,  sum_g b_g = B,  u <= b_g <= cap_g,  b_g in u * Z

(W = V + sum_k Q_k R_k >= 0 per second, q_g = sum_k Q_k e_kg per sample; T_sync and F_k are
constants and are left out.) Everything exact below works in micro-batch units n_g = b_g / u.

* One group (most calls of the search): b = B when it fits, no LP and no hand-out.

* q constant (q = 0 included): min-max of increasing per-group times. Handing micro-batches out
  one at a time to the group that is fastest after receiving one is exactly optimal; we start
  that hand-out from the floor of the capped water-filling LP solution (only <= m steps remain).
* q not constant: the optimum z is some group's time t_g(n) = alpha_g u n + beta_g. For a fixed
  z each group may take at most min(cap_g, floor((z - beta_g) / (alpha_g u))) micro-batches and
  the cheapest allocation is greedy by q_g. Breakpoints z lie in [z_minmax, z_upper] (z_upper:
  where cost stops falling, or where W z alone exceeds the incumbent), visited in increasing
  z until W z plus the least cost of any allocation exceeds the best value found. Ties at
  equal value go to the smaller z. Both paths run compiled in one call (`shares_kernel`).
* The continuous LP (lp_value, a lower bound) is the capped water fill when q is constant and a
  persistent HiGHS model (ShareLP) otherwise.
* Groups at different micro-batch sizes u_g (b_g in u_g * Z, B a multiple of each): `mixed_shares`,
  exact by a DP over totals 0..B for each candidate z, visited in increasing z under a
  continuous bound (its docstring). Equal sizes take the paths above unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from numba import njit

from .highs import quiet_highs
from .shares_kernel import TOL_N as _TOL_N, hand_out, integer_shares, valid_inputs
from .water import water_fill


@dataclass(frozen=True)
class ShareResult:
    """Shares of one candidate structure.

    shares: samples per group (multiples of u, sum B); z: seconds, max_g alpha_g b_g + beta_g;
    value: W z + q.b for the integer shares; lp_value: the continuous LP optimum (a lower
    bound; nan when not computed); status: "optimal" | "infeasible" | "error".
    """

    shares: tuple[int, ...]
    z: float
    value: float
    lp_value: float
    status: str
    message: str = ""


@dataclass(frozen=True)
class LPSolution:
    """Continuous LP optimum: b samples per group, z seconds (max group time of b), value W z + q.b."""

    b: tuple[float, ...]
    z: float
    value: float
    status: str
    message: str = ""


def _fail(status: str, message: str) -> ShareResult:
    nan = float("nan")
    return ShareResult((), nan, nan, nan, status, message)


def greedy_shares(alpha: Sequence[float], beta: Sequence[float], cap: Sequence[int], B: int, u: int,
                  start: Optional[Sequence[int]] = None) -> np.ndarray:
    """Min-max integer shares (samples): from `start` (micro-batches per group, default one each)
    hand out the remaining micro-batches one at a time to the group whose time after receiving
    it is smallest (ties: lowest index), never above cap. Exactly optimal for max_g time when
    `start` holds only micro-batches no later than the optimum's; if `start` has more than B/u,
    micro-batches are taken back from the currently slowest groups (never below one)
    (`shares_kernel.hand_out`). Needs the caps to hold B."""
    a = np.asarray(alpha, dtype=float) * u
    n = np.ones(len(a), dtype=np.int64) if start is None else np.array(start, dtype=np.int64)
    hand_out(a, np.asarray(beta, dtype=float), np.asarray(cap, dtype=np.int64) // u, B // u, n)
    return n * u


def _fill(x: np.ndarray, extra: int) -> np.ndarray:
    """Row-wise greedy: give `extra` units to columns in order, at most x[:, j] each."""
    before = np.cumsum(x, axis=1) - x
    return np.clip(extra - before, 0, x)


class ShareLP:
    """The continuous share LP on persistent highspy models, one per group count m.

    Columns b_0..b_{m-1} (samples), z (seconds); rows alpha_g b_g - z <= -beta_g and
    sum b = B. A call changes costs, bounds and the alpha coefficients in place and re-runs
    from the previous basis; a model is built only the first time an m is seen (at most
    `max_models` are kept, least recently used dropped). Not thread-safe: use one per thread.
    """

    def __init__(self, max_models: int = 32, persistent: bool = True) -> None:
        import highspy  # ~0.2 s, kept off the import path of callers that never need it
        self._hs = highspy
        self._models: dict[int, tuple[object, np.ndarray]] = {}
        self._max = max_models
        self.persistent = persistent

    def _build(self, m: int) -> tuple[object, np.ndarray]:
        hs = self._hs
        h = quiet_highs()
        lp = hs.HighsLp()
        lp.num_col_, lp.num_row_ = m + 1, m + 1
        inf = hs.kHighsInf
        lp.col_cost_ = np.zeros(m + 1)
        lp.col_lower_ = np.r_[np.zeros(m), -inf]
        lp.col_upper_ = np.full(m + 1, inf)
        lp.row_lower_ = np.r_[np.full(m, -inf), 0.0]
        lp.row_upper_ = np.zeros(m + 1)
        lp.a_matrix_.format_ = hs.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.r_[np.arange(0, 2 * m + 1, 2), 3 * m].astype(np.int32)
        lp.a_matrix_.index_ = np.r_[np.column_stack([np.arange(m), np.full(m, m)]).ravel(),
                                    np.arange(m)].astype(np.int32)
        lp.a_matrix_.value_ = np.r_[np.ones(2 * m), -np.ones(m)]
        h.passModel(lp)
        return h, np.ones(m)

    def _model(self, m: int, fresh: bool) -> tuple[object, np.ndarray]:
        if fresh or not self.persistent or m not in self._models:
            self._models.pop(m, None)
            if len(self._models) >= self._max:
                self._models.pop(next(iter(self._models)))
            self._models[m] = self._build(m)
        else:
            self._models[m] = self._models.pop(m)   # mark most recently used
        return self._models[m]

    def solve(self, alpha: Sequence[float], beta: Sequence[float], cap: Sequence[float], B: float,
              u: float | Sequence[float], W: float, q: Sequence[float]) -> LPSolution:
        """Continuous optimum with u_g <= b_g <= min(cap_g, B) (u one number or one per group);
        status "optimal" or "error"
        (HiGHS's model status is checked on every run; one retry on a freshly built model)."""
        a = np.asarray(alpha, dtype=float)
        c = np.asarray(beta, dtype=float)
        qq = np.asarray(q, dtype=float)
        m = len(a)
        hi = np.minimum(np.asarray(cap, dtype=float), float(B))
        idx = np.arange(m + 1, dtype=np.int32)
        inf = self._hs.kHighsInf
        status = "not run"
        for attempt in range(2):
            h, a_now = self._model(m, fresh=attempt > 0)
            for g in np.flatnonzero(a_now != a):
                h.changeCoeff(int(g), int(g), float(a[g]))
            a_now[:] = a
            h.changeColsCost(m + 1, idx, np.r_[qq, float(W)])
            h.changeColsBounds(m, idx[:m], np.broadcast_to(np.asarray(u, dtype=float), (m,)).copy(), hi)
            h.changeRowsBounds(m + 1, idx, np.r_[np.full(m, -inf), float(B)], np.r_[-c, float(B)])
            h.run()
            ms = h.getModelStatus()
            if ms == self._hs.HighsModelStatus.kOptimal:
                b = np.asarray(h.getSolution().col_value[:m])
                z = float(np.max(a * b + c))
                return LPSolution(tuple(float(x) for x in b), z, float(W) * z + float(qq @ b), "optimal")
            status = h.modelStatusToString(ms)
        return LPSolution((), float("nan"), float("nan"), "error", f"HiGHS model status: {status}")


def solve_shares(alpha: Sequence[float], beta: Sequence[float], cap: Sequence[int], B: int,
                 u: int | Sequence[int], W: float, q: Sequence[float], *, lp: Optional[ShareLP] = None,
                 lp_bound: bool = True) -> ShareResult:
    """Exact integer shares (samples) of one structure; see the module docstring.

    alpha s/sample (> 0), beta s, cap samples (rounded down to a multiple of u), B and u
    samples (B a multiple of u), W >= 0 per second, q per sample. u may be one micro-batch
    size per group (groups training at their own size; B a multiple of each): equal sizes
    take the path above, different ones `mixed_shares`. `lp` is the ShareLP to use
    for the bound when q is not constant (keep one to reuse its HiGHS models across calls; default:
    a new one for this call); lp_bound=False skips that
    LP (lp_value is then nan). Status "infeasible" says why; "error" means bad input or a
    HiGHS failure and carries no plan.
    """
    if not isinstance(u, (int, np.integer)) and np.ndim(u):
        us = [int(x) for x in u]
        if len(us) != len(alpha):
            return _fail("error", f"u: expected one micro-batch size per group ({len(alpha)}), got {len(us)}")
        if len(set(us)) > 1:
            return mixed_shares(alpha, beta, cap, B, us, W, q, lp=lp, lp_bound=lp_bound)
        u = us[0]
    a = np.asarray(alpha, dtype=float)
    c = np.asarray(beta, dtype=float)
    qq = np.asarray(q, dtype=float)
    m = len(a)
    if m == 0 or len(c) != m or len(qq) != m or len(cap) != m:
        return _fail("error", f"need m >= 1 groups with matching lengths (alpha {len(a)}, "
                              f"beta {len(c)}, cap {len(cap)}, q {len(qq)})")
    if u <= 0 or B <= 0 or B % u:
        return _fail("error", f"batch B={B} must be a positive multiple of the micro-batch u={u}")
    if not valid_inputs(a, c, qq):
        return _fail("error", "alpha must be finite and > 0; beta and q finite")
    if not (math.isfinite(W) and W >= 0):
        return _fail("error", f"W={W} must be finite and >= 0")
    N = B // u
    capn = np.minimum(np.asarray(cap, dtype=np.int64) // u, N)
    if m > N:
        return _fail("infeasible", f"{m} groups need at least m*u={m * u} samples but B={B}")
    if capn.min() < 1:
        bad = [int(g) for g in np.flatnonzero(capn < 1)]
        return _fail("infeasible", f"groups {bad} cannot hold one micro-batch of u={u} (cap < u)")
    if int(capn.sum()) < N:
        return _fail("infeasible", f"sum of caps {int(capn.sum()) * u} < B={B}")
    if m == 1:      # the whole batch (it fits, checked above): integer and LP optimum alike
        z = float(a[0] * B + c[0])
        value = float(W) * z + float(qq[0]) * B
        return ShareResult((int(B),), z, value, value, "optimal")
    n, z, z_lp, same_q = integer_shares(a, c, capn, N, int(u), float(W), qq)
    if same_q:
        lp_value = float(W) * z_lp + float(qq[0]) * B
    else:
        lp_value = float("nan")
        if lp_bound:
            sol = (lp if lp is not None else ShareLP()).solve(a, c, capn * u, B, u, W, qq)
            if sol.status != "optimal":
                return _fail("error", f"share LP failed: {sol.message}")
            lp_value = sol.value
    b = n * u
    return ShareResult(tuple(b.tolist()), z, float(W) * z + float(qq @ b), lp_value, "optimal")


def _min_cost_tables(H: np.ndarray, us: np.ndarray, cost: np.ndarray, B: int) -> np.ndarray:
    """DP over groups: row g holds, for every total s = 0..B samples, the least sum of
    cost_h n_h over groups h <= g with 1 <= n_h <= H_h micro-batches and sum u_h n_h = s
    (inf where no such choice exists). Per group, totals are split by residue mod u_g:
    new[r + u j] = cost j + min over the H rows i = j-H .. j-1 of (prev[r + u i] - cost i),
    a trailing-window minimum (`_window_min_tables`, compiled: O(B) per group; the same
    floats as the numpy form it replaced, which doubled windows in O(B log H))."""
    return _window_min_tables(np.ascontiguousarray(H, dtype=np.int64), np.ascontiguousarray(us, dtype=np.int64),
                              np.ascontiguousarray(cost, dtype=float), int(B))


@njit(cache=True)
def _window_min_tables(H: np.ndarray, us: np.ndarray, cost: np.ndarray, B: int) -> np.ndarray:
    """_min_cost_tables' rows (m, B+1): per group and residue r, a monotone deque of the
    starts i whose prev[r + u i] - cost i is least over the window of the last H rows."""
    m = H.shape[0]
    out = np.empty((m, B + 1))
    prev = np.full(B + 1, np.inf)
    prev[0] = 0.0
    J = B + 1
    A = np.empty(J)
    q = np.empty(J, dtype=np.int64)
    for g in range(m):
        u, h, k = us[g], H[g], cost[g]
        rows = (B + 1 + u - 1) // u                 # j = 0 .. rows-1 for every residue
        for r in range(u):
            for i in range(rows):
                s = r + u * i
                A[i] = (prev[s] if s <= B else np.inf) - k * float(i)
            head, tail = 0, 0
            for j in range(rows):
                if j >= 1:                          # start j-1 joins the window
                    v = A[j - 1]
                    while tail > head and A[q[tail - 1]] >= v:
                        tail -= 1
                    q[tail] = j - 1
                    tail += 1
                while tail > head and q[head] < j - h:
                    head += 1
                s = r + u * j
                if s <= B:
                    best = A[q[head]] if tail > head else np.inf
                    out[g, s] = best + k * float(j)
        prev = out[g].copy()
    return out


def mixed_shares(alpha: Sequence[float], beta: Sequence[float], cap: Sequence[int], B: int,
                 u: Sequence[int], W: float, q: Sequence[float], *, lp: Optional[ShareLP] = None,
                 lp_bound: bool = True) -> ShareResult:
    """Exact integer shares when groups train at different micro-batch sizes u_g (samples):
    b_g = u_g n_g with 1 <= n_g <= min(cap_g, B) / u_g and sum b_g = B (B a multiple of each u_g).

    The optimum's z is some group's time t_g(n) = alpha_g u_g n + beta_g. For a fixed z group g
    may take at most H_g(z) micro-batches, and the cheapest exact-sum allocation C(z) is a DP
    over totals 0..B (`_min_cost_tables`, cost q_g u_g per micro-batch). Candidates z are
    visited in increasing order, from the smallest feasible one (binary search: feasibility
    grows with z); a z is solved only when its continuous bound W z + (cheapest fractional
    allocation) is below the incumbent, and the visit stops once W z + min_z C(z) cannot beat
    it; ties at equal value go to the smaller z. Arguments and result as solve_shares."""
    a = np.asarray(alpha, dtype=float)
    c = np.asarray(beta, dtype=float)
    qq = np.asarray(q, dtype=float)
    us = np.asarray(u, dtype=np.int64)
    m = len(a)
    if m == 0 or len(c) != m or len(qq) != m or len(cap) != m or len(us) != m:
        return _fail("error", f"need m >= 1 groups with matching lengths (alpha {len(a)}, beta {len(c)}, "
                              f"cap {len(cap)}, q {len(qq)}, u {len(us)})")
    if B <= 0 or np.any(us <= 0) or np.any(B % us):
        return _fail("error", f"batch B={B} must be a positive multiple of every group's micro-batch u={us.tolist()}")
    if not valid_inputs(a, c, qq):
        return _fail("error", "alpha must be finite and > 0; beta and q finite")
    if not (np.isfinite(W) and W >= 0):
        return _fail("error", f"W={W} must be finite and >= 0")
    capn = np.minimum(np.asarray(cap, dtype=np.int64), B) // us
    if np.any(capn < 1):
        bad = [int(g) for g in np.flatnonzero(capn < 1)]
        return _fail("infeasible", f"groups {bad} cannot hold one micro-batch of their u (cap < u)")
    if int(us.sum()) > B:
        return _fail("infeasible", f"one micro-batch per group needs {int(us.sum())} samples but B={B}")
    au = a * us
    cost = qq * us
    z_all = np.unique(np.concatenate([au[g] * np.arange(1, capn[g] + 1) + c[g] for g in range(m)]))

    def H(z: float) -> np.ndarray:
        return np.minimum(np.floor((z - c) / au + _TOL_N), capn).astype(np.int64)

    def C(z: float) -> tuple[float, list[np.ndarray] | None]:
        h = H(z)
        if np.any(h < 1) or int((h * us).sum()) < B:
            return np.inf, None
        t = _min_cost_tables(h, us, cost, B)
        return float(t[-1][B]), t

    lo_i, hi_i = 0, len(z_all) - 1
    if not np.isfinite(C(float(z_all[hi_i]))[0]):
        return _fail("infeasible", f"no shares in multiples of u={us.tolist()} within the caps "
                                   f"{(capn * us).tolist()} sum to B={B}")
    while lo_i < hi_i:                  # the smallest feasible candidate z
        mid = (lo_i + hi_i) // 2
        if np.isfinite(C(float(z_all[mid]))[0]):
            hi_i = mid
        else:
            lo_i = mid + 1
    z = z_all[lo_i:]
    cost_min = C(float(z[-1]))[0]
    best_z = float(z[0])
    cz, best_t = C(best_z)
    best_f = W * best_z + cz
    tol = 1e-12 * max(1.0, abs(best_f))
    lb = None
    for i in range(1, len(z)):
        zi = float(z[i])
        if W * zi + cost_min >= best_f - tol:
            break
        if lb is None:      # the continuous bound per z (built only when a later z may win: with
            # q constant the first feasible z always does): room above one micro-batch each,
            # cheapest q first, fractional
            order = np.argsort(qq, kind="stable")
            room = np.maximum(np.minimum((z[:, None] - c) / a, (capn * us).astype(float)) - us, 0.0)[:, order]
            lb = W * z + (_fill(room, float(B - us.sum())) @ qq[order]) + float(qq @ us)
        if lb[i] >= best_f - tol:
            continue
        cz, t = C(zi)
        if W * zi + cz < best_f - tol:
            best_f, best_z, best_t = W * zi + cz, zi, t
            tol = 1e-12 * max(1.0, abs(best_f))
    n = np.zeros(m, dtype=np.int64)
    h = H(best_z)
    s = B
    for g in range(m - 1, -1, -1):      # walk the DP back from the total B: each group's least k
        prev = best_t[g - 1] if g else np.r_[0.0, np.full(B, np.inf)]
        target = best_t[g][s]
        k = np.arange(1, min(int(h[g]), s // int(us[g])) + 1)
        hit = np.flatnonzero(prev[s - int(us[g]) * k] + cost[g] * k <= target + 1e-12 * max(1.0, abs(target)))
        if len(hit):
            n[g] = int(k[hit[0]])
            s -= int(us[g]) * int(n[g])
    b = n * us
    zz = float(np.max(a * b + c))
    lp_value = float("nan")
    if lp_bound:
        if np.all(qq == qq[0]):
            _, z_lp = water_fill(a, c, float(B), lo=us.astype(float), cap=(capn * us).astype(float))
            lp_value = float(W) * z_lp + float(qq[0]) * B
        else:
            sol = (lp if lp is not None else ShareLP()).solve(a, c, capn * us, B, us.astype(float), W, qq)
            if sol.status != "optimal":
                return _fail("error", f"share LP failed: {sol.message}")
            lp_value = sol.value
    return ShareResult(tuple(int(x) for x in b), zz, float(W) * zz + float(qq @ b), lp_value, "optimal")
