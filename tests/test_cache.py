"""The per-slot cache is owned by the caller: one SlotCache per state, passed explicitly, and
results never depend on whether (or how widely) a cache was shared."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from solver import baselines
from solver.io.synthetic import random_state
from solver.cost.migration import migration_time
from solver.solve import SolveOptions, solve_exact, solve_slot
from solver.subproblems.cache import SlotCache
from solver.subproblems.cuts import (
    balanced_cuts,
    blind_cuts,
    frontier_cuts,
    min_bottleneck_cuts,
)

ROOT = Path(__file__).resolve().parents[1] / "solver"
CORE = ("model", "io", "cost", "subproblems", "baselines", "solve", "online")


def test_cache_belongs_to_one_state():
    a, b = random_state(1, n=4, L=8), random_state(1, n=4, L=8)   # equal content, two objects
    ca, cb = SlotCache(a), SlotCache(b)
    ga, gb = ca.group_arrays((0, 1)), cb.group_arrays((0, 1))
    assert ga is ca.group_arrays((0, 1)) and ga is not gb
    assert ca.need(4) is not cb.need(4)
    with pytest.raises(ValueError, match="SlotCache belongs to slot"):
        min_bottleneck_cuts(b, (0, 1), cache=ca)
    with pytest.raises(ValueError, match="one SlotCache per state"):
        baselines.even_dp(b, cache=ca)


def test_cut_functions_same_with_and_without_cache():
    state = random_state(7, n=5, L=12, scale=10.0)
    cache = SlotCache(state)
    for devs in [(0, 1), (2, 0, 4), (4, 3, 2, 1), (3,)]:
        for share in (None, 8, 32):
            assert min_bottleneck_cuts(state, devs, share) == min_bottleneck_cuts(state, devs, share, cache=cache)
            assert frontier_cuts(state, devs, 4, share) == frontier_cuts(state, devs, 4, share, cache=cache)
            assert balanced_cuts(state, devs, share) == balanced_cuts(state, devs, share, cache=cache)


def test_blind_cuts_is_the_mean_speed_balance():
    state = random_state(3, n=4, L=10)
    devs = (0, 1, 2)
    w = (state.fwd_prefix[list(devs)] + state.bwd_prefix[list(devs)]).mean(axis=0)
    t, cuts = blind_cuts(state, devs, w, np.zeros((2, 11)))
    assert cuts == balanced_cuts(state, devs)
    stages = np.diff(np.concatenate([[0.0], w[list(cuts)]]))
    assert t == pytest.approx(float(stages.max()), rel=1e-12)


def test_blind_cuts_keeps_nothing_of_its_arrays():
    state = random_state(3, n=4, L=10)
    cache = SlotCache(state)
    ga = cache.group_arrays((0, 1, 2))
    before = set(ga.cache)
    blind_cuts(state, (0, 1, 2), state.fwd_prefix[0], np.zeros((2, 11)), cache=cache)
    assert set(ga.cache) - before <= {"pen3", "maxend"}     # the memory masks only


@pytest.mark.parametrize("seed", range(4))
def test_baselines_same_plan_with_and_without_shared_cache(seed):
    state = random_state(seed, n=6, L=10, scale=10.0)
    shared = SlotCache(state)
    alone = {name: f(state) for name, f in baselines.ALL.items()}
    # shared in reverse order, so each baseline finds entries the others left
    together = {name: f(state, cache=shared) for name, f in reversed(list(baselines.ALL.items()))}
    assert alone == together
    assert baselines.cheapest(state, (1.0, 0.5)) == baselines.cheapest(state, (1.0, 0.5), cache=shared)


def test_solves_same_with_and_without_shared_cache():
    state = random_state(11, n=5, L=8, scale=10.0)
    shared = SlotCache(state)
    for Q in [(0.0, 0.0), (2.0, 1.0)]:
        a, b = solve_slot(state, Q), solve_slot(state, Q, cache=shared)
        assert (a.plan, a.objective) == (b.plan, b.objective)
        a, b = solve_exact(state, Q), solve_exact(state, Q, cache=shared)
        assert (a.plan, a.objective) == (b.plan, b.objective)


@pytest.mark.parametrize("seed", range(3))
def test_kept_migrations_and_violations_are_the_fresh_ones(seed):
    """SlotCache.migration / .violations keep per-receiver times and per-plan checks for the
    online controller: the same numbers as migration_time and Plan.validate, whatever the order."""
    full = random_state(seed, n=6, L=10, scale=10.0)
    state = random_state(seed, n=6, L=10, scale=10.0, p_available=0.7)
    prev = baselines.gpipe(full)
    pool = solve_slot(full, (1.0, 0.5), options=SolveOptions(keep_candidates=True)).candidate_pool
    plans = [c[0] for c in pool] + [p for p in (f(state) for f in baselines.ALL.values()) if p is not None]
    assert len(plans) > 5
    cache = SlotCache(state)
    for p in plans + plans[::-1]:
        assert cache.migration(prev, p) == migration_time(prev, p, state)
        assert cache.violations(p) == tuple(p.validate(state))
    assert any(cache.violations(p) for p in plans) and any(not cache.violations(p) for p in plans)
    assert any(cache.migration(prev, p) > 0 for p in plans)
    assert cache.migration(None, plans[0]) == 0.0


def _modules(packages):
    for pkg in packages:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_no_private_name_imported_across_modules():
    bad = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                bad += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "WeakKeyDictionary",
                 "WeakValueDictionary", "local"}


def test_no_module_level_cache_in_the_core():
    """No `global` statement and no module-level container or thread-local bound to a
    lower-case or private name (constants are UPPER_CASE and never written to)."""
    bad = []
    for path in _modules(CORE):
        tree = ast.parse(path.read_text())
        bad += [f"{path.relative_to(ROOT)}: global" for n in ast.walk(tree) if isinstance(n, ast.Global)]
        for node in tree.body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            v = node.value
            mutable = isinstance(v, (ast.Dict, ast.List, ast.Set)) or (
                isinstance(v, ast.Call) and getattr(v.func, "attr", getattr(v.func, "id", "")) in MUTABLE_CALLS)
            bad += [f"{path.relative_to(ROOT)}: {n}" for n in names
                    if mutable and not n.isupper() and n != "__all__"]
    assert bad == []


@pytest.mark.parametrize("seed", [5, 17])
def test_carried_entries_give_the_same_solves(seed):
    """SlotCache.following carries an earlier slot's entries of unchanged devices: every
    solve of the next slots equals a solve with a fresh cache (plan and objective), entries
    are carried where devices kept their inputs, and none of a device whose speed changed."""
    from dataclasses import replace
    from solver.io.synthetic import random_instance
    from solver.subproblems.cache import unchanged_devices
    inst = random_instance(seed, n=5, L=8, slots=4)
    factor = np.array(inst.speed_factor)
    factor[:, :3] = factor[0, :3]                 # devices 0-2 keep their speed; 3-4 change
    inst = replace(inst, speed_factor=factor, bandwidth=np.repeat(inst.bandwidth[:1], 4, axis=0))
    prev_cache, prev_plan = None, None
    for t in range(inst.num_slots):
        s = inst.state(t)
        cache = SlotCache.following(prev_cache, s)
        if prev_cache is not None:
            keep = unchanged_devices(prev_cache.state, s)
            assert keep == {0, 1, 2}
            assert cache.carried > 0
            assert all(set(k[0]) <= keep for k in cache._coeffs)
        got = solve_slot(s, (0.5,) * len(s.budgets), 1.0, previous_plan=prev_plan, cache=cache)
        want = solve_slot(s, (0.5,) * len(s.budgets), 1.0, previous_plan=prev_plan)
        assert got.plan == want.plan and got.objective == want.objective
        prev_cache, prev_plan = cache, got.plan


def test_nothing_carried_across_workloads():
    a, b = random_state(1, n=3, L=5), random_state(2, n=3, L=5)
    assert SlotCache.following(SlotCache(a), b).carried == 0


def test_bounded_shared_arrays_give_the_same_cuts(monkeypatch):
    """With the share-free arrays, pair rows and shared DP scratch bounded to a few entries
    (cache.MAX_BASE_BYTES), every cut function still answers as a throwaway cache does, on a
    state with bandwidth fits and TP-free units, and the kept bytes stay within the bound."""
    import itertools

    import solver.subproblems.cache as cache_mod
    state = random_state(11, n=6, L=14, scale=10.0)
    limit = 3 * 15 * 8 * 6
    monkeypatch.setattr(cache_mod, "MAX_BASE_BYTES", limit)
    cache = SlotCache(state)
    for devs in itertools.islice(itertools.permutations(range(6), 3), 40):
        for share in (None, 8, 32):
            for variant in (("gpipe", False), ("1f1b", False), ("gpipe", True)):
                assert min_bottleneck_cuts(state, devs, share, cache=cache, schedule=variant[0],
                                           recompute=variant[1]) == \
                    min_bottleneck_cuts(state, devs, share, schedule=variant[0], recompute=variant[1])
            assert frontier_cuts(state, devs, 4, share, cache=cache) == frontier_cuts(state, devs, 4, share)
    assert cache._bases_bytes <= limit and cache._scratch_bytes <= limit
    assert len(cache._pairs) * (state.workload.num_layers + 1) * 8 <= limit


def test_one_cache_per_micro_batch_size():
    """SlotCache.at_size keeps one cache per single-size state, and answers for the state itself."""
    from solver.solve.micro_batch import micro_batch_sizes, single_size
    state = random_state(3, n=4, L=8)
    cache = SlotCache(state)
    assert cache.at_size(state) is cache
    for u in micro_batch_sizes(state):
        one = single_size(state, u)
        got = cache.at_size(one)
        assert got.state is one and cache.at_size(single_size(state, u)) is got
