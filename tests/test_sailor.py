"""Sailor's measured LLM profiles read as workloads (../shared/data/profiles/sailor)."""
from __future__ import annotations

import json

import pytest

from solver.errors import InstanceError
from solver.io.sailor import read_sailor_profile, sailor_workload


def test_gpt_neo_profile(shared_data):
    root = shared_data / "profiles" / "sailor"
    info = json.loads((root / "llm_info.json").read_text())["GPT-Neo-2.7"]["1"]
    prof = read_sailor_profile(root, "GPT-Neo-2.7")
    assert prof.num_layers == 34 and prof.names[0] == "embedding" and prof.names[-1] == "head"
    assert prof.saved_bytes[1] == info["1"]["act_mem_bytes"] and prof.out_bytes[1] == info["1"]["act_output_bytes"]
    assert prof.saved_bytes[1] / prof.out_bytes[1] > 30          # kept for backward >> sent on
    raw = json.loads((root / "profiles" / "GPT-Neo-2.7" / "A100-40" / "profile.json").read_text())
    assert prof.times["A100-SXM4-40GB"][8][0][1] == raw["8"]["1"]["1"][0]
    wl = sailor_workload(prof, 128, 8)
    fw, bw = wl.measured["A100-SXM4-40GB"]
    assert fw[1] == pytest.approx(raw["8"]["1"]["1"][0] / 8) and bw[1] == pytest.approx(raw["8"]["1"]["1"][1] / 8)
    assert wl.stash_bytes[1] == info["1"]["act_mem_bytes"] and wl.param_bytes.sum() == sum(
        v["params_bytes"] for v in info.values())
    assert "V100-SXM2-16GB" not in wl.measured                   # V100 was timed at mbs 1, 2, 4 only
    assert "V100-SXM2-16GB" in sailor_workload(prof, 128, 4).measured
    # the GH-96 file of GPT-Neo-2.7 holds 26 layers (not 34): skipped, and said so
    assert "GH-96" not in prof.times and any("GH-96" in n and "26 layers" in n for n in prof.notes)


def test_bad_requests(shared_data, tmp_path):
    root = shared_data / "profiles" / "sailor"
    with pytest.raises(InstanceError, match="model"):
        read_sailor_profile(root, "GPT-5")
    with pytest.raises(InstanceError, match="tp"):
        read_sailor_profile(root, "GPT-Neo-2.7", tp=3)
    prof = read_sailor_profile(root, "GPT-Neo-2.7")
    with pytest.raises(InstanceError, match="micro_batch"):
        sailor_workload(prof, 100, 8)
    with pytest.raises(InstanceError, match="reference"):
        sailor_workload(prof, 96, 3)
    with pytest.raises(InstanceError, match="not found"):
        read_sailor_profile(tmp_path, "GPT-Neo-2.7")


def test_micro_batch_as_a_decision(shared_data):
    """Sailor's times are keyed by micro-batch size: a group may run at any profiled u, with the
    times measured at that u, and Plan.validate, evaluate and simulate_plan agree on it."""
    import numpy as np

    from solver.cost import evaluate
    from solver.cost.simulator import simulate_plan
    from solver.io.synthetic import default_budgets
    from solver.model import Device, Group, Plan, SlotState, plan_from_json, plan_to_json

    prof = read_sailor_profile(shared_data / "profiles" / "sailor", "GPT-Neo-2.7")
    wl = sailor_workload(prof, 64, 1)
    assert wl.micro_batch_options() == (1, 2, 4, 8, 16, 32)
    a1, a8 = wl.measured["A100-SXM4-40GB"], wl.at_micro_batch(8).measured["A100-SXM4-40GB"]
    assert sum(a8[0]) < sum(a1[0])                      # per-sample time falls with u
    with pytest.raises(ValueError, match="micro_batch"):
        wl.at_micro_batch(3)
    devs = tuple(Device(f"a{i}", "A100-SXM4-80GB", 19.5e12, 1e12, 400.0, 120.0, 0.001) for i in range(2))  # room for any u
    n = len(devs)
    bw = np.full((n, n), 1e10)
    np.fill_diagonal(bw, np.inf)
    state = SlotState(0, devs, wl, default_budgets(), np.ones(n, bool), np.full(n, 9.75e12), np.ones(n),
                      np.full(n, 0.001), bw, np.zeros((n, n)))
    plan = Plan((Group((0, 1), (17, 34), 64, "1f1b", False, 8),))
    assert plan.validate(state) == []
    assert plan_from_json(plan_to_json(plan)) == plan
    ev, sim = evaluate(plan, state), simulate_plan(plan, state)
    assert sim.batch_time <= ev.batch_time * (1 + 1e-9)
    assert sim.peak_stash[0] == (2, 1)                  # 8 micro-batches of 8; 1F1B keeps 2 and 1
    at1 = simulate_plan(Plan((Group((0, 1), (17, 34), 64, "1f1b"),)), state)
    assert sum(sim.groups[0].stage_busy) < sum(at1.groups[0].stage_busy)    # less compute at u = 8
    assert sim.groups[0].sizes == (8,) * 8 and at1.groups[0].sizes == (1,) * 64
    bad = Plan((Group((0, 1), (17, 34), 64, "1f1b", False, 3),))
    assert any(v.constraint == "micro_batch" for v in bad.validate(state))
    odd = Plan((Group((0, 1), (17, 34), 60, "1f1b", False, 8),))
    assert any(v.constraint == "share_multiple" for v in odd.validate(state))
