"""The fast paths of the per-slot solver give the same answers as the plain ones: the compiled
frontier walk and the pruned min-max scan against the numpy DPs on long models and many
stages, share_cap against its definition, and the baselines kept in a SlotCache."""
from __future__ import annotations

import numpy as np
import pytest

from solver import baselines
from solver.io.synthetic import random_state
from solver.model.memory import memory_use, share_cap
from solver.subproblems import cuts as C
from solver.subproblems.cache import SlotCache


@pytest.mark.parametrize("seed", range(6))
def test_compiled_frontier_and_pruned_scan_match_numpy_on_long_models(seed):
    rng = np.random.default_rng(8_000 + seed)
    state = random_state(8_000 + seed, n=10, L=int(rng.integers(40, 121)), scale=float(rng.choice([1.0, 10.0, 30.0])))
    av = list(state.available_indices)
    for k in (2, 5, min(8, len(av))):
        devices = tuple(int(x) for x in rng.permutation(av)[:k])
        for min_share in (None, state.workload.batch):
            got = []
            for backend in ("compiled", "numpy"):
                sc = SlotCache(state, dp_backend=backend)
                ga = sc.group_arrays(devices, min_share)
                got.append((None if ga is None else C._alpha_frontier(ga),
                            C.frontier_cuts(state, devices, 4, min_share, cache=sc),
                            C.balanced_cuts(state, devices, min_share, cache=sc)))
            assert got[0] == got[1]


@pytest.mark.parametrize("seed", range(4))
def test_share_cap_is_the_largest_fitting_multiple(seed):
    state = random_state(8_100 + seed, n=6, L=16, scale=30.0)
    rng = np.random.default_rng(seed)
    u, B = state.workload.micro_batch, state.workload.batch
    M = state.memory_bytes * (1 + 1e-12)
    for _ in range(20):
        k = int(rng.integers(1, 5))
        devices = tuple(int(x) for x in rng.permutation(state.n)[:k])
        cuts = tuple(sorted(rng.choice(np.arange(1, 16), k - 1, replace=False).tolist())) + (16,)
        for schedule, recompute in (("gpipe", False), ("1f1b", False), ("gpipe", True)):
            cap = share_cap(state, devices, cuts, schedule, recompute)
            fits = [s for s in range(u, B + 1, u)
                    if np.all(memory_use(state, devices, cuts, s, schedule, recompute) <= M[list(devices)])]
            if cap >= B:
                assert fits == list(range(u, B + 1, u))
            else:
                assert fits == list(range(u, cap + 1, u))


def test_baselines_are_built_once_per_state_cache():
    state = random_state(8_200, n=6, L=12)
    sc = SlotCache(state)
    for name, f in baselines.ALL.items():
        first = f(state, cache=sc)
        assert first == f(state), name                     # the same plan as without a cache
        assert f(state, cache=sc) is first, name           # kept, not rebuilt
        assert sc.baselines[f.__name__] is first
    with pytest.raises(ValueError, match="belongs to slot"):
        baselines.gpipe(random_state(8_201, n=6, L=12), cache=sc)


@pytest.mark.parametrize("seed,n,L,scale,budget", [(8_300, 8, 30, 1.0, None), (8_301, 8, 24, 30.0, None),
                                                   (8_302, 12, 40, 10.0, 120), (8_303, 16, 20, 1.0, 60),
                                                   (8_304, 10, 16, 30.0, 400)])
def test_repeated_score_groups_give_the_search_of_full_calls(seed, n, L, scale, budget, monkeypatch):
    """Scorer.score_groups answers a repeated call from its first (scoring.py docstring): with
    every call made in full instead, the search scores the same structures, spends the same
    work units (its message) and returns the same plan, also where a small work budget stops it."""
    from solver import solve_slot
    from solver.solve.options import SolveOptions
    from solver.solve.scoring import Scorer

    state = random_state(seed, n=n, L=L, scale=scale)
    rng = np.random.default_rng(seed)
    opt = SolveOptions(max_structures=budget)
    queues = ((), tuple(rng.uniform(0, 5, len(state.budgets))))
    runs = []
    for full in (False, True):
        hits = []
        original = Scorer.score_groups

        def score_groups(self, groups, source="", prune=True, variant_cuts=False, _full=full, _orig=original):
            groups = list(groups)
            if _full:
                self._groups_done.clear()
            hits.append((tuple(groups), prune, variant_cuts) in self._groups_done)
            return _orig(self, groups, source, prune, variant_cuts)

        monkeypatch.setattr(Scorer, "score_groups", score_groups)
        for q in queues:
            r = solve_slot(state, q, options=opt)
            runs.append((r.status, r.objective, r.plan, r.message))
        monkeypatch.setattr(Scorer, "score_groups", original)
        if not full:
            assert any(hits), "no repeated call: the test would not test the repeat path"
    assert runs[:2] == runs[2:]
