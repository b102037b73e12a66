"""Seconds measured at a tensor-parallel degree: what the `# tp_times:` line of a layer table
says they hold, and how the cost model prices a TP stage from them (solver.io.columns,
model.workload.TPVariant.times, model.state.SlotState._layer_seconds)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from solver.errors import InstanceError
from solver.io.instance import load_instance
from solver.io.workloads import read_workload_csv, write_workload_csv
from solver.model.state import tp_collective_seconds
from solver.model.units import unit_state
from solver.model.workload import TPVariant

HEAD = ("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,fwd_s:V100-SXM2-16GB,bwd_s:V100-SXM2-16GB,"
        "fwd_s:V100-SXM2-16GB@mbs4@tp2,bwd_s:V100-SXM2-16GB@mbs4@tp2,param_bytes@tp2,stash_bytes@tp2\n")
ROWS = ("l0,4e9,8e9,4e6,3e6,2e9,0.010,0.020,0.007,0.013,1e9,2e6\n"
        "l1,4e9,8e9,2e6,3e6,2e9,0.030,0.050,0.016,0.031,1e9,2e6\n"
        "l2,4e9,8e9,1e6,3e6,2e9,0.020,0.040,0.011,0.024,1e9,2e6\n")


def _instance(tmp_path: Path, tp_times: str | None, lam_ms: float = 0.0, tp_columns: bool = True):
    """Three V100s, two in server A (200 Gb/s, 1 us), one in B; the table above with the
    given `# tp_times:` line (None: no line), without its @tp2 columns unless `tp_columns`,
    and a declared per-collective latency (ms)."""
    line = f"# tp_times: {tp_times}\n" if tp_times is not None else ""
    head, rows = HEAD, ROWS
    if not tp_columns:
        head = ",".join(HEAD.split(",")[:8]) + "\n"
        rows = "".join(",".join(r.split(",")[:8]) + "\n" for r in ROWS.splitlines())
    (tmp_path / "layers.csv").write_text(f"# input_bytes: 1000\n{line}{head}{rows}")
    body = ['name = "tptimes"', "num_slots = 1", "[workload]", 'model = "layers.csv"', "batch = 16",
            "micro_batch = 4", "[network]", "intra_server_gbps = 200.0", "inter_server_gbps = 25.0",
            "intra_server_latency_ms = 0.001", "inter_server_latency_ms = 0.01",
            f"tp_collective_latency_ms = {lam_ms}", ""]
    for n, s in (("a0", "A"), ("a1", "A"), ("b0", "B")):
        body += ["[[devices]]", f'name = "{n}"', 'kind = "V100-SXM2-16GB"', f'server = "{s}"', ""]
    body += ["[[servers]]", 'name = "A"', "", "[[servers]]", 'name = "B"', "",
             "[[budgets]]", 'kind = "money"', "limit = 1000.0", ""]
    (tmp_path / "i.toml").write_text("\n".join(body))
    return load_instance(tmp_path / "i.toml")


def _tp2(tmp_path: Path, tp_times: str | None, lam_ms: float = 0.0):
    inst = _instance(tmp_path, tp_times, lam_ms)
    s = inst.state(0)
    return s, unit_state(s, [(0, 1), (2,)])


def test_reader_takes_the_tp_times_line(tmp_path):
    inst = _instance(tmp_path, None)
    assert inst.workload.tp_variants[2].times == "with_collectives"
    assert inst.workload.tp_times_include_collectives(2)
    inst = _instance(tmp_path, "shard_compute")
    assert inst.workload.tp_variants[2].times == "shard_compute"
    assert not inst.workload.tp_times_include_collectives(2)
    assert not inst.workload.tp_times_include_collectives(4)      # nothing measured at 4
    with pytest.raises(InstanceError, match=r"'# tp_times:' line: expected one of with_collectives, "
                                            r"shard_compute, got 'compute'"):
        _instance(tmp_path, "compute")
    with pytest.raises(ValueError, match=r"TPVariant.times: expected one of .*got 'x'"):
        TPVariant((1.0,), (1.0,), {}, times="x")


@pytest.mark.parametrize("lam_ms", [0.0, 2.0])
def test_shard_compute_times_get_the_collectives_added(tmp_path, lam_ms):
    s, us = _tp2(tmp_path, "shard_compute", lam_ms)
    wl = s.workload
    f2 = np.array([0.007, 0.016, 0.011])
    b2 = np.array([0.013, 0.031, 0.024])
    ring = tp_collective_seconds(wl.out_bytes, 2, 200e9 / 8, 1e-6, 4, None, lam_ms / 1e3)
    assert np.all(ring > 0)
    np.testing.assert_allclose(us.layer_fwd_seconds[0], f2 + ring, rtol=1e-12)
    np.testing.assert_allclose(us.layer_bwd_seconds[0], b2 + ring, rtol=1e-12)
    np.testing.assert_allclose(us.tp_collectives_per_sample(0, 0), ring, rtol=1e-12)
    # the degree-1 device is priced from the plain columns, unchanged
    np.testing.assert_allclose(us.layer_fwd_seconds[1], [0.010, 0.030, 0.020], rtol=1e-12)


def test_times_with_collectives_are_taken_whole(tmp_path):
    s, us = _tp2(tmp_path, "with_collectives", 2.0)
    np.testing.assert_allclose(us.layer_fwd_seconds[0], [0.007, 0.016, 0.011], rtol=1e-12)
    np.testing.assert_allclose(us.layer_bwd_seconds[0], [0.013, 0.031, 0.024], rtol=1e-12)
    assert not us.tp_collectives_per_sample(0, 1).any()


def test_a_table_without_times_at_t_prices_as_before(tmp_path):
    """No @tp2 columns: degree-1 seconds over t plus the collectives, whatever the line says."""
    for line in (None, "shard_compute", "with_collectives"):
        inst = _instance(tmp_path, line, 2.0, tp_columns=False)
        assert not inst.workload.tp_variants
        s = inst.state(0)
        us = unit_state(s, [(0, 1), (2,)])
        ring = tp_collective_seconds(s.workload.out_bytes, 2, 200e9 / 8, 1e-6, 4, None, 2e-3)
        np.testing.assert_allclose(us.layer_fwd_seconds[0], np.array([0.010, 0.030, 0.020]) / 2 + ring, rtol=1e-12)
        np.testing.assert_allclose(us.layer_bwd_seconds[0], np.array([0.020, 0.050, 0.040]) / 2 + ring, rtol=1e-12)


def test_write_and_read_back_a_variant(tmp_path):
    inst = _instance(tmp_path, "shard_compute")
    out = write_workload_csv(inst.workload, tmp_path / "again.csv")
    assert "# tp_times: shard_compute" in out.read_text()
    back = read_workload_csv(out, 16, 4)
    v, w = back.tp_variants[2], inst.workload.tp_variants[2]
    assert v.times == w.times and v.param_bytes == w.param_bytes and v.stash_bytes == w.stash_bytes
    assert dict(v.by_micro_batch[4]) == dict(w.by_micro_batch[4])
    mixed = {2: w, 4: TPVariant(w.param_bytes, w.stash_bytes, {}, "with_collectives")}
    from dataclasses import replace
    with pytest.raises(ValueError, match=r"one '# tp_times:' line"):
        write_workload_csv(replace(inst.workload, tp_variants=mixed), tmp_path / "mixed.csv")


# ------------------------------------------------------------------ the all-reduce's per-call latency

def test_allreduce_latency_is_charged_once_per_bucket(tmp_path):
    """cost.sync: each bucket's all-reduce costs its ring plus SlotState.allreduce_latency; a
    device's sync is the sum over its buckets, so a device in two buckets pays it twice; 0
    (the default) prices exactly as before."""
    from dataclasses import replace

    from solver.cost.sync import sync_time
    inst = _instance(tmp_path, None, tp_columns=False)
    s = inst.state(0)
    assert s.allreduce_latency == 0.0
    lam = 3e-3
    sl = replace(s, allreduce_latency=lam)
    dp = [((0,), (3,)), ((1,), (3,))]                      # one bucket: every layer
    assert sync_time(sl, dp) == pytest.approx(sync_time(s, dp) + lam, rel=1e-12)
    cut = [((0, 2), (1, 3)), ((1,), (3,))]                 # buckets l0 and l1-l2, device 1 in both
    assert sync_time(sl, cut) == pytest.approx(sync_time(s, cut) + 2 * lam, rel=1e-12)
    # the network path (shared NICs) adds it the same way
    assert s.network is not None
    ring_only = sync_time(replace(s, network=None), dp)
    assert sync_time(replace(sl, network=None), dp) == pytest.approx(ring_only + lam, rel=1e-12)


def test_instance_declares_the_allreduce_latency(tmp_path):
    """[network] allreduce_latency_ms: the slot states' per-call all-reduce latency (s), 0 when
    absent, kept by save_instance; a negative value refused naming the field."""
    from solver.io.instance import save_instance
    inst = _instance(tmp_path, None, tp_columns=False)
    assert inst.allreduce_latency == 0.0
    text = (tmp_path / "i.toml").read_text().replace("tp_collective_latency_ms = 0.0",
                                                     "tp_collective_latency_ms = 0.5\nallreduce_latency_ms = 2.5")
    (tmp_path / "i.toml").write_text(text)
    inst = load_instance(tmp_path / "i.toml")
    assert inst.state(0).allreduce_latency == pytest.approx(2.5e-3)
    back = load_instance(save_instance(inst, tmp_path / "saved" / "x.toml"))
    assert back.allreduce_latency == pytest.approx(2.5e-3) and back.tp_collective_latency == pytest.approx(5e-4)
    (tmp_path / "i.toml").write_text(text.replace("allreduce_latency_ms = 2.5", "allreduce_latency_ms = -1"))
    with pytest.raises(InstanceError, match=r"network\.allreduce_latency_ms: must be >= 0.*\(got -1\)"):
        load_instance(tmp_path / "i.toml")
