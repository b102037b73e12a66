"""Tensor parallelism: a stage held by t devices of one kind in one server (model.units,
solve.tp). Hand-worked cost, the all-reduce against a small event simulation, degree 1 equal to
the plain model, validation, JSON, migration, and the search and oracle choosing degrees."""
from __future__ import annotations

import heapq
from dataclasses import replace
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import SolveOptions, evaluate, solve_slot
from solver.cost.migration import MigrationFrom, migration_time
from solver.io.instance import load_instance
from solver.model import Group, Plan
from solver.model.memory import memory_use
from solver.model.plan import plan_from_json, plan_to_json, to_units
from solver.model.state import TP_ALLREDUCES, tp_collective_seconds
from solver.model.units import unit_state
from solver.solve.oracle import solve_exact
from solver.solve.options import SearchTuning
from solver.solve.tp import partitions, speed_matched, unit_throughput
from solver.subproblems.cache import SlotCache

GBIT = 1e9 / 8
LAYERS = """\
# input_bytes: 1000
name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes
l0,4e9,8e9,4e6,3e6,2e9
l1,4e9,8e9,2e6,3e6,2e9
l2,4e9,8e9,2e6,3e6,2e9
l3,4e9,8e9,1e6,3e6,2e9
"""


def instance(tmp_path: Path, devices: list[tuple[str, str, str]], memory_gb: float | None = None,
             batch: int = 16, micro: int = 4, layers: str = LAYERS):
    """Devices (name, kind, server) in declared servers ([[servers]], NICs not limiting), 200 Gb/s
    inside a server and 25 between servers (1 us / 10 us latency); a money budget."""
    (tmp_path / "layers.csv").write_text(layers)
    body = ['name = "tp"', "num_slots = 1", "[workload]", 'model = "layers.csv"', f"batch = {batch}",
            f"micro_batch = {micro}", "[network]", "intra_server_gbps = 200.0", "inter_server_gbps = 25.0",
            "intra_server_latency_ms = 0.001", "inter_server_latency_ms = 0.01", ""]
    for n, k, s in devices:
        body += ["[[devices]]", f'name = "{n}"', f'kind = "{k}"', f'server = "{s}"']
        if memory_gb is not None:
            body.append(f"memory_gb = {memory_gb}")
        body.append("")
    body += [x for srv in sorted({d[2] for d in devices}) for x in ("[[servers]]", f'name = "{srv}"', "")]
    body += ["[[budgets]]", 'kind = "money"', "limit = 1000.0", ""]
    p = tmp_path / "tp.toml"
    p.write_text("\n".join(body))
    return load_instance(p)


FOUR = [("a0", "V100", "A"), ("a1", "V100", "A"), ("b0", "V100", "B"), ("b1", "V100", "B")]


# ------------------------------------------------------------------ the cost of one TP stage

def test_tp_stage_cost_hand_worked(tmp_path):
    inst = instance(tmp_path, FOUR)
    s = inst.state(0)
    us = unit_state(s, [(0, 1), (2,), (3,)])
    wl = s.workload
    bw, lat, u = 200 * GBIT, 1e-6, wl.micro_batch
    for l in range(wl.num_layers):
        o = wl.out_bytes[l]
        ring = 2 * (2 - 1) / 2 * o / bw + 2 * (2 - 1) * lat / u          # one all-reduce, per sample
        assert us.layer_fwd_seconds[0, l] == pytest.approx(wl.fwd_flops[l] / (2 * s.speed[0]) + 2 * ring, rel=1e-12)
        assert us.layer_bwd_seconds[0, l] == pytest.approx(wl.bwd_flops[l] / (2 * s.speed[0]) + 2 * ring, rel=1e-12)
        assert us.layer_fwd_seconds[1, l] == s.layer_fwd_seconds[2, l]
    # memory: parameters halve; without a TP split of the saved bytes they stay whole
    mu = memory_use(us, (0, 1), (2, 4), 8, "gpipe")
    P = wl.param_bytes
    assert mu[0] == pytest.approx(wl.opt_factor * (P[0] + P[1]) / 2 + 8 * 6e6, rel=1e-12)
    assert mu[1] == pytest.approx(wl.opt_factor * (P[2] + P[3]) + 8 * 6e6, rel=1e-12)
    # the unit pays both devices' price and power
    assert us.price[0] == pytest.approx(s.price[0] + s.price[1])
    assert us.devices[0].busy_power_w == pytest.approx(2 * s.devices[0].busy_power_w)


def test_tp_split_of_saved_activations():
    from solver.io.synthetic import random_workload
    wl = random_workload(np.random.default_rng(3), 5, 8, 2)

    whole = tuple(0.25 * l.stash_bytes for l in wl.layers)
    w4 = replace(wl, tp_unsplit_stash=whole).at_tp(4)
    for a, b, w in zip(w4.layers, wl.layers, whole):
        assert a.stash_bytes == pytest.approx(w + (b.stash_bytes - w) / 4)
        assert a.param_bytes == pytest.approx(b.param_bytes / 4)
        assert a.out_bytes == b.out_bytes
    with pytest.raises(ValueError, match="tp: expected an integer >= 1, got 0"):
        wl.at_tp(0)


def ring_allreduce_event_sim(m: float, bw: list[float], lat: list[float]) -> float:
    """Seconds of a ring all-reduce of m bytes among t devices, chunk by chunk: in each of the
    2 (t - 1) steps (reduce-scatter, then all-gather) device i sends chunk m/t to i+1 over its
    link (bw[i] bytes/s, lat[i] s) as soon as it has received the chunk of the step before."""
    t = len(bw)
    ready = [0.0] * t           # when device i may send its next chunk
    events: list[tuple[float, int]] = []
    for _ in range(2 * (t - 1)):
        done = [ready[i] + m / t / bw[i] + lat[i] for i in range(t)]
        for i in range(t):
            heapq.heappush(events, (done[i], (i + 1) % t))
        arrived = [0.0] * t
        while events:
            when, dst = heapq.heappop(events)
            arrived[dst] = max(arrived[dst], when)
        ready = [max(ready[i], arrived[i]) for i in range(t)]
    return max(ready)


@given(t=st.integers(2, 8), m=st.floats(1e3, 1e9), slow=st.floats(0.1, 1.0), lat=st.floats(0, 1e-4))
def test_tp_allreduce_against_event_simulation(t, m, slow, lat):
    bw = 100 * GBIT
    uniform = ring_allreduce_event_sim(m, [bw] * t, [lat] * t)
    formula = tp_collective_seconds(np.array([m]), t, bw, lat, 1)[0] / TP_ALLREDUCES
    assert uniform == pytest.approx(formula, rel=1e-9)
    # one slower link: the formula (at the slowest link) is an upper bound, tight when uniform
    links = [bw] * t
    links[0] = bw * slow
    assert ring_allreduce_event_sim(m, links, [lat] * t) <= \
        tp_collective_seconds(np.array([m]), t, bw * slow, lat, 1)[0] / TP_ALLREDUCES * (1 + 1e-9)


# ------------------------------------------------------------------ degree 1 is the plain model

@given(seed=st.integers(0, 10_000))
@settings(max_examples=15)
def test_singleton_units_equal_the_physical_slot(tmp_path_factory, seed):
    inst = instance(tmp_path_factory.mktemp("s"), FOUR + [("c0", "A100-SXM4-40GB", "B")])
    s = inst.state(0)
    us = unit_state(s, [(i,) for i in range(s.n)])
    rng = np.random.default_rng(seed)
    devs = [int(x) for x in rng.permutation(s.n)]
    k = int(rng.integers(1, 4))
    groups, shares = [], [8, 8] if k > 1 else [16]
    for gi in range(min(k, 2)):
        stages = devs[gi * 2: gi * 2 + 2] if k > 1 else devs[:2]
        groups.append(Group(tuple(stages), (2, 4), shares[gi], "1f1b" if seed % 2 else "gpipe", bool(seed % 3 == 0)))
    plan = Plan(tuple(groups))
    a, b = evaluate(plan, s), evaluate(plan, us)
    assert b.batch_time == pytest.approx(a.batch_time, rel=1e-12)
    assert b.sync_time == pytest.approx(a.sync_time, rel=1e-12, abs=1e-15)
    assert np.allclose(b.costs, a.costs, rtol=1e-12)


# ------------------------------------------------------------------ plans with TP stages

def test_validate_tp_stages(tmp_path):
    inst = instance(tmp_path, FOUR + [("c0", "A100-SXM4-40GB", "A")])
    s = inst.state(0)

    def broken(plan):
        return {v.constraint for v in plan.validate(s)}

    ok = Plan((Group((0, 2), (2, 4), 16, tp_peers=((1,), (3,))),))
    assert ok.validate(s) == []
    assert ok.devices == (0, 1, 2, 3) and ok.groups[0].degrees == (2, 2)
    assert broken(Plan((Group((0, 2), (2, 4), 16, tp_peers=((4,), ())),))) == {"tp_stage"}      # two kinds
    assert broken(Plan((Group((0,), (4,), 16, tp_peers=((2,),)),))) == {"tp_stage"}           # two servers
    assert broken(Plan((Group((0, 1), (2, 4), 16, tp_peers=((1,), ())),))) == {"device_once"}
    assert broken(Plan((Group((0, 2), (2, 4), 16, tp_peers=((1,),)),))) == {"tp_peers"}
    msg = str(Plan((Group((0,), (4,), 16, tp_peers=((2,),)),)).validate(s)[0])
    assert "expected devices of one server" in msg and "a0" in msg and "b0" in msg


def test_tp_plan_json_and_describe(tmp_path):
    inst = instance(tmp_path, FOUR)
    s = inst.state(0)
    plan = Plan((Group((0, 2), (2, 4), 16, "1f1b", tp_peers=((1,), (3,))),))
    assert plan_from_json(plan_to_json(plan)) == plan
    assert '"tp_peers":[[1],[3]]' in plan_to_json(plan)
    assert "a0+a1[0:2] tp2" in plan.describe(s)
    # every figure of a TP plan is its units' (evaluate == the unit state's own evaluation)
    us, up = to_units(plan, s)
    assert evaluate(plan, s).batch_time == evaluate(up, us).batch_time


def test_migration_of_tp_shards(tmp_path):
    inst = instance(tmp_path, FOUR)
    s = inst.state(0)
    tp2 = Plan((Group((0,), (4,), 16, tp_peers=((1,),)),))
    alone = Plan((Group((0,), (4,), 16),))
    assert migration_time(tp2, tp2, s) == 0.0
    # device 0 held the first half of every layer: alone it needs the other half, from device 1
    need = s.workload.opt_factor * s.workload.param_bytes.sum()
    t = migration_time(tp2, alone, s)
    assert t == pytest.approx(need / 2 / (200 * GBIT) + 1e-6, rel=1e-9)
    # two devices of another server take over as a TP pair: each receives its half
    moved = Plan((Group((2,), (4,), 16, tp_peers=((3,),)),))
    assert migration_time(tp2, moved, s) == pytest.approx(need / 2 / (25 * GBIT) + 1e-5, rel=1e-9)
    # from one device to a TP pair: device 0 already holds its shard (the whole layer), 1 needs its half
    t2 = migration_time(alone, tp2, s)
    assert t2 == pytest.approx(need / 2 / (200 * GBIT) + 1e-6, rel=1e-9)
    # the receivers' seconds kept from one previous plan (MigrationFrom, SlotCache.migration) are the fresh ones
    kept, cache = MigrationFrom(tp2, s), SlotCache(s)
    for p in (alone, moved, tp2, moved, alone):
        assert kept.seconds(p, s) == cache.migration(tp2, p) == migration_time(tp2, p, s)


def test_search_uses_tp_where_nothing_fits_alone(tmp_path):
    # a layer's model state is 2e9 B x 4 (Adam) = 8 GB: no 6 GB device holds one, a TP pair or
    # quadruple does
    eight = [(f"{srv}{i}", "V100", srv) for srv in "AB" for i in range(4)]
    inst = instance(tmp_path, eight, memory_gb=6)
    s = inst.state(0)
    plain = solve_slot(s, V=1.0, options=SolveOptions(tp_degrees=(1,)))
    res = solve_slot(s, V=1.0)
    assert res.success, res.message
    assert res.plan.uses_tp and res.plan.validate(s) == []
    assert "TP:" in res.message
    assert not plain.success
    for g in res.plan.groups:
        for u in g.units():
            assert len({s.devices[i].kind for i in u}) == 1
            assert len({int(s.network.server[i]) for i in u}) == 1


def test_online_run_and_compare_where_the_plan_needs_tp(tmp_path):
    """run_online and compare_policies on a slot only TP can serve (it had failed inside the
    controller: the slot's cache evaluated TP plans with per-device coefficients); the LP's
    shares of a TP plan are computed on its units, valid, and at zero queues no slower."""
    from solver.online import run_online
    from solver.online.compare import compare_policies
    from solver.online.policies import with_even_shares, with_lp_shares
    eight = [(f"{srv}{i}", "V100", srv) for srv in "AB" for i in range(4)]
    inst = instance(tmp_path, eight, memory_gb=6)
    run = run_online(inst)
    assert run.success and plan_from_json(run.rows["plan_json"].iloc[0]).uses_tp
    table = compare_policies(inst, policies=["ours", "even-dp"])
    assert set(table.policy) == {"ours", "even-dp"}
    s = inst.state(0)
    plan = solve_slot(s, V=1.0).plan
    uneven = Plan(tuple(replace(g, share=g.share + d) for g, d in zip(plan.groups, (4, -4))))
    if len(plan.groups) == 2 and not uneven.validate(s):
        plan = uneven
    for q in (with_lp_shares(plan, s, (), 1.0), with_even_shares(plan, s)):
        assert q is not None and q.validate(s) == [] and q.uses_tp
        assert [g.tp_peers for g in q.groups] == [g.tp_peers for g in plan.groups]
    assert evaluate(with_lp_shares(plan, s, (), 1.0), s).batch_time <= evaluate(plan, s).batch_time * (1 + 1e-12)


@given(seed=st.integers(0, 10_000))
@settings(max_examples=12)
def test_tp_search_result_is_sound(tmp_path_factory, seed):
    rng = np.random.default_rng(seed)
    kinds = ["V100", "A100-SXM4-40GB"]
    devs = [(f"d{i}", kinds[int(rng.integers(0, 2))], "AB"[int(rng.integers(0, 2))]) for i in range(int(rng.integers(3, 7)))]
    inst = instance(tmp_path_factory.mktemp("p"), devs, memory_gb=float(rng.choice([12, 20, 40])))
    s = inst.state(0)
    plain = solve_slot(s, V=1.0, options=SolveOptions(tp_degrees=(1,)))
    res = solve_slot(s, V=1.0)
    if not res.success:
        assert not plain.success
        return
    plan = res.plan
    assert plan.validate(s) == []                       # memory per device under its own schedule too
    assert sum(g.share for g in plan.groups) == s.workload.batch
    assert len(plan.devices) == len(set(plan.devices))
    assert all(s.available[d] for d in plan.devices)
    for g in plan.groups:
        covered = [l for _, a, b in g.stages() for l in range(a, b)]
        assert covered == list(range(s.workload.num_layers))
    if plain.success:
        assert res.objective <= plain.objective * (1 + 1e-12)
    assert evaluate(plan, s).batch_time == pytest.approx(res.evaluation.batch_time, rel=1e-12)   # scored right


@given(seed=st.integers(0, 10_000))
@settings(max_examples=12)
def test_tp_lower_bound_holds_at_every_micro_batch_size(tmp_path_factory, seed):
    """With TP and several micro-batch sizes the descent bounds one size; the result's lower
    bound must hold for the plan chosen at any size (each size timed at its own speed)."""

    rng = np.random.default_rng(seed)
    kinds = ["V100", "A100-SXM4-40GB"]
    devs = [(f"d{i}", kinds[int(rng.integers(0, 2))], "AB"[int(rng.integers(0, 2))]) for i in range(int(rng.integers(3, 7)))]
    s = instance(tmp_path_factory.mktemp("u"), devs, memory_gb=float(rng.choice([12, 20, 40]))).state(0)
    wl = s.workload
    by_u = {}
    for u in (1, 2, 4, 8):
        f = float(rng.uniform(0.3, 1.5))
        by_u[u] = {d.kind: (tuple(np.asarray(wl.fwd_flops) / (0.5 * d.peak_flops) * f),
                            tuple(np.asarray(wl.bwd_flops) / (0.5 * d.peak_flops) * f)) for d in s.devices}
    s = replace(s, workload=replace(wl, measured=by_u[wl.micro_batch], measured_by_micro_batch=by_u))
    res = solve_slot(s, [float(rng.choice([0.0, 5.0]))], 1.0)
    if res.success:
        assert res.lower_bound <= res.objective * (1 + 1e-9), res.message
        assert res.plan.validate(s) == []


def test_a_tp_previous_plan_whose_units_the_descent_never_forms_is_kept(tmp_path):
    """Keeping the previous plan is always a candidate: a TP plan whose pairs are not the
    descent's index-order chunks (a1+a2 where the descent pairs a0+a1, a2+a3) is scored on its
    own units, so with a dear migration the result is no worse than keeping it."""
    eight = [(f"{srv}{i}", "V100", srv) for srv in "AB" for i in range(4)]
    s = instance(tmp_path, eight, memory_gb=6).state(0)
    first = solve_slot(s, V=1.0)
    assert first.success and first.plan.uses_tp
    turn = {0: 1, 1: 2, 2: 3, 3: 0, 4: 5, 5: 6, 6: 7, 7: 4}     # the same devices and links, pairs shifted by one
    prev = Plan(tuple(replace(g, devices=tuple(turn[d] for d in g.devices),
                              tp_peers=tuple(tuple(turn[d] for d in p) for p in g.tp_peers)) for g in first.plan.groups))
    assert prev.validate(s) == []
    assert evaluate(prev, s).batch_time == pytest.approx(first.batch_time, rel=1e-9)
    res = solve_slot(s, V=1.0, previous_plan=prev, options=SolveOptions(iterations_per_slot=1))
    assert res.success and res.plan.validate(s) == []
    assert res.objective <= evaluate(prev, s).batch_time * (1 + 1e-9)
    assert res.lower_bound <= res.objective * (1 + 1e-9)


def test_oracle_over_units_no_worse_than_the_search(tmp_path):
    inst = instance(tmp_path, FOUR, memory_gb=24)
    s = inst.state(0)
    search = solve_slot(s, V=1.0, options=SolveOptions(tp_degrees=(1, 2)))
    exact = solve_exact(s, V=1.0, tp_degrees=(1, 2))
    assert exact.success and search.success
    assert exact.objective <= search.objective * (1 + 1e-9)
    assert exact.plan.validate(s) == []
    assert exact.message.startswith("oracle over all ") and "ways of forming TP units" in exact.message
    # its first claim is the weakest of the unit sets' (an outside audit: it had opened with the best
    # set's "exact for the model" where another set was solved only on its frontier cut sets)
    assert ("exact only relative to the frontier cut sets" in exact.message) != ("exact for the model on each"
                                                                                 in exact.message)
    # with degree 1 only, the oracle is the plain one
    assert solve_exact(s, V=1.0).objective >= exact.objective * (1 - 1e-12)


def test_pool_steps_give_stages_of_one_kind_different_degrees(tmp_path):
    """Four V100s in two servers: the oracle's optimum holds one server's pair at tp 2 and the
    other's alone; the per-kind descent cannot form it, the per-server steps find it exactly."""
    s = instance(tmp_path, FOUR, memory_gb=16).state(0)
    exact = solve_exact(s, V=1.0, tp_degrees=(1, 2, 4, 8))
    found = solve_slot(s, V=1.0)
    per_kind = solve_slot(s, V=1.0, options=SolveOptions(tuning=SearchTuning(tp_pool_steps_up_to=0,
                                                                             tp_all_sets_up_to=0)))
    every_set = solve_slot(s, V=1.0, options=SolveOptions(tuning=SearchTuning(tp_pool_steps_up_to=0)))
    assert every_set.objective == pytest.approx(exact.objective, rel=1e-9)     # small: every unit set
    degrees = sorted(1 + len(p) for g in found.plan.groups for p in g.tp_peers)
    assert degrees[0] == 1 and degrees[-1] == 2
    assert found.objective == pytest.approx(exact.objective, rel=1e-9)
    assert per_kind.objective > exact.objective * (1 + 1e-3)
    assert not found.plan.validate(s)
    assert "in server" in found.message


def test_search_reports_whether_its_budget_stopped_it(tmp_path):
    """solve.search._search's report: a search its budget never stopped gives the same result
    on a larger budget (so the TP screen skips the full re-search), one that ran out says so."""
    from solver.solve.search import _search
    s = instance(tmp_path, FOUR, memory_gb=16).state(0)
    Q = np.zeros(len(s.budgets))
    free, tight = {}, {}
    a = _search(s, (), Q, 1.0, None, SolveOptions(), None, 0.0, free)
    b = _search(s, (), Q, 1.0, None, SolveOptions(max_structures=1e9), None, 0.0)
    _search(s, (), Q, 1.0, None, SolveOptions(max_structures=1), None, 0.0, tight)
    assert free["ran_out"] is False and tight["ran_out"] is True
    assert a.plan == b.plan and a.objective == b.objective
    half = solve_slot(s, V=1.0, options=SolveOptions(tuning=SearchTuning(tp_explore=0.5)))
    whole = solve_slot(s, V=1.0, options=SolveOptions(tuning=SearchTuning(tp_explore=1.0)))
    assert half.plan == whole.plan and half.objective == whole.objective


def test_time_limit_is_one_deadline_for_the_whole_solve(tmp_path):
    """SolveOptions.time_limit_s bounds the whole solve, TP descent and full searches together:
    a limit already spent leaves the fixed candidates' plan (sound, no better than the full
    search's) and says which configurations were not started; a limit never reached changes
    nothing; the exact oracle refuses a limit it would ignore."""
    eight = [(f"{srv}{i}", "V100", srv) for srv in "AB" for i in range(4)]
    s = instance(tmp_path, eight, memory_gb=24).state(0)
    full = solve_slot(s, V=1.0)
    spent = solve_slot(s, V=1.0, options=SolveOptions(time_limit_s=0.0))
    far = solve_slot(s, V=1.0, options=SolveOptions(time_limit_s=1e6))
    assert spent.success and spent.plan.validate(s) == []
    assert spent.objective >= full.objective * (1 - 1e-12)
    assert "not started (time limit)" in spent.message and "stopped by the time limit" in spent.message
    assert spent.candidates < full.candidates
    assert far.plan == full.plan and far.objective == full.objective
    assert "time limit" not in far.message
    with pytest.raises(ValueError, match="time_limit_s: the exact oracle runs to completion"):
        solve_slot(s, V=1.0, options=SolveOptions(exact=True, time_limit_s=1.0))


def test_degree_one_is_always_searched_and_the_message_says_so(tmp_path):
    """tp_degrees=(2,) searches degree 1 too (the descent starts there, a pool's leftovers stay
    alone): the same result as (1, 2), here a plan with stages of degree 1 beside a pair, and the
    message says degree 1 was searched although not asked for; (1, 2) does not say it."""
    s = instance(tmp_path, FOUR, memory_gb=16).state(0)
    only_two = solve_slot(s, V=1.0, options=SolveOptions(tp_degrees=(2,)))
    with_one = solve_slot(s, V=1.0, options=SolveOptions(tp_degrees=(1, 2)))
    assert only_two.plan == with_one.plan and only_two.objective == with_one.objective
    assert 1 in {1 + len(p) for g in only_two.plan.groups for p in g.tp_peers}
    assert "TP: degrees 2 (degree 1 is always searched too), " in only_two.message
    assert "always searched" not in with_one.message


def test_tp_degrees_checked(tmp_path):
    inst = instance(tmp_path, FOUR)
    with pytest.raises(ValueError, match="tp_degrees: expected a non-empty sequence of integers >= 1"):
        solve_slot(inst.state(0), options=SolveOptions(tp_degrees=(0, 2)))
    # a degree no server's pool of one kind can hold is said to be left out, not dropped unsaid
    res = solve_slot(inst.state(0), V=1.0, options=SolveOptions(tp_degrees=(1, 2, 16)))
    assert res.success and "tp degree 16: no server holds that many available devices of one kind" in res.message
    assert "tp degree" not in solve_slot(inst.state(0), V=1.0, options=SolveOptions(tp_degrees=(1, 2))).message


def test_llama_on_v100s_plans_with_tp(shared_data, tmp_path):
    """Sailor's LLAMA-3-8 has no tp-1 figures on a V100-16 and does not fit one: on Sailor's
    cluster the V100s are planned only at tp >= 4 (their measured degrees), never at tp 1.
    At tp 1 alone the model needs a pipeline deeper than the search's depth for 32 devices
    (8): the search goes deeper and says so."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_sailor_cluster import toml
    inst = load_instance(toml(tmp_path, 256, 1, "LLAMA-3-8"))
    s = inst.state(0)
    tp1 = solve_slot(s, V=1.0, options=SolveOptions(tp_degrees=(1,), classes="off"))
    assert tp1.success and tp1.plan.validate(s) == []
    assert max(len(g.devices) for g in tp1.plan.groups) > 8 and "beyond SearchTuning's depth 8" in tp1.message
    res = solve_slot(s, V=1.0)
    assert res.success, res.message
    assert res.plan.validate(s) == []
    v100 = [len(u) for g in res.plan.groups for u in g.units() if s.devices[u[0]].kind == "V100-SXM2-16GB"]
    assert v100 and min(v100) >= 4
    assert not any("V100-SXM2-16GB at tp 4" in n for n in res.plan.notes(s))     # measured at 4
    assert math.isfinite(res.batch_time)


@pytest.mark.parametrize("model", ["GPT-Neo-2.7", "LLAMA-3-8"])
def test_sailor_cluster_bench_instances_load(shared_data, tmp_path, model):
    """bench_sailor_cluster's instance declares the GH-96 kind only where its layer table has
    GH-96 columns: GPT-Neo-2.7's table has none (its GH-96 profile is skipped), and the loader
    refuses a declared kind nothing uses (an outside audit: the README's command failed)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_sailor_cluster import toml
    inst = load_instance(toml(tmp_path, 256, 1, model))
    assert inst.n == 32 and inst.workload.num_layers > 0


def test_tp_times_without_their_bytes_fail_loudly(tmp_path):
    from solver.errors import InstanceError
    from solver.io.workloads import read_workload_csv
    p = tmp_path / "t.csv"
    p.write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,"
                 "fwd_s:V100-SXM2-16GB@mbs1@tp2,bwd_s:V100-SXM2-16GB@mbs1@tp2\n"
                 "l0,1,2,3,4,5,0.1,0.2\n")
    with pytest.raises(InstanceError, match=r"tensor-parallel degree 2: expected columns 'param_bytes@tp2' and "
                                            r"'stash_bytes@tp2'"):
        read_workload_csv(p, batch=4, micro_batch=1)
    p.write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,param_bytes@tp2,stash_bytes@tp2,"
                 "fwd_s:V100-SXM2-16GB@mbs1@tp2,bwd_s:V100-SXM2-16GB@mbs1@tp2\n"
                 "l0,1,2,3,4,5,2.5,3,0.1,0.2\n")
    wl = read_workload_csv(p, batch=4, micro_batch=1)
    w2 = wl.at_tp(2)
    assert w2.param_bytes[0] == 2.5 and w2.stash_bytes[0] == 3 and w2.measured["V100-SXM2-16GB"] == ((0.1,), (0.2,))


def test_unsplit_column_and_the_megatron_split(tmp_path):
    from solver.errors import InstanceError
    from solver.io.transformer import block_unsplit_bytes, korthikanti_bytes
    from solver.io.workloads import read_workload_csv
    s, h, a = 512, 1024, 16
    whole, unsplit = korthikanti_bytes(s, h, a), block_unsplit_bytes(s, h)
    p = tmp_path / "t.csv"
    p.write_text(f"name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,stash_unsplit_bytes\n"
                 f"block,1e9,2e9,{2 * s * h},{whole},1e6,{unsplit}\n")
    wl = read_workload_csv(p, batch=4, micro_batch=1)
    for t in (2, 4, 8):       # Korthikanti et al.: s b h (10 + 24 / t + 5 a s / (h t)) per device
        assert wl.at_tp(t).stash_bytes[0] == pytest.approx(s * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    p.write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,stash_unsplit_bytes\n"
                 "block,1,2,3,4,5,6\n")
    with pytest.raises(InstanceError, match="stash_unsplit_bytes': expected at most the layer's stash_bytes 4, got 6"):
        read_workload_csv(p, batch=4, micro_batch=1)


def test_tp_boundary_bytes_must_be_the_whole_boundary(tmp_path):
    from solver.errors import InstanceError
    from solver.io.workloads import read_workload_csv
    p = tmp_path / "t.csv"
    p.write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,param_bytes@tp2,out_bytes@tp2,"
                 "stash_bytes@tp2\nl0,1,2,8,4,6,3,4,2\n")
    with pytest.raises(InstanceError, match=r"column 'out_bytes@tp2': expected the layer's out_bytes 8"):
        read_workload_csv(p, batch=4, micro_batch=1)


def test_tp_descent_at_another_micro_batch_size_returns_groups_at_that_size(tmp_path):
    """Fuzzed slot 803121: no group holds one micro-batch of the workload's u = 8, so the TP
    descent ran at u = 1; its best plan, which the full search at every size only tied, was
    returned as it was and said nothing of its size, so its groups read as u = 8 with shares of
    5 (invalid: memory and shares). Each group now carries the size it was searched at."""
    (tmp_path / "layers.csv").write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\n"
                                         "l0,1.7e10,3.4e10,4e6,4.7e6,0\nl1,3.6e11,7.2e11,3e6,7.5e6,0\n"
                                         "l2,6.5e11,1.3e12,6e5,1e6,0\n")
    body = ['name = "mb"', "num_slots = 1", "[workload]", 'model = "layers.csv"', "batch = 64", "micro_batch = 8",
            "[network]", "intra_server_gbps = 300.0", "inter_server_gbps = 1.0", ""]
    for i, srv in enumerate(["s0", "s0", "s0", "s1"]):
        body += ["[[devices]]", f'name = "d{i}"', 'kind = "L4"', f'server = "{srv}"', "memory_gb = 0.05", ""]
    body += ["[[servers]]", 'name = "s0"', "", "[[servers]]", 'name = "s1"', ""]
    (tmp_path / "mb.toml").write_text("\n".join(body))
    s = load_instance(tmp_path / "mb.toml").state(0)
    wl = s.workload
    peak = 0.5 * s.devices[0].peak_flops
    by_u = {u: {"L4": (tuple(np.asarray(wl.fwd_flops) / peak * f), tuple(np.asarray(wl.bwd_flops) / peak * f))}
            for u, f in ((1, 0.5), (2, 1.0), (4, 1.0), (8, 1.0))}     # u = 1 the fastest per sample
    s = replace(s, workload=replace(wl, measured=by_u[8], measured_by_micro_batch=by_u))
    res = solve_slot(s, V=1.0)
    assert res.success, res.message
    assert res.plan.validate(s) == []
    assert all(g.micro_batch == 1 for g in res.plan.groups)
    assert res.objective == pytest.approx(evaluate(res.plan, s).objective((), 1.0), rel=1e-9)


@given(speeds=st.lists(st.floats(0.1, 5.0), min_size=2, max_size=7), t=st.sampled_from([2, 3, 4]))
@settings(max_examples=60)
def test_speed_matched_units_hold_the_most_throughput(speeds, t):
    """tp.speed_matched: len // t units of t devices and the rest alone, each device once, with
    the most throughput (t x the slowest speed per unit, plus the lone devices') of every such
    partition (brute force over tp.partitions)."""
    pool = list(range(len(speeds)))
    if t > len(pool):
        return
    got = speed_matched(pool, t, speeds)
    assert sorted(d for u in got for d in u) == pool
    assert sorted(len(u) for u in got) == [1] * (len(pool) % t) + [t] * (len(pool) // t)
    best = max(unit_throughput(p, speeds) for p in partitions(pool, [t]) if sum(len(u) == t for u in p) == len(pool) // t)
    assert unit_throughput(got, speeds) >= best * (1 - 1e-12)


def test_few_units_are_of_the_slowest_devices(tmp_path):
    """configuration_units(few=k): at most k units per pool, of its slowest devices in speed
    order, the rest alone (fuzzed slot 803196: the two slowest V100s of four as one TP stage)."""
    from solver.solve.tp import configuration, configuration_units

    s = instance(tmp_path, [(f"a{i}", "V100", "A") for i in range(4)]).state(0)
    s = replace(s, speed=np.array([3.4, 3.6, 9.7, 4.8]))
    cfg = configuration({"V100-SXM2-16GB": 2})
    assert sorted(configuration_units(s, cfg)) == [(0, 1), (2, 3)]
    assert sorted(configuration_units(s, cfg, few=1)) == [(0, 1), (2,), (3,)]
    assert sorted(configuration_units(s, cfg, few=5)) == [(0, 1), (2, 3)]


def test_recompute_tp_false_keeps_recomputation_out_of_tp_configurations(tmp_path: Path) -> None:
    """SolveOptions.recompute_tp=False (for a runtime that recomputes stages of one device
    only): a search on a state with TP units of two devices may not choose recomputation
    there, on the physical state it may; the default allows it on both; and a search with
    the option plans none on a TP stage."""
    import numpy as np
    from solver import SolveOptions, solve_slot
    from solver.solve.scoring import Scorer
    from solver.solve.tp import units_state
    inst = instance(tmp_path, FOUR, memory_gb=16)
    st = inst.state(0)
    cache = SlotCache(st)
    ust, ucache = units_state(st, [(0, 1), (2, 3)], cache)
    Q = np.zeros(len(st.budgets))
    no = SolveOptions(recompute_tp=False)
    assert not any(rc for _, rc in Scorer(ust, Q, 1.0, no, None, cache=ucache).variants)
    assert any(rc for _, rc in Scorer(st, Q, 1.0, no, None, cache=cache).variants)
    assert any(rc for _, rc in Scorer(ust, Q, 1.0, SolveOptions(), None, cache=ucache).variants)
    plan = solve_slot(st, V=1.0, options=no).plan
    assert not any(g.recompute and any(g.tp_peers or ()) for g in plan.groups)


def test_migration_charge_of_a_tp_plan_counts_every_device_held(tmp_path):
    """Moving to a TP plan, the migration seconds are charged at the idle rate of every device the
    plan holds, TP peers included (as solve_slot's objective does); it had counted the stages'
    leaders only."""
    from solver.cost.costs import idle_rates
    from solver.online.charge import charge_plan
    inst = instance(tmp_path, [(f"A{i}", "V100", "A") for i in range(4)])
    s = inst.state(0)
    L, B = s.workload.num_layers, s.workload.batch
    prev = Plan((Group((0,), (L,), B),))
    tp = Plan((Group((0,), (L,), B, tp_peers=((1, 2, 3),)),))
    ch = charge_plan(tp, s, prev, iterations_per_slot=100)
    assert ch.migration_time > 0
    expected = np.asarray(evaluate(tp, s).costs) + idle_rates(s, [0, 1, 2, 3]) * ch.migration_time / 100
    assert np.allclose(ch.costs, expected, rtol=1e-12)
    # where only TP fits (8 x 6 GB devices), the controller's charge of the search's TP plan is the
    # search's own objective, migration from the previous plan included
    (tmp_path / "small").mkdir()
    eight = [(f"{srv}{i}", "V100", srv) for srv in "AB" for i in range(4)]
    s6 = instance(tmp_path / "small", eight, memory_gb=6).state(0)
    res = solve_slot(s6, (1.0,), 1.0, previous_plan=prev)
    assert res.plan.uses_tp and res.batch_time == evaluate(res.plan, s6).batch_time
    assert charge_plan(res.plan, s6, prev, iterations_per_slot=100).objective((1.0,), 1.0) == \
        pytest.approx(res.objective, rel=1e-12)


def _audit_tp_state(seed: int, n: int, L: int, B: int, u: int, level: float, kinds: list[str]):
    """An outside audit's TP slot (session 35): random devices of `kinds` on servers formed by
    random_network's fast links, the memory of the largest `level` x the one-micro-batch need."""
    from solver.io.synthetic import KINDS, random_state
    from solver.model.network import Network
    s = random_state(seed, n=n, L=L, batch=B, micro_batch=u)
    rng = np.random.default_rng(seed + 17)
    ks = [kinds[int(rng.integers(len(kinds)))] for _ in range(n)]
    devs = tuple(replace(d, kind=k, peak_flops=KINDS[k][0], memory_bytes=KINDS[k][1], busy_power_w=KINDS[k][2],
                         idle_power_w=0.3 * KINDS[k][2], price_per_s=KINDS[k][3] / 3600) for d, k in zip(s.devices, ks))
    speed = np.array([d.peak_flops for d in devs]) * 0.5 * np.asarray(s.speed_factor, dtype=float)
    fast = s.bandwidth >= 100e9 / 8 * 0.999
    server, S = -np.ones(n, dtype=int), 0
    for i in range(n):
        if server[i] < 0:
            server[np.flatnonzero(fast[i])] = S
            server[i] = S
            S += 1
    net = Network(server=server, server_names=tuple(f"s{k}" for k in range(S)), nic=np.full(S, np.inf))
    s = replace(s, devices=devs, speed=speed, network=net)
    wl = s.workload
    need = wl.opt_factor * float(np.sum(wl.param_bytes)) + wl.micro_batch * float(np.sum(wl.stash_bytes))
    c = level * need / max(d.memory_bytes for d in s.devices)
    return replace(s, devices=tuple(replace(d, memory_bytes=d.memory_bytes * c) for d in s.devices))


def test_one_f_one_b_peaks_on_tp_stages_in_the_cut_dps():
    """The cut DPs of a TP unit state hold 1F1B's per-stage peaks under 1F1B (they had kept
    GPipe's need under every schedule): an outside audit's 3-device slot whose only plan is a
    2-stage 1F1B pipeline with a TP-2 last stage was called infeasible; now the search finds
    the oracle's plan."""
    s = _audit_tp_state(5557116, 3, 5, 3, 1, 0.5, ["V100", "T4"])
    ex = solve_exact(s, None, 1.0, tp_degrees=(1, 2, 4))
    assert ex.success and ex.plan.uses_tp and any(g.schedule == "1f1b" for g in ex.plan.groups)
    res = solve_slot(s, None, 1.0, options=SolveOptions(tp_degrees=(1, 2, 4)))
    assert res.success, res.message
    assert res.plan.validate(s) == [] and res.objective <= ex.objective * (1 + 1e-9)


@pytest.mark.parametrize("args", [(5557016, 5, 9, 6, 2, 0.3, ["V100", "T4"]), (5557058, 5, 7, 6, 1, 0.5, ["V100", "T4"])])
def test_small_slots_search_every_way_of_forming_units(args):
    """Small slots with few ways of forming TP units search each (SearchTuning.tp_all_sets_up_to):
    on these two of an outside audit's slots the descent's units (index or speed order) ended
    36% above the oracle; every set gives the oracle's objective."""
    s = _audit_tp_state(*args)
    ex = solve_exact(s, None, 1.0, tp_degrees=(1, 2, 4))
    descent = solve_slot(s, None, 1.0, options=SolveOptions(tp_degrees=(1, 2, 4),
                                                            tuning=SearchTuning(tp_all_sets_up_to=0)))
    res = solve_slot(s, None, 1.0, options=SolveOptions(tp_degrees=(1, 2, 4)))
    assert descent.objective > ex.objective * 1.3
    assert res.plan.validate(s) == [] and res.objective == pytest.approx(ex.objective, rel=1e-9)


def test_a_tp_plans_measured_optimizer_step_over_t_is_noted(tmp_path):
    """Under optimizer_step = "measured" a TP stage's step is the measured tp-1 seconds / t
    (Workload.at_tp): an estimate, which the plan's notes name."""
    s = instance(tmp_path, FOUR, memory_gb=16).state(0)
    L = s.workload.num_layers
    wl = replace(s.workload, optimizer_step="measured", optimizer_seconds={s.devices[0].kind: (0.01,) * L})
    s = replace(s, workload=wl)
    res = solve_slot(s, V=1.0)
    assert res.success and res.plan.uses_tp
    assert any("optimizer step is the measured tp-1 seconds / 2" in n for n in res.plan.notes(s))
    plain = replace(s, workload=replace(wl, optimizer_step="none"))
    assert not any("optimizer step" in n for n in res.plan.notes(plain))


ACTIVATIONS = """\
# input_bytes: 1000
name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes
l0,4e9,8e9,2e7,2e8,1e8
l1,4e9,8e9,1e7,2e8,1e8
l2,4e9,8e9,1e7,2e8,1e8
l3,4e9,8e9,1e7,2e8,1e8
"""


@pytest.mark.parametrize("memory_gb", [2, 4, 8])
def test_cut_dps_hold_the_models_memory_rule_on_tp_units_under_every_variant(tmp_path, memory_gb):
    """On a state of TP units, the cut DPs' memory rule (SlotCache.stage_ends: the last layer a
    stage starting at layer a may end at) is the model's (model.memory.memory_use, as
    Plan.validate checks it) under GPipe and 1F1B, with and without recomputation: recomputed
    TP stages had kept GPipe's need for the whole share, so the DPs never cut stages that fit
    only by recomputing (a layer table whose activations dominate)."""
    from solver.model.memory import MEM_RTOL, memory_use
    from solver.solve.tp import units_state
    st = instance(tmp_path, FOUR, memory_gb=memory_gb, batch=32, micro=2, layers=ACTIVATIONS).state(0)
    ust, uc = units_state(st, [(0, 1), (2, 3)], SlotCache(st))
    L, devs = ust.workload.num_layers, (0, 1)
    recomputing_helps = False
    for schedule, recompute in (("gpipe", False), ("gpipe", True), ("1f1b", False), ("1f1b", True)):
        for share in (2, 8, 32):
            for pos in (0, 1):       # stage [a, c) first (a = 0) or second (cuts a, c) of two
                ends = uc.stage_ends(devs, share, schedule, recompute, stages=2, position=pos)
                plain = uc.stage_ends(devs, share, schedule, False, stages=2, position=pos)
                for a in ([0] if pos == 0 else range(1, L)):
                    last = a
                    for c in range(a + 1, L + 1):
                        use = memory_use(ust, devs, [c, L] if pos == 0 else [a, c], share, schedule, recompute)[pos]
                        if use <= ust.memory_bytes[devs[pos]] * (1 + MEM_RTOL):
                            last = c
                    assert int(ends[pos, a]) == last, (schedule, recompute, share, pos, a)
                    recomputing_helps |= int(ends[pos, a]) > int(plain[pos, a])
    assert recomputing_helps


def test_oracle_over_tp_unit_sets_is_optimal_only_where_each_is_exact():
    """A review: the oracle over every way of forming TP units kept its best unit set's status,
    `optimal`, where other unit sets were solved exactly only relative to their frontier cut sets
    (a better plan may lie off those); it is `feasible` there now."""
    from solver.solve.oracle import solve_exact
    from solver.solve.options import SearchTuning
    s = _audit_tp_state(5557000, 4, 20, 4, 1, 3.0, ["V100", "T4"])
    ex = solve_exact(s, None, 1.0, tp_degrees=(1, 2), tuning=SearchTuning(oracle_all_cuts_limit=1000))
    assert ex.success and "exact only relative" in ex.message
    assert ex.status == "feasible"
