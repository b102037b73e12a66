"""Layer tables: committed models load, match published parameter counts, regenerate identically."""
from __future__ import annotations


import pytest

from solver.errors import InstanceError
from solver.io.hardware import hardware_spec, load_hardware
from solver.model import Layer, Workload
from solver.io.workloads import (MODELS, MODELS_DIR, PUBLISHED_PARAMS, build_model, generate_all,
                              read_workload_csv, write_workload_csv)

TABLES = sorted(p for p in MODELS_DIR.glob("*.csv") if p.name != "hardware.csv")


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.name)
def test_every_table_loads(path):
    wl = read_workload_csv(path, 64, 8)
    assert wl.num_layers >= 1 and wl.batch == 64 and wl.micro_batch == 8
    assert (wl.fwd_flops >= 0).all() and (wl.param_bytes >= 0).all() and wl.total_flops > 0
    assert all(len(f) == wl.num_layers == len(b) for f, b in wl.measured.values())


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_counts_match_published(name):
    params = read_workload_csv(MODELS_DIR / f"{name}.csv", 8, 8).param_bytes.sum() / 4
    assert params == pytest.approx(PUBLISHED_PARAMS[name], rel=0.02)


def test_exact_known_parameter_counts():
    assert build_model("vgg16").param_bytes.sum() / 4 == 138_357_544
    assert build_model("resnet50").param_bytes.sum() / 4 == 25_557_032
    assert build_model("gpt2_small").param_bytes.sum() / 4 == 124_439_808
    assert build_model("mlp").param_bytes.sum() / 4 == 785 * 1024 + 2 * 1025 * 1024 + 1025 * 10


def test_known_flop_counts():
    assert build_model("vgg16").fwd_flops.sum() == pytest.approx(2 * 15.47e9, rel=0.01)
    assert build_model("resnet50").fwd_flops.sum() == pytest.approx(2 * 4.1e9, rel=0.02)
    wl = build_model("bert_base")
    assert (wl.bwd_flops == 2 * wl.fwd_flops).all() and wl.input_bytes == 128 * 8


def test_generation_is_reproducible(tmp_path):
    for path in generate_all(tmp_path):
        committed = MODELS_DIR / path.name
        assert committed.is_file(), f"{committed} missing: run python -m solver.io.workloads"
        assert path.read_text() == committed.read_text(), f"{committed} differs from a fresh generation"
    assert {p.stem for p in generate_all(tmp_path)} == set(MODELS)


def test_csv_round_trip_with_measured(tmp_path):
    layers = (Layer("a", 1e9, 2e9, 100.0, 200.0, 4000.0), Layer("b, with comma", 0.5, 1.0, 7.0, 9.0, 0.0))
    wl = Workload("w", layers, 16, 4, 3.0, 12.0, {"T4": ((0.1, 0.2), (0.3, 0.4)), "K80": ((1.0, 2.0), (3.0, 4.0))})
    back = read_workload_csv(write_workload_csv(wl, tmp_path / "w.csv"), 16, 4, 3.0)
    assert back == wl


BAD_ROWS = {
    "non_numeric": ("a,1,2,3,4,x5\n", ["row 3", "param_bytes", "x5"]),
    "negative": ("a,1,-2,3,4,5\n", ["row 3", "bwd_flops", "-2"]),
    "short_row": ("a,1,2\n", ["row 3", "3 cells"]),
    "empty_name": (",1,2,3,4,5\n", ["row 3", "name"]),
    "duplicate_name": ("ok,1,2,3,4,5\n", ["column 'name'", "'ok' in rows 2, 3"]),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_table_names_file_row_column_value(tmp_path, case):
    row, expected = BAD_ROWS[case]
    p = tmp_path / "bad.csv"
    p.write_text("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\nok,1,2,3,4,5\n" + row)
    with pytest.raises(InstanceError) as info:
        read_workload_csv(p, 8, 4)
    assert all(s in str(info.value) for s in ["bad.csv", *expected]), str(info.value)


def test_duplicate_layer_names_are_named_with_their_rows(tmp_path):
    p = tmp_path / "dup.csv"
    p.write_text("# input_bytes: 4\nname,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\n"
                 "a,1,2,3,4,5\nb,1,2,3,4,5\na,1,2,3,4,5\nc,1,2,3,4,5\nb,1,2,3,4,5\na,1,2,3,4,5\n")
    with pytest.raises(InstanceError) as info:
        read_workload_csv(p, 8, 4)
    assert str(info.value) == (f"{p}: column 'name': expected a different name for each layer, got 2 name(s) used "
                               "more than once: 'a' in rows 3, 5, 8; 'b' in rows 4, 7")


BAD_TABLES = [     # (table text, what the message must match)
    ("name,fwd_flops,out_bytes\nx,1,2\n", "bwd_flops"),
    ("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,fwd_s:T4\nx,1,2,3,4,5,1\n", "bwd_s:T4"),
    ("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\nx,0,0,3,4,5\ny,0,0,3,4,5\n", "every layer is 0 FLOPs"),
    ("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,fwd_s:T4,bwd_s:T4\nx,1,2,3,4,5,0,0\n",
     "'fwd_s:T4', 'bwd_s:T4': every layer takes 0 s on T4"),
    ("name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes,fwd_sec:T4\nx,1,2,3,4,5,100\n",
     "unknown column.*'fwd_sec:T4'"),
]


def test_bad_table_header_and_batch(tmp_path):
    p = tmp_path / "h.csv"
    for text, expected in BAD_TABLES:
        p.write_text(text)
        with pytest.raises(InstanceError, match=expected):
            read_workload_csv(p, 8, 4)
    with pytest.raises(InstanceError, match="batch 10.*micro_batch 4"):
        read_workload_csv(TABLES[0], 10, 4)
    with pytest.raises(InstanceError, match="cannot read"):
        read_workload_csv(tmp_path / "absent.csv", 8, 4)


def test_hardware_table():
    table = load_hardware()
    assert {"K80", "P100-PCIe-16GB", "V100-PCIe-16GB", "V100-SXM2-16GB", "T4", "A10G", "A100-SXM4-40GB",
            "A100-SXM4-80GB", "L4", "H100-SXM5-80GB", "RTX3090", "RTX4090", "Jetson-TX2"} <= set(table)
    k80 = table["K80"]
    assert (k80.peak_flops, k80.memory_bytes, k80.busy_w) == pytest.approx((4.07e12, 12e9, 150.0))
    for s in table.values():
        assert s.peak_flops > 0 and s.memory_bytes > 0 and 0 < s.idle_w <= s.busy_w and s.price_per_hour > 0
        assert s.idle_w == pytest.approx(0.3 * s.busy_w, rel=0.02)
        assert s.spec_source.startswith("http") and (s.price_estimated or s.price_source.startswith("http"))
    assert hardware_spec("V100").kind == "V100-SXM2-16GB"
    with pytest.raises(KeyError, match="Z9"):
        hardware_spec("Z9")


def test_bad_hardware_table(tmp_path):
    p = tmp_path / "hw.csv"
    p.write_text("kind,name,fp32_tflops,memory_gb,busy_w,idle_w,price_per_hour\nX,x,fast,1,1,1,1\n")
    with pytest.raises(InstanceError, match=r"row 2.*fp32_tflops.*fast"):
        load_hardware(p)
