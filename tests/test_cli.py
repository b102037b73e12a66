"""The dynpar command line: every subcommand works, --help everywhere, bad input gives one line
and exit status 2, real traces with empty or impossible slots run to the end."""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import solver
from solver.cli import commands
from solver.cli.commands import build_parser, main
from solver.cli.output import print_slots, progress
from solver.io.instance import load_instance
from solver.model import plan_from_dict

REPO = Path(__file__).resolve().parents[1]
DEFAULT = str(REPO / "instances" / "default.toml")
GRAPH = ("node1 -- Input -- forward_compute_time=0.0, backward_compute_time=0.0, activation_size=300.0, "
         "parameter_size=0.0\n"
         "node2 -- Conv -- forward_compute_time=1.0, backward_compute_time=2.0, activation_size=120.0, "
         "parameter_size=16.0\n"
         "\tnode1 -- node2\n")
"""A two-node PipeDream graph.txt (a folder named vgg16 gives its minibatch, 128)."""


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solver", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def one_error_line(p: subprocess.CompletedProcess, needle: str) -> str:
    lines = [line for line in p.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("dynpar: error:") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr
    return lines[0]


def default_copy(tmp_path: Path, unavailable_at_0: tuple[str, ...] = (), toml_edit=lambda s: s) -> Path:
    """The default instance copied to tmp_path, with devices made unavailable in slot 0."""
    src = Path(DEFAULT).resolve().parent
    for name in ("default_links.csv",):
        shutil.copy(src / name, tmp_path / name)
    rows = list(csv.DictReader((src / "default_devices.csv").open()))
    with (tmp_path / "default_devices.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        for r in rows:
            if r["slot"] == "0" and r["device"] in unavailable_at_0:
                r["available"] = "0"
            w.writerow(r)
    path = tmp_path / "default.toml"
    path.write_text(toml_edit((src / "default.toml").read_text()))
    return path


ALL_DEVICES = ("v100-0", "v100-1", "t4-0", "t4-1", "k80-0", "k80-1")


@pytest.mark.parametrize("cmd", [[], ["run"], ["solve"], ["compare"], ["bench"], ["import-profile"]])
def test_help_everywhere(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*cmd, "--help"])
    assert e.value.code == 0
    assert "usage: dynpar" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["--version"])
    assert e.value.code == 0
    from importlib.metadata import version
    assert capsys.readouterr().out.strip() == f"dynpar {version('dynpar')}"


def test_run_writes_results(tmp_path, capsys):
    assert main(["run", DEFAULT, "--slots", "3", "--out", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "plan of slot 0" in out and "summary" in out
    folder = tmp_path / "default" / "ours"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["slots"] == 3 and summary["infeasible_slots"] == 0
    assert len((folder / "slots.csv").read_text().strip().splitlines()) == 4


def test_money_and_energy_columns_carry_units(tmp_path, capsys):
    assert main(["run", DEFAULT, "--slots", "2", "--out", str(tmp_path), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    folder = tmp_path / "default" / "ours"
    header = (folder / "slots.csv").read_text().splitlines()[0].split(",")
    for col in ("cost_money_usd", "cost_energy_j", "batch_time_s", "solve_time_s"):
        assert col in header and col in printed
    assert "cost_money" not in [h for h in header if not h.endswith(("_usd", "_j"))]
    summary = json.loads((folder / "summary.json").read_text())
    assert "avg_cost_money_usd" in summary and "avg_cost_energy_j" in summary and "avg_batch_time_s" in summary
    assert main(["compare", DEFAULT, "--slots", "2", "--policies", "even-dp", "--out", str(tmp_path),
                 "--no-plots"]) == 0
    printed = capsys.readouterr().out
    header = (tmp_path / "default" / "compare.csv").read_text().splitlines()[0].split(",")
    assert {"avg_money_usd", "avg_energy_j", "money_limit_usd"} <= set(header)
    assert "avg_money_usd" in printed


def test_slot0_with_no_device_runs_on_and_says_so(tmp_path, capsys):
    path = default_copy(tmp_path, unavailable_at_0=ALL_DEVICES)
    assert main(["run", str(path), "--slots", "3", "--out", str(tmp_path / "r"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "1 of 3 slot(s) had no feasible plan" in out and "no device is available" in out
    assert "plan of slot 1" in out
    folder = tmp_path / "r" / "default" / "ours"
    rows = list(csv.DictReader((folder / "slots.csv").open()))
    assert [r["status"] for r in rows][0] == "infeasible" and len(rows) == 3
    assert all(r["status"] in ("feasible", "optimal") for r in rows[1:])
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["infeasible_slots"] == 1 and summary["executed_slots"] == 2


def test_slot0_where_no_plan_fits_memory(tmp_path, capsys):
    """Slot 0 has only k80-0, whose memory (overridden to 1 GB) cannot hold VGG-16's 2.2 GB of
    parameters and optimizer state; later slots are normal."""
    def small_k80(text: str) -> str:
        return text.replace('name = "k80-0"\nkind = "K80"', 'name = "k80-0"\nkind = "K80"\nmemory_gb = 1.0')
    path = default_copy(tmp_path, unavailable_at_0=tuple(d for d in ALL_DEVICES if d != "k80-0"),
                        toml_edit=small_k80)
    assert load_instance(path).devices[4].memory_bytes == 1e9
    assert main(["run", str(path), "--slots", "2", "--out", str(tmp_path / "r"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 slot(s) had no feasible plan" in out and "hold the model" in out
    rows = list(csv.DictReader((tmp_path / "r" / "default" / "ours" / "slots.csv").open()))
    assert [r["status"] for r in rows] == ["infeasible", rows[1]["status"]] and rows[1]["status"] != "infeasible"


def test_run_with_no_feasible_slot_writes_files_and_exits_1(tmp_path, capsys):
    """As a partly infeasible run, its files are written (each slot's reason); the one error line
    says no slot had a plan, why not in the first, and where the files are that hold no plan."""
    path = default_copy(tmp_path, unavailable_at_0=ALL_DEVICES)
    assert main(["run", str(path), "--slots", "1", "--out", str(tmp_path / "r"), "--no-plots"]) == 1
    captured = capsys.readouterr()
    folder = tmp_path / "r" / "default" / "ours"
    errors = [line for line in captured.err.splitlines() if line.startswith("dynpar:")]
    assert errors == [(f"dynpar: error: no slot of 1 had a feasible plan (slot 0: no device is available); the "
                       f"results in {folder} hold no plan, only each slot's reason (status and message columns of "
                       f"slots.csv)")]
    assert "plan of slot" not in captured.out and f"wrote {folder / 'slots.csv'}" in captured.out
    rows = list(csv.DictReader((folder / "slots.csv").open()))
    assert [(r["status"], r["plan_json"], r["message"]) for r in rows] == [
        ("infeasible", "null", "slot 0: no device is available")]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["executed_slots"] == 0
    # nothing ran, so nothing was met or kept: the flags say so (null), not true
    assert {summary[f"{flag}_{b}"] for flag in ("within_tolerance", "bound_ok") for b in ("money", "energy")} == {None}
    assert rows[0]["V"] == "" and summary["V"] is None


def test_solve_prints_plan(capsys):
    assert main(["solve", DEFAULT, "--slot", "2"]) == 0
    out = capsys.readouterr().out
    assert "group 0" in out and "predicted batch time" in out and "USD per iteration" in out


def test_solve_json(capsys):
    assert main(["solve", DEFAULT, "--slot", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    inst = load_instance(DEFAULT)
    state = inst.state(2)
    plan = plan_from_dict(doc["plan"])
    assert plan.validate(state) == []
    ev = solver.evaluate(plan, state)
    assert doc["batch_time_s"] == pytest.approx(ev.batch_time, rel=1e-12)
    assert doc["status"] in ("feasible", "optimal") and doc["slot"] == 2 and doc["instance"] == "default"
    assert doc["costs"]["money"]["unit"] == "USD per iteration" and doc["costs"]["energy"]["unit"] == "J per iteration"
    assert doc["costs"]["money"]["value"] == pytest.approx(ev.costs[0], rel=1e-9)
    assert len(doc["group_times_s"]) == len(plan.groups) and doc["sync_time_s"] >= 0


def test_solve_shows_the_instance_notes(tmp_path, capsys):
    """A static figure the trace replaces is noted by `solve` as by `run`, in text and JSON."""
    path = default_copy(tmp_path, toml_edit=lambda s: s.replace('name = "v100-0"\n', 'name = "v100-0"\nprice_per_hour = 100\n', 1))
    note = "devices[0].price_per_hour of v100-0 (100 USD per hour) is replaced by the price_per_hour column"
    assert main(["solve", str(path), "--slot", "0"]) == 0
    assert f"note: {note}" in capsys.readouterr().out
    assert main(["solve", str(path), "--slot", "0", "--json"]) == 0
    assert any(n.startswith(note) for n in json.loads(capsys.readouterr().out)["notes"])


def test_solve_json_of_an_empty_slot(tmp_path, capsys):
    path = default_copy(tmp_path, unavailable_at_0=ALL_DEVICES)
    assert main(["solve", str(path), "--slot", "0", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "infeasible" and doc["plan"] is None and "no device" in doc["message"]


def test_compare_subset(tmp_path, capsys):
    assert main(["compare", DEFAULT, "--slots", "2", "--policies", "ours,even-dp", "--out", str(tmp_path),
                 "--no-plots"]) == 0
    table = (tmp_path / "default" / "compare.csv").read_text()
    assert "ours" in table and "even-dp" in table


def test_compare_rejects_a_bad_policy_before_running(tmp_path, monkeypatch, capsys):
    import solver.online.compare as compare
    ran = []
    monkeypatch.setattr(compare, "policy_row", lambda *a, **k: ran.append(a) or {})
    assert main(["compare", DEFAULT, "--policies", "ours,bogus", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "--policies" in err and ran == [] and not (tmp_path / "default").exists()
    for empty in ("", "ours,"):
        assert main(["compare", DEFAULT, "--policies", empty, "--out", str(tmp_path)]) == 2
        assert "expected comma-separated policy names" in capsys.readouterr().err and ran == []
    assert main(["compare", DEFAULT, "--policies", "ours,even-dp,ours", "--out", str(tmp_path)]) == 2
    assert "--policies: expected each policy once, got 'ours' more than once" in capsys.readouterr().err
    assert ran == [] and not (tmp_path / "default").exists()


def test_results_of_a_run_are_its_own(tmp_path, capsys):
    """A run without plots removes the plots an earlier run left in its folder (saying so);
    summary.json's overshoot and bound carry their unit (fractions), and v-inf / v-zero record
    the V they act at (inf, 0), not the default rule's."""
    pytest.importorskip("matplotlib")
    folder = tmp_path / "default" / "ours"
    assert main(["run", DEFAULT, "--slots", "2", "--out", str(tmp_path)]) == 0
    assert {"run.png", "devices.png"} <= {p.name for p in folder.iterdir()}
    capsys.readouterr()
    assert main(["run", DEFAULT, "--slots", "1", "--out", str(tmp_path), "--no-plots"]) == 0
    assert "removed run.png, devices.png of an earlier run" in capsys.readouterr().out
    assert sorted(p.name for p in folder.iterdir()) == ["slots.csv", "summary.json"]
    s = json.loads((folder / "summary.json").read_text())
    assert {"overshoot_money_frac", "bound_money_frac", "overshoot_energy_frac"} <= set(s)
    assert not any(k in s for k in ("overshoot_money", "bound_money"))
    for policy, V, shown in (("v-inf", None, "V in force: inf (policy v-inf)"),
                             ("v-zero", 0.0, "V in force: 0 (policy v-zero)")):
        assert main(["run", DEFAULT, "--slots", "1", "--out", str(tmp_path), "--no-plots", "--policy", policy]) == 0
        assert shown in capsys.readouterr().out
        rows = list(csv.DictReader((tmp_path / "default" / policy / "slots.csv").open()))
        assert float(rows[0]["V"]) == (V if V is not None else float("inf"))
        assert json.loads((tmp_path / "default" / policy / "summary.json").read_text())["V"] == V


def test_import_profile(tmp_path, shared_data, capsys):
    out = tmp_path / "vgg.csv"
    assert main(["import-profile", str(shared_data / "profiles/pipedream/vgg16/graph.txt"), "-o", str(out)]) == 0
    assert out.is_file() and "layers" in capsys.readouterr().out


def test_import_profile_out_and_force(tmp_path, monkeypatch, capsys):
    graph = tmp_path / "vgg16" / "graph.txt"
    graph.parent.mkdir()
    graph.write_text(GRAPH)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["import-profile", str(graph)]) == 0
    out = capsys.readouterr().out
    assert (work / "vgg16.csv").is_file() and "no --out given" in out and str(work / "vgg16.csv") in out
    before = (work / "vgg16.csv").read_text()
    (work / "vgg16.csv").write_text("mine\n")
    assert main(["import-profile", str(graph)]) == 2
    assert "--force" in capsys.readouterr().err and (work / "vgg16.csv").read_text() == "mine\n"
    assert main(["import-profile", str(graph), "--force"]) == 0
    assert (work / "vgg16.csv").read_text() == before and "vgg16.csv" in capsys.readouterr().out
    target = tmp_path / "tables" / "b.csv"
    assert main(["import-profile", str(graph), "--out", str(target), "--minibatch", "4"]) == 0
    assert target.is_file() and "no --out given" not in capsys.readouterr().out
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.csv"]


QUEUE_BELOW_0 = ("--queues: money: expected a finite number >= 0 and <= 1e+24 (a virtual queue's backlog, in budgets), "
                 "got ")


@pytest.mark.parametrize("args, needle", [
    (["run", "no/such/file.toml"], "no/such/file.toml"),
    (["solve", DEFAULT, "--slot", "999"], "999"),
    (["solve", DEFAULT, "--slot", "0", "--queues", "1,2,3"], "queue"),
    (["solve", DEFAULT, "--slot", "0", "--queues", "a,b"], "--queues"),
    (["solve", DEFAULT, "--slot", "0", "--queues", "-1,0"], QUEUE_BELOW_0 + "-1"),
    (["solve", DEFAULT, "--slot", "0", "--queues=-1,0"], QUEUE_BELOW_0 + "-1"),
    (["solve", DEFAULT, "--slot", "0", "--que", "0,-2.5"], QUEUE_BELOW_0.replace("money", "energy") + "-2.5"),
    (["solve", DEFAULT, "--slot", "0", "--queues", "0,inf"], QUEUE_BELOW_0.replace("money", "energy") + "inf"),
    (["run", DEFAULT, "--V", "-1e-3"], "--V: expected a finite number >= 0 and <= 1e+12, got '-1e-3'"),
    (["run", DEFAULT, "--slots", "3", "--V", "1e308"], "--V: expected a finite number >= 0 and <= 1e+12, got '1e308'"),
    (["solve", DEFAULT, "--slot", "0", "--V", "1e13"], "--V: expected a finite number >= 0 and <= 1e+12"),
    (["solve", DEFAULT, "--slot", "0", "--queues", "1e306,0", "--json"], QUEUE_BELOW_0 + "1e306"),
    (["run", DEFAULT, "--slots", "1", "--out", ""], "--out: expected a file or folder path, got ''"),
    (["compare", DEFAULT, "--slots", "1", "--out", ""], "--out: expected a file or folder path, got ''"),
    (["bench", "--out", ""], "--out: expected a file or folder path, got ''"),
    (["run", DEFAULT, "--slots", "1", "--preemption", "1e300:10"],
     "--preemption: expected RESTART_S:CHECKPOINT_EVERY, seconds >= 0 and <= 1e+06"),
    (["run", DEFAULT, "--slots", "1", "--preemption", "60:0"], "checkpoint interval, got '0'"),
    (["run", DEFAULT, "--slots", "0"], "--slots"),
    (["run", DEFAULT, "--slots", "21"], "has 20 slots"),
    (["compare", DEFAULT, "--slots", "500"], "--slots"),
    (["run", DEFAULT, "--policy", "bogus"], "bogus"),
    (["run", DEFAULT, "--V", "-1"], "--V"),
    (["run", DEFAULT, "--V", "nan"], "--V"),
    (["frobnicate"], "frobnicate"),
    (["run", DEFAULT, "--slots", "1", "--out", "README.md"], "--out: cannot create folder README.md"),
    (["compare", DEFAULT, "--slots", "1", "--out", "README.md"], "--out: cannot create folder README.md"),
])
def test_errors_are_one_line_exit_2(args, needle):
    p = run_cli(*args)
    assert p.returncode == 2, p.stderr
    one_error_line(p, needle)


def test_no_folder_is_left_by_a_failed_command(tmp_path):
    """A command refused after its output folder was named leaves no folder behind (run with
    --ignore-hazards and no preemption cost; solve --plot of a slot with no plan, which says that
    no plot was written)."""
    out = tmp_path / "a"
    p = run_cli("run", DEFAULT, "--ignore-hazards", "--slots", "1", "--out", str(out))
    assert p.returncode == 2
    one_error_line(p, "--ignore-hazards: the instance declares no [preemption]")
    assert not out.exists()
    dark = default_copy(tmp_path, unavailable_at_0=tuple(d.name for d in load_instance(DEFAULT).devices))
    for extra in ([], ["--json"]):
        p = run_cli("solve", str(dark), "--slot", "0", "--plot", str(tmp_path / "p" / "t.png"), *extra)
        assert p.returncode == 1 and "note: --plot: no plot written: slot 0 has no plan" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and not (tmp_path / "p").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, a folder that refuses new entries")
def test_out_that_cannot_be_created_is_refused_before_any_work():
    """A review: --out under /proc passed the writability check (os.access is true there for
    root), so the run did its work and then failed on the first write, without naming --out."""
    p = run_cli("run", DEFAULT, "--slots", "2", "--no-plots", "--policy", "even-dp", "--out", "/proc/dynpar-x")
    assert p.returncode == 2 and "slot" not in p.stdout, p.stdout
    one_error_line(p, "--out: cannot create or write folder /proc/dynpar-x")


def test_import_profile_names_the_graph_node_and_flag(tmp_path):
    """A bad node field is named in graph.txt (node, field, value), not as a derived column of the
    output file, which is not written; --precision is checked as a flag."""
    graph = tmp_path / "vgg16" / "graph.txt"
    graph.parent.mkdir()
    out = tmp_path / "out" / "pd.csv"
    for bad, words in [("activation_size=120.0", "node 'node2': activation_size: expected finite bytes >= 0, "
                                                 "got '-5.0'"),
                       ("forward_compute_time=1.0", "node 'node2': forward_compute_time: expected finite ms >= 0, "
                                                    "got 'nan'")]:
        graph.write_text(GRAPH.replace(bad, bad.split("=")[0] + ("=-5.0" if "activation" in bad else "=nan")))
        p = run_cli("import-profile", str(graph), "--out", str(out))
        assert p.returncode == 2
        one_error_line(p, f"{graph}: line 2: {words}")
        assert not out.parent.exists()
    graph.write_text(GRAPH)
    p = run_cli("import-profile", str(graph), "--out", str(out), "--precision", "fp8")
    assert p.returncode == 2
    one_error_line(p, "argument --precision: expected one of bf16, fp16, fp32, got 'fp8'")
    assert not out.parent.exists()
    p = run_cli("import-profile", str(graph), "--out", str(out), "--precision", "fp16")
    assert p.returncode == 0 and "# precision: fp16" in out.read_text()


def test_bad_instance_exits_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(DEFAULT).read_text().replace("batch = 192", "batch = 190"))
    p = run_cli("solve", str(bad), "--slot", "0")
    assert p.returncode == 2 and "batch" in p.stderr and "Traceback" not in p.stderr


def test_non_utf8_instance_names_the_file(tmp_path):
    bad = tmp_path / "latin.toml"
    bad.write_bytes(Path(DEFAULT).read_bytes().replace(b'description = "', b'description = "caf\xe9 '))
    p = run_cli("run", str(bad))
    assert p.returncode == 2
    line = one_error_line(p, str(bad))
    assert "UTF-8" in line


def test_name_cannot_leave_the_results_folder(tmp_path):
    path = default_copy(tmp_path, toml_edit=lambda s: s.replace('name = "default"', 'name = "../../x"'))
    p = run_cli("run", str(path), "--slots", "1", "--out", str(tmp_path / "r"), "--no-plots")
    assert p.returncode == 2
    one_error_line(p, "name")
    assert not (tmp_path / "r").exists() and not (tmp_path.parent / "x").exists()


def test_progress_on_a_pipe():
    """Not a terminal: a line every 5% of the slots, one every 10 s when slots are slow, one at the end."""
    clock = iter(range(0, 10_000, 1)).__next__       # one second per call
    buf = io.StringIO()
    report = progress("run", stream=buf, clock=clock)
    for done in range(1, 101):
        report(done, 100)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 20 and lines[-1].startswith("run: 100/100 slots (100%)")
    slow = iter(range(0, 100_000, 11)).__next__       # 11 s per slot
    buf = io.StringIO()
    report = progress("run", stream=buf, clock=slow)
    for done in range(1, 6):
        report(done, 1000)
    assert len(buf.getvalue().splitlines()) == 5


def test_run_progress_goes_to_stderr_off_a_terminal(tmp_path):
    p = run_cli("run", DEFAULT, "--slots", "2", "--out", str(tmp_path), "--no-plots")
    assert p.returncode == 0, p.stderr
    assert "2/2 slots (100%)" in p.stderr and "slots (" not in p.stdout


def test_long_tables_are_summarised_never_cut(tmp_path, capsys):
    import pandas as pd
    df = pd.DataFrame({"slot": range(100), "plan": ["a" * 30] * 100, "batch_time_s": [1.0 + i for i in range(100)],
                       "status": ["feasible"] * 99 + ["infeasible"]})
    print_slots(df, list(df.columns), tmp_path / "slots.csv")
    out = capsys.readouterr().out
    assert "..." not in out and str(tmp_path / "slots.csv") in out and "100 slots" in out
    assert "feasible 99" in out and "infeasible 1" in out and "100" in out
    print_slots(df.head(40), list(df.columns), tmp_path / "slots.csv")
    out = capsys.readouterr().out
    assert "..." not in out and len(out.strip().splitlines()) == 41


def hide_matplotlib(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # `import matplotlib` raises ImportError


def test_run_and_compare_without_matplotlib(tmp_path, monkeypatch, capsys):
    hide_matplotlib(monkeypatch)
    assert main(["run", DEFAULT, "--slots", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "plots skipped" in line]
    assert len(notes) == 1 and "dynpar[plot]" in notes[0]
    folder = tmp_path / "default" / "ours"
    assert sorted(p.name for p in folder.iterdir()) == ["slots.csv", "summary.json"]
    assert main(["compare", DEFAULT, "--slots", "1", "--policies", "even-dp", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert sum("plots skipped" in line for line in out.splitlines()) == 1
    assert (tmp_path / "default" / "compare.csv").is_file()
    assert not list((tmp_path / "default").glob("*.png"))


def test_bench_outside_a_checkout_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(solver, "__file__", str(tmp_path / "site-packages" / "solver" / "__init__.py"))
    assert commands._checkout() is None
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkout" in err[0]


def readme_flags() -> dict[tuple[str, str], str]:
    """(command, flag) -> the default cell of the README's flag table."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Command line"):]
    section = section[:section.index("\n## ", 3)]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("`"):
            continue
        for cmd in cells[0].split(", "):
            for flag in cells[1].split(", "):
                out[(cmd, flag.strip("`"))] = cells[2].strip("`")
    return out


def test_readme_documents_every_flag_with_its_default():
    import argparse
    documented = readme_flags()
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for cmd, p in sub.choices.items():
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            flags = action.option_strings or [action.dest.upper()]
            for flag in flags:
                if flag == "--output":
                    continue                              # an old alias of --out
                assert (cmd, flag) in documented, f"README lacks `{flag}` of dynpar {cmd}"
                default = action.default
                if action.required or default in (None, False, "") or isinstance(default, bool):
                    continue
                shown = f"{default:g}" if isinstance(default, float) else str(default)
                assert documented[(cmd, flag)].startswith(shown), (cmd, flag, documented[(cmd, flag)], shown)


@pytest.mark.parametrize("cached", [False, None])
def test_first_run_says_it_compiles_the_kernels(cached, tmp_path, capsys, monkeypatch):
    from solver.subproblems import dp_kernel
    monkeypatch.setattr(dp_kernel, "compiled_cached", lambda: cached)
    assert main(["solve", DEFAULT, "--slot", "0"]) == 0
    err = capsys.readouterr().err
    assert ("compiling the cut DP and share kernels" in err) == (cached is False)


def test_compiled_cache_is_found_after_a_solve():
    from solver.io.synthetic import random_state
    from solver.solve import solve_slot
    from solver.subproblems.dp_kernel import compiled_cached
    from solver.subproblems.shares import solve_shares
    solve_slot(random_state(1, n=4, L=8), (), 1.0)
    solve_shares([0.01, 0.02], [0.1, 0.2], [64, 64], 64, 4, 1.0, [0.0, 0.01])    # two groups: the share kernel
    assert compiled_cached() in (True, None)


def test_results_get_the_permissions_of_a_plain_open(tmp_path):
    """write_atomic's temporary file (mkstemp: 0600) is given 0666 less the umask before it
    is renamed, as open() would give a new file."""
    import os
    import stat

    from solver.cli.output import write_atomic

    old = os.umask(0o022)
    try:
        p = write_atomic(tmp_path / "out" / "summary.json", "{}")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o644
    assert p.read_text() == "{}"


def test_resumable_run_says_where_it_resumes(tmp_path, capsys):
    """--resumable: a second run of a complete run says so (and writes the same results); a
    state file that is not one is one error line naming it, exit 2."""
    args = ["run", DEFAULT, "--slots", "2", "--out", str(tmp_path), "--no-plots", "--resumable"]
    assert main(args) == 0
    folder = tmp_path / "default" / "ours"
    first = (folder / "slots.csv").read_text()
    assert "resuming" not in capsys.readouterr().out
    assert main(args) == 0
    assert "the run is complete (every slot ran)" in capsys.readouterr().out
    assert (folder / "slots.csv").read_text() == first
    (folder / "controller_state.json").write_text("{bad")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("dynpar: error: --resumable: controller state") and "not a saved run" in err


def test_resumable_run_refuses_a_changed_state_before_saying_it_resumes(tmp_path, capsys):
    """An outside audit's state files: a JSON list or null had given a traceback; a state edited
    by hand (a negative queue, a row's batch time, the next slot: duplicated rows) or missing a
    part was continued; a state of the same instance with another V was refused only after
    'the run is complete' had been printed. Now: one line naming the file, exit 2, nothing said
    of resuming and nothing rewritten."""
    import json
    args = ["run", DEFAULT, "--slots", "2", "--out", str(tmp_path), "--no-plots", "--resumable"]
    assert main(args) == 0
    capsys.readouterr()
    folder = tmp_path / "default" / "ours"
    saved = folder / "controller_state.json"
    good = json.loads(saved.read_text())
    results = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != saved.name}

    def edited(change):
        d = json.loads(json.dumps(good))
        change(d)
        return json.dumps(d)

    cases = {"list": "[1, 2, 3]", "null": "null",
             "queue": edited(lambda d: d["queues"].__setitem__(0, -1.0)),
             "row": edited(lambda d: d["rows"][0].__setitem__("batch_time", 123.0)),
             "next slot": edited(lambda d: d.__setitem__("next_slot", 1)),
             "no extra": edited(lambda d: d.pop("extra"))}
    for what, text in cases.items():
        saved.write_text(text)
        assert main(args) == 2, what
        out, err = capsys.readouterr()
        assert err.startswith("dynpar: error: --resumable: controller state") and "Traceback" not in err, (what, err)
        assert "resuming" not in out and "complete" not in out, (what, out)
    saved.write_text(json.dumps(good))
    assert main(args + ["--V", "2"]) == 2
    out, err = capsys.readouterr()
    assert "belongs to another run" in err and "complete" not in out and "resuming" not in out, (out, err)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != saved.name} == results


def test_torch_commands_without_torch_name_themselves_in_one_line(tmp_path):
    """Without torch (here: a torch package on the path that cannot be imported), `dynpar
    profile` names itself (it had said "dynpar train needs torch") and `python -m solver.runtime
    --help` is one line, not a traceback (outside audit of a wheel installed without extras)."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    for argv, needle in ((["-m", "solver", "profile", "m:f", "--kind", "cpu"], "dynpar profile needs torch"),
                         (["-m", "solver", "train", DEFAULT, "--model", "m:f", "--steps", "1",
                           "--checkpoint-dir", str(tmp_path / "ck")], "dynpar train needs torch"),
                         (["-m", "solver.runtime", "--help"], "solver.runtime needs torch")):
        p = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        lines = [line for line in p.stderr.splitlines() if line]
        assert p.returncode != 0 and len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-c", "import solver.runtime"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)     # imported from Python: an ImportError that says what to install
    assert p.stderr.strip().splitlines()[-1].startswith("ImportError: solver.runtime needs torch"), p.stderr


def test_tp_degrees_on_an_instance_without_servers_is_noted(tmp_path, capsys):
    """--tp-degrees given for an instance with no [[servers]] was ignored unsaid (TP is searched
    within servers only); it is now a note. The default degrees say nothing."""
    for cmd in (["solve", DEFAULT, "--slot", "0"], ["run", DEFAULT, "--slots", "1", "--no-plots", "--out", str(tmp_path)]):
        assert main(cmd + ["--tp-degrees", "3"]) == 0
        err = capsys.readouterr().err
        assert "note: --tp-degrees 3: instance 'default' declares no [[servers]]" in err, err
        assert main(cmd) == 0
        assert "--tp-degrees" not in capsys.readouterr().err


def test_run_header_counts_in_words(tmp_path, capsys):
    """An outside audit: the run header said '1 devices' of a one-device instance."""
    (tmp_path / "one.toml").write_text('name = "one"\nnum_slots = 1\n[workload]\nmodel = "vgg16"\nbatch = 32\n'
                                       'micro_batch = 8\n[[devices]]\nname = "v"\nkind = "V100-SXM2-16GB"\n')
    assert main(["run", str(tmp_path / "one.toml"), "--out", str(tmp_path / "r"), "--no-plots"]) == 0
    assert "instance one: 1 device, 1 slot, workload" in capsys.readouterr().out
    assert main(["run", DEFAULT, "--slots", "2", "--out", str(tmp_path / "r"), "--no-plots"]) == 0
    assert "instance default: 6 devices, 2 slots, workload" in capsys.readouterr().out


def test_solve_prints_each_note_once(capsys):
    """An outside audit: `dynpar solve` printed the plan's notes twice (its own note lines, then
    Plan.describe's)."""
    assert main(["solve", str(REPO / "instances" / "pipedream_resnet50.toml"), "--slot", "0"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert any("are FLOP estimates" in n for n in notes)
    assert len(notes) == len(set(notes)), notes


def test_unattainable_budget_is_noted_without_the_tracker(tmp_path, capsys):
    """An outside audit: a money budget below every slot's cheapest plan was said by a tracked
    run only; `compare` and `run --budget-tolerance off` (and a baseline's run) said nothing. Each
    now prints the pre-flight line, compare once for all its policies (within its 1% criterion)."""
    path = default_copy(tmp_path, toml_edit=lambda s: s.replace("limit = 0.0017", "limit = 0.0010"))
    out = str(tmp_path / "r")
    assert main(["compare", str(path), "--slots", "2", "--policies", "even-dp,v-zero", "--out", out, "--no-plots"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "cannot be met" in line]
    assert len(notes) == 1 and notes[0].startswith("note: budget money cannot be met on average within 1%: "), notes
    for extra in (["--budget-tolerance", "off"], ["--policy", "even-dp"]):
        assert main(["run", str(path), "--slots", "2", "--out", out, "--no-plots", *extra]) == 0
        notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: budget money")]
        assert len(notes) == 1 and "cannot be met on average: " in notes[0] and "over its limit 0.001" in notes[0], extra
        policy = extra[1] if extra[0] == "--policy" else "ours"
        saved = json.loads((tmp_path / "r" / "default" / policy / "summary.json").read_text())["notes"]
        assert saved == [notes[0][len("note: "):]], extra


def test_budget_tolerance_zero_is_noted(tmp_path, capsys):
    """--budget-tolerance 0 under the default V rule gives V = 0 (the cheapest plans): a note."""
    assert main(["run", DEFAULT, "--slots", "1", "--out", str(tmp_path), "--no-plots", "--budget-tolerance", "0"]) == 0
    out = capsys.readouterr().out
    assert "note: budget tolerance 0: the default rule V = eps H / T_ref gives V = 0" in out


def test_skipped_slots_are_gaps_in_the_files_and_the_plot(tmp_path, capsys, monkeypatch):
    """An outside audit: slots with no plan had cost 0 in slots.csv and run.png (the plotted running
    average ended near 0.00104 USD where summary.json said 0.00156). Their time and cost cells are
    now empty, the plot leaves them out, and its running average ends at summary.json's."""
    import solver.cli.plots.run as run_plot
    figs = []
    monkeypatch.setattr(run_plot, "save", lambda fig, path: figs.append(fig) or Path(path))
    path = default_copy(tmp_path, unavailable_at_0=ALL_DEVICES)
    assert main(["run", str(path), "--slots", "3", "--out", str(tmp_path / "r")]) == 0
    folder = tmp_path / "r" / "default" / "ours"
    rows = list(csv.DictReader((folder / "slots.csv").open()))
    assert rows[0]["status"] == "infeasible"
    assert all(rows[0][c] == "" for c in ("batch_time_s", "migration_time_s", "cost_money_usd", "cost_energy_j"))
    summary = json.loads((folder / "summary.json").read_text())
    money = figs[0].axes[1]
    per_iteration, running = (line.get_ydata() for line in money.get_lines()[:2])
    assert pytest.approx(running[-1], rel=1e-12) == summary["avg_cost_money_usd"]
    assert all(v != v for v in (per_iteration[0], running[0]))    # NaN: a gap, not 0
    assert summary["avg_solve_time_s"] == pytest.approx(sum(float(r["solve_time_s"]) for r in rows[1:]) / 2)
