"""Hostile input: mutants of small valid ONNX models, each through ``build_onnx_artifact``.

Every mutant either builds an artifact that is then signed here and read back with
:func:`load_verified` (its golden cases re-run on numpy), or is refused by the importer with a
:class:`~plugin_host.errors.ModelImportError` (a :class:`~abi.errors.PluginHostError`) whose
message is one line and is not a generic exception's text. Anything else (another exception,
a refusal by a later stage, a crash of the process, a hang, an allocation past the
address-space limit) fails the test, naming the mutant.

The seeds are twenty-six small models, most exported from torch with the legacy exporter:
``net`` (Conv, BatchNormalization, Relu, MaxPool, Reshape, an Embedding Gather, Concat, Gemm,
Softmax), ``glue`` (ConvTranspose, AveragePool, Pad, Slice, Reshape, LayerNormalization,
MatMul + Add, Split, Sigmoid, Mul, Tanh, ReduceMean, Clip), ``math`` (Elu, LeakyRelu,
HardSigmoid, PRelu, Sqrt, Abs, Log, Softplus, Where, Greater, Pow, Max, Min, Exp, Erf, Round,
ScatterND, TopK and a ScatterElements at its run-time indices, a ScatterND of two coordinates
at ArgMax's run-time indices),
``shapes`` (a run-time batch: Shape arithmetic feeding Reshape, Resize, DepthToSpace,
LogSoftmax, Slice, an LSTM unrolled over time, Gather, one at a constant index along the
run-time batch, Sin, ReduceL2, Tile, ArgMin) and
``legacy`` (opset 11, upgraded to 13 by the version converter before the import: Conv,
Resize-11, Split, Squeeze, Softmax over a middle axis, an LSTM), ``half`` (float16: Conv,
LayerNorm, Gemm, Casts to float32 and back), ``qdq`` (a conv net quantized by onnxruntime's
quantize_static: QuantizeLinear and DequantizeLinear, per-channel int8 weights) and ``dynamic``
(the same net quantized by its quantize_dynamic: DynamicQuantizeLinear, ConvInteger,
MatMulInteger), ``fused`` (that model as an onnxruntime session optimizes and saves it:
com.microsoft's DynamicQuantizeMatMul), ``optimized`` (the float net so optimized: FusedConv),
``bert`` (a BERT layer optimized by onnxruntime.transformers: com.microsoft's
EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu), ``bert_mha`` (the same
with MultiHeadAttention), ``nbits`` and ``qdq4`` (an MLP quantized by MatMulNBitsQuantizer:
com.microsoft's MatMulNBits; blocked DequantizeLinears of int4 weights),
``qop`` (a gated residual block quantized by
quantize_static in the QOperator format: QLinearConv and com.microsoft's QLinearMul,
QLinearAdd, QLinearSigmoid, QLinearLeakyRelu, QLinearAveragePool, QLinearConcat, QGemm,
QLinearSoftmax), ``qlstm`` (a bidirectional LSTM quantized by quantize_dynamic:
com.microsoft's DynamicQuantizeLSTM, given sequence_lens) and
``sequence`` (a run-time batch and length: Embedding Gathers, Range by 1 and by 2, the steps
reversed by a Gather at Range(t - 1, -1, -1), causal attention with a
Trilu mask and Reshapes of the heads between the two run-time dims, the last step, the tokens
back to both) and ``grid`` (a run-time batch, height and width: DepthToSpace, a Conv, the
pixels as tokens through a Gemm and back to the grid), and ``newer`` (opset 26, written with
onnx.helper: TensorScatter at run-time write indices, Attention with per-batch cache lengths
and a window, CumProd) and ``scan`` (opset 27: LinearAttention, whose ONNX function is a
Scan, then a reversed Scan with a state and two scan outputs) and ``deform`` (opset 19:
DeformConv with a mask over a run-time batch, LpPool, RoiAlign, MaxRoiPool) and ``cache``
(com.microsoft's Attention and MultiHeadAttention with past states and present outputs, a
MatMulNBits with g_idx) and ``scan8`` (opset 8: a Scan over a batch axis, one scan input
reversed, rewritten as Loops before the upgrade) and ``tokens`` (TfIdfVectorizer of int64
tokens over a run-time batch with TFIDF weights, then a Gemm) and ``functions`` (the model's
own functions: nested calls, attribute references and a default, an If in a body, an omitted
input; their bodies and signatures are mutated too). Every
mutant is built with ``upcast_float16=True`` and ``upcast_bfloat16=True``, so float16 or
bfloat16 anywhere (the seed's, or a mutated element type) goes through the rewrite to float32,
and one in four (by a checksum of its id) with ``onnxruntime_optimized=True``, so that hostile
models meet onnxruntime's graph optimizer in the reference process too.
Two kinds of mutants:

- byte-level, of the serialized file: bit flips, byte overwrites, truncation, random
  insertions, duplicated and deleted spans; ``FUZZ_ONNX_MUTANTS`` of them (default 300);
- structure-aware, made through the onnx protobuf API: a dim set to 0, negative or 2**40, an
  element type changed, raw_data of the wrong length, typed data fields in place of raw_data,
  an initializer removed, duplicated or renamed, a node input naming no tensor, a duplicated
  output, a cycle, an attribute of the wrong type, missing, or with a huge or negative value,
  an opset absent, 0 or 999, external data outside the model's folder or missing (or in the
  model's own data file, read unasked, or a link out under its name), a graph input
  with no type, no outputs, odd names, an op swapped for another, a node count past the cap...
  The catalogue (about 95,000) is enumerated in full; ``FUZZ_ONNX_STRUCTURAL`` of them are
  drawn (default 600, ``all`` for every one).

The mutants run in one child process under an address-space limit (a huge allocation fails
there as a MemoryError instead of swapping the machine), each with a time budget; a crash or a
hang of the child names the mutant it was on. ``make fuzz`` runs 5,000 byte-level mutants and
every structural one. ``FUZZ_SEED`` changes the sequence; ``FUZZ_ONNX_ONLY=s12,b40`` reruns
mutants by the ids a failure prints.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

MUTANTS = int(os.environ.get("FUZZ_ONNX_MUTANTS", "300"))
STRUCTURAL = os.environ.get("FUZZ_ONNX_STRUCTURAL", "600")
SEED = int(os.environ.get("FUZZ_SEED", "20240603"))
ONLY = [s for s in os.environ.get("FUZZ_ONNX_ONLY", "").split(",") if s]
#: Per mutant; the tiny models build in about 15 ms.
MAX_SECONDS_PER_MUTANT = 5.0
#: The child is killed when a mutant has not finished by then (a hang outside Python).
KILL_AFTER_SECONDS = 60.0
#: RLIMIT_AS of the child: room for onnxruntime and the caps' largest legal value, no more.
ADDRESS_SPACE = 6 * 2**30
#: A refusal that is a generic exception's text wrapped, not a description of the problem
#: (Python's IndexError says "list index out of range"; onnxruntime's kernels say "input
#: index out of range" of an input they refuse, a description).
GENERIC = re.compile(r"\b(IndexError|KeyError|TypeError|AttributeError|ValueError|"
                     r"ZeroDivisionError|OverflowError|RecursionError|MemoryError|UnicodeError|"
                     r"DecodeError)\b|(list|tuple|string|range object) index out of range|"
                     r"object is not|unhashable|0-d array|"
                     r"0-dimensional arrays|unsized object|can't concat|C int|NaN to integer|"
                     r"Traceback")

A, TP = onnx.AttributeProto, onnx.TensorProto
helper = onnx.helper

Edit = Callable[[Any], "dict | None"]  # mutates a ModelProto in place; may return options


class _Hang(BaseException):
    """Raised by the alarm: never caught as a refusal."""


# --- structure-aware mutations -------------------------------------------------------------------

_HUGE = 2**40
_DTYPES = [0, TP.UINT8, TP.INT32, TP.INT64, TP.STRING, TP.FLOAT16, TP.DOUBLE, TP.COMPLEX64,
           TP.BFLOAT16, 999]
_ODD_NAMES = ["", " ", "a\nb", "a\x00b", "\u00e9\u20ac\U0001F600", "../../x", "x" * 5000, "0",
              "/", "a'b\"c", "\u202eevil"]
_SWAPS = ["Conv", "ConvTranspose", "Gemm", "MatMul", "Relu", "Softmax", "Reshape", "Concat",
          "Gather", "Transpose", "Split", "Slice", "BatchNormalization", "MaxPool",
          "AveragePool", "Pad", "Flatten", "Unsqueeze", "Squeeze", "LayerNormalization",
          "GroupNormalization", "InstanceNormalization", "Expand", "ConstantOfShape", "Range",
          "Cast", "Clip", "ReduceMean", "GlobalAveragePool", "Shape", "Constant", "Identity",
          "Pow", "Where", "If", "Loop", "Sin", ""]
#: Attributes added to every node (whether its op has them or not): name -> values.
_ADDED = {
    "axis": [7, -9, _HUGE], "perm": [[0, 0], [5, 1], []], "kernel_shape": [[_HUGE, _HUGE]],
    "strides": [[0, 0], [_HUGE, 1]], "pads": [[-1] * 4, [_HUGE] * 4, [1, 1]],
    "group": [0, -1, 7, _HUGE], "dilations": [[0, 0], [-1, -1]],
    "auto_pad": ["SAME_UPPER", "bogus"], "transA": [1], "transB": [7], "alpha": [float("nan")],
    "epsilon": [-1.0], "allowzero": [1], "to": [16, 8], "keepdims": [0], "ceil_mode": [1],
    "mode": ["wrap"], "num_outputs": [0, 3], "bogus": [1], "output_shape": [[1, 1]],
    "output_padding": [[_HUGE, 0]], "num_groups": [0, 5], "start": [-_HUGE], "end": [_HUGE],
}


def _values_for(a) -> list[tuple[str, Any]]:
    """(label, new value) for attribute ``a``: huge, negative, empty, of the wrong type."""
    if a.type == A.INT:
        same = [0, -1, _HUGE, -2**62, 2**63 - 1]
    elif a.type == A.INTS:
        n = len(a.ints)
        same = [[], [0] * n, [-1] * n, [_HUGE] * n, [1] * (n + 1), [_HUGE] + list(a.ints[1:])]
    elif a.type == A.FLOAT:
        same = [float("nan"), float("inf"), -1.0, 0.0, 1e30]
    elif a.type == A.FLOATS:
        same = [[], [float("nan")] * len(a.floats)]
    elif a.type == A.STRING:
        same = ["", "bogus", "\x00"]
    else:
        same = []
    wrong = [1, 1.5, "x", [1, 1], [1.5], helper.make_tensor("t", TP.FLOAT, [2], [1.0, 2.0])]
    return [(repr(v) if not hasattr(v, "dims") else "a tensor", v) for v in same + wrong]


def _tensor_edits(t) -> list[tuple[str, Callable[[Any], None]]]:
    """Edits of one TensorProto (an initializer or a Constant's value)."""
    edits: list[tuple[str, Callable[[Any], None]]] = []
    for j in range(len(t.dims)):
        for v in (0, -1, _HUGE):
            edits.append((f"dims[{j}] = {v}", lambda x, j=j, v=v: x.dims.__setitem__(j, v)))
    edits += [("dims + [1]", lambda x: x.dims.append(1)),
              ("dims[:-1]", lambda x: x.dims.__delitem__(-1) if x.dims else x.dims.append(2)),
              ("dims = []", lambda x: x.ClearField("dims")),
              ("dims = [2**31, 2**31, 2**31]", lambda x: (x.ClearField("dims"),
                                                        x.dims.extend([2**31] * 3)))]
    for d in _DTYPES:
        if d != t.data_type:
            edits.append((f"data_type = {d}", lambda x, d=d: setattr(x, "data_type", d)))
    if t.HasField("raw_data"):
        edits += [("raw_data[:-1]", lambda x: setattr(x, "raw_data", x.raw_data[:-1])),
                  ("raw_data[:-4]", lambda x: setattr(x, "raw_data", x.raw_data[:-4])),
                  ("raw_data + 4 bytes", lambda x: setattr(x, "raw_data", x.raw_data + b"\0" * 4)),
                  ("raw_data empty", lambda x: setattr(x, "raw_data", b"")),
                  ("typed field in place of raw_data", lambda x: _to_typed(x, "right")),
                  ("wrong typed field in place of raw_data", lambda x: _to_typed(x, "wrong")),
                  ("typed field besides raw_data", lambda x: _to_typed(x, "both")),
                  ("typed field one value short", lambda x: _to_typed(x, "short"))]
        if t.data_type == TP.INT64:
            for v in (0, -1, _HUGE, -2**62):
                edits.append((f"values = {v}", lambda x, v=v: setattr(
                    x, "raw_data", np.full(len(x.raw_data) // 8, v, "<i8").tobytes())))
        elif t.data_type == TP.FLOAT:
            for v in (np.nan, np.inf, 3e38):
                edits.append((f"values[0] = {v}", lambda x, v=v: setattr(
                    x, "raw_data", np.float32(v).tobytes() + x.raw_data[4:])))
    edits.append(("data_location EXTERNAL without a location",
                  lambda x: setattr(x, "data_location", TP.EXTERNAL)))
    edits.append(("segment set", lambda x: (setattr(x.segment, "begin", 0),
                                             setattr(x.segment, "end", _HUGE))))
    return edits


def _to_typed(t, how: str) -> None:
    """Move raw_data to the element type's typed field (or the wrong one, or both, or short)."""
    dtype = {TP.FLOAT: "<f4", TP.INT64: "<i8", TP.INT32: "<i4", TP.DOUBLE: "<f8"}.get(
        t.data_type, "<f4")
    values = np.frombuffer(t.raw_data[:len(t.raw_data) // np.dtype(dtype).itemsize
                                      * np.dtype(dtype).itemsize], dtype)
    field = {TP.FLOAT: "float_data", TP.INT64: "int64_data", TP.DOUBLE: "double_data"}.get(
        t.data_type, "int32_data")
    if how == "wrong":
        field = "int64_data" if field != "int64_data" else "float_data"
    if how != "both":
        t.ClearField("raw_data")
    if how == "short":
        values = values[:-1]
    getattr(t, field).extend(values.astype(float if field.startswith(("float", "double"))
                                           else np.int64).tolist())


def _external(t, location: str, *, allow: bool = True, offset: str | None = "0",
              length: str | None = None, extra: dict | None = None,
              files: dict | None = None, data_file: str = "weights.bin") -> dict:
    """Move ``t``'s raw_data to ``data_file`` beside the model and point at ``location``."""
    raw = t.raw_data
    t.ClearField("raw_data")
    t.data_location = TP.EXTERNAL
    entries = {"location": location, "offset": offset,
               "length": str(len(raw)) if length is None else length, **(extra or {})}
    for k, v in entries.items():
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, v
    inside = {data_file: raw, "sub": "dir", "link.bin": ("link", "../outside.bin"),
              "loop.bin": ("link", "loop.bin"), "fifo.bin": "fifo"}
    return {"allow_external": allow, "files": {**inside, **(files or {})},
            "outside": {"outside.bin": raw}}


_LOCATIONS = ["../outside.bin", "../../etc/passwd", "/etc/passwd", "/dev/zero", "missing.bin",
              "", "sub", "link.bin", "loop.bin", "fifo.bin", "weights.bin\x00x",
              "sub/../weights.bin", "./weights.bin", "mutant.onnx", "x" * 5000]


def _external_edits(t) -> list[tuple[str, Callable[[Any], dict]]]:
    edits: list[tuple[str, Callable[[Any], dict]]] = [
        ("external data, not allowed", lambda x: _external(x, "weights.bin", allow=False)),
        ("external data, allowed", lambda x: _external(x, "weights.bin")),
        # the model's own data file (mutant.onnx.data) is read without being allowed
        ("own data file, not allowed", lambda x: _external(
            x, "mutant.onnx.data", allow=False, data_file="mutant.onnx.data")),
        ("own data file a link out, not allowed", lambda x: _external(
            x, "mutant.onnx.data", allow=False,
            files={"mutant.onnx.data": ("link", "../outside.bin")})),
        ("own data file's name in a subfolder, not allowed", lambda x: _external(
            x, "sub/mutant.onnx.data", allow=False, data_file="mutant.onnx.data"))]
    for loc in _LOCATIONS:
        edits.append((f"external location {loc[:40]!r}", lambda x, loc=loc: _external(x, loc)))
    for off in ("-1", "x", str(2**70), "1", "99999", None, " 0", "0x10"):
        edits.append((f"external offset {off!r}", lambda x, off=off: _external(
            x, "weights.bin", offset=off)))
    for length in ("0", "-5", str(2**62), "1", "x", str(2**70)):
        edits.append((f"external length {length!r}", lambda x, n=length: _external(
            x, "weights.bin", length=n)))
    edits += [("external key 'checksum'", lambda x: _external(
                  x, "weights.bin", extra={"checksum": "00"})),
              ("external key repeated", lambda x: _external(
                  x, "weights.bin", extra={"location ": "b"})),
              ("external data of bfloat16", lambda x: (
                  setattr(x, "data_type", TP.BFLOAT16), _external(x, "weights.bin"))[1]),
              ("external data, dims 2**40", lambda x: (
                  x.dims.__setitem__(0, _HUGE), _external(x, "weights.bin"))[1])]
    return edits


def _rename(m, old: str, new: str) -> None:
    """Rename tensor ``old`` everywhere it appears."""
    g = m.graph
    for n in g.node:
        for seq in (n.input, n.output):
            for i, name in enumerate(seq):
                if name == old:
                    seq[i] = new
    for seq in (g.input, g.output, g.value_info, g.initializer):
        for v in seq:
            if v.name == old:
                v.name = new


def _value_info_edits(vi) -> list[tuple[str, Callable[[Any], None]]]:
    edits: list[tuple[str, Callable[[Any], None]]] = [
        ("no type", lambda v: v.ClearField("type")),
        ("no shape", lambda v: v.type.tensor_type.ClearField("shape")),
        ("a sequence type", lambda v: (v.ClearField("type"), setattr(
            v.type.sequence_type.elem_type.tensor_type, "elem_type", TP.FLOAT))),
        ("rank + 1", lambda v: v.type.tensor_type.shape.dim.add().__setattr__("dim_value", 1)),
        ("rank 0", lambda v: v.type.tensor_type.shape.ClearField("dim"))]
    for d in _DTYPES:
        edits.append((f"elem_type {d}", lambda v, d=d: setattr(
            v.type.tensor_type, "elem_type", d)))
    for j in range(len(vi.type.tensor_type.shape.dim)):
        for value in (0, -1, _HUGE, 2**31):
            edits.append((f"dim {j} = {value}", lambda v, j=j, value=value: setattr(
                v.type.tensor_type.shape.dim[j], "dim_value", value)))
        for param in ("", "a b", "1x", "N" * 300, "batch"):
            edits.append((f"dim {j} = {param[:12]!r}", lambda v, j=j, p=param: setattr(
                v.type.tensor_type.shape.dim[j], "dim_param", p)))
    return edits


def _nodes_edit(count: int, name: str | None) -> Edit:
    """The model with a chain of ``count`` Identity nodes before its first node's input."""
    def edit(m):
        g = m.graph
        first = g.input[0].name
        nodes = [helper.make_node("Identity", [first if i == 0 else f"chain{i - 1}"],
                                  [f"chain{i}"], name=name if name is not None else "")
                 for i in range(count)]
        for n in g.node:
            for i, t in enumerate(n.input):
                if t == first:
                    n.input[i] = f"chain{count - 1}"
        old = list(g.node)
        del g.node[:]
        g.node.extend(nodes + old)
    return edit


def _nested_if(depth: int) -> Edit:
    """An If whose then-branch is an If ... ``depth`` deep (each else-branch one Identity)."""
    def edit(m):
        elem = m.graph.output[0].type.tensor_type.elem_type

        def branch(level: int, node) -> Any:
            return helper.make_graph([node], f"b{level}", [], [
                helper.make_tensor_value_info(f"deep{level}", elem, None)])

        body = None
        for level in range(depth):
            leaf = branch(level, helper.make_node("Identity", ["deep_in"], [f"deep{level}"]))
            body = leaf if body is None else branch(level, helper.make_node(
                "If", ["cond"], [f"deep{level}"], then_branch=body, else_branch=leaf))
        m.graph.node.append(helper.make_node("If", ["cond"], ["deep_out"], then_branch=body,
                                             else_branch=body))
        m.graph.initializer.append(helper.make_tensor("cond", TP.BOOL, [], [True]))
        m.graph.initializer.append(helper.make_tensor("deep_in", TP.FLOAT, [1], [1.0]))
    return edit


def _nested_loop(depth: int, trips: int) -> Edit:
    """A Loop of ``trips`` iterations whose body is such a Loop ... ``depth`` deep, the
    innermost an Identity of the carried value (``trips ** depth`` iterations unrolled)."""
    def edit(m):
        def body(level: int, node) -> Any:
            return helper.make_graph([node, helper.make_node("Identity", ["trips"],
                                                             [f"cond{level}"])], f"l{level}", [
                helper.make_tensor_value_info(f"it{level}", TP.INT64, []),
                helper.make_tensor_value_info(f"cin{level}", TP.BOOL, []),
                helper.make_tensor_value_info(f"v{level}", TP.FLOAT, None)], [
                helper.make_tensor_value_info(f"cond{level}", TP.BOOL, None),
                helper.make_tensor_value_info(f"loop{level}", TP.FLOAT, None)])

        g = body(0, helper.make_node("Identity", ["v0"], ["loop0"]))
        for level in range(1, depth):
            g = body(level, helper.make_node("Loop", ["trips", "", f"v{level}"],
                                             [f"loop{level}"], body=g))
        m.graph.node.append(helper.make_node("Loop", ["trips", "", "deep_in"], ["deep_out"],
                                             body=g))
        m.graph.initializer.append(helper.make_tensor("trips", TP.INT64, [], [trips]))
        m.graph.initializer.append(helper.make_tensor("deep_in", TP.FLOAT, [1], [1.0]))
    return edit


def _nested_scan(depth: int, steps: int) -> Edit:
    """A Scan over ``steps`` rows whose body is such a Scan over each row ... ``depth`` deep,
    the innermost adding each element to a state (``steps ** depth`` steps unrolled)."""
    def edit(m):
        f32 = TP.FLOAT
        g = helper.make_graph([helper.make_node("Add", ["s0", "e0"], ["t0"]),
                               helper.make_node("Identity", ["t0"], ["o0"])], "s0", [
            helper.make_tensor_value_info("s0", f32, []),
            helper.make_tensor_value_info("e0", f32, [])], [
            helper.make_tensor_value_info("t0", f32, []),
            helper.make_tensor_value_info("o0", f32, [])])
        for level in range(1, depth):
            g = helper.make_graph([helper.make_node(
                "Scan", [f"s{level}", f"e{level}"], [f"t{level}", f"o{level}"], body=g,
                num_scan_inputs=1)], f"s{level}", [
                helper.make_tensor_value_info(f"s{level}", f32, []),
                helper.make_tensor_value_info(f"e{level}", f32, [steps] * level)], [
                helper.make_tensor_value_info(f"t{level}", f32, []),
                helper.make_tensor_value_info(f"o{level}", f32, [steps] * level)])
        m.graph.node.append(helper.make_node("Scan", ["scan_state", "scan_in"], ["scan_out",
                                                                                   "scan_rows"],
                                             body=g, num_scan_inputs=1))
        m.graph.initializer.append(helper.make_tensor("scan_state", f32, [], [0.0]))
        m.graph.input.append(helper.make_tensor_value_info("scan_in", f32, [steps] * depth))
    return edit


def _sequence_loop(trips: int, how: str = "") -> Edit:
    """A list appended to in a Loop of ``trips`` iterations and concatenated after it (as
    torch.jit.script's ``rows.append`` exports); ``how``: "output" (the sequence a graph
    output), "erase" (erased at position ``trips``, past its end), "relu" (the sequence into
    a Relu), "empty" (concatenated before the Loop, empty)."""
    def edit(m):
        body = helper.make_graph([
            helper.make_node("SequenceInsert", ["seq_in", "deep_in"], ["seq_out"]),
            helper.make_node("Identity", ["seq_c"], ["seq_co"])], "seq_body", [
            helper.make_tensor_value_info("seq_i", TP.INT64, []),
            helper.make_tensor_value_info("seq_c", TP.BOOL, []),
            helper.make_tensor_sequence_value_info("seq_in", TP.FLOAT, None)], [
            helper.make_tensor_value_info("seq_co", TP.BOOL, []),
            helper.make_tensor_sequence_value_info("seq_out", TP.FLOAT, None)])
        empty = helper.make_node("SequenceEmpty", [], ["seq_empty"])
        loop = helper.make_node("Loop", ["trips", "", "seq_empty"], ["seq"], body=body)
        read = {"output": [], "relu": [helper.make_node("Relu", ["seq"], ["deep_out"])],
                "erase": [helper.make_node("SequenceErase", ["seq", "trips"], ["seq2"]),
                          helper.make_node("ConcatFromSequence", ["seq2"], ["deep_out"],
                                           axis=0)],
                "empty": [helper.make_node("ConcatFromSequence", ["seq_empty"], ["deep_out"],
                                           axis=0)]}.get(how, [helper.make_node(
                                               "ConcatFromSequence", ["seq"], ["deep_out"],
                                               axis=0, new_axis=1)])
        m.graph.node.extend([empty, loop, *read])
        if how == "output":
            m.graph.output.append(helper.make_tensor_sequence_value_info("seq", TP.FLOAT, None))
        m.graph.initializer.append(helper.make_tensor("trips", TP.INT64, [], [trips]))
        m.graph.initializer.append(helper.make_tensor("deep_in", TP.FLOAT, [1], [1.0]))
    return edit


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    key, n, varint = (number << 3) | 2, len(payload), b""
    while True:
        varint += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return bytes([key]) + varint + payload


def _deeper_than_protobuf_allows(m) -> dict:
    """The model's bytes with a node whose graph attribute nests 300 graphs deep (protobuf's
    own serializer refuses to write that; a hostile file need not)."""
    graph = b""
    for _ in range(300):  # GraphProto.node (1) -> NodeProto.attribute (5) -> .g (6)
        graph = _field(1, _field(5, _field(1, b"g") + _field(6, graph) + b"\x20\x05"))
    return {"replace": m.SerializeToString() + _field(7, graph)}


def _catalogue(name: str, model) -> list[tuple[str, Edit]]:
    """Every structure-aware mutation of ``model``: (label, edit)."""
    out: list[tuple[str, Edit]] = []
    g = model.graph

    def add(label: str, edit: Edit) -> None:
        out.append((f"{name}: {label}", edit))

    # tensors: initializers and Constant values
    tensors: list[tuple[str, Callable]] = [
        (f"initializer {t.name!r}", lambda m, k=k: m.graph.initializer[k])
        for k, t in enumerate(g.initializer)]
    for i, n in enumerate(g.node):
        for k, a in enumerate(n.attribute):
            if n.op_type == "Constant" and a.type == A.TENSOR:
                tensors.append((f"Constant {n.output[0]!r} value",
                                lambda m, i=i, k=k: m.graph.node[i].attribute[k].t))
    for what, get in tensors:
        for label, edit in _tensor_edits(get(model)):
            add(f"{what} {label}", lambda m, get=get, edit=edit: edit(get(m)))
        if get(model).HasField("raw_data"):
            for label, edit in _external_edits(get(model)):
                add(f"{what} {label}", lambda m, get=get, edit=edit: edit(get(m)))
    inputs = [v.name for v in g.input]
    for k, t in enumerate(g.initializer):
        other = g.initializer[(k + 1) % len(g.initializer)].name
        add(f"initializer {t.name!r} removed", lambda m, k=k: m.graph.initializer.__delitem__(k))
        add(f"initializer {t.name!r} duplicated",
            lambda m, k=k: m.graph.initializer.append(m.graph.initializer[k]))
        add(f"initializer {t.name!r} renamed", lambda m, k=k: setattr(
            m.graph.initializer[k], "name", "renamed"))
        add(f"initializer {t.name!r} renamed to {other!r}", lambda m, k=k, o=other: setattr(
            m.graph.initializer[k], "name", o))
        add(f"initializer {t.name!r} renamed to input {inputs[0]!r}",
            lambda m, k=k, o=inputs[0]: setattr(m.graph.initializer[k], "name", o))
        add(f"initializer {t.name!r} also a graph input", lambda m, k=k: m.graph.input.append(
            helper.make_tensor_value_info(m.graph.initializer[k].name, TP.FLOAT, [1])))
        add(f"initializer {t.name!r} as a sparse initializer", lambda m, k=k: _sparse(m, k))

    # nodes
    produced = [o for n in g.node for o in n.output]
    for i, n in enumerate(g.node):
        where = f"node {i} ({n.op_type} {n.name or n.output[0]!r})"
        later = next((o for m_ in g.node[i + 1:] for o in m_.output), None)
        for j in range(len(n.input)):
            for new in ["nope", "", n.output[0], later, inputs[0], g.initializer[0].name
                        if g.initializer else None]:
                if new is not None:
                    add(f"{where} input {j} = {new!r}", lambda m, i=i, j=j, v=new: m.graph.node[
                        i].input.__setitem__(j, v))
        add(f"{where} last input dropped", lambda m, i=i: m.graph.node[i].input.__delitem__(-1)
            if m.graph.node[i].input else None)
        add(f"{where} extra input", lambda m, i=i: m.graph.node[i].input.append(
            m.graph.node[i].input[0] if m.graph.node[i].input else "nope"))
        add(f"{where} four extra inputs", lambda m, i=i: m.graph.node[i].input.extend(
            [inputs[0]] * 4))
        add(f"{where} output duplicated", lambda m, i=i: m.graph.node[i].output.append(
            m.graph.node[i].output[0]))
        add(f"{where} extra output", lambda m, i=i: m.graph.node[i].output.append("extra_out"))
        if i:
            add(f"{where} output = previous node's", lambda m, i=i: m.graph.node[i].output
                .__setitem__(0, m.graph.node[i - 1].output[0]))
        add(f"{where} output = input {inputs[0]!r}", lambda m, i=i: m.graph.node[i].output
            .__setitem__(0, inputs[0]))
        add(f"{where} output = ''", lambda m, i=i: m.graph.node[i].output.__setitem__(0, ""))
        add(f"{where} no outputs", lambda m, i=i: m.graph.node[i].ClearField("output"))
        for op in _SWAPS:
            if op != n.op_type:
                add(f"{where} op -> {op!r}", lambda m, i=i, op=op: setattr(
                    m.graph.node[i], "op_type", op))
        for domain in ("com.example", "ai.onnx.ml", "ai.onnx"):
            add(f"{where} domain {domain!r}", lambda m, i=i, d=domain: setattr(
                m.graph.node[i], "domain", d))
        for odd in _ODD_NAMES:
            add(f"{where} name {odd[:12]!r}", lambda m, i=i, v=odd: setattr(
                m.graph.node[i], "name", v))
        add(f"{where} removed", lambda m, i=i: m.graph.node.__delitem__(i))
        add(f"{where} duplicated", lambda m, i=i: m.graph.node.insert(i + 1, m.graph.node[i]))
        add(f"{where} moved last", lambda m, i=i: (m.graph.node.append(m.graph.node[i]),
                                                    m.graph.node.__delitem__(i)))
        for k, a in enumerate(n.attribute):
            if n.op_type == "Constant":
                continue
            at = f"{where} attribute {a.name}"
            add(f"{at} removed", lambda m, i=i, k=k: m.graph.node[i].attribute.__delitem__(k))
            add(f"{at} repeated", lambda m, i=i, k=k: m.graph.node[i].attribute.append(
                m.graph.node[i].attribute[k]))
            add(f"{at} type INTS, value INT", lambda m, i=i, k=k: setattr(
                m.graph.node[i].attribute[k], "type", A.INTS if m.graph.node[i].attribute[
                    k].type != A.INTS else A.INT))
            for label, value in _values_for(a):
                add(f"{at} = {label}", lambda m, i=i, k=k, v=value: m.graph.node[i].attribute[
                    k].CopyFrom(helper.make_attribute(m.graph.node[i].attribute[k].name, v)))
        names = {a.name for a in n.attribute}
        for attr, values in _ADDED.items():
            if attr in names or n.op_type == "Constant":
                continue
            for value in values:
                add(f"{where} added {attr}={value!r}", lambda m, i=i, a=attr, v=value: m.graph
                    .node[i].attribute.append(helper.make_attribute(a, v)))
        if i:
            add(f"{where} swapped with the previous node", lambda m, i=i: _swap(m, i))
        add(f"{where} reads its own output (a cycle)", lambda m, i=i: m.graph.node[i].input
            .append(m.graph.node[i].output[0]))
    if len(g.node) > 2:
        add("a two-node cycle", lambda m: m.graph.node[0].input.__setitem__(
            0, m.graph.node[1].output[0]))

    # graph inputs and outputs
    for k, vi in enumerate(g.input):
        for label, edit in _value_info_edits(vi):
            add(f"input {vi.name!r} {label}", lambda m, k=k, e=edit: e(m.graph.input[k]))
        add(f"input {vi.name!r} removed", lambda m, k=k: m.graph.input.__delitem__(k))
        add(f"input {vi.name!r} duplicated", lambda m, k=k: m.graph.input.append(
            m.graph.input[k]))
        add(f"input {vi.name!r} renamed", lambda m, k=k: setattr(m.graph.input[k], "name",
                                                                 "renamed"))
    for k, vi in enumerate(g.output):
        for label, edit in _value_info_edits(vi):
            add(f"output {vi.name!r} {label}", lambda m, k=k, e=edit: e(m.graph.output[k]))
        add(f"output {vi.name!r} duplicated", lambda m, k=k: m.graph.output.append(
            m.graph.output[k]))
        for other in [inputs[0], g.initializer[0].name if g.initializer else None, "nope",
                      produced[0]]:
            if other is not None:
                add(f"output {vi.name!r} renamed {other!r}", lambda m, k=k, o=other: setattr(
                    m.graph.output[k], "name", o))
    add("no outputs", lambda m: m.graph.ClearField("output"))
    add("no inputs", lambda m: m.graph.ClearField("input"))
    add("no nodes", lambda m: m.graph.ClearField("node"))
    add("no initializers", lambda m: m.graph.ClearField("initializer"))
    add("only the first node", lambda m: m.graph.node.__delitem__(slice(1, None)))
    for t in produced[:-1]:
        add(f"value_info {t!r} of a wrong shape", lambda m, t=t: m.graph.value_info.append(
            helper.make_tensor_value_info(t, TP.FLOAT, [7, 7, 7])))
        add(f"value_info {t!r} of a wrong type", lambda m, t=t: m.graph.value_info.append(
            helper.make_tensor_value_info(t, TP.INT8, None)))
        add(f"intermediate {t!r} also an output", lambda m, t=t: m.graph.output.append(
            helper.make_tensor_value_info(t, TP.FLOAT, None)))

    # names: a tensor renamed everywhere
    subjects = [inputs[0], g.initializer[0].name if g.initializer else None, produced[0],
                g.output[0].name]
    for old in [s for s in subjects if s]:
        for new in _ODD_NAMES + [s for s in subjects if s and s != old]:
            add(f"tensor {old!r} renamed {new[:12]!r} everywhere",
                lambda m, o=old, n=new: _rename(m, o, n))

    # the model
    for version in (None, 0, 1, 12, 24, 28, 29, 999, -1):
        add(f"default opset {version}", lambda m, v=version: _opset(m, v))
    add("default opset twice", lambda m: m.opset_import.append(helper.make_opsetid("", 13)))
    add("opsets '' and 'ai.onnx'", lambda m: m.opset_import.append(
        helper.make_opsetid("ai.onnx", 13)))
    add("a custom-domain opset", lambda m: m.opset_import.append(
        helper.make_opsetid("com.example", 1)))
    for ir in (0, 1, 3, 999, -1):
        add(f"ir_version {ir}", lambda m, v=ir: setattr(m, "ir_version", v))
    add("a 1 MB doc_string", lambda m: setattr(m.graph, "doc_string", "d" * 2**20))
    add("10,000 metadata entries", lambda m: [m.metadata_props.add() for _ in range(10_000)])
    add("a local function called", _local_function)
    for label, edit in _function_edits(model):
        add(label, edit)
    add("If nested 30 deep", _nested_if(30))
    add("If nested 3 deep", _nested_if(3))
    add("Loop nested 30 deep", _nested_loop(30, 1))
    add("Loop nested 3 deep of 2 iterations", _nested_loop(3, 2))
    add("Loop nested 12 deep of 2 iterations", _nested_loop(12, 2))
    add("Loop of 2^62 iterations", _nested_loop(1, 2**62))
    add("Scan nested 30 deep", _nested_scan(30, 1))
    add("Scan nested 3 deep of 2 steps", _nested_scan(3, 2))
    add("Scan nested 13 deep of 2 steps", _nested_scan(13, 2))
    add("Scan of 2^40 steps", _nested_scan(1, 2**40))
    add("a list appended to in a Loop of 3", _sequence_loop(3))
    add("a list appended to in a Loop of 2^62", _sequence_loop(2**62))
    for how in ("output", "erase", "relu", "empty"):
        add(f"a list appended to in a Loop, {how}", _sequence_loop(2, how))
    add("graphs nested 300 deep", _deeper_than_protobuf_allows)
    add("100,001 Identity nodes", _nodes_edit(100_001, None))
    add("20,000 Identity nodes of one name", _nodes_edit(20_000, "same"))
    add("5,000 unnamed Identity nodes", _nodes_edit(5_000, ""))
    add("a training_info", lambda m: m.training_info.add().algorithm.CopyFrom(m.graph))
    return out


def _sparse(m, k: int) -> None:
    t = m.graph.initializer[k]
    s = m.graph.sparse_initializer.add()
    s.values.CopyFrom(t)
    s.values.ClearField("dims")
    s.values.dims.append(1)
    s.indices.CopyFrom(helper.make_tensor(t.name + "_idx", TP.INT64, [1], [_HUGE]))
    s.dims.extend(t.dims)
    del m.graph.initializer[k]


def _swap(m, i: int) -> None:
    a, b = type(m.graph.node[i])(), type(m.graph.node[i])()
    a.CopyFrom(m.graph.node[i])
    b.CopyFrom(m.graph.node[i - 1])
    m.graph.node[i - 1].CopyFrom(a)
    m.graph.node[i].CopyFrom(b)


def _opset(m, version: int | None) -> None:
    keep = [o for o in m.opset_import if o.domain not in ("", "ai.onnx")]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    if version is not None:
        m.opset_import.append(helper.make_opsetid("", version))


def _local_function(m) -> None:
    f = helper.make_function("local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                             [helper.make_opsetid("", 17)])
    m.functions.append(f)
    m.opset_import.append(helper.make_opsetid("local", 1))
    out = m.graph.output[0].name
    for n in m.graph.node:
        for i, t in enumerate(n.output):
            if t == out:
                n.output[i] = "before_f"
    m.graph.node.append(helper.make_node("F", ["before_f"], [out], domain="local"))


def _function_edits(model) -> list[tuple[str, Edit]]:
    """Edits of the model's own functions (the ``functions`` seed's): of each body node's
    inputs, outputs, op, domain and attributes (``ref_attr_name`` pointed elsewhere), and of
    each function's signature, defaults, opsets, name and domain; a function made to call
    itself."""
    out: list[tuple[str, Edit]] = []
    for k, f in enumerate(model.functions):
        def fn(m, k=k):
            return m.functions[k]

        def add(label: str, edit: Edit, f=f) -> None:
            out.append((f"function {f.name!r} {label}", edit))

        for i, n in enumerate(f.node):
            where = f"node {i} ({n.op_type})"
            for j in range(len(n.input)):
                for new in ["nope", "", n.output[0], f.input[0], f.output[0]]:
                    add(f"{where} input {j} = {new!r}", lambda m, i=i, j=j, v=new, fn=fn: fn(
                        m).node[i].input.__setitem__(j, v))
            for new in ["", f.input[0], f.node[i - 1].output[0] if i else "dup"]:
                add(f"{where} output = {new!r}", lambda m, i=i, v=new, fn=fn: fn(m).node[
                    i].output.__setitem__(0, v))
            for op in _SWAPS[:12] + [f.name]:
                add(f"{where} op -> {op!r}", lambda m, i=i, op=op, fn=fn: setattr(
                    fn(m).node[i], "op_type", op))
            for domain in ("com.example", f.domain, ""):
                add(f"{where} domain {domain!r}", lambda m, i=i, d=domain, fn=fn: setattr(
                    fn(m).node[i], "domain", d))
            add(f"{where} removed", lambda m, i=i, fn=fn: fn(m).node.__delitem__(i))
            add(f"{where} duplicated", lambda m, i=i, fn=fn: fn(m).node.insert(
                i + 1, fn(m).node[i]))
            add(f"{where} extra input", lambda m, i=i, fn=fn: fn(m).node[i].input.append(
                fn(m).input[0]))
            for a_, a in enumerate(n.attribute):
                at = f"{where} attribute {a.name}"
                add(f"{at} removed", lambda m, i=i, a_=a_, fn=fn: fn(m).node[i].attribute
                    .__delitem__(a_))
                for ref in ["missing", *f.attribute, *(d.name for d in f.attribute_proto)]:
                    add(f"{at} refers to {ref!r}", lambda m, i=i, a_=a_, r=ref, fn=fn: setattr(
                        fn(m).node[i].attribute[a_], "ref_attr_name", r))
                for label, value in _values_for(a)[:6]:
                    add(f"{at} = {label}", lambda m, i=i, a_=a_, v=value, fn=fn: fn(m).node[
                        i].attribute[a_].CopyFrom(helper.make_attribute(a.name, v)))
        for what in ("input", "output"):
            add(f"first {what} removed", lambda m, w=what, fn=fn: getattr(fn(m), w)
                .__delitem__(0))
            add(f"{what} added", lambda m, w=what, fn=fn: getattr(fn(m), w).append("spare"))
            add(f"first {what} renamed", lambda m, w=what, fn=fn: getattr(fn(m), w)
                .__setitem__(0, "renamed"))
        add("first input named as its output", lambda m, fn=fn: fn(m).input.__setitem__(
            0, fn(m).output[0]))
        for d_, d in enumerate(f.attribute_proto):
            add(f"default {d.name} removed", lambda m, d_=d_, fn=fn: fn(m).attribute_proto
                .__delitem__(d_))
            for label, value in _values_for(d)[:8]:
                add(f"default {d.name} = {label}", lambda m, d_=d_, v=value, d=d, fn=fn: fn(
                    m).attribute_proto[d_].CopyFrom(helper.make_attribute(d.name, v)))
        add("attribute declared twice", lambda m, fn=fn: fn(m).attribute.append(
            fn(m).attribute[0] if fn(m).attribute else "a"))
        for field, value in (("name", "Relu"), ("name", "Other"), ("domain", ""),
                             ("domain", "com.microsoft"), ("overload", "o")):
            add(f"{field} = {value!r}", lambda m, f_=field, v=value, fn=fn: setattr(
                fn(m), f_, v))
        add("defined twice", lambda m, fn=fn: m.functions.append(fn(m)))
        add("calls itself", lambda m, f=f, fn=fn: fn(m).node.append(helper.make_node(
            f.name, list(f.input), ["again"], domain=f.domain)))
        add("no nodes", lambda m, fn=fn: fn(m).ClearField("node"))
        add("no opsets", lambda m, fn=fn: fn(m).ClearField("opset_import"))
        for version in (11, 999):
            add(f"default opset {version}", lambda m, v=version, fn=fn: [
                setattr(o, "version", v) for o in fn(m).opset_import if o.domain == ""])
        add("a value_info of a wrong type", lambda m, f=f, fn=fn: fn(m).value_info.append(
            helper.make_tensor_value_info(f.node[0].output[0], TP.INT8, [7])))
    return out


# --- byte-level mutations ------------------------------------------------------------------------


def _byte_mutant(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    b = bytearray(data)
    kind = int(rng.integers(6))
    if kind == 0:
        n = 1 if rng.random() < 0.6 else int(rng.integers(2, 9))
        for _ in range(n):
            b[int(rng.integers(len(b)))] ^= 1 << int(rng.integers(8))
        return f"{n} bit flip(s)", bytes(b)
    if kind == 1:
        i = int(rng.integers(len(b)))
        b[i] = int(rng.choice([0, 0xFF, 0x7F, 0x80, int(rng.integers(256))]))
        return f"byte {i} overwritten", bytes(b)
    if kind == 2:
        n = int(rng.integers(len(b)))
        return f"truncated to {n}", bytes(b[:n])
    if kind == 3:
        i, n = int(rng.integers(len(b) + 1)), int(rng.integers(1, 17))
        b[i:i] = rng.bytes(n)
        return f"{n} random bytes inserted at {i}", bytes(b)
    i = int(rng.integers(len(b)))
    n = int(rng.integers(1, min(256, len(b) - i) + 1))
    if kind == 4:
        j = int(rng.integers(len(b) + 1))
        b[j:j] = b[i:i + n]
        return f"span {i}+{n} duplicated at {j}", bytes(b)
    del b[i:i + n]
    return f"span {i}+{n} deleted", bytes(b)


# --- the child: every mutant through the builder -------------------------------------------------


def _mutants(seeds: dict[str, bytes], config: dict) -> Iterator[tuple[str, str, bytes, dict]]:
    """(id, label, file bytes, options) of every mutant of this run, in order."""
    models = {k: onnx.ModelProto.FromString(v) for k, v in seeds.items()}
    catalogue = [(label, seed, edit) for seed, model in models.items()
                 for label, edit in _catalogue(seed, model)]
    only = set(config["only"])
    chosen = range(len(catalogue))
    if config["structural"] != "all":
        n = min(int(config["structural"]), len(catalogue))
        chosen = sorted(np.random.default_rng(config["seed"]).choice(len(catalogue), n,
                                                                     replace=False).tolist())
    yield "count", f"{len(catalogue)} structural mutations in the catalogue", b"", {}
    for i in chosen:
        mid = f"s{i}"
        if only and mid not in only:
            continue
        label, seed, edit = catalogue[i]
        model = onnx.ModelProto()
        model.CopyFrom(models[seed])
        try:
            options = edit(model)
            options = options if isinstance(options, dict) else {}
            data = options.pop("replace", None) or model.SerializeToString()
        except Exception as exc:  # noqa: BLE001 - not expressible in protobuf: no mutant
            yield mid, f"{label} (skipped: {exc})", b"", {"skip": True}
            continue
        yield mid, label, data, options
    names = sorted(seeds)
    for i in range(config["mutants"]):
        mid = f"b{i}"
        if only and mid not in only:
            continue
        rng = np.random.default_rng([config["seed"], i])
        seed = names[int(rng.integers(len(names)))]
        label, data = _byte_mutant(seeds[seed], rng)
        yield mid, f"{seed}: {label}", data, {}


def _lay_out(folder: Path, data: bytes, options: dict) -> Path:
    """Write the mutant as ``folder/model/mutant.onnx`` with its side files."""
    if folder.exists():
        shutil.rmtree(folder)
    inner = folder / "model"
    inner.mkdir(parents=True)
    for name, content in options.get("outside", {}).items():
        (folder / name).write_bytes(content)
    for name, content in options.get("files", {}).items():
        if content == "dir":
            (inner / name).mkdir()
        elif content == "fifo":
            os.mkfifo(inner / name)
        elif isinstance(content, tuple):
            (inner / name).symlink_to(content[1])
        else:
            (inner / name).write_bytes(content)
    path = inner / "mutant.onnx"
    path.write_bytes(data)
    return path


def _check_built(out: Path, key, trust) -> None:
    from plugin_host.artifacts import load_verified, sign_artifact
    from plugins.numpy_backend import NumpyBackend

    sign_artifact(out, key)
    loaded = load_verified(out, trust=trust, rollback=None, backends={"numpy", "onnxruntime"})
    loaded.check_golden(NumpyBackend())


def _on_alarm(signum, frame):
    raise _Hang("the mutant did not finish within the alarm")


def child(config_path: str) -> None:
    """Run every mutant of the configuration; one JSON line per event on the original stdout."""
    config = json.loads(Path(config_path).read_text())
    resource.setrlimit(resource.RLIMIT_AS, (config["address_space"],) * 2)
    report = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, not into the report
    from abi.errors import PluginHostError
    from plugin_host.artifacts import TrustStore, generate_key
    from plugin_host.errors import ModelImportError
    from plugin_host.onnx_import import build_onnx_artifact

    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    seeds = {k: Path(v).read_bytes() for k, v in config["seeds"].items()}
    work = Path(config["work"])
    failures = work / "failures"
    signal.signal(signal.SIGALRM, _on_alarm)

    def send(**record):
        report.write(json.dumps(record) + "\n")

    for mid, label, data, options in _mutants(seeds, config):
        if mid == "count" or options.get("skip"):
            send(note=label)
            continue
        send(start=mid, label=label)
        path = _lay_out(work / "current", data, options)
        out = work / "current" / "out.pha"
        record = {"id": mid}
        signal.setitimer(signal.ITIMER_REAL, MAX_SECONDS_PER_MUTANT * 4)
        t0 = time.perf_counter()
        try:
            build_onnx_artifact(path, out, backends=("numpy", "onnxruntime"),
                                allow_external_data=options.get("allow_external", False),
                                upcast_float16=True, upcast_bfloat16=True,
                                onnxruntime_optimized=zlib.crc32(mid.encode()) % 4 == 0)
            _check_built(out, key, trust)
            record.update(outcome="built")
        except PluginHostError as exc:
            message = str(exc)
            record.update(outcome="refused", error=type(exc).__name__, message=message[:300])
            if not message or "\n" in message or len(message) > 2000 or GENERIC.search(message):
                record.update(outcome="failed", why="refusal message is not one clear line")
            elif not isinstance(exc, ModelImportError):  # a later stage caught what it let by
                record.update(outcome="failed", why="refused after the import, not by it")
        except BaseException as exc:  # noqa: BLE001 - every other way out is the finding
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.update(outcome="failed", error=type(exc).__name__, message=str(exc)[:300],
                          why="not a PluginHostError",
                          trace=traceback.format_exc(limit=-6)[-3000:])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        record["seconds"] = round(time.perf_counter() - t0, 4)
        record["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        if record["outcome"] != "failed" and record["seconds"] > MAX_SECONDS_PER_MUTANT:
            record.update(outcome="failed", why=f"took {record['seconds']} s")
        if record["outcome"] == "failed":
            shutil.copytree(work / "current", failures / mid, symlinks=True,
                            ignore=shutil.ignore_patterns("fifo.bin"))
        send(**record)
    send(done=True, maxrss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# --- the parent: seeds, the child, the verdict ---------------------------------------------------


def _export_seeds(folder: Path) -> dict[str, str]:
    from .conftest import export, torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(3)
            self.emb = torch.nn.Embedding(5, 2)
            self.fc = torch.nn.Linear(3 * 2 * 2 + 4, 4)

        def forward(self, x, ids):
            y = torch.relu(self.bn(self.conv(x)))
            y = torch.nn.functional.max_pool2d(y, 2).reshape(1, -1)
            e = self.emb(ids).reshape(1, -1)
            return torch.softmax(self.fc(torch.cat([y, e], 1)), -1)

    class Glue(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(2, 2, 2, stride=2)
            self.norm = torch.nn.LayerNorm(16)
            self.proj = torch.nn.Linear(16, 8)

        def forward(self, x):
            y = torch.nn.functional.avg_pool2d(self.up(x), 2)
            y = torch.nn.functional.pad(y, (1, 1, 1, 1))[:, :, 1:5, 1:5].reshape(1, 2, 16)
            a, b = self.proj(self.norm(y)).split([4, 4], dim=-1)
            y = torch.tanh(a * torch.sigmoid(b)).mean(-1, keepdim=True)
            return torch.clamp(y, 0.0, 1.0)

    class Math(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.prelu = torch.nn.PReLU(2)

        def forward(self, x):
            f = torch.nn.functional
            a = f.elu(x, 0.5) + f.leaky_relu(x, 0.1) + f.hardsigmoid(x) + self.prelu(x)
            b = torch.sqrt(torch.abs(x) + 1.0) * torch.log(f.softplus(x) + 1.0)
            c = torch.where(x > 0.0, torch.pow(x, 2.0), torch.maximum(torch.exp(-x), x))
            a = a.clone()
            a[:, 0] = b[:, 1] * 2.0  # a ScatterND
            top = torch.zeros_like(x).scatter(3, torch.topk(x, 2, dim=3).indices, 1.0)
            best = torch.zeros(4, 4)  # a ScatterND of two coordinates, at run-time indices
            best[torch.arange(4), torch.argmax(x[0, 1], 1)] = 0.5
            return (torch.round(a * 4.0) / 4.0 + b - torch.minimum(c, torch.erf(x)) * top
                    + best)

    class Shapes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 4, 1)
            self.lstm = torch.nn.LSTM(4, 3, batch_first=True)

        def forward(self, x, h0, c0):
            f = torch.nn.functional
            y = f.pixel_shuffle(f.interpolate(self.conv(x), scale_factor=2.0, mode="bilinear"), 2)
            y = f.log_softmax(y.view(y.size(0), 16, 16), -1)
            out, _ = self.lstm(y[:, 0:3, 0:4], (h0, c0))
            z = torch.sin(out[:, -1]) + y[:, 1, :3] * torch.linalg.vector_norm(out, dim=1)
            z = z + z[[-1]] * 0.5  # the last row: an index along the run-time batch
            return z.repeat(1, 2) + torch.argmin(y[:, 2], -1, keepdim=True).float()

    class Half(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
            self.norm = torch.nn.LayerNorm(4)
            self.fc = torch.nn.Linear(12, 5)

        def forward(self, x):
            y = self.norm(torch.relu(self.conv(x)))[:, :, 0]
            return torch.softmax(self.fc(y.reshape(1, 12)).float(), -1).half()

    class Legacy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
            self.lstm = torch.nn.LSTM(8, 3, batch_first=True)

        def forward(self, x):
            f = torch.nn.functional
            y = f.interpolate(self.conv(x), scale_factor=2.0, mode="nearest")
            a, b = y.split([2, 2], dim=1)
            seq = torch.softmax(a + b, 1)[:, :1].squeeze(1)  # (1, 6, 8)
            out, _ = self.lstm(seq)
            return out[:, -1]

    class Sequence(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = torch.nn.Embedding(20, 8), torch.nn.Embedding(16, 8)
            self.qk, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(8, 5)

        def forward(self, ids):
            n, t = ids.shape
            x = self.tok(ids) + self.pos(torch.arange(t))
            back = x.index_select(1, torch.arange(t - 1, -1, -1))  # a slice by -1
            x = x + back * 0.5 + torch.arange(0, 2 * t, 2)[None, :, None] * 0.1
            q, k = self.qk(x).view(n, t, 2, 2, 4).permute(2, 0, 3, 1, 4)
            s = q @ k.transpose(-1, -2) + torch.triu(torch.full((t, t), -1e4), 1)
            a = torch.softmax(s, -1) @ x.view(n, t, 2, 4).transpose(1, 2)
            tokens = a.transpose(1, 2).reshape(n * t, 8)  # split back into both, below
            return self.head(tokens).view(n, t, 5)[:, -1]

    class Grid(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.fc = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.conv(torch.nn.functional.pixel_shuffle(x, 2))  # (n, 4, 2h, 2w)
            n, c, h, w = y.shape
            tokens = self.fc(y.permute(0, 2, 3, 1).reshape(n * h * w, c))
            return tokens.view(n, h, w, c).mean(-1)  # split back into all three

    torch.manual_seed(0)
    grid = folder / "grid.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Grid().eval(), (torch.randn(1, 8, 2, 3),), str(grid), dynamo=False,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"},
                                        "y": {0: "batch", 1: "gh", 2: "gw"}})
    torch.manual_seed(0)
    sequence = folder / "sequence.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Sequence().eval(), (torch.tensor([[1, 3, 5]]),), str(sequence),
                          dynamo=False, input_names=["ids"], output_names=["y"],
                          dynamic_axes={"ids": {0: "batch", 1: "seq"}, "y": {0: "batch"}})
    shapes = folder / "shapes.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Shapes().eval(), (torch.randn(1, 2, 4, 4), torch.zeros(1, 1, 3),
                                            torch.zeros(1, 1, 3)), str(shapes), dynamo=False,
                          input_names=["x", "h0", "c0"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "h0": {1: "batch"},
                                        "c0": {1: "batch"}, "y": {0: "batch"}})
    math_ = export(Math(), [torch.randn(1, 2, 4, 4)], folder / "math.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    net = export(Net(), [torch.randn(1, 2, 4, 4), torch.tensor([[1, 3]])], folder / "net.onnx",
                 dynamo=False, fold=False, input_names=["x", "ids"], output_names=["y"])
    glue = export(Glue(), [torch.randn(1, 2, 4, 4)], folder / "glue.onnx", dynamo=False,
                  input_names=["x"], output_names=["y"])
    legacy = export(Legacy(), [torch.randn(1, 2, 3, 4)], folder / "legacy.onnx", dynamo=False,
                    opset=11, input_names=["x"], output_names=["y"])
    half = export(Half().half(), [torch.randn(1, 2, 4, 4).half()], folder / "half.onnx",
                  dynamo=False, input_names=["x"], output_names=["y"])
    return {"net": str(net), "glue": str(glue), "math": str(math_), "shapes": str(shapes),
            "legacy": str(legacy), "half": str(half), "sequence": str(sequence),
            "grid": str(grid), "newer": _newer_seed(folder), "wider": _wider_seed(folder),
            "scan": _scan_seed(folder), "deform": _deform_seed(folder),
            "cache": _cache_seed(folder), "scan8": _scan8_seed(folder),
            "tokens": _tokens_seed(folder), "functions": _functions_seed(folder),
            **_bert_seeds(folder), **_weight_only_seeds(folder), **_quantized_seeds(folder)}


def _scan_seed(folder: Path) -> str:
    """Scans, written with onnx.helper at opset 27 (torch writes none): LinearAttention with
    a decay (its ONNX function is a Scan whose body reads the function's values), then a Scan
    over its steps in reverse with a state, a body initializer and two scan outputs."""
    tp = onnx.TensorProto
    ins = [helper.make_tensor_value_info(n, tp.FLOAT, s) for n, s in (
        ("q", [1, 3, 4]), ("k", [1, 3, 4]), ("v", [1, 3, 4]), ("decay", [1, 3, 2]))]
    body = helper.make_graph(
        [helper.make_node("Mul", ["h", "w"], ["hw"]),
         helper.make_node("Add", ["hw", "row"], ["a"]),
         helper.make_node("Tanh", ["a"], ["h2"]),
         helper.make_node("ReduceSum", ["row"], ["total"], keepdims=0)], "step",
        [helper.make_tensor_value_info("h", tp.FLOAT, [4]),
         helper.make_tensor_value_info("row", tp.FLOAT, [4])],
        [helper.make_tensor_value_info("h2", tp.FLOAT, [4]),
         helper.make_tensor_value_info("a", tp.FLOAT, [4]),
         helper.make_tensor_value_info("total", tp.FLOAT, [])],
        [onnx.numpy_helper.from_array(np.float32([0.5, -0.5, 0.25, 1.0]), "w")])
    nodes = [
        helper.make_node("LinearAttention", ["q", "k", "v", "", "decay"], ["att", "state"],
                         name="linear", q_num_heads=2, kv_num_heads=2, update_rule="gated"),
        helper.make_node("Squeeze", ["att", "zero"], ["steps"], name="squeeze"),
        helper.make_node("Scan", ["h0", "steps"], ["h", "y", "totals"], name="scan", body=body,
                         num_scan_inputs=1, scan_input_directions=[1],
                         scan_output_axes=[-1, 0])]
    inits = [onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
             onnx.numpy_helper.from_array(np.zeros(4, np.float32), "h0")]
    graph = helper.make_graph(nodes, "scan", ins, [
        helper.make_tensor_value_info("h", tp.FLOAT, [4]),
        helper.make_tensor_value_info("y", tp.FLOAT, [4, 3]),
        helper.make_tensor_value_info("totals", tp.FLOAT, [3]),
        helper.make_tensor_value_info("state", tp.FLOAT, [1, 2, 2, 2])], inits)
    path = folder / "scan.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)]), path)
    return str(path)


def _deform_seed(folder: Path) -> str:
    """DeformConv with a mask and two offset groups over a run-time batch, then LpPool with
    ceil_mode; RoiAlign (of two points per bin, and adaptive) and MaxRoiPool of a run-time
    count of rois over one map: written with onnx.helper at opset 19 (torch writes none of
    them)."""
    tp = onnx.TensorProto
    ins = [helper.make_tensor_value_info(n, tp.FLOAT, s) for n, s in (
        ("x", ["n", 4, 6, 6]), ("offset", ["n", 36, 6, 6]), ("mask", ["n", 18, 6, 6]),
        ("features", [1, 2, 6, 6]), ("rois", ["r", 4]), ("boxes", ["r", 5]))]
    ins.append(helper.make_tensor_value_info("batch", tp.INT64, ["r"]))
    rng = np.random.default_rng(3)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
                                          "w"),
             onnx.numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    nodes = [
        helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["d"], name="deform",
                         group=2, offset_group=2, pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("LpPool", ["d"], ["y"], name="lp", kernel_shape=[3, 2],
                         strides=[2, 2], ceil_mode=1, p=3),
        helper.make_node("RoiAlign", ["features", "rois", "batch"], ["pooled"], name="roi",
                         output_height=2, output_width=3, sampling_ratio=2,
                         spatial_scale=0.5),
        helper.make_node("MaxRoiPool", ["features", "boxes"], ["peaks"], name="roi_max",
                         pooled_shape=[3, 2], spatial_scale=0.5),
        helper.make_node("RoiAlign", ["features", "rois", "batch"], ["adaptive"],
                         name="roi_adaptive", output_height=3, output_width=2,
                         spatial_scale=0.5)]
    graph = helper.make_graph(nodes, "deform", ins,
                              [helper.make_tensor_value_info("y", tp.FLOAT, ["n", 4, 3, 3]),
                               helper.make_tensor_value_info("pooled", tp.FLOAT,
                                                             ["r", 2, 2, 3]),
                               helper.make_tensor_value_info("peaks", tp.FLOAT,
                                                             ["r", 2, 3, 2]),
                               helper.make_tensor_value_info("adaptive", tp.FLOAT,
                                                             ["r", 2, 3, 2])], inits)
    path = folder / "deform.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    return str(path)


def _cache_seed(folder: Path) -> str:
    """GPT-2's decoding cache, written with onnx.helper: com.microsoft's causal Attention with
    a past state, a mask over the past and new keys and the present output, then
    MultiHeadAttention of its output with past_key and past_value and both present outputs;
    beside them a GPTQ act-order MatMulNBits (4 bits, g_idx, no zero points)."""
    tp = onnx.TensorProto
    b, s_, past, heads, size = 1, 2, 3, 2, 4
    hidden = heads * size
    rng = np.random.default_rng(9)
    f32 = [helper.make_tensor_value_info(n, tp.FLOAT, sh) for n, sh in (
        ("x", [b, s_, hidden]), ("past", [2, b, heads, past, size]),
        ("past_k", [b, heads, past, size]), ("past_v", [b, heads, past, size]),
        ("z", [b, s_, 32]))]
    mask = helper.make_tensor_value_info("mask", tp.INT32, [b, past + s_])
    inits = [onnx.numpy_helper.from_array((rng.standard_normal((hidden, 3 * hidden)) * 0.3
                                           ).astype(np.float32), "w"),
             onnx.numpy_helper.from_array(rng.standard_normal(3 * hidden).astype(np.float32),
                                          "b"),
             onnx.numpy_helper.from_array(rng.integers(0, 256, (4, 2, 8)).astype(np.uint8),
                                          "q4"),
             onnx.numpy_helper.from_array(rng.uniform(0.01, 0.1, 8).astype(np.float32),
                                          "q4_scales"),
             onnx.numpy_helper.from_array(rng.integers(0, 2, 32).astype(np.int32), "q4_groups")]
    nodes = [
        helper.make_node("Attention", ["x", "w", "b", "mask", "past"], ["a", "present"],
                         name="attention", domain="com.microsoft", num_heads=heads,
                         unidirectional=1),
        helper.make_node("MultiHeadAttention", ["a", "a", "a", "", "", "", "past_k", "past_v"],
                         ["y", "present_k", "present_v"], name="mha", domain="com.microsoft",
                         num_heads=heads, unidirectional=1),
        helper.make_node("MatMulNBits", ["z", "q4", "q4_scales", "", "q4_groups"], ["zq"],
                         name="gptq", domain="com.microsoft", K=32, N=4, bits=4,
                         block_size=16)]
    outs = [helper.make_tensor_value_info(n, tp.FLOAT, sh) for n, sh in (
        ("y", [b, s_, hidden]), ("present", [2, b, heads, past + s_, size]),
        ("present_k", [b, heads, past + s_, size]), ("present_v", [b, heads, past + s_, size]),
        ("zq", [b, s_, 4]))]
    graph = helper.make_graph(nodes, "cache", f32 + [mask], outs, inits)
    path = folder / "cache.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.microsoft", 1)]),
              path)
    return str(path)


def _scan8_seed(folder: Path) -> str:
    """Opset 8's Scan over a batch axis (rewritten as two Loops before the version converter
    runs), written with onnx.helper: a state and two scan inputs, one of them reversed, a body
    initializer, a scan output, then a Relu."""
    tp = onnx.TensorProto
    body = helper.make_graph(
        [helper.make_node("Add", ["h", "a"], ["s"]), helper.make_node("Mul", ["s", "b"], ["t"]),
         helper.make_node("Add", ["t", "w"], ["h2"]), helper.make_node("Tanh", ["h2"], ["o"])],
        "body", [helper.make_tensor_value_info(n, tp.FLOAT, [3]) for n in ("h", "a", "b")],
        [helper.make_tensor_value_info(n, tp.FLOAT, [3]) for n in ("h2", "o")],
        [onnx.numpy_helper.from_array(np.linspace(-1, 1, 3, dtype=np.float32), "w")])
    nodes = [helper.make_node("Scan", ["", "h0", "x", "y"], ["h", "o"], name="scan", body=body,
                              num_scan_inputs=2, directions=[0, 1]),
             helper.make_node("Relu", ["o"], ["r"], name="relu")]
    graph = helper.make_graph(
        nodes, "scan8", [helper.make_tensor_value_info(n, tp.FLOAT, s) for n, s in (
            ("h0", [2, 3]), ("x", [2, 4, 3]), ("y", [2, 4, 3]))],
        [helper.make_tensor_value_info("h", tp.FLOAT, [2, 3]),
         helper.make_tensor_value_info("r", tp.FLOAT, [2, 4, 3])])
    path = folder / "scan8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)]), path)
    return str(path)


def _tokens_seed(folder: Path) -> str:
    """TfIdfVectorizer of int64 tokens over a run-time batch (unigrams and bigrams with
    skips, TFIDF weights), written with onnx.helper at opset 17, then a Gemm."""
    tp = onnx.TensorProto
    nodes = [helper.make_node("TfIdfVectorizer", ["ids"], ["f"], name="tfidf", mode="TFIDF",
                              min_gram_length=1, max_gram_length=2, max_skip_count=2,
                              ngram_counts=[0, 3], ngram_indexes=[4, 0, 1, 3, 2],
                              pool_int64s=[1, 2, 3, 1, 2, 3, 3],
                              weights=[0.5, 1.25, 2.0, 0.75, 3.0]),
             helper.make_node("Gemm", ["f", "g"], ["y"], name="gemm")]
    graph = helper.make_graph(
        nodes, "tokens", [helper.make_tensor_value_info("ids", tp.INT64, ["n", 8])],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["n", 2])],
        [onnx.numpy_helper.from_array(np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2),
                                      "g")])
    path = folder / "tokens.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _functions_seed(folder: Path) -> str:
    """The model's own functions, written with onnx.helper at opset 17 over a run-time batch:
    Block(x, w, b) calls Scale (a Constant of the attribute alpha, its default 3.0) with alpha
    taken from Block's beta, runs an If on b whose branches read the body's values, and a
    Clip whose high bound the call omits; called twice, with beta given and not."""
    tp = onnx.TensorProto

    def ref(name: str, refers_to: str):
        a = onnx.AttributeProto()
        a.name, a.ref_attr_name, a.type = name, refers_to, onnx.AttributeProto.FLOAT
        return a

    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    k = helper.make_node("Constant", [], ["k"])
    k.attribute.append(ref("value_float", "alpha"))
    scale = helper.make_function("local", "Scale", ["x"], ["y"],
                                 [k, helper.make_node("Mul", ["x", "k"], ["y"])], opsets)
    scale.attribute_proto.append(helper.make_attribute("alpha", 3.0))
    vi = [helper.make_tensor_value_info(n, tp.FLOAT, ["n", 4]) for n in ("t", "e")]
    call = helper.make_node("Scale", ["m"], ["s"], domain="local")
    call.attribute.append(ref("alpha", "beta"))
    block = helper.make_function("local", "Block", ["x", "w", "b", "low", "high"], ["y"], [
        helper.make_node("MatMul", ["x", "w"], ["m"]), call,
        helper.make_node("If", ["b"], ["z"],
                         then_branch=helper.make_graph([helper.make_node("Relu", ["s"], ["t"])],
                                                       "then", [], [vi[0]]),
                         else_branch=helper.make_graph([helper.make_node("Neg", ["m"], ["e"])],
                                                       "else", [], [vi[1]])),
        helper.make_node("Clip", ["z", "low", "high"], ["y"])], opsets, attributes=["beta"])
    nodes = [helper.make_node("Block", ["x", "w", "b", "low"], ["h"], domain="local",
                              name="first", beta=0.5),
             helper.make_node("Block", ["h", "w", "b", "low"], ["y"], domain="local",
                              name="second")]
    graph = helper.make_graph(
        nodes, "functions", [helper.make_tensor_value_info("x", tp.FLOAT, ["n", 4]),
                             helper.make_tensor_value_info("b", tp.BOOL, [])],
        [helper.make_tensor_value_info("y", tp.FLOAT, ["n", 4])],
        [onnx.numpy_helper.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4),
                                      "w"),
         onnx.numpy_helper.from_array(np.array(-0.5, np.float32), "low")])
    path = folder / "functions.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets, functions=[scale, block]), path)
    return str(path)


def _newer_seed(folder: Path) -> str:
    """What opsets 24 to 26 added, written with onnx.helper at opset 26 (torch writes none of
    it; onnxruntime 1.32 runs Swish at opset 24 only): a key-value cache updated by TensorScatter
    at run-time write indices, read by an Attention with per-batch cache lengths, a causal
    bound and a window, then CumProd."""
    tp = onnx.TensorProto
    f32 = [helper.make_tensor_value_info(n, tp.FLOAT, s) for n, s in (
        ("q", [1, 2, 3, 4]), ("k", [1, 2, 6, 4]), ("v", [1, 2, 6, 4]), ("u", [1, 2, 2, 4]))]
    ints = [helper.make_tensor_value_info(n, e, s) for n, e, s in (
        ("lengths", tp.INT64, [1]), ("at", tp.INT64, [1]))]
    nodes = [
        helper.make_node("TensorScatter", ["k", "u", "at"], ["kc"], name="cache_k"),
        helper.make_node("TensorScatter", ["v", "u", "at"], ["vc"], name="cache_v",
                         mode="circular"),
        helper.make_node("Attention", ["q", "kc", "vc", "", "", "", "lengths"], ["a"],
                         name="attn", is_causal=1, left_window_size=2),
        helper.make_node("CumProd", ["a", "axis"], ["y"], name="cumprod", reverse=1)]
    inits = [onnx.numpy_helper.from_array(np.array(3, np.int64), "axis")]
    graph = helper.make_graph(nodes, "newer", f32 + ints,
                              [helper.make_tensor_value_info("y", tp.FLOAT, [1, 2, 3, 4])],
                              inits)
    path = folder / "newer.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)]), path)
    return str(path)


def _wider_seed(folder: Path) -> str:
    """Uses of mapped ops that were refused until recently, written with onnx.helper at opset
    23 over a run-time height: RMSNormalization over three axes, LayerNormalization's Mean and
    InvStdDev, a dilated AveragePool, a Slice to INT32_MAX, ArgMax's last tie over the
    run-time axis, an integer Pow, a RotaryEmbedding (through its ONNX function) and a Resize
    by keep_aspect_ratio_policy."""
    tp = onnx.TensorProto
    ins = [helper.make_tensor_value_info(n, e, s) for n, e, s in (
        ("x", tp.FLOAT, [1, 4, "h", 6]), ("ids", tp.INT64, [3, 5]),
        ("q", tp.FLOAT, [1, 2, 3, 4]), ("cos", tp.FLOAT, [1, 3, 2]), ("sin", tp.FLOAT, [1, 3, 2]),
        ("img", tp.FLOAT, [1, 2, 4, 6]))]
    outs = [helper.make_tensor_value_info(n, e, s) for n, e, s in (
        ("y", tp.FLOAT, [1, 4, "h", 4]), ("last", tp.INT64, [1, 4, 1, 4]),
        ("squares", tp.INT64, [3, 5]), ("rotated", tp.FLOAT, [1, 2, 3, 4]),
        ("small", tp.FLOAT, [1, 2, 2, 3]))]
    consts = {"scale": np.linspace(0.5, 2, 4, dtype=np.float32).reshape(4, 1, 1),
              "gamma": np.linspace(-1, 1, 6, dtype=np.float32),
              "beta": np.full(6, 0.25, np.float32),
              "start": np.array([0], np.int64), "end": np.array([2 ** 31 - 1], np.int64),
              "axis": np.array([2], np.int64), "two": np.array(2, np.int64),
              "sizes": np.array([3, 3], np.int64)}
    nodes = [
        helper.make_node("RMSNormalization", ["x", "scale"], ["r"], name="rms", axis=1),
        helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["ln", "mean", "inv"],
                         name="ln"),
        helper.make_node("Mul", ["ln", "inv"], ["scaled"], name="scaled"),
        helper.make_node("Add", ["scaled", "mean"], ["shifted"], name="shifted"),
        helper.make_node("AveragePool", ["shifted"], ["pooled"], name="pool",
                         kernel_shape=[3, 3], dilations=[1, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Slice", ["pooled", "start", "end", "axis"], ["y"], name="whole"),
        helper.make_node("ArgMax", ["y"], ["last"], name="last", axis=2,
                         select_last_index=1),
        helper.make_node("Pow", ["ids", "two"], ["squares"], name="squares"),
        helper.make_node("RotaryEmbedding", ["q", "cos", "sin"], ["rotated"], name="rope",
                         interleaved=1),
        helper.make_node("Resize", ["img", "", "", "sizes"], ["small"], name="resize",
                         mode="linear", axes=[2, 3], keep_aspect_ratio_policy="not_larger")]
    graph = helper.make_graph(nodes, "wider", ins, outs, [
        onnx.numpy_helper.from_array(v, k) for k, v in consts.items()])
    path = folder / "wider.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]), path)
    return str(path)


def _bert_seeds(folder: Path) -> dict[str, str]:
    """A small BERT layer optimized by onnxruntime.transformers' optimizer (``bert``:
    com.microsoft's EmbedLayerNormalization, Attention (its mask the embedding's lengths),
    SkipLayerNormalization and BiasGelu; ``bert_mha``: MultiHeadAttention instead)."""
    from .conftest import bert_optimized, torch

    seeds = {}
    for name, mha in (("bert", False), ("bert_mha", True)):
        torch.manual_seed(0)
        (folder / name).mkdir()
        seeds[name] = str(bert_optimized(folder / name, hidden=8, heads=2, vocab=10, seq=4,
                                         use_multi_head_attention=mha))
    return seeds


def _weight_only_seeds(folder: Path) -> dict[str, str]:
    """A small MLP quantized by onnxruntime's MatMulNBitsQuantizer (``nbits``: com.microsoft's
    MatMulNBits, 4 bits with zero points; ``qdq4``: blocked DequantizeLinears of int4
    weights)."""
    from .conftest import weight_only_quantized

    seeds = {}
    for name, fmt, symmetric in (("nbits", "QOperator", False), ("qdq4", "QDQ", True)):
        (folder / name).mkdir()
        seeds[name] = str(weight_only_quantized(folder / name, fmt, 4, symmetric))
    return seeds


def _quantized_seeds(folder: Path) -> dict[str, str]:
    """A small conv net quantized by onnxruntime's quantize_static (``qdq``: QDQ, per-channel
    int8) and by its quantize_dynamic (``dynamic``: uint8 weights; ``fused``: that, saved
    optimized by an onnxruntime session; ``optimized``: the float net so saved); a gated
    residual block quantized by quantize_static in the QOperator format (``qop``:
    com.microsoft's ops); a bidirectional LSTM quantized by quantize_dynamic (``qlstm``: uint8
    weights, com.microsoft's DynamicQuantizeLSTM, given sequence_lens)."""
    from onnxruntime import quantization

    from .conftest import export, onnxruntime_optimized, torch
    from .test_quantized_lstm import _Both

    class Batches(quantization.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(5)
            self.batches = iter([{"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)}
                                 for _ in range(3)])

        def get_next(self):
            return next(self.batches, None)

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(48, 4))
    plain = export(net, [torch.randn(1, 2, 4, 4)], folder / "plain.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 2, 3, padding=1)
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            y = self.conv(x)
            y = torch.nn.functional.leaky_relu(torch.sigmoid(y) * x + x, 0.1)
            y = torch.cat([torch.nn.functional.avg_pool2d(y, 2),
                           torch.nn.functional.max_pool2d(y, 2)], 1)
            y = self.fc(torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1))
            return torch.softmax(y, -1)

    block = export(Block(), [torch.randn(1, 2, 4, 4)], folder / "block.onnx", dynamo=False,
                   input_names=["x"], output_names=["y"])

    tagger = export(_Both(3, 4), [torch.randn(1, 3, 3)], folder / "tagger.onnx", dynamo=False,
                    input_names=["x"], output_names=["y"])
    path, dynamic, qop = folder / "qdq.onnx", folder / "dynamic.onnx", folder / "qop.onnx"
    qlstm = folder / "qlstm.onnx"
    logging.disable(logging.WARNING)  # its advice to pre-process, on the root logger
    try:
        quantization.quantize_static(str(plain), str(path), Batches(),
                                     quant_format=quantization.QuantFormat.QDQ,
                                     per_channel=True)
        # uint8 weights: onnxruntime's u8 x s8 kernel saturates on CPUs without VNNI, where
        # the default int8 weights' build is refused (onnx_import/saturation.py)
        quantization.quantize_dynamic(str(plain), str(dynamic),
                                      weight_type=quantization.QuantType.QUInt8)
        quantization.quantize_dynamic(str(tagger), str(qlstm),
                                      weight_type=quantization.QuantType.QUInt8)
        _with_sequence_lens(qlstm)
        quantization.quantize_static(str(block), str(qop), Batches(),
                                     quant_format=quantization.QuantFormat.QOperator,
                                     weight_type=quantization.QuantType.QUInt8,
                                     activation_type=quantization.QuantType.QUInt8)
    finally:
        logging.disable(logging.NOTSET)
    for source, saved in ((dynamic, "fused.onnx"), (plain, "optimized.onnx")):
        onnxruntime_optimized(source, folder / saved)
    return {"qdq": str(path), "dynamic": str(dynamic), "fused": str(folder / "fused.onnx"),
            "optimized": str(folder / "optimized.onnx"), "qop": str(qop), "qlstm": str(qlstm)}


def _with_sequence_lens(path: Path) -> None:
    """The model's DynamicQuantizeLSTM given sequence_lens, a new graph input 'lengths'."""
    model = onnx.load(str(path))
    [node] = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    node.input[4] = "lengths"
    model.graph.input.append(onnx.helper.make_tensor_value_info("lengths",
                                                                onnx.TensorProto.INT32, [1]))
    onnx.save(model, str(path))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[str, str]:
    return _export_seeds(tmp_path_factory.mktemp("onnx-seeds"))


def _run_child(seeds: dict[str, str], work: Path, *, mutants: int, structural: str,
               only: list[str]) -> tuple[list[dict], list[str], dict]:
    """Run the child; (result records, notes, its closing record). A crash or hang of the
    child becomes a failed record of the mutant it was on. Each record has its label."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.json"
    config.write_text(json.dumps({"seeds": seeds, "work": str(work), "seed": SEED,
                                  "mutants": mutants, "structural": structural, "only": only,
                                  "address_space": ADDRESS_SPACE}))
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('onnx_fuzz_child', sys.argv[1])\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "module.child(sys.argv[2])\n")
    stderr = open(work / "child.stderr", "wb")
    proc = subprocess.Popen([sys.executable, "-c", code, __file__, str(config)],
                            stdout=subprocess.PIPE, stderr=stderr, cwd=Path(__file__).parents[3])
    records, notes, current, done, labels = [], [], None, {}, {}
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    buffer = b""
    last = time.monotonic()
    try:
        while True:
            if not selector.select(timeout=1.0):
                if time.monotonic() - last > KILL_AFTER_SECONDS:
                    proc.kill()
                    records.append({"id": current["start"], "outcome": "failed",
                                    "why": f"hung: no answer in {KILL_AFTER_SECONDS} s"})
                    break
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            last = time.monotonic()
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                record = json.loads(line)
                if "start" in record:
                    current = record
                    labels[record["start"]] = record["label"]
                elif "note" in record:
                    notes.append(record["note"])
                elif "done" in record:
                    done = record
                else:
                    records.append(record)
        code = proc.wait(timeout=30)
        if not done and not (records and records[-1].get("why", "").startswith("hung")):
            on = current["start"] if current and (not records or records[-1]["id"] !=
                                                  current["start"]) else "?"
            records.append({"id": on, "outcome": "failed",
                            "why": f"the child died (exit {code}) during this mutant" if on != "?"
                            else f"the child died (exit {code}) between mutants"})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    if records and records[-1]["outcome"] == "failed" and not done and current:
        shutil.copytree(work / "current", work / "failures" / current["start"], symlinks=True,
                        dirs_exist_ok=True, ignore=shutil.ignore_patterns("fifo.bin"))
    for r in records:
        r["label"] = labels.get(r["id"], "?")
    return records, notes, done


def _verdict(records: list[dict], work: Path) -> list[str]:
    failed = [r for r in records if r["outcome"] == "failed"]
    lines = []
    for r in failed[:40]:
        lines.append(f"{r['id']} ({r['label']}): {r['why']}: "
                     f"{r.get('error', '')}: {r.get('message', '')}")
        if r.get("trace"):
            lines.append("    " + r["trace"].strip().replace("\n", "\n    "))
    if failed:
        ids = ",".join(r["id"] for r in failed[:8])
        lines.append(f"{len(failed)} failure(s); mutants saved under {work / 'failures'}; rerun "
                     f"with FUZZ_SEED={SEED} FUZZ_ONNX_ONLY={ids} (and FUZZ_ONNX_STRUCTURAL=all "
                     f"for s-ids outside the default draw)")
    return lines


def test_the_seed_models_build(seeds, tmp_path):
    from plugin_host.artifacts import TrustStore, generate_key
    from plugin_host.onnx_import import build_onnx_artifact, import_onnx

    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    for name, path in seeds.items():
        m = build_onnx_artifact(path, tmp_path / f"{name}.pha", backends=("numpy", "onnxruntime"),
                                upcast_float16=name == "half")
        assert m.golden_backend == "onnxruntime"
        _check_built(tmp_path / f"{name}.pha", key, trust)
    ops = {n.op_type for p in seeds.values() for n in onnx.load(p).graph.node}
    assert {"Conv", "BatchNormalization", "Gemm", "Gather", "Reshape", "Concat",
            "ConvTranspose", "LayerNormalization", "Split", "Pad", "ScatterND"} <= ops, ops
    math_ = onnx.load(seeds["math"]).graph  # a ScatterND at indices computed from ArgMax
    made = {o: n for n in math_.node for o in n.output}

    def ops_before(name: str) -> set[str]:
        node = made.get(name)
        return set() if node is None else {node.op_type}.union(*map(ops_before, node.input))

    assert any(n.op_type == "ScatterND" and "ArgMax" in ops_before(n.input[1])
               for n in math_.node)
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in
                                                      onnx.load(seeds["qdq"]).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"} <= {
        n.op_type for n in onnx.load(seeds["dynamic"]).graph.node}
    assert "DynamicQuantizeMatMul" in {n.op_type for n in onnx.load(seeds["fused"]).graph.node}
    assert "FusedConv" in {n.op_type for n in onnx.load(seeds["optimized"]).graph.node}
    assert {"EmbedLayerNormalization", "Attention"} <= {n.op_type for n in
                                                       onnx.load(seeds["bert"]).graph.node}
    assert "MultiHeadAttention" in {n.op_type for n in onnx.load(seeds["bert_mha"]).graph.node}
    assert "MatMulNBits" in {n.op_type for n in onnx.load(seeds["nbits"]).graph.node}
    assert TP.INT4 in {t.data_type for t in onnx.load(seeds["qdq4"]).graph.initializer}
    assert {"QLinearConv", "QLinearMul", "QLinearAdd", "QLinearSigmoid", "QLinearLeakyRelu",
            "QLinearAveragePool", "QLinearConcat", "MaxPool", "QGemm"} <= {
        n.op_type for n in onnx.load(seeds["qop"]).graph.node}
    [lstm] = [n for n in onnx.load(seeds["qlstm"]).graph.node
              if n.op_type == "DynamicQuantizeLSTM"]
    direction = {a.name: a.s for a in lstm.attribute}["direction"]
    assert lstm.input[4] == "lengths" and direction == b"bidirectional"
    qlstm = import_onnx(seeds["qlstm"]).graph  # each sequence reversed within its length
    assert any(n.op == "gather_elements" and ".reverse.x" in n.name for n in qlstm.nodes)
    sequence = import_onnx(seeds["sequence"]).graph  # a batch and a length known at run time
    assert sequence.inputs[0].shape == ("batch", "seq")
    assert {"unflatten", "cumsum", "gather_elements"} <= {n.op for n in sequence.nodes}
    assert any(n.op == "unflatten" and len(n.inputs) == 2 for n in sequence.nodes)  # like
    assert any(n.op == "slice" and n.attrs["steps"] == (-1,) for n in sequence.nodes)
    grid = import_onnx(seeds["grid"]).graph  # a batch, height and width known at run time
    assert grid.inputs[0].shape == ("batch", 8, "h", "w")
    assert sum(n.op == "unflatten" for n in grid.nodes) >= 2  # the shuffle, the tokens back
    newer = import_onnx(seeds["newer"]).graph  # opsets 24 to 28's ops, mapped
    assert {"scatter_elements", "cumprod", "softmax", "gather_elements"} <= {
        n.op for n in newer.nodes}
    wider = import_onnx(seeds["wider"]).graph  # uses refused until recently
    assert wider.inputs[0].shape == (1, 4, "h", 6)
    assert {"avg_pool", "layer_norm", "sum", "mul"} <= {n.op for n in wider.nodes}
    assert not any(n.name.startswith("whole") for n in wider.nodes)  # x[:, :, :INT32_MAX]
    assert wider.outputs[0].shape == (1, 4, "h", 4)
    assert any(n.name.startswith("rope/fn/") for n in wider.nodes)
    scan = import_onnx(seeds["scan"]).graph  # two Scans unrolled, one in a function's body
    assert sum(n.op == "tanh" for n in scan.nodes) == 3
    assert any(n.name.startswith("linear/fn/") and ".i2/" in n.name for n in scan.nodes)
    cache = import_onnx(seeds["cache"]).graph  # a past state and its present outputs
    assert [o.name for o in cache.outputs] == ["y", "present", "present_k", "present_v", "zq"]
    deform = import_onnx(seeds["deform"]).graph  # DeformConv and LpPool, a run-time batch
    assert deform.inputs[0].shape == ("n", 4, 6, 6)
    assert {"grid_sample", "matmul", "conv", "embedding", "amax"} <= {
        n.op for n in deform.nodes}
    scan8 = import_onnx(seeds["scan8"]).graph  # a batch of 2 sequences of 4 steps
    assert sum(n.op == "tanh" for n in scan8.nodes) == 8
    tokens = import_onnx(seeds["tokens"]).graph  # n-grams counted over a run-time batch
    assert tokens.inputs[0].shape == ("n", 8) and "cumsum" in {n.op for n in tokens.nodes}
    legacy = onnx.load(seeds["legacy"])
    assert [(o.domain, o.version) for o in legacy.opset_import] == [("", 11)]
    assert {"Conv", "Resize", "Split", "Squeeze", "Softmax", "LSTM"} <= {
        n.op_type for n in legacy.graph.node}


def test_every_mutant_builds_or_is_refused_with_a_typed_error(seeds, tmp_path):
    started = time.perf_counter()
    records, notes, done = _run_child(seeds, tmp_path / "work", mutants=MUTANTS,
                                      structural=STRUCTURAL, only=ONLY)
    total = time.perf_counter() - started
    log = tmp_path / "work" / "child.stderr"
    outcomes = collections.Counter(r["outcome"] for r in records)
    errors = collections.Counter(r.get("error", "") for r in records
                                 if r["outcome"] == "refused")
    slowest = max((r.get("seconds", 0.0) for r in records), default=0.0)
    kinds = collections.Counter(r["id"][0] for r in records)
    print(f"\nONNX fuzz: {len(records)} mutants ({kinds['s']} structural, {kinds['b']} "
          f"byte-level; {'; '.join(notes[:1])}) in {total:.1f} s, slowest {slowest:.2f} s, "
          f"child peak RSS {done.get('maxrss_kib', 0) / 1024:.0f} MiB")
    print("  outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    print("  refusals: " + ", ".join(f"{k} {v}" for k, v in errors.most_common()))
    lines = _verdict(records, tmp_path / "work")
    if lines and log.exists():
        lines.append("child stderr (tail): " + log.read_text(errors="replace")[-1500:])
    assert not lines, "\n".join(lines)
    assert done, "the child did not finish"
    if not ONLY:
        assert outcomes["refused"] > 0 and outcomes["built"] > 0, outcomes
