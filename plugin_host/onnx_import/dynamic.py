"""Dynamically quantized models (onnxruntime's ``quantize_dynamic``): DynamicQuantizeLinear,
MatMulInteger and ConvInteger imported with onnxruntime's numbers, the integers held in float32
where that is exact. Registered in :data:`.ops.MAPPERS` (run-time inputs) and
:func:`.fold.register` (constant inputs) on import.

- DynamicQuantizeLinear (uint8) is the ABI's ``dynamic_quantize``, onnxruntime's CPU kernel
  in float32 (the op's doc): ``min``/``max`` over the whole tensor widened to include 0,
  ``scale = (max - min) / 255`` (1 where max == min, i.e. all zeros), ``zero_point =
  round(max(0, min(255, 0 - min / scale)))`` with C++'s std::min/std::max (a nan zero point
  gives 255, as there), then ``saturate(round(x / scale) + zero_point)`` as QuantizeLinear (a
  nan quotient gives 0, as MLAS's clamp). A nan in x is where the two part: onnxruntime's SIMD
  min/max keeps or drops it depending on its position; the op makes any nan's scale nan. Of a
  constant it folds here (the same numbers).
- MatMulInteger and ConvInteger are ``(A - a_zero_point) x (B - b_zero_point)`` accumulated in
  int32, which wraps past 2**31 in onnxruntime. MatMulInteger, and every quantized product of a
  constant 2-D B (DynamicQuantizeMatMul, MatMulIntegerToFloat, QLinearMatMul, QGemm, the
  quantized LSTM's), is one ABI ``integer_linear`` of the 8-bit codes (float32 ones cast back,
  exactly) and the weights as they are, int8 or uint8 with their zero points: exact int32 on
  every backend (the numpy backend sums in float32 runs that are exact, the onnxruntime backend
  runs onnxruntime's uint8 integer GEMM; both wrap as onnxruntime), and the weights stay one
  byte each. ConvInteger's constant W is folded to ``W - w_zero_point``; X minus its zero point
  is an integer of at most 255 in magnitude, so each product is exact in float32 and so is
  every partial sum while it stays within 2**24. The import bounds that from the weights (255
  times the largest sum of |W - w_zero_point| over one output) and runs one float32 ``conv``
  where the bound holds (exact in any summation order, on any backend, at BLAS speed). Beyond
  it the input channels are split into as few runs as keep each within the bound: a ``slice``
  of X and a float32 ``conv`` per run, each result cast to int32 and the runs summed with int32
  ``add`` (a grouped conv, a single input channel beyond the bound, or sums the weights let
  reach past int32 are refused naming the node). The int32 result stays float32 when only Casts
  to float32 read it (``quantize_dynamic``'s form); otherwise it is cast to int32.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from abi import dtypes
from abi.quantization import FLOAT32_EXACT, dynamic_quantization, exact_runs

from ..errors import ModelFileError
from .fold import one_value
from .fold import register as register_fold
from .layers import _pads
from .ops import _only, maps

#: The int32 range onnxruntime accumulates in: a bound beyond it would wrap there.
INT32_MAX = 2 ** 31 - 1
_INTEGERS = ("int8", "uint8")


# --- DynamicQuantizeLinear -------------------------------------------------------------------


def _fold_dynamic(ins, attrs: dict, cap: int) -> list:
    [x] = ins[:1]
    _only_outputs(attrs)
    if x.dtype != np.float32:
        raise ModelFileError(f"input of dtype {x.dtype}: DynamicQuantizeLinear takes float32")
    if x.size == 0:
        raise ModelFileError("input is empty: its min and max are undefined")
    y, scale, zp = dynamic_quantization(x)
    return [y.astype(np.uint8), scale, zp.astype(np.uint8)]


def _only_outputs(attrs: dict) -> None:
    extra = {k: v for k, v in attrs.items() if k != "_outputs"}
    if extra:
        raise ModelFileError(f"DynamicQuantizeLinear has no attributes, got {extra}")


def _read_only_by(imp, name: str, ops: tuple[str, ...]) -> bool:
    """True when ``name`` is no graph output and every reader is one of ``ops``."""
    readers = [imp.model.graph.node[i] for i in imp.consumers.get(name, [])]
    return name not in imp.graph_outputs and all(n.op_type in ops for n in readers)


_INTEGER_READERS = ("MatMulInteger", "ConvInteger", "DequantizeLinear", "MatMulIntegerToFloat")


def _bind_integers(imp, y: str, out: str, dtype: str) -> None:
    """Bind ONNX value ``out`` to float32 integers ``y``: as they are when only the integer ops
    read them (they take float32 integers, :data:`imp.fake_quantized`), else cast."""
    if not out:
        return
    if _read_only_by(imp, out, _INTEGER_READERS):
        imp.alias(out, y)
        imp.fake_quantized[out] = dtype
    else:
        imp.emit("cast", [y], [out], {"dtype": dtype}, suffix=f"/{dtype}")


@maps("DynamicQuantizeLinear")
def _dynamic_quantize(imp, node, attrs):
    """uint8 quantization with parameters computed from the tensor at run time
    (:func:`quantized_at_run_time`), its outputs bound."""
    _only(imp, attrs, {})
    outs = (list(node.output) + ["", ""])[:3]
    y, _, zp = quantized_at_run_time(imp, node, outs[1])
    _bind_integers(imp, y, outs[0], "uint8")
    _bind_integers(imp, zp, outs[2], "uint8")


def quantized_at_run_time(imp, node, scale_out: str = "", value: str | None = None,
                          tag: str = "") -> tuple[str, str, str]:
    """DynamicQuantizeLinear of input 0 (or of the graph tensor ``value``) as one ABI
    ``dynamic_quantize`` (the module's doc): the uint8 codes and zero point as float32
    integers, and the scale (bound to ONNX value ``scale_out`` where given). The node is
    named from the ONNX node and ``tag``."""
    x = node.input[0] if value is None else value
    t = imp.type_of(x) if value is None else imp.types[value]
    if t.dtype != "float32":
        raise imp.unsupported(f"input of dtype {t.dtype}: only float32 is quantized")
    if any(d == 0 for d in t.shape):
        raise ModelFileError(f"input of shape {list(t.shape)} is empty: its min and max are "
                             f"undefined", node=imp.node_name, op=node.op_type)
    xt = imp.tensor(x) if value is None else value
    y, scale, zp = imp.emit("dynamic_quantize", [xt], [None, scale_out or None, None],
                            suffix=f"{tag}/dynamic_quantize")
    return y, scale, zp


register_fold("DynamicQuantizeLinear", _fold_dynamic)


# --- MatMulInteger, ConvInteger --------------------------------------------------------------


def _zero_point(imp, node, i: int, dtype: str, what: str) -> str | np.ndarray | None:
    """Input ``i`` (a zero point of ``dtype``): a constant array, the ONNX name of a run-time
    one, or None where absent."""
    name = node.input[i] if len(node.input) > i and node.input[i] else None
    if name is None:
        return None
    zt = imp.fake_quantized.get(name) or imp.type_of(name).dtype
    if zt != dtype:
        raise ModelFileError(f"{what} of dtype {zt} differs from the values' {dtype}",
                             node=imp.node_name, op=node.op_type)
    if imp.is_const(name):
        return imp.const(name)
    return name


def _as_float(imp, name: str) -> str:
    """Run-time integers ``name`` as a float32 graph tensor (already so when fake)."""
    t = imp.tensor(name)
    if name in imp.fake_quantized:
        return t
    return imp.emit("cast", [t], [None], {"dtype": "float32"}, suffix="/float32")[0]


def _integer_dtype(imp, node, name: str, what: str) -> str:
    dtype = imp.fake_quantized.get(name) or imp.type_of(name).dtype
    if dtype not in _INTEGERS:
        raise imp.unsupported(f"{what} of dtype {dtype}: only int8 and uint8 are supported")
    return dtype


def _shifted_input(imp, node, what: str, zp_at: int = 2, at: int = 0) -> str:
    """A (input ``at``, by default 0) minus its zero point (input ``zp_at``; a per-tensor
    one: onnxruntime's CPU kernels take no other) as float32 integers in [-255, 255]."""
    a = node.input[at]
    tag = "a" if at == 0 else f"input{at}"
    dtype = _integer_dtype(imp, node, a, what)
    zp = _input_zero_point(imp, node, zp_at, dtype, what)
    x = _as_float(imp, a)
    if zp is None:
        return x
    zp = (imp.add_constant(zp.astype(np.float32), f"{node.output[0]}.{tag}_zero_point")
          if isinstance(zp, np.ndarray) else _as_float(imp, zp))
    return imp.emit("sub", [x, zp], [None], suffix=f"/{tag}_zero_point")[0]


def _integer_input(imp, node, what: str, zp_at: int = 2, at: int = 0) -> tuple[str, str | None]:
    """A (input ``at``) and its per-tensor zero point (input ``zp_at``) as ``integer_linear``
    reads them: int8/uint8 graph tensors (float32 codes cast back to their dtype, exactly),
    the zero point of shape () or None where absent or 0."""
    a = node.input[at]
    dtype = _integer_dtype(imp, node, a, what)
    zp = _input_zero_point(imp, node, zp_at, dtype, what)
    if isinstance(zp, np.ndarray):
        zp = imp.add_constant(zp.astype(dtype), f"{node.output[0]}.a_zero_point")
    elif zp is not None:
        zp = _as_integer(imp, zp, dtype)
        if imp.types[zp].shape:
            [zp] = imp.emit("reshape", [zp], [None], {"shape": []}, suffix="/a_zero_point")
    return _as_integer(imp, a, dtype), zp


def _input_zero_point(imp, node, i: int, dtype: str, what: str) -> str | np.ndarray | None:
    """An input's zero point (input ``i``), one value (onnxruntime's CPU kernels take no
    other): a constant of shape (), the ONNX name of a run-time one, or None where absent or
    a constant 0."""
    zp = _zero_point(imp, node, i, dtype, f"{what}'s zero point")
    if isinstance(zp, np.ndarray):
        if zp.size != 1:
            raise imp.unsupported(f"{what}'s zero point of shape {list(zp.shape)}: only one "
                                  f"value (per tensor) is supported, as onnxruntime's kernel")
        return zp.reshape(()) if zp.any() else None
    if zp is not None and imp.type_of(zp).shape not in ((), (1,)):
        raise imp.unsupported(f"{what}'s zero point of shape {list(imp.type_of(zp).shape)}: "
                              f"only one value (per tensor) is supported")
    return zp


def _as_integer(imp, name: str, dtype: str) -> str:
    """Run-time integers ``name`` as a graph tensor of their ``dtype``: float32 codes
    (:data:`imp.fake_quantized`) cast once, whichever nodes read them."""
    if name not in imp.fake_quantized:
        return imp.tensor(name)
    key = (name, dtype)
    if key not in imp.integer_codes:
        [imp.integer_codes[key]] = imp.emit("cast", [imp.tensor(name)], [None],
                                            {"dtype": dtype}, suffix=f"/{dtype}")
    return imp.integer_codes[key]


def _shifted_weight(imp, node, axis: int, what: str, at: int = 1,
                    zp_at: int | None = None) -> np.ndarray:
    """The constant B (W; input ``at``, its zero point input ``zp_at``, by default
    ``at + 2``) minus its zero point, as int32: per tensor, or one value per entry of
    ``axis`` (B's columns, W's output channels)."""
    w, zp = _weight_codes(imp, node, axis, what, at, zp_at)
    return w.astype(np.int32) - (0 if zp is None else zp.astype(np.int32))


def _weight_codes(imp, node, axis: int, what: str, at: int = 1,
                  zp_at: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The constant B (W) of :func:`_shifted_weight` in its int8/uint8 dtype, and its zero
    point (None where absent) of that dtype, shaped to broadcast against it: one value, or
    one per entry of ``axis``."""
    b = node.input[at]
    if not imp.is_const(b):
        raise imp.unsupported(f"{what} {b!r} must be a constant (the quantized weights), but it "
                              f"is computed at run time")
    dtype = _integer_dtype(imp, node, b, what)
    w = imp.const(b).astype(dtype)  # float32 integers where fake quantized
    zp = _zero_point(imp, node, at + 2 if zp_at is None else zp_at, dtype,
                     f"{what}'s zero point")
    if zp is None:
        return w, None
    if not isinstance(zp, np.ndarray):
        raise imp.unsupported(f"{what}'s zero point must be a constant, but it is computed at "
                              f"run time")
    zp = zp.astype(dtype)
    if zp.size == 1:
        return w, zp.reshape(())
    a = axis % w.ndim
    if zp.ndim != 1 or zp.size != w.shape[a]:
        raise ModelFileError(f"{what}'s zero point of shape {list(zp.shape)}: must be one value "
                             f"or one per entry of axis {a} of {list(w.shape)}",
                             node=imp.node_name, op=node.op_type)
    return w, zp.reshape((-1,) + (1,) * (w.ndim - 1 - a))


def _reach(shifted: np.ndarray, inner: int, outer: int) -> np.ndarray:
    """``reach[i, o]``: the most that entry ``i`` of the contracted axis ``inner`` can add to
    output ``o`` (axis ``outer``): 255 times the sum of |w| over the rest (a conv's kernel)."""
    w = np.moveaxis(np.abs(shifted.astype(np.int64)), (inner, outer), (0, 1))
    return 255 * w.reshape(w.shape[0], w.shape[1], -1).sum(axis=2)


def _split(imp, node, reach: np.ndarray) -> list[tuple[int, int]]:
    """The runs for ``reach``, after refusing what int32 or float32 cannot take exactly."""
    if reach.size == 0:
        return [(0, reach.shape[0])]
    total = int(reach.sum(axis=0).max())
    if total > INT32_MAX:
        raise imp.unsupported(f"its sums reach {total} in magnitude, beyond int32: "
                              f"onnxruntime's int32 accumulation would wrap")
    if int(reach.max()) > FLOAT32_EXACT:
        raise imp.unsupported(f"one input channel's sums reach {int(reach.max())} in "
                              f"magnitude, beyond the 2**24 float32 holds exactly")
    return exact_runs(reach)


def _sum_runs(imp, runs, emit_run, out: str | None) -> tuple[str, str]:
    """The sum and its dtype: one run's float32 result ("float32": exact integers), or each
    run cast to int32 and summed in int32 ("int32"; the last sum bound to ONNX value
    ``out``)."""
    if len(runs) == 1:
        return emit_run(0, *runs[0]), "float32"
    total = None
    for i, (start, end) in enumerate(runs):
        [y] = imp.emit("cast", [emit_run(i, start, end)], [None], {"dtype": "int32"},
                       suffix=f"/run{i}_int32")
        last = i == len(runs) - 1
        total = y if total is None else imp.emit(
            "add", [total, y], [out if last else None], suffix=f"/sum{i}")[0]
    return total, "int32"


def _run_input(imp, x: str, axis: int, start: int, end: int, size: int, i: int) -> str:
    if (start, end) == (0, size):
        return x
    return imp.emit("slice", [x], [None], {"starts": [start], "ends": [end], "axes": [axis]},
                    suffix=f"/run{i}")[0]


def _integer_output(imp, node, y: str) -> None:
    """Bind the int32 result held in float32 ``y``: as it is where only Casts to float32 read
    it, else cast to int32 (exact: the bound keeps it an integer float32 holds)."""
    out = node.output[0]
    readers = [imp.model.graph.node[i] for i in imp.consumers.get(out, [])]
    if out not in imp.graph_outputs and all(
            n.op_type == "Cast" and any(a.name == "to" and a.i == 1 for a in n.attribute)
            for n in readers):
        imp.alias(out, y)
        return
    imp.emit("cast", [y], [out], {"dtype": "int32"}, suffix="/int32")


def matmul_sum(imp, node, at: int = 1, out: str | None = None, zp_at: tuple = (2, None),
               a: tuple[str, str | None] | None = None) -> str:
    """(A - a_zero_point) @ (B - b_zero_point), exact, in int32 (one ``integer_linear``) with
    A input 0 and B input ``at`` (their zero points inputs ``zp_at``, by default 2 and ``at +
    2``; A and its zero point as the pair ``a`` where given), B a constant 2-D int8/uint8 with
    a per-tensor or per-column zero point."""
    if len(imp.type_of(node.input[at]).shape) != 2:
        raise imp.unsupported(f"B of shape {list(imp.type_of(node.input[at]).shape)}: only a "
                              f"2-D constant B is supported")
    codes, zp = _weight_codes(imp, node, 1, "B", at, zp_at[1])
    a = a or _integer_input(imp, node, "A", zp_at[0])
    origin = imp.origin.get(node.input[at], node.input[at])
    return integer_sum(imp, a, integer_weight(imp, codes, zp, origin), out)


class IntegerWeight(NamedTuple):
    """A constant int8/uint8 weight as ``integer_linear`` reads it: the ``(N, K)`` graph
    constant (B transposed) and its zero point's (one value or one per column; None for 0)."""

    weight: str
    zero_point: str | None


def integer_weight(imp, codes: np.ndarray, zp: np.ndarray | None, origin: str) -> IntegerWeight:
    """``codes`` ``(K, N)`` and their zero point (None, one value, or one per column, of
    their dtype) as graph constants named after ``origin``."""
    zero = zp is None or not zp.any()
    return IntegerWeight(imp.add_constant(np.ascontiguousarray(codes.T), origin),
                         None if zero else imp.add_constant(
                             zp.reshape(()) if zp.size == 1 else zp.reshape(-1),
                             f"{origin}.zero_point"))


def integer_sum(imp, a: tuple[str, str | None], weight: IntegerWeight, out: str | None = None,
                tag: str = "") -> str:
    """``a``'s codes less its zero point by ``weight``'s, exactly, in int32: one
    ``integer_linear`` (named from the node and ``tag``; bound to ONNX value ``out``)."""
    return imp.emit("integer_linear", [a[0], weight.weight, a[1], weight.zero_point], [out],
                    suffix=f"{tag}/integer_linear")[0]


def as_uint8(imp, codes: str, zp: str, tag: str = "") -> tuple[str, str]:
    """``dynamic_quantize``'s float32 codes and zero point as the uint8 tensors
    ``integer_linear`` reads (exact: integers in [0, 255])."""
    return tuple(imp.emit("cast", [v], [None], {"dtype": "uint8"}, suffix=f"{tag}/{what}")[0]
                 for v, what in ((codes, "codes"), (zp, "zero_point")))


@maps("MatMulInteger")
def _matmul_integer(imp, node, attrs):
    """:func:`matmul_sum` of A and B (module doc)."""
    _only(imp, attrs, {})
    matmul_sum(imp, node, out=node.output[0])


#: The attributes of ConvInteger, QLinearConv (and of Conv but the ones of float kernels).
CONV_ATTRS = {"auto_pad": ..., "dilations": ..., "group": ..., "kernel_shape": ...,
              "pads": ..., "strides": ...}


def conv_sum(imp, node, attrs, at: int = 1, out: str | None = None) -> tuple[str, str]:
    """conv(X - x_zero_point, W - w_zero_point) in float32 with X input 0 (its zero point
    input 2) and W input ``at`` (its zero point ``at + 2``): the zero point pads, so the
    padding adds 0, as ``conv``'s; W constant with a per-tensor or per-output-channel zero
    point, over runs of input channels that are exact (module doc). Returns the sum and its
    dtype (see :func:`_sum_runs`)."""
    weight = _shifted_weight(imp, node, 0, "W", at)
    conv = conv_attrs(imp, node, attrs, weight.shape)
    runs = _split(imp, node, _reach(weight, 1, 0))
    if len(runs) > 1 and conv["groups"] != 1:
        raise imp.unsupported(f"group={conv['groups']} with sums beyond the 2**24 float32 holds "
                              f"exactly: only an ungrouped conv is split over its input "
                              f"channels")
    x = _shifted_input(imp, node, "X")
    origin = imp.origin.get(node.input[at], node.input[at])

    def run(i, start, end):
        w = imp.add_constant(np.ascontiguousarray(weight[:, start:end]).astype(np.float32),
                             origin)
        xs = _run_input(imp, x, 1, start, end, weight.shape[1], i)
        return imp.emit("conv", [xs, w, None], [None], conv,
                        suffix=f"/conv{i}" if len(runs) > 1 else "/conv")[0]

    return _sum_runs(imp, runs, run, out)


def conv_attrs(imp, node, attrs, weight_shape) -> dict:
    """The ABI conv attributes (stride, dilation, groups, padding) of a ConvInteger's or
    QLinearConv's (X input 0, of rank 3 or more; ``weight_shape`` its W's)."""
    shape = imp.type_of(node.input[0]).shape
    spatial = len(shape) - 2
    if spatial < 1:
        raise imp.unsupported(f"input of shape {list(shape)}; {node.op_type} needs (N, C, "
                              f"*spatial)")
    kernel = attrs.get("kernel_shape", list(weight_shape[2:]))
    if list(kernel) != list(weight_shape[2:]):
        raise imp.unsupported(f"kernel_shape {kernel} differs from the weight's "
                              f"{list(weight_shape[2:])}")
    strides = attrs.get("strides", [1] * spatial)
    dilations = attrs.get("dilations", [1] * spatial)
    return {"stride": strides, "dilation": dilations, "groups": attrs.get("group", 1),
            "padding": _pads(imp, attrs, spatial, shape, kernel, strides, dilations)}


@maps("ConvInteger")
def _conv_integer(imp, node, attrs):
    """:func:`conv_sum` of X and W, bound as an int32 (module doc)."""
    _only(imp, attrs, CONV_ATTRS)
    y, dtype = conv_sum(imp, node, attrs, out=node.output[0])
    if dtype == "float32":
        _integer_output(imp, node, y)


def _fold_matmul_integer(ins, attrs: dict, cap: int) -> list:
    a, b, azp, bzp = (list(ins) + [None, None])[:4]
    for v, what in ((a, "A"), (b, "B")):
        if dtypes.from_numpy(v.dtype) not in _INTEGERS:
            raise ModelFileError(f"{what} of dtype {v.dtype}: MatMulInteger takes int8/uint8")
    x = a.astype(np.int64) - (0 if azp is None else one_value(azp, "a_zero_point"))
    w = b.astype(np.int64) - (0 if bzp is None else bzp.astype(np.int64))
    y = np.matmul(x, w)
    return [y.astype(np.int32)]  # wraps as onnxruntime's int32 sums would


register_fold("MatMulInteger", _fold_matmul_integer, optional=(2, 3))
