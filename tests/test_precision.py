"""Precision as a workload setting: bytes of activations, parameters and gradients, and the
model-state factor (docs/MODEL.md)."""
from __future__ import annotations

import dataclasses

import pytest

from solver.cost import sync_time
from solver.errors import InstanceError
from solver.io.instance import load_instance
from solver.io.synthetic import random_state
from solver.model import memory_use
from solver.model.workload import mixed_opt_factor
from conftest import REPO


def test_mixed_factor_counts_master_weights_and_adam_state():
    # Adam in fp32: 4 + 4 + 8 = 16 bytes per parameter = 4 per fp32 byte;
    # bf16 mixed: 2 + 2 + 4 (master) + 8 = 16 bytes per parameter = 8 per bf16 byte
    assert mixed_opt_factor(4.0, 4) == 4.0
    assert mixed_opt_factor(4.0, 2) == 8.0
    # SGD with momentum: fp32 4 + 4 + 4 = 12 (factor 3); mixed 2 + 2 + 4 + 4 = 12 -> 6 per byte
    assert mixed_opt_factor(3.0, 2) == 6.0
    with pytest.raises(ValueError, match="opt_factor"):
        mixed_opt_factor(1.0, 2)


def test_with_precision_scales_bytes_not_times():
    state = random_state(4, n=3, L=6)
    wl = state.workload
    half = wl.with_precision("bf16")
    assert half.precision == "bf16" and wl.with_precision("fp32") is wl
    assert half.out_bytes == pytest.approx(wl.out_bytes / 2) and half.stash_bytes == pytest.approx(wl.stash_bytes / 2)
    assert half.param_bytes == pytest.approx(wl.param_bytes / 2) and half.input_bytes == wl.input_bytes / 2
    assert (half.fwd_flops == wl.fwd_flops).all() and half.measured == wl.measured
    # model states keep their bytes (16 per parameter with Adam) while activations halve
    s2 = dataclasses.replace(state, workload=half)
    full_mem = memory_use(state, (0, 1), (3, 6), 8)
    half_mem = memory_use(s2, (0, 1), (3, 6), 8)
    P = [wl.param_bytes[:3].sum(), wl.param_bytes[3:].sum()]
    H = [wl.stash_bytes[:3].sum(), wl.stash_bytes[3:].sum()]
    assert full_mem == pytest.approx([4 * p + 8 * h for p, h in zip(P, H)])
    assert half_mem == pytest.approx([4 * p + 4 * h for p, h in zip(P, H)])
    # the gradient all-reduce moves half the bytes: bandwidth terms halve, latency terms stay
    zero_lat = dataclasses.replace(state, latency=state.latency * 0)
    zero_lat2 = dataclasses.replace(s2, latency=state.latency * 0)
    structure = [((0,), (6,)), ((1,), (6,))]
    assert sync_time(zero_lat2, structure) == pytest.approx(sync_time(zero_lat, structure) / 2)
    with pytest.raises(ValueError, match="precision"):
        wl.with_precision("int8")
    with pytest.raises(ValueError, match="already"):
        half.with_precision("fp16")


def test_instance_precision_key(tmp_path):
    src = (tmp_path / "x.toml")
    base = REPO / "instances" / "default.toml"
    text = base.read_text()
    for f in ("default_devices.csv", "default_links.csv"):
        (tmp_path / f).write_text((base.parent / f).read_text())
    src.write_text(text.replace("[workload]\n", '[workload]\nprecision = "bf16"\n', 1))
    inst = load_instance(src)
    ref = load_instance(base)
    assert inst.workload.precision == "bf16"
    assert inst.workload.stash_bytes == pytest.approx(ref.workload.stash_bytes / 2)
    src.write_text(text.replace("[workload]\n", '[workload]\nprecision = "int4"\n', 1))
    with pytest.raises(InstanceError, match="workload.precision"):
        load_instance(src)
