"""Cluster description: declared kinds, servers with shared NICs, bandwidth fits by message
size, egress prices, measured columns that match no kind, and notes on FLOP estimates."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import solver
from solver.cost import evaluate, stage_times, sync_time
from solver.errors import InstanceError
from solver.io.instance import load_instance, save_instance
from solver.model import Group, Plan
from solver.model.network import FIT_FLOOR, Network, fitted_bandwidth

INSTANCES = sorted((Path(__file__).resolve().parents[1] / "instances").glob("*.toml"))
GBIT = 1e9 / 8

LAYERS = """\
# input_bytes: 1000
name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes{extra}
l0,1e9,2e9,4e6,1e6,8e6{r0}
l1,1e9,2e9,2e6,1e6,4e6{r1}
l2,1e9,2e9,1e6,1e6,2e6{r2}
l3,1e9,2e9,1e6,1e6,1e6{r3}
"""

BASE = """\
name = "c"
num_slots = 1
[workload]
model = "layers.csv"
batch = 16
micro_batch = 4
"""


def write(tmp_path: Path, body: str, extra: str = "", rows: tuple[str, ...] = ("", "", "", "")) -> Path:
    (tmp_path / "layers.csv").write_text(LAYERS.format(extra=extra, r0=rows[0], r1=rows[1], r2=rows[2], r3=rows[3]))
    p = tmp_path / "c.toml"
    p.write_text(BASE + body)
    return p


def devices(spec: list[tuple[str, str, str]]) -> str:
    return "".join(f'[[devices]]\nname = "{n}"\nkind = "{k}"\nserver = "{s}"\n' for n, k, s in spec)


FOUR = devices([("a0", "V100", "A"), ("a1", "V100", "A"), ("b0", "V100", "B"), ("b1", "V100", "B")])
NET = "[network]\nintra_server_gbps = 100.0\ninter_server_gbps = 100.0\ninter_server_latency_ms = 0.0\n" \
      "intra_server_latency_ms = 0.0\n"


# ---------------------------------------------------------------- old instances

@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: p.stem)
def test_shipped_instances_have_no_network_and_keep_their_figures(path):
    inst = load_instance(path)
    assert inst.network is None
    state = inst.state(0)
    res = solver.solve_slot(state, V=1.0) if inst.n <= 16 else None
    if res is None or res.plan is None:
        return
    # the same state with a network that declares nothing binding: every figure equal to 1e-12
    trivial = Network(np.arange(inst.n), tuple(f"s{i}" for i in range(inst.n)), np.full(inst.n, np.inf))
    a, b = evaluate(res.plan, state), evaluate(res.plan, replace(state, network=trivial))
    assert abs(a.batch_time - b.batch_time) <= 1e-12 * a.batch_time
    assert np.allclose(a.costs, b.costs, rtol=1e-12, atol=0)


# ---------------------------------------------------------------- declared kinds

def test_declared_kind_loads_with_its_figures(tmp_path):
    body = """
[[kinds]]
kind = "H800"
peak_tflops = 51.0
memory_gb = 80
busy_w = 700
price_per_hour = 8.0
gpus_per_node = 2

[[kinds]]
kind = "A800"
like = "A100-SXM4-80GB"
price_per_hour = 3.5
""" + devices([("h0", "H800", "n0"), ("h1", "H800", "n0"), ("x0", "A800", "n1")])
    inst = load_instance(write(tmp_path, body))
    h, x = inst.devices[0], inst.devices[2]
    assert (h.kind, h.peak_flops, h.memory_bytes, h.busy_power_w, h.idle_power_w) == ("H800", 51e12, 80e9, 700, 210)
    assert h.price_per_s == pytest.approx(8.0 / 3600)
    assert x.kind == "A800" and x.peak_flops == pytest.approx(19.49e12) and x.memory_bytes == 80e9
    assert x.price_per_s == pytest.approx(3.5 / 3600)


def test_gpus_per_node_and_unknown_kinds_fail_loudly(tmp_path):
    kinds = '[[kinds]]\nkind = "H800"\nlike = "H100-SXM5-80GB"\ngpus_per_node = 1\n'
    with pytest.raises(InstanceError, match=r"devices\[1\]\.server: server holds more than gpus_per_node = 1"):
        load_instance(write(tmp_path, kinds + devices([("h0", "H800", "n0"), ("h1", "H800", "n0")])))
    with pytest.raises(InstanceError, match=r"devices\[0\]\.kind: unknown hardware kind; known: H800, A10,.*'GH-96'"):
        load_instance(write(tmp_path, kinds + devices([("g0", "GH-96", "n0")])))
    with pytest.raises(InstanceError, match=r"kinds\[0\]\.memory_gb: missing required field"):
        load_instance(write(tmp_path, '[[kinds]]\nkind = "X"\npeak_tflops = 1\n' + devices([("g", "X", "n")])))


# ---------------------------------------------------------------- measured columns

def test_measured_column_under_an_alias_is_an_error_naming_it(tmp_path):
    rows = tuple(",1e-3,2e-3" for _ in range(4))
    p = write(tmp_path, devices([("v", "V100-SXM2-16GB", "n")]), ",fwd_s:V100,bwd_s:V100", rows)
    with pytest.raises(InstanceError) as e:
        load_instance(p)
    msg = str(e.value)
    assert "column 'fwd_s:V100'" in msg and "alias of V100-SXM2-16GB" in msg and "T4" in msg
    p = write(tmp_path, devices([("v", "V100-SXM2-16GB", "n")]), ",fwd_s:Z9,bwd_s:Z9", rows)
    with pytest.raises(InstanceError, match=r"column 'fwd_s:Z9' matches no device kind \(declare the kind"):
        load_instance(p)


def test_a_declared_kind_may_carry_measured_columns(tmp_path):
    rows = tuple(",1e-3,2e-3" for _ in range(4))
    body = '[[kinds]]\nkind = "GH-96"\nlike = "H100-SXM5-80GB"\n' + devices([("g", "GH-96", "n"), ("t", "T4", "m")])
    inst = load_instance(write(tmp_path, body, ",fwd_s:GH-96,bwd_s:GH-96", rows))
    st = inst.state(0)
    assert st.layer_fwd_seconds[0].tolist() == [1e-3] * 4
    assert st.notes == ("kind T4: layer table 'layers' has no measured times for it at tp 1 and micro-batch 4 "
                        "(measured there: GH-96); its times at tp 1 and micro-batch 4 are FLOP estimates",)
    assert inst.notes == st.notes


def test_no_note_without_measurements_or_when_every_kind_is_measured(tmp_path):
    assert load_instance(write(tmp_path, devices([("t", "T4", "n")]))).notes == ()
    rows = tuple(",1e-3,2e-3" for _ in range(4))
    assert load_instance(write(tmp_path, devices([("t", "T4", "n")]), ",fwd_s:T4,bwd_s:T4", rows)).notes == ()


# ---------------------------------------------------------------- NIC sharing

def nic_instance(tmp_path, nic_gbps: float = 10.0):
    body = NET + FOUR + f'[[servers]]\nname = "A"\nnic_gbps = {nic_gbps}\n[[servers]]\nname = "B"\nnic_gbps = {nic_gbps}\n'
    return load_instance(write(tmp_path, body))


def test_two_gpus_of_a_server_sending_across_servers_get_half_the_nic_each(tmp_path):
    st = nic_instance(tmp_path).state(0)
    nic = 10 * GBIT
    a0, a1, b0, b1 = 0, 1, 2, 3
    # two groups (a0, a1) and (b0, b1), cut after layer 2: bucket 1 (layers 0-1) rings a0-b0,
    # bucket 2 (layers 2-3) rings a1-b1; a0 and a1 both send to server B at once
    t = sync_time(st, [((a0, a1), (2, 4)), ((b0, b1), (2, 4))])
    assert t == pytest.approx(max(12e6, 3e6) / (nic / 2))     # 2 (m-1)/m = 1 for m = 2
    # one device of each server in the rings: it has the whole NIC
    t1 = sync_time(st, [((a0,), (4,)), ((b0,), (4,))])
    assert t1 == pytest.approx(15e6 / nic)


def test_pipeline_boundaries_share_the_nic_by_hand(tmp_path):
    st = nic_instance(tmp_path).state(0)
    nic = 10 * GBIT
    # a0 -> b0 -> a1 -> b1, one layer each: a0 and a1 send out of A at once (nic / 2 each),
    # b0 and b1 receive into B (nic / 2); b0 alone sends out of B and a1 alone receives into A
    _, _, lam = stage_times(st, (0, 2, 1, 3), (1, 2, 3, 4))
    assert lam.tolist() == pytest.approx([4e6 / (nic / 2), 2e6 / nic, 1e6 / (nic / 2)])
    # inside one server nothing is shared
    _, _, lam = stage_times(st, (0, 1), (2, 4))
    assert lam.tolist() == pytest.approx([2e6 / (100 * GBIT)])


def test_nic_wider_than_the_links_changes_nothing(tmp_path):
    st = nic_instance(tmp_path, nic_gbps=1000.0).state(0)
    plain = replace(st, network=None)
    s = [((0, 1), (2, 4)), ((2, 3), (2, 4))]
    assert sync_time(st, s) == sync_time(plain, s)
    assert stage_times(st, (0, 2, 1, 3), (1, 2, 3, 4))[2].tolist() == stage_times(plain, (0, 2, 1, 3),
                                                                                  (1, 2, 3, 4))[2].tolist()


# ---------------------------------------------------------------- bandwidth by message size

def test_fit_form_by_hand_with_cap_and_floor():
    fit = np.array([0.5, 2.0, 10.0])
    cap = 100e9
    # 4 MB: x = 2, 0.5*4 + 2*2 + 10 = 16 GB/s
    assert fitted_bandwidth(fit, cap, 4e6) == pytest.approx(16e9)
    assert fitted_bandwidth(fit, 12e9, 4e6) == pytest.approx(12e9)                  # capped
    assert fitted_bandwidth(np.array([-1.0, 0, 1.0]), cap, 1e9) == pytest.approx(FIT_FLOOR * cap)   # floored
    assert fitted_bandwidth(np.full(3, np.nan), cap, 4e6) == cap


def test_fits_enter_transfer_times_at_the_micro_batch_size(tmp_path):
    body = NET.replace("[network]\n", "[network]\ninter_server_fit = [0.0, 1.0, 2.0]\n") + FOUR
    st = load_instance(write(tmp_path, body)).state(0)
    u = 4
    _, _, lam = stage_times(st, (0, 2), (1, 4))
    x = np.log2(4e6 * u / 1e6)                          # 16 MB: x = 4, 6 GB/s
    assert lam[0] == pytest.approx(4e6 / ((x + 2.0) * 1e9))
    _, _, lam = stage_times(st, (0, 1), (1, 4))         # intra-server pair: no fit
    assert lam[0] == pytest.approx(4e6 / (100 * GBIT))


def test_sailor_network_fit_on_the_real_file(shared_data):
    homo = json.loads((shared_data / "profiles/sailor/network/network_coeffs_all_homo.json").read_text())
    (a, b, c), cap = homo["inter"]["V100-16"]["1"]
    # 1 GB message: x = log2(1000) ~ 9.97
    x = np.log2(1e9 / 1e6)
    want = min((a * x * x + b * x + c) * 1e9, cap)
    assert fitted_bandwidth(np.array([a, b, c]), cap, 1e9) == pytest.approx(want)
    assert 1e8 < want <= cap


# ---------------------------------------------------------------- egress

def test_egress_enters_money_by_hand(tmp_path):
    body = NET + FOUR + """
[[servers]]
name = "A"
zone = "z1"
[[servers]]
name = "B"
zone = "z2"
[[egress]]
a = "z1"
b = "z2"
usd_per_gb = 0.02
[[budgets]]
kind = "money"
limit = 1.0
"""
    inst = load_instance(write(tmp_path, body))
    st = inst.state(0)
    plain = replace(st, network=None)
    price = 0.02 / 1e9
    # one pipeline a0 -> b0 cut after layer 1 (4e6 bytes/sample each way), 8 samples; a second
    # group b1 alone, 8 samples: the sync rings cross zones wherever a0 pairs with b1
    plan = Plan((Group((0, 2), (1, 4), 8), Group((3,), (4,), 8)))
    extra = evaluate(plan, st).costs[0] - evaluate(plan, plain).costs[0]
    pipeline = 2 * 4e6 * 8 * price
    # buckets: layer 0 on a0 (group 1) and b1 (group 2): crosses, 8e6 bytes each way;
    # layers 1-3 on b0 and b1: same zone, free
    sync = 2 * 8e6 * price          # 2 (m-1)/m = 1 per ring edge, two edges
    assert extra == pytest.approx(pipeline + sync, rel=1e-12)
    assert evaluate(plan, st).batch_time == evaluate(plan, plain).batch_time


def test_egress_zone_errors(tmp_path):
    body = NET + FOUR + ('[[servers]]\nname = "A"\nzone = "z1"\n[[servers]]\nname = "B"\n'
                         '[[egress]]\na = "z1"\nb = "z9"\nusd_per_gb = 0.01\n')
    with pytest.raises(InstanceError, match=r"egress\[0\]\.b: no server is in this zone; zones: z1"):
        load_instance(write(tmp_path, body))
    with pytest.raises(InstanceError, match=r"servers\[0\]\.name: no device names this server"):
        load_instance(write(tmp_path, NET + FOUR + '[[servers]]\nname = "Q"\n'))


def test_a_device_naming_a_server_the_table_lacks_is_an_error(tmp_path):
    """An outside audit's case: with [[servers]] given, a device whose server is not among them
    (a typo) had been given a server of its own with an unlimited NIC, unsaid."""
    with pytest.raises(InstanceError, match=r"devices\[2\]\.server: expected a server declared in \[\[servers\]\] "
                                            r"\(A\); declare it there \(nic_gbps may be left out\) \(got 'B'\)"):
        load_instance(write(tmp_path, NET + FOUR + '[[servers]]\nname = "A"\nnic_gbps = 25\n'))


# ---------------------------------------------------------------- round trip

def test_save_and_load_keep_kinds_servers_fits_and_egress(tmp_path):
    body = NET.replace("[network]\n", "[network]\ninter_server_fit = [0.0, 1.0, 2.0]\n") + \
        '[[kinds]]\nkind = "H800"\nlike = "H100-SXM5-80GB"\n' + \
        devices([("a0", "H800", "A"), ("a1", "V100", "A"), ("b0", "T4", "B")]) + """
[[servers]]
name = "A"
nic_gbps = 25
zone = "z1"
[[servers]]
name = "B"
zone = "z2"
[[egress]]
a = "z1"
b = "z2"
usd_per_gb = 0.01
"""
    inst = load_instance(write(tmp_path, body))
    back = load_instance(save_instance(inst, tmp_path / "out" / "saved.toml"))
    assert [d.kind for d in back.devices] == ["H800", "V100-SXM2-16GB", "T4"]
    n1, n2 = inst.network, back.network
    assert n2.server_names == n1.server_names and n2.zones == n1.zones
    assert np.array_equal(n2.nic, n1.nic)
    assert np.allclose(n2.fit, n1.fit, equal_nan=True) and np.allclose(n2.egress, n1.egress)


def test_plan_and_run_output_say_which_kinds_are_flop_estimates(capsys, tmp_path):
    from solver.cli.commands import main
    path = INSTANCES[0].parent / "pipedream_vgg16.toml"
    inst = load_instance(path)
    st = inst.state(0)
    k80 = next(i for i, d in enumerate(st.devices) if d.kind == "K80")
    v100 = next(i for i, d in enumerate(st.devices) if d.kind == "V100-SXM2-16GB")
    L = st.workload.num_layers
    text = Plan((Group((v100, k80), (L - 3, L), st.workload.batch),)).describe(st)
    assert "note: kind K80: layer table 'pipedream_vgg16_layers' has no measured times" in text
    assert "FLOP estimates" in text and "P100" not in text
    assert "note:" not in Plan((Group((v100,), (L,), st.workload.batch),)).describe(st)
    assert main(["run", str(path), "--slots", "1", "--out", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "note: kind K80" in out and "note: kind P100-PCIe-16GB" in out
    for n in inst.notes:    # an instance note is printed once, not again under the plan
        assert out.count(f"note: {n}") == 1, n


def test_solve_json_lists_the_plans_notes(tmp_path, capsys):
    from solver.cli.commands import main
    rows = tuple(",1e-3,2e-3" for _ in range(4))
    p = write(tmp_path, devices([("t", "T4", "n")]), ",fwd_s:V100-SXM2-16GB,bwd_s:V100-SXM2-16GB", rows)
    assert main(["solve", str(p), "--slot", "0", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == ["kind T4: layer table 'layers' has no measured times for it at tp 1 and micro-batch 4 "
                     "(measured there: V100-SXM2-16GB); its times at tp 1 and micro-batch 4 are FLOP estimates"]
    # times of T4 at tp 2 only: the note says where it is measured, not that it is measured nowhere
    p = write(tmp_path, devices([("t", "T4", "n")]), ",fwd_s:V100-SXM2-16GB,bwd_s:V100-SXM2-16GB,"
              "fwd_s:T4@mbs4@tp2,bwd_s:T4@mbs4@tp2,param_bytes@tp2,stash_bytes@tp2",
              [r + ",1e-3,2e-3,1e6,1e6" for r in rows])
    assert main(["solve", str(p), "--slot", "0", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes == ["kind T4: layer table 'layers' has no measured times for it at tp 1 and micro-batch 4 "
                     "(measured there: V100-SXM2-16GB; its times are measured at tp 2 (micro-batch 4)); its times "
                     "at tp 1 and micro-batch 4 are FLOP estimates"]


def test_declared_peak_at_the_workloads_precision(tmp_path):
    kinds = '[[kinds]]\nkind = "H800"\nlike = "H100-SXM5-80GB"\npeak_tflops_bf16 = 700\n'
    p = write(tmp_path, kinds + devices([("h", "H800", "n"), ("v", "V100-SXM2-16GB", "n")]))
    assert load_instance(p).devices[0].peak_flops == pytest.approx(66.91e12)        # fp32 workload
    p.write_text(p.read_text().replace("micro_batch = 4\n", 'micro_batch = 4\nprecision = "bf16"\n'))
    inst = load_instance(p)
    assert inst.devices[0].peak_flops == pytest.approx(700e12)
    assert inst.devices[1].peak_flops == pytest.approx(15.67e12)      # packaged kinds: FP32 peak


def test_cut_dp_boundaries_use_the_fit_like_stage_times(tmp_path):
    from solver.subproblems.cache import slot_cache
    body = NET.replace("[network]\n", "[network]\ninter_server_fit = [0.1, 1.0, 2.0]\n") + FOUR
    st = load_instance(write(tmp_path, body)).state(0)
    ga = slot_cache(st).group_arrays((0, 2))
    for c in (1, 2, 3):
        assert ga.lam[0, c] == pytest.approx(stage_times(st, (0, 2), (c, 4))[2][0], rel=1e-12)
    plain = slot_cache(replace(st, network=None)).group_arrays((0, 2))
    assert plain.lam[0, 1] == pytest.approx(4e6 / (100 * GBIT))
