"""CI smoke test of the benchmark suite on a small subset: the comparison runs, the report
regenerates and shows every policy (the full `dynpar bench --quick` takes minutes)."""
from __future__ import annotations

import pandas as pd

from benchmarks.run_all import main


def test_bench_smoke(tmp_path):
    rc = main(["--only", "compare", "--instances", "default", "--slots", "2", "--workers", "1",
               "--out", str(tmp_path)])
    assert rc == 0
    table = pd.read_csv(tmp_path / "compare_all.csv")
    assert {"ours", "even-dp", "lb-bsp", "gpipe", "dapple", "pipedream", "hetpipe"} <= set(table.policy)
    assert (table.avg_batch_time_s > 0).all()
    ours = float(table.loc[table.policy == "ours", "avg_batch_time_s"].iloc[0])
    even = float(table.loc[table.policy == "even-dp", "avg_batch_time_s"].iloc[0])
    assert ours < even
    report = (tmp_path / "REPORT.md").read_text()
    assert "default" in report and "ours" in report


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
