"""Instance files: every committed instance loads; every kind of bad file gives one clear InstanceError."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import solver
from solver.errors import InstanceError
from solver.io.instance import Instance, load_instance, save_instance

INSTANCES = sorted((Path(__file__).resolve().parents[1] / "instances").glob("*.toml"))

GOOD_TOML = """\
name = "tiny"
num_slots = 3

[workload]
model = "mlp"
batch = 16
micro_batch = 4

[network]
inter_server_gbps = 10.0

[[devices]]
name = "gpu0"
kind = "V100-SXM2-16GB"
server = "a"

[[devices]]
name = "gpu1"
kind = "T4"
server = "b"
efficiency = 0.4

[[links]]
a = "gpu0"
b = "gpu1"
gbps = 5.0

[[budgets]]
kind = "money"
limit = 0.01

[traces]
devices = "devs.csv"
links = "links.csv"
"""

GOOD_DEVICES = "slot,device,available,speed_factor,price_per_hour\n" + "".join(
    f"{t},{d},1,0.9,1.5\n" for t in range(3) for d in ("gpu0", "gpu1"))
GOOD_LINKS = "slot,a,b,gbps\n" + "".join(f"{t},gpu0,gpu1,{4 + t}\n" for t in range(3))


def write_case(tmp_path: Path, toml: str = GOOD_TOML, devices: str = GOOD_DEVICES, links: str = GOOD_LINKS) -> Path:
    (tmp_path / "devs.csv").write_text(devices)
    (tmp_path / "links.csv").write_text(links)
    p = tmp_path / "case.toml"
    p.write_text(toml)
    return p


@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: p.name)
def test_committed_instances_load_and_give_sane_states(path):
    inst = solver.load_instance(path)
    assert isinstance(inst, Instance) and inst.num_slots >= 1 and inst.n >= 1
    wl = inst.workload
    assert wl.batch % wl.micro_batch == 0
    for t in range(inst.num_slots):
        st = inst.state(t)
        assert st.available.shape == (inst.n,) and st.available.dtype == bool
        assert np.all(np.isfinite(st.speed)) and np.all(st.speed > 0)
        assert np.all(st.price >= 0)
        off = ~np.eye(inst.n, dtype=bool)
        assert np.all(st.bandwidth[off] > 0) and np.all(np.isfinite(st.bandwidth[off]))
        assert np.allclose(st.bandwidth, st.bandwidth.T) and np.all(st.latency >= 0)
        assert st.available.any()
    with pytest.raises(IndexError):
        inst.state(inst.num_slots)


def test_default_instance_has_changing_state():
    inst = load_instance(Path(__file__).resolve().parents[1] / "instances" / "default.toml")
    assert inst.n == 6 and len({d.kind for d in inst.devices}) == 3 and inst.num_slots == 20
    assert not inst.available.all()
    assert inst.price.std(axis=0).max() > 0 and inst.speed_factor.min() < 1
    assert [b.kind for b in inst.budgets] == ["money", "energy"]


def test_good_tiny_instance_values(tmp_path):
    inst = load_instance(write_case(tmp_path))
    assert inst.name == "tiny" and inst.workload.name == "mlp" and inst.workload.batch == 16
    assert inst.efficiency.tolist() == [0.5, 0.4]
    assert inst.devices[1].kind == "T4" and inst.devices[0].peak_flops == pytest.approx(15.67e12)
    assert inst.price[0, 0] == pytest.approx(1.5 / 3600)
    assert inst.bandwidth[2, 0, 1] == pytest.approx(6e9 / 8)
    st = inst.state(0)
    assert st.speed[1] == pytest.approx(8.14e12 * 0.4 * 0.9)


def test_missing_traces_mean_constant(tmp_path):
    toml = GOOD_TOML.split("[traces]")[0]
    inst = load_instance(write_case(tmp_path, toml))
    assert inst.available.all() and np.all(inst.speed_factor == 1.0)
    assert np.allclose(inst.price, inst.price[0]) and inst.bandwidth.shape == (3, 2, 2)
    assert inst.bandwidth[0, 0, 1] == pytest.approx(5e9 / 8)


def sub(old: str, new: str, text: str = GOOD_TOML) -> str:
    assert old in text
    return text.replace(old, new, 1)


BAD = {
    # id: (toml, devices csv, links csv, substrings the message must contain)
    "toml_syntax": (sub('name = "tiny"', 'name = "tiny'), None, None, ["TOML syntax error"]),
    "missing_batch": (sub("batch = 16\n", ""), None, None, ["workload.batch", "missing"]),
    "missing_devices": (GOOD_TOML.split("[[devices]]")[0], None, None, ["devices", "missing"]),
    "zero_speed": (None, GOOD_DEVICES.replace("1,0.9,1.5", "1,0,1.5", 1), None, ["speed_factor", "'0'"]),
    "neg_efficiency": (sub("efficiency = 0.4", "efficiency = -0.4"), None, None, ["devices[1].efficiency", "-0.4"]),
    "efficiency_above_1": (sub("efficiency = 0.4", "efficiency = 1.5"), None, None, ["efficiency", "1.5"]),
    "zero_bandwidth": (sub("inter_server_gbps = 10.0", "inter_server_gbps = 0.0"), None, None,
                       ["network.inter_server_gbps", "0.0"]),
    "neg_link_gbps": (sub("gbps = 5.0", "gbps = -5.0"), None, None, ["links[0].gbps", "-5.0"]),
    "zero_trace_gbps": (None, None, GOOD_LINKS.replace("0,gpu0,gpu1,4", "0,gpu0,gpu1,0"), ["gbps", "'0'"]),
    "unknown_link_device": (sub('b = "gpu1"', 'b = "nosuch"'), None, None, ["links[0].b", "nosuch"]),
    "unknown_trace_device": (None, GOOD_DEVICES.replace("2,gpu1", "2,ghost"), None, ["device", "ghost"]),
    "unknown_link_trace_device": (None, None, GOOD_LINKS.replace("1,gpu0", "1,gpuX"), ["'a'", "gpuX"]),
    "unknown_kind": (sub('kind = "T4"', 'kind = "Z9000"'), None, None, ["devices[1].kind", "Z9000"]),
    "duplicate_device": (sub('name = "gpu1"', 'name = "gpu0"'), None, None, ["devices[1].name", "gpu0", "duplicate"]),
    "trace_missing_slot": (None, "\n".join(GOOD_DEVICES.splitlines()[:-1]) + "\n", None,
                           ["traces.devices", "slot 2", "gpu1"]),
    "link_trace_missing_slot": (None, None, "\n".join(GOOD_LINKS.splitlines()[:-1]) + "\n",
                                ["traces.links", "slot 2"]),
    "trace_slot_out_of_range": (None, GOOD_DEVICES + "7,gpu0,1,1,1\n", None, ["slot", "'7'"]),
    "non_numeric_cell": (None, GOOD_DEVICES.replace("1,0.9,1.5", "1,0.9,cheap", 1), None,
                         ["price_per_hour", "cheap", "row 2"]),
    "non_numeric_toml": (sub("limit = 0.01", 'limit = "lots"'), None, None, ["budgets[0].limit", "lots"]),
    "batch_zero": (sub("batch = 16", "batch = 0"), None, None, ["workload.batch", "0"]),
    "micro_batch_zero": (sub("micro_batch = 4", "micro_batch = 0"), None, None, ["workload.micro_batch", "0"]),
    "batch_not_multiple": (sub("batch = 16", "batch = 18"), None, None, ["batch 18", "micro_batch 4"]),
    "fractional_batch": (sub("batch = 16", "batch = 16.5"), None, None, ["workload.batch", "16.5"]),
    "unknown_budget_kind": (sub('kind = "money"', 'kind = "carbon"'), None, None, ["budgets[0].kind", "carbon"]),
    "negative_budget": (sub("limit = 0.01", "limit = -1.0"), None, None, ["budgets[0].limit", "-1.0"]),
    "device_energy_without_device": (sub('kind = "money"', 'kind = "device_energy"'), None, None,
                                     ["budgets[0].device", "missing"]),
    "unknown_model": (sub('model = "mlp"', 'model = "resnet9000"'), None, None, ["workload.model", "resnet9000"]),
    "availability_not_binary": (None, GOOD_DEVICES.replace("1,0.9,1.5", "2,0.9,1.5", 1), None, ["available", "'2'"]),
    "trace_file_missing": (sub('devices = "devs.csv"', 'devices = "nowhere.csv"'), None, None,
                           ["traces.devices", "nowhere.csv"]),
    "unknown_field": (sub("batch = 16", "batchsize = 16\nbatch = 16"), None, None, ["workload.batchsize", "16"]),
    "duplicate_trace_row": (None, GOOD_DEVICES + "0,gpu0,1,1,1\n", None, ["duplicate", "gpu0"]),
    "num_slots_zero": (sub("num_slots = 3", "num_slots = 0"), None, None, ["num_slots", "0"]),
    "negative_memory_override": (sub('kind = "T4"', 'kind = "T4"\nmemory_gb = -16'), None, None,
                                 ["devices[1].memory_gb", "-16"]),
    # names that would leave results/ (the name is a folder of the results)
    "name_dotdot": (sub('name = "tiny"', 'name = "../../x"'), None, None, ["name", "../../x", "path component"]),
    "name_slash": (sub('name = "tiny"', 'name = "a/b"'), None, None, ["name", "a/b"]),
    "name_absolute": (sub('name = "tiny"', 'name = "/etc"'), None, None, ["name", "/etc"]),
    "name_dot": (sub('name = "tiny"', 'name = ".."'), None, None, ["name", ".."]),
    # absurd magnitudes: outside the documented physical ranges of solver.io.ranges
    "price_1e300": (sub('kind = "T4"', 'kind = "T4"\nprice_per_hour = 1e300'), None, None,
                    ["devices[1].price_per_hour", "1e+300", "USD per hour"]),
    "trace_price_1e300": (None, GOOD_DEVICES.replace("1,0.9,1.5", "1,0.9,1e300", 1), None,
                          ["price_per_hour", "1e300", "USD per hour"]),
    "memory_1e9_gb": (sub('kind = "T4"', 'kind = "T4"\nmemory_gb = 1e9'), None, None,
                      ["devices[1].memory_gb", "1000000000.0", "GB"]),
    "tflops_1e9": (sub('kind = "T4"', 'kind = "T4"\npeak_tflops = 1e9'), None, None,
                   ["devices[1].peak_tflops", "TFLOP/s"]),
    "power_1e7_w": (sub('kind = "T4"', 'kind = "T4"\nbusy_w = 1e7'), None, None, ["devices[1].busy_w", " W"]),
    "bandwidth_1e9_gbps": (sub("gbps = 5.0", "gbps = 1e9"), None, None, ["links[0].gbps", "Gbit/s"]),
    "trace_bandwidth_1e9": (None, None, GOOD_LINKS.replace("0,gpu0,gpu1,4", "0,gpu0,gpu1,1e9"),
                            ["gbps", "1e9", "Gbit/s"]),
    "latency_1e9_ms": (sub("inter_server_gbps = 10.0", "inter_server_gbps = 10.0\ninter_server_latency_ms = 1e9"),
                       None, None, ["network.inter_server_latency_ms", "ms"]),
    "batch_1e9": (sub("batch = 16", "batch = 1000000000"), None, None, ["workload.batch", "1000000000", "samples"]),
    "speed_factor_1e6": (None, GOOD_DEVICES.replace("1,0.9,1.5", "1,1e6,1.5", 1), None, ["speed_factor", "1e6"]),
    "money_limit_1e300": (sub("limit = 0.01", "limit = 1e300"), None, None, ["budgets[0].limit", "USD per iteration"]),
    "num_slots_1e9": (sub("num_slots = 3", "num_slots = 1000000000"), None, None, ["num_slots", "1000000000"]),
    "duplicate_link": (sub("gbps = 5.0", 'gbps = 5.0\n\n[[links]]\na = "gpu1"\nb = "gpu0"\ngbps = 50.0'), None, None,
                       ["links[1]", "gpu1-gpu0", "already set by links[0]"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_instance_gives_one_clear_error(tmp_path, case):
    toml, devices, links, expected = BAD[case]
    path = write_case(tmp_path, toml or GOOD_TOML, devices or GOOD_DEVICES, links or GOOD_LINKS)
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    msg = str(info.value)
    for s in expected:
        assert s in msg, f"{s!r} not in {msg!r}"
    assert info.value.__cause__ is None or isinstance(info.value.__cause__, InstanceError)


def test_name_defaults_to_a_safe_stem_and_rejects_an_unsafe_one(tmp_path):
    toml = GOOD_TOML.replace('name = "tiny"\n', "")
    write_case(tmp_path, toml)
    (tmp_path / "case.toml").rename(tmp_path / "my case.toml")
    with pytest.raises(InstanceError) as info:
        load_instance(tmp_path / "my case.toml")
    assert "from the file name" in str(info.value) and "my case" in str(info.value)
    (tmp_path / "my case.toml").rename(tmp_path / "my_case-2.toml")
    assert load_instance(tmp_path / "my_case-2.toml").name == "my_case-2"


@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: p.name)
def test_shipped_instances_lie_inside_the_documented_ranges(path):
    """Cross-check of the ranges against every shipped instance, on the loaded values."""
    from solver.io import ranges as R
    inst = load_instance(path)
    assert R.SLOTS.problem(inst.num_slots) is None and R.SAMPLES.problem(inst.workload.batch) is None
    for d in inst.devices:
        assert R.PEAK_TFLOPS.problem(d.peak_flops / 1e12) is None and R.MEMORY_GB.problem(d.memory_bytes / 1e9) is None
        assert R.POWER_W.problem(d.busy_power_w) is None and R.POWER_W.problem(d.idle_power_w) is None
    assert all(R.PRICE_PER_HOUR.problem(p) is None for p in (inst.price * 3600).ravel())
    off = ~np.eye(inst.n, dtype=bool)
    assert all(R.GBPS.problem(g) is None for g in (inst.bandwidth[:, off] * 8 / 1e9).ravel())
    assert all(R.LATENCY_MS.problem(x) is None for x in (inst.latency * 1000).ravel())
    assert all(R.BUDGET_LIMIT[b.kind].problem(b.limit) is None for b in inst.budgets)


def test_range_problem_text():
    from solver.io.ranges import PRICE_PER_HOUR, Range
    assert PRICE_PER_HOUR.problem(3.06) is None and PRICE_PER_HOUR.problem(0.0) is None
    assert PRICE_PER_HOUR.problem(1e300) == "must be >= 0 and <= 10000 USD per hour"
    assert Range(0, 1, lo_open=True).problem(0.0) == "must be > 0 and <= 1"
    assert Range(0, 1).problem(float("nan")) is not None


@pytest.mark.parametrize("which", ["toml", "devices", "links", "model"])
def test_non_utf8_files_are_named(tmp_path, which):
    toml = GOOD_TOML if which != "model" else sub('model = "mlp"', 'model = "net.csv"')
    path = write_case(tmp_path, toml)
    target = {"toml": path, "devices": tmp_path / "devs.csv", "links": tmp_path / "links.csv",
              "model": tmp_path / "net.csv"}[which]
    if which == "model":
        target.write_bytes(b"# caf\xe9\nname,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\na,1,2,3,4,5\n")
    else:
        target.write_bytes(target.read_bytes().replace(b"\n", b"\n# \xff\xfe\n", 1))
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    assert str(target) in str(info.value) and "not UTF-8" in str(info.value)


def test_non_utf8_hardware_table_and_profile_are_named(tmp_path):
    from solver.io.hardware import load_hardware
    from solver.io.pipedream import parse_profile
    for path, read in ((tmp_path / "hw.csv", load_hardware), (tmp_path / "graph.txt", parse_profile)):
        path.write_bytes(b"kind,\xe9\n")
        with pytest.raises(InstanceError) as info:
            read(path)
        assert str(path) in str(info.value) and "not UTF-8" in str(info.value)


def test_absurd_layer_table_figure_is_rejected(tmp_path):
    (tmp_path / "net.csv").write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\n"
                                      "a,1e30,2,3,4,5\n")
    with pytest.raises(InstanceError) as info:
        load_instance(write_case(tmp_path, sub('model = "mlp"', 'model = "net.csv"')))
    assert all(s in str(info.value) for s in ("net.csv", "fwd_flops", "1e30", "FLOP per sample"))


def test_packaged_data_is_the_only_copy():
    """The layer tables, the hardware table and the default instance live in solver/data; the
    checkout's models/ and instances/ hold links to those files, not copies."""
    from solver.io.data import default_instance, models_dir, packaged_models
    repo = Path(__file__).resolve().parents[1]
    assert models_dir() == repo / "solver" / "data" / "models"
    assert set(packaged_models()) >= {"vgg16", "resnet50", "bert_base", "gpt2_small", "mlp"}
    packaged = [*models_dir().glob("*.csv"), *default_instance().parent.iterdir()]
    for f in packaged:
        if f.suffix not in (".csv", ".toml"):
            continue
        top = repo / ("models" if f.parent.name == "models" else "instances") / f.name
        assert top.is_symlink() and top.resolve() == f.resolve(), top


def test_packaged_model_name_from_any_folder(tmp_path):
    """`model = "vgg16"` in a user's instance outside the checkout names the packaged table."""
    path = write_case(tmp_path, sub('model = "mlp"', 'model = "vgg16"'))
    assert load_instance(path).workload.num_layers == 16
    with pytest.raises(InstanceError) as info:
        load_instance(write_case(tmp_path, sub('model = "mlp"', 'model = "vgg17"')))
    assert "vgg17" in str(info.value) and "packaged: " in str(info.value) and "vgg16" in str(info.value)



def test_a_table_beside_the_instance_hiding_a_packaged_one_is_noted(tmp_path):
    """A vgg16.csv beside the instance is read before the packaged table of that name (the
    documented order); `dynpar import-profile` writes <name>.csv to the current folder, so this
    can happen unawares: the instance's notes say which file was read (an outside audit)."""
    import shutil
    from solver.io.workloads import MODELS_DIR
    path = write_case(tmp_path, sub('model = "mlp"', 'model = "vgg16"'))
    assert not any("beside the instance" in n for n in load_instance(path).notes)
    shutil.copy(MODELS_DIR / "vgg16.csv", tmp_path / "vgg16.csv")
    notes = load_instance(path).notes
    assert any(f"workload.model 'vgg16': read from {tmp_path / 'vgg16.csv'}, beside the instance" in n
               for n in notes), notes


def test_missing_file(tmp_path):
    with pytest.raises(InstanceError, match="not found") as info:
        solver.load_instance(tmp_path / "absent.toml")
    assert "absent.toml" in str(info.value)


def test_bad_model_csv_names_file_row_column_value(tmp_path):
    (tmp_path / "net.csv").write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\n"
                                      "a,1,2,3,4,5\nb,1,two,3,4,5\n")
    path = write_case(tmp_path, sub('model = "mlp"', 'model = "net.csv"'))
    with pytest.raises(InstanceError) as info:
        load_instance(path)
    msg = str(info.value)
    assert all(s in msg for s in ("net.csv", "row 3", "bwd_flops", "two"))


def test_load_is_all_or_nothing(tmp_path):
    good = load_instance(write_case(tmp_path))
    bad_trace = GOOD_DEVICES + "2,gpu0,1,1,1\n"
    with pytest.raises(InstanceError):
        load_instance(write_case(tmp_path, devices=bad_trace))
    again = load_instance(write_case(tmp_path))
    assert np.array_equal(good.price, again.price) and good.devices == again.devices


def test_save_round_trip(tmp_path):
    inst = load_instance(INSTANCES[0] if INSTANCES else write_case(tmp_path))
    out = save_instance(inst, tmp_path / "copy" / "saved.toml")
    back = load_instance(out)
    assert back.devices == inst.devices and back.budgets == inst.budgets
    assert back.workload.layers == inst.workload.layers and back.workload.batch == inst.workload.batch
    for a in ("efficiency", "available", "speed_factor", "price", "bandwidth", "latency"):
        assert np.allclose(getattr(back, a), getattr(inst, a)), a


def test_default_instance_regenerates_identically(tmp_path):
    import importlib.util

    here = Path(__file__).resolve().parents[1] / "instances"
    spec = importlib.util.spec_from_file_location("make_default", here / "make_default.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(tmp_path)
    for name in ("default.toml", "default_devices.csv", "default_links.csv"):
        assert (tmp_path / name).read_text() == (here / name).read_text(), name


def test_train_table_sets_iterations_per_slot(tmp_path):
    assert load_instance(write_case(tmp_path)).iterations_per_slot is None
    inst = load_instance(write_case(tmp_path, GOOD_TOML + "\n[train]\niterations_per_slot = 25\n"))
    assert inst.iterations_per_slot == 25
    assert load_instance(save_instance(inst, tmp_path / "out" / "saved.toml")).iterations_per_slot == 25
    for bad, words in (("iterations_per_slot = 0", ("train.iterations_per_slot", ">= 1")),
                       ("iterations_per_slot = 2.5", ("train.iterations_per_slot", "integer")),
                       ("slot_seconds = 60", ("slot_seconds", "unknown field", "iterations_per_slot"))):
        with pytest.raises(InstanceError) as info:
            load_instance(write_case(tmp_path, GOOD_TOML + f"\n[train]\n{bad}\n"))
        assert all(w in str(info.value) for w in words), str(info.value)


# ---------------------------------------------------------------- outside audit: values the loader dropped unsaid

def zero_flop_table(tmp_path: Path, kinds: tuple[str, ...], variants: tuple[str, ...] = ()) -> None:
    """z.csv: three layers of 0 FLOPs with measured times of `kinds` (and `variants`, column
    suffixes such as "V100-SXM2-16GB@mbs2@tp1")."""
    cols = [f"{p}_s:{k}" for k in kinds + variants for p in ("fwd", "bwd")]
    rows = [f"l{i},0,0,1000,1000,1000" + ",1e-3,2e-3" * (len(kinds) + len(variants)) for i in range(3)]
    (tmp_path / "z.csv").write_text("\n".join(["name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes"
                                               + "".join("," + c for c in cols)] + rows) + "\n")


def test_a_kind_without_measured_times_or_flops_is_refused(tmp_path):
    """A 0-FLOP table measured on V100 only: T4's times would be 0 s per layer (a division by
    zero in the baselines); the load names the kind and the table."""
    toml = sub('model = "mlp"', 'model = "z.csv"')
    zero_flop_table(tmp_path, ("V100-SXM2-16GB",))
    with pytest.raises(InstanceError, match=r"workload\.model: kind T4 has neither measured times nor FLOPs in layer "
                                            r"table 'z' \(every layer's fwd_flops and bwd_flops is 0; measured: "
                                            r"V100-SXM2-16GB\)"):
        load_instance(write_case(tmp_path, toml))
    zero_flop_table(tmp_path, ("V100-SXM2-16GB", "T4"), ("V100-SXM2-16GB@mbs2@tp1",))
    with pytest.raises(InstanceError, match=r"kind T4 \(at micro-batch size\(s\) 2\) has neither"):
        load_instance(write_case(tmp_path, toml))
    zero_flop_table(tmp_path, ("V100-SXM2-16GB", "T4"))
    st = load_instance(write_case(tmp_path, toml)).state(0)
    assert (st.layer_fwd_seconds > 0).all() and (st.layer_bwd_seconds > 0).all()


def test_an_all_zero_variant_column_is_refused(tmp_path):
    zero_flop_table(tmp_path, ("V100-SXM2-16GB", "T4"), ("T4@mbs2@tp1",))
    (tmp_path / "z.csv").write_text((tmp_path / "z.csv").read_text().replace(",1e-3,2e-3\n", ",0,0\n"))
    with pytest.raises(InstanceError, match=r"columns 'fwd_s:T4@mbs2@tp1', 'bwd_s:T4@mbs2@tp1': every layer takes "
                                            r"0 s on T4 at micro-batch size 2, tensor-parallel degree 1"):
        load_instance(write_case(tmp_path, sub('model = "mlp"', 'model = "z.csv"')))


def test_static_figures_a_trace_replaces_are_noted(tmp_path):
    """The trace wins over a device's price_per_hour and a [[links]] gbps; the notes say so,
    and say nothing where the static figure is the default or equals the trace."""
    notes = load_instance(write_case(tmp_path, sub('kind = "T4"', 'kind = "T4"\nprice_per_hour = 100'))).notes
    assert "devices[1].price_per_hour of gpu1 (100 USD per hour) is replaced by the price_per_hour column of " \
           "traces.devices 'devs.csv' in every slot (a trace wins over the static figure)" in notes
    assert "links[0].gbps between gpu0 and gpu1 (5 Gbit/s) is replaced by traces.links 'links.csv' in every slot " \
           "(a trace wins over the static figure)" in notes
    same = write_case(tmp_path, sub('kind = "T4"', 'kind = "T4"\nprice_per_hour = 1.5'),
                      links=GOOD_LINKS.replace(",4\n", ",5\n").replace(",6\n", ",5\n"))
    assert not any("trace wins" in n for n in load_instance(same).notes)
    assert not any("trace wins" in n for n in load_instance(write_case(tmp_path, GOOD_TOML.split("[traces]")[0]
                                                                       + sub("price_per_hour = 100", "",
                                                                             "price_per_hour = 100"))).notes)


MEASURED = "name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,fwd_s:V100-SXM2-16GB,bwd_s:V100-SXM2-16GB\n" + \
    "".join(f"l{i},1e9,2e9,1000,1000,1000,1e-3,2e-3\n" for i in range(3))


def test_efficiency_and_peak_of_a_measured_kind_are_noted(tmp_path):
    """efficiency / peak_tflops do not set a measured kind's layer times: a note when the file
    sets them to other than the default, none for the default or for an estimated kind."""
    (tmp_path / "m.csv").write_text(MEASURED)
    toml = sub('model = "mlp"', 'model = "m.csv"')
    assert not any("not used" in n for n in load_instance(write_case(tmp_path, toml)).notes)
    toml = sub('server = "a"', 'server = "a"\nefficiency = 0.05\npeak_tflops = 1', toml)
    notes = load_instance(write_case(tmp_path, toml)).notes
    assert ("kind V100-SXM2-16GB: devices[0].efficiency of gpu0 (0.05), devices[0].peak_tflops of gpu0 (1) are not "
            "used for its layer times, which are measured (layer table 'm'); only the search's ranking of devices "
            "by speed sees them") in notes
    assert not any("gpu1" in n and "not used" in n for n in notes)      # T4: FLOP estimates, efficiency 0.4 used
    toml = sub('server = "a"', 'server = "a"\nefficiency = 0.5', sub('model = "mlp"', 'model = "m.csv"'))
    assert not any("not used" in n for n in load_instance(write_case(tmp_path, toml)).notes)


def test_unused_declared_kind_is_refused_like_an_unused_server(tmp_path):
    kinds = '\n[[kinds]]\nkind = "H800"\nlike = "H100-SXM5-80GB"\n'
    with pytest.raises(InstanceError, match=r"kinds\[0\]\.kind: no device has this kind and no column of layer table "
                                            r"'mlp' names it; device kinds: T4, V100-SXM2-16GB \(got 'H800'\)"):
        load_instance(write_case(tmp_path, GOOD_TOML + kinds))
    (tmp_path / "h.csv").write_text(MEASURED.replace("V100-SXM2-16GB", "H800"))       # a table's kind: declared
    load_instance(write_case(tmp_path, sub('model = "mlp"', 'model = "h.csv"') + kinds))


@pytest.mark.parametrize("kind, limit, words", [
    ("money", "1e-300", ["budgets[0].limit", "must be >= 1e-10 and <= 1e+06 USD per iteration", "1e-300"]),
    ("energy", "1e-9", ["budgets[0].limit", "must be >= 1e-06 and <= 1e+12 J per iteration"]),
])
def test_absurdly_small_budget_limit_is_refused(tmp_path, kind, limit, words):
    toml = sub('kind = "money"\nlimit = 0.01', f'kind = "{kind}"\nlimit = {limit}')
    with pytest.raises(InstanceError) as info:
        load_instance(write_case(tmp_path, toml))
    assert all(w in str(info.value) for w in words), str(info.value)
    load_instance(write_case(tmp_path, sub("limit = 0.01", "limit = 1e-7")))
