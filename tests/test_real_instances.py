"""The instances derived from real data (instances/make_instances.py): they load, every slot has a
feasible plan, the generator is deterministic, and the derived figures match their sources."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import solver
from solver.baselines import cheapest

INSTANCES = Path(__file__).resolve().parents[1] / "instances"
SMALL = ["mixed_gpus", "aws_spot", "edge", "alibaba_speed", "geo", "hetero_strong", "hetero_strong_gpt2",
         "hetero_strong_bert", "pipedream_vgg16", "pipedream_resnet50"]
LARGE = ["synthetic_64", "synthetic_256"]


def _generator():
    spec = importlib.util.spec_from_file_location("make_instances", INSTANCES / "make_instances.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_instances"] = mod     # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _load(name: str):
    return solver.load_instance(INSTANCES / f"{name}.toml")


@pytest.mark.parametrize("name", SMALL)
def test_small_instance_loads_and_every_slot_has_a_plan(name):
    inst = _load(name)
    assert inst.name == name and inst.num_slots >= 8 and inst.budgets
    for t in range(inst.num_slots):
        st = inst.state(t)
        assert st.available.any(), f"{name}: slot {t} has no device"
        plan = cheapest(st)
        assert plan is not None and plan.validate(st) == [], f"{name}: slot {t} has no feasible plan"


@pytest.mark.parametrize("name,n", [("synthetic_64", 64), ("synthetic_256", 256)])
def test_large_instance_loads(name, n):
    inst = _load(name)
    assert inst.n == n and inst.num_slots == 5
    assert inst.state(0).available.sum() > n // 2


def test_workloads_cover_the_required_networks():
    models = {_load(n).workload.name for n in SMALL + LARGE}
    assert {"vgg16", "resnet50", "bert_base", "gpt2_small", "pipedream_vgg16_layers",
            "pipedream_resnet50_layers"} <= models


def test_instance_files_are_small():
    total = sum(p.stat().st_size for p in INSTANCES.glob("*") if p.suffix in (".toml", ".csv"))
    assert total < 400_000


def test_generator_is_deterministic(shared_data, tmp_path):
    assert _generator().main(["--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert {f"{n}.toml" for n in SMALL + LARGE} <= set(written)
    for name in written:
        assert (tmp_path / name).read_bytes() == (INSTANCES / name).read_bytes(), f"{name} differs from the committed file"


def test_generator_without_shared_data_exits_1(monkeypatch, tmp_path, capsys):
    gen = _generator()
    monkeypatch.setattr(gen, "SHARED", tmp_path / "missing")
    assert gen.main(["--out", str(tmp_path)]) == 1
    assert "shared/data not found" in capsys.readouterr().err


def test_aws_spot_follows_the_real_trace(shared_data):
    inst = _load("aws_spot")
    src = shared_data / "traces" / "aws_v100_spot_9az"
    price = pd.read_csv(src / "aws_p3.2xlarge_v100_spotprice_9az_2023-02-15.csv")
    avail = pd.read_csv(src / "aws_p3.2xlarge_v100_avail_9az_2023-02-15.csv")
    ticks = inst.num_slots * 134
    zones = list(price.columns[1:])
    assert [d.name for d in inst.devices] == [f"v100-{z}" for z in zones]
    got = inst.price.mean(axis=0) * 3600.0
    want = price[zones].to_numpy()[:ticks].mean(axis=0)
    np.testing.assert_allclose(got, want, atol=1e-4)
    share = avail[zones].to_numpy()[:ticks].reshape(inst.num_slots, 134, len(zones)).mean(axis=1)
    np.testing.assert_array_equal(inst.available, share >= 0.5)
    assert inst.budgets[0].kind == "money" and inst.budgets[0].limit < 3.06 / 3600.0 * 3.0


def test_geo_links_follow_the_skyplane_grid(shared_data):
    inst = _load("geo")
    grid = pd.read_csv(shared_data / "traces" / "intercloud_bandwidth" / "intercloud_throughput_grid_2022.csv")
    grid = grid[(grid.src_tier == "PREMIUM") & (grid.success.astype(str) == "True")]
    a, b = "aws:us-east-1", "gcp:us-central1-a"
    rows = grid[((grid.src_region == a) & (grid.dst_region == b)) | ((grid.src_region == b) & (grid.dst_region == a))]
    i, j = inst.state(0).device_index("aws-us-east-1-0"), inst.state(0).device_index("gcp-us-central1-0")
    assert inst.bandwidth[0, i, j] * 8 / 1e9 == pytest.approx(rows.throughput_received_gbps.mean(), abs=1e-3)


def test_alibaba_speed_factors(shared_data):
    inst = _load("alibaba_speed")
    f = inst.speed_factor
    assert f.shape == (120, 10) and f.max() == pytest.approx(1.0, abs=1e-3) and f.min() < 0.3
    job = pd.read_csv(shared_data / "traces" / "alibaba_worker_speed" / "job_4_norm.csv")
    slow, fast = job[job.worker == 6].batch_time_norm.mean(), job[job.worker == 1].batch_time_norm.mean()
    assert f[:, 6].mean() < f[:, 1].mean() and slow > fast


def test_edge_pair_bandwidth_is_min_of_uplinks():
    inst = _load("edge")
    bw = inst.bandwidth
    server = inst.n - 1
    for i in range(inst.n - 1):
        for j in range(i + 1, inst.n - 1):
            np.testing.assert_allclose(bw[:, i, j], np.minimum(bw[:, i, server], bw[:, j, server]), rtol=1e-5)
    assert (bw[:, 0, server] * 8 / 1e6 < 20).all()      # cellular-class uplinks, Mbit/s


def test_pipedream_profile_has_measured_v100_times():
    wl = _load("pipedream_vgg16").workload
    assert "V100-SXM2-16GB" in wl.measured and wl.num_layers == len(wl.measured["V100-SXM2-16GB"][0])


def test_report_tolerates_missing_and_partial_csvs(tmp_path):
    from benchmarks.make_report import loglog_fit, main as report
    assert report(["--out", str(tmp_path)]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert text.count("Not run") >= 4
    pd.DataFrame({"n": [4, 8, 16, 32], "L": [10] * 4, "solve_time_s": [0.01, 0.04, 0.16, 0.64]}).to_csv(
        tmp_path / "speed.csv", index=False)
    assert report(["--out", str(tmp_path)]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "solve_time.png" in text and (tmp_path / "solve_time.png").is_file()
    assert loglog_fit(np.array([4.0, 8, 16, 32]), np.array([0.01, 0.04, 0.16, 0.64])) == pytest.approx(2.0)


def test_report_fits_each_solver_of_a_side_by_side_speed_file_apart(tmp_path):
    """bench_speed writes the solver and an earlier one side by side (column `solver`); the
    report's growth exponents are fitted per solver (an outside audit found them fitted over
    both pooled: n^1.70 where the new solver alone grows as n^1.25)."""
    from benchmarks.make_report import section_speed
    n = np.array([4, 8, 16, 32] * 2)
    rows = pd.DataFrame({"n": n, "L": 10, "solver": ["old"] * 4 + ["new"] * 4,
                         "seconds": np.r_[1e-3 * n[:4] ** 2.0, 1e-3 * n[4:] ** 1.0]})
    rows.to_csv(tmp_path / "speed.csv", index=False)
    text = section_speed(tmp_path)
    fits = [line for line in text.splitlines() if line.startswith("|") and "L=10" in line]
    assert len(fits) == 2, text
    exps = {cells[0]: float(cells[-1]) for cells in ([c.strip() for c in f.strip("|").split("|")] for f in fits)}
    assert exps["old"] == pytest.approx(2.0) and exps["new"] == pytest.approx(1.0), fits
