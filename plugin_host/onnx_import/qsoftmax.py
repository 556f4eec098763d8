"""com.microsoft's QLinearSoftmax, imported with onnxruntime's numbers, bit for bit.

onnxruntime 1.32's CPU kernel, read in its source and checked against it over random scales,
zero points, shapes, both 8-bit dtypes and both of its ``opset`` modes:

- A table of 256 float32 values, built once from ``x_scale`` and the count ``D`` of values
  each softmax normalizes: ``shift = max(0, logf(FLT_MAX / D) - 5) / x_scale`` and
  ``T[i] = (float) exp((i - 255 + shift) * x_scale)`` in double (:func:`table`). The C
  library's ``logf`` is part of the result: glibc's differs from the correctly rounded
  logarithm for some counts (the first is 60,594), so the import calls it (:func:`c_logf`).
- Per softmax, with ``m`` its largest code, each code ``x`` looks up ``e = T[255 - (m - x)]``
  (the zero point cancels); their float32 sum ``s`` runs one by one in order.
- The output is ``nearbyint(e * Ys / s) + y_zp`` with ``Ys = floor(1 / y_scale)`` (float32),
  the division in double: saturated to the codes (uint8 above at 255, int8 to [-128, 127]).

The backends compute in float32, so the import writes the last step exactly in int64: one
power of two ``c`` (from the table's largest value and ``Ys``) makes ``B = s * c`` a whole
number and ``A = e * c`` one but for values too small to round to anything but 0; then
``A * Ys / B`` is rounded half to even from the int64 quotient and remainder. That is the
exact quotient's rounding, which the double one equals but where the quotient lies within
about 2**-53 of a half-way point.

``opset`` (onnxruntime's attribute) below 13 normalizes over the flattened dims from ``axis``
(default 1) on, 13 and above over ``axis`` alone (default -1). The table depends on their
count: where they are static it is one constant; where some are known only when the call
runs (attention's softmax over a run-time sequence length) the import builds the tables of
every count from 1 to :data:`MAX_RUN_TIME_COUNT` and each call looks its codes up in the row
of its count, read from the input then (a count past the last row, or 0, is an
IndexRangeError naming the node). ``Ys`` must be below 2**19 (``y_scale`` above about
1.9e-6) and ``D`` small enough that the int64 steps cannot overflow (refused, naming the
node, otherwise).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np

from abi import dtypes
from abi.ops import dims as dim_math

from ..errors import ModelFileError
from .ops import _only, maps
from .qlinear import _scale
from .qoperator import _MS, _codes, _zero_point, bind_codes, lookup_at
from .run_time_sizes import size_tensor

_F32 = np.float32
#: ``floor(1 / y_scale)`` at most this: the int64 product ``A * Ys`` stays below 2**63
MAX_RATIO = 2 ** 19 - 1
#: the largest count of values a softmax over dims known only when the call runs normalizes:
#: the import holds one table of 256 float32 values per count up to it (1 MiB per node)
MAX_RUN_TIME_COUNT = 1024


@functools.lru_cache(maxsize=1)
def c_logf():
    """The C library's ``logf`` (float32 in and out), or None where none loads."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("m")).logf
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


def logf(value: np.float32) -> float:
    """``logf(value)`` as onnxruntime's kernel computes it: the C library's; without one, the
    correctly rounded float32 logarithm (glibc's for counts below 60,594)."""
    fn = c_logf()
    return float(fn(float(value))) if fn is not None else float(_F32(math.log(float(value))))


def table(x_scale: np.float32, count: int) -> np.ndarray:
    """onnxruntime's 256 float32 exponentials for ``count`` values a softmax, position ``i``
    holding ``exp((i - 255 + shift) * x_scale)``: ``i = 255`` the largest code's."""
    scale = float(_F32(x_scale))
    shift = max(0.0, logf(_F32(np.finfo(_F32).max) / _F32(count)) - 5.0) / scale
    return np.array([math.exp((i - 255.0 + shift) * scale) for i in range(256)], _F32)


@maps(_MS + "QLinearSoftmax")
def _qlinear_softmax(imp, node, attrs):
    """``round(T[255 - (m - x)] * Ys / sum)`` in int64, plus ``y_zp`` (module doc)."""
    _only(imp, attrs, {"axis": ..., "opset": ...})
    opset = attrs.get("opset")
    if type(opset) is not int:
        got = "missing" if opset is None else f"{opset!r}"
        raise ModelFileError(f"attribute opset {got}: onnxruntime's kernel needs the opset "
                             f"(an integer) whose Softmax it follows", node=imp.node_name,
                             op=node.op_type)
    x, dtype = _codes(imp, node, 0, "X")
    shape = list(imp.type_of(node.input[0]).shape)
    rank = len(shape)
    axis = attrs.get("axis", 1 if opset < 13 else -1)
    if type(axis) is not int or not -rank <= axis < rank:
        raise ModelFileError(f"attribute axis={axis!r} is outside X's {rank} dims",
                             node=imp.node_name, op=node.op_type)
    axis %= rank
    dims = shape[axis:] if opset < 13 else [shape[axis]]
    run_time = any(type(d) is not int for d in dims)
    count = MAX_RUN_TIME_COUNT if run_time else math.prod(dims)
    if count < 1:
        raise imp.unsupported(f"dims {dims} of X {shape}: no values to normalize")
    x_scale = _scale(imp, node, 1, "X_scale")
    _zero_point(imp, node, 2, "X_zero_point", dtype)  # checked; the softmax does not read it
    y_scale = _scale(imp, node, 3, "Y_scale")
    y_zp = _zero_point(imp, node, 4, "Y_zero_point", dtype)
    ratio = math.floor(float(_F32(1) / _F32(y_scale)))
    if ratio > MAX_RATIO:
        raise imp.unsupported(f"Y_scale {float(y_scale)!r}: 1 / Y_scale is {ratio}, above the "
                              f"{MAX_RATIO} the import computes exactly in int64")
    bits = ratio.bit_length() + 1  # 2**bits > 2 * ratio: a value below 2**-bits rounds to 0
    if count.bit_length() + 25 + bits > 62:
        raise imp.unsupported(f"{count} values per softmax with 1 / Y_scale = {ratio}: the "
                              f"sum's int64 form would overflow")
    imp.check_size("its int64 terms", shape)
    flattened = opset < 13
    if run_time:
        _build_run_time(imp, node, x, dtype, x_scale, bits, dims, axis, flattened, rank, ratio,
                        y_zp)
        return
    exps = table(x_scale, count)
    _build(imp, node, x, dtype, lambda position: lookup_at(imp, position, exps, "exp"), axis,
           flattened, rank, imp.add_constant(_unit(exps, bits), f"{imp.node_name}.unit"),
           ratio, y_zp)


def _unit(exps: np.ndarray, bits: int) -> np.ndarray:
    """The power of two ``c`` that makes the int64 forms of a table's sums whole (module
    doc)."""
    top = int(np.frexp(np.float64(exps[255]))[1]) - 1  # 2**top <= the largest value
    return np.array(np.ldexp(_F32(1), 23 - top + bits), _F32)


def _build_run_time(imp, node, x, dtype, x_scale, bits, dims, axis, flattened, rank, ratio,
                    y_zp):
    """The softmax over dims known when the call runs: the codes looked up in the table of
    the count read from the input then, one row of 256 per count (module doc)."""
    name = imp.node_name
    tables = np.stack([table(x_scale, c) for c in range(1, MAX_RUN_TIME_COUNT + 1)])
    units = np.stack([_unit(t, bits) for t in tables]).reshape(-1, 1)
    count = size_tensor(imp, dim_math.product(dims), ".count")
    row = imp.step("sub", [count, imp.index_constant([1], "first_count")], "table_row")
    unit = imp.step("sum", [imp.step("embedding", [row, imp.add_constant(
        units, f"{name}.units")], "unit_lookup")], "unit", {"axes": [-1], "keepdim": False})
    offset = imp.step("cast", [imp.step("mul", [row, imp.index_constant(
        [256], "table_width")], "table_start")], "table_offset", {"dtype": "float32"})

    def lookup(position):
        at = imp.step("add", [position, offset], "table_position")
        return lookup_at(imp, at, tables.reshape(-1), "exp")

    _build(imp, node, x, dtype, lookup, axis, flattened, rank, unit, ratio, y_zp)


def _build(imp, node, x, dtype, lookup, axis, flattened, rank, scale, ratio, y_zp):
    """``lookup`` gives each code's exponential from its position below the largest code
    (255 the largest's); ``scale`` is the power of two of the int64 forms (module doc)."""
    name = imp.node_name

    def const(value, what, dtype=np.float32):
        return imp.add_constant(np.array(value, dtype), f"{name}.{what}")

    axes = list(range(axis, rank)) if flattened else [axis]
    largest = imp.step("amax", [x], "largest", {"axes": axes, "keepdim": True})
    position = imp.step("add", [imp.step("sub", [x, largest], "below_largest"),
                                const(255.0, "top")], "position")
    e = lookup(position)
    terms = imp.step("flatten", [e], "row", {"start_dim": axis, "end_dim": -1}) \
        if flattened and rank - axis > 1 else e
    # the float32 running sum in order; its largest entry is the last (every term positive)
    total = imp.step("amax", [imp.step("cumsum", [terms], "running", {"axis": axis})],
                     "sum", {"axes": [axis], "keepdim": True})
    if flattened and rank - axis > 1:
        total = imp.step("unflatten", [total], "sum_dims",
                         {"axis": axis, "sizes": [1] * (rank - axis)})
    a = imp.step("cast", [imp.step("mul", [e, scale], "a_scaled")], "a", {"dtype": "int64"})
    b = imp.step("cast", [imp.step("mul", [total, scale], "b_scaled")], "b", {"dtype": "int64"})
    num = imp.step("mul", [a, const(ratio, "ratio", np.int64)], "numerator")
    q = imp.step("int_div", [num, b], "quotient")
    rem = imp.step("sub", [num, imp.step("mul", [q, b], "whole")], "remainder")
    twice = imp.step("add", [rem, rem], "twice_remainder")
    odd = imp.step("equal", [imp.step("mod", [q, const(2, "two", np.int64)], "parity",
                                      {"fmod": False}),
                             const(1, "one", np.int64)], "odd")
    up = imp.step("or", [imp.step("greater", [twice, b], "above_half"),
                         imp.step("and", [imp.step("equal", [twice, b], "half"), odd],
                                  "half_to_even")], "round_up")
    k = imp.step("add", [q, imp.step("cast", [up], "carry", {"dtype": "int64"})], "rounded")
    v = imp.step("cast", [k], "rounded_float", {"dtype": "float32"})
    if y_zp:
        v = imp.step("add", [v, const(float(y_zp), "y_zero_point")], "shifted")
    info = np.iinfo(dtypes.to_numpy(dtype))
    v = imp.step("clip", [v], "saturate", {"min": float(info.min), "max": float(info.max)})
    bind_codes(imp, node, v, dtype)
