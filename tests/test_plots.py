"""Plots: each writes a non-empty PNG (skipped without matplotlib); the pipeline timeline's bars
are the event simulator's operations; the device map marks exactly the devices each plan holds,
and the traces' unavailable and straggling devices."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from solver.baselines import dapple, even_dp
from solver.cli.plots import device_map, plot_compare, plot_compare_grid, plot_device_map, plot_run, \
    plot_timeline, plot_v_tradeoff, timeline
from solver.cli.plots.common import STRAGGLER_FACTOR, policy_label
from solver.cost import evaluate
from solver.cost.simulator import micro_batches
from solver.io.synthetic import random_instance
from solver.model import Plan, plan_from_json, plan_to_json
from solver.online import run_online
from solver.online.compare import compare_policies

PNG = b"\x89PNG\r\n\x1a\n"


def needs_matplotlib():
    pytest.importorskip("matplotlib", reason="matplotlib (the `plot` extra) is not installed: PNG tests skipped")


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 1000, path
    assert path.read_bytes()[:8] == PNG


@pytest.fixture(scope="module")
def inst():
    """5 devices, 4 slots; device 3 straggles in slot 1 and is gone in slot 2."""
    base = random_instance(11, n=5, L=8, slots=4, batch=32, micro_batch=4, p_leave=0.0)
    avail = base.available.copy()
    avail[2, 3] = False
    factor = np.maximum(base.speed_factor, STRAGGLER_FACTOR)
    factor[1, 3] = 0.4
    return replace(base, available=avail, speed_factor=factor)


@pytest.fixture(scope="module")
def run_df(inst):
    run = run_online(inst, V=1.0, policy="ours")
    return getattr(run, "rows", run)          # an OnlineRun's rows, or the rows themselves


def test_device_map_marks_exactly_the_held_devices(inst, run_df):
    dm = device_map(run_df, inst)
    plans = [plan_from_json(t) for t in run_df.plan_json]
    for c, plan in enumerate(plans):
        held = set(np.flatnonzero(dm.group[:, c] >= 0))
        assert held == set(plan.devices)
        for gi, g in enumerate(plan.groups):
            for j, d in enumerate(g.devices):
                assert (dm.group[d, c], dm.stage[d, c], dm.stages[d, c]) == (gi, j, g.num_stages)
    assert dm.unavailable[3, 2] and dm.unavailable.sum() == 1
    assert dm.straggler[3, 1] and dm.straggler.sum() == 1
    assert dm.group[3, 2] == -1                     # nothing is held where a device is gone


def test_device_map_of_a_slot_without_plan(inst):
    state = inst.state(0)
    df = pd.DataFrame({"slot": [0, 1], "plan_json": [plan_to_json(even_dp(state)), "null"]})
    dm = device_map(df, inst)
    assert list(dm.no_plan) == [False, True]
    assert (dm.group[:, 1] == -1).all()
    assert set(np.flatnonzero(dm.group[:, 0] >= 0)) == set(even_dp(state).devices)


def test_drawn_device_map_cells(inst, run_df):
    needs_matplotlib()
    from solver.cli.plots.common import pyplot
    from solver.cli.plots.devices import draw_device_map
    dm = device_map(run_df, inst)
    fig, ax = pyplot().subplots()
    art = draw_device_map(ax, dm, [d.name for d in inst.devices])
    cells = {(round(p.vertices[0][1] + 0.5), round(p.vertices[0][0] + 0.5)) for p in art["held"].get_paths()}
    assert cells == {(int(d), int(c)) for d, c in zip(*np.nonzero(dm.group >= 0))}
    assert len(art["unavailable"].get_paths()) == 1 and len(art["straggler"].get_paths()) == 1
    pyplot().close(fig)


def test_timeline_bars_are_the_simulated_operations(inst):
    state = inst.state(0)
    u = state.workload.micro_batch
    one_f_one_b = dapple(state)          # DAPPLE plans 1F1B
    as_gpipe = Plan(tuple(replace(g, schedule="gpipe") for g in one_f_one_b.groups))
    for plan in (even_dp(state), as_gpipe, one_f_one_b):
        tl = timeline(plan, state)
        for gi, g in enumerate(plan.groups):
            n = len(micro_batches(g.share, u))
            mine = [b for b in tl.bars if b.group == gi]
            assert sum(b.kind == "F" for b in mine) == g.num_stages * n == sum(b.kind == "B" for b in mine)
            assert sum(b.kind.startswith("send") for b in mine) == 2 * (g.num_stages - 1) * n
            assert max(b.end for b in mine if b.kind != "sync") == pytest.approx(tl.makespans[gi])
        assert max(b.end for b in tl.bars) == pytest.approx(tl.batch_time)
        if plan is one_f_one_b:     # the closed form is 1F1B's upper bound
            assert tl.batch_time <= evaluate(plan, state).batch_time * (1 + 1e-9)
        else:                       # GPipe over whole micro-batches: exactly the closed form
            assert tl.batch_time == pytest.approx(evaluate(plan, state).batch_time, rel=1e-9)
        syncs = [b for b in tl.bars if b.kind == "sync"]
        if len(plan.groups) > 1 and tl.sync > 0:
            assert len(syncs) == sum(g.num_stages for g in plan.groups)
            assert all(b.start == pytest.approx(max(tl.makespans)) for b in syncs)
        else:
            assert not syncs


def test_timeline_places_the_optimizer_step_after_the_sync(inst):
    devices = tuple(replace(d, memory_bandwidth=2e11) for d in inst.devices)
    opt = replace(inst, devices=devices, workload=replace(inst.workload, optimizer_step="bandwidth"))
    state = opt.state(0)
    plan = even_dp(state)
    tl = timeline(plan, state)
    steps = [b for b in tl.bars if b.kind == "optim"]
    assert len(steps) == sum(g.num_stages for g in plan.groups) and tl.optimizer > 0
    assert all(b.start == pytest.approx(max(tl.makespans) + tl.sync) for b in steps)
    assert tl.batch_time == pytest.approx(evaluate(plan, state).batch_time, rel=1e-9)
    assert max(b.end for b in tl.bars) == pytest.approx(tl.batch_time)


def test_policy_labels_say_what_they_are():
    assert policy_label("even-dp") == "even DP" and policy_label("lb-bsp") == "LB-BSP"
    assert policy_label("ours", 1.0) == "ours (V=1)" and policy_label("ours@V=0.1") == "ours (V=0.1)"


def test_every_plot_writes_a_png(inst, run_df, tmp_path):
    needs_matplotlib()
    assert_png(plot_run(run_df, inst, tmp_path)[0])
    assert_png(plot_device_map(run_df, inst, tmp_path)[0])
    state = inst.state(0)
    assert_png(plot_timeline(dapple(state), state, tmp_path / "t.png", title="slot 0"))
    table = compare_policies(inst.head(2), V=1.0, policies=["ours", "even-dp", "lb-bsp"])
    assert_png(plot_compare(table, inst, tmp_path)[0])
    both = pd.concat([table.assign(instance="a"), table.assign(instance="b")])
    assert_png(plot_compare_grid(both, tmp_path / "grid.png"))
    sweep = pd.concat([table[table.policy == "ours"].assign(instance="a", V=v) for v in (0.1, 1.0)])
    assert_png(plot_v_tradeoff(sweep, tmp_path / "v.png"))


def test_compare_labels_do_not_overlap(tmp_path):
    needs_matplotlib()
    from solver.cli.plots.common import pyplot
    from solver.cli.plots.compare import draw_panel, place_labels
    rng = np.random.default_rng(3)
    pols = ["ours", "even-dp", "lb-bsp", "gpipe", "dapple", "pipedream", "hetpipe", "frozen", "v-inf", "v-zero"]
    df = pd.DataFrame({"policy": pols, "V": 1.0, "avg_batch_time_s": 1 + 0.05 * rng.random(len(pols)),
                       "avg_money": 1 + 0.05 * rng.random(len(pols)), "money_limit": 1.0})
    fig, ax = pyplot().subplots(figsize=(8, 5))
    _, xy, labels = draw_panel(ax, df)
    texts = place_labels(ax, xy, labels)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert [t.get_text() for t in texts] and "even DP" in {t.get_text() for t in texts}
    overlaps = sum(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    assert overlaps == 0
    pyplot().close(fig)


def test_solve_plot_and_run_plots_from_the_cli(tmp_path):
    needs_matplotlib()
    from solver.cli.commands import main
    default = str(Path(__file__).resolve().parents[1] / "instances" / "default.toml")
    assert main(["solve", default, "--slot", "1", "--plot", str(tmp_path / "tl.png")]) == 0
    assert_png(tmp_path / "tl.png")
    assert main(["run", default, "--slots", "2", "--out", str(tmp_path)]) == 0
    assert_png(tmp_path / "default" / "ours" / "devices.png")
    assert_png(tmp_path / "default" / "ours" / "run.png")


def test_report_draws_the_v_sweep_and_the_frontier_as_different_pictures(tmp_path):
    needs_matplotlib()
    from benchmarks.make_report import main as report
    rows = [{"instance": name, "V": V, "avg_batch_time_s": t, "avg_money": m, "money_limit": 1.0,
             "money_overshoot_pct": 100 * (m - 1)}
            for name, pts in (("random-3", [(0.1, 2.0, 0.8), (1.0, 1.5, 0.95), (10.0, 1.2, 1.1)]),
                              ("default", [(0.1, 3.0, 0.7), (1.0, 3.0, 0.7), (10.0, 2.5, 1.3)]))
            for V, t, m in pts]
    pd.DataFrame(rows).to_csv(tmp_path / "v_sweep.csv", index=False)
    assert report(["--out", str(tmp_path)]) == 0
    sweep, frontier = tmp_path / "v_sweep.png", tmp_path / "v_tradeoff.png"
    assert_png(sweep)
    assert_png(frontier)
    assert sweep.read_bytes() != frontier.read_bytes()
    text = (tmp_path / "REPORT.md").read_text()
    assert "![v_sweep.png](v_sweep.png)" in text and "![v_tradeoff.png](v_tradeoff.png)" in text
