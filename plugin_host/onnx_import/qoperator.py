"""onnxruntime's operator-oriented quantized contrib ops (domain ``com.microsoft``), which
``quantize_static`` with ``quant_format=QuantFormat.QOperator`` writes around QLinearConv and
QLinearMatMul (:mod:`.qlinear`): QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearConcat, QLinearWhere, QLinearGlobalAveragePool, QLinearAveragePool and QGemm, each
imported with onnxruntime's numbers, bit for bit (QLinearSoftmax: :mod:`.qsoftmax`).
Registered in :data:`.ops.MAPPERS` on import under ``com.microsoft.<op>``
(:func:`.reader.op_key`).

The arithmetic is onnxruntime 1.32's x86-64 CPU kernels', read in its source and checked
against it over random scales, zero points, shapes and every input code:

- **QLinearSigmoid, QLinearLeakyRelu, QLinearMul, QLinearAdd, QLinearConcat**: one op each,
  ``qlinear_sigmoid``, ``qlinear_leaky_relu``, ``qlinear_mul``, ``qlinear_add``,
  ``qlinear_concat``, whose meaning is onnxruntime's kernel's (the op table's docs;
  :mod:`abi.mlas`: QLinearAdd's two fused multiply-adds in the order its broadcasting loop
  takes the operands for the call's shapes), on the codes in their 8-bit dtype; the
  onnxruntime backend runs them as those kernels.
- **Lookup tables** (QLinearWhere's inputs of another scale or zero point): onnxruntime maps
  each of the 256 codes through a table built once (:mod:`abi.mlas`); the import builds the
  same table and looks the codes up (``embedding`` of a ``(256, 1)`` constant, so each index
  is checked when the call runs).
- **QLinearGlobalAveragePool** (and a QLinearAveragePool whose window is the whole unpadded
  static input, which onnxruntime runs the same way): one ``qlinear_global_average_pool``,
  the codes' sum less ``x_zp`` times the count in int32, times the float32 ``x_scale /
  (y_scale * count)``, rounded, plus ``y_zp``, which the onnxruntime backend runs as that
  kernel.
- **QLinearAveragePool**: one ``qlinear_average_pool``: each code dequantized as MLAS's table
  holds it, each window's taps summed one by one in float32 in row-major order, divided by
  the window's divisor, by ``y_scale``, plus ``y_zp``, rounded; over spatial dims known when
  the call runs too (SAME's pads only at stride 1, where they do not depend on the size),
  the op switching to the global pool's path where the call's input is the window.
- **QGemm**: QLinearMatMul's exact sum plus the int32 bias C (wrapping past int32 as
  onnxruntime's accumulation does), times the float32 ``(alpha * a_scale) * b_scale`` (per
  column of B, or one), divided by ``y_scale`` and requantized when there is one, else the
  float32 result.

Scales and zero points must be constants, one value each (QGemm's B per column too); every
scale positive and finite. Where onnxruntime's int32 conversion would overflow (a ratio of
scales so large that a sum passes 2**31; onnxruntime then gives the type's minimum) the node is
refused, naming it. The results are 8-bit codes held in float32 where only ops that read codes
take them (:func:`.quantize.integer_readers_only`), else cast to the codes' dtype.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes, mlas
from abi.ops import dims
from abi.errors import DomainError, ShapeError

from ..errors import ModelFileError
from .dynamic import _as_float, _as_integer, matmul_sum
from .ops import _only, maps
from .qlinear import _requantize, _scalar_input, _scale, _with_bias, integer_op

_MS = "com.microsoft."
_INTEGERS = ("int8", "uint8")


def _zero_point(imp, node, i: int, what: str, dtype: str) -> int:
    """Constant zero point input ``i`` of ``dtype`` (absent: 0), one value."""
    zp = _scalar_input(imp, node, i, what)
    if zp is None:
        return 0
    if dtypes.from_numpy(zp.dtype) != dtype:
        raise ModelFileError(f"{what} of dtype {dtypes.from_numpy(zp.dtype)} differs from the "
                             f"codes' {dtype}", node=imp.node_name, op=node.op_type)
    if zp.size != 1:
        raise ModelFileError(f"{what} of shape {list(zp.shape)}: must be one value",
                             node=imp.node_name, op=node.op_type)
    return int(zp.reshape(-1)[0])


def _codes(imp, node, i: int, what: str, *, integer: bool = False) -> tuple[str, str]:
    """Input ``i``, 8-bit codes, as float32 (held so already, or cast), or with ``integer`` as
    their dtype (:func:`.dynamic._as_integer`), and their dtype."""
    name = node.input[i] if len(node.input) > i else ""
    if not name:
        raise ModelFileError(f"{what} is missing", node=imp.node_name, op=node.op_type)
    dtype = imp.fake_quantized.get(name) or imp.type_of(name).dtype
    if dtype not in _INTEGERS:
        raise imp.unsupported(f"{what} of dtype {dtype}: only int8 and uint8 are supported")
    return (_as_integer(imp, name, dtype) if integer else _as_float(imp, name)), dtype


def bind_codes(imp, node, y: str, dtype: str) -> None:
    """Bind the node's output to codes ``y`` (float32): as they are where only ops that read
    codes take them, else cast to ``dtype``."""
    from .quantize import integer_readers_only  # .quantize imports .ops, which imports this

    out = node.output[0]
    if integer_readers_only(imp, out):
        imp.alias(out, y)
        imp.fake_quantized[out] = dtype
    else:
        imp.emit("cast", [y], [out], {"dtype": dtype}, suffix=f"/{dtype}")


def _saturated(imp, v: str, dtype: str, name: str = "saturate") -> str:
    """``v`` (float32) rounded half to even and clipped to ``dtype``'s codes."""
    info = np.iinfo(dtypes.to_numpy(dtype))
    y = imp.step("round", [v], "round")
    return imp.step("clip", [y], name, {"min": float(info.min), "max": float(info.max)})


def _check_reach(imp, what: str, reach: float) -> None:
    if not reach < mlas.INT32_LIMIT:
        raise imp.unsupported(f"{what} reaches {reach:.4g} in magnitude, beyond int32: "
                              f"onnxruntime's conversion of it gives the type's minimum")


# --- lookup tables ---------------------------------------------------------------------------


def _lookup(imp, x: str, dtype: str, table: np.ndarray, name: str) -> str:
    """The codes ``x`` (float32) mapped through ``table`` (the output code of each input code,
    :func:`abi.mlas.codes` order)."""
    position = x
    if dtype == "int8":
        shift = imp.add_constant(np.array(128.0, np.float32), f"{imp.node_name}.{name}_shift")
        position = imp.step("add", [x, shift], f"{name}_position")
    return lookup_at(imp, position, table, name)


def lookup_at(imp, position: str, table: np.ndarray, name: str) -> str:
    """``table[position]`` (float32), ``position`` whole numbers in ``[0, len(table))`` held
    in float32 (256 codes' entries, or rows of them)."""
    index = imp.step("cast", [position], f"{name}_index", {"dtype": "int64"})
    weight = imp.add_constant(table.astype(np.float32).reshape(-1, 1),
                              f"{imp.node_name}.{name}_table")
    y = imp.step("embedding", [index, weight], f"{name}_lookup")
    return imp.step("sum", [y], name, {"axes": [-1], "keepdim": False})


def _pair(imp, node, scale, zero_point: int, dtype: str, name: str) -> list[str]:
    """A scale (float32) and zero point (of the codes' ``dtype``) as constants of the op the
    node imports as, ``<output>.<name>_scale`` and ``<output>.<name>_zero_point``."""
    out = node.output[0]
    return [imp.add_constant(np.array(scale, np.float32), f"{out}.{name}_scale"),
            imp.add_constant(np.array(zero_point, dtype), f"{out}.{name}_zero_point")]


def unary_parameters(imp, node, dtype: str) -> list[str]:
    """X's and Y's scales and zero points (inputs 1 to 4 of QLinearSigmoid, QLinearLeakyRelu,
    QLinearSoftmax), checked, as constants (:func:`_pair`)."""
    return (_pair(imp, node, _scale(imp, node, 1, "X_scale"),
                  _zero_point(imp, node, 2, "X_zero_point", dtype), dtype, "x")
            + _pair(imp, node, _scale(imp, node, 3, "Y_scale"),
                    _zero_point(imp, node, 4, "Y_zero_point", dtype), dtype, "y"))


def _unary_op(imp, node, op: str, attrs: dict) -> None:
    """``op`` (``qlinear_sigmoid``, ``qlinear_leaky_relu``: onnxruntime's own kernels, a table
    of :func:`abi.mlas.lookup_table`) of X's codes in their dtype, its scales and zero points
    constants."""
    x, dtype = _codes(imp, node, 0, "X", integer=True)
    integer_op(imp, node, op, [x, *unary_parameters(imp, node, dtype)], attrs, dtype)


@maps(_MS + "QLinearSigmoid")
def _qlinear_sigmoid(imp, node, attrs):
    """One ``qlinear_sigmoid``: a table of MLAS's logistic (:func:`abi.mlas.logistic`)."""
    _only(imp, attrs, {})
    _unary_op(imp, node, "qlinear_sigmoid", {})


@maps(_MS + "QLinearLeakyRelu")
def _qlinear_leaky_relu(imp, node, attrs):
    """One ``qlinear_leaky_relu``: a table of ``x >= 0 ? x : alpha * x`` (float32)."""
    _only(imp, attrs, {"alpha": ...})
    _unary_op(imp, node, "qlinear_leaky_relu", {"alpha": float(attrs.get("alpha", 0.01))})


@maps(_MS + "QLinearConcat")
def _qlinear_concat(imp, node, attrs):
    """One ``qlinear_concat`` (onnxruntime's own kernel: each input requantized to Y's scale
    and zero point by a table where either differs, then concatenated)."""
    _only(imp, attrs, {"axis": ...})
    if "axis" not in attrs:
        raise ModelFileError("attribute axis is missing", node=imp.node_name, op=node.op_type)
    if len(node.input) < 5 or (len(node.input) - 2) % 3:
        raise ModelFileError(f"{len(node.input)} inputs: QLinearConcat takes Y_scale, "
                             f"Y_zero_point and one or more (X, X_scale, X_zero_point)",
                             node=imp.node_name, op=node.op_type)
    y_scale = _scale(imp, node, 0, "Y_scale")
    inputs, dtype = [], None
    for k, i in enumerate(range(2, len(node.input), 3)):
        x, x_dtype = _codes(imp, node, i, f"input {k}", integer=True)
        if dtype is None:
            dtype = x_dtype
            inputs += _pair(imp, node, y_scale, _zero_point(imp, node, 1, "Y_zero_point", dtype),
                            dtype, "y")
        elif x_dtype != dtype:
            raise ModelFileError(f"input {k} of dtype {x_dtype} differs from input 0's {dtype}",
                                 node=imp.node_name, op=node.op_type)
        x_scale = _scale(imp, node, i + 1, f"input {k}'s scale")
        x_zp = _zero_point(imp, node, i + 2, f"input {k}'s zero point", dtype)
        inputs += [x, *_pair(imp, node, x_scale, x_zp, dtype, f"x{k}")]
    integer_op(imp, node, "qlinear_concat", inputs, {"axis": attrs["axis"]}, dtype)


def _requantized(imp, x: str, dtype: str, given: tuple, wanted: tuple, name: str) -> str:
    """Codes ``x`` of (scale, zero point) ``given`` as codes of ``wanted``: themselves where
    the two are equal, else looked up in onnxruntime's table."""
    if given == wanted:
        return x
    table = mlas.lookup_table(lambda v: v, dtype, *given, *wanted)
    return _lookup(imp, x, dtype, table, name)


@maps(_MS + "QLinearWhere")
def _qlinear_where(imp, node, attrs):
    """``where(condition, x, y)``, X and Y each requantized to Z's scale and zero point as
    QLinearConcat's inputs (onnxruntime selects each by the condition, 0 elsewhere, then
    takes X's where it is not 0: the same values)."""
    _only(imp, attrs, {})  # its nine inputs, each given: the reader's schema check
    if imp.type_of(node.input[0]).dtype != "bool":
        raise ModelFileError(f"condition of dtype {imp.type_of(node.input[0]).dtype}: must be "
                             f"bool", node=imp.node_name, op=node.op_type)
    x, dtype = _codes(imp, node, 1, "X")
    y, y_dtype = _codes(imp, node, 4, "Y")
    if y_dtype != dtype:
        raise ModelFileError(f"Y of dtype {y_dtype} differs from X's {dtype}",
                             node=imp.node_name, op=node.op_type)
    out = (_scale(imp, node, 7, "Z_scale"), _zero_point(imp, node, 8, "Z_zero_point", dtype))
    x = _requantized(imp, x, dtype, (_scale(imp, node, 2, "X_scale"),
                                     _zero_point(imp, node, 3, "X_zero_point", dtype)), out, "x")
    y = _requantized(imp, y, dtype, (_scale(imp, node, 5, "Y_scale"),
                                     _zero_point(imp, node, 6, "Y_zero_point", dtype)), out, "y")
    bind_codes(imp, node, imp.step("where", [imp.tensor(node.input[0]), x, y], "where"), dtype)


# --- QLinearAdd and QLinearMul ---------------------------------------------------------------


def _binary(imp, node) -> tuple:
    """(a, b codes in their dtype, dtype, a/b/c scales, a/b/c zero points) of QLinearAdd /
    QLinearMul."""
    a, dtype = _codes(imp, node, 0, "A", integer=True)
    b, b_dtype = _codes(imp, node, 3, "B", integer=True)
    if b_dtype != dtype:
        raise ModelFileError(f"B of dtype {b_dtype} differs from A's {dtype}",
                             node=imp.node_name, op=node.op_type)
    for i, what in ((1, "A_scale"), (2, "A_zero_point"), (4, "B_scale"), (5, "B_zero_point"),
                    (6, "C_scale"), (7, "C_zero_point")):
        name = node.input[i] if len(node.input) > i else ""
        if not name or imp.type_of(name).shape != ():
            got = "missing" if not name else f"of shape {list(imp.type_of(name).shape)}"
            raise ModelFileError(f"{what} {got}: onnxruntime's kernel takes one value of rank 0",
                                 node=imp.node_name, op=node.op_type)
    scales = [_scale(imp, node, i, what) for i, what in ((1, "A_scale"), (4, "B_scale"),
                                                        (6, "C_scale"))]
    zps = [_zero_point(imp, node, i, what, dtype) for i, what in
           ((2, "A_zero_point"), (5, "B_zero_point"), (7, "C_zero_point"))]
    return a, b, dtype, scales, zps


@maps(_MS + "QLinearAdd")
def _qlinear_add(imp, node, attrs):
    """One ``qlinear_add`` (onnxruntime's own kernel: two fused multiply-adds on the codes, in
    the order its broadcasting loop takes them for the call's shapes)."""
    _only(imp, attrs, {})
    a, b, dtype, (sa, sb, sc), (za, zb, zc) = _binary(imp, node)
    # an infinite ratio is refused here; the order of the operands does not change the reach
    _check_reach(imp, "the sum", mlas.add_reach(dtype, *mlas.add_parameters(sa, za, sb, zb,
                                                                            sc, zc)))
    _binary_op(imp, node, "qlinear_add", a, b, dtype, (sa, sb, sc), (za, zb, zc))


def _binary_op(imp, node, op: str, a: str, b: str, dtype: str, scales, zps) -> None:
    (sa, sb, sc), (za, zb, zc) = scales, zps
    integer_op(imp, node, op, [a, *_pair(imp, node, sa, za, dtype, "a"),
                               b, *_pair(imp, node, sb, zb, dtype, "b"),
                               *_pair(imp, node, sc, zc, dtype, "c")], {}, dtype)


@maps(_MS + "QLinearMul")
def _qlinear_mul(imp, node, attrs):
    """One ``qlinear_mul`` (onnxruntime's own kernel): ``(a - a_zp) * (b - b_zp) * ratio +
    c_zp`` in float32, rounded and saturated."""
    _only(imp, attrs, {})
    a, b, dtype, (sa, sb, sc), (za, zb, zc) = _binary(imp, node)
    ratio = mlas.mul_ratio(sa, sb, sc)  # an infinite one is refused here
    _check_reach(imp, "the product", mlas.mul_reach(dtype, za, zb, ratio, zc))
    _binary_op(imp, node, "qlinear_mul", a, b, dtype, (sa, sb, sc), (za, zb, zc))


# --- average pools ---------------------------------------------------------------------------


def _pool_codes(imp, node, attrs) -> tuple:
    """(x codes in their dtype, dtype, x scale/zp, y scale/zp, channels_last, x's shape)."""
    x, dtype = _codes(imp, node, 0, "X", integer=True)
    shape = list(imp.type_of(node.input[0]).shape)
    if len(shape) < 3:
        raise ModelFileError(f"X of shape {shape}: needs (N, C, spatial...)",
                             node=imp.node_name, op=node.op_type)
    channels_last = attrs.get("channels_last", 0)
    if channels_last not in (0, 1):
        raise ModelFileError(f"channels_last={channels_last!r}: must be 0 or 1",
                             node=imp.node_name, op=node.op_type)
    return (x, dtype, _scale(imp, node, 1, "x_scale"),
            _zero_point(imp, node, 2, "x_zero_point", dtype), _scale(imp, node, 3, "y_scale"),
            _zero_point(imp, node, 4, "y_zero_point", dtype), channels_last, shape)


def _global_average(imp, node, x: str, dtype: str, x_scale, x_zp: int, y_scale, y_zp: int,
                    channels_last: bool, shape: list) -> None:
    """One ``qlinear_global_average_pool`` (onnxruntime's own kernel: exact sums, one float32
    scale) of X's codes ``x`` in their dtype; over pooled dims known at import, a count or a scale
    onnxruntime refuses is refused here, naming the node (over dims known when the call runs,
    the op refuses the call)."""
    axes = mlas.global_average_axes(len(shape), channels_last)
    if all(type(shape[a]) is int for a in axes):
        try:
            count = mlas.global_average_count(node.op_type, shape, channels_last)
            mlas.global_average_checked(node.op_type, x_scale, y_scale, count)
        except (ShapeError, DomainError) as exc:
            raise imp.unsupported(str(exc).removeprefix(f"{node.op_type}: ")) from None
    integer_op(imp, node, "qlinear_global_average_pool",
               [x, *_pair(imp, node, x_scale, x_zp, dtype, "x"),
                *_pair(imp, node, y_scale, y_zp, dtype, "y")],
               {"channels_last": bool(channels_last)}, dtype)


@maps(_MS + "QLinearGlobalAveragePool")
def _qlinear_global_average_pool(imp, node, attrs):
    """Over every spatial axis (module doc)."""
    _only(imp, attrs, {"channels_last": ...})
    x, dtype, xs, xz, ys, yz, last, shape = _pool_codes(imp, node, attrs)
    _global_average(imp, node, x, dtype, xs, xz, ys, yz, last, shape)


@maps(_MS + "QLinearAveragePool")
def _qlinear_average_pool(imp, node, attrs):
    """One ``qlinear_average_pool`` of the codes (module doc); a window over the whole unpadded
    static input the global pool, as in onnxruntime."""
    _only(imp, attrs, {"auto_pad": ..., "kernel_shape": ..., "strides": ..., "pads": ...,
                       "ceil_mode": ..., "count_include_pad": ..., "channels_last": ...})
    x, dtype, xs, xz, ys, yz, last, shape = _pool_codes(imp, node, attrs)
    kernel = list(attrs.get("kernel_shape", []))
    spatial = len(shape) - 2
    if len(kernel) != spatial:
        raise ModelFileError(f"kernel_shape {kernel}: X {shape} has {spatial} spatial axes",
                             node=imp.node_name, op=node.op_type)
    sizes = [shape[a] for a in mlas.global_average_axes(len(shape), last)]
    strides = list(attrs.get("strides", [1] * spatial))
    if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") and any(
            s != 1 for n, s in zip(sizes, strides) if type(n) is not int):
        raise imp.unsupported(f"auto_pad={attrs['auto_pad']} with strides {strides} over "
                              f"spatial dims {sizes} of X {shape}: its pads depend on sizes "
                              f"known only when the call runs (at stride 1 they do not)")
    pads = _average_pads(imp, node, attrs, sizes, kernel, strides)
    padding = [[b, e] for b, e in zip(pads[:spatial], pads[spatial:])]
    if mlas.average_pool_whole(sizes, kernel, padding):
        return _global_average(imp, node, x, dtype, xs, xz, ys, yz, last, shape)
    ceil = bool(attrs.get("ceil_mode", 0))
    if any(type(n) is int and dims.pool_out(n, k, s, b, e, 1, ceil) < 1
           for n, k, s, (b, e) in zip(sizes, kernel, strides, padding)):
        raise ModelFileError(f"kernel_shape {kernel} with pads {pads} over spatial dims "
                             f"{sizes} leaves no output", node=imp.node_name, op=node.op_type)
    _check_reach(imp, "the average over y_scale", mlas.average_reach(dtype, xs, xz, ys, yz))
    integer_op(imp, node, "qlinear_average_pool",
               [x, *_pair(imp, node, xs, xz, dtype, "x"), *_pair(imp, node, ys, yz, dtype, "y")],
               {"kernel_size": kernel, "stride": strides, "padding": padding, "ceil_mode": ceil,
                "count_include_pad": bool(attrs.get("count_include_pad", 0)),
                "channels_last": bool(last)}, dtype)


def _average_pads(imp, node, attrs, sizes, kernel, strides) -> list[int]:
    """Explicit pads (begins then ends) from ``pads`` or ``auto_pad`` (onnxruntime's rule)."""
    spatial = len(sizes)
    if len(strides) != spatial or any(s < 1 for s in strides) or any(k < 1 for k in kernel):
        raise ModelFileError(f"kernel_shape {kernel} and strides {strides} must be {spatial} "
                             f"values >= 1 each", node=imp.node_name, op=node.op_type)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * spatial)
        for d, (n, k, s) in enumerate(zip(sizes, kernel, strides)):
            need = k - 1 if s == 1 else max(0, (-(-n // s) - 1) * s + k - n)
            head = need // 2 if auto == "SAME_UPPER" else (need + 1) // 2
            pads[d], pads[d + spatial] = head, need - head
        return pads
    if auto not in ("NOTSET", "VALID"):
        raise ModelFileError(f"auto_pad={auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, "
                             f"VALID", node=imp.node_name, op=node.op_type)
    pads = list(attrs.get("pads", [0] * (2 * spatial))) if auto == "NOTSET" else \
        [0] * (2 * spatial)
    if len(pads) != 2 * spatial or any(p < 0 for p in pads):
        raise ModelFileError(f"pads {pads}: need {2 * spatial} values >= 0",
                             node=imp.node_name, op=node.op_type)
    if any(p >= k for p, k in zip(pads, kernel + kernel)):
        raise ModelFileError(f"pads {pads} must each be smaller than the kernel {kernel}",
                             node=imp.node_name, op=node.op_type)
    return pads


# --- QGemm -------------------------------------------------------------------------------------


@maps(_MS + "QGemm")
def _qgemm(imp, node, attrs):
    """QLinearMatMul's exact sum plus the bias, scaled by ``(alpha * a_scale) * b_scale``
    (module doc); A's codes transposed where ``transA``; B constant, transposed at import
    where ``transB``."""
    _only(imp, attrs, {"alpha": ..., "transA": ..., "transB": ...})
    _codes(imp, node, 0, "A")
    a_shape = imp.type_of(node.input[0]).shape
    if len(a_shape) != 2:
        raise imp.unsupported(f"A of shape {list(a_shape)}: QGemm takes a 2-D A")
    if attrs.get("transA", 0):
        a = node.input[0]
        imp.emit("transpose", [imp.tensor(a)], [f"{a}.transposed"], {"perm": [1, 0]},
                 suffix="/transA")
        if a in imp.fake_quantized:
            imp.fake_quantized[f"{a}.transposed"] = imp.fake_quantized[a]
        node = _with_input(node, 0, f"{a}.transposed")
        a_shape = a_shape[::-1]
    b_name = node.input[3] if len(node.input) > 3 else ""
    if not b_name or not imp.is_const(b_name):
        raise imp.unsupported(f"B {b_name!r} must be a constant (the quantized weights), but "
                              f"it is computed at run time")
    b = imp.const(b_name)
    if b.ndim != 2:
        raise ModelFileError(f"B of shape {list(b.shape)}: QGemm takes a 2-D B",
                             node=imp.node_name, op=node.op_type)
    if attrs.get("transB", 0):
        b = np.ascontiguousarray(b.T)
        transposed = f"{b_name}.transposed"
        imp.set_const(transposed, b, imp.origin.get(b_name, b_name))
        node = _with_input(node, 3, transposed)
    columns = b.shape[1]
    a_scale = _scale(imp, node, 1, "a_scale")
    b_scale = _scale(imp, node, 4, "b_scale", columns)
    alpha = np.float32(attrs.get("alpha", 1.0))
    if not (np.isfinite(alpha) and alpha > 0):
        raise imp.unsupported(f"alpha={float(alpha)!r}: only a positive finite alpha is "
                              f"supported")
    with np.errstate(over="ignore", under="ignore"):
        scale = (np.float32(alpha * a_scale) * b_scale).astype(np.float32)
    y_scale = _scalar_input(imp, node, 7, "y_scale")
    y_zp = _scalar_input(imp, node, 8, "y_zero_point")
    if (y_scale is None) != (y_zp is None):
        raise imp.unsupported("y_scale without y_zero_point (or the reverse): give both (an "
                              "8-bit output) or neither (a float32 one)")
    if y_scale is not None:
        y_s = _scale(imp, node, 7, "y_scale")
        with np.errstate(over="ignore", under="ignore"):
            scale = (scale / y_s).astype(np.float32)
    if not np.all(np.isfinite(scale)):
        raise imp.unsupported("alpha * a_scale * b_scale / y_scale overflows float32")
    bias = _qgemm_bias(imp, node, columns, a_shape[0])
    y = _with_bias(imp, node, matmul_sum(imp, node, at=3), "int32", bias,
                   None if bias is None else bias.shape)
    if y_scale is None:
        s = imp.add_constant(scale, f"{node.output[0]}.scale")
        imp.emit("mul", [y, s], [node.output[0]], suffix="/scale")
        return
    dtype = dtypes.from_numpy(y_zp.dtype)
    if dtype not in _INTEGERS or y_zp.size != 1:
        raise imp.unsupported(f"y_zero_point of dtype {dtype} and shape {list(y_zp.shape)}: "
                              f"one int8 or uint8 value is supported")
    _requantize(imp, node, y, scale, (columns,), dtype,
                y_zp.reshape(()).astype(np.float32))


def _with_input(node, i: int, name: str):
    """A copy of ``node`` whose input ``i`` is ``name``."""
    copy = type(node)()
    copy.CopyFrom(node)
    copy.input[i] = name
    return copy


def _qgemm_bias(imp, node, columns: int, rows):
    """QGemm's constant int32 C (absent: None): one value, one per column, or (rows, columns).
    A sum with it beyond int32 wraps, as onnxruntime's int32 accumulation does."""
    c = _scalar_input(imp, node, 6, "C")
    if c is None:
        return None
    if c.dtype != np.int32:
        raise ModelFileError(f"C of dtype {c.dtype}: QGemm's C is int32", node=imp.node_name,
                             op=node.op_type)
    shapes = [(), (1,), (columns,), (1, columns), (1, 1)]
    if type(rows) is int:
        shapes += [(rows, 1), (rows, columns)]
    if c.shape not in shapes:
        raise ModelFileError(f"C of shape {list(c.shape)}: must broadcast to ({rows}, "
                             f"{columns}) as one value, a row, a column or the whole",
                             node=imp.node_name, op=node.op_type)
    per_row = c.ndim == 2 and c.shape[0] != 1  # (rows, 1) or (rows, columns); rows may be 0
    full = np.broadcast_to(c.astype(np.int64), (rows, columns)) if per_row else \
        np.broadcast_to(c.reshape(-1).astype(np.int64), (columns,))
    return np.ascontiguousarray(full).astype(np.int32)
