"""The class-level search (solve.classes): which slots it applies to, the soundness of its
plans (valid, never worse than a fixed candidate, above its lower bound), the cut-DP facts its
enumeration rests on, and its fallbacks."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from solver import SolveOptions, baselines, evaluate, solve_slot
from solver.io.instance import load_instance
from solver.model import Plan
from solver.solve.classes import applies, device_classes, split_uneven
from solver.solve.options import SearchTuning
from solver.solve.scoring import Scorer
from solver.solve.schedules import group_entry
from solver.subproblems.cache import SlotCache

KINDS = {"A100-SXM4-40GB": 1.2e13, "V100-SXM2-16GB": 0.7e13}
"""FLOP/s each kind's measured times imply at micro-batch 1 (4% more per doubling)."""
SIZES = (1, 2, 4, 8)


def layers() -> str:
    """A 12-layer table with seconds measured at micro-batch sizes 1-8 on both kinds."""
    cols = [f"{w}_s:{k}@mbs{b}@tp1" for k in KINDS for b in SIZES for w in ("fwd", "bwd")]
    rows = ["name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes," + ",".join(cols)]
    for i in range(12):
        f, g = (3 + i % 4) * 1e11, (6 + i % 3) * 1e11
        times = [x / (r * (1 + 0.04 * b.bit_length())) for r in KINDS.values() for b in SIZES for x in (f, g)]
        rows.append(f"l{i},{f},{g},{(1 + i % 5) * 1e6},{(2 + i % 3) * 2e7},{(1 + i % 2) * 1e9},"
                    + ",".join(f"{t!r}" for t in times))
    return "\n".join(rows) + "\n"


def cluster(tmp_path: Path, *, a100_gb: float = 40, v100_gb: float = 16, servers: int = 2, batch: int = 256,
            extra: str = "", micro: int = 2):
    """`servers` servers of 4 A100s and as many of 4 V100s (the memory given), 200 Gb/s inside a
    server and 25 between, a 12-layer model whose activations make memory bind at large
    shares, timed at micro-batch sizes 1-8, a money budget."""
    (tmp_path / "layers.csv").write_text(layers())
    body = ['name = "classes"', "num_slots = 1", "[workload]", 'model = "layers.csv"', f"batch = {batch}",
            f"micro_batch = {micro}", "[network]", "intra_server_gbps = 200.0",
            "inter_server_gbps = 25.0", "intra_server_latency_ms = 0.001", "inter_server_latency_ms = 0.01", ""]
    for kind, gb in (("A100-SXM4-40GB", a100_gb), ("V100-SXM2-16GB", v100_gb)):
        for s in range(servers):
            srv = f"{kind[:4]}-{s}"
            body += ["[[servers]]", f'name = "{srv}"', ""]
            for g in range(4):
                body += ["[[devices]]", f'name = "{srv}-g{g}"', f'kind = "{kind}"', f'server = "{srv}"',
                         f"memory_gb = {gb}", ""]
    body += ["[[budgets]]", 'kind = "money"', "limit = 1.0", "", extra]
    (tmp_path / "classes.toml").write_text("\n".join(body))
    return load_instance(tmp_path / "classes.toml").state(0)


def test_classes_of_a_cluster_of_like_servers(tmp_path) -> None:
    state = cluster(tmp_path)
    found = device_classes(state, SlotCache(state))
    assert [(len(c.members), c.counts) for c in found] == [(8, (4, 4)), (8, (4, 4))]
    assert sorted(d for c in found for d in c.members) == list(state.available_indices)
    for c in found:
        assert len({state.devices[d].kind for d in c.members}) == 1
        servers = [int(state.network.server[d]) for d in c.members]
        assert servers == sorted(servers)           # by server, so a unit lies inside one
    assert applies(found, state.n, SolveOptions())
    both = solve_slot(state, options=SolveOptions(tp_degrees=(1,)))      # the default: both searches, the better kept
    auto = solve_slot(state, options=SolveOptions(tp_degrees=(1,), classes="auto"))
    off = solve_slot(state, options=SolveOptions(tp_degrees=(1,), classes="off"))
    assert both.objective == min(auto.objective, off.objective)
    assert both.lower_bound == min(auto.lower_bound, off.lower_bound)
    assert "search's best was" in both.message
    assert not applies(found, state.n, SolveOptions(tuning=SearchTuning(class_from_devices=17)))


def test_no_classes_where_a_link_breaks_the_symmetry(tmp_path) -> None:
    link = '[[links]]\na = "A100-0-g0"\nb = "V100-1-g3"\ngbps = 3.0\n'
    state = cluster(tmp_path, extra=link)
    assert device_classes(state, SlotCache(state)) is None
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1,), classes="auto"))
    assert res.success and not res.message.startswith("class-level")


@pytest.mark.parametrize("degrees", [(1,), (1, 2, 4)])
def test_class_search_runs_and_is_sound(tmp_path, degrees) -> None:
    state = cluster(tmp_path)
    res = solve_slot(state, options=SolveOptions(tp_degrees=degrees, classes="auto"))
    assert res.success and res.message.startswith("class-level search over 2 device classes")
    plan = res.plan
    assert plan.validate(state) == []
    assert sum(g.share for g in plan.groups) == state.workload.batch
    used = [d for g in plan.groups for d in (*g.devices, *(p for peers in g.tp_peers for p in peers))]
    assert len(used) == len(set(used)) and set(used) <= set(state.available_indices)
    assert res.lower_bound <= res.objective * (1 + 1e-9)
    # no worse than any baseline that fits (the fixed candidates are scored too)
    for name, f in baselines.ALL.items():
        p = f(state)
        if p is None or p.validate(state):
            continue
        assert res.batch_time <= evaluate(p, state).batch_time * (1 + 1e-9), name


def test_class_search_close_to_the_device_search(tmp_path) -> None:
    """On this cluster the uniform shapes hold the device-level search's plan (a regression
    figure of the kind bench_classes prints, not an invariant: 1%)."""
    state = cluster(tmp_path)
    auto = solve_slot(state, options=SolveOptions(tp_degrees=(1, 2), classes="auto"))
    off = solve_slot(state, options=SolveOptions(tp_degrees=(1, 2), classes="off"))
    assert auto.message.startswith("class-level") and not off.message.startswith("class-level")
    assert auto.objective <= off.objective * 1.01


@settings(max_examples=8)
@given(q=st.sampled_from([0.0, 0.5, 5.0]), batch=st.sampled_from([64, 256, 1024]), seed=st.integers(0, 3))
def test_never_worse_than_keeping_the_previous_plan(tmp_path_factory, q, batch, seed) -> None:
    state = cluster(tmp_path_factory.mktemp("c"), batch=batch)
    rng = np.random.default_rng(seed)
    name = list(baselines.ALL)[int(rng.integers(len(baselines.ALL)))]
    prev = baselines.ALL[name](state)
    if prev is None or prev.validate(state):
        prev = baselines.ALL["even-dp"](state)
    if prev is None or prev.validate(state):
        return
    res = solve_slot(state, [q], V=1.0, previous_plan=prev, options=SolveOptions(tp_degrees=(1,), classes="auto"))
    assert res.message.startswith("class-level")
    sc = Scorer(state, np.array([q]), 1.0, SolveOptions(tp_degrees=(1,)), prev)
    kept = sc.score(tuple(group_entry(g, sc.u) for g in prev.groups), prev.shares)
    assert kept is not None and res.objective <= kept.objective * (1 + 1e-9)
    assert res.lower_bound <= res.objective * (1 + 1e-9)


def test_1f1b_takes_gpipe_cuts_and_memory_is_monotone(tmp_path) -> None:
    """What class_options rests on, at one micro-batch of memory: the 1F1B cut DP's answer is
    GPipe's (with the same recomputation); a pipeline that does not fit does not fit shallower,
    nor at a larger micro-batch size."""
    state = cluster(tmp_path, a100_gb=24, v100_gb=12)
    sc = Scorer(state, np.zeros(1), 1.0, SolveOptions(), None)
    rng = np.random.default_rng(7)
    fits = misses = 0
    for _ in range(60):
        k = int(rng.integers(1, 9))
        d = tuple(int(x) for x in rng.permutation(state.n)[:k])
        for rc in (False, True):
            for u in (1, 2, 4, 8):
                mb = sc.mb(u)
                g = sc.cuts(d, None, mb, ("gpipe", rc))
                assert sc.cuts(d, None, mb, ("1f1b", rc)) == g
                if g is None:
                    misses += 1
                    if k > 1:
                        assert sc.cuts(d[:-1], None, mb, ("gpipe", rc)) is None
                    if u < 8:
                        assert sc.cuts(d, None, sc.mb(2 * u), ("gpipe", rc)) is None
                else:
                    fits += 1
    assert fits and misses          # both cases were exercised


def test_a_class_without_a_shape_of_its_own_is_left_out(tmp_path) -> None:
    # V100s of 1 GB hold no pipeline: the class search plans on the A100s alone
    state = cluster(tmp_path, v100_gb=1)
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1,), classes="auto"))
    assert res.success and res.message.startswith("class-level search")
    assert res.plan.validate(state) == []
    assert all("A100" in state.devices[d].kind for g in res.plan.groups for d in g.devices)


def test_no_shape_at_all_falls_back_to_the_device_search(tmp_path) -> None:
    # V100s of 1 GB and A100s of 2 GB: no class shape holds the model, and the message says so
    state = cluster(tmp_path, v100_gb=1, a100_gb=2)
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1,), classes="auto"))
    assert "classes auto: no shape of the device classes holds the model" in res.message


def test_classes_option_checked(tmp_path) -> None:
    state = cluster(tmp_path)
    with pytest.raises(ValueError, match="classes: expected 'both', 'auto' or 'off', got 'some'"):
        solve_slot(state, options=SolveOptions(classes="some"))


def test_small_slots_keep_the_device_search(tmp_path) -> None:
    state = cluster(tmp_path, servers=1)         # 8 devices, below class_from_devices
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1,), classes="auto"))
    assert res.success and not res.message.startswith("class-level")
    assert "(classes auto: not 16 or more available devices" in res.message
    assert isinstance(res.plan, Plan)


@pytest.mark.parametrize("lost", [(2,), (2, 17)])
def test_a_pool_that_lost_devices_is_still_a_pool(tmp_path, lost) -> None:
    """A preempted GPU leaves its server with fewer devices of its class: the class search
    still applies, forms TP units inside servers (a server's leftover devices idle at that
    degree) and returns a sound plan on the devices that are left."""
    state = cluster(tmp_path, servers=3)          # A100 servers 0-2 (devices 0-11), V100 servers 3-5
    avail = np.array(state.available, dtype=bool)
    avail[list(lost)] = False
    state = dataclasses.replace(state, available=avail)
    whole = device_classes(state, SlotCache(state), 4)
    assert applies(whole, len(state.available_indices), SolveOptions())
    assert all(list(c.counts) == sorted(c.counts, reverse=True) for c in whole)     # fullest servers first
    found = split_uneven(whole, 4)
    assert found is not None and sorted(d for c in found for d in c.members) == list(state.available_indices)
    # a kind that lost devices is split into parts of one per-server count each (3 and 4)
    lost_kinds = {state.devices[d].kind for d in lost}
    assert all(len(set(c.counts)) == 1 for c in found)
    assert all((c.pool >= 0) == (c.kind in lost_kinds) for c in found)
    assert sorted(c.counts[0] for c in found if c.pool >= 0) == sorted([3, 4] * len(lost_kinds))
    for c in found:
        for t in (1, 2, 4):
            units = c.units(t)
            assert all(len(u) == t and len({int(state.network.server[d]) for d in u}) == 1 for u in units)
            assert len(units) == sum(n // t for n in c.counts)
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1, 2, 4), classes="auto"))
    assert res.success and res.message.startswith("class-level search"), res.message
    assert res.plan.validate(state) == []
    used = [d for g in res.plan.groups for d in (*g.devices, *(p for peers in g.tp_peers for p in peers))]
    assert len(used) == len(set(used)) and set(used) <= set(state.available_indices)
    assert sum(g.share for g in res.plan.groups) == state.workload.batch


def test_ragged_shapes_of_a_class_with_uneven_servers() -> None:
    """A class whose servers hold 4, 4 and 3 devices (fullest first): ragged shapes of dp
    pipelines, units % dp of them one stage deeper; packed at dp 3 each pipeline is a server;
    every shape uses each unit at most once and as many as it says."""
    from solver.solve.classes import DeviceClass, Shape, shapes
    c = DeviceClass(tuple(range(11)), "A100-SXM4-40GB", (4, 4, 3))
    index = [list(range(11))]
    found = [s for s in shapes([c], (1,), 16, [40e9]) if s.extra]
    assert {(s.dp, s.extra) for s in found} == {(dp, 11 % dp) for dp in range(2, 11) if 11 % dp}
    assert Shape(((0, 1, 3),), 3, False, 2).groups(index) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10)]
    for s in found:
        groups = s.groups(index)
        used = [d for g in groups for d in g]
        assert len(used) == len(set(used)) == s.devices == 11
        assert sorted({len(g) for g in groups}) == [s.chain[0][2], s.chain[0][2] + 1]
        assert sum(len(g) == s.chain[0][2] + 1 for g in groups) == s.extra


def test_a_chain_is_combined_with_the_other_classes_options() -> None:
    """The screen pairs a chain through classes 0 and 1 with class 2's own option (and keeps
    the chain alone), never with an option of a class the chain runs through; the pair, which
    takes the batch fastest, comes first."""
    from solver.solve.classes import DeviceClass, Option, Shape, screen
    classes = [DeviceClass(tuple(range(4 * i, 4 * i + 4)), k, (4,)) for i, k in enumerate(("A", "B", "C"))]
    chain = Option(Shape(((0, 1, 4), (1, 1, 4)), 1, False), 1, "gpipe", False, (1, 2), 0.5, 0.1, 1e9)
    single = [Option(Shape(((c, 1, 4),), 1, False), 1, "gpipe", False, (1, 2), 2.0, 0.1, 1e9) for c in range(3)]
    combos = screen([chain, *single], 3, 64, 1.0, [0.0] * 12, classes, 50, 4)
    assert combos[0] == (chain, single[2])
    assert (chain,) in combos
    for x in combos:
        used = [c for o in x for c in o.shape.classes]
        assert len(used) == len(set(used))


@settings(max_examples=6)
@given(lost=st.lists(st.integers(0, 23), min_size=1, max_size=4, unique=True), batch=st.sampled_from([64, 256]))
def test_pools_with_lost_devices_give_sound_plans(tmp_path_factory, lost, batch) -> None:
    """Random preemptions on 6 servers of 4 GPUs: where the class search applies, its plan is
    valid, uses available devices once each, its shares sum to B, its lower bound is at most its
    objective, and it is no worse than any baseline that fits."""
    state = cluster(tmp_path_factory.mktemp("c"), servers=3, batch=batch)
    avail = np.array(state.available, dtype=bool)
    avail[lost] = False
    state = dataclasses.replace(state, available=avail)
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1, 2, 4), classes="auto"))
    if not res.message.startswith("class-level"):
        return
    assert res.plan.validate(state) == []
    used = [d for g in res.plan.groups for d in (*g.devices, *(p for peers in g.tp_peers for p in peers))]
    assert len(used) == len(set(used)) and set(used) <= set(state.available_indices)
    assert sum(g.share for g in res.plan.groups) == batch
    assert res.lower_bound <= res.objective * (1 + 1e-9)
    for name, f in baselines.ALL.items():
        p = f(state)
        if p is None or p.validate(state):
            continue
        assert res.objective <= Scorer(state, np.zeros(1), 1.0, SolveOptions(), None).score(
            tuple(group_entry(g, state.workload.micro_batch) for g in p.groups), p.shares).objective * (1 + 1e-9), name


@pytest.mark.parametrize("mode", ["auto", "both"])
def test_the_time_limit_stops_the_class_search(tmp_path, mode) -> None:
    """A time limit that has passed before the first shape: the class search stops there, says
    so, and the result is still a sound plan (the fixed candidates are always scored); with
    "both" the device-level search gets no time of its own beyond the same deadline."""
    state = cluster(tmp_path)
    res = solve_slot(state, options=SolveOptions(tp_degrees=(1, 2, 4), classes=mode, time_limit_s=1e-9))
    assert res.success and res.plan.validate(state) == []
    assert "(time limit 1e-09 s: 0 of" in res.message if mode == "auto" else "time limit" in res.message
    full = solve_slot(state, options=SolveOptions(tp_degrees=(1, 2, 4), classes=mode))
    assert "time limit" not in full.message and full.objective <= res.objective * (1 + 1e-9)


def test_chains_with_a_degree_per_class() -> None:
    """SearchTuning.class_mixed_degrees: chains whose classes run at different TP degrees (each
    dividing its class's server counts, dp dividing every class's units at its degree); without
    it, one degree per chain."""
    from solver.solve.classes import DeviceClass, shapes
    a = DeviceClass(tuple(range(8)), "A", (4, 4))
    b = DeviceClass(tuple(range(8, 16)), "B", (4, 4))
    mixed = [s for s in shapes([a, b], (1, 2, 4), 16, [40e9, 16e9], True) if len(s.chain) > 1]
    one = [s for s in shapes([a, b], (1, 2, 4), 16, [40e9, 16e9], False) if len(s.chain) > 1]
    assert all(len({t for _, t, _ in s.chain}) == 1 for s in one)
    assert set(one) < set(mixed)
    degs = {tuple(t for _, t, _ in sorted(s.chain)) for s in mixed}
    assert degs == {(x, y) for x in (1, 2, 4) for y in (1, 2, 4)}
    for s in mixed:
        for c, t, p in s.chain:
            assert s.dp * p == 8 // t


def test_no_chain_gives_the_stronger_class_the_higher_degree() -> None:
    """With seconds per sample, a chain where a class that dominates another (faster and at
    least as much memory) runs at a higher TP degree than the other is left out, unless the
    other cannot take that degree (its servers hold 3 devices: degree 1 only); a class that is
    faster but has less memory is no stronger, and every degree pair stays."""
    from solver.solve.classes import DeviceClass, shapes
    a = DeviceClass(tuple(range(8)), "A", (4, 4))
    b = DeviceClass(tuple(range(8, 16)), "B", (4, 4))
    b3 = DeviceClass(tuple(range(8, 14)), "B", (3, 3))

    def pairs(classes, memory, seconds):
        return {tuple(t for _, t, _ in sorted(s.chain))
                for s in shapes(classes, (1, 2, 4), 16, memory, True, seconds) if len(s.chain) > 1}

    assert pairs([a, b], [40e9, 16e9], [1.0, 3.0]) == {(x, y) for x in (1, 2, 4) for y in (1, 2, 4) if x <= y}
    assert pairs([a, b], [16e9, 40e9], [1.0, 3.0]) == {(x, y) for x in (1, 2, 4) for y in (1, 2, 4)}
    assert pairs([a, b3], [40e9, 16e9], [1.0, 3.0]) == {(1, 1), (2, 1), (4, 1)}


def test_pruned_degree_pairs_change_no_plan_on_a_mixed_pool(tmp_path) -> None:
    """The class search with and without the dominance rule on the test cluster (A100s and
    V100s): the same objective."""
    import solver.solve.classes as classes_mod
    opt = SolveOptions(classes="auto", tp_degrees=(1, 2, 4))
    with_rule = solve_slot(cluster(tmp_path, batch=256), V=1.0, options=opt)
    keep = classes_mod._inverted
    try:
        classes_mod._inverted = lambda *a, **k: False
        without = solve_slot(cluster(tmp_path, batch=256), V=1.0, options=opt)
    finally:
        classes_mod._inverted = keep
    assert with_rule.objective == pytest.approx(without.objective, rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), frac=st.floats(0.5, 1.5))
def test_a_bound_on_score_never_drops_a_structure_below_it(seed, frac) -> None:
    """Scorer.score(..., bound=b) (the class search's pruning of exactly scored combinations)
    returns None only for structures whose objective is above b, and otherwise exactly what
    scoring without the bound returns: the candidate plans of a small random slot, each
    scored on fresh Scorers with a bound at `frac` times its own objective."""
    from solver.io.synthetic import random_state
    state = random_state(seed, n=4, L=8)
    res = solve_slot(state, V=1.0, options=SolveOptions(keep_candidates=True, classes="off"))
    Q = np.zeros(len(state.budgets))
    for plan, _, _ in res.candidate_pool[:12]:
        s = tuple(group_entry(g, state.workload.micro_batch) for g in plan.groups)
        free = Scorer(state, Q, 1.0, SolveOptions(), None, cache=SlotCache(state)).score(s)
        if free is None:
            continue
        b = frac * free.objective
        got = Scorer(state, Q, 1.0, SolveOptions(), None, cache=SlotCache(state)).score(s, bound=b)
        if got is None:
            assert free.objective > b
        else:
            assert got.objective == free.objective and got.plan == free.plan
