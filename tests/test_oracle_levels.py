"""The oracle's cut sets at every memory level, cross-checked on small L against brute force
over every cut set."""
from __future__ import annotations

import itertools

import pytest

from solver.io.synthetic import random_state
from solver.model.memory import share_cap
from solver.solve import solve_exact
from solver.subproblems.cuts import alpha_beta, memory_levels, min_bottleneck_cuts
from solver.subproblems.cache import SlotCache


def _tight(seed: int, n: int = 3, L: int = 6):
    return random_state(12_000 + seed, n=n, L=L, scale=30.0)


@pytest.mark.parametrize("seed", range(8))
def test_min_alpha_cuts_at_each_level_equal_brute_force(seed):
    state = _tight(seed)
    sc = SlotCache(state)
    devices = tuple(state.available_indices[:3])
    L = state.workload.num_layers
    levels = memory_levels(state, devices, cache=sc)
    assert levels == sorted(levels) and (not levels or levels[0] == state.workload.micro_batch)
    for s in levels:
        fits = [(*c, L) for c in itertools.combinations(range(1, L), len(devices) - 1)
                if share_cap(state, devices, (*c, L)) >= s]
        got = min_bottleneck_cuts(state, devices, s, cache=sc)
        if not fits:
            assert got is None
            continue
        best = min(alpha_beta(state, devices, c)[0] for c in fits)
        assert got in fits
        assert alpha_beta(state, devices, got)[0] == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_levels_list_every_change_of_the_fitting_set(seed):
    state = _tight(seed)
    devices = tuple(state.available_indices[:3])
    wl = state.workload
    L = wl.num_layers
    levels = memory_levels(state, devices)
    cut_sets = [(*c, L) for c in itertools.combinations(range(1, L), len(devices) - 1)]
    prev = None
    for s in range(wl.micro_batch, wl.batch + 1, wl.micro_batch):
        fitting = frozenset(c for c in cut_sets if share_cap(state, devices, c) >= s)
        if fitting != prev and fitting:
            assert s in levels, f"the cut sets that fit change at share {s}, levels {levels}"
        prev = fitting


@pytest.mark.parametrize("seed", range(6))
def test_frontier_oracle_between_brute_force_and_its_candidates(seed):
    state = _tight(seed, n=3, L=6)
    Q = (0.0, 0.0) if seed % 2 == 0 else (1.0, 2.0)
    brute = solve_exact(state, Q, 1.0, all_cuts=True)
    front = solve_exact(state, Q, 1.0, all_cuts=False)
    assert (brute.plan is None) == (front.plan is None)
    if brute.plan is None:
        return
    assert "exact for the model (every cut set)" in brute.message
    if "exact for the model" in front.message:      # certified (solve.oracle_certificate)
        assert front.objective == pytest.approx(brute.objective, rel=1e-9)
    else:
        assert "not every cut set" in front.message
        assert brute.objective <= front.objective * (1 + 1e-12)


def test_memory_binds_at_several_levels_in_these_slots():
    counts = [len(memory_levels(_tight(seed), tuple(_tight(seed).available_indices[:3]))) for seed in range(8)]
    assert max(counts) >= 3, counts
