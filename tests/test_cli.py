"""The dynpar command line: every subcommand works, --help everywhere, errors are one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solver.cli.commands import build_parser, main

REPO = Path(__file__).resolve().parents[1]
DEFAULT = str(REPO / "instances" / "default.toml")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solver", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("cmd", [[], ["run"], ["solve"], ["compare"], ["bench"], ["import-profile"]])
def test_help_everywhere(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*cmd, "--help"])
    assert e.value.code == 0
    assert "usage: dynpar" in capsys.readouterr().out


def test_run_writes_results(tmp_path, capsys):
    assert main(["run", DEFAULT, "--slots", "3", "--out", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "plan of slot 0" in out and "summary:" in out
    folder = tmp_path / "default" / "ours"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["slots"] == 3
    assert len((folder / "slots.csv").read_text().strip().splitlines()) == 4


def test_solve_prints_plan(capsys):
    assert main(["solve", DEFAULT, "--slot", "2"]) == 0
    out = capsys.readouterr().out
    assert "group 0" in out and "predicted batch time" in out


def test_compare_subset(tmp_path, capsys):
    assert main(["compare", DEFAULT, "--slots", "2", "--policies", "ours,even-dp", "--out", str(tmp_path),
                 "--no-plots"]) == 0
    table = (tmp_path / "default" / "compare.csv").read_text()
    assert "ours" in table and "even-dp" in table


def test_import_profile(tmp_path, shared_data, capsys):
    out = tmp_path / "vgg.csv"
    assert main(["import-profile", str(shared_data / "profiles/pipedream/vgg16/graph.txt"), "-o", str(out)]) == 0
    assert out.is_file() and "layers" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["run", "no/such/file.toml"], "no/such/file.toml"),
    (["solve", DEFAULT, "--slot", "999"], "999"),
    (["solve", DEFAULT, "--slot", "0", "--queues", "1,2,3"], "queue"),
])
def test_errors_are_one_line(args, needle):
    p = run_cli(*args)
    assert p.returncode != 0
    lines = [l for l in p.stderr.strip().splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith("dynpar: error:") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_bad_instance_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(DEFAULT).read_text().replace("batch = 192", "batch = 190"))
    p = run_cli("solve", str(bad), "--slot", "0")
    assert p.returncode == 2 and "batch" in p.stderr and "Traceback" not in p.stderr
