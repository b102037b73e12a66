"""The event simulator of one pipeline group against the GPipe closed form, the 1F1B bounds and
the memory rule (docs/MODEL.md)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from solver.cost import gpipe_coeffs
from solver.cost.pipeline import one_f_one_b_coeffs, schedule_coeffs
from solver.cost.simulator import makespan, micro_batches, simulate, stage_codes, stage_order
from solver.model.memory import live_samples

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
        assert r.peak_stash == (1,)          # accumulation: F, B, F, B, ... in both schedules
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


# ---------------------------------------------------------------- hand-worked 1F1B and recomputation

def test_stage_orders_megatron():
    """Stage 0 of 2 warms up with one forward, then one forward / one backward, then drains."""
    assert stage_order("1f1b", 0, 2, 3) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)]
    assert stage_order("1f1b", 1, 2, 3) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
    assert stage_order("1f1b", 0, 4, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    assert stage_order("gpipe", 0, 1, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_stage_codes_are_the_stage_orders(schedule):
    for k in range(1, 6):
        for n in range(0, 9):
            for j in range(k):
                want = [m if op == "F" else -1 - m for op, m in stage_order(schedule, j, k, n)]
                assert stage_codes(schedule, j, k, n).tolist() == want


def test_hand_worked_1f1b():
    """k=2, F=1, G=2, no link time, 3 micro-batches of 1 (worked by hand): stage 0 runs F0 [0,1],
    F1 [1,2], B0 [4,6], F2 [6,7], B1 [7,9], B2 [10,12]; stage 1 runs F0 [1,2], B0 [2,4],
    F1 [4,5], B1 [5,7], F2 [7,8], B2 [8,10]."""
    r = simulate([1.0, 1.0], [2.0, 2.0], [0.0], 1, 3, "1f1b", saved=[10.0, 20.0], inputs=[1.0, 3.0])
    assert r.makespan == pytest.approx(12.0)
    s0 = [(o.kind, o.micro_batch, o.start, o.end) for o in r.ops if o.kind in "FB" and o.where == 0]
    assert s0 == [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 0, 4, 6), ("F", 2, 6, 7), ("B", 1, 7, 9), ("B", 2, 10, 12)]
    assert r.peak_stash == (2, 1)
    assert r.peak_bytes == pytest.approx((20.0, 20.0))        # 2 x 10 and 1 x 20


def test_hand_worked_recompute():
    """The same pipeline with recomputation: every backward takes F + G = 3. Stage 0 runs F0 [0,1],
    F1 [1,2], B0 [5,8], F2 [8,9], B1 [9,12], B2 [13,16]; it keeps 1 byte per stashed input and
    10 more during a backward: peak 2 x 1 + 10 = 12; stage 1: 1 x 3 + 20 = 23."""
    r = simulate([1.0, 1.0], [2.0, 2.0], [0.0], 1, 3, "1f1b", recompute=True, saved=[10.0, 20.0],
                 inputs=[1.0, 3.0])
    assert r.makespan == pytest.approx(16.0)
    assert r.stage_busy == pytest.approx((12.0, 12.0))
    assert r.peak_bytes == pytest.approx((12.0, 23.0))
    g = simulate([1.0, 1.0], [2.0, 2.0], [0.0], 1, 3, "gpipe", recompute=True, saved=[10.0, 20.0],
                 inputs=[1.0, 3.0])
    assert g.makespan == pytest.approx(closed_form([1.0, 1.0], [3.0, 3.0], [0.0], 1, 3))
    assert g.peak_bytes == pytest.approx((3 * 1.0 + 10.0, 3 * 3.0 + 20.0))


def test_full_duplex_link_hand_worked():
    """A slow link (2 s per sample each way): full duplex lets stage 1's gradient of micro-batch 0
    go back while the activations of micro-batch 1 still travel forward."""
    half = simulate([1.0, 1.0], [1.0, 1.0], [2.0], 1, 2, "1f1b", duplex="half")
    full = simulate([1.0, 1.0], [1.0, 1.0], [2.0], 1, 2, "1f1b", duplex="full")
    # full: F0 [0,1], send [1,3], F1' s0 [1,2], send F1 [3,5]; s1 F0 [3,4] B0 [4,5]; grad [5,7];
    # s1 F1 [5,6] B1 [6,7]; grad B1 [7,9]; s0 B0 [7,8], B1 [9,10]
    assert full.makespan == pytest.approx(10.0)
    assert half.makespan >= full.makespan
    with pytest.raises(ValueError):
        simulate([1.0], [1.0], [], 1, 1, duplex="simplex")


# ---------------------------------------------------------------- properties against the formulas

@settings(max_examples=300)
@given(pipelines(), st.integers(1, 12), st.sampled_from(["half", "full"]), st.booleans())
def test_1f1b_bounds(pipe, n, duplex, recompute):
    """u (C + (n-1) M) <= T <= u (C + (n-1)(max F + max G + 2 max lam)), G + F under recomputation."""
    F, G, lam, u = pipe
    b = n * u
    T = simulate(F, G, lam, u, b, "1f1b", recompute=recompute, duplex=duplex).makespan
    Gr = G + F if recompute else G
    C = F.sum() + Gr.sum() + 2 * lam.sum()
    M = max(F.max(), Gr.max(), lam.max() if len(lam) else 0.0)
    assert u * (C + (n - 1) * M) <= T * (1 + REL)
    alpha, beta = one_f_one_b_coeffs(F, Gr, lam, u)
    assert T <= (alpha * b + beta) * (1 + REL)
    assert schedule_coeffs(F, G, lam, u, "1f1b", recompute) == pytest.approx((alpha, beta))


@settings(max_examples=200)
@given(pipelines(min_k=1), st.integers(1, 12), st.sampled_from(["gpipe", "1f1b"]), st.booleans())
def test_peak_bytes_match_memory_rule(pipe, n, schedule, recompute):
    """The simulator's peak activation bytes per stage equal the memory rule of model.memory,
    and under GPipe the time equals the closed form (with G + F when recomputing)."""
    F, G, lam, u = pipe
    k, b = len(F), n * u
    rng = np.random.default_rng(int(1e6 * F[0]) % 2**32)
    H, I = rng.uniform(1.0, 100.0, k), rng.uniform(0.0, 10.0, k)
    r = simulate(F, G, lam, u, b, schedule, recompute=recompute, saved=H, inputs=I, duplex="full")
    live = live_samples(k, b, u, schedule)
    rule = live * I + u * H if recompute else live * H
    assert r.peak_bytes == pytest.approx(tuple(rule), rel=REL)
    assert r.peak_stash == tuple(int(x) // u for x in live)
    if schedule == "gpipe":
        a, bb = schedule_coeffs(F, G, lam, u, "gpipe", recompute)
        assert r.makespan == pytest.approx(a * b + bb, rel=REL)


def test_1f1b_never_slower_without_transfers():
    rng = np.random.default_rng(7)
    for _ in range(300):
        k, u, n = int(rng.integers(2, 7)), int(rng.choice([1, 2, 4])), int(rng.integers(1, 10))
        F = rng.uniform(0.1, 2.0, k)
        G = F * rng.uniform(1.0, 3.0, k)
        lam = np.zeros(k - 1)
        assert simulate(F, G, lam, u, n * u, "1f1b").makespan <= \
            simulate(F, G, lam, u, n * u, "gpipe").makespan * (1 + REL)


@settings(max_examples=300)
@given(pipelines(min_k=1), st.integers(1, 40), st.sampled_from(["gpipe", "1f1b"]), st.booleans())
def test_makespan_recurrence_equals_the_event_simulator(pipe, b, schedule, recompute):
    """The compiled recurrence the solver re-scores 1F1B plans with gives the full-duplex event
    simulator's makespan exactly, short last micro-batches included."""
    F, G, lam, u = pipe
    sim = simulate(F, G, lam, u, b, schedule, recompute=recompute, duplex="full").makespan
    assert makespan(F, G, lam, u, b, schedule, recompute=recompute) == sim
