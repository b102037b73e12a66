"""Gain within budget compares only with baselines that meet every budget, and says which
policies it left out."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from solver.online.gain import add_gain_within_budget, meets_budgets, within_budget_note


def table() -> pd.DataFrame:
    return pd.DataFrame({
        "policy": ["ours", "even-dp", "lb-bsp", "dapple", "v-inf"],
        "avg_batch_time_s": [1.0, 0.5, 2.0, 4.0, 0.4],
        "money_overshoot_pct": [0.5, 240.0, -10.0, -20.0, 80.0],
        "energy_overshoot_pct": [-3.0, 10.0, 1.0, -5.0, 2.0],
    })


def test_gain_only_against_baselines_within_budget():
    t = add_gain_within_budget(table())
    assert list(t.meets_budgets) == [True, False, True, True, False]
    g = dict(zip(t.policy, t.gain_within_budget_pct))
    assert g["ours"] == pytest.approx(50.0)          # against LB-BSP (2 s), not the overshooting even DP
    assert g["lb-bsp"] == pytest.approx(50.0)        # against the other baseline within budget, DAPPLE
    assert g["dapple"] == pytest.approx(-100.0)
    assert math.isnan(g["even-dp"]) and math.isnan(g["v-inf"])


def test_note_names_the_reference_and_the_excluded():
    note = within_budget_note(table())
    assert "lb-bsp (2 s)" in note
    assert "even-dp (money +240%)" in note and "v-inf (money +80%)" in note
    assert "ours" not in note.split("excluded")[1]


def test_a_policy_that_never_ran_is_not_said_to_overshoot():
    """A policy with no feasible plan in any slot has no overshoot (NaN): the note says it had no
    plan, not that it overshot by +nan%."""
    t = table()
    t.loc[t.policy == "dapple", ["money_overshoot_pct", "energy_overshoot_pct"]] = float("nan")
    note = within_budget_note(t)
    assert "nan" not in note and "excluded for having no feasible plan in any slot: dapple" in note
    assert "even-dp (money +240%)" in note


def test_per_instance_and_no_baseline_within_budget():
    a, b = table().assign(instance="a"), table().assign(instance="b")
    b.loc[b.policy.isin(["lb-bsp", "dapple"]), "money_overshoot_pct"] = 50.0
    t = add_gain_within_budget(pd.concat([a, b], ignore_index=True))
    assert t[t.instance == "a"].gain_within_budget_pct.notna().sum() == 3
    assert t[t.instance == "b"].gain_within_budget_pct.isna().all()
    assert "none given, as no baseline meets" in within_budget_note(b)
    assert meets_budgets(pd.DataFrame({"policy": ["ours"], "avg_batch_time_s": [1.0]})).all()


def test_a_budget_the_instance_lacks_is_met_a_missing_figure_is_not():
    t = pd.DataFrame({"policy": ["ours", "even-dp", "lb-bsp"], "avg_batch_time_s": [1.0, 2.0, 3.0],
                      "money_limit": [1.0, 1.0, 1.0], "money_overshoot_pct": [0.0, 0.0, float("nan")],
                      "energy_limit": [float("nan")] * 3, "energy_overshoot_pct": [float("nan")] * 3})
    assert list(meets_budgets(t)) == [True, True, False]


def test_dynpar_compare_prints_the_note_and_writes_the_column(tmp_path, capsys):
    from pathlib import Path

    from solver.cli.commands import main
    default = str(Path(__file__).resolve().parents[1] / "instances" / "default.toml")
    assert main(["compare", default, "--slots", "2", "--policies", "ours,even-dp,lb-bsp", "--no-plots",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "gain within budget:" in out
    table = pd.read_csv(tmp_path / "default" / "compare.csv")
    assert {"meets_budgets", "gain_within_budget_pct"} <= set(table.columns)
    assert table.loc[~table.meets_budgets, "gain_within_budget_pct"].isna().all()
