"""Layer tables of real networks, computed from layer shapes, and the layer-table CSV format.

Per-sample forward FLOPs of the operators (a multiply-add counts 2 FLOP):
- convolution: 2 * Cin * Cout * kh * kw * Hout * Wout / groups (bias ignored);
- linear: 2 * in * out per token (times the sequence length for transformers);
- attention core: Q K^T and A V matmuls 2 * 2 * s * s * d (s tokens, d = heads * head size;
  causal masks are not discounted, as dense kernels compute the full square), plus softmax;
- element-wise: ReLU, residual add, dropout 1, tanh 4, softmax and batch/layer norm 5,
  GELU 8 FLOP per element; pooling k*k per output element; embedding lookup 1 per element.
Backward FLOPs = 2 x forward (the gradients with respect to inputs and to weights each cost
about one forward pass).

Bytes are fp32 (4 bytes per element). out_bytes = the layer's output activation, what
crosses a cut after it. stash_bytes = the layer's input plus the output of every operator
inside it, kept for the backward pass (conservative: in-place ReLU would keep less, and the
input is counted so that a stage's stash includes the tensor it received). param_bytes =
4 * parameters. Token ids are int64 (8 bytes each).

Models (layer granularity): vgg16 (224x224; 13 conv[+ReLU][+pool] layers, 3 FC layers),
resnet50 (224x224, torchvision v1.5; stem, 16 bottleneck blocks, head), bert_base (seq 128;
embeddings, 12 x (attention, FFN) sublayers, pooler + 2-class head), gpt2_small (seq 1024;
embeddings, 12 x (attention, MLP) sublayers, final norm + LM head whose weight is tied to
the token embedding and so counted there once), mlp (784-1024-1024-1024-10).

Layer-table CSV (models/<name>.csv): optional leading lines `# key: value` (key
`input_bytes` = bytes per input sample, o_0); then a header with the columns name,
fwd_flops, bwd_flops, out_bytes, stash_bytes, param_bytes (per sample: FLOP, bytes) and
optional column pairs fwd_s:<kind>, bwd_s:<kind> (measured seconds per sample on that
device kind; Workload.measured), and columns of figures at several micro-batch sizes and
tensor-parallel degrees named `fwd_s:<kind>@mbs<b>@tp<t>`, `param_bytes@tp<t>` etc.
(solver.io.columns: the `@mbs<u>@tp1` column at the workload's micro-batch size u is used
in place of the plain one, and every `@mbs<b>@tp1` column with b dividing the batch gives
Workload.measured_by_micro_batch). A line `# precision: P` (fp32, bf16, fp16) says the bytes
are already at P (Workload.precision; 16-bit: the mixed-precision model-state factor).
Columns opt_s:<kind> give each layer's measured optimizer-step seconds per iteration on
that kind (Workload.optimizer_seconds, for optimizer_step = "measured"). An optional column
stash_unsplit_bytes gives the part of stash_bytes that tensor parallelism does not split
(Workload.tp_unsplit_stash; without it a TP stage keeps all of it on every device).
Every layer's name differs from the others' (a name used twice is an error naming its rows).
Regenerate with `python -m solver.io.workloads [outdir]`.
"""
from __future__ import annotations

import csv
import math
import numbers
import os
import sys
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Callable, Sequence

from ..errors import InstanceError
from ..model import Layer, Workload
from ..model.workload import PRECISIONS, TP_TIMES, TPVariant, mixed_opt_factor
from . import ranges as R
from .data import models_dir
from .columns import BYTES_VARIANT, bytes_column, time_column, variant_columns
from .text import read_text, repeated_columns

MODELS_DIR = models_dir()
"""The packaged layer tables (solver/data/models; the checkout's models/ links to them)."""
FP32 = 4
INT64 = 8
BASE_COLUMNS = ("name", "fwd_flops", "bwd_flops", "out_bytes", "stash_bytes", "param_bytes")
META_KEYS = ("input_bytes", "precision", "tp_times")
"""The layer table's '# key: value' comment lines the reader reads; a key within a letter or two
of one of them is refused as a typo (other comment lines are free text)."""


@dataclass(frozen=True)
class Op:
    """One operator per sample: forward FLOP, elements kept for backward, parameters."""

    flops: float
    saved: float
    params: float = 0.0


# ---------------------------------------------------------------- operators (shape in -> op, shape out)

def conv(shape: tuple[int, int, int], cout: int, k: int, stride: int = 1, pad: int | None = None,
         groups: int = 1, bias: bool = True) -> tuple[Op, tuple[int, int, int]]:
    cin, h, w = shape
    pad = k // 2 if pad is None else pad
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    flops = 2 * cin * cout * k * k * ho * wo / groups
    params = cin * cout * k * k // groups + (cout if bias else 0)
    return Op(flops, cout * ho * wo, params), (cout, ho, wo)


def pool(shape: tuple[int, int, int], k: int, stride: int, pad: int = 0) -> tuple[Op, tuple[int, int, int]]:
    c, h, w = shape
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    return Op(k * k * c * ho * wo, c * ho * wo), (c, ho, wo)


def elementwise(elements: float, flops_per_element: float, params: float = 0.0) -> Op:
    return Op(flops_per_element * elements, elements, params)


def linear(tokens: int, fan_in: int, fan_out: int, bias: bool = True) -> Op:
    return Op(2 * tokens * fan_in * fan_out, tokens * fan_out, fan_in * fan_out + (fan_out if bias else 0))


def attention_core(s: int, d: int, heads: int) -> Op:
    """softmax(Q K^T / sqrt(dh)) V for s tokens: keeps the attention probabilities and the context."""
    return Op(2 * 2 * s * s * d + 5 * heads * s * s, heads * s * s + s * d)


def make_layer(name: str, ops: Sequence[Op], in_bytes: float, out_elements: float) -> Layer:
    """A layer from its operators: backward = 2 x forward, fp32 activations and parameters."""
    f = float(sum(o.flops for o in ops))
    return Layer(name, f, 2.0 * f, FP32 * out_elements, in_bytes + FP32 * sum(o.saved for o in ops),
                 FP32 * float(sum(o.params for o in ops)))


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


# ---------------------------------------------------------------- networks

def vgg16() -> tuple[list[Layer], float]:
    """VGG-16 on 3x224x224 images; returns (layers, input bytes per sample)."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    shape, layers, block, idx = (3, 224, 224), [], 1, 0
    input_bytes = FP32 * _numel(shape)
    for i, c in enumerate(cfg):
        if c == "M":
            continue
        idx += 1
        in_bytes = FP32 * _numel(shape)
        op, shape = conv(shape, c, 3)
        ops = [op, elementwise(_numel(shape), 1)]
        if i + 1 < len(cfg) and cfg[i + 1] == "M":
            op, shape = pool(shape, 2, 2)
            ops.append(op)
        layers.append(make_layer(f"conv{block}_{idx}", ops, in_bytes, _numel(shape)))
        if i + 1 < len(cfg) and cfg[i + 1] == "M":
            block, idx = block + 1, 0
    features = _numel(shape)
    for name, fi, fo, act in (("fc6", features, 4096, True), ("fc7", 4096, 4096, True), ("fc8", 4096, 1000, False)):
        ops = [linear(1, fi, fo)] + ([elementwise(fo, 1), elementwise(fo, 1)] if act else [])
        layers.append(make_layer(name, ops, FP32 * fi, fo))
    return layers, input_bytes


def _bottleneck(shape: tuple[int, int, int], width: int, stride: int, name: str) -> tuple[Layer, tuple[int, int, int]]:
    cin = shape[0]
    in_bytes = FP32 * _numel(shape)
    ops, s = [], shape
    for cout, k, st in ((width, 1, 1), (width, 3, stride), (4 * width, 1, 1)):
        op, s = conv(s, cout, k, st, bias=False)
        ops += [op, elementwise(_numel(s), 5, 2 * cout)]
        if cout == width:
            ops.append(elementwise(_numel(s), 1))
    if stride != 1 or cin != 4 * width:
        op, ds = conv(shape, 4 * width, 1, stride, pad=0, bias=False)
        ops += [op, elementwise(_numel(ds), 5, 2 * 4 * width)]
    ops += [elementwise(_numel(s), 1), elementwise(_numel(s), 1)]
    return make_layer(name, ops, in_bytes, _numel(s)), s


def resnet50() -> tuple[list[Layer], float]:
    """ResNet-50 (torchvision v1.5: stride on the 3x3 conv) on 3x224x224 images."""
    shape = (3, 224, 224)
    input_bytes = FP32 * _numel(shape)
    op, shape = conv(shape, 64, 7, 2, 3, bias=False)
    ops = [op, elementwise(_numel(shape), 5, 128), elementwise(_numel(shape), 1)]
    op, shape = pool(shape, 3, 2, 1)
    layers = [make_layer("stem", ops + [op], input_bytes, _numel(shape))]
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=1):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 1) else 1
            layer, shape = _bottleneck(shape, width, stride, f"layer{stage}.{b}")
            layers.append(layer)
    c, h, w = shape
    head = [Op(h * w * c, c), linear(1, c, 1000)]
    layers.append(make_layer("head", head, FP32 * _numel(shape), 1000))
    return layers, input_bytes


def _attention_sublayer(s: int, d: int, heads: int, name: str) -> Layer:
    ops = [linear(s, d, 3 * d), attention_core(s, d, heads), linear(s, d, d), elementwise(s * d, 1), elementwise(s * d, 1),
           elementwise(s * d, 5, 2 * d)]
    return make_layer(name, ops, FP32 * s * d, s * d)


def _ffn_sublayer(s: int, d: int, name: str) -> Layer:
    ops = [linear(s, d, 4 * d), elementwise(4 * s * d, 8), linear(s, 4 * d, d), elementwise(s * d, 1),
           elementwise(s * d, 1), elementwise(s * d, 5, 2 * d)]
    return make_layer(name, ops, FP32 * s * d, s * d)


def bert_base(seq: int = 128) -> tuple[list[Layer], float]:
    """BERT-base (12 layers, d 768, 12 heads, vocab 30522) on sequences of `seq` tokens."""
    s, d, heads, vocab = seq, 768, 12, 30522
    input_bytes = INT64 * s
    emb = [Op(3 * s * d, s * d, vocab * d + 512 * d + 2 * d), elementwise(s * d, 5, 2 * d), elementwise(s * d, 1)]
    layers = [make_layer("embeddings", emb, input_bytes, s * d)]
    for i in range(12):
        layers.append(_attention_sublayer(s, d, heads, f"encoder{i}.attention"))
        layers.append(_ffn_sublayer(s, d, f"encoder{i}.ffn"))
    head = [linear(1, d, d), elementwise(d, 4), linear(1, d, 2)]
    layers.append(make_layer("pooler_classifier", head, FP32 * s * d, 2))
    return layers, input_bytes


def gpt2_small(seq: int = 1024) -> tuple[list[Layer], float]:
    """GPT-2 small (12 blocks, d 768, 12 heads, vocab 50257, context 1024) on `seq` tokens.

    The LM head's weight is tied to the token embedding: its FLOPs are in the head layer,
    its parameters are counted once, in the embedding layer."""
    s, d, heads, vocab = seq, 768, 12, 50257
    input_bytes = INT64 * s
    layers = [make_layer("embeddings", [Op(2 * s * d, s * d, vocab * d + 1024 * d), elementwise(s * d, 1)],
                         input_bytes, s * d)]
    for i in range(12):
        layers.append(_attention_sublayer(s, d, heads, f"block{i}.attention"))
        layers.append(_ffn_sublayer(s, d, f"block{i}.mlp"))
    head = [elementwise(s * d, 5, 2 * d), Op(2 * s * d * vocab, s * vocab)]
    layers.append(make_layer("lm_head", head, FP32 * s * d, s * vocab))
    return layers, input_bytes


def mlp(widths: Sequence[int] = (784, 1024, 1024, 1024, 10)) -> tuple[list[Layer], float]:
    """A small multi-layer perceptron (ReLU between layers) on flattened 28x28 inputs."""
    layers = []
    for i, (fi, fo) in enumerate(zip(widths[:-1], widths[1:])):
        ops = [linear(1, fi, fo)] + ([elementwise(fo, 1)] if i < len(widths) - 2 else [])
        layers.append(make_layer(f"fc{i + 1}", ops, FP32 * fi, fo))
    return layers, FP32 * widths[0]


MODELS: dict[str, Callable[[], tuple[list[Layer], float]]] = {
    "vgg16": vgg16, "resnet50": resnet50, "bert_base": bert_base, "gpt2_small": gpt2_small, "mlp": mlp,
}
PUBLISHED_PARAMS = {"vgg16": 138.4e6, "resnet50": 25.6e6, "bert_base": 110e6, "gpt2_small": 124e6}
"""Published parameter counts the generated tables are checked against."""


def build_model(name: str, batch: int = 64, micro_batch: int = 4, opt_factor: float = 4.0) -> Workload:
    """The generated Workload of a model in MODELS."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    layers, input_bytes = MODELS[name]()
    return Workload(name, tuple(layers), batch, micro_batch, opt_factor, float(input_bytes))


# ---------------------------------------------------------------- CSV format

def format_number(v: float) -> str:
    """A number as layer tables write it: an integer without a decimal point, else repr."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e18 else repr(float(v))


def write_workload_csv(workload: Workload, path: str | Path, comment: str | None = None) -> Path:
    """Write `workload` as a layer table (per-sample figures, measured columns per kind).

    Its tp_variants (degrees t > 1) are written as the columns of solver.io.columns:
    `fwd_s:<kind>@mbs<b>@tp<t>` / `bwd_s:...` for every timed (micro-batch b, kind), and
    `param_bytes@tp<t>`, `stash_bytes@tp<t>`, with one `# tp_times:` line (TPVariant.times;
    ValueError when the variants differ in it). Other micro-batch sizes at t = 1
    (measured_by_micro_batch) are not written."""
    path = Path(path)
    kinds = sorted(workload.measured)
    steps = sorted(workload.optimizer_seconds)
    tpv = dict(sorted(workload.tp_variants.items()))
    timed = [(t, b, k) for t, v in tpv.items() for b in sorted(v.by_micro_batch) for k in sorted(v.by_micro_batch[b])]
    header = list(BASE_COLUMNS) + [c for k in kinds for c in (f"fwd_s:{k}", f"bwd_s:{k}")]
    header += [c for t, b, k in timed for c in (time_column("fwd", k, b, t), time_column("bwd", k, b, t))]
    header += [bytes_column(n, t) for t in tpv for n in ("param_bytes", "stash_bytes")]
    header += [f"opt_s:{k}" for k in steps]
    lines = [f"# {line}" for line in (comment or f"dynpar layer table {workload.name}").splitlines()]
    lines.append(f"# input_bytes: {format_number(workload.input_bytes)}")
    if tpv:
        times = sorted({v.times for v in tpv.values()})
        if len(times) > 1:
            raise ValueError(f"tp_variants: a layer table has one '# tp_times:' line, got degrees with times "
                             f"{ {t: v.times for t, v in tpv.items()} }")
        lines.append(f"# tp_times: {times[0]}")
    rows = []
    for i in range(workload.num_layers):
        row = base_cells(workload, i)
        for t, b, k in timed:
            fw, bw = tpv[t].by_micro_batch[b][k]
            row += [repr(float(fw[i])), repr(float(bw[i]))]
        row += [format_number(x[i]) for t in tpv for x in (tpv[t].param_bytes, tpv[t].stash_bytes)]
        row += [repr(float(workload.optimizer_seconds[k][i])) for k in steps]
        rows.append(row)
    return write_table_csv(path, lines, header, rows)


def base_cells(workload: Workload, i: int) -> list[str]:
    """Layer i's cells of the BASE_COLUMNS and of every measured kind's fwd_s/bwd_s pair
    (kinds in sorted order), as written in a layer table."""
    l = workload.layers[i]
    row = [l.name] + [format_number(x) for x in (l.fwd_flops, l.bwd_flops, l.out_bytes, l.stash_bytes, l.param_bytes)]
    for k in sorted(workload.measured):
        fw, bw = workload.measured[k]
        row += [repr(float(fw[i])), repr(float(bw[i]))]
    return row


def write_table_csv(path: Path, comments: Sequence[str], header: Sequence[str], rows: Sequence[Sequence[str]]
                    ) -> Path:
    """Write a layer table: the `# ...` comment lines, the header, the rows (parent folder created;
    whole or not at all: a temporary file beside it, then renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with tmp.open("w", newline="") as fh:
            fh.write("\n".join(comments) + "\n")
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(header)
            w.writerows(rows)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _column_range(col: str) -> R.Range:
    col = col.split("@", 1)[0]
    if col.endswith("_flops"):
        return R.LAYER_FLOPS
    if col.endswith("_bytes") and col != "input_bytes":
        return R.LAYER_BYTES
    return R.INPUT_BYTES if col == "input_bytes" else R.LAYER_SECONDS


def _number(path: Path, lineno: int, col: str, cell: str) -> float:
    try:
        v = float(cell)
    except ValueError:
        raise InstanceError(f"{path}: row {lineno}: column {col!r}: not a number: {cell!r}") from None
    if not math.isfinite(v) or v < 0:
        raise InstanceError(f"{path}: row {lineno}: column {col!r}: must be finite and >= 0: {cell!r}")
    problem = _column_range(col).problem(v)
    if problem:
        raise InstanceError(f"{path}: row {lineno}: column {col!r}: {problem} (got {cell!r})")
    return v


def read_workload_csv(path: str | Path, batch: int, micro_batch: int, opt_factor: float = 4.0,
                      input_bytes: float | None = None, name: str | None = None) -> Workload:
    """Read a layer table into a Workload of global batch `batch` and micro-batch `micro_batch`.

    input_bytes (bytes per input sample) defaults to the file's `# input_bytes:` line, else 0.
    Raises InstanceError naming file, row, column and value on any malformed cell."""
    path = Path(path)
    for arg, x in (("batch", batch), ("micro_batch", micro_batch)):
        if isinstance(x, bool) or not isinstance(x, numbers.Integral):
            raise TypeError(f"{arg}: expected an integer number of samples, got {x!r} ({type(x).__name__})")
    for arg, x, rng in (("opt_factor", opt_factor, R.OPTIMIZER_FACTOR), ("input_bytes", input_bytes, R.INPUT_BYTES)):
        if x is None and arg == "input_bytes":
            continue
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise TypeError(f"{arg}: expected a number, got {x!r} ({type(x).__name__})")
        if rng.problem(float(x)):
            raise ValueError(f"{arg}: {rng.problem(float(x))}, got {x!r}")
    text = read_text(path, "layer table")
    if batch < 1 or micro_batch < 1 or batch % micro_batch:
        raise InstanceError(f"{path}: batch {batch} must be a positive multiple of micro_batch {micro_batch}")
    lines = text.splitlines()
    meta: dict[str, str] = {}
    start = 0
    while start < len(lines) and (lines[start].startswith("#") or not lines[start].strip()):
        key, sep, value = lines[start].lstrip("#").partition(":")
        if sep:
            meta[key.strip()] = value.strip()
            near = get_close_matches(key.strip(), META_KEYS, n=1, cutoff=0.8)
            if key.strip() not in META_KEYS and near:
                raise InstanceError(f"{path}: row {start + 1}: comment line '# {key.strip()}:': expected "
                                    f"'# {near[0]}:' (the table's {near[0]} is read from that line), got a "
                                    "look-alike")
        start += 1
    reader = csv.reader(lines[start:])
    header = [h.strip() for h in next(reader, [])]
    twice = repeated_columns(header)
    if twice:
        raise InstanceError(f"{path}: row {start + 1}: column(s) {', '.join(map(repr, twice))} given twice; "
                            "expected each column once")
    missing = [c for c in BASE_COLUMNS if c not in header]
    if missing:
        raise InstanceError(f"{path}: row {start + 1}: missing column(s) {', '.join(map(repr, missing))}")
    unknown = [h for h in header if h not in BASE_COLUMNS and h != UNSPLIT_COLUMN and "@" not in h
               and not h.startswith(("fwd_s:", "bwd_s:", "opt_s:"))]
    if unknown:
        raise InstanceError(f"{path}: row {start + 1}: unknown column(s) {', '.join(map(repr, unknown))}; expected "
                            f"{', '.join(BASE_COLUMNS)}, {UNSPLIT_COLUMN}, fwd_s:KIND / bwd_s:KIND / opt_s:KIND "
                            "and their @mbsB@tpT variants")
    variants, problems = variant_columns(header)
    if problems:
        raise InstanceError(f"{path}: row {start + 1}: {problems[0]}")
    kinds = [h[len("fwd_s:"):] for h in header if h.startswith("fwd_s:") and "@" not in h]
    for k in kinds:
        if f"bwd_s:{k}" not in header:
            raise InstanceError(f"{path}: row {start + 1}: column 'fwd_s:{k}' has no matching 'bwd_s:{k}'")
    for h in header:
        if h.startswith("bwd_s:") and "@" not in h and h[len("bwd_s:"):] not in kinds:
            raise InstanceError(f"{path}: row {start + 1}: column {h!r} has no matching 'fwd_s:' column")
    source = {k: (f"fwd_s:{k}", f"bwd_s:{k}") for k in kinds}
    source.update({k: cols for (k, b, t), cols in variants.items() if b == micro_batch and t == 1})
    extra: dict[str, list[float]] = {h: [] for h in header if "@" in h or h.startswith("opt_s:")
                                     or h == UNSPLIT_COLUMN}
    layers, measured = [], {k: ([], []) for k in source}
    rows_of: dict[str, list[int]] = {}
    for lineno, row in enumerate(reader, start=start + 2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InstanceError(f"{path}: row {lineno}: {len(row)} cells, header has {len(header)}")
        cells = dict(zip(header, (c.strip() for c in row)))
        if not cells["name"]:
            raise InstanceError(f"{path}: row {lineno}: column 'name': empty")
        rows_of.setdefault(cells["name"], []).append(lineno)
        vals = [_number(path, lineno, c, cells[c]) for c in BASE_COLUMNS[1:]]
        layers.append(Layer(cells["name"], *vals))
        for k, (fc, bc) in source.items():
            measured[k][0].append(_number(path, lineno, fc, cells[fc]))
            measured[k][1].append(_number(path, lineno, bc, cells[bc]))
        for c, vals in extra.items():
            vals.append(_number(path, lineno, c, cells[c]))
    if not layers:
        raise InstanceError(f"{path}: no layer rows")
    _check_unique_names(path, rows_of)
    for k, (f, b) in measured.items():
        if not any(f) and not any(b):
            raise InstanceError(f"{path}: columns 'fwd_s:{k}', 'bwd_s:{k}': every layer takes 0 s on {k}; "
                                f"expected some compute (a positive time in some row)")
    for (k, b, t), (fc, bc) in sorted(variants.items()):
        if batch % b == 0 and not any(extra[fc]) and not any(extra[bc]):
            raise InstanceError(f"{path}: columns {fc!r}, {bc!r}: every layer takes 0 s on {k} at micro-batch size "
                                f"{b}, tensor-parallel degree {t}; expected some compute (a positive time in some row)")
    if not any(l.fwd_flops or l.bwd_flops for l in layers) and not measured:
        raise InstanceError(f"{path}: columns 'fwd_flops', 'bwd_flops': every layer is 0 FLOPs and no kind's times "
                            f"are measured; expected some compute (a positive FLOP count in some row)")
    if input_bytes is None:
        cell = meta.get("input_bytes", "0")
        input_bytes = _number(path, 1, "input_bytes", cell)
    precision = meta.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise InstanceError(f"{path}: '# precision:' line: expected one of {', '.join(sorted(PRECISIONS))}, "
                            f"got {precision!r}")
    if PRECISIONS[precision] != 4:      # bytes already 16-bit: the model-state factor of mixed precision
        opt_factor = mixed_opt_factor(opt_factor, PRECISIONS[precision])
    measured = {k: (tuple(f), tuple(b)) for k, (f, b) in measured.items()}
    by_u: dict[int, dict] = {}
    for (k, b, t), (fc, bc) in sorted(variants.items()):
        if t == 1 and batch % b == 0:
            by_u.setdefault(b, {})[k] = (tuple(extra[fc]), tuple(extra[bc]))
    unused = sorted({b for (_, b, _) in variants if batch % b})
    notes = (f"layer table {path.name}: the times at micro-batch size(s) {', '.join(map(str, unused))} "
             f"(@mbs columns) are not used: they do not divide the batch {batch}",) if unused else ()
    if by_u:
        by_u.setdefault(int(micro_batch), measured)
    tp_times = meta.get("tp_times", TP_TIMES[0])
    if tp_times not in TP_TIMES:
        raise InstanceError(f"{path}: '# tp_times:' line: expected one of {', '.join(TP_TIMES)}, got {tp_times!r}")
    tp_variants = _tp_variants(path, variants, extra, int(batch), layers, tp_times)
    unsplit = _unsplit(path, extra, layers, start)
    return Workload(name or path.stem, tuple(layers), int(batch), int(micro_batch), float(opt_factor),
                    float(input_bytes), measured, precision=precision,
                    measured_by_micro_batch=dict(sorted(by_u.items())), tp_variants=tp_variants,
                    tp_unsplit_stash=unsplit,
                    optimizer_seconds={h[len("opt_s:"):]: tuple(extra[h]) for h in header if h.startswith("opt_s:")},
                    notes=notes)


def _check_unique_names(path: Path, rows_of: dict[str, list[int]], shown: int = 5) -> None:
    """InstanceError naming every layer name used in more than one row, with those rows."""
    dups = [(n, rows) for n, rows in rows_of.items() if len(rows) > 1]
    if not dups:
        return
    listed = "; ".join(f"{n!r} in rows {', '.join(map(str, rows))}" for n, rows in dups[:shown])
    more = f"; and {len(dups) - shown} more" if len(dups) > shown else ""
    raise InstanceError(f"{path}: column 'name': expected a different name for each layer, got {len(dups)} "
                        f"name(s) used more than once: {listed}{more}")


UNSPLIT_COLUMN = "stash_unsplit_bytes"
"""Optional layer-table column: per layer, the bytes per sample of its saved activations that
tensor parallelism does not split (Workload.tp_unsplit_stash; for a transformer block
io.transformer.block_unsplit_bytes)."""


def _unsplit(path: Path, extra: dict[str, list[float]], layers: list, start: int) -> tuple[float, ...] | None:
    """The stash_unsplit_bytes column, or None without one; InstanceError where a value exceeds
    the layer's stash_bytes."""
    if UNSPLIT_COLUMN not in extra:
        return None
    vals = tuple(extra[UNSPLIT_COLUMN])
    for i, (v, l) in enumerate(zip(vals, layers)):
        if v > l.stash_bytes * (1 + 1e-12):
            raise InstanceError(f"{path}: layer {l.name!r}: column {UNSPLIT_COLUMN!r}: expected at most the layer's "
                                f"stash_bytes {format_number(l.stash_bytes)}, got {format_number(v)}")
    return vals


def _tp_variants(path: Path, variants: dict, extra: dict[str, list[float]], batch: int,
                 layers: list, times: str = TP_TIMES[0]) -> dict[int, TPVariant]:
    """{t: TPVariant} from the `param_bytes@tp<t>`, `stash_bytes@tp<t>` and timed `@mbs<b>@tp<t>`
    columns (t > 1; sizes b dividing the batch), each with TPVariant.times `times` (the table's
    `# tp_times:` line, solver.io.columns). InstanceError naming the columns when times at a
    degree come without its bytes, and when an `out_bytes@tp<t>` column differs from out_bytes
    (the model sends a stage's boundary once, at its degree-1 size: a different figure would be
    ignored)."""
    degrees = {t for (_, _, t) in variants if t > 1}
    degrees |= {int(m.group(2)) for h in extra if (m := BYTES_VARIANT.match(h)) and int(m.group(2)) > 1}
    out: dict[int, TPVariant] = {}
    for t in sorted(degrees):
        pc, sc = bytes_column("param_bytes", t), bytes_column("stash_bytes", t)
        if pc not in extra or sc not in extra:
            missing = [c for c in (pc, sc) if c not in extra]
            raise InstanceError(f"{path}: tensor-parallel degree {t}: expected columns {pc!r} and {sc!r} "
                                f"(the bytes per device at that degree), missing {missing}")
        by_u: dict[int, dict] = {}
        for (k, b, tt), (fc, bc) in sorted(variants.items()):
            if tt == t and batch % b == 0:
                by_u.setdefault(b, {})[k] = (tuple(extra[fc]), tuple(extra[bc]))
        oc = bytes_column("out_bytes", t)
        for v, l in zip(extra.get(oc, ()), layers):
            if abs(v - l.out_bytes) > 1e-9 * max(abs(l.out_bytes), 1.0):
                raise InstanceError(f"{path}: layer {l.name!r}: column {oc!r}: expected the layer's out_bytes "
                                    f"{format_number(l.out_bytes)} (a TP stage sends its boundary once, whole), "
                                    f"got {format_number(v)}")
        out[t] = TPVariant(tuple(extra[pc]), tuple(extra[sc]), dict(sorted(by_u.items())), times)
    return out


def generate_all(outdir: str | Path = MODELS_DIR) -> list[Path]:
    """Write models/<name>.csv for every model in MODELS; returns the paths."""
    out = []
    for name in MODELS:
        wl = build_model(name)
        note = (f"dynpar layer table {name}: generated from layer shapes by solver.io.workloads "
                f"(python -m solver.io.workloads); per sample, FLOP and bytes (fp32)")
        out.append(write_workload_csv(wl, Path(outdir) / f"{name}.csv", note))
    return out


if __name__ == "__main__":
    for p in generate_all(sys.argv[1] if len(sys.argv) > 1 else MODELS_DIR):
        print(p)
