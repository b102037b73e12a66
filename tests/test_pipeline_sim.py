"""The event simulator of one pipeline group against the GPipe closed form (DESIGN.md 3)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from solver.cost import gpipe_coeffs
from solver.cost.simulator import micro_batches, simulate

REL = 1e-9


@st.composite
def pipelines(draw, min_k: int = 2, max_k: int = 8):
    """(F, G, lam, u) of a random group: seconds per sample. Device speeds span 10x, stage
    work 1-20 units, links from fast (transfers negligible) to slow (transfers dominate)."""
    k = draw(st.integers(min_k, max_k))
    unit = st.floats(0.0, 1.0)
    speed = np.array([10 ** draw(unit) for _ in range(k)])            # 1..10 relative speed
    work = np.array([draw(st.floats(1.0, 20.0)) for _ in range(k)])   # forward units per sample
    F = 1e-3 * work / speed
    G = F * np.array([draw(st.floats(1.0, 3.0)) for _ in range(k)])
    u = draw(st.sampled_from([1, 2, 4, 8]))
    act = np.array([draw(st.floats(1e5, 5e6)) for _ in range(k - 1)])                # bytes/sample
    bw = np.array([10 ** draw(st.floats(7.0, 11.0)) for _ in range(k - 1)])          # bytes/s
    lat = np.array([10 ** draw(st.floats(-6.0, -2.0)) for _ in range(k - 1)])        # seconds
    lam = act / bw + lat / u
    return F, G, lam, u


def closed_form(F, G, lam, u: int, b: int) -> float:
    alpha, beta = gpipe_coeffs(np.asarray(F, float), np.asarray(G, float), np.asarray(lam, float), u)
    return alpha * b + beta


@settings(max_examples=400)
@given(pipelines(), st.lists(st.integers(1, 12), min_size=1, max_size=3))
def test_closed_form_equals_gpipe_simulation(pipe, counts):
    F, G, lam, u = pipe
    for n in counts:
        b = n * u
        sim = simulate(F, G, lam, u, b, "gpipe").makespan
        assert closed_form(F, G, lam, u, b) == pytest.approx(sim, rel=REL)


@given(st.floats(1e-4, 1.0), st.floats(1e-4, 1.0), st.sampled_from([1, 3, 4]), st.integers(1, 20))
def test_one_stage_group_is_plain_accumulation(f, g, u, n):
    b = n * u
    for schedule in ("gpipe", "1f1b"):
        r = simulate([f], [g], [], u, b, schedule)
        assert r.makespan == pytest.approx(b * (f + g), rel=REL)
        assert r.peak_stash == ((n if schedule == "gpipe" else 1),)
    assert closed_form([f], [g], [], u, b) == pytest.approx(b * (f + g), rel=REL)


def test_simpler_formula_is_optimistic_over_slow_link():
    """max_j max(F_j + G_j, 2 lam_j) per sample misses that the forward bottleneck (the link)
    and the backward bottleneck (compute) are different resources: it underestimates."""
    F, G, lam, u, b = [1.0, 1.0], [2.0, 2.0], [1.5], 1, 16
    sim = simulate(F, G, lam, u, b, "gpipe").makespan
    assert closed_form(F, G, lam, u, b) == pytest.approx(sim, rel=REL)
    simple_alpha = max(max(f + g for f, g in zip(F, G)), 2 * max(lam))
    simple = simple_alpha * b + u * (sum(F) + sum(G) + 2 * sum(lam)) - u * simple_alpha
    assert simple < sim * 0.9          # optimistic by more than 10%
    # and the simulator itself agrees with the alpha the closed form uses: 1.5 + 2 per sample
    assert simulate(F, G, lam, u, 2 * b).makespan - sim == pytest.approx(3.5 * b, rel=REL)


def test_gpipe_flush_and_known_values():
    """Two equal stages, u=1, 3 micro-batches: forwards end at 4, backwards at 4 + 4 * 2."""
    r = simulate([1.0, 1.0], [2.0, 2.0], [0.0], 1, 3, "gpipe")
    assert r.makespan == pytest.approx(12.0)
    assert r.stage_busy == (9.0, 9.0) and r.peak_stash == (3, 3)


def test_short_last_micro_batch():
    assert micro_batches(10, 4) == [4, 4, 2]
    r = simulate([1.0, 0.5], [2.0, 1.0], [0.25], 4, 10, "gpipe")
    assert r.sizes == (4, 4, 2)
    assert r.stage_busy == pytest.approx((30.0, 15.0)) and r.link_busy == pytest.approx((5.0,))
    # the closed form is for whole micro-batches: rounding the share up bounds it from above
    assert r.makespan <= closed_form([1.0, 0.5], [2.0, 1.0], [0.25], 4, 12) + 1e-12
    with pytest.raises(ValueError):
        simulate([1.0], [1.0], [], 0, 4)
    with pytest.raises(ValueError):
        simulate([1.0, 1.0], [1.0, 1.0], [], 1, 4)
    with pytest.raises(ValueError):
        simulate([1.0], [1.0], [], 1, 4, "zb-v")


@settings(max_examples=200)
@given(pipelines(), st.integers(1, 12))
def test_1f1b_stash_and_lower_bound(pipe, n):
    F, G, lam, u = pipe
    k, b = len(F), n * u
    r = simulate(F, G, lam, u, b, "1f1b")
    for j in range(k):                                   # j 0-based: stage j+1 of k
        assert r.peak_stash[j] <= min(k - j, n)
    work = [b * (f + g) for f, g in zip(F, G)] + [2 * b * x for x in lam]
    assert r.makespan >= max(work) * (1 - REL)
    assert r.stage_busy == pytest.approx([b * (f + g) for f, g in zip(F, G)], rel=REL)
    assert r.link_busy == pytest.approx([2 * b * x for x in lam], rel=REL)
    # every micro-batch must cross the whole pipeline and come back
    assert r.makespan >= u * (sum(F) + sum(G) + 2 * sum(lam)) * (1 - REL)
    g = simulate(F, G, lam, u, b, "gpipe")
    assert g.peak_stash == (n,) * k
