"""solve_slot: valid plans, dominance over every baseline, infeasible slots, re-planning."""
from __future__ import annotations

import dataclasses
import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import baselines
from solver.cost import evaluate
from solver.cost.migration import migration_time
from solver.cost.simulator import simulate_plan
from solver.io.synthetic import random_state
from solver.solve import SolveOptions, solve_slot

states = st.builds(lambda seed, n, L, p, scale: random_state(seed, n=n, L=L, p_available=p, scale=scale),
                   st.integers(0, 10**6), st.integers(1, 7), st.integers(2, 14),
                   st.sampled_from([0.6, 1.0]), st.sampled_from([1.0, 10.0, 40.0]))
queues = st.tuples(st.sampled_from([0.0, 1.0, 50.0, 500.0]), st.sampled_from([0.0, 1e-4, 1e-2]))


@settings(max_examples=25)
@given(state=states, Q=queues, V=st.sampled_from([0.0, 1.0, 10.0, 1000.0]))
def test_valid_and_dominates_baselines(state, Q, V):
    res = solve_slot(state, Q, V)
    if res.plan is None:
        assert res.status == "infeasible" and res.message
        assert all(f(state) is None for f in baselines.ALL.values())
        return
    assert res.status == "feasible"
    assert res.plan.validate(state) == []
    ev = evaluate(res.plan, state)
    if any(g.schedule == "1f1b" and g.num_stages > 1 for g in res.plan.groups):
        # the closed form is 1F1B's upper bound: the result carries the simulator's time
        assert res.batch_time == pytest.approx(simulate_plan(res.plan, state).batch_time, rel=1e-9)
        assert res.batch_time <= ev.batch_time * (1 + 1e-9) and "event simulator" in res.message
    else:
        assert res.batch_time == pytest.approx(ev.batch_time, rel=1e-9)
    assert res.objective == pytest.approx(ev.objective(Q, V), rel=1e-9, abs=1e-12)
    for name, f in baselines.ALL.items():
        p = f(state)
        if p is not None:
            other = evaluate(p, state).objective(Q, V)
            assert res.objective <= other * (1 + 1e-9) + 1e-12, name


def test_queue_length_checked():
    state = random_state(1, n=3, L=4)
    with pytest.raises(ValueError, match="expected 2 values"):
        solve_slot(state, (1.0,), 10.0)
    assert solve_slot(state, (), 10.0).plan is not None


def test_infeasible_slots():
    state = random_state(1, n=3, L=4, scale=1e4)
    res = solve_slot(state, (0.0, 0.0))
    assert res.status == "infeasible" and res.plan is None and "hold the model" in res.message
    none = dataclasses.replace(random_state(2, n=3, L=4), available=np.zeros(3, dtype=bool))
    res = solve_slot(none)
    assert res.status == "infeasible" and "no device" in res.message


def test_infeasible_message_says_whether_groups_hold_one_micro_batch():
    """An infeasible slot whose groups hold the model with one micro-batch but not the whole
    batch says so, with the most samples they held (an outside audit: about 30 results had said
    that no group holds one micro-batch); where none holds one micro-batch, that is said. The
    oracle says the same."""
    from solver.solve import solve_exact
    state = random_state(3, n=3, L=6, batch=64, micro_batch=4)
    w = state.workload
    one = float(w.opt_factor * np.sum(w.param_bytes) + 4 * sum(layer.stash_bytes for layer in w.layers))
    tight = dataclasses.replace(state, devices=tuple(dataclasses.replace(d, memory_bytes=0.5 * one)
                                                     for d in state.devices))
    res = solve_slot(tight, (0.0, 0.0), 1.0, options=SolveOptions(schedules=False))
    assert res.status == "infeasible", res.message
    held = re.search(r"hold the model \(.*\) with one micro-batch, but none the search built holds the whole "
                     r"batch of 64 samples \(at most (\d+) together\)", res.message)
    assert held and 4 <= int(held.group(1)) < 64, res.message
    small = dataclasses.replace(state, devices=tuple(dataclasses.replace(d, memory_bytes=0.3 * one)
                                                     for d in state.devices))
    for res in (solve_slot(small, (0.0, 0.0), 1.0), solve_exact(small, (0.0, 0.0), 1.0)):
        assert res.status == "infeasible" and "no device or group of available devices can hold" in res.message


def test_keep_candidates_and_options():
    state = random_state(4, n=4, L=8)
    res = solve_slot(state, (0.0, 0.0), options=SolveOptions(keep_candidates=True, local_search=False))
    assert res.candidate_pool and all(p.validate(state) == [] for p, _, _ in res.candidate_pool)
    assert res.candidates >= len(baselines.ALL)
    one = solve_slot(state, (0.0, 0.0), options=SolveOptions(max_groups=1))
    assert len(one.plan.groups) == 1


def test_replan_keeps_previous_plan_when_gain_is_small():
    state = random_state(7, n=4, L=8)
    best = solve_slot(state, (0.0, 0.0), 10.0).plan
    # previous plan: one pipeline over every device (each holds distinct layers)
    prev = baselines.gpipe(state) if best != baselines.gpipe(state) else baselines.even_dp(state)
    gain = evaluate(prev, state).batch_time - evaluate(best, state).batch_time
    mig = migration_time(prev, best, state)
    assert mig > 0 and gain > 0
    # amortised over few iterations the move does not pay: the previous structure stays
    few = max(1, int(mig / gain / 10))
    res = solve_slot(state, (0.0, 0.0), 10.0, previous_plan=prev,
                     options=SolveOptions(iterations_per_slot=few))
    assert res.objective <= evaluate(prev, state).objective((0.0, 0.0), 10.0) * (1 + 1e-9)
    # a move is made only when its gain beats its amortised migration (Q = 0: objective = V T)
    assert res.batch_time + migration_time(prev, res.plan, state) / few <= evaluate(prev, state).batch_time + 1e-12
    assert res.objective == pytest.approx(10.0 * (res.batch_time + res.migration_time / few), rel=1e-9)
    # with one iteration per slot, a plan that moves everything never pays: keep the structure
    stay = solve_slot(state, (0.0, 0.0), 10.0, previous_plan=best,
                      options=SolveOptions(iterations_per_slot=1))
    assert [(g.devices, g.cuts) for g in stay.plan.groups] == [(g.devices, g.cuts) for g in best.groups]
    assert stay.migration_time == 0.0
    # amortised over very many iterations it pays, and the better plan is chosen
    many = int(mig / gain * 1000) + 1
    res2 = solve_slot(state, (0.0, 0.0), 10.0, previous_plan=prev,
                      options=SolveOptions(iterations_per_slot=many))
    assert res2.batch_time < evaluate(prev, state).batch_time
    assert res2.migration_time > 0
    # replan off: no migration charged
    res3 = solve_slot(state, (0.0, 0.0), 10.0, previous_plan=prev,
                      options=SolveOptions(replan=False))
    assert res3.migration_time == 0.0


def test_work_budget_is_deterministic():
    """Default budgets count work, not seconds: the same slot gives the same plan every time."""
    state = random_state(11, n=10, L=30)
    a = solve_slot(state, (50.0, 1e-3), 10.0)
    b = solve_slot(random_state(11, n=10, L=30), (50.0, 1e-3), 10.0)
    assert a.plan == b.plan and a.objective == b.objective and a.candidates == b.candidates
    tiny = solve_slot(state, (50.0, 1e-3), 10.0, options=SolveOptions(max_structures=1))
    assert tiny.plan is not None and tiny.plan.validate(state) == []
    assert tiny.objective >= a.objective * (1 - 1e-9)


@given(seed=st.integers(0, 10**6), n=st.integers(2, 7), L=st.integers(2, 20))
def test_sync_segments_match_per_layer_buckets(seed, n, L):
    """costmodel.sync_time (buckets = segments between all cut points) equals the definition:
    layers grouped by their tuple of holders across groups, computed layer by layer."""
    from solver.cost import sync_time
    rng = np.random.default_rng(seed)
    state = random_state(seed, n=n, L=L)
    s = []
    for g in np.array_split(rng.permutation(n), int(rng.integers(1, n + 1))):
        g = tuple(int(x) for x in g)[:L]
        if g:
            c = sorted(int(x) for x in rng.choice(np.arange(1, L), len(g) - 1, replace=False)) + [L]
            s.append((g, tuple(c)))
    assert sync_time(state, tuple(s)) == pytest.approx(per_layer_sync(state, s), rel=1e-12, abs=1e-300)


def per_layer_sync(state, structure) -> float:
    """The bucket rule of DESIGN.md, layer by layer: the reference for costmodel.sync_time."""
    m = len(structure)
    if m <= 1:
        return 0.0
    L, p = state.workload.num_layers, state.workload.param_bytes
    from solver.model import Group, Plan
    from solver.model.plan import layer_holders
    H = layer_holders(Plan(tuple(Group(tuple(d), tuple(c), 1) for d, c in structure)), L)
    buckets: dict[tuple, float] = {}
    for l in range(L):
        if p[l] > 0:
            key = H[l]
            buckets[key] = buckets.get(key, 0.0) + float(p[l])
    per_device = np.zeros(state.n)
    for ring, nbytes in buckets.items():
        links = list(zip(ring, ring[1:] + ring[:1]))
        bw = min(state.bandwidth[a, b] for a, b in links)
        lat = max(state.latency[a, b] for a, b in links)
        for d in ring:
            per_device[d] += 2.0 * (m - 1) / m * nbytes / bw + 2.0 * (m - 1) * lat
    return float(per_device.max())


def test_every_tuning_number_is_documented():
    """Each SearchTuning field carries its reason (an attribute docstring right after it)."""
    import ast
    import inspect

    from solver.solve.options import SearchTuning
    cls = ast.parse(inspect.getsource(SearchTuning)).body[0]
    documented = {a.target.id for a, d in zip(cls.body, cls.body[1:])
                  if isinstance(a, ast.AnnAssign) and isinstance(d, ast.Expr)
                  and isinstance(d.value, ast.Constant) and isinstance(d.value.value, str)}
    assert {f.name for f in dataclasses.fields(SearchTuning)} == documented


def test_tuning_is_honoured():
    from solver.solve import solve_exact
    from solver.solve.options import SearchTuning
    state = random_state(5, n=5, L=8, scale=10.0)
    full = solve_slot(state, (1.0, 0.5))
    short = solve_slot(state, (1.0, 0.5), options=SolveOptions(tuning=SearchTuning(work_small=1)))
    assert short.candidates < full.candidates and short.objective >= full.objective * (1 - 1e-12)
    exact = solve_exact(state, (1.0, 0.5))
    assert "every cut set" in exact.message
    frontier = solve_exact(state, (1.0, 0.5), tuning=SearchTuning(oracle_all_cuts_limit=0))
    assert "frontier" in frontier.message and frontier.objective >= exact.objective * (1 - 1e-12)
    left_open = solve_exact(random_state(0, n=4, L=8, scale=10.0), (1.0, 3.0),
                            tuning=SearchTuning(oracle_all_cuts_limit=0))     # the certificate leaves groupings open
    assert left_open.success and "not certified" in left_open.message
    for r in (exact, frontier, left_open):     # OPTIMAL only where proven for the model
        proven = "exact for the model" in r.message and "exact only relative" not in r.message
        assert (r.status == "optimal") == proven, r.message


def test_result_contract():
    """SlotResult.status is a Status: FEASIBLE from the search, OPTIMAL from the oracle,
    INFEASIBLE with no plan (success False) and the reason in the message."""
    from solver import Status
    from solver.solve import solve_exact
    state = random_state(2, n=4, L=6)
    res, ex = solve_slot(state, (0.0, 0.0)), solve_exact(state, (0.0, 0.0))
    assert res.status is Status.FEASIBLE and res.success and res.plan is not None
    assert ex.status is Status.OPTIMAL and ex.success and ex.objective <= res.objective * (1 + 1e-12)
    huge = random_state(2, n=2, L=4, scale=1e5)
    for r in (solve_slot(huge, (0.0, 0.0)), solve_exact(huge, (0.0, 0.0))):
        assert r.status is Status.INFEASIBLE and not r.success and r.plan is None
        assert "hold the model" in r.message


def test_sources_in_a_users_words():
    from solver.solve.families import families
    from solver.solve.options import SearchTuning
    from solver.solve.scoring import Scorer
    from solver.solve.sources import FIXED, MOVES, describe
    assert describe("balanced2") == "speed-balanced groups (2)"
    assert describe("ls-add-alone") == "local search: a device added as its own group"
    assert describe("dapple+lp") == "baseline DAPPLE, with re-optimised shares"
    assert describe("even-dp") == "baseline even DP"
    assert describe("ls-split+alpha+mem+aligned") == ("local search: a group split in two, each group in its order "
                                                      "of least bottleneck, re-cut to fit memory, groups of equal "
                                                      "depth cut alike")
    assert describe("clusters1.25e+10") == "groups of devices linked at 100 Gbit/s or faster"
    state = random_state(4, n=9, L=10)
    sc = Scorer(state, np.zeros(2), 1.0, SolveOptions(), None)
    tags = [name for name, _ in families(state, sc, 8, SearchTuning())]
    tags += [f"ls-{m}" for m in MOVES] + list(baselines.ALL) + ["cheapest", "previous", "previous-recut", "polish"]
    for tag in tags:
        for t in (tag, tag + "+mem", tag + "+lp"):
            words = describe(t)
            assert "candidate '" not in words and "+" not in words and "ls-" not in words, (t, words)
            assert tag in FIXED or tag not in words, (t, words)
    assert describe("mystery7") == "candidate 'mystery7'"
    for seed in range(3):
        msg = solve_slot(random_state(seed, n=6, L=8), (1.0, 0.5)).message
        assert "best: " in msg and "candidate '" not in msg, msg


@pytest.mark.parametrize("solve", ["slot", "exact"])
def test_one_rule_for_queues_and_V(solve):
    """None or () mean zero queues; otherwise one finite number >= 0 per budget; V a finite
    real number >= 0. Wrong types raise TypeError, wrong values ValueError, naming the argument."""
    from solver.solve import solve_exact
    f = solve_slot if solve == "slot" else solve_exact
    state = random_state(3, n=3, L=6)
    zero = f(state, (0.0, 0.0))
    for q in (None, (), [], np.zeros(0)):
        r = f(state, q)
        assert (r.plan, r.objective) == (zero.plan, zero.objective)
    assert f(state, np.array([0, 0])).objective == zero.objective
    assert f(state, (0.0, 0.0), np.float64(1.0)).objective == zero.objective
    bad_values = [((0,), "queues: expected 2 values"), ((0.0, 0.0, 0.0), "queues: expected 2 values"),
                  ((-1.0, 0.0), r"queues\[0\] \(money\)"), ((0.0, float("nan")), r"queues\[1\] \(energy\)"),
                  (np.zeros((2, 1)), "1-D")]
    for q, words in bad_values:
        with pytest.raises(ValueError, match=words):
            f(state, q)
    for q, words in [("00", "queues: expected None or a sequence"), (3.0, "queues: expected None"),
                     ((True, 0.0), r"queues\[0\]"), ((0.0, "1"), r"queues\[1\] \(energy\).*'1'")]:
        with pytest.raises(TypeError, match=words):
            f(state, q)
    for V in ("1", True, None, [1.0]):
        with pytest.raises(TypeError, match="V: expected a finite real number"):
            f(state, (), V)
    for V in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="V: expected a finite real number >= 0"):
            f(state, (), V)
    with pytest.raises(TypeError, match=r"queues: expected None or a sequence.*\(dict\)"):
        f(state, {"money": 1.0, "energy": 0.0})
    with pytest.raises(TypeError, match="state: expected a SlotState, got str"):
        f("state", ())


def test_options_and_states_are_checked_where_given():
    """SolveOptions' counts and limits are checked when built (a negative time limit or work
    budget, no iterations per slot, no group allowed: ValueError naming the field); solve_slot
    names an Instance passed where one slot's state is meant, and Instance.state an index that
    is not an integer."""
    from solver.io.synthetic import random_instance
    for kw, words in [({"time_limit_s": -1.0}, "time_limit_s: expected a number >= 0"),
                      ({"time_limit_s": float("nan")}, "time_limit_s"),
                      ({"max_structures": -5}, "max_structures: expected a number >= 0"),
                      ({"iterations_per_slot": 0}, "iterations_per_slot: expected an integer >= 1, got 0"),
                      ({"iterations_per_slot": 2.5}, "iterations_per_slot"),
                      ({"max_groups": 0}, "max_groups: expected an integer >= 1 or None, got 0"),
                      ({"frontier": 0}, "frontier: expected an integer >= 1")]:
        with pytest.raises(ValueError, match=words):
            SolveOptions(**kw)
    SolveOptions(time_limit_s=0.0, max_structures=0, max_groups=None)   # limits at their edge are allowed
    inst = random_instance(3, n=3, L=4, slots=2)
    with pytest.raises(TypeError, match=r"state: expected a SlotState \(one slot of an Instance is instance.state\(t\)\)"):
        solve_slot(inst)
    for t, kind in (("0", TypeError), (1.0, TypeError), (True, TypeError), (2, IndexError), (-1, IndexError)):
        with pytest.raises(kind, match="slot"):
            inst.state(t)
    assert inst.state(np.int64(1)).t == 1


def test_evaluate_refuses_a_plan_that_is_not_one():
    """evaluate gives figures for structurally valid plans only: a plan leaving layers out or
    naming an unknown device is refused, naming what is wrong (it had given a batch time below
    the whole model's)."""
    from solver.model import Group, Plan
    state = random_state(4, n=3, L=6)
    B = state.workload.batch
    whole = Plan((Group(devices=(0,), cuts=(6,), share=B),))
    assert evaluate(whole, state).batch_time > 0
    for plan, words in [(Plan((Group(devices=(0,), cuts=(4,), share=B),)), "layers_covered"),
                        (Plan((Group(devices=(7,), cuts=(6,), share=B),)), "known_device"),
                        (Plan((Group(devices=(0,), cuts=(6,), share=B - 1),)), "share")]:
        with pytest.raises(ValueError, match=f"evaluate: expected a structurally valid plan.*{words}"):
            evaluate(plan, state)


@pytest.mark.parametrize("seed", [1, 2, 5, 6])
def test_groups_deeper_than_the_tuning_depth_where_only_they_hold_the_model(seed):
    """A model that needs more devices than SearchTuning's depth (each device holds 0.45 of what
    the whole model needs at one micro-batch, the depth is 2) still gets a plan, its groups
    deeper than the depth, and the message says so; the default depth (7) needs no note."""
    from solver.solve.options import SearchTuning
    state = random_state(seed, n=7, L=10, batch=32, micro_batch=2)
    need = float(state.param_prefix[-1]) * state.workload.opt_factor + 2 * float(state.stash_prefix[-1])
    state = dataclasses.replace(state, devices=tuple(dataclasses.replace(d, memory_bytes=0.45 * need)
                                                     for d in state.devices))
    shallow = SolveOptions(tuning=SearchTuning(max_depth=2, max_depth_many=2))
    res = solve_slot(state, (0.0, 0.0), 1.0, options=shallow)
    full = solve_slot(state, (0.0, 0.0), 1.0)
    assert full.plan is not None and res.plan is not None
    assert res.plan.validate(state) == []
    assert max(len(g.devices) for g in res.plan.groups) > 2
    assert "beyond SearchTuning's depth 2" in res.message
    assert "beyond" not in full.message


def _fuzz_slot_small_fast_devices():
    """5 devices of an MLP: the two fastest cannot hold a layer (an outside fuzz's slot)."""
    from solver.io.synthetic import random_device
    from solver.io.workloads import read_workload_csv
    from conftest import REPO
    st = random_state(1, n=5, L=4)
    wl = read_workload_csv(REPO / "models" / "mlp.csv", 16, 1)
    mem = [10.6e6, 10.6e6, 26.5e6, 26.5e6, 26.5e6]
    devs = tuple(dataclasses.replace(random_device(np.random.default_rng(0), f"d{i}", ("V100",)), name=f"d{i}",
                                     memory_bytes=m) for i, m in enumerate(mem))
    return dataclasses.replace(st, devices=devs, workload=wl, speed=np.array([8e12, 8e12, 6e12, 6e12, 6e12]),
                               speed_factor=np.ones(5))


def _fuzz_slot_recompute_mid_small():
    """3 available devices whose only plans put the small one mid-pipeline under 1F1B with
    recomputation (an outside fuzz's slot, seed 885170)."""
    st = random_state(885170, n=4, L=10, batch=32, micro_batch=2, p_available=0.7, scale=30.0)
    w = st.workload
    need = w.opt_factor * np.sum(w.param_bytes) + w.micro_batch * sum(layer.stash_bytes for layer in w.layers)
    mean = np.mean([d.memory_bytes for d in st.devices])
    return dataclasses.replace(st, devices=tuple(dataclasses.replace(d, memory_bytes=need / 3 * 1.05 * d.memory_bytes / mean)
                                                 for d in st.devices))


def _fuzz_slot_deep(seed: int, L: int, batch: int, u: int, p: float, scale: float, mem: float):
    """A random slot whose memory allows only one deep pipeline of the memory-rich devices under
    1F1B with recomputation (an outside fuzz's slots 882293 and 885293): mem < 0 sets each
    device's memory so that the model fills about -mem devices, mem > 0 scales it."""
    st = random_state(seed, n=24, L=L, batch=batch, micro_batch=u, p_available=p, scale=scale)
    w = st.workload
    need = float(w.opt_factor * np.sum(w.param_bytes) + w.micro_batch * sum(layer.stash_bytes for layer in w.layers))
    mean = np.mean([d.memory_bytes for d in st.devices])
    return dataclasses.replace(st, devices=tuple(dataclasses.replace(
        d, memory_bytes=need / -mem * 1.05 * d.memory_bytes / mean if mem < 0 else d.memory_bytes * mem)
        for d in st.devices))


@pytest.mark.parametrize("make, queues", [(_fuzz_slot_small_fast_devices, (0.0, 0.0)),
                                          (_fuzz_slot_recompute_mid_small, (10.0, 10.0)),
                                          (lambda: _fuzz_slot_deep(882293, 32, 256, 2, 0.7, 30.0, -8.0), (1.0, 0.5)),
                                          (lambda: _fuzz_slot_deep(885293, 80, 16, 1, 1.0, 3.0, 0.05), (10.0, 10.0))])
def test_no_false_infeasible_where_only_unusual_groups_hold_the_model(make, queues):
    """Slots the search had called infeasible ("no device or group ... can hold the model")
    while the exact oracle finds a plan: the fastest devices too small for a layer, or the only
    order putting the smallest device mid-pipeline under 1F1B with recomputation, or one deep
    pipeline of the memory-rich devices. The search now finds a valid plan (within 1% of the
    oracle's where the oracle reaches)."""
    from solver.solve import solve_exact
    st = make()
    res = solve_slot(st, queues, 1.0)
    assert res.success, res.message
    assert res.plan.validate(st) == []
    if len(st.available_indices) <= 5:   # the oracle's reach
        ex = solve_exact(st, queues, 1.0)
        assert ex.success and res.objective <= ex.objective * 1.01


def test_schedules_off_means_gpipe_without_recomputation():
    """SolveOptions(schedules=False): every group of the answer and of its pool runs GPipe without
    recomputation, but for a group a baseline brought as it is (DAPPLE's 1F1B); the polish
    had offered other variants anyway (an outside fuzz's 6 slots)."""
    from benchmarks.bench_classes import case_state
    st = case_state("vgg16", ("A100-SXM4-40GB",), 3, 256, lost=1, seed=880055)   # the fuzz's slot
    w = st.workload
    need = w.opt_factor * np.sum(w.param_bytes) + w.micro_batch * sum(layer.stash_bytes for layer in w.layers)
    st = dataclasses.replace(st, devices=tuple(dataclasses.replace(d, memory_bytes=need / 2 * 1.05)
                                               for d in st.devices))
    assert all(f(st) is None for f in baselines.ALL.values())
    res = solve_slot(st, (10.0,), 100.0, options=SolveOptions(schedules=False))
    assert res.success and all((g.schedule, g.recompute) == ("gpipe", False) for g in res.plan.groups)
    for seed in range(6):
        st = random_state(400 + seed, n=6, L=12, scale=0.05)
        brought = {(g.devices, g.cuts, g.schedule, g.recompute) for f in baselines.ALL.values()
                   if (b := f(st)) is not None for g in b.groups}
        res = solve_slot(st, (1.0, 0.5), 1.0, options=SolveOptions(schedules=False, keep_candidates=True))
        for p, _, _ in ([(res.plan, 0, 0)] if res.plan is not None else []) + list(res.candidate_pool):
            assert all((g.schedule, g.recompute) == ("gpipe", False)
                       or (g.devices, g.cuts, g.schedule, g.recompute) in brought for g in p.groups), p


def test_dp_x_pp_shapes_get_variant_cuts_beyond_16_devices():
    """Above SearchTuning.large_devices (16) devices score_groups skips each variant's own cuts
    (their DPs would spend the families' budget), but the dp x pp shapes of split_pipes exist
    for memory-bound slots where those cuts are what lets a pipeline hold its share: on 32
    devices at 0.35 of the whole-model memory (PipeDream ResNet-50, 177 layers) 16 devices as
    2 x 8 hold nothing without them and fit with them, and the search's plan is at least that
    good (it had ended 12% above it, 0.283 against 0.252: bench_budget seeds 820000+, slot 18,
    46.7% above a 16x search)."""
    from benchmarks.bench_quality import memory_level_slot
    from solver import load_instance
    from solver.solve.families import split_pipes
    from solver.solve.scoring import Scorer
    from conftest import REPO
    wl = load_instance(REPO / "instances" / "pipedream_resnet50.toml").workload
    state, Q = memory_level_slot(820018, wl, 32, 0.35, np.random.default_rng(0), queues=False)
    got = []
    for vc in (False, True):
        sc = Scorer(state, np.asarray(Q), 1.0, SolveOptions(), None)
        sc.budget = math.inf
        groups = dict(split_pipes(state, sc, 8, sc.tuning))["pipes16x2"]
        got.append(sc.score_groups(groups, source="pipes16x2", variant_cuts=vc))
    assert got[1] is not None and any(e[2:] != () for e in got[1].structure)
    assert got[0] is None or got[0].objective > got[1].objective * 1.5
    res = solve_slot(state, Q, 1.0)
    assert res.success and res.plan.validate(state) == []
    assert res.objective <= got[1].objective * (1 + 1e-9)


def _audit_tight_slot(seed: int):
    """A random slot of 4-8 devices whose memory holds 0.15-0.4 of the model's one-micro-batch
    need each (an outside audit's sweep, session 35)."""
    rng = np.random.default_rng(seed)
    n, L = int(rng.integers(4, 9)), int(rng.integers(5, 14))
    u = int(rng.choice([1, 2, 4, 8]))
    B = u * int(rng.integers(2, 9))
    st = random_state(seed, n=n, L=L, batch=B, micro_batch=u)
    level = float(rng.uniform(0.15, 0.4))
    w = st.workload
    need = w.opt_factor * sum(layer.param_bytes for layer in w.layers) + u * sum(layer.stash_bytes for layer in w.layers)
    return dataclasses.replace(st, devices=tuple(dataclasses.replace(d, memory_bytes=level * need * float(rng.uniform(0.8, 1.25)))
                                                 for d in st.devices))


@pytest.mark.parametrize("seed", [7777002, 7777384, 9990048, 9990115, 9990137])
def test_no_false_infeasible_where_one_pipeline_fits_only_in_some_order(seed):
    """Slots the search had called infeasible (an outside audit: 7 of 266 such verdicts in a
    400-slot sweep, 9 of 278 in another) where one pipeline of the whole batch fits only with
    particular devices at particular stages; the subset DP of solve.rescue finds such an order.
    A valid plan, and where the exact oracle reaches (5 devices) within 5% of its objective (the
    polish refines the rescued order but need not reach the oracle's: 3.9% and 1.2% above it on
    7777002 and 9990137)."""
    from solver.solve import solve_exact
    st = _audit_tight_slot(seed)
    res = solve_slot(st, (0.0, 0.0), 1.0)
    assert res.success, res.message
    assert res.plan.validate(st) == []
    if len(st.available_indices) <= 5:
        ex = solve_exact(st, (0.0, 0.0), 1.0)
        assert ex.success and res.objective <= ex.objective * 1.05


def test_small_slots_try_every_order_of_five_devices():
    """SearchTuning.all_orders_small = 5: an outside audit's 5-device slot whose best plan is one
    5-stage pipeline in an order the 4-device rule never tried ended 7.2% above the oracle."""
    from solver.solve import solve_exact
    from solver.solve.options import SearchTuning
    st = random_state(5553140, n=5, L=9, batch=24, micro_batch=4, p_available=0.75)
    w = st.workload
    need = w.opt_factor * float(np.sum(w.param_bytes)) + w.micro_batch * float(np.sum(w.stash_bytes))
    c = 0.8 * need / max(d.memory_bytes for d in st.devices)
    st = dataclasses.replace(st, devices=tuple(dataclasses.replace(d, memory_bytes=d.memory_bytes * c) for d in st.devices))
    ex = solve_exact(st, None, 1.0)
    four = solve_slot(st, None, 1.0, options=SolveOptions(tuning=SearchTuning(all_orders_small=4)))
    res = solve_slot(st, None, 1.0)
    assert four.objective > ex.objective * 1.05
    assert res.plan.validate(st) == [] and res.objective == pytest.approx(ex.objective, rel=1e-9)


def _four_servers(seed: int):
    """A random 16-device slot on four servers of four: 200 Gbit/s inside a server, 1-3 Gbit/s
    between (the fastest devices spread over the servers), a model of large parameters."""
    st = random_state(seed, n=16, L=8, scale=20.0)
    rng = np.random.default_rng(seed)
    where = np.repeat(np.arange(4), 4)
    inter = rng.uniform(1.0, 3.0, (16, 16)) * 1e9 / 8
    bw = np.where(where[:, None] == where[None, :], 200e9 / 8, np.minimum(inter, inter.T))
    lat = np.where(where[:, None] == where[None, :], 5e-6, 2e-4)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    return dataclasses.replace(st, bandwidth=bw, latency=lat), where


@pytest.mark.parametrize("seed", range(12))
def test_never_worse_than_data_parallelism_inside_one_server(seed):
    """The search's plan is at least as good as data parallelism over any subset of one
    server's devices (every subset scored): the prefixes of the fastest devices sync over the
    slow links between servers, and before the clustered family (families._clustered_dp) 4 of
    these 12 slots ended 9-39% above such a plan (bench_budget seed 820015, 64 devices: 43%)."""
    from solver.solve.scoring import Scorer
    state, where = _four_servers(seed)
    res = solve_slot(state, (0.0, 0.0))
    sc = Scorer(state, np.zeros(2), 1.0, SolveOptions(), None)
    best = math.inf
    for s in range(4):
        devs = [d for d in range(16) if where[d] == s and state.available[d]]
        for k in range(2, len(devs) + 1):
            for sub in itertools.combinations(devs, k):
                got = sc.score_groups([(d,) for d in sub], source="test")
                if got is not None:
                    best = min(best, got.objective)
    assert res.success and res.plan.validate(state) == []
    assert res.objective <= best * (1 + 1e-9)


def test_energy_bound_slot_cuts_for_busy_energy(tmp_path):
    """An outside audit's slot (the default instance at batch 9 with small memories, slot 15,
    energy weighed 50 budgets' worth against V = 0.1): the least-energy plan is a 1F1B pipeline of
    a T4 and a K80 cut at 13 of VGG-16's 16 layers, far from the balanced cut 8 that the
    min-bottleneck DP gives; the search scored that pair only at balanced cuts and ended 12.9%
    above the oracle. With the busy-energy re-cuts it is within 1%."""
    from pathlib import Path
    from solver import load_instance
    src = Path(__file__).resolve().parents[1] / "instances"
    for f in ("default_devices.csv", "default_links.csv"):
        (tmp_path / f).write_text((src / f).read_text())
    text = (src / "default.toml").read_text().replace("batch = 192\nmicro_batch = 8\n", "batch = 9\nmicro_batch = 1\n")
    blocks = text.split("[[devices]]\n")
    memory = (2, 3, 1, 12, 16, 8)
    assert len(blocks) == 7, "the default instance's six devices"
    blocks[1:] = [b.replace("efficiency = 0.5\n", f"efficiency = {0.168 if i == 4 else 0.5}\nmemory_gb = {m}\n", 1)
                  for i, (b, m) in enumerate(zip(blocks[1:], memory))]
    (tmp_path / "default.toml").write_text("[[devices]]\n".join(blocks))
    state = load_instance(tmp_path / "default.toml").state(15)
    got = solve_slot(state, (0.0, 50.0), 0.1)
    exact = solve_slot(state, (0.0, 50.0), 0.1, options=SolveOptions(exact=True))
    assert got.success and exact.success
    assert got.objective <= exact.objective * 1.01, (got.message, exact.message)
