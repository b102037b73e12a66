"""CI smoke test of the benchmark suite on a small subset: the comparison runs, the report
regenerates and shows every policy (the full `dynpar bench --quick` takes minutes)."""
from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.run_all import main


def test_bench_smoke(tmp_path):
    rc = main(["--only", "compare", "--instances", "default", "--slots", "2", "--workers", "1",
               "--out", str(tmp_path)])
    assert rc == 0
    table = pd.read_csv(tmp_path / "compare_all.csv")
    assert {"ours", "even-dp", "lb-bsp", "gpipe", "dapple", "pipedream", "hetpipe"} <= set(table.policy)
    assert (table.avg_batch_time_s > 0).all()
    assert {"avg_money_usd", "money_limit_usd", "avg_energy_j", "energy_limit_j"} <= set(table.columns)
    ours = float(table.loc[table.policy == "ours", "avg_batch_time_s"].iloc[0])
    even = float(table.loc[table.policy == "even-dp", "avg_batch_time_s"].iloc[0])
    assert ours < even
    report = (tmp_path / "REPORT.md").read_text()
    assert "default" in report and "ours" in report


def test_bench_time_limit_factor(tmp_path, capsys):
    """--time-limit-factor scales each module's time limit (an outside audit's `dynpar bench
    --quick` failed on a busy machine at the fixed 240 s): a module over it is recorded as timed
    out, naming the option, and the suite says so in its exit status; a negative factor is
    argparse's one line."""
    assert main(["--only", "bench_shares", "--quick", "--out", str(tmp_path), "--time-limit-factor", "1e-6"]) == 1
    status = pd.read_csv(tmp_path / "bench_status.csv")
    assert status.status.iloc[0].startswith("timed out after 0.00024 s (--time-limit-factor gives it longer)")
    with pytest.raises(SystemExit) as ex:
        main(["--only", "bench_shares", "--out", str(tmp_path), "--time-limit-factor", "-1"])
    assert ex.value.code == 2 and "expected a finite number >= 0 (0: no limit)" in capsys.readouterr().err


def test_bench_budget_smoke(tmp_path):
    """bench_budget on two small slots: each gap is the default plan's against the better of the
    two searches (so never negative), and big_worse says whether the larger budget lost."""
    from benchmarks.bench_budget import main as budget_main
    assert budget_main([str(tmp_path), "--slots", "2", "--sizes", "8", "--factor", "2"]) == 0
    table = pd.read_csv(tmp_path / "budget.csv")
    assert len(table) == 2 and (table["n"] == 8).all()
    feasible = table[table["objective"] < float("inf")]
    assert (feasible["gap"] >= 0).all()
    ref = feasible[["objective", "big_objective"]].min(axis=1)
    assert ((feasible["gap"] - (feasible["objective"] / ref - 1)).abs() < 1e-12).all()
    assert (feasible["big_worse"] == (feasible["big_objective"] > feasible["objective"] * (1 + 1e-12))).all()
    # --portfolio: the runs at small budgets join the reference (the gap can only grow)
    assert budget_main([str(tmp_path), "--slots", "2", "--sizes", "8", "--factor", "2", "--portfolio", "1,3"]) == 0
    both = pd.read_csv(tmp_path / "budget.csv")
    ref = both[["objective", "big_objective", "portfolio_objective"]].min(axis=1)
    assert ((both["gap"] - (both["objective"] / ref - 1)).abs() < 1e-12).all()
    assert (both["gap"] >= table["gap"] - 1e-12).all() and set(both["portfolio_budget"]) <= {1, 3}


def test_bench_margin_replay_follows_the_recorded_run(tmp_path):
    """bench_margin: replaying the margin in force on a run's recorded frontiers picks the run's
    own plans (the same average batch time, within float rounding); every rule's ratio to the
    offline LP over the same points at its own use is >= 1, and to the LP at the limits + TOL
    too wherever its use is within them (a replay over them may be faster than that LP); an
    unknown instance is an error naming it."""
    import numpy as np

    from benchmarks.bench_margin import RULES, TOL, record, replay
    from solver.io.synthetic import random_instance
    from solver.online import run_online
    from solver.online.offline import calibrate_budgets

    inst = calibrate_budgets(random_instance(6, n=4, L=6, slots=6, p_leave=0.0), 0.3)
    run = run_online(inst, replan=False, state_path=tmp_path / "state.json")
    import json
    hist = json.loads((tmp_path / "state.json").read_text())["extra"]["history"]
    F = [np.asarray(s, dtype=float).reshape(-1, len(inst.budgets) + 1) for s in hist["slots"]]
    r = replay(F, RULES["in force"])
    assert r["avg_batch_time_s"] == pytest.approx(run.summary["avg_batch_time"], rel=1e-9)
    for name, rule in RULES.items():
        x = replay(F, rule)
        assert x["ratio"] >= 1 - 1e-9, name
        assert x["ratio_lim"] >= 1 - 1e-9 or x["worst_use_pct"] > 100 * (1 + TOL), name
    from solver.errors import InstanceError
    with pytest.raises(InstanceError, match="no_such_instance"):
        record("no_such_instance", tmp_path)


def test_bench_classes_smoke(tmp_path, monkeypatch):
    """bench_classes on one packaged pool, whole and with 2 devices preempted: both rows are
    written, the class search runs on the whole pool, and no row is worse than the device-level
    search by more than the 28% the README reports as its worst."""
    import sys
    from benchmarks.bench_classes import main as classes_main
    out = tmp_path / "classes.csv"
    monkeypatch.setattr(sys, "argv", ["bench_classes", "--packaged", "--models", "bert_base", "--kinds", "A10G,T4",
                                      "--nodes", "2", "--batches", "64", "--queues", "0", "--lost", "0", "2",
                                      "--out", str(out)])
    assert classes_main() == 0
    table = pd.read_csv(out)
    assert list(table.lost) == [0, 2]
    assert table.loc[table.lost == 0, "auto_searched"].item() == "classes"
    assert (table.ratio <= 1.28).all()


def test_bench_preemption_smoke(tmp_path):
    """bench_preemption on one short Markov trace: both runs per setting, the ratio is theirs,
    and the Markov trace starts with every device and keeps one available in every slot."""
    from benchmarks.bench_preemption import main as pre_main, markov_trace
    A = markov_trace(5, 40, 990_123)
    assert A[0].all() and A.any(axis=1).all()
    assert pre_main([str(tmp_path), "--instances", "", "--markov", "default:1", "--slots", "4",
                     "--settings", "30:10"]) == 0
    table = pd.read_csv(tmp_path / "preemption.csv")
    assert list(table["aware"]) == [False, True]
    plain, aware = table["avg_batch_time"]
    assert table["aware_over_plain"].iloc[-1] == pytest.approx(aware / plain)
