"""Import PipeDream profile graphs (msr-fiddle/pipedream `graph.txt`) as a linear layer table.

File format: node lines `nodeN -- <description> -- forward_compute_time=F,
backward_compute_time=B, activation_size=A, parameter_size=P[ -- stage_id=S]` and edge lines,
indented by a tab or spaces, `nodeX -- nodeY` (edge X -> Y). F and B are milliseconds for the
whole profiled minibatch, A the output bytes for the whole minibatch (a list `[a; b]` is
summed), P parameter bytes. The forward time of `Input` nodes (data loading) is zeroed.

The DAG is linearised by Kahn's algorithm, the smallest node number first among the ready
nodes (deterministic). In the resulting table, per sample:
- fwd/bwd seconds = F/B / 1000 / minibatch, recorded as measured under the device `kind`;
- fwd/bwd FLOPs = those seconds * the kind's sustained FLOP/s (peak FP32 * `efficiency`),
  so devices of other kinds get a FLOP-based estimate;
- out_bytes after position k = bytes crossing a cut after k: the sum of A / minibatch over every
  node at or before k with a successor after k (for the last position: its own output);
- stash_bytes = the node's inputs (its predecessors' outputs, A / minibatch each): what a
  convolution, linear or activation layer keeps for its backward pass, and the tensor a stage
  receives. Each tensor is counted once per consumer (an earlier version also added the node's
  own output, counting every tensor of a chain twice). A graph profile records only the tensors
  that cross node boundaries, not what a node saves inside itself (a fused conv-bn-relu's
  intermediate outputs): `saved_bytes=` supplies measured or computed figures per layer instead,
  and the table's notes say which was used;
- param_bytes = P.
The profiled minibatch is read from the Input nodes: one of their tensors (an element of a list
`[a; b]`, or the whole) must be batch * 3*H*H*4 bytes for a batch >= 1 and an image side H in
IMAGE_SIDES (331: NASNet, 299: Inception, 224: ImageNet, 32: CIFAR; the largest side that
divides wins, since 224 = 7 x 32) and all such tensors must agree on the batch; else from the
known profiler settings per model folder (gnmt: 64); else it must be given (minibatch=,
`dynpar import-profile --minibatch N`). The workload is named after the file (its stem), or,
for PipeDream's fixed file name graph.txt, after its folder.
"""
from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import InstanceError
from ..model import Layer, Workload
from .hardware import hardware_spec
from .text import read_text
from .workloads import write_workload_csv

DEFAULT_KIND = "V100-SXM2-16GB"
IMAGE_BYTES = 3 * 224 * 224 * 4
IMAGE_SIDES = (331, 299, 224, 32)
KNOWN_MINIBATCH = {"alexnet": 256, "resnet18": 256, "squeezenet1_0": 256, "vgg16": 128, "resnet50": 128, "gnmt": 64}

_NODE = re.compile(r"^(node\d+) -- (.*) -- forward_compute_time=([^,]+), backward_compute_time=([^,]+), "
                   r"activation_size=(.+?), parameter_size=([^,\s]+)(?: -- stage_id=(\d+))?\s*$")
_EDGE = re.compile(r"^\s+(node\d+) -- (node\d+)\s*$")
_NODE_START = re.compile(r"^(node\d+) -- ")
FIELDS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")
"""The fields of a node line, in the order PipeDream writes them."""
_FIELDS_START = re.compile(r" -- (?=(?:" + "|".join(FIELDS) + r")=)")
NODE_FORM = ("nodeN -- <description> -- forward_compute_time=F, backward_compute_time=B, activation_size=A, "
             "parameter_size=P[ -- stage_id=S]")


@dataclass(frozen=True)
class ProfileNode:
    """One node of a profile graph; times in ms and bytes for the whole profiled minibatch
    (activation_parts: the elements of a list-valued activation_size, summed in activation_bytes)."""

    id: str
    description: str
    fwd_ms: float
    bwd_ms: float
    activation_bytes: float
    param_bytes: float
    activation_parts: tuple[float, ...] = ()


def _parts(text: str) -> tuple[float, ...]:
    """The elements of a list-valued field `[a; b]` (one element for a plain number); [] -> ()."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            return tuple(float(x) for x in text[1:-1].split(";") if x.strip())
        except ValueError:
            return ()
    try:
        return (float(text),)
    except ValueError:
        return ()


@dataclass(frozen=True)
class ProfileGraph:
    nodes: dict[str, ProfileNode]
    edges: tuple[tuple[str, str], ...]


FIELD_UNITS = {"forward_compute_time": "ms", "backward_compute_time": "ms", "activation_size": "bytes",
               "parameter_size": "bytes"}
"""The unit of each node field (for the whole profiled minibatch)."""


def _float(path: Path, lineno: int, nid: str, field: str, text: str) -> float:
    """A node field's value (a list [a; b] summed); InstanceError naming the file, line, node and
    field unless it, and each element of a list, is a finite number >= 0."""
    text = text.strip()
    where = f"{path}: line {lineno}: node {nid!r}: {field}"
    try:
        parts = ([float(x) for x in text[1:-1].split(";") if x.strip()] if text.startswith("[") and text.endswith("]")
                 else [float(text)])
    except ValueError:
        raise InstanceError(f"{where}: expected a number or a list [a; b], got {text!r}") from None
    if not all(math.isfinite(x) and x >= 0 for x in parts):
        raise InstanceError(f"{where}: expected finite {FIELD_UNITS[field]} >= 0"
                            f"{' (each element of the list)' if text.startswith('[') else ''}, got {text!r}")
    return float(sum(parts))


def _node_line_problem(rest: str) -> str:
    """What is wrong with the text after `nodeN -- ` of a node line that does not parse: the
    fields missing, without a value, unknown, or out of order."""
    m = _FIELDS_START.search(rest)
    fields = re.sub(r" -- stage_id=\S*\s*$", "", rest[m.end():]) if m else ""
    given: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in fields.split(","))):
        key, _, value = part.partition("=")
        given[key.strip()] = value.strip()
    missing = [f for f in FIELDS if f not in given]
    if missing:
        return f"missing field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}"
    empty = [f for f in FIELDS if not given[f]]
    if empty:
        return f"field{'s' if len(empty) > 1 else ''} {', '.join(map(repr, empty))} without a value"
    unknown = [k for k in given if k not in FIELDS]
    if unknown:
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
    return f"fields out of order (got {', '.join(given)})"


def parse_profile(path: str | Path) -> ProfileGraph:
    """Parse a graph.txt; Input nodes get zero forward time. InstanceError naming the file, line
    and node on a bad line (a missing field by name) or edge."""
    path = Path(path)
    text = read_text(path, "profile")
    nodes: dict[str, ProfileNode] = {}
    edges: list[tuple[str, str]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if m := _EDGE.match(line):
            edges.append((m.group(1), m.group(2)))
            continue
        m = _NODE.match(line)
        if m is None and _EDGE.match(f" {line}"):
            raise InstanceError(f"{path}: line {lineno}: edge {line.strip()!r}: expected an edge line indented by a "
                                "tab or spaces (a node line has fields after its description)")
        if m is None and (start := _NODE_START.match(line)):
            raise InstanceError(f"{path}: line {lineno}: node {start.group(1)!r}: "
                                f"{_node_line_problem(line[start.end():])}; expected {NODE_FORM!r}")
        if m is None:
            raise InstanceError(f"{path}: line {lineno}: neither a node nor an edge line: {line[:80]!r}")
        nid, desc = m.group(1), m.group(2).strip()
        if nid in nodes:
            raise InstanceError(f"{path}: line {lineno}: duplicate node {nid!r}")
        fwd = _float(path, lineno, nid, "forward_compute_time", m.group(3))
        if desc.startswith("Input"):
            fwd = 0.0
        nodes[nid] = ProfileNode(nid, desc, fwd, _float(path, lineno, nid, "backward_compute_time", m.group(4)),
                                 _float(path, lineno, nid, "activation_size", m.group(5)),
                                 _float(path, lineno, nid, "parameter_size", m.group(6)), _parts(m.group(5)))
    for a, b in edges:
        for x in (a, b):
            if x not in nodes:
                raise InstanceError(f"{path}: edge {a} -- {b}: unknown node {x!r}")
    if not nodes:
        raise InstanceError(f"{path}: no nodes")
    return ProfileGraph(nodes, tuple(dict.fromkeys(edges)))


def _number(nid: str) -> int:
    return int(nid[len("node"):])


def topological_order(graph: ProfileGraph) -> list[str]:
    """Kahn's algorithm, smallest node number first among ready nodes; ValueError on a cycle."""
    indeg = {n: 0 for n in graph.nodes}
    succ: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for a, b in graph.edges:
        succ[a].append(b)
        indeg[b] += 1
    ready = [(_number(n), n) for n, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for s in succ[n]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, (_number(s), s))
    if len(order) != len(graph.nodes):
        raise ValueError("profile graph has a cycle")
    return order


def cut_bytes(graph: ProfileGraph, order: list[str]) -> list[float]:
    """Bytes (whole minibatch) crossing a cut after each position of `order`; the last
    entry is the last node's own output."""
    pos = {n: i for i, n in enumerate(order)}
    last_use = {n: pos[n] for n in order}
    for a, b in graph.edges:
        last_use[a] = max(last_use[a], pos[b])
    diff = [0.0] * (len(order) + 1)
    for n in order:
        if last_use[n] > pos[n]:
            diff[pos[n]] += graph.nodes[n].activation_bytes
            diff[last_use[n]] -= graph.nodes[n].activation_bytes
    out, running = [], 0.0
    for i in range(len(order)):
        running += diff[i]
        out.append(running)
    out[-1] = graph.nodes[order[-1]].activation_bytes
    return out


def profiled_minibatch(graph: ProfileGraph, path: Path) -> int:
    """Minibatch of the profile: from an image Input node, else the known setting per model
    (module doc); an error says what to pass when neither decides it."""
    found: dict[int, str] = {}
    for node in graph.nodes.values():
        if node.description.startswith("Input") and node.activation_bytes > 0:
            for a in set(node.activation_parts or ()) | {node.activation_bytes}:
                for side in IMAGE_SIDES:
                    mb = a / (3 * side * side * 4)
                    if mb >= 1 and mb.is_integer():
                        found.setdefault(int(mb), f"{node.id}: {a:g} bytes = {int(mb)} x 3x{side}x{side} fp32")
                        break
    if len(found) == 1:
        return next(iter(found))
    if len(found) > 1:
        raise InstanceError(f"{path}: the profiled minibatch is ambiguous ({'; '.join(found.values())}); pass "
                            "minibatch= (dynpar import-profile --minibatch N)")
    known = KNOWN_MINIBATCH.get(path.parent.name)
    if known is None:
        raise InstanceError(f"{path}: cannot infer the profiled minibatch (no Input node holds 3xHxW fp32 images, H in "
                            f"{', '.join(map(str, IMAGE_SIDES))}); pass minibatch= (dynpar import-profile --minibatch N)")
    return known


def profile_name(path: Path) -> str:
    """The workload's name: the file's stem, or its folder's name for PipeDream's graph.txt."""
    return path.parent.name if path.name == "graph.txt" and path.parent.name else path.stem


def import_profile(path: str | Path, kind: str = DEFAULT_KIND, minibatch: int | None = None,
                   efficiency: float = 0.5, batch: int | None = None, micro_batch: int | None = None,
                   opt_factor: float = 4.0, name: str | None = None,
                   saved_bytes: Sequence[float] | None = None) -> Workload:
    """A PipeDream graph.txt as a Workload (per-sample figures, measured seconds under `kind`).

    batch defaults to the profiled minibatch, micro_batch to the largest of 8, 4, 2, 1 dividing it.
    saved_bytes: bytes per sample each layer (in the imported order) keeps for its backward pass,
    replacing the boundary-tensor estimate (module doc)."""
    path = Path(path)
    graph = parse_profile(path)
    try:
        spec = hardware_spec(kind)
    except KeyError as e:
        raise InstanceError(f"{path}: kind: {e.args[0]}") from None
    if not (0 < efficiency <= 1):
        raise InstanceError(f"{path}: efficiency must be in (0, 1]: {efficiency!r}")
    mb = minibatch or profiled_minibatch(graph, path)
    try:
        order = topological_order(graph)
    except ValueError as e:
        raise InstanceError(f"{path}: {e}") from None
    crossing = cut_bytes(graph, order)
    preds: dict[str, list[str]] = {n: [] for n in graph.nodes}
    for a, b in graph.edges:
        preds[b].append(a)
    if saved_bytes is not None:
        saved_bytes = [float(x) for x in saved_bytes]
        if len(saved_bytes) != len(order) or any(not (x >= 0) or x == float("inf") for x in saved_bytes):
            raise InstanceError(f"{path}: saved_bytes: expected {len(order)} finite bytes >= 0 per sample "
                                f"(one per node), got {len(saved_bytes)} values")
    sustained = spec.peak_flops * efficiency
    layers, fwd_s, bwd_s = [], [], []
    for i, (n, cross) in enumerate(zip(order, crossing)):
        node = graph.nodes[n]
        f, b = node.fwd_ms / 1000.0 / mb, node.bwd_ms / 1000.0 / mb
        stash = (sum(graph.nodes[p].activation_bytes for p in preds[n]) / mb if saved_bytes is None
                 else saved_bytes[i])
        layers.append(Layer(f"{n} {node.description}"[:120], f * sustained, b * sustained, cross / mb,
                            stash, node.param_bytes))
        fwd_s.append(f)
        bwd_s.append(b)
    inputs = [graph.nodes[n] for n in order if graph.nodes[n].description.startswith("Input")]
    batch = batch or mb
    micro_batch = micro_batch or next(u for u in (8, 4, 2, 1) if batch % u == 0)
    return Workload(name or profile_name(path), tuple(layers), batch, micro_batch, opt_factor,
                    sum(i.activation_bytes for i in inputs) / mb, {spec.kind: (tuple(fwd_s), tuple(bwd_s))})


BOUNDARY_NOTE = ("stash_bytes: the tensors each node receives (boundary tensors from the profile graph, once per "
                 "consumer); the graph cannot know what a node saves inside itself, so these may be low for fused "
                 "nodes: pass saved_bytes= to import_profile to supply measured or computed figures")
SUPPLIED_NOTE = "stash_bytes: supplied by the user (saved_bytes=), not from the profile graph"


def profile_to_csv(path: str | Path, out: str | Path, **kwargs) -> Path:
    """Import a graph.txt (keyword arguments as import_profile) and write it as a layer-table CSV
    whose notes say where its stash_bytes come from."""
    wl = import_profile(path, **kwargs)
    note = BOUNDARY_NOTE if kwargs.get("saved_bytes") is None else SUPPLIED_NOTE
    return write_workload_csv(wl, out, f"dynpar layer table {wl.name}: imported from PipeDream profile "
                                       f"{Path(path).name}\n{note}")
