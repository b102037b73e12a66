"""Profile importers (pipedream, dapple, sailor, metis) on small fixtures written from each
documented format, the real files in ../shared/data where present, the @mbs@tp columns of the
layer table, and `dynpar import-profile --format ...`."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from solver.cli.commands import main
from solver.errors import InstanceError
from solver.io.importers import import_any, parse_kinds, write_table
from solver.io.pipedream import import_profile
from solver.io.workloads import read_workload_csv

IMG224 = 3 * 224 * 224 * 4
IMG299 = 3 * 299 * 299 * 4


def graph(input_size: str, sep: str = "\t") -> str:
    """A three-node chain: Input -> conv -> fc, times in ms for the whole minibatch."""
    return (f"node1 -- Input -- forward_compute_time=5.0, backward_compute_time=0.0, activation_size={input_size}, "
            "parameter_size=0.0\n"
            "node2 -- Conv2d -- forward_compute_time=8.0, backward_compute_time=16.0, activation_size=4000.0, "
            "parameter_size=1000.0\n"
            "node3 -- Linear -- forward_compute_time=2.0, backward_compute_time=4.0, activation_size=40.0, "
            "parameter_size=400.0\n"
            f"{sep}node1 -- node2\n{sep}node2 -- node3\n")


# ---------------------------------------------------------------- pipedream

def test_pipedream_299_inputs_unknown_folder_named_from_the_folder(tmp_path):
    p = tmp_path / "inception_v3" / "graph.txt"
    p.parent.mkdir()
    p.write_text(graph(f"{4 * IMG299}.0"))
    imp = import_any("pipedream", p)
    wl = imp.workload
    assert imp.micro_batch == 4 and wl.name == "inception_v3"
    fw, bw = wl.measured["V100-SXM2-16GB"]
    assert fw == pytest.approx((0.0, 8e-3 / 4, 2e-3 / 4)) and bw == pytest.approx((0.0, 16e-3 / 4, 4e-3 / 4))
    assert [l.out_bytes for l in wl.layers] == pytest.approx([IMG299, 1000.0, 10.0])


def test_pipedream_list_valued_input_and_a_file_named_otherwise(tmp_path):
    p = tmp_path / "profiles" / "mynet.txt"
    p.parent.mkdir()
    p.write_text(graph(f"[{8 * IMG224}; 64]"))
    wl = import_any("pipedream", p).workload
    assert wl.name == "mynet"
    assert wl.measured["V100-SXM2-16GB"][0][1] == pytest.approx(8e-3 / 8)


def test_pipedream_without_image_input_says_what_to_pass(tmp_path, capsys):
    p = tmp_path / "unknown_model" / "graph.txt"
    p.parent.mkdir()
    p.write_text(graph("0.0"))
    with pytest.raises(InstanceError, match=r"pass minibatch= \(dynpar import-profile --minibatch N\)"):
        import_profile(p)
    assert main(["import-profile", str(p), "--out", str(tmp_path / "a.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--minibatch N" in err
    assert main(["import-profile", str(p), "--minibatch", "16", "--out", str(tmp_path / "a.csv")]) == 0
    wl = read_workload_csv(tmp_path / "a.csv", 16, 4)
    assert wl.measured["V100-SXM2-16GB"][0][1] == pytest.approx(8e-3 / 16)


def test_real_pipedream_graphs_import_through_the_command(shared_data, tmp_path):
    for model in ("alexnet", "vgg16", "resnet18", "resnet50", "squeezenet1_0", "gnmt"):
        out = tmp_path / f"{model}.csv"
        assert main(["import-profile", "--format", "pipedream",
                     str(shared_data / "profiles/pipedream" / model / "graph.txt"), "--out", str(out)]) == 0
        wl = read_workload_csv(out, 64, 8)
        assert wl.name == model and wl.num_layers > 5 and list(wl.measured) == ["V100-SXM2-16GB"]


# ---------------------------------------------------------------- dapple

def test_dapple_graph_batch_from_the_file_name(tmp_path):
    p = tmp_path / "toy-3-pbs-2.txt"
    p.write_text(graph(f"[{2 * IMG224}; 8008]", sep=" \t"))
    imp = import_any("dapple", p)
    assert imp.micro_batch == 2 and imp.workload.name == "toy-3-pbs-2"
    assert imp.workload.measured["V100-SXM2-16GB"][1][1] == pytest.approx(16e-3 / 2)
    assert any("pbs-2" in n for n in imp.notes)
    imp = import_any("dapple", p, minibatch=4, kind="T4")          # --minibatch wins over the name
    assert imp.micro_batch == 4 and list(imp.workload.measured) == ["T4"]


# ---------------------------------------------------------------- metis

def metis_file(folder: Path, gpu: str, tp: int, bs: int, compute: list[float], mem: list[float] | None,
               act: list[float] | None = None) -> None:
    params = {"total_parameters_bytes": 1300, "parameters_per_layer_bytes": [400, 800, 100]}
    if act is not None:
        params["activation_parameters_bytes"] = act
    doc = {"model": {"model_name": "GPT3", "num_layers": 3, "parameters": params},
           "execution_time": {"total_time_ms": sum(compute) + 5, "forward_backward_time_ms": sum(compute) + 1,
                              "batch_generator_time_ms": 0.5, "optimizer_time_ms": 3.0,
                              "layer_compute_total_ms": compute}}
    if mem is not None:
        doc["execution_memory"] = {"total_memory": 100, "layer_memory_total_mb": mem}
    (folder / f"DeviceType.{gpu}_tp{tp}_bs{bs}.json").write_text(json.dumps(doc))


def test_metis_fixture_by_hand(tmp_path):
    metis_file(tmp_path, "A100", 1, 1, [3.0, 30.0, 6.0], [10, 20, 5], act=[100, 200, 300])
    metis_file(tmp_path, "A100", 1, 2, [6.0, 54.0, 9.0], [12, 23, 5])
    metis_file(tmp_path, "A100", 2, 2, [4.0, 30.0, 6.0], [8, 12, 4])
    (tmp_path / "notes.json").write_text("{}")
    imp = import_any("metis", tmp_path)
    wl = imp.workload
    assert (imp.micro_batch, imp.tp, wl.name) == (1, 1, tmp_path.name)
    fw, bw = wl.measured["A100-SXM4-40GB"]
    assert fw == pytest.approx((1e-3, 10e-3, 2e-3)) and bw == pytest.approx((2e-3, 20e-3, 4e-3))
    assert imp.variants[("A100-SXM4-40GB", 2, 2)][0] == pytest.approx((4e-3 / 6, 30e-3 / 6, 6e-3 / 6))
    assert [l.param_bytes for l in wl.layers] == [400, 800, 100]
    assert [l.out_bytes for l in wl.layers] == [100, 200, 300]                  # act / bs of its file (bs 1)
    assert [l.stash_bytes for l in wl.layers] == pytest.approx([2 * 2**20, 3 * 2**20, 0])   # MiB per extra sample
    param2, out2, stash2 = imp.bytes_at[2]
    assert param2 == (200, 400, 50) and out2 == (100, 200, 300) and stash2 == out2   # one batch size at tp 2
    assert any("notes.json" in n for n in imp.notes) and any("stash_bytes at tp 2" in n for n in imp.notes)
    out = write_table(imp, tmp_path / "t.csv")
    back = read_workload_csv(out, 4, 2)              # u = 2: the @mbs2@tp1 column replaces the plain one
    assert back.measured["A100-SXM4-40GB"][0] == pytest.approx((1e-3, 9e-3, 1.5e-3))
    assert read_workload_csv(out, 4, 1).measured["A100-SXM4-40GB"][0] == pytest.approx(fw)


def test_metis_without_activations_says_what_to_pass(tmp_path, capsys):
    metis_file(tmp_path, "H100", 1, 1, [3.0, 30.0, 6.0], None)
    with pytest.raises(InstanceError, match=r"pass --activation-bytes B"):
        import_any("metis", tmp_path)
    out = tmp_path / "m.csv"
    assert main(["import-profile", "--format", "metis", str(tmp_path), "--activation-bytes", "64",
                 "--kind", "H100=H100-PCIe-80GB", "--out", str(out)]) == 0
    wl = read_workload_csv(out, 2, 1)
    assert list(wl.measured) == ["H100-PCIe-80GB"] and [l.out_bytes for l in wl.layers] == [64, 64, 64]
    assert "note: stash_bytes at tp 1" in capsys.readouterr().out


def test_kind_option_forms():
    assert parse_kinds("T4") == ("T4", {})
    assert parse_kinds("A100=A100-SXM4-80GB,V100=V100-PCIe-16GB") == \
        (None, {"A100": "A100-SXM4-80GB", "V100": "V100-PCIe-16GB"})
    with pytest.raises(InstanceError, match="--kind: expected KIND or GPU=KIND"):
        parse_kinds("A100=")
    with pytest.raises(InstanceError, match="give GPU=KIND"):
        import_any("metis", Path(__file__), kind="T4")


# ---------------------------------------------------------------- sailor

def sailor_root(tmp: Path) -> Path:
    info = {"Toy": {str(t): {str(i): {"params_bytes": 1000 * (i + 1) / t, "act_output_bytes": 64.0,
                                      "act_input_bytes": 32.0, "act_mem_bytes": 512.0 / t}
                             for i in range(3)} for t in (1, 2)}}
    (tmp / "llm_info.json").write_text(json.dumps(info))
    for gpu, layers in (("A100-40", 3), ("GH-96", 2)):
        d = tmp / "profiles" / "Toy" / gpu
        d.mkdir(parents=True)
        prof = {str(mbs): {str(t): {str(i): [0.01 * mbs / t, 0.02 * mbs / t, 0.005] for i in range(layers)}
                           for t in (1, 2, 4)} for mbs in (1, 2)}
        (d / "profile.json").write_text(json.dumps(prof))
    return tmp


def test_sailor_fixture_by_hand(tmp_path):
    root = sailor_root(tmp_path)
    imp = import_any("sailor", root / "profiles" / "Toy", minibatch=2)
    wl = imp.workload
    assert (imp.micro_batch, imp.tp, wl.name) == (2, 1, "Toy")
    assert wl.measured["A100-SXM4-40GB"][0] == pytest.approx((0.01,) * 3)        # 0.02 s per 2 samples
    assert imp.variants[("A100-SXM4-40GB", 1, 2)][1] == pytest.approx((0.01,) * 3)
    assert ("A100-SXM4-40GB", 1, 4) not in imp.variants                          # no bytes at tp 4
    assert [l.param_bytes for l in wl.layers] == [1000, 2000, 3000]
    assert [l.stash_bytes for l in wl.layers] == [512] * 3 and wl.input_bytes == 32
    assert imp.bytes_at[2] == ((500, 1000, 1500), (64.0,) * 3, (256.0,) * 3)
    assert any("GH-96" in n and "skipped" in n for n in imp.notes)
    assert any("tp 4 timed" in n for n in imp.notes)
    out = write_table(imp, tmp_path / "toy.csv")
    text = out.read_text()
    assert "fwd_s:A100-SXM4-40GB@mbs1@tp2" in text and "param_bytes@tp2" in text
    back = read_workload_csv(out, 8, 2)
    assert back.measured["A100-SXM4-40GB"][1] == pytest.approx((0.02,) * 3)
    with pytest.raises(InstanceError, match=r"--minibatch 3: no times at that micro-batch size"):
        import_any("sailor", root / "profiles" / "Toy", minibatch=3)


def test_sailor_one_gpu_file(tmp_path):
    root = sailor_root(tmp_path)
    imp = import_any("sailor", root / "profiles" / "Toy" / "A100-40" / "profile.json")
    assert imp.kinds == ["A100-SXM4-40GB"] and imp.micro_batch == 1
    assert not any("GH-96" in n for n in imp.notes)     # another GPU's skipped file is not this import's news
    # a GPU mapped to a kind the hardware table lacks: imported under that name, and said so
    shutil.copytree(root / "profiles" / "Toy" / "A100-40", root / "profiles" / "Toy" / "V100-16")
    imp = import_any("sailor", root / "profiles" / "Toy", kind="V100-16=MyGPU")
    assert "MyGPU" in imp.kinds
    assert any(n.startswith("kind MyGPU: not in the packaged hardware table") and 'like = "<a packaged kind>"' in n
               for n in imp.notes)
    assert not any("hardware table" in n for n in import_any("sailor", root / "profiles" / "Toy").notes)


def test_sailor_kind_outside_the_hardware_table_is_noted_with_its_declaration(tmp_path, capsys):
    """GH-96 (no row in models/hardware.csv) written as fwd_s:GH-96: the import says so and how to
    declare it; an instance of A100s alone then loads with that [[kinds]] entry, and without it
    is refused naming the column (the loader knows no kind GH-96, devices of it or not)."""
    from solver.io.instance import load_instance
    root = sailor_root(tmp_path)
    shutil.rmtree(root / "profiles" / "Toy" / "GH-96")
    shutil.copytree(root / "profiles" / "Toy" / "A100-40", root / "profiles" / "Toy" / "GH-96")
    out = tmp_path / "toy.csv"
    assert main(["import-profile", "--format", "sailor", str(root / "profiles" / "Toy"), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    note = next(line for line in (printed.out + printed.err).splitlines() if "kind GH-96: not in" in line)
    assert note.startswith("note: kind GH-96: not in the packaged hardware table (models/hardware.csv)")
    assert 'kind = "GH-96", like = "H100-SXM5-80GB", memory_gb = 96' in note and "'fwd_s:GH-96'" in note
    assert "# " + note in out.read_text()                     # and in the table itself
    assert not any("A100" in line and "not in the packaged" in line for line in printed.out.splitlines())
    body = ('name = "toy"\nnum_slots = 1\n[workload]\nmodel = "toy.csv"\nbatch = 4\nmicro_batch = 1\n'
            '[[devices]]\nname = "a0"\nkind = "A100-SXM4-40GB"\n')
    (tmp_path / "bare.toml").write_text(body)
    with pytest.raises(InstanceError, match="column 'fwd_s:GH-96' matches no device kind"):
        load_instance(tmp_path / "bare.toml")
    (tmp_path / "declared.toml").write_text(body + '[[kinds]]\nkind = "GH-96"\nlike = "H100-SXM5-80GB"\n'
                                                   'memory_gb = 96\n')
    assert "GH-96" in load_instance(tmp_path / "declared.toml").workload.measured


@pytest.mark.parametrize("model", ["GPT-Neo-2.7", "LLAMA-3-8"])
def test_real_sailor_profiles(shared_data, tmp_path, model):
    out = tmp_path / f"{model}.csv"
    assert main(["import-profile", "--format", "sailor", str(shared_data / "profiles/sailor/profiles" / model),
                 "--out", str(out)]) == 0
    wl = read_workload_csv(out, 8, 1)
    header = next(line for line in out.read_text().splitlines() if line.startswith("name,"))
    assert wl.num_layers == (34 if model == "GPT-Neo-2.7" else 35)
    if model == "LLAMA-3-8":
        assert "fwd_s:V100-SXM2-16GB@mbs1@tp4" in header and "V100-SXM2-16GB" not in wl.measured
        assert "param_bytes@tp4" in header
        assert '# note: kind GH-96: not in the packaged hardware table' in out.read_text()
    else:
        assert {"A100-SXM4-40GB", "V100-SXM2-16GB"} <= set(wl.measured) and "GH-96" not in header


# ---------------------------------------------------------------- the table's variant columns

def test_bad_variant_columns_fail_loudly(tmp_path):
    base = "name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes"
    for extra, msg in ((",fwd_s:T4@mbs0@tp1,bwd_s:T4@mbs0@tp1", "expected fwd_s:<kind>@mbs<b>@tp<t>"),
                       (",fwd_s:T4@mbs2@tp1", "has no matching bwd_s column"),
                       (",param_bytes@tpx", "param_bytes|out_bytes|stash_bytes@tp<t>")):
        p = tmp_path / "t.csv"
        cells = ",".join(["1"] * extra.count(","))
        p.write_text(f"{base}{extra}\nl0,1,2,3,4,5{',' + cells if cells else ''}\n")
        with pytest.raises(InstanceError, match=msg.replace("|", r"\|").replace("<", ".").replace(">", ".")):
            read_workload_csv(p, 2, 1)
    p.write_text(f"{base},fwd_s:T4@mbs1@tp1,bwd_s:T4@mbs1@tp1\nl0,1,2,3,4,5,-1,2\n")
    with pytest.raises(InstanceError, match=r"column 'fwd_s:T4@mbs1@tp1': must be finite and >= 0"):
        read_workload_csv(p, 2, 1)


def test_import_profile_refuses_to_overwrite(tmp_path):
    root = sailor_root(tmp_path)
    out = tmp_path / "toy.csv"
    out.write_text("keep")
    assert main(["import-profile", "--format", "sailor", str(root / "profiles" / "Toy"), "--out", str(out)]) == 2
    assert out.read_text() == "keep"


def test_tables_carry_micro_batch_sizes_and_precision(tmp_path):
    (tmp_path / "s").mkdir()
    root = sailor_root(tmp_path / "s")
    out = write_table(import_any("sailor", root / "profiles" / "Toy", precision="fp16"), tmp_path / "toy.csv")
    assert "# precision: fp16" in out.read_text()
    assert "# precision" not in write_table(import_any("sailor", root / "profiles" / "Toy"),
                                            tmp_path / "plain.csv").read_text()
    wl = read_workload_csv(out, 4, 1)
    assert wl.precision == "fp16" and wl.opt_factor == pytest.approx(8.0)      # (2 + 2 + 4 + 8) / 2
    assert wl.micro_batch_options() == (1, 2)
    assert wl.at_micro_batch(2).measured["A100-SXM4-40GB"][0] == pytest.approx((0.01,) * 3)
    assert read_workload_csv(out, 3, 1).micro_batch_options() == (1,)           # 2 does not divide 3
    toml = ('name = "t"\nnum_slots = 1\n[workload]\nmodel = "toy.csv"\nbatch = 4\nmicro_batch = 1\n{p}'
            '[[devices]]\nname = "a"\nkind = "A100-SXM4-40GB"\n')
    (tmp_path / "t.toml").write_text(toml.format(p=""))
    from solver.io.instance import load_instance
    assert load_instance(tmp_path / "t.toml").workload.precision == "fp16"
    (tmp_path / "t.toml").write_text(toml.format(p='precision = "bf16"\n'))
    with pytest.raises(InstanceError, match=r"workload.precision: the layer table is already fp16"):
        load_instance(tmp_path / "t.toml")
    bad = tmp_path / "bad.csv"
    bad.write_text(out.read_text().replace("# precision: fp16", "# precision: fp12"))
    with pytest.raises(InstanceError, match=r"'# precision:' line: expected one of bf16, fp16, fp32"):
        read_workload_csv(bad, 4, 1)


def test_optimizer_step_seconds_travel_in_opt_s_columns(tmp_path):
    from solver.io.instance import load_instance
    from solver.io.workloads import write_workload_csv
    root = sailor_root(tmp_path)
    out = write_table(import_any("sailor", root / "profiles" / "Toy"), tmp_path / "toy.csv")
    wl = read_workload_csv(out, 4, 1)
    assert wl.optimizer_seconds == {"A100-SXM4-40GB": (0.005,) * 3}
    again = read_workload_csv(write_workload_csv(wl, tmp_path / "again.csv"), 4, 1)
    assert again.optimizer_seconds == wl.optimizer_seconds
    toml = ('name = "t"\nnum_slots = 1\n[workload]\nmodel = "{m}"\nbatch = 4\nmicro_batch = 1\n'
            'optimizer_step = "measured"\n[[devices]]\nname = "a"\nkind = "A100-SXM4-40GB"\n')
    (tmp_path / "t.toml").write_text(toml.format(m="toy.csv"))
    assert load_instance(tmp_path / "t.toml").workload.optimizer_step == "measured"
    (tmp_path / "t.toml").write_text(toml.format(m="mlp"))
    with pytest.raises(InstanceError, match=r"measured needs opt_s:<kind> columns"):
        load_instance(tmp_path / "t.toml")
    (tmp_path / "bad.csv").write_text(out.read_text().replace("opt_s:A100-SXM4-40GB", "opt_s:V100"))
    (tmp_path / "t.toml").write_text(toml.format(m="bad.csv"))
    with pytest.raises(InstanceError, match=r"column 'opt_s:V100' matches no device kind \('V100' is an alias"):
        load_instance(tmp_path / "t.toml")


def test_bad_profiles_are_refused_naming_the_file(tmp_path, capsys):
    """Numbers no instance could load refuse the import with nothing written (no file, no folder):
    a NaN or negative node field names graph.txt's line, node and field; one out of the layer
    table's ranges says the table would not load; a zero tp / bs in a Metis name and a Sailor
    profile of the wrong shape name the file."""
    p = tmp_path / "g" / "graph.txt"
    p.parent.mkdir()
    out = tmp_path / "out" / "g.csv"
    p.write_text(graph("602112.0").replace("forward_compute_time=8.0", "forward_compute_time=nan"))
    assert main(["import-profile", str(p), "--minibatch", "8", "--out", str(out)]) == 2
    assert (f"{p}: line 2: node 'node2': forward_compute_time: expected finite ms >= 0, got 'nan'"
            in capsys.readouterr().err)
    p.write_text(graph("602112.0").replace("activation_size=4000.0", "activation_size=1e300"))
    assert main(["import-profile", str(p), "--minibatch", "8", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the imported layer table would not load (row" in err and "out_bytes" in err and "g.csv" not in err
    assert not out.parent.exists() and not list(tmp_path.rglob("*partial*"))
    m = tmp_path / "m"
    m.mkdir()
    metis_file(m, "A100", 0, 1, [3.0, 30.0, 6.0], None, act=[1, 2, 3])
    with pytest.raises(InstanceError, match="tp0_bs1.json: tp and bs in the name: expected integers >= 1"):
        import_any("metis", m)
    (tmp_path / "s").mkdir()
    root = sailor_root(tmp_path / "s")
    (root / "profiles" / "Toy" / "A100-40" / "profile.json").write_text(json.dumps({"1": [1, 2]}))
    with pytest.raises(InstanceError, match=r"A100-40/profile.json: not a Sailor profile"):
        import_any("sailor", root / "profiles" / "Toy")


def test_options_a_format_would_ignore_are_refused(tmp_path):
    """--activation-bytes outside Metis and a --kind GPU the profile does not have are errors,
    not silently ignored."""
    (tmp_path / "s").mkdir()
    root = sailor_root(tmp_path / "s")
    with pytest.raises(InstanceError, match="--activation-bytes: only Metis profiles"):
        import_any("sailor", root / "profiles" / "Toy", activation_bytes=5.0)
    with pytest.raises(InstanceError, match="--kind: V100-16: no such GPU"):
        import_any("sailor", root / "profiles" / "Toy", kind="V100-16=V100-SXM2-16GB")
    m = tmp_path / "m"
    m.mkdir()
    metis_file(m, "A100", 1, 1, [3.0, 30.0, 6.0], None, act=[1, 2, 3])
    with pytest.raises(InstanceError, match="--kind: H100: no such GPU .* its GPUs: A100"):
        import_any("metis", m, kind="H100=H100-PCIe-80GB")
