"""Quantized models in QDQ format (onnxruntime's ``quantize_static``, TensorRT, the QAT
exporters): QuantizeLinear and DequantizeLinear imported as float32 fake quantization, with the
numbers onnxruntime computes for the quantized model (graph optimizations off). Registered in
:data:`.ops.MAPPERS` (run-time inputs) and :func:`.fold.register` (constant inputs) on import.

- DequantizeLinear of a constant (the int8/uint8 weights, the int32 bias) folds to a float32
  constant ``float32(int32(x) - int32(zero_point)) * scale``, onnxruntime's order of operations
  (its int32 difference wraps, so does this one's); of a run-time value it is ``cast``, ``sub``,
  ``mul`` (int32: ``sub`` in int32 before the cast).
- QuantizeLinear is ``saturate(round_half_to_even(x / scale) + zero_point)``, a nan giving
  the type's minimum, as onnxruntime: one ABI ``quantize_linear`` (its codes float32 integers,
  exact for every type of 16 bits or fewer), then ``cast``. Integers that only
  DequantizeLinear reads (the activations of a QDQ model) stay float32: neither cast is
  emitted, and backends without int8 tensors run the model.

Scales and zero points must be constants: per-tensor (one value), per-axis (one value per
entry of ``axis``, broadcast through a reshaped constant) or blocked (opset 21's
``block_size``: one per block along ``axis``, repeated to the values' static shape); a
QuantizeLinear's may be computed at run time per tensor. A scale that is not a positive
finite float32, a zero point of another dtype than the quantized values and com.microsoft's
operator-oriented quantized ops (QLinearAdd, QGemm ...) are refused, naming the node.
``quantize_dynamic``'s ops (DynamicQuantizeLinear, MatMulInteger, ConvInteger) map in
:mod:`.dynamic`; the QOperator format's QLinearConv and QLinearMatMul in :mod:`.qlinear`
(integers that only they and DequantizeLinear read stay float32 here too).
"""

from __future__ import annotations

import numpy as np

from abi import dtypes
from abi.quantization import quantize_linear

from ..errors import ModelFileError, UnsupportedModelError
from .fold import axis_in
from .fold import register as register_fold
from .ops import REFUSED, maps
from .reader import ONNX_DTYPES, op_key

#: The integer dtypes QuantizeLinear writes and DequantizeLinear reads (int32: DequantizeLinear
#: only, the bias).
QUANTIZED = ("int8", "uint8", "int16", "uint16")
DEQUANTIZED = QUANTIZED + ("int32",)

#: What to do instead of an operator-oriented quantized model.
QDQ_HINT = ("an operator-oriented quantized op; quantize in QDQ format instead: "
            "onnxruntime.quantization.quantize_static with quant_format=QuantFormat.QDQ, "
            "which imports as float32 fake quantization")

#: com.microsoft's operator-oriented quantized ops not mapped, which the reader refuses with
#: this hint (QLinearConv and QLinearMatMul, default domain, map in :mod:`.qlinear`; QLinearAdd,
#: QGemm and the others of :data:`.reader.CONTRIB_MAPPED` in :mod:`.qoperator`,
#: :mod:`.qsoftmax` and :mod:`.matmul_to_float`; QAttention and QEmbedLayerNormalization in
#: :mod:`.bert`).
OPERATOR_ORIENTED = frozenset({"QLinearReduceMean", "QOrderedMatMul"})

#: Those of them onnxruntime's CPU provider has no kernel for: it cannot run them either, so
#: nothing could compute the golden vectors of a model holding one.
NO_CPU_KERNEL = frozenset({"QLinearReduceMean", "QOrderedMatMul"})
NO_CPU_KERNEL_HINT = "onnxruntime's CPU provider has no kernel for it either; " + QDQ_HINT


def _axis(attrs: dict, op: str) -> int:
    """The ``axis`` attribute, after refusing the attributes and values not mapped."""
    allowed = {"axis", "block_size", "saturate", "output_dtype", "precision", "_outputs"}
    if op == "DequantizeLinear":
        allowed -= {"saturate", "precision"}
    for k, v in attrs.items():
        if k not in allowed:
            raise UnsupportedModelError(f"attribute {k}={v!r} is not supported")
    if attrs.get("saturate", 1) not in (0, 1):  # float8 only: integers always saturate
        raise UnsupportedModelError(f"attribute saturate={attrs['saturate']!r} must be 0 or 1")
    # the precision of the arithmetic, DequantizeLinear's output type: 0 (the scale's) or float
    for k in ("precision",) + (("output_dtype",) if op == "DequantizeLinear" else ()):
        if attrs.get(k, 0) not in (0, 1):
            raise UnsupportedModelError(f"attribute {k}={attrs[k]!r} is not supported (only "
                                        f"float32, 1)")
    return attrs.get("axis", 1)


def _check_scale(scale: np.ndarray) -> None:
    if scale.dtype != np.float32:
        raise UnsupportedModelError(f"scale of dtype {scale.dtype}: only float32 scales are "
                                    f"supported")
    bad = scale[~(np.isfinite(scale) & (scale > 0))]
    if bad.size:
        raise ModelFileError(f"scale {bad.ravel()[:4].tolist()} (of {scale.size} value(s)) "
                             f"must be positive and finite")


def parameters(shape, scale: np.ndarray, zero_point: np.ndarray | None, axis: int,
               dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Scale and zero point checked against values of ``shape`` and ``dtype`` and shaped to
    broadcast with them: per-tensor as 0-d arrays, per-axis as ``(C, 1, ...)`` from ``axis``.
    ModelFileError for a malformed pair, UnsupportedModelError for what is not mapped."""
    _check_scale(scale)
    if zero_point is not None:
        zp_dtype = dtypes.from_numpy(zero_point.dtype)
        if zp_dtype != dtype:
            raise ModelFileError(f"zero_point of dtype {zp_dtype} differs from the quantized "
                                 f"values' {dtype}")
        if zero_point.shape != scale.shape and not zero_point.size == scale.size == 1:
            raise ModelFileError(f"zero_point of shape {list(zero_point.shape)} differs from "
                                 f"the scale's {list(scale.shape)}")
    if scale.ndim == 0 or scale.shape == (1,):
        return scale.reshape(()), None if zero_point is None else zero_point.reshape(())
    if scale.ndim != 1:
        raise ModelFileError(f"scale of shape {list(scale.shape)}: must be one value, or 1-D "
                             f"with one value per entry of the axis")
    a = axis_in(axis, len(shape), "axis")
    if shape[a] != scale.size:
        raise ModelFileError(f"scale of shape {list(scale.shape)} does not match axis {axis} of "
                             f"the values' shape {list(shape)} (needs {shape[a]} value(s))")
    target = (scale.size,) + (1,) * (len(shape) - 1 - a)
    return scale.reshape(target), None if zero_point is None else zero_point.reshape(target)


def _quantized_dtype(zero_point: np.ndarray | None, attrs: dict) -> str:
    """The output dtype of a QuantizeLinear: its zero point's, else ``output_dtype``'s
    (uint8 by default)."""
    given = attrs.get("output_dtype", 0)
    if zero_point is not None:
        dtype = dtypes.from_numpy(zero_point.dtype)
        if given and ONNX_DTYPES.get(given) != dtype:
            raise ModelFileError(f"output_dtype {given} differs from the zero point's {dtype}")
    else:
        dtype = ONNX_DTYPES.get(given, "?") if given else "uint8"
    if dtype not in QUANTIZED:
        raise UnsupportedModelError(f"quantization to {dtype if dtype != '?' else given}: only "
                                    f"{', '.join(QUANTIZED)} are supported")
    return dtype


def _fold_quantize(ins, attrs: dict, cap: int) -> list:
    x, scale, zero_point = (list(ins) + [None])[:3]
    axis = _axis(attrs, "QuantizeLinear")
    dtype = _quantized_dtype(zero_point, attrs)
    if x.dtype != np.float32:
        raise UnsupportedModelError(f"input of dtype {x.dtype}: only float32 is quantized")
    s, z = _shaped(x.shape, scale, zero_point, axis, dtype, attrs, quantize=True)
    y = quantize_linear(x, s, None if z is None else z.astype(np.float32), dtype)
    return [y.astype(dtypes.to_numpy(dtype))]


def blocked_parameters(shape, scale: np.ndarray, zero_point: np.ndarray | None, axis: int,
                       block: int, dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Blocked quantization's scale and zero point (opset 21's ``block_size``: one per
    ``block`` consecutive entries along ``axis``, the last block shorter) checked against
    values of ``shape`` and ``dtype`` and repeated to their shape. A scale need only be finite
    here: onnxruntime's MatMulNBitsQuantizer writes negative ones for symmetric blocks, and a
    dequantization multiplies by it, whatever its sign."""
    if scale.dtype != np.float32:
        raise UnsupportedModelError(f"scale of dtype {scale.dtype}: only float32 scales are "
                                    f"supported")
    if not np.isfinite(scale).all():
        raise ModelFileError(f"scale {scale[~np.isfinite(scale)].ravel()[:4].tolist()} (of "
                             f"{scale.size} value(s)) must be finite")
    if type(block) is not int or block < 1:
        raise ModelFileError(f"attribute block_size={block!r} must be a positive count")
    a = axis_in(axis, len(shape), "axis")
    want = list(shape)
    want[a] = -(-shape[a] // block)
    for what, p in (("scale", scale), ("zero_point", zero_point)):
        if p is not None and list(p.shape) != want:
            raise ModelFileError(f"{what} of shape {list(p.shape)}: blocks of {block} along "
                                 f"axis {axis} of the values' shape {list(shape)} need "
                                 f"{want}")
    if zero_point is not None and dtypes.from_numpy(zero_point.dtype) != dtype:
        raise ModelFileError(f"zero_point of dtype {dtypes.from_numpy(zero_point.dtype)} "
                             f"differs from the quantized values' {dtype}")
    return tuple(None if p is None else np.repeat(p, block, axis=a).take(
        np.arange(shape[a]), axis=a) for p in (scale, zero_point))


def _shaped(shape, scale: np.ndarray, zero_point: np.ndarray | None, axis: int, dtype: str,
            attrs: dict, *, quantize: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`parameters`, or with ``block_size`` :func:`blocked_parameters` (a quantization's
    scale, which it divides by, positive and finite as per tensor and per axis)."""
    if not attrs.get("block_size", 0):
        return parameters(shape, scale, zero_point, axis, dtype)
    if quantize:
        _check_scale(scale)
    return blocked_parameters(shape, scale, zero_point, axis, attrs["block_size"], dtype)


def _fold_dequantize(ins, attrs: dict, cap: int) -> list:
    x, scale, zero_point = (list(ins) + [None])[:3]
    axis = _axis(attrs, "DequantizeLinear")
    dtype = dtypes.from_numpy(x.dtype)
    if dtype not in DEQUANTIZED:
        raise UnsupportedModelError(f"input of dtype {dtype}: only {', '.join(DEQUANTIZED)} are "
                                    f"dequantized")
    s, z = _shaped(x.shape, scale, zero_point, axis, dtype, attrs, quantize=False)
    y = x.astype(np.int32)
    if z is not None:
        y = y - z.astype(np.int32)  # wraps in int32, as onnxruntime's difference does
    return [y.astype(np.float32) * s]


REFUSED.update({op: NO_CPU_KERNEL_HINT if op in NO_CPU_KERNEL else QDQ_HINT
                for op in OPERATOR_ORIENTED})
register_fold("QuantizeLinear", _fold_quantize, optional=(2,))
register_fold("DequantizeLinear", _fold_dequantize, optional=(2,))


def _constants(imp, node, x: str, dtype: str, axis: int,
               attrs: dict) -> tuple[np.ndarray, np.ndarray | None]:
    scale = imp.const(node.input[1], "scale")
    zp = imp.const(node.input[2], "zero_point") if len(node.input) > 2 and node.input[2] \
        else None
    shape = imp.type_of(x).shape
    if attrs.get("block_size", 0):
        if not all(type(d) is int for d in shape):
            raise imp.unsupported(f"blocked quantization of input shape {list(shape)}: its "
                                  f"scale matches every dim, so they must be static")
        return _shaped(shape, scale, zp, axis, dtype, attrs,
                       quantize=node.op_type == "QuantizeLinear")
    if scale.ndim == 1 and scale.size > 1:
        dim = shape[axis_in(axis, len(shape))]
        if type(dim) is not int:
            raise imp.unsupported(f"per-axis scale over the run-time dim {dim!r} of input "
                                  f"shape {list(shape)}: the axis must be static")
    return parameters(shape, scale, zp, axis, dtype)


#: The ops that take integers held in float32 (:data:`imp.fake_quantized`), and at which
#: inputs: they dequantize, requantize or compare them (QLinearConv, QLinearMatMul:
#: :mod:`.qlinear`; com.microsoft's: :mod:`.qoperator`, :mod:`.qsoftmax`; MaxPool and a nearest
#: Resize of 8-bit integers: :mod:`.pool`, :mod:`.resize`). QLinearConcat's are its every third
#: input from the third.
INTEGER_INPUTS = {
    "DequantizeLinear": (0,), "QLinearConv": (0,), "QLinearMatMul": (0,), "MaxPool": (0,),
    "Resize": (0,),
    "com.microsoft.QLinearAdd": (0, 3), "com.microsoft.QLinearMul": (0, 3),
    "com.microsoft.QLinearSigmoid": (0,), "com.microsoft.QLinearLeakyRelu": (0,),
    "com.microsoft.QLinearAveragePool": (0,), "com.microsoft.QLinearGlobalAveragePool": (0,),
    "com.microsoft.QGemm": (0,), "com.microsoft.QLinearSoftmax": (0,),
    "com.microsoft.QLinearWhere": (1, 4),
    "com.microsoft.QLinearConcat": "concat"}


def _integer_input(node, i: int) -> bool:
    at = INTEGER_INPUTS.get(op_key(node), ())
    return i >= 2 and (i - 2) % 3 == 0 if at == "concat" else i in at


def integer_readers_only(imp, name: str) -> bool:
    """True when every reader of ``name`` reads it only at inputs of :data:`INTEGER_INPUTS`
    and it is no graph output: then the integers can stay in float32, where they are
    exact."""
    readers = [imp.model.graph.node[i] for i in imp.consumers.get(name, [])]
    return name not in imp.graph_outputs and bool(readers) and all(
        _integer_input(n, i) for n in readers for i, t in enumerate(n.input) if t == name)


@maps("QuantizeLinear")
def _quantize(imp, node, attrs):
    """One ``quantize_linear`` (x / scale, rounded half to even, plus the zero point, clipped
    to the integer range; a nan gives the type's minimum, as onnxruntime), cast to the integer
    type. When only DequantizeLinear, QLinearConv and QLinearMatMul read the result it stays
    float32 (no ``cast``): integers of 16 bits or fewer are exact there, and the backends
    without integer tensors run it. A scale or zero point computed at run time:
    :func:`_quantize_at_run_time`."""
    axis = _axis(attrs, node.op_type)
    x = node.input[0]
    zp_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
    t = imp.type_of(x)
    if t.dtype != "float32":
        raise imp.unsupported(f"input of dtype {t.dtype}: only float32 is quantized")
    if not all(imp.is_const(n) for n in (node.input[1], zp_name) if n):
        _quantize_at_run_time(imp, node, attrs, zp_name)
        return
    dtype = _quantized_dtype(imp.const(zp_name, "zero_point") if zp_name else None, attrs)
    scale, zp = _constants(imp, node, x, dtype, axis, attrs)
    out = node.output[0]
    quantized(imp, node, imp.tensor(x), imp.add_constant(scale, f"{out}.scale"),
              None if zp is None else imp.add_constant(zp.astype(np.float32),
                                                       f"{out}.zero_point"), dtype)


def quantized(imp, node, x: str, scale: str, zero_point: str | None, dtype: str) -> None:
    """The node's output bound to the codes ``quantize_linear(x, scale, zero_point)`` of
    ``dtype`` (float32 ABI values), as :func:`.qoperator.bind_codes` binds them: as they are
    where only ops that read codes take them, else cast to ``dtype``."""
    from .qoperator import bind_codes  # .qoperator is imported by .ops, which this imports

    bind_codes(imp, node, imp.step("quantize_linear", [x, scale, zero_point], "quantize",
                                   {"dtype": dtype}), dtype)


def _quantize_at_run_time(imp, node, attrs, zp_name: str | None) -> None:
    """QuantizeLinear by a scale or zero point computed at run time (DynamicQuantizeLinear's
    expanded function body, a model's own dynamic quantization), per tensor: one
    ``quantize_linear`` (a nan quotient, x nan or 0 / 0 where the scale is 0, gives the
    type's minimum, as onnxruntime), the zero point cast to float32. A per-axis or blocked one
    at run time is refused naming the node."""
    zp_type = imp.type_of(zp_name).dtype if zp_name else None
    dtype = _quantized_dtype(None if zp_type is None else
                             np.zeros((), dtypes.to_numpy(zp_type)), attrs)
    if attrs.get("block_size", 0):
        named = " and ".join(repr(n) for n in (node.input[1], zp_name)
                             if n and not imp.is_const(n))
        raise imp.unsupported(f"attribute block_size={attrs['block_size']}: the blocked scale "
                              f"or zero point {named} is computed at run time; only constant "
                              f"ones are mapped")
    parts = []
    for name, what in ((node.input[1], "scale"), (zp_name, "zero_point")):
        if name is None:
            continue
        shape = list(imp.type_of(name).shape)
        if shape not in ([], [1]):
            raise imp.unsupported(f"{what} {name!r} of shape {shape} is computed at run time: "
                                  f"only one per tensor is (a per-axis one must be a constant)")
        t = imp.tensor(name)
        if shape:
            t = imp.step("reshape", [t], f"{what}_scalar", {"shape": []})
        parts.append(t)
    scale, zp = parts[0], parts[1] if zp_name else None
    if imp.types[scale].dtype != "float32":
        raise imp.unsupported(f"scale of dtype {imp.types[scale].dtype}: float32 is supported")
    if zp is not None:
        zp = imp.step("cast", [zp], "zero_point_float", {"dtype": "float32"})
    quantized(imp, node, imp.tensor(node.input[0]), scale, zp, dtype)


@maps("DequantizeLinear")
def _dequantize(imp, node, attrs):
    """(x - zero_point) * scale in float32: ``cast``, ``sub``, ``mul``; an int32 x subtracts
    in int32 first (onnxruntime's order: its difference wraps); the float32 integers of a
    QuantizeLinear (see there) are not cast."""
    axis = _axis(attrs, node.op_type)
    x = node.input[0]
    dtype = imp.fake_quantized.get(x) or imp.type_of(x).dtype
    if dtype not in DEQUANTIZED:
        raise imp.unsupported(f"input of dtype {dtype}: only {', '.join(DEQUANTIZED)} are "
                              f"dequantized")
    scale, zp = _constants(imp, node, x, dtype, axis, attrs)
    out = node.output[0]
    y = imp.tensor(x)
    shift = zp is not None and zp.any()
    if shift and dtype == "int32":
        [y] = imp.emit("sub", [y, imp.add_constant(zp, f"{out}.zero_point")], [None],
                       suffix="/zero_point")
    if x not in imp.fake_quantized:
        [y] = imp.emit("cast", [y], [None], {"dtype": "float32"}, suffix="/cast")
    if shift and dtype != "int32":
        [y] = imp.emit("sub", [y, imp.add_constant(zp.astype(np.float32), f"{out}.zero_point")],
                       [None], suffix="/zero_point")
    imp.emit("mul", [y, imp.add_constant(scale, f"{out}.scale")], [out])
