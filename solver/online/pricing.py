"""The budget price learnt from the run's own history (docs/BUDGETS.md, "The price from history").

The offline optimum over slots 1..n picks, in each slot, the plan that minimises
T + sum_k lambda_k c_k / Cbar_k for one constant price lambda* (seconds of batch time per
budget's worth): the duals of the budget rows of the LP relaxation

    minimise   (1/n) sum_t sum_p x_tp T_tp
    subject to sum_p x_tp = 1                                       for every slot t
               (1/n) sum_t sum_p x_tp y_ktp <= g_k                  for every budget k
               0 <= x_tp

with y = c / Cbar the cost in budgets' worth and g_k the target use. The drift-plus-penalty
controller learns its price Q_k / V from the queue, which swings by a whole slot's excess at
every slot when V is small, so consecutive slots see very different prices (the queue of a
short run rises and falls by tens of percent of a budget in one slot). The price from history
instead solves this LP over the slots seen so far (the current slot included: it is observed
before it is planned, nothing later is read), each slot represented by the plans its searches
scored (the search's candidate pools, Pareto-pruned), and hands the search the weights
Q_k = V lambda_k: the objective V T + sum_k Q_k c_k / Cbar_k is then V (T + lambda . c / Cbar).

Feedback. The target steers the rest of the run back to the limit: with E_k the realised
excess so far (online.tracking) and R the slots left, this one included, g_k = 1 - E_k / R,
so that R more slots at use g_k end with no excess, less a margin (`margin`: MARGIN / sqrt(n)
for n >= 2 slots in the history, less where it would cost more than MARGIN_COST * MARGIN /
sqrt(n) fastest batch times at the price, fading to none in the last slot; none for the first;
at most half the way down to the history's cheapest use of the budget: online.controller._target): g_k = 1 - E_k / R - margin. The price learnt
from n slots is an estimate, and the two ways to miss it do not cost alike under the budget tracker: a slot that
spends more than the trace's price would have eats the tracker's allowance, which no later
slot can lend back (on `default` the first five slots priced money at 0.27-0.36 s per budget's
worth, the whole trace's price is 1.84, and the tracker then replaced two of the expensive
middle slots' plans by ones twice as slow), while money a slot leaves unspent is spent later
(the target rises as E_k falls; the last slots run at price 0 when it is left over). The margin,
like the shrunk budgets of the learning algorithms of online linear programming, asks the
early slots for a little less than the history says; it decays as the history grows (0.071 at
n = 2, 0.022 at 20, 0.007 at the WINDOW's 200), it costs at most MARGIN_COST * MARGIN / sqrt(n)
fastest batch times per slot at the price (where the frontier is steep, lambda_k large, it
shrinks), and it fades with the share of the run left to insure, (R - 1) / (H - 1): none in the
last slot (`margin`). A target the history's plans cannot reach
(alone or together with the others) is met elastically: each budget row has a slack column
costing PRICE_CAP * T_max per budget's worth (T_max the history's slowest batch time), so the
LP always solves, a budget it cannot reach gets the price PRICE_CAP * T_max (the search then
spends as little of it as it can, as docs/BUDGETS.md's rule for an unattainable budget asks),
and `Price.raised` says which. A budget some plan uses more than HOPELESS budgets' worth of
(a limit at 1e-9 of the costs or below) gets that price without the LP.

The window is the last WINDOW slots (a trace whose devices change keeps a price that follows
them). Units: seconds (T), budgets' worth (y), seconds per budget's worth (lambda).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..subproblems.highs import quiet_highs

WINDOW = 200
BRACKET = 3.0     # the frontier of a slot is searched at the last price, and at it times and over this
PRICE_CAP = 1e4  # the elastic budget rows' price, in slowest batch times per budget's worth
HOPELESS = 1e9    # budgets' worth a plan may use and still enter the LP: a budget with a point beyond it
# (its limit 1e-9 of the costs or less, unattainable: tracking.preflight says so) is priced at the cap
# directly, as its elastic row would be, since such numbers break the LP (HiGHS: model status 'Empty')
MAX_POINTS = 64   # per slot, after pruning: the frontier points kept, spread over the batch-time range
TIE = 1e-6         # relative: slot objectives (and frontier points) this close are tied
MARGIN = 0.1      # the target's margin with n slots in the history: MARGIN / sqrt(n) budgets' worth per slot
MARGIN_COST = 3.0  # the margin's first-order cost per slot is at most MARGIN_COST * MARGIN / sqrt(n) fastest batch times
RESHARE = 8       # structures of the slot's pools given the slot LP's shares at the price (online.controller)
FASTEST_TUNING = {"local_starts": 1, "local_max_iter": 10, "final_local_max_iter": 2, "polish_top_small": 1,
                   "polish_top": 1, "polish_rounds": 1}
"""SearchTuning fields of the search for a slot's fastest plan (every queue 0; online.controller):
a third of the local search and polish of a plan search. On the default and geo instances it
finds the same fastest plan in a third of the time; the searches at the price's brackets keep
the full tuning (with none or this light a local search, their pools missed plans the price
then chose, on geo: online / offline 1.037 -> 1.109)."""


def frontier(points: np.ndarray) -> np.ndarray:
    """Rows (T, y_1..y_K) not weakly dominated by another row (duplicates dropped), sorted by T;
    at most MAX_POINTS of them, evenly spread along the sorted frontier (both ends kept)."""
    p = np.unique(np.asarray(points, dtype=float).reshape(-1, points.shape[-1]), axis=0)
    p = p[np.all(np.isfinite(p), axis=1)]
    keep = []
    for i in range(len(p)):   # sorted by T (np.unique sorts rows), so only earlier rows can dominate
        if not any(np.all(p[j] <= p[i]) for j in keep):
            keep.append(i)
    f = p[keep]
    if len(f) > MAX_POINTS:
        f = f[np.unique(np.linspace(0, len(f) - 1, MAX_POINTS).round().astype(int))]
    return f


@dataclass(frozen=True)
class Price:
    """lambda: seconds per budget's worth, per budget (>= 0, at most cap); target: the use
    asked of the LP; raised: per budget, whether the history cannot reach the target (its
    elastic slack is used); cap: the elastic rows' price (s per budget's worth); slots: how many
    slots the LP saw; status: HiGHS's model status in words ("Optimal" when solved); last: the
    LP's weights x_tp of the last slot's points (History.slots[-1], same order; they sum to 1, and
    more than one is positive where the LP randomises in that slot)."""

    lam: tuple[float, ...]
    target: tuple[float, ...]
    raised: tuple[bool, ...]
    cap: float
    slots: int
    status: str
    last: tuple[float, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "Optimal"


@dataclass
class History:
    """Each slot's frontier in (T seconds, y_k budgets' worth), oldest first, and the last
    price (seconds per budget's worth; empty before the first); JSON-able."""

    slots: list[list[list[float]]] = field(default_factory=list)
    lam: list[float] = field(default_factory=list)

    def add(self, points: np.ndarray) -> None:
        """Add (or, called again for the same slot, see `extend_last`) one slot's points."""
        self.slots.append(frontier(np.asarray(points, dtype=float)).tolist())
        del self.slots[:-WINDOW]

    def extend_last(self, points: np.ndarray) -> None:
        """Merge more of the current slot's points (e.g. the pool of the priced search)."""
        if not self.slots:
            raise ValueError("History.extend_last: no slot recorded yet")
        new = np.asarray(points, dtype=float)
        if not new.size:
            return
        new = new.reshape(-1, new.shape[-1])
        both = np.vstack([np.asarray(self.slots[-1], dtype=float).reshape(-1, new.shape[1]), new])
        self.slots[-1] = frontier(both).tolist()

    def price(self, target: Sequence[float]) -> Price:
        """The duals of the budget rows of the LP over the recorded slots (module docstring)."""
        import highspy

        g = np.asarray(target, dtype=float)
        K = len(g)
        pts = [np.asarray(s, dtype=float).reshape(-1, K + 1) for s in self.slots if len(s)]
        n = len(pts)
        if n == 0 or K == 0:
            return Price((0.0,) * K, tuple(g), (False,) * K, 0.0, n, "Optimal")
        sizes = [len(p) for p in pts]
        allp = np.vstack(pts)
        cap = PRICE_CAP * float(allp[:, 0].max())
        far = ~(np.abs(allp[:, 1:]) <= HOPELESS).all(axis=0)
        if far.any():       # priced at the cap, the LP over the other budgets
            rest = History([np.asarray(q)[:, np.r_[True, ~far]].tolist() for q in pts])
            sub = rest.price(g[~far])
            lam, raised, j = [], [], 0
            for k in range(K):
                if far[k]:
                    lam.append(cap), raised.append(True)
                else:
                    lam.append(sub.lam[j]), raised.append(sub.raised[j])
                    j += 1
            return Price(tuple(lam), tuple(float(x) for x in g), tuple(raised), cap, n, sub.status, sub.last)
        N = sum(sizes)
        h = quiet_highs()
        lp = highspy.HighsLp()
        # columns: x_tp (N), then one elastic slack per budget; rows: K budget rows, n slot rows
        lp.num_col_, lp.num_row_ = N + K, K + n
        inf = highspy.kHighsInf
        lp.col_cost_ = np.r_[allp[:, 0] / n, np.full(K, cap)]
        lp.col_lower_ = np.zeros(N + K)
        lp.col_upper_ = np.full(N + K, inf)
        lp.row_lower_ = np.r_[np.full(K, -inf), np.ones(n)]
        lp.row_upper_ = np.r_[g, np.ones(n)]
        slot_of = np.repeat(np.arange(n), sizes)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.r_[np.arange(0, (K + 1) * N + 1, K + 1), (K + 1) * N + 1 + np.arange(K)].astype(np.int32)
        lp.a_matrix_.index_ = np.r_[np.column_stack([np.tile(np.arange(K), (N, 1)), K + slot_of]).ravel(),
                                    np.arange(K)].astype(np.int32)
        lp.a_matrix_.value_ = np.r_[np.column_stack([allp[:, 1:] / n, np.ones(N)]).ravel(), -np.ones(K)]
        h.passModel(lp)
        h.run()
        ms = h.getModelStatus()
        status = h.modelStatusToString(ms)
        if ms != highspy.HighsModelStatus.kOptimal:
            return Price((float("nan"),) * K, tuple(float(x) for x in g), (False,) * K, cap, n, status)
        sol = h.getSolution()
        lam = np.clip(-np.asarray(sol.row_dual[:K], dtype=float), 0.0, cap)
        raised = np.asarray(sol.col_value[N:], dtype=float) > 1e-9
        x_last = np.asarray(sol.col_value[N - sizes[-1]:N], dtype=float)
        return Price(tuple(float(x) for x in lam), tuple(float(x) for x in g), tuple(bool(r) for r in raised), cap, n,
                     status, tuple(float(x) for x in x_last))

    def to_dict(self) -> dict:
        return {"slots": self.slots, "lam": self.lam}

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        return cls([[list(map(float, r)) for r in s] for s in d.get("slots", [])],
                   [float(x) for x in d.get("lam", [])])


def margin(n: int, lam: float, t_fast: float, share: float) -> float:
    """The target's margin (budgets' worth per slot) with n slots in the history:
    MARGIN / sqrt(n) * min(1, MARGIN_COST * t_fast / lam) * share, and 0 for n < 2.

    lam: the budget's last price (s per budget's worth; 0 or less: no price yet, the factor is 1);
    t_fast: this slot's fastest batch time (s); share: the share of the run left to insure after
    this slot, (R - 1) / (H - 1), in [0, 1]. Its cost at the price, lam * margin seconds per slot,
    is then at most MARGIN_COST * MARGIN / sqrt(n) * t_fast. Non-finite or out-of-range
    arguments are an error naming the argument."""
    if not (0.0 <= share <= 1.0):
        raise ValueError(f"margin: share must be in [0, 1], got {share}")
    if not (np.isfinite(lam) and np.isfinite(t_fast) and t_fast >= 0):
        raise ValueError(f"margin: lam and t_fast must be finite (t_fast >= 0), got lam={lam}, t_fast={t_fast}")
    if n < 2:
        return 0.0
    cost = MARGIN_COST * t_fast / lam if lam > MARGIN_COST * t_fast else 1.0   # = min(1, ...), no overflow at tiny lam
    return MARGIN / np.sqrt(n) * cost * share


def lp_weight(price: Price, history: History, point: Sequence[float], rel: float = TIE) -> float:
    """The LP's weight (Price.last) of the last slot's history point equal to `point` (T, y_1..y_K)
    within `rel`; 0 when none is."""
    if not history.slots or not price.last:
        return 0.0
    pts = np.asarray(history.slots[-1], dtype=float)
    v = np.asarray(point, dtype=float)
    hit = np.all(np.abs(pts - v) <= rel * np.maximum(np.abs(v), 1e-12), axis=1)
    return float(np.asarray(price.last)[hit].max()) if hit.any() else 0.0


def points(pool: Sequence[tuple], limits: Sequence[float]) -> np.ndarray:
    """Rows (T, c_1 / Cbar_1, ...) of (plan, batch_time, costs) entries (a search's candidate pool)."""
    lim = np.asarray(limits, dtype=float)
    rows = [(float(T), *(np.asarray(c, dtype=float) / lim)) for _, T, c in pool]
    return np.asarray(rows, dtype=float).reshape(-1, len(lim) + 1)
