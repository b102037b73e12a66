"""Bad input found by an outside audit (session 31): each case gives one line naming the file,
field and value (never a traceback or a message that names neither), nothing half-written, and
no value dropped or clipped without a note."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from solver import load_instance, solve_slot
from solver.cli.commands import main
from solver.errors import InstanceError
from solver.io.hardware import load_hardware
from solver.io.importers import import_any
from solver.io.workloads import read_workload_csv
from solver.solve import SolveOptions

from test_cli import ALL_DEVICES, DEFAULT, default_copy
from test_importers import graph, metis_file, sailor_root, IMG224

VGG = Path(__file__).resolve().parent.parent / "solver" / "data" / "models" / "vgg16.csv"


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("dynpar: error:")]
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------- importers

@pytest.mark.parametrize("edit, expected", [
    (lambda layer: layer.pop("params_bytes"), r"layer 1: missing field 'params_bytes'"),
    (lambda layer: layer.update(act_mem_bytes="big"), r"layer 1: act_mem_bytes: expected a number of bytes, got 'big'"),
])
def test_sailor_llm_info_errors_name_the_file_layer_and_field(tmp_path, edit, expected):
    root = sailor_root(tmp_path)
    info = json.loads((root / "llm_info.json").read_text())
    edit(info["Toy"]["1"]["1"])
    (root / "llm_info.json").write_text(json.dumps(info))
    with pytest.raises(InstanceError, match=r"llm_info\.json: Toy tp 1: " + expected):
        import_any("sailor", root / "profiles" / "Toy", minibatch=2)


def test_sailor_llm_info_layer_shapes_and_encoding(tmp_path):
    root = sailor_root(tmp_path)
    info = json.loads((root / "llm_info.json").read_text())
    info["Toy"]["1"]["1"] = [1, 2]                              # a list where a layer's fields belong
    (root / "llm_info.json").write_text(json.dumps(info))
    with pytest.raises(InstanceError, match=r"layer 1: expected \{field: bytes\}, got list"):
        import_any("sailor", root / "profiles" / "Toy", minibatch=2)
    info["Toy"]["1"] = {"0": info["Toy"]["2"]["0"], "x": info["Toy"]["2"]["1"]}
    (root / "llm_info.json").write_text(json.dumps(info))
    with pytest.raises(InstanceError, match=r"layer keys: expected integers 0\.\.1, got 'x'"):
        import_any("sailor", root / "profiles" / "Toy", minibatch=2)
    (root / "llm_info.json").write_bytes(b'{"Toy": "caf\xe9"}')
    with pytest.raises(InstanceError, match=r"llm_info\.json: JSON file is not UTF-8 text: byte 0xe9 at offset 12"):
        import_any("sailor", root / "profiles" / "Toy", minibatch=2)


def test_metis_memory_of_the_wrong_shape_is_refused_and_a_falling_slope_noted(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    metis_file(bad, "A100", 1, 1, [3.0, 30.0, 6.0], None, act=[100, 200, 300])
    doc = json.loads((bad / "DeviceType.A100_tp1_bs1.json").read_text())
    for mem, expected in (([1, 2], r"execution_memory: expected an object"),
                          ({"layer_memory_total_mb": ["a", "b", "c"]}, r"layer_memory_total_mb: expected a list")):
        doc["execution_memory"] = mem
        (bad / "DeviceType.A100_tp1_bs1.json").write_text(json.dumps(doc))
        with pytest.raises(InstanceError, match=expected):
            import_any("metis", bad)
    metis_file(tmp_path, "A100", 1, 1, [3.0, 30.0, 6.0], [10, 20, 5], act=[100, 200, 300])
    metis_file(tmp_path, "A100", 1, 2, [6.0, 54.0, 9.0], [12, 19, 5])     # layer1 falls with the batch
    imp = import_any("metis", tmp_path)
    stash = [l.stash_bytes for l in imp.workload.layers]
    assert stash == pytest.approx([2 * 2**20, 200, 0])              # layer1: its out_bytes, not 0
    assert any("falls with the batch size at 1 layer(s) (layer1)" in n for n in imp.notes)


def test_pipedream_minibatch_given_against_the_graphs_is_noted(tmp_path):
    p = tmp_path / "net" / "graph.txt"
    p.parent.mkdir()
    p.write_text(graph(f"{8 * IMG224}.0"))
    assert not any("--minibatch" in n and "graph says" in n for n in import_any("pipedream", p).notes)
    assert any("--minibatch 7 used, where the graph says 8" in n for n in import_any("pipedream", p, minibatch=7).notes)
    assert not any("graph says" in n for n in import_any("pipedream", p, minibatch=8).notes)


# ---------------------------------------------------------------- output paths

def test_an_output_path_through_a_file_names_its_flag(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    p = tmp_path / "net" / "graph.txt"
    p.parent.mkdir()
    p.write_text(graph(f"{8 * IMG224}.0"))
    assert main(["import-profile", str(p), "--out", str(afile / "x.csv")]) == 2
    assert _error_line(capsys) == f"dynpar: error: --out: cannot write {afile / 'x.csv'}: {afile} is a file, not a folder"
    assert main(["solve", DEFAULT, "--slot", "0", "--plot", str(afile / "y" / "t.png")]) == 2
    assert "--plot: cannot write" in _error_line(capsys)
    assert main(["run", DEFAULT, "--slots", "1", "--out", str(afile), "--no-plots"]) == 2
    assert f"--out: cannot create folder {afile / 'default' / 'ours'}: {afile} is a file" in _error_line(capsys)


def test_run_refuses_a_folder_in_place_of_a_result_file_before_running(tmp_path, capsys):
    folder = tmp_path / "default" / "ours"
    (folder / "summary.json").mkdir(parents=True)
    assert main(["run", DEFAULT, "--slots", "1", "--out", str(tmp_path), "--no-plots"]) == 2
    assert "summary.json: a folder of that name is in the way" in _error_line(capsys)
    assert not (folder / "slots.csv").exists()


def test_compare_with_no_plan_in_any_slot_exits_1(tmp_path, capsys):
    path = default_copy(tmp_path, unavailable_at_0=ALL_DEVICES)
    with _no_warning():
        assert main(["compare", str(path), "--slots", "1", "--policies", "ours,even-dp,pipedream",
                     "--out", str(tmp_path / "o"), "--no-plots"]) == 1
    assert "no policy found a feasible plan in any of the 1 slot(s)" in _error_line(capsys)
    assert (tmp_path / "o" / "default" / "compare.csv").is_file()


class _no_warning:
    """Fail on any warning inside the block (the PipeDream baseline warned 'Mean of empty slice')."""

    def __enter__(self):
        import warnings
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


# ---------------------------------------------------------------- tables

def test_a_column_given_twice_is_refused(tmp_path):
    lines = VGG.read_text().splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith("name,"))
    lines[i] += ",param_bytes"
    lines[i + 1:] = [x + ",0" for x in lines[i + 1:]]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(InstanceError, match=r"column\(s\) 'param_bytes' given twice"):
        read_workload_csv(tmp_path / "t.csv", 8, 4)
    path = default_copy(tmp_path)
    trace = tmp_path / "default_devices.csv"
    rows = trace.read_text().splitlines()
    trace.write_text("\n".join([rows[0] + ",speed_factor"] + [r + ",0.001" for r in rows[1:]]) + "\n")
    with pytest.raises(InstanceError, match=r"default_devices\.csv: row 1: column 'speed_factor': column given twice"):
        load_instance(path)


def test_hardware_table_columns_twice_or_unknown_are_refused(tmp_path):
    src = Path(__file__).resolve().parent.parent / "solver" / "data" / "models" / "hardware.csv"
    rows = src.read_text().splitlines()
    for extra, expected in (("fp32_tflops", "given twice"), ("fp16_tflops", "unknown column")):
        (tmp_path / f"{extra}.csv").write_text("\n".join([rows[0] + "," + extra] + [r + ",1" for r in rows[1:]]))
        with pytest.raises(InstanceError, match=expected):
            load_hardware(tmp_path / f"{extra}.csv")


def test_layer_table_comment_look_alike_is_refused_and_unused_sizes_noted(tmp_path):
    text = VGG.read_text()
    (tmp_path / "typo.csv").write_text("# precison: bf16\n" + text)
    with pytest.raises(InstanceError, match=r"row 1: comment line '# precison:': expected '# precision:'"):
        read_workload_csv(tmp_path / "typo.csv", 8, 4)
    (tmp_path / "free.csv").write_text("# author: someone\n" + text)          # free text stays free
    assert read_workload_csv(tmp_path / "free.csv", 8, 4).notes == ()
    lines = text.splitlines()
    i = next(k for k, x in enumerate(lines) if x.startswith("name,"))
    lines[i] += ",fwd_s:T4@mbs5@tp1,bwd_s:T4@mbs5@tp1"
    lines[i + 1:] = [x + ",0.001,0.002" for x in lines[i + 1:]]
    (tmp_path / "mbs5.csv").write_text("\n".join(lines) + "\n")
    wl = read_workload_csv(tmp_path / "mbs5.csv", 192, 8)
    assert 5 not in wl.measured_by_micro_batch
    assert wl.notes == ("layer table mbs5.csv: the times at micro-batch size(s) 5 (@mbs columns) are not used: "
                        "they do not divide the batch 192",)
    assert read_workload_csv(tmp_path / "mbs5.csv", 200, 8).notes == ()


def test_read_workload_csv_checks_its_arguments():
    for kw, err, expected in ((dict(opt_factor=math.nan), ValueError, "opt_factor: must be > 0"),
                              (dict(opt_factor=-3.0), ValueError, "opt_factor: must be > 0"),
                              (dict(input_bytes=-5), ValueError, "input_bytes: must be >= 0"),
                              (dict(input_bytes=math.nan), ValueError, "input_bytes: must be >= 0")):
        with pytest.raises(err, match=expected):
            read_workload_csv(VGG, 8, 4, **kw)
    with pytest.raises(TypeError, match=r"batch: expected an integer number of samples, got '8' \(str\)"):
        read_workload_csv(VGG, "8", 4)
    import numpy as np
    assert read_workload_csv(VGG, np.int64(8), 4).batch == 8


# ---------------------------------------------------------------- instances

def test_instance_loader_refusals(tmp_path):
    with pytest.raises(TypeError, match="path: expected the path of an instance file"):
        load_instance(None)
    path = default_copy(tmp_path, toml_edit=lambda s: s + '\n[memory_reserve_gb]\n"A100-SXM4-40GB" = 5\n')
    with pytest.raises(InstanceError, match=r"memory_reserve_gb\.A100-SXM4-40GB: no device takes this reserve"):
        load_instance(path)
    nfd = "v100-e\u0301"
    path = default_copy(tmp_path, toml_edit=lambda s: s.replace('name = "t4-0"', f'name = "{nfd}"', 1)
                        .replace('name = "t4-1"', 'name = "v100-\u00e9"', 1))
    with pytest.raises(InstanceError, match="duplicate device name .the same characters as an earlier name"):
        load_instance(path)


def test_head_is_an_upper_bound_and_takes_integers():
    inst = load_instance(DEFAULT)
    assert inst.head(99).num_slots == inst.num_slots and inst.head(3).num_slots == 3
    with pytest.raises(TypeError, match="slots: expected an integer"):
        inst.head(2.5)


def test_unfit_tp_degrees_are_named_on_a_server_instance(tmp_path):
    """--tp-degrees 3 where every declared server holds 2 of a kind: said once, not dropped (the
    class search's path had said nothing); without [[servers]] no TP is on offer and nothing is
    said."""
    servers = "".join(f'\n[[servers]]\nname = "s{i}"\n' for i in range(3))
    path = default_copy(tmp_path, toml_edit=lambda s: s + servers)
    res = solve_slot(load_instance(path).state(0), options=SolveOptions(tp_degrees=(1, 3)))
    assert res.message.count("tp degree 3: no server holds that many available devices of one kind") == 1
    plain = solve_slot(load_instance(DEFAULT).state(0), options=SolveOptions(tp_degrees=(1, 3)))
    assert "tp degree" not in plain.message


def test_budget_names_whose_summary_keys_clash_are_refused(tmp_path):
    """Budgets named x and ok_x wrote one summary key, bound_ok_x, for both (an outside sweep of
    421 runs with three and four budgets found it; the promise itself held)."""
    from dataclasses import replace

    from solver.model import Budget
    path = default_copy(tmp_path, toml_edit=lambda s: s + '\n[[budgets]]\nname = "ok_money"\nkind = "money"\n'
                                                        'limit = 0.002\n')
    with pytest.raises(InstanceError, match=r"budgets\[2\]\.name: budget names 'money' and 'ok_money'"):
        load_instance(path)
    inst = load_instance(DEFAULT)
    with pytest.raises(ValueError, match="budget names 'energy' and 'ok_energy'"):
        replace(inst, budgets=inst.budgets + (Budget("ok_energy", "energy", 700.0),))
    with pytest.raises(ValueError, match="budget name 'money' given twice"):
        replace(inst, budgets=inst.budgets + (Budget("money", "money", 0.002),))
