"""The layers of the op table as ONNX: convolutions, normalizations, linear, the recurrent
layers (unrolled over time) and Embedding (with its index guard when the indices are computed
inside the graph)."""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from abi import dtypes
from abi.errors import BackendError
from abi.quantization import need_values

from .emitter import MS, Converter, Emitter, moved_codes, onnx_dtype, onnx_pads
from .glue import nan_seen
from .recurrent_kernels import (clipped_lengths, guard_lengths, kernel_or_scan,
                                recurrence_kernel)


def _per_channel(e: Emitter, name: str, rank: int) -> str:
    """``name`` (C,) reshaped to broadcast over axis 1 of a rank-``rank`` tensor."""
    shape = (1, -1) + (1,) * (rank - 2)
    const = e.array(name)
    if const is not None:
        return e.const(np.asarray(const).reshape(shape), const.dtype)
    return e.op("Reshape", [name, e.const(shape, np.int64)])[0]


def _ones(e: Emitter, shape) -> str:
    """A float32 constant of ones of ``shape`` (a length or a tuple), one per model for each
    shape: a normalization's scale where it has none."""
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (int(shape),)
    return e.derived(f"ones{shape}", [], lambda: np.ones(shape))


def _affine(e: Emitter, y: str, weight: str | None, bias: str | None, rank: int,
            out: str) -> None:
    """``y * weight + bias`` per channel (axis 1) into ``out``."""
    if weight is not None:
        y = e.op("Mul", [y, _per_channel(e, weight, rank)])[0]
    if bias is not None:
        y = e.op("Add", [y, _per_channel(e, bias, rank)])[0]
    e.op("Identity", [y], [out])


def _normalized_rows(e: Emitter, x: str, rows: int, eps: float, scale: str | None = None,
                     shift: str | None = None, shape: Sequence | None = None) -> str:
    """``x`` (N, C, ...) as ``rows`` rows per sample (0: one per channel), each normalized,
    ``(v - mean) / sqrt(var + eps)`` (biased variance), times ``scale`` plus ``shift`` (each a
    row's length, or None: ones, nothing), back in ``x``'s shape: onnxruntime's
    LayerNormalization over each row. Its kernel keeps the digits a sum over a long row loses
    where the values' mean is large against their spread, which ReduceMean's does not (a row
    of 200,704 values of mean 1,000 and spread 1: LayerNormalization within 3e-05 of the
    values in float64, as the numpy backend, ReduceMean, Sub, Mul and ReduceMean 1.5e-03),
    and it is one op where those were eight.

    LayerNormalization refuses rows of no values, so an ``x`` of none is ``x`` itself (as the
    numpy backend gives it): where a dim is 0 in the graph; over dims the call gives, the rows
    are at least 1 long (x of no value is then 0 rows of 1). ``shape``: ``x``'s, where the
    graph does not know it (a tensor made here)."""
    dims = list(shape or e.types[x].shape)[1 if rows else 2:]
    if 0 in dims:
        return x
    if all(isinstance(d, int) for d in dims):
        length = int(np.prod(dims, dtype=np.int64)) // (rows or 1)
        grouped = e.op("Reshape", [x, e.const([-1, length], np.int64)])[0]
        if scale is None:
            scale = _ones(e, length)
    else:
        [length] = e.op("ReduceProd", e.op("Shape", [x], start=1 if rows else 2), keepdims=1)
        if rows:
            [length] = e.op("Div", [length, e.const([rows], np.int64)])
        [length] = e.op("Max", [length, e.const([1], np.int64)])
        grouped = e.op("Reshape", [x, e.op("Concat", [e.const([-1], np.int64), length],
                                           axis=0)[0]])[0]
        [scale] = e.op("ConstantOfShape", [length],
                       value=helper.make_tensor("one", onnx.TensorProto.FLOAT, [1], [1.0]))
    y = e.op("LayerNormalization", [grouped, scale, shift], axis=-1, epsilon=eps)[0]
    return e.op("Reshape", [y, e.op("Shape", [x])[0]], allowzero=1)[0]  # a 0 is a 0


#: The longest row (C times the plane) whose GroupNorm of one group takes its weight and bias
#: into LayerNormalization as constants of the row's length (two of 4 MiB at most); a longer
#: one, or one over sizes the call gives, is normalized, then multiplied and added per channel.
FOLDED_ROW_LIMIT = 1 << 20


def _one_group_affine(e: Emitter, x: str, weight: str | None, bias: str | None
                      ) -> tuple[str, str | None] | None:
    """A GroupNorm of one group normalizes each sample's (C, ...) as one row, so its weight
    and bias per channel can be LayerNormalization's scale and bias per element, each
    channel's value repeated over its plane: the op's one pass where a Mul and an Add after it
    took two more (PoolFormer's blocks, whose norms are all of one group, as in
    bench/bench_norms.py: 1.07x bare onnxruntime without it, 1.03x with it). None where a
    parameter is computed at run time, a dim is the call's, or the row is longer than
    :data:`FOLDED_ROW_LIMIT`."""
    dims = e.types[x].shape[1:]
    w, b = e.array(weight), e.array(bias)
    if not all(isinstance(d, int) for d in dims) or (weight is not None and w is None) \
            or (bias is not None and b is None):
        return None
    channels, plane = dims[0], int(np.prod(dims[1:], dtype=np.int64))
    if channels * plane > FOLDED_ROW_LIMIT:
        return None
    scale = _ones(e, channels * plane) if w is None else e.derived(
        f"group_norm.scale({plane})", [weight], lambda: np.repeat(w, plane))
    shift = None if b is None else e.derived(f"group_norm.shift({plane})", [bias],
                                             lambda: np.repeat(b, plane))
    return scale, shift



# --- layers -----------------------------------------------------------------------------------


def conv(e, node, ins, outs, a):
    e.op("Conv", ins[:3], outs, strides=list(a["stride"]), dilations=list(a["dilation"]),
         pads=onnx_pads(a["padding"]), group=a["groups"])


def conv_transpose(e, node, ins, outs, a):
    e.op("ConvTranspose", ins[:3], outs, strides=list(a["stride"]),
         dilations=list(a["dilation"]), pads=list(a["padding"]) * 2,
         output_padding=list(a["output_padding"]), group=a["groups"])


def batchnorm(e, node, ins, outs, a):
    x, weight, bias, mean, var = (ins + [None] * 6)[:5]
    rank = len(e.types[x].shape)
    if a["track_running_stats"]:
        channels = e.types[mean].shape[0]
        if weight is None or bias is None:
            if not isinstance(channels, int):
                raise BackendError(f"onnxruntime backend: node {node.name!r}: batchnorm without "
                                   f"affine parameters needs a fixed channel count",
                                   node=node.name)
            weight = weight or _ones(e, channels)
            bias = bias or e.const(np.zeros(channels))
        e.op("BatchNormalization", [x, weight, bias, mean, var], outs, epsilon=a["eps"])
        return
    # inference with the batch's own statistics (biased variance), as the numpy kernel: each
    # channel's values over the batch and the planes a row (the channels first where the
    # batch is not 1), normalized as a group_norm's
    shape = e.types[x].shape
    if shape[0] == 1:
        y = _normalized_rows(e, x, 0, a["eps"])
    else:
        perm = [1, 0] + list(range(2, rank))  # its own inverse
        first = e.op("Transpose", [x], perm=perm)[0]
        y = _normalized_rows(e, first, 1, a["eps"], shape=[shape[i] for i in perm])
        y = e.op("Transpose", [y], perm=perm)[0]
    _affine(e, y, weight, bias, rank, outs[0])


def group_norm(e, node, ins, outs, a):
    x, weight, bias = (ins + [None] * 3)[:3]
    folded = _one_group_affine(e, x, weight, bias) if a["num_groups"] == 1 else None
    if folded is not None:
        e.op("Identity", [_normalized_rows(e, x, 1, a["eps"], *folded)], outs)
        return
    y = _normalized_rows(e, x, a["num_groups"], a["eps"])
    _affine(e, y, weight, bias, len(e.types[x].shape), outs[0])


def instance_norm(e, node, ins, outs, a):
    x, weight, bias = (ins + [None] * 3)[:3]
    y = _normalized_rows(e, x, 0, a["eps"])
    _affine(e, y, weight, bias, len(e.types[x].shape), outs[0])


def _layer_norm_onnx(e, x, weight, bias, normalized, eps, out):
    if weight is None:
        weight = _ones(e, normalized)
    e.op("LayerNormalization", [x, weight, bias], [out], axis=-len(normalized), epsilon=eps)


def layer_norm(e, node, ins, outs, a):
    x, weight, bias = (ins + [None] * 3)[:3]
    _layer_norm_onnx(e, x, weight, bias, list(a["normalized_shape"]), a["eps"], outs[0])


def layer_norm2d(e, node, ins, outs, a):
    x, weight, bias = (ins + [None] * 3)[:3]
    nhwc = e.op("Transpose", [x], perm=[0, 2, 3, 1])[0]
    y = e.fresh()
    _layer_norm_onnx(e, nhwc, weight, bias, list(a["normalized_shape"]), a["eps"], y)
    e.op("Transpose", [y], outs, perm=[0, 3, 1, 2])


def rms_norm(e, node, ins, outs, a):
    """``x / sqrt(mean(x * x) + eps) * weight`` over the last axis: ONNX's RMSNormalization
    (opset 23), one kernel where ReduceMean of a Mul, Add, Sqrt, Reciprocal and two Muls were
    six (55 us against 123 on (1, 256, 768), the same distance from the values in float64).
    Where the last axis is the call's (it may be 0, a row the kernel refuses) or 0, those six,
    whose ReduceMean gives nan over nothing (and the output holds no value)."""
    x, weight = (ins + [None] * 2)[:2]
    d = e.types[x].shape[-1]
    if isinstance(d, int) and d > 0:
        scale = weight if weight is not None else _ones(e, d)
        e.op("RMSNormalization", [x, scale], outs, axis=-1, epsilon=a["eps"])
        return
    ms = e.op("ReduceMean", [e.op("Mul", [x, x])[0], e.const([-1], np.int64)], keepdims=1)[0]
    inv = e.op("Reciprocal", [e.op("Sqrt", [e.op("Add", [ms, e.const(a["eps"])])[0]])[0]])[0]
    y = e.op("Mul", [x, inv])[0]
    if weight is not None:
        y = e.op("Mul", [y, weight])[0]
    e.op("Identity", [y], outs)


def linear(e, node, ins, outs, a):
    x, weight, bias = (ins + [None] * 3)[:3]
    if len(e.types[x].shape) == 2:
        e.op("Gemm", [x, weight, bias], outs, transB=1)
        return
    w = e.array(weight)
    wt = (e.derived("transpose", [weight], lambda: np.ascontiguousarray(w.T), w.dtype)
          if w is not None else e.op("Transpose", [weight], perm=[1, 0])[0])
    if bias is None:
        e.op("MatMul", [x, wt], outs)
    else:
        e.op("Add", [e.op("MatMul", [x, wt])[0], bias], outs)


def qlinear_conv(e, node, ins, outs, a):
    """onnxruntime's QLinearConv, with a constant weight whose zero points are one value (its
    kernel takes no other). uint8 x by int8 weight and uint8 y, and int8 throughout, go as
    they are where its kernels sum exactly (:func:`u8s8_exact`; s8 x s8 always does), any
    other mix moved to uint8 (every int8 code and zero point plus 128, y moved back): its
    u8 x s8 kernels on x86-64 CPUs without VNNI saturate pairs of products at int16. A weight
    computed when the call runs, or per-channel zero points that differ, are refused naming
    the node."""
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = (ins + [None])[:9]
    weight, zero_point = e.array(w), e.array(w_zp)
    if weight is None or zero_point is None or np.any(zero_point != zero_point.flat[0]):
        what = ("a weight computed when the call runs" if weight is None or zero_point is None
                else "per-channel weight zero points that differ")
        raise BackendError(f"onnxruntime backend: node {node.name!r}: qlinear_conv with {what}: "
                           f"onnxruntime's QLinearConv takes a constant weight with one zero "
                           f"point", node=node.name)
    conv = dict(strides=list(a["stride"]), dilations=list(a["dilation"]),
                pads=onnx_pads(a["padding"]), group=a["groups"])
    zero = e.derived("qlinear_conv.zero_point", [w_zp], lambda: zero_point.reshape(-1)[:1]
                     .reshape(()), zero_point.dtype)
    codes = [e.types[v].dtype for v in (x, w, y_zp)]
    if codes == ["int8"] * 3 or (codes == ["uint8", "int8", "uint8"] and u8s8_exact()):
        e.op("QLinearConv", [x, x_scale, x_zp, w, w_scale, zero, y_scale, y_zp, bias], outs,
             **conv)
        return
    x, x_zp = _codes_as_uint8(e, x), _codes_as_uint8(e, x_zp)
    if weight.dtype == np.int8:
        w = e.derived("qlinear_conv.weight", [w], lambda: moved_codes(weight, 128), None)
        zero = e.derived("qlinear_conv.zero_point.uint8", [w_zp], lambda: moved_codes(
            zero_point.reshape(-1)[0], 128), None)
    inputs = [x, x_scale, x_zp, w, w_scale, zero, y_scale, _codes_as_uint8(e, y_zp), bias]
    if codes[2] == "uint8":
        e.op("QLinearConv", inputs, outs, **conv)
        return
    i32 = onnx.TensorProto.INT32
    y = e.op("Cast", e.op("QLinearConv", inputs, **conv), to=i32)
    e.op("Cast", e.op("Sub", [y[0], e.const(128, np.int32)]), outs, to=onnx.TensorProto.INT8)


@functools.cache
def u8s8_exact() -> bool:
    """Whether onnxruntime's QLinearConv of uint8 codes by int8 weights sums exactly on this
    CPU (x86-64 with VNNI, or another architecture), probed once per process: four products
    255 * -128, which its AVX2 kernel adds in pairs saturating at int16 (-65536 for
    -130560), requantized by 1/1024 to the codes 72 and 136 respectively."""
    from . import session

    tensor = onnx.numpy_helper.from_array
    values = {"xs": np.float32(1), "xz": np.uint8(0), "w": np.full((1, 4, 1, 1), -128, np.int8),
              "ws": np.float32(1), "wz": np.int8(0), "ys": np.float32(1024), "yz": np.uint8(200)}
    graph = helper.make_graph(
        [helper.make_node("QLinearConv", ["x", *values], ["y"], name="probe")], "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, [1, 4, 1, 1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [1, 1, 1, 1])],
        [tensor(np.asarray(v), k) for k, v in values.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    run = session.create_session(model, where="the u8 x s8 probe").run
    return int(run(None, {"x": np.full((1, 4, 1, 1), 255, np.uint8)})[0].reshape(())) == 72


def integer_linear(e, node, ins, outs, a):
    """onnxruntime's MatMulInteger of a uint8 x: an int8 x is moved to uint8 by adding 128 to
    it and to its zero point (the differences, and so the sums, stay); an int8 weight goes as
    it is where onnxruntime's u8 x s8 kernel sums exactly (:func:`u8s8_exact`), else is moved
    to uint8 the same way, since that kernel on x86-64 CPUs without VNNI adds pairs of
    products into int16 and saturates there. The weight is transposed to (in, out), once
    where it is a constant. Over no inputs (in_features 0) onnxruntime's kernel gives what its
    buffer held: the sums are then zeros of the output's shape."""
    x, weight, x_zp, w_zp = (ins + [None] * 4)[:4]
    inputs = e.types[weight].shape[1]
    if type(inputs) is not int:  # known when the call runs: zeros where it is 0
        [y] = e.op("MatMulInteger", _integer_operands(e, x, weight, x_zp, w_zp))
        [none] = e.op("Equal", [e.op("Shape", [x], start=-1)[0], e.const([0], np.int64)])
        e.op("Where", [none, e.const(0, np.int32), y], outs)
    elif inputs == 0:
        shape = e.op("Concat", [e.op("Shape", [x], end=-1)[0],
                                e.op("Shape", [weight], end=1)[0]], axis=0)
        e.op("ConstantOfShape", shape, outs,
             value=helper.make_tensor("zero", onnx.TensorProto.INT32, [1], [0]))
    else:
        e.op("MatMulInteger", _integer_operands(e, x, weight, x_zp, w_zp), outs)


def _integer_operands(e, x: str, weight: str, x_zp: str | None, w_zp: str | None) -> list:
    """MatMulInteger's four inputs for :func:`integer_linear`: x uint8 (:func:`_as_uint8`),
    an int8 weight as it is where the u8 x s8 kernel is exact, else moved to uint8 too."""
    x, x_zp = _as_uint8(e, x, x_zp)
    wt, w_zp = integer_weight(e, weight, w_zp)
    return [x, wt, x_zp, w_zp]


def integer_weight(e, weight: str, w_zp: str | None) -> tuple[str, str | None]:
    """An integer weight (out, in) of a uint8 x transposed to (in, out) and its zero point,
    computed once where they are constants: an int8 one as it is where onnxruntime's u8 x s8
    kernels sum exactly (:func:`u8s8_exact`), else moved to uint8 (:func:`_as_uint8`)."""
    int8_shift = 0 if u8s8_exact() else 128
    w, z = e.array(weight), e.array(w_zp)
    dtype = e.types[weight].dtype
    if w is None or (w_zp is not None and z is None):
        wt = e.op("Transpose", [weight], perm=[1, 0])[0]
        return _as_uint8(e, wt, w_zp, dtype) if int8_shift else (wt, w_zp)
    shift = int8_shift if dtype == "int8" else 0
    wt = e.derived(f"integer_linear.weight.{shift}", [weight], lambda: np.ascontiguousarray(
        moved_codes(w.T, shift)), None)
    if w_zp is not None or shift:
        w_zp = e.derived(f"integer_linear.zero_point.{shift}", [w_zp], lambda: moved_codes(
            np.zeros((), w.dtype) if z is None else z, shift), None)
    return wt, w_zp


def _as_uint8(e, v: str, zp: str | None, dtype: str | None = None) -> tuple[str, str | None]:
    """int8 ``v`` (of ``dtype``, by default its type's) and its zero point (absent: 0) plus
    128 as uint8 (:func:`_codes_as_uint8`); uint8 ones as they are."""
    if (dtype or e.types[v].dtype) == "uint8":
        return v, zp
    return _codes_as_uint8(e, v, "int8"), (e.const(128, np.uint8) if zp is None else
                                           _codes_as_uint8(e, zp))


def _codes_as_uint8(e, v: str, dtype: str | None = None) -> str:
    """int8 codes ``v`` (of ``dtype``, by default its type's) plus 128 as uint8, computed
    once where a constant; uint8 ones as they are."""
    if (dtype or e.types[v].dtype) == "uint8":
        return v
    value = e.array(v)
    if value is not None:
        return e.derived("codes.uint8", [v], lambda: moved_codes(value, 128), None)
    i32 = onnx.TensorProto.INT32
    return e.op("Cast", e.op("Add", [e.op("Cast", [v], to=i32)[0], e.const(128, np.int32)]),
                to=onnx.TensorProto.UINT8)[0]


def lstm_cell(e, node, ins, outs, a):
    x, h, c, w_ih, w_hh, b_ih, b_hh = (ins + [None] * 7)[:7]
    weights = [e.array(n) for n in (w_ih, w_hh)]
    biases = [n for n in (b_ih, b_hh) if n is not None]
    if all(w is not None for w in weights) and all(e.array(n) is not None for n in biases):
        # constants: one GEMM over [x, h] with the weights side by side and the biases summed,
        # one initializer each for all the cells reading the same constants
        dtype, rows = weights[0].dtype, weights[0].shape[0]
        w = e.derived("lstm_cell.weight", [w_ih, w_hh],
                      lambda: np.concatenate(weights, axis=1), dtype)
        # keyed by its size too: without biases, zeros are all it holds
        bias = e.derived(f"lstm_cell.bias({rows})", biases, lambda: sum(
            (e.array(n) for n in biases), np.zeros(rows, dtype)), dtype)
        xh = e.op("Concat", [x, h], axis=1)[0]
        gates = e.op("Gemm", [xh, w, bias], transB=1)[0]
    else:
        gates = e.op("Add", [e.op("Gemm", [x, w_ih, b_ih], transB=1)[0],
                             e.op("Gemm", [h, w_hh, b_hh], transB=1)[0]])[0]
    _lstm_gates(e, gates, c, outs)


def _lstm_gates(e: Emitter, gates: str, c: str, outs: Sequence[str] | None = None,
                peepholes: Sequence[str] | None = None) -> list[str]:
    """An LSTM step's next [h, c] from its gates (batch, 4 * hidden; i, f, g, o) and c, into
    ``outs`` (h, c) when given, else fresh names; ``peepholes`` (p_i, p_f, p_o): ``p * c``
    added to i and f, ``p_o * c'`` to o, before their sigmoid."""
    h_out, c_out = ([name] for name in outs) if outs is not None else (1, 1)
    i, f, g, o = e.op("Split", [gates], 4, axis=1, num_outputs=4)
    if peepholes is not None:
        i, f = (e.op("Add", [t, e.op("Mul", [p, c])[0]])[0] for t, p in zip((i, f), peepholes))
    i, f = (e.op("Sigmoid", [t])[0] for t in (i, f))
    g = e.op("Tanh", [g])[0]
    c_next = e.op("Add", [e.op("Mul", [f, c])[0], e.op("Mul", [i, g])[0]], c_out)[0]
    if peepholes is not None:
        o = e.op("Add", [o, e.op("Mul", [peepholes[2], c_next])[0]])[0]
    o = e.op("Sigmoid", [o])[0]
    return [e.op("Mul", [o, e.op("Tanh", [c_next])[0]], h_out)[0], c_next]


def _transposed(e: Emitter, name: str) -> str:
    """A 2-D ``name`` transposed: an initializer for a constant, else a Transpose."""
    value = e.array(name)
    if value is not None:
        return e.derived("transpose", [name], lambda: np.ascontiguousarray(value.T),
                         value.dtype)
    return e.op("Transpose", [name], perm=[1, 0])[0]


def _recurrence(e, node, x: str, states: list[str], w_ih: str | None, b_ih: str | None,
                outs: list[str], step: Callable, lengths: str | None = None,
                zeroed: int | None = None, guard: bool = True) -> None:
    """An ABI recurrence (lstm, gru, rnn) as an ONNX Scan over the time steps, of the same
    element-wise ops as the numpy backend's, so that a nan or an infinity propagates as it
    does there and in torch (onnxruntime's own LSTM and GRU kernels turn a nan input into
    finite numbers, its RNN's Relu a nan into 0, and its GRU aborts the process on a sequence
    of 0 steps).

    The input's share of every step's gates is one MatMul over the whole sequence (plus
    bias_ih), outside the Scan (x itself where ``w_ih`` is None); ``step(body, x_t, states)``
    writes one step into the Scan's body (an Emitter; the weights it reads are values of the
    outer graph) and returns the new states, h first, which is also the step's y. A sequence of
    0 steps, which onnxruntime's Scan refuses, gets one zero step added and its output dropped;
    the states are then the ones given.

    ``lengths`` (the op's, one per sequence): a second scan input tells each step which
    sequences it is within, and the states stay where it is not (:func:`_within_lengths`), but
    state ``zeroed``, which is 0 there; y is then 0 past each sequence's length. The lengths
    are guarded as indices into [0, T + 1) (they come back for the check after the run, as an
    Embedding's indices do; not with ``guard`` False, where the caller guards them) and
    clipped into that range for the run."""
    dtype = onnx_dtype(e.types[x].dtype)
    first = e.const([0], np.int64)
    gates = x if w_ih is None else e.op("MatMul", [x, _transposed(e, w_ih)])[0]
    if b_ih is not None:
        gates = e.op("Add", [gates, b_ih])[0]
    steps = e.op("Shape", [x], start=0, end=1)[0]
    empty = e.op("Equal", [steps, first])[0]
    extra = e.op("Cast", [empty], to=onnx.TensorProto.INT64)[0]

    def padded(seq: str, value: onnx.TensorProto) -> str:  # one more step when there is none
        shape = e.op("Concat", [extra, e.op("Shape", [seq], start=1)[0]], axis=0)[0]
        return e.op("Concat", [seq, e.op("ConstantOfShape", [shape], value=value)[0]],
                    axis=0)[0]

    reverse = bool(node.attrs["reverse"])
    scans, valid, back = [], None, None
    if lengths is not None:
        if guard:
            guard_lengths(e, node, lengths, steps)
        valid, back = _within_lengths(e, lengths, steps, reverse)
        if back is not None:  # each sequence reversed within its length, then run forward
            gates = _gathered_steps(e, gates, back)
        scans = [padded(valid, helper.make_tensor("no", onnx.TensorProto.BOOL, [1], [0]))]
    seq = padded(gates, helper.make_tensor("zero", dtype, [1], [0]))
    body = Emitter({}, e.types)  # the weights it reads are the outer graph's, by name
    body.prefix = f"{e.prefix}/step"
    inner = [body.fresh() for _ in states]
    x_t = body.fresh()
    new = step(body, x_t, inner)
    matrix = [None, None]
    scanned = [helper.make_tensor_value_info(x_t, dtype, matrix)]
    if lengths is not None:
        valid_t = body.fresh()
        scanned.append(helper.make_tensor_value_info(valid_t, onnx.TensorProto.BOOL, matrix))
        zero = None if zeroed is None else body.const(0, dtypes.to_numpy(e.types[x].dtype))
        new = [body.op("Where", [valid_t, n, zero if k == zeroed else o])[0]
               for k, (n, o) in enumerate(zip(new, inner))]
    y_t = body.op("Identity", [new[0]])[0]
    graph = helper.make_graph(
        body.nodes, body.prefix,
        [helper.make_tensor_value_info(t, dtype, matrix) for t in inner] + scanned,
        [helper.make_tensor_value_info(t, dtype, matrix) for t in new + [y_t]],
        list(body.initializers.values()))
    direction = [int(reverse and lengths is None)]
    *finals, ys = e.op("Scan", [*states, seq, *scans], len(states) + 1, body=graph,
                       num_scan_inputs=1 + len(scans),
                       scan_input_directions=direction * (1 + len(scans)),
                       scan_output_directions=direction)
    if lengths is None:
        e.op("Slice", [ys, first, steps, first], [outs[0]])
    else:
        y = e.op("Slice", [ys, first, steps, first])[0]
        y = e.op("Where", [valid, y, e.const(0, dtypes.to_numpy(e.types[x].dtype))],
                 [outs[0]] if back is None else 1)[0]
        if back is not None:
            _gathered_steps(e, y, back, outs[0])
    for given, last, out in zip(states, finals, outs[1:]):
        e.op("Where", [empty, given, last], [out])


def _kernel_or_scan(e, node, ins: list, outs: list, a: dict, states: list[str],
                    step: Callable) -> None:
    """An ABI recurrence (lstm, gru, rnn; ``ins`` its inputs, ``states`` its initial ones) as
    onnxruntime's kernel where the call's values allow, else the Scan of ``step``
    (:mod:`.recurrent_kernels`)."""
    x, (w_ih, _, b_ih, _, lengths) = ins[0], (ins[1 + len(states):] + [None] * 5)[:5]

    def scan(b, names, guard):
        _recurrence(b, node, x, states, w_ih, b_ih, names, step, lengths, guard=guard)

    kernel_or_scan(e, node, x, states, lengths, outs,
                   recurrence_kernel(e, node.op, ins, a), scan)


def _within_lengths(e: Emitter, lengths: str, steps: str, reverse: bool
                    ) -> tuple[str, str | None]:
    """``(valid, back)`` for a recurrence's lengths: valid (T, B, 1) bool, step t within
    sequence b; for reverse, back (T, B, 1) int64, the step each position of a sequence
    reversed within its length comes from (and goes back to): lengths[b] - 1 - t within it,
    t past it. The lengths are clipped into [0, T] (:func:`.clipped_lengths`)."""
    lens = clipped_lengths(e, lengths, steps)
    t = e.op("Range", [e.const(0, np.int64), e.op("Squeeze", [steps])[0],
                       e.const(1, np.int64)])[0]
    t = e.op("Unsqueeze", [t, e.const([1, 2], np.int64)])[0]  # (T, 1, 1)
    lens = e.op("Unsqueeze", [lens, e.const([1], np.int64)])[0]  # (B, 1)
    valid = e.op("Less", [t, lens])[0]
    if not reverse:
        return valid, None
    last = e.op("Sub", [e.op("Sub", [lens, e.const(1, np.int64)])[0], t])[0]
    return valid, e.op("Where", [valid, last, t])[0]


def _gathered_steps(e: Emitter, seq: str, back: str, out: str | None = None) -> str:
    """``seq`` (T, B, k) with each sequence's steps taken from the positions ``back``."""
    index = e.op("Expand", [back, e.op("Shape", [seq])[0]])[0]
    return e.op("GatherElements", [seq, index], [out] if out else 1, axis=0)[0]


def _state_share(b: Emitter, h: str, w_t: str, bias: str | None) -> str:
    """h @ w_t (+ bias), in a Scan body."""
    share = b.op("MatMul", [h, w_t])[0]
    return share if bias is None else b.op("Add", [share, bias])[0]


def lstm(e, node, ins, outs, a):
    """The LSTM over the sequence: gates i, f, g, o as lstm_cell's; with peepholes, split
    once outside the Scan; onnxruntime's LSTM kernel instead where the call's values are
    finite and small enough (:mod:`.recurrent_kernels`)."""
    x, h, c, w_ih, w_hh, b_ih, b_hh, lengths, peepholes = (ins + [None] * 9)[:9]
    w_t, b_hh = _transposed(e, w_hh), e.value(b_hh) or None  # outer graph values, by name
    if peepholes is not None:
        peepholes = e.op("Split", [peepholes], 3, axis=0, num_outputs=3)

    def step(b, x_t, states):
        h, c = states
        return _lstm_gates(b, b.op("Add", [x_t, _state_share(b, h, w_t, b_hh)])[0], c,
                           peepholes=peepholes)

    _kernel_or_scan(e, node, ins, outs, a, [h, c], step)


def quantized_lstm(e, node, ins, outs, a, checked: bool = True):
    """The quantized LSTM's recurrence as an ONNX Scan (:func:`_recurrence`) whose body
    computes what the ops the import unrolls a short one into compute, so the op gives
    onnxruntime's own kernel's outputs bit for bit as they do: the state's product by the
    weight one com.microsoft DynamicQuantizeMatMul (DynamicQuantizeLinear's quantization,
    the integer GEMM of the uint8 state by the weight prepared once outside
    (:func:`integer_weight`: int8 as it is where that kernel is exact, else moved to uint8),
    ``float32(sum) * (state_scale * scale)``: the numbers of ``dynamic_quantize``,
    ``integer_linear``, ``cast`` and ``mul``), made nan where the state
    holds a nan (the ABI's ``dynamic_quantize`` gives a nan scale there; onnxruntime's
    quantization does not see every nan), then the gates in onnxruntime's order (the op's
    doc; without peepholes the bias added to the four blocks at once, the same sums). With
    ``quantize_y`` the state quantized at each step is a third one, the step's y (0 past a
    sequence's end). Some 20 onnxruntime kernels a step. ``checked`` False: the caller checks
    the state's size (:func:`quantized_state_checked`; inside an If's branch, whose values
    cannot be the model's outputs)."""
    x, h, c, w, scale, w_zp, bias, lengths, peepholes = (ins + [None] * 9)[:9]
    wt, w_zp = integer_weight(e, w, w_zp)
    scale = e.value(scale)  # an outer graph value, read by name in the body
    # without peepholes the bias is added to the four blocks at once (one Add, the same sums)
    biases = None if bias is None else (
        e.op("Split", [bias], 4, axis=0, num_outputs=4) if peepholes is not None
        else e.value(bias))
    holes = None if peepholes is None else e.op("Split", [peepholes], 3, axis=0, num_outputs=3)
    if checked:
        quantized_state_checked(e, node, x, h)

    def step(b, x_t, states):
        h, c, *y = states
        state = (y or [h])[0]
        # onnxruntime's DynamicQuantizeLinear, MatMulInteger and the scaling in one kernel
        [product] = b.op("DynamicQuantizeMatMul", [state, wt, scale, w_zp], domain=MS)
        # a nan in the state: the product nan, as the ABI's scale nan makes it (whatever
        # codes onnxruntime then computes)
        [product] = b.op("Where", [nan_seen(b, state), b.const(np.nan, np.float32), product])
        gates = b.op("Add", [x_t, product])[0]
        h_next, c_next = _quantized_lstm_gates(b, gates, c, holes, biases)
        # a body output is one value: y's state its own (an Identity) beside h
        return [h_next, c_next] + [b.op("Identity", [h_next])[0] for _ in y]

    states = [h, c] + ([h] if a["quantize_y"] else [])
    _recurrence(e, node, x, states, None, None, outs, step, lengths,
                zeroed=2 if a["quantize_y"] else None)


def quantized_state_checked(e, node, x: str, h: str) -> None:
    """Over sizes known only when the call runs (or a fixed 0), a state of no values refused
    after the run where a step of the quantized LSTM ``node`` quantizes it (x: its steps)."""
    if any(type(d) is not int for d in e.types[h].shape) or 0 in e.types[h].shape:
        shape = e.op("Concat", [e.op("Shape", [x], end=1)[0], e.op("Shape", [h])[0]], axis=0)[0]
        check = functools.partial(_quantized_state, f"node {node.name!r}")
        e.checks.shapes.append((shape, check, node.name))


def _quantized_state(where: str, shape: tuple) -> None:
    """Refuse a state of no values (x's steps, then h's shape) where a step quantizes it."""
    steps, *state = shape
    if steps:
        need_values(where, state, "the state")


def _quantized_lstm_gates(b: Emitter, gates: str, c: str, peepholes, bias) -> list[str]:
    """The quantized LSTM's next [h, c] from its gates (blocks i, o, f, c) in a Scan body:
    peepholes (i, o, f) and bias (i, o, f, c) blocks added in the order of onnxruntime's
    kernel (the op's doc); ``bias`` the four blocks where there are peepholes, else the whole
    (4*hidden,) bias, added before the gates are split (the same sums)."""
    if peepholes is None and bias is not None:
        gates, bias = b.op("Add", [gates, bias])[0], None
    g_i, g_o, g_f, g_c = b.op("Split", [gates], 4, axis=1, num_outputs=4)

    def gate(g, k, state):
        if peepholes is not None and k < 3:
            g = b.op("Add", [g, b.op("Mul", [state, peepholes[k]])[0]])[0]
        return g if bias is None else b.op("Add", [g, bias[k]])[0]

    i = b.op("Sigmoid", [gate(g_i, 0, c)])[0]
    f = b.op("Sigmoid", [gate(g_f, 2, c)])[0]
    cell = b.op("Add", [b.op("Mul", [c, f])[0],
                        b.op("Mul", [i, b.op("Tanh", [gate(g_c, 3, c)])[0]])[0]])[0]
    o = b.op("Sigmoid", [gate(g_o, 1, cell)])[0]
    return [b.op("Mul", [b.op("Tanh", [cell])[0], o])[0], cell]


def gru(e, node, ins, outs, a):
    """The GRU over the sequence: gates r, z, n; n = tanh(x's share + r * (W_hn h + b_hn)),
    or without ``linear_before_reset`` tanh(x's share + W_hn (r * h) + b_hn); h' = n + z *
    (h - n), as the numpy backend computes it."""
    x, h, w_ih, w_hh, b_ih, b_hh, lengths = (ins + [None] * 7)[:7]
    w_t, b_hh = _transposed(e, w_hh), e.value(b_hh) or None  # outer graph values, by name
    if not a["linear_before_reset"]:  # W_hn apart from W_hr and W_hz
        hidden = e.types[w_hh].shape[1]
        if not isinstance(hidden, int):
            raise BackendError(f"onnxruntime backend: node {node.name!r}: gru needs a fixed "
                               f"hidden size, got weight_hh {e.types[w_hh].shape}",
                               node=node.name)
        sizes = e.const([2 * hidden, hidden], np.int64)
        w_rz, w_n = e.op("Split", [w_t, sizes], 2, axis=1)
        b_rz, b_n = (None, None) if b_hh is None else e.op("Split", [b_hh, sizes], 2, axis=0)

    def step(b, x_t, states):
        [h] = states
        x_r, x_z, x_n = b.op("Split", [x_t], 3, axis=1, num_outputs=3)
        if a["linear_before_reset"]:
            s_r, s_z, s_n = b.op("Split", [_state_share(b, h, w_t, b_hh)], 3, axis=1,
                                 num_outputs=3)
        else:
            s_r, s_z = b.op("Split", [_state_share(b, h, w_rz, b_rz)], 2, axis=1,
                            num_outputs=2)
        r, z = (b.op("Sigmoid", [b.op("Add", [p, q])[0]])[0] for p, q in ((x_r, s_r), (x_z, s_z)))
        if a["linear_before_reset"]:
            reset = b.op("Mul", [r, s_n])[0]
        else:
            reset = _state_share(b, b.op("Mul", [r, h])[0], w_n, b_n)
        n = b.op("Tanh", [b.op("Add", [x_n, reset])[0]])[0]
        return [b.op("Add", [b.op("Mul", [b.op("Sub", [h, n])[0], z])[0], n])[0]]

    _kernel_or_scan(e, node, ins, outs, a, [h], step)


def rnn(e, node, ins, outs, a):
    """The Elman RNN over the sequence: h' = tanh or relu of x's share + W_hh h + b_hh."""
    x, h, w_ih, w_hh, b_ih, b_hh, lengths = (ins + [None] * 7)[:7]
    w_t, b_hh = _transposed(e, w_hh), e.value(b_hh) or None  # outer graph values, by name
    act = "Tanh" if a["nonlinearity"] == "tanh" else "Relu"

    def step(b, x_t, states):
        [h] = states
        return [b.op(act, [b.op("Add", [x_t, _state_share(b, h, w_t, b_hh)])[0]])[0]]

    _kernel_or_scan(e, node, ins, outs, a, [h], step)


def embedding(e, node, ins, outs, a, *, checked: bool = True):
    """Gather of the weight's rows; indices of another integer dtype than ONNX Gather takes
    (int32, int64) are Cast to int64 first (after the check, or before the clip)."""
    idx, weight = ins[:2]
    vocab = e.types[weight].shape[0]
    given = idx
    if e.types[idx].dtype not in ("int32", "int64"):
        idx = e.op("Cast", [idx], to=onnx.TensorProto.INT64)[0]
    if checked:
        e.op("Gather", [weight, idx], outs, axis=0)
        return
    e.checks.guards.append((given, int(vocab), f"node {node.name!r}", "embedding"))
    dtype = np.int32 if e.types[given].dtype == "int32" else np.int64
    safe = e.op("Clip", [idx, e.const(0, dtype), e.const(vocab - 1, dtype)])[0]
    e.op("Gather", [weight, safe], outs, axis=0)


#: layer op name (version 1) -> converter(emitter, node, input names, output names, attrs)
CONVERTERS: dict[str, Converter] = {
    "conv": conv, "conv_transpose": conv_transpose, "batchnorm": batchnorm,
    "group_norm": group_norm, "instance_norm": instance_norm, "layer_norm": layer_norm,
    "layer_norm2d": layer_norm2d, "rms_norm": rms_norm, "linear": linear,
    "integer_linear": integer_linear,
    "qlinear_conv": qlinear_conv,
    "lstm_cell": lstm_cell, "lstm": lstm, "gru": gru, "rnn": rnn, "embedding": embedding,
    "quantized_lstm": quantized_lstm,
}
