"""Operator-oriented quantized models (onnxruntime's ``quantize_static`` with
``quant_format=QuantFormat.QOperator``): QLinearConv and QLinearMatMul imported with
onnxruntime's numbers, bit for bit. Registered in :data:`.ops.MAPPERS` on import.

- A QLinearConv whose W has one zero point (per tensor, or per output channel all equal) is
  one ABI ``qlinear_conv``, the op for QLinearConv's arithmetic below (which the onnxruntime
  backend runs as onnxruntime's own kernel, which takes no other zero points), of x's codes
  in their integer type (float32 ones cast back, exactly); its own codes go as they are to a
  next ``qlinear_conv``, and cast to float32 for other ops that read codes. Otherwise, and
  for QLinearMatMul, the ops below.
- The integer sum is ConvInteger's / MatMulInteger's (:mod:`.dynamic`): ``(x - x_zero_point)``
  times the constant ``w - w_zero_point`` accumulated exactly, in float32 where the import
  proves every partial sum within 2**24, else over runs summed in int32. A QLinearMatMul's
  B computed when the call runs (attention's scores and weighted values) is an int32
  ``matmul`` of both operands less their zero points, as onnxruntime's integer GEMM
  accumulates (wrapping past 2**31 as it does), then one ``cast`` to float32. QLinearConv's int32
  bias (a constant) is added to it: in float32 where the sum is float32 and every bias is
  within 2**24 (one rounding of the exact sum, as onnxruntime's int32 to float32 conversion),
  else in int32 and then ``cast`` to float32. A sum with the bias beyond int32 wraps, as
  onnxruntime's int32 accumulation does (a head's bias near 2**31 by its tiny scale).
- Requantization is onnxruntime's CPU kernels' (MLAS's ``MlasRequantizeOutput`` and its conv
  kernels), established by comparing candidate formulas with onnxruntime 1.32 over random and
  adversarial models (per-tensor and per-channel, int8 and uint8, with and without bias,
  grouped and depthwise convs, ties, sums beyond 2**24, huge scales):
  ``y = saturate(round_half_to_even(float32(sum) * scale) + y_zero_point)`` with the float32
  ``scale = (x_scale * w_scale) / y_scale`` in that order (``x_scale * (w_scale / y_scale)``
  and the exact product differ from onnxruntime in the last bit, which moves some outputs by
  one). ABI ops: ``mul`` by the constant scale (per output channel: a ``(C, 1, ...)``
  constant; per column of B: a vector), ``quantize_linear`` by a scale of 1 with y's zero
  point (round, add, saturate), then ``cast`` to the output type, except where only integer
  ops read the result (DequantizeLinear, QLinearConv, QLinearMatMul as their first input):
  those take the integers held in float32 (:data:`imp.fake_quantized`).
- Scales and zero points must be constants: x_scale, y_scale and their zero points one value
  (onnxruntime's kernels take no other), w_scale and w_zero_point one value or one per output
  channel (per column of B); the scales positive finite float32, every zero point of its
  values' dtype, and the combined scale finite in float32. Otherwise the node is refused,
  naming it.

On an x86-64 CPU without VNNI, onnxruntime's u8 x s8 kernels (uint8 activations, int8 weights,
``quantize_static``'s default) saturate pairs of products at int16 (:mod:`.saturation`): the
reference is then not the model's exact sums and such a build's comparison can fail; uint8
weights, int8 activations with int8 weights, or ``reduce_range=True`` are exact everywhere.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes
from abi.quantization import FLOAT32_EXACT

from ..errors import ModelFileError
from .dynamic import (CONV_ATTRS, _integer_input, _shifted_input, _weight_codes,
                      conv_attrs, conv_sum, matmul_sum)
from .ops import _only, maps

_INTEGERS = ("int8", "uint8")


def _scalar_input(imp, node, i: int, what: str) -> np.ndarray | None:
    """Constant input ``i`` (None where absent), refused when computed at run time."""
    name = node.input[i] if len(node.input) > i and node.input[i] else None
    if name is None:
        return None
    if not imp.is_const(name):
        raise imp.unsupported(f"{what} {name!r} must be a constant (known at import), but it "
                              f"is computed at run time")
    return imp.const(name)


def _scale(imp, node, i: int, what: str, count: int | None = None) -> np.ndarray:
    """Scale input ``i``: a positive finite float32, one value (``count``: or that many)."""
    scale = _scalar_input(imp, node, i, what)
    if scale is None:
        raise ModelFileError(f"{what} is missing", node=imp.node_name, op=node.op_type)
    if scale.dtype != np.float32:
        raise imp.unsupported(f"{what} of dtype {scale.dtype}: only float32 scales are "
                              f"supported")
    if scale.size != 1 and (count is None or scale.shape != (count,)):
        per = "" if count is None else f" or {count} (one per output channel)"
        raise ModelFileError(f"{what} of shape {list(scale.shape)}: must be one value{per}",
                             node=imp.node_name, op=node.op_type)
    bad = scale[~(np.isfinite(scale) & (scale > 0))]
    if bad.size:
        raise ModelFileError(f"{what} {bad.ravel()[:4].tolist()} (of {scale.size} value(s)) "
                             f"must be positive and finite", node=imp.node_name,
                             op=node.op_type)
    return scale.reshape(-1) if scale.size > 1 else scale.reshape(())


def _output_zero_point(imp, node) -> tuple[str, np.ndarray]:
    """y's dtype (its zero point's, uint8 without one) and its zero point, one value."""
    zp = _scalar_input(imp, node, 7, "y_zero_point")
    if zp is None:
        return "uint8", np.zeros((), np.float32)
    dtype = dtypes.from_numpy(zp.dtype)
    if dtype not in _INTEGERS:
        raise imp.unsupported(f"y_zero_point of dtype {dtype}: only int8 and uint8 are "
                              f"supported")
    if zp.size != 1:
        raise ModelFileError(f"y_zero_point of shape {list(zp.shape)}: must be one value",
                             node=imp.node_name, op=node.op_type)
    return dtype, zp.reshape(()).astype(np.float32)


def _scales(imp, node, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x_scale, w_scale (one value, or ``count``) and y_scale, checked (:func:`_scale`)."""
    return (_scale(imp, node, 1, "x_scale"), _scale(imp, node, 4, "w_scale", count),
            _scale(imp, node, 6, "y_scale"))


def _check_parameters(imp, node, count: int) -> tuple[np.ndarray, str, np.ndarray]:
    """The combined float32 scale ``(x_scale * w_scale) / y_scale`` (one value, or ``count``),
    y's dtype and zero point, after checking every scale and zero point."""
    x_scale, w_scale, y_scale = _scales(imp, node, count)
    for i, what in ((2, "x_zero_point"), (5, "w_zero_point")):
        _scalar_input(imp, node, i, what)  # a run-time one is refused as such, with its name
    dtype, y_zp = _output_zero_point(imp, node)
    with np.errstate(over="ignore", under="ignore"):
        scale = (x_scale * w_scale) / y_scale  # float32, onnxruntime's order
    if not np.all(np.isfinite(scale)):
        raise imp.unsupported(f"x_scale * w_scale / y_scale overflows float32 (x_scale "
                              f"{float(x_scale)!r}, y_scale {float(y_scale)!r}): onnxruntime "
                              f"would requantize with an infinite scale")
    return scale.astype(np.float32), dtype, y_zp


def _weight_input(imp, node, what: str) -> None:
    """Refuse run-time weights (input 3) with what to do instead."""
    w = node.input[3] if len(node.input) > 3 else ""
    if not w or not imp.is_const(w):
        raise imp.unsupported(f"{what} {w!r} must be a constant (the quantized weights), but it "
                              f"is computed at run time; quantize in QDQ format instead "
                              f"(quant_format=QuantFormat.QDQ), which imports")


def _with_bias(imp, node, y: str, kind: str, bias: np.ndarray | None, shape) -> str:
    """The float32 sum plus the int32 ``bias`` (reshaped to ``shape``), rounded once to float32
    as onnxruntime's int32 sum converted (module doc)."""
    if bias is None or not bias.any():
        if kind == "int32":
            y = imp.emit("cast", [y], [None], {"dtype": "float32"}, suffix="/float32")[0]
        return y
    if kind == "float32" and int(np.abs(bias.astype(np.int64)).max()) <= FLOAT32_EXACT:
        b = imp.add_constant(bias.astype(np.float32).reshape(shape), f"{node.output[0]}.bias")
        return imp.emit("add", [y, b], [None], suffix="/bias")[0]
    if kind == "float32":
        y = imp.emit("cast", [y], [None], {"dtype": "int32"}, suffix="/int32")[0]
    b = imp.add_constant(bias.astype(np.int32).reshape(shape), f"{node.output[0]}.bias")
    y = imp.emit("add", [y, b], [None], suffix="/bias")[0]
    return imp.emit("cast", [y], [None], {"dtype": "float32"}, suffix="/float32")[0]


def _requantize(imp, node, y: str, scale: np.ndarray, shape, dtype: str,
                zp: np.ndarray) -> None:
    """``saturate(round(y * scale) + zp)`` bound to the node's output (module doc): ``mul``,
    then ``quantize_linear`` by a scale of 1 (the division exact)."""
    from .quantize import quantized  # .quantize imports .ops, which imports this

    out = node.output[0]
    s = imp.add_constant(scale.reshape(shape) if scale.ndim else scale, f"{out}.scale")
    [y] = imp.emit("mul", [y, s], [None], suffix="/scale")
    quantized(imp, node, y, imp.add_constant(np.ones((), np.float32), f"{out}.one"),
              imp.add_constant(zp, f"{out}.zero_point"), dtype)


def _bias(imp, node, channels: int) -> np.ndarray | None:
    """QLinearConv's constant int32 bias (input 8), one per output channel. A sum with it
    beyond int32 wraps (module doc)."""
    bias = _scalar_input(imp, node, 8, "B")
    if bias is None:
        return None
    if bias.dtype != np.int32:
        raise ModelFileError(f"bias of dtype {bias.dtype}: QLinearConv's bias is int32",
                             node=imp.node_name, op=node.op_type)
    if bias.shape != (channels,):
        raise ModelFileError(f"bias of shape {list(bias.shape)}: must be one value per output "
                             f"channel ({channels})", node=imp.node_name, op=node.op_type)
    return bias


@maps("QLinearConv")
def _qlinear_conv(imp, node, attrs):
    """One ``qlinear_conv`` where W's zero points are one value (onnxruntime's kernel takes no
    other, so the onnxruntime backend runs it), else ConvInteger's exact sum plus the bias,
    requantized as onnxruntime (module doc)."""
    _only(imp, attrs, CONV_ATTRS)
    _weight_input(imp, node, "W")
    _integer_operand(imp, node)
    w = imp.const(node.input[3])
    if w.ndim < 3:
        raise imp.unsupported(f"W of shape {list(w.shape)}; QLinearConv needs (M, C/group, "
                              f"*kernel)")
    channels = w.shape[0]
    scale, dtype, zp = _check_parameters(imp, node, channels)
    bias = _bias(imp, node, channels)
    weight, w_zp = _weight_codes(imp, node, 0, "W", 3)
    if w_zp is None or np.all(w_zp == w_zp.flat[0]):
        _one_op(imp, node, attrs, weight, w_zp, bias, zp.astype(dtype))
        return
    y, kind = conv_sum(imp, node, attrs, at=3)
    shape = (channels,) + (1,) * (w.ndim - 2)  # over (N, M, *spatial)
    y = _with_bias(imp, node, y, kind, bias, shape)
    _requantize(imp, node, y, scale, shape, dtype, zp)


def _one_op(imp, node, attrs, weight: np.ndarray, w_zp: np.ndarray | None,
            bias: np.ndarray | None, y_zp: np.ndarray) -> None:
    """The QLinearConv as one ``qlinear_conv`` (module doc), bound by :func:`integer_op`."""
    out = node.output[0]
    x, x_zp = _integer_input(imp, node, "X")
    if x_zp is None:  # absent or 0
        x_zp = imp.add_constant(np.zeros((), imp.types[x].dtype), f"{out}.x_zero_point")
    x_scale, w_scale, y_scale = _scales(imp, node, weight.shape[0])
    w_zp = np.zeros((), weight.dtype) if w_zp is None else w_zp.reshape(w_zp.shape[:1])
    origin = imp.origin.get(node.input[3], node.input[3])
    inputs = [x, imp.add_constant(x_scale, f"{out}.x_scale"), x_zp,
              imp.add_constant(weight, origin), imp.add_constant(w_scale, f"{out}.w_scale"),
              imp.add_constant(w_zp, f"{out}.w_zero_point"),
              imp.add_constant(y_scale, f"{out}.y_scale"),
              imp.add_constant(y_zp, f"{out}.y_zero_point"),
              None if bias is None else imp.add_constant(bias, f"{out}.bias")]
    conv = conv_attrs(imp, node, attrs, weight.shape)
    integer_op(imp, node, "qlinear_conv", inputs, conv, dtypes.from_numpy(y_zp.dtype))


def integer_op(imp, node, op: str, inputs: list, attrs: dict, dtype: str) -> None:
    """The node's output as ``op`` of ``inputs``, codes of ``dtype``. Where only ops that read
    codes take them, they are cast to float32 for those that read them so, and one that takes
    them in their dtype takes the op's output (the cast then unread, left out of the graph)."""
    from .quantize import integer_readers_only  # .quantize imports .ops, which imports this

    out = node.output[0]
    if integer_readers_only(imp, out):
        y = imp.step(op, inputs, op, attrs)
        imp.emit("cast", [y], [out], {"dtype": "float32"}, suffix="/float32")
        imp.fake_quantized[out] = dtype
        imp.integer_codes[(out, dtype)] = y  # a reader of these codes in their dtype takes y
    else:
        imp.emit(op, inputs, [out], attrs)


@maps("QLinearMatMul")
def _qlinear_matmul(imp, node, attrs):
    """MatMulInteger's exact sum, requantized as onnxruntime (module doc); B computed when the
    call runs (attention's scores and its weighted values), an int32 matmul."""
    _only(imp, attrs, {})
    b_name = node.input[3] if len(node.input) > 3 else ""
    if b_name and not imp.is_const(b_name):
        return _run_time_matmul(imp, node)
    _weight_input(imp, node, "B")
    _integer_operand(imp, node)
    b = imp.const(node.input[3])
    columns = b.shape[-1] if b.ndim == 2 else None
    scale, dtype, zp = _check_parameters(imp, node, columns)
    y = _with_bias(imp, node, matmul_sum(imp, node, at=3), "int32", None, None)
    _requantize(imp, node, y, scale, (columns,), dtype, zp)


def _run_time_matmul(imp, node) -> None:
    """QLinearMatMul of two operands computed when the call runs: ``(a - a_zp) @ (b - b_zp)``
    in int32, as onnxruntime's integer GEMM accumulates it (exact up to 2**31, wrapping past
    it as its accumulator does), converted to float32 once and requantized with the float32
    ``(a_scale * b_scale) / y_scale`` (module doc). Every scale and zero point one value (a
    per-column b_scale of such a B is refused by onnxruntime too)."""
    _integer_operand(imp, node)
    scale, dtype, zp = _check_parameters(imp, node, None)
    operands = []
    for what, at, zp_at in (("A", 0, 2), ("B", 3, 5)):
        shifted = _shifted_input(imp, node, what, zp_at, at=at)
        [v] = imp.emit("cast", [shifted], [None], {"dtype": "int32"},
                       suffix=f"/{what.lower()}_int32")
        operands.append(v)
    [y] = imp.emit("matmul", operands, [None], suffix="/matmul_int32")
    [y] = imp.emit("cast", [y], [None], {"dtype": "float32"}, suffix="/sum_float32")
    _requantize(imp, node, y, scale, None, dtype, zp)


def _integer_operand(imp, node) -> None:
    """Refuse an input x that is not int8/uint8 (held in float32 or not)."""
    x = node.input[0]
    dtype = imp.fake_quantized.get(x) or imp.type_of(x).dtype
    if dtype not in _INTEGERS:
        raise imp.unsupported(f"x of dtype {dtype}: only int8 and uint8 are supported")
