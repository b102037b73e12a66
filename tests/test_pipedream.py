"""PipeDream profile import: real graphs in ../shared/data and a hand-made branchy graph."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from solver.errors import InstanceError
from solver.io.pipedream import (DEFAULT_KIND, cut_bytes, import_profile, parse_profile, profile_to_csv,
                              topological_order)
from solver.io.workloads import read_workload_csv

GRAPHS = {"alexnet": 256, "resnet18": 256, "squeezenet1_0": 256, "vgg16": 128, "resnet50": 128, "gnmt": 64}
NODE = re.compile(r"^(node\d+) -- (.*) -- forward_compute_time=([\d.]+), backward_compute_time=([\d.]+), "
                  r"activation_size=(\[[^\]]*\]|[\d.]+), parameter_size=([\d.]+)")


def raw(path: Path) -> tuple[dict, list]:
    """An independent reading of a graph.txt: node -> (is_input, fwd, bwd, params); edges."""
    nodes, edges = {}, []
    for line in path.read_text().splitlines():
        if m := NODE.match(line):
            nodes[m.group(1)] = (m.group(2).startswith("Input"), float(m.group(3)), float(m.group(4)),
                                 float(m.group(6)))
        elif line[:1] in ("\t", " ") and line.strip():
            a, b = (x.strip() for x in line.split("--"))
            edges.append((a, b))
    return nodes, edges


@pytest.mark.parametrize("model", sorted(GRAPHS))
def test_real_graph(shared_data, model):
    path = shared_data / "profiles" / "pipedream" / model / "graph.txt"
    nodes, edges = raw(path)
    wl = import_profile(path)
    mb = GRAPHS[model]
    assert wl.batch == mb and wl.num_layers == len(nodes)
    fwd, bwd = wl.measured[DEFAULT_KIND]
    want_fwd = sum(f for inp, f, _, _ in nodes.values() if not inp) / 1000 / mb
    want_bwd = sum(b for _, _, b, _ in nodes.values()) / 1000 / mb
    assert sum(fwd) == pytest.approx(want_fwd, rel=1e-9) and sum(bwd) == pytest.approx(want_bwd, rel=1e-9)
    assert wl.param_bytes.sum() == pytest.approx(sum(p for *_, p in nodes.values()), rel=1e-12)
    order = topological_order(parse_profile(path))
    pos = {n: i for i, n in enumerate(order)}
    assert len(pos) == len(nodes) and all(pos[a] < pos[b] for a, b in edges)
    assert (wl.out_bytes >= 0).all() and (wl.stash_bytes > 0).any()
    assert wl.fwd_flops.sum() > 0 and wl.micro_batch >= 1 and wl.batch % wl.micro_batch == 0


def test_order_is_deterministic(shared_data):
    path = shared_data / "profiles" / "pipedream" / "gnmt" / "graph.txt"
    assert topological_order(parse_profile(path)) == topological_order(parse_profile(path))


BRANCHY = """\
node1 -- Input -- forward_compute_time=99.0, backward_compute_time=0.000, activation_size=1200.0, parameter_size=0.000
node4 -- Add -- forward_compute_time=1.0, backward_compute_time=2.0, activation_size=40.0, parameter_size=0.000
node2 -- Conv -- forward_compute_time=4.0, backward_compute_time=8.0, activation_size=[100.0; 20.0], parameter_size=16.0
node3 -- Conv -- forward_compute_time=2.0, backward_compute_time=4.0, activation_size=300.0, parameter_size=8.0
node5 -- Linear -- forward_compute_time=1.0, backward_compute_time=1.0, activation_size=4.0, parameter_size=40.0 -- stage_id=1
\tnode1 -- node2
  node2 -- node3
\tnode2 -- node4
  node3 -- node4
\tnode1 -- node5
\tnode4 -- node5
"""


def test_branchy_graph_cut_bytes(tmp_path):
    path = tmp_path / "g" / "graph.txt"
    path.parent.mkdir()
    path.write_text(BRANCHY)
    graph = parse_profile(path)
    order = topological_order(graph)
    assert order == ["node1", "node2", "node3", "node4", "node5"]
    assert graph.nodes["node2"].activation_bytes == 120.0 and graph.nodes["node1"].fwd_ms == 0.0
    # after node1: node1 (-> node2, node5); after node2: node1, node2 (-> node3, node4);
    # after node3: node1, node2 (-> node4), node3; after node4: node1, node4 (-> node5)
    assert cut_bytes(graph, order) == [1200.0, 1320.0, 1620.0, 1240.0, 4.0]
    wl = import_profile(path, minibatch=4, kind="T4", efficiency=0.5)
    assert wl.batch == 4 and wl.input_bytes == 300.0
    assert list(wl.out_bytes) == [300.0, 330.0, 405.0, 310.0, 1.0]
    # each node keeps its inputs (its predecessors' outputs), every tensor once per consumer
    assert list(wl.stash_bytes) == [0.0, 1200 / 4, 120 / 4, (120 + 300) / 4, (1200 + 40) / 4]
    fwd, bwd = wl.measured["T4"]
    assert fwd == (0.0, 1e-3, 0.5e-3, 0.25e-3, 0.25e-3) and bwd[1] == 2e-3
    assert wl.fwd_flops[1] == pytest.approx(1e-3 * 8.14e12 * 0.5)
    assert list(wl.param_bytes) == [0.0, 16.0, 8.0, 0.0, 40.0]


def test_profile_csv_round_trip(tmp_path):
    path = tmp_path / "g" / "graph.txt"
    path.parent.mkdir()
    path.write_text(BRANCHY)
    out = profile_to_csv(path, tmp_path / "g.csv", minibatch=4)
    wl = import_profile(path, minibatch=4)
    back = read_workload_csv(out, wl.batch, wl.micro_batch, name=wl.name)
    assert back.layers == wl.layers and back.measured == wl.measured and back.input_bytes == wl.input_bytes


@pytest.mark.parametrize("text, expected", [
    ("node1 -- X -- forward_compute_time=abc, backward_compute_time=1, activation_size=1, parameter_size=1\n",
     "forward_compute_time"),
    ("garbage line\n", "line 1"),
    (("node1 -- X -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n"
      "node2 -- Conv2d(3, 64, kernel_size=(3, 3)) -- forward_compute_time=1, activation_size=1, parameter_size=1\n"),
     (r"graph.txt: line 2: node 'node2': missing field 'backward_compute_time'; expected 'nodeN -- <description> -- "
      r"forward_compute_time=F, backward_compute_time=B, activation_size=A, parameter_size=P\[ -- stage_id=S\]'$")),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=1\n",
     "line 1: node 'node1': missing fields 'activation_size', 'parameter_size'"),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=, activation_size=1, parameter_size=1\n",
     "line 1: node 'node1': field 'backward_compute_time' without a value"),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=x\n",
     r"line 1: node 'node1': parameter_size: expected a number or a list \[a; b\], got 'x'"),
    ("node1 -- node2\n", "line 1: edge 'node1 -- node2': expected an edge line indented"),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=1, activation_size=-5.0, parameter_size=1\n",
     r"graph.txt: line 1: node 'node1': activation_size: expected finite bytes >= 0, got '-5.0'$"),
    ("node1 -- X -- forward_compute_time=nan, backward_compute_time=1, activation_size=1, parameter_size=1\n",
     r"graph.txt: line 1: node 'node1': forward_compute_time: expected finite ms >= 0, got 'nan'$"),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=inf, activation_size=1, parameter_size=1\n",
     "node 'node1': backward_compute_time: expected finite ms >= 0"),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=1, activation_size=[4; -8], parameter_size=1\n",
     r"node 'node1': activation_size: expected finite bytes >= 0 \(each element of the list\), got '\[4; -8\]'"),
    ("node1 -- X -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n"
     "\tnode1 -- node9\n", "node9"),
])
def test_bad_profile(tmp_path, text, expected):
    path = tmp_path / "graph.txt"
    path.write_text(text)
    with pytest.raises(InstanceError, match=expected):
        import_profile(path, minibatch=1)


def test_cycle_and_unknown_minibatch(tmp_path):
    path = tmp_path / "mystery" / "graph.txt"
    path.parent.mkdir()
    path.write_text("node1 -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n"
                    "node2 -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1\n"
                    "\tnode1 -- node2\n\tnode2 -- node1\n")
    with pytest.raises(InstanceError, match="minibatch"):
        import_profile(path)
    with pytest.raises(InstanceError, match="cycle"):
        import_profile(path, minibatch=2)


def test_chain_counts_each_tensor_once(shared_data):
    """VGG-16 is nearly a chain: the whole model's stash is every node's output once per consumer
    (the last node's output has none), not also once more for the node itself."""
    path = shared_data / "profiles" / "pipedream" / "vgg16" / "graph.txt"
    graph = parse_profile(path)
    wl = import_profile(path)
    consumers = {n: sum(a == n for a, _ in graph.edges) for n in graph.nodes}
    assert sum(consumers.values()) <= len(graph.nodes)      # at most one branch
    outputs = sum(graph.nodes[n].activation_bytes * c for n, c in consumers.items()) / wl.batch
    assert wl.stash_bytes.sum() == pytest.approx(outputs, rel=1e-12)
    old = outputs + sum(graph.nodes[n].activation_bytes for n in graph.nodes) / wl.batch
    assert old / wl.stash_bytes.sum() > 1.9                  # the old double count


def test_supplied_saved_bytes_and_notes(tmp_path):
    path = tmp_path / "g" / "graph.txt"
    path.parent.mkdir()
    path.write_text(BRANCHY)
    wl = import_profile(path, minibatch=4, saved_bytes=[0, 10, 20, 30, 40])
    assert list(wl.stash_bytes) == [0.0, 10.0, 20.0, 30.0, 40.0]
    with pytest.raises(InstanceError, match="saved_bytes"):
        import_profile(path, minibatch=4, saved_bytes=[1.0, 2.0])
    out = profile_to_csv(path, tmp_path / "g.csv", minibatch=4)
    assert "cannot know what a node saves" in out.read_text()
    out = profile_to_csv(path, tmp_path / "h.csv", minibatch=4, saved_bytes=[0, 10, 20, 30, 40])
    assert "supplied by the user" in out.read_text()
