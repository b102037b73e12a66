"""Optimizer-step time per iteration and the per-kind memory reserve (docs/MODEL.md)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import REPO
from solver.cost import evaluate
from solver.cost.optimizer import optimizer_step_time, stage_optimizer_seconds
from solver.cost.simulator import simulate_plan
from solver.errors import InstanceError
from solver.io.instance import load_instance
from solver.io.synthetic import random_state
from solver.model import Group, Plan


def _state(step: str, bandwidth: float = 1e12, measured: dict | None = None):
    state = random_state(2, n=3, L=6, batch=16, micro_batch=4)
    devices = tuple(dataclasses.replace(d, memory_bandwidth=bandwidth) for d in state.devices)
    wl = dataclasses.replace(state.workload, optimizer_step=step, optimizer_seconds=measured or {})
    return dataclasses.replace(state, devices=devices, workload=wl)


def test_bandwidth_estimate_and_batch_time():
    state = _state("bandwidth", 2e12)
    wl = state.workload
    P = [wl.param_bytes[:2].sum(), wl.param_bytes[2:].sum()]
    got = stage_optimizer_seconds(state, (0, 1), (2, 6))
    assert got == pytest.approx([(2 * wl.opt_factor - 1) * p / 2e12 for p in P])
    plan = Plan((Group((0, 1), (2, 6), 8), Group((2,), (6,), 8)))
    t_opt = optimizer_step_time(state, [(g.devices, g.cuts) for g in plan.groups])
    assert t_opt == pytest.approx(max(max(got), (2 * wl.opt_factor - 1) * wl.param_bytes.sum() / 2e12))
    ev, sim = evaluate(plan, state), simulate_plan(plan, state)
    assert ev.optimizer_time == pytest.approx(t_opt) and sim.optimizer_time == pytest.approx(t_opt)
    assert ev.batch_time == pytest.approx(max(ev.group_times) + ev.sync_time + t_opt)
    none = _state("none")
    assert evaluate(plan, none).optimizer_time == 0.0
    assert evaluate(plan, none).batch_time == pytest.approx(ev.batch_time - t_opt)


def test_measured_seconds_and_unknown_bandwidth():
    """Measured seconds over the speed factor; a TP stage of degree t steps 1/t of the
    parameters, so 1/t of the seconds (an outside audit: it had been charged the whole layer's,
    9x the batch time's step on a GPT-Neo TP-2 plan)."""
    state = _state("measured", 0.0, {state_kind: (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
                                     for state_kind in {d.kind for d in random_state(2, n=3, L=6).devices}})
    got = stage_optimizer_seconds(state, (0, 1), (2, 6))
    f = state.speed_factor
    assert got == pytest.approx([0.3 / f[0], 1.8 / f[1]])
    tp = dataclasses.replace(state, tp=(2, 1, 1))     # device 0 a unit of two (a TP stage)
    assert stage_optimizer_seconds(tp, (0, 1), (2, 6)) == pytest.approx([0.3 / 2 / f[0], 1.8 / f[1]])
    with pytest.raises(ValueError, match="memory_bandwidth"):
        stage_optimizer_seconds(_state("bandwidth", 0.0), (0,), (6,))
    with pytest.raises(ValueError, match="optimizer_step"):
        stage_optimizer_seconds(_state("adam"), (0,), (6,))


def test_sailor_measured_optimizer_seconds(shared_data):
    from solver.io.sailor import read_sailor_profile, sailor_workload
    prof = read_sailor_profile(shared_data / "profiles" / "sailor", "GPT-Neo-2.7")
    wl = sailor_workload(prof, 64, 2, optimizer_step="measured")
    assert wl.optimizer_seconds["A100-SXM4-40GB"] == prof.times["A100-SXM4-40GB"][2][2]


def _write(tmp_path, extra_top: str = "", extra_workload: str = "", extra_device: str = "",
           devices: int = 1) -> object:
    base = REPO / "instances" / "default.toml"
    for f in ("default_devices.csv", "default_links.csv"):
        (tmp_path / f).write_text((base.parent / f).read_text())
    text = base.read_text().replace("[workload]\n", "[workload]\n" + extra_workload, 1)
    text = text.replace("[[devices]]\n", "[[devices]]\n" + extra_device, devices)
    path = tmp_path / "x.toml"
    path.write_text(text + "\n" + extra_top)
    return path


def test_instance_memory_reserve_and_optimizer_step(tmp_path):
    ref = load_instance(REPO / "instances" / "default.toml")
    kind = ref.devices[0].kind
    inst = load_instance(_write(tmp_path, f'[memory_reserve_gb]\n"{kind}" = 1.5\n'))
    for a, b in zip(inst.devices, ref.devices):
        assert a.memory_bytes == pytest.approx(b.memory_bytes - (1.5e9 if b.kind == kind else 0.0))
    inst = load_instance(_write(tmp_path, "[memory_reserve_gb]\ndefault = 0.5\n"))
    assert [d.memory_bytes for d in inst.devices] == pytest.approx([d.memory_bytes - 0.5e9 for d in ref.devices])
    with pytest.raises(InstanceError, match="memory_reserve_gb"):
        load_instance(_write(tmp_path, "[memory_reserve_gb]\ndefault = 99999\n"))
    with pytest.raises(InstanceError, match="memory_reserve_gb"):
        load_instance(_write(tmp_path, "[memory_reserve_gb]\nNoSuchGPU = 1\n"))
    inst = load_instance(_write(tmp_path, extra_workload='optimizer_step = "bandwidth"\n',
                                extra_device="memory_bandwidth_gbs = 900\n", devices=-1))
    assert inst.workload.optimizer_step == "bandwidth" and inst.devices[0].memory_bandwidth == 900e9
    # a device without a bandwidth is refused at load, naming its field (a run failed at its first plan)
    with pytest.raises(InstanceError, match=r"devices\[1\]\.memory_bandwidth_gbs: device '.*': workload"):
        load_instance(_write(tmp_path, extra_workload='optimizer_step = "bandwidth"\n',
                             extra_device="memory_bandwidth_gbs = 900\n"))
    with pytest.raises(InstanceError, match="optimizer_step"):
        load_instance(_write(tmp_path, extra_workload='optimizer_step = "measured"\n'))
    assert np.isfinite(ref.devices[0].memory_bytes)


def test_measured_optimizer_seconds_left_uncharged_are_noted():
    """A layer table with measured optimizer-step seconds under optimizer_step other than
    "measured" charges none of them, and the slot's notes say so (it had been silent)."""
    kinds = {d.kind for d in random_state(2, n=3, L=6).devices}
    measured = {k: (0.1,) * 6 for k in kinds}
    for step in ("none", "bandwidth"):
        notes = _state(step, measured=measured).notes
        assert any("measured optimizer-step seconds" in n and f"optimizer_step is {step!r}" in n for n in notes)
    assert not any("optimizer-step" in n for n in _state("measured", measured=measured).notes)
    assert not any("optimizer-step" in n for n in _state("none").notes)
    zero = {k: ((0.0,) * 6 if i == 0 else (0.1,) * 6) for i, k in enumerate(sorted(kinds))}
    notes = [n for n in _state("measured", measured=zero).notes if "optimizer-step" in n]
    assert len(notes) == 1 and f"kind {sorted(kinds)[0]} are 0 for every layer" in notes[0]
