"""subproblems.edit_bounds: the bounds on one-device edits of an order are lower bounds on
GPipe's alpha at the min-bottleneck cuts of each edited order (and tight where the cuts that
minimise X also minimise Y), finite exactly where the edited order has cuts; the local search's
pruning with them and with the pipeline work floor returns the same plans."""
from __future__ import annotations

import numpy as np
import pytest

from solver.io.synthetic import random_state
from solver.solve import solve_slot
from solver.solve.local import _cannot_win
from solver.solve.options import SolveOptions
from solver.solve.scoring import Scorer
from solver.subproblems.cache import SlotCache
from solver.subproblems.cuts import min_bottleneck_cuts


@pytest.mark.parametrize("seed", range(8))
def test_edit_bounds_are_lower_bounds_on_alpha(seed):
    rng = np.random.default_rng(31_000 + seed)
    n = int(rng.integers(3, 10))
    state = random_state(31_000 + seed, n=n, L=int(rng.choice([5, 12, 40, 90])),
                         scale=float(rng.choice([1.0, 10.0, 30.0])))
    sc = SlotCache(state)
    av = list(state.available_indices)
    tight = total = 0
    for _ in range(4):
        k = int(rng.integers(1, min(len(av), 5) + 1))
        g = tuple(int(x) for x in rng.permutation(av)[:k])
        others = [d for d in av if d not in g]
        bounds = sc.edit_alpha_bounds(g, others)
        if not others:
            assert bounds is None
            continue
        edited = {g[:p] + (x,) + g[p:] for x in others for p in range(k + 1)}
        edited |= {g[:p] + (x,) + g[p + 1:] for x in others for p in range(k)}
        edited |= {g[:p] + g[p + 1:] for p in range(k) if k > 1}
        assert set(bounds) <= edited
        for order in edited:
            cuts = min_bottleneck_cuts(state, order, cache=sc)
            if cuts is None:
                assert order not in bounds, (order, bounds.get(order))
                continue
            assert order in bounds, order
            alpha = sc.group_coeffs(order, cuts).alpha
            assert bounds[order] <= alpha * (1 + 1e-12), (order, bounds[order], alpha)
            total += 1
            tight += bounds[order] >= alpha * (1 - 1e-12)
    assert total == 0 or tight > 0


@pytest.mark.parametrize("seed", range(4))
def test_cannot_win_never_prunes_a_better_structure(seed):
    """Every ordered-neighbour structure _cannot_win rejects scores above the incumbent."""
    state = random_state(32_000 + seed, n=8, L=30)
    sc = Scorer(state, np.zeros(len(state.budgets)), 1.0, SolveOptions(), None)
    res = solve_slot(state)
    sc.score(tuple((g.devices, g.cuts) for g in res.plan.groups))
    groups = [g.devices for g in res.plan.groups]
    sc.note_edits(groups)
    av = list(state.available_indices)
    pruned = 0
    for d in av:
        if any(d in g for g in groups):
            continue
        for p in range(len(groups[0]) + 1):
            ng = [groups[0][:p] + (d,) + groups[0][p:]] + groups[1:]
            if _cannot_win(sc, ng):
                pruned += 1
                got = sc.score_groups(ng, prune=False)
                assert got is None or got.objective > sc.best.objective
    assert pruned >= 1     # the bound does reject some insertions here


@pytest.mark.parametrize("seed", range(4))
def test_cannot_win_does_not_count_a_group_that_is_dropped(seed):
    """A one-device group that cannot hold the model is dropped by score_groups, so adding it
    to a structure never makes _cannot_win prune what it would not prune without it (its work
    floor and its price do not count; its throughput only weakens B / T)."""
    state = random_state(33_000 + seed, n=8, L=30, scale=10.0)
    sc = Scorer(state, np.array([1.0, 0.5, 2.0][:len(state.budgets)]), 1.0, SolveOptions(), None)
    res = solve_slot(state, [1.0, 0.5, 2.0][:len(state.budgets)], 1.0)
    sc.score(tuple((g.devices, g.cuts) for g in res.plan.groups))
    used = {d for g in res.plan.groups for d in g.devices}
    probe = Scorer(state, np.zeros(len(state.budgets)), 1.0, SolveOptions(), None)     # sc does not learn d's cuts
    unholding = [d for d in state.available_indices if d not in used and probe.cuts((d,)) is None]
    assert unholding, "expected a device that cannot hold the model alone"
    base = [g.devices for g in res.plan.groups]
    alone = _cannot_win(sc, base)
    for d in unholding:
        assert not _cannot_win(sc, base + [(d,)]) or alone
