"""The quantized element-wise ops as onnxruntime's com.microsoft kernels, which compute them
with the numbers the ops define (their docs in ``abi/ops/glue.py``): ``qlinear_sigmoid`` and
``qlinear_leaky_relu`` as QLinearSigmoid and QLinearLeakyRelu (a table of the 256 codes, built
once where the scales and zero points are constants), ``qlinear_mul`` and ``qlinear_add`` as
QLinearMul and QLinearAdd, ``qlinear_concat`` as QLinearConcat, ``qlinear_softmax`` as
QLinearSoftmax, ``qlinear_global_average_pool`` as QLinearGlobalAveragePool,
``qlinear_average_pool`` as QLinearAveragePool."""

from __future__ import annotations

import functools
import math

import numpy as np
import onnx

from abi import mlas
from abi.errors import BackendError
from abi.ops.sampling import pool_sizes

from .emitter import MS, Converter, onnx_pads
from .glue import values_needed


def _unary(op_type: str) -> Converter:
    def convert(e, node, ins, outs, a):
        attrs = {"alpha": float(a["alpha"])} if "alpha" in a else {}
        e.op(op_type, ins, outs, domain=MS, **attrs)
    return convert


def _constants(e, node, names: list, why: str) -> list:
    """The values of the node's scales and zero points ``names``, refused naming the node where
    one is computed when the call runs (``why``: what onnxruntime's kernel needs)."""
    values = [e.array(v) for v in names]
    if any(v is None for v in values):
        raise BackendError(f"onnxruntime backend: node {node.name!r}: {node.op} with scales "
                           f"or zero points computed when the call runs: onnxruntime's {why}",
                           node=node.name)
    return values


def _reach(op: str, dtype: str, sa, za: int, sb, zb: int, sy, zy: int) -> float:
    """The largest magnitude the op's float32 result can take before onnxruntime converts it
    to int32 (:mod:`abi.mlas`)."""
    if op == "qlinear_mul":
        return mlas.mul_reach(dtype, za, zb, mlas.mul_ratio(sa, sb, sy), zy)
    return mlas.add_reach(dtype, *mlas.add_parameters(sa, za, sb, zb, sy, zy))


def _within_int32(node, op_type: str, what: str, over: str, reach: float) -> None:
    """Refused naming the node where the op's float32 ``what`` (``over`` a scale) can reach
    ``reach`` in magnitude, past int32: onnxruntime's ``op_type`` then converts them to the
    type's minimum, not the op's saturated codes."""
    if not reach < mlas.INT32_LIMIT:
        raise BackendError(f"onnxruntime backend: node {node.name!r}: {node.op} whose {what} "
                           f"reach {reach:.4g} in magnitude{over}, beyond int32: onnxruntime's "
                           f"{op_type} converts them to the type's minimum", node=node.name)


def _x_scale_taken(e, ins: list, kept: list, count: list) -> list:
    """``ins`` with x_scale (``ins[1]``) replaced by ``y_scale * count`` (``ins[3]``, a float32
    tensor) where the bool ``kept`` does not hold: a scale onnxruntime's global-pool path
    takes, at calls whose own scale it would refuse (the op's DomainError is raised after the
    run instead)."""
    taken = e.op("Mul", [ins[3]] + count)
    return [ins[0], *e.op("Where", kept + [ins[1]] + taken), *ins[2:]]


def _binary(op_type: str) -> Converter:
    """QLinearAdd or QLinearMul, its scales and zero points constants whose results stay within
    int32 (past it onnxruntime's conversion gives the type's minimum, not the op's saturated
    codes): anything else is refused naming the node."""
    def convert(e, node, ins, outs, a):
        sa, za, sb, zb, sy, zy = _constants(e, node, ins[1:3] + ins[4:], f"{op_type} is used "
                                            f"only where its results are known to stay within "
                                            f"int32")
        _within_int32(node, op_type, "results", "", _reach(
            node.op, e.types[ins[0]].dtype, sa, int(za), sb, int(zb), sy, int(zy)))
        e.op(op_type, ins, outs, domain=MS)
    return convert


def qlinear_concat(e, node, ins, outs, a):
    """QLinearConcat, whose kernel builds its tables when the session is made: scales and zero
    points computed when the call runs are refused naming the node."""
    _constants(e, node, [v for k, v in enumerate(ins) if k < 2 or (k - 2) % 3],
               "QLinearConcat takes constants")
    e.op("QLinearConcat", ins, outs, domain=MS, axis=a["axis"])


def qlinear_softmax(e, node, ins, outs, a):
    """QLinearSoftmax (its ``opset`` 12 normalizing over the trailing axes as one, 13 over
    axis alone); an x that is empty when the call runs is refused after the run, by the op's
    rule."""
    values_needed(e, node, ins[0])
    e.op("QLinearSoftmax", ins, outs, domain=MS, axis=a["axis"],
         opset=12 if a["trailing"] else 13)


def _global_average_checked(x_scale, y_scale, channels_last: bool, shape: tuple) -> None:
    count = mlas.global_average_count("qlinear_global_average_pool", shape, channels_last)
    mlas.global_average_checked("qlinear_global_average_pool", x_scale, y_scale, count)


def qlinear_global_average_pool(e, node, ins, outs, a):
    """QLinearGlobalAveragePool, its scales and zero points constants. A count of 0 or 2**24
    or more, which its kernel refuses, is the op's ShapeError (the executor asks the op's rule
    of the call's sizes when onnxruntime refuses a call). Where the scale is outside
    onnxruntime's range at a count the input can hold (not for usual scales: x_scale / y_scale
    in [2**-8, 256)), the kernel gets ``y_scale * count`` for x_scale at those counts, which
    it takes, and the op's DomainError is raised after the run from x's shape."""
    x_scale, _, y_scale, _ = _constants(e, node, ins[1:], "QLinearGlobalAveragePool takes "
                                        "constants")
    last = bool(a["channels_last"])
    shape = e.types[ins[0]].shape
    axes = mlas.global_average_axes(len(shape), last)
    sizes = [shape[k] for k in axes]
    first, final = mlas.global_average_counts(x_scale, y_scale)
    if all(type(d) is int for d in sizes):
        fits = first <= math.prod(sizes) <= final
    else:
        fits = (first, final) == (1, mlas.GLOBAL_AVERAGE_COUNTS - 1)
    if not fits:
        [dims] = e.op("Shape", ins[:1])
        [count] = e.op("ReduceProd", e.op("Gather", [dims, e.const(list(axes), np.int64)]),
                       keepdims=0)
        inside = e.op("And", e.op("GreaterOrEqual", [count, e.const(first, np.int64)])
                      + e.op("LessOrEqual", [count, e.const(final, np.int64)]))
        ins = _x_scale_taken(e, ins, inside, e.op("Cast", [count], to=onnx.TensorProto.FLOAT))
        e.checks.shapes.append((dims, functools.partial(
            _global_average_checked, x_scale, y_scale, last), node.name))
    e.op("QLinearGlobalAveragePool", ins, outs, domain=MS, channels_last=int(last))


def _whole_window_checked(x_scale, y_scale, axes: tuple, kernel: list, shape: tuple) -> None:
    if [shape[k] for k in axes] == list(kernel):
        mlas.global_average_checked("qlinear_average_pool", x_scale, y_scale, math.prod(kernel))


def qlinear_average_pool(e, node, ins, outs, a):
    """QLinearAveragePool, its scales and zero points constants whose averages stay within
    int32 (past it onnxruntime's conversion gives the type's minimum, not the op's saturated
    codes: refused naming the node). Where the window can be the whole unpadded input and the
    global pool's scale is outside onnxruntime's range at its count (not for usual scales),
    the kernel gets ``y_scale * count`` for x_scale at such calls, which it takes, and the
    op's DomainError is raised after the run from x's shape. Over spatial dims known when the
    call runs, the op's rule is asked of the call's sizes after the run: where no window fits
    it refuses the call, as the numpy backend does, where onnxruntime's kernel computes windows
    reaching past the input, gives an empty output or refuses it."""
    x_scale, x_zp, y_scale, y_zp = _constants(e, node, ins[1:], "QLinearAveragePool is used "
                                              "only where its constants are known")
    _within_int32(node, "QLinearAveragePool", "averages", " over y_scale", mlas.average_reach(
        e.types[ins[0]].dtype, x_scale, int(x_zp), y_scale, int(y_zp)))
    last, kernel, padding = bool(a["channels_last"]), list(a["kernel_size"]), a["padding"]
    axes = mlas.global_average_axes(len(e.types[ins[0]].shape), last)
    sizes = [e.types[ins[0]].shape[k] for k in axes]
    count = math.prod(kernel)
    dims = None
    if any(type(n) is not int for n in sizes):
        [dims] = e.op("Shape", ins[:1])
        e.checks.shapes.append((dims, functools.partial(pool_sizes, node.op, attrs=a,
                                                        channels_last=last), node.name))
    if not any(type(n) is int and n != k for n, k in zip(sizes, kernel)) and not any(
            p for pair in padding for p in pair) and not mlas.global_average_fits(
            mlas.global_average_scale(x_scale, y_scale, count)):
        [dims] = [dims] if dims else e.op("Shape", ins[:1])
        [spatial] = e.op("Gather", [dims, e.const(list(axes), np.int64)])
        parted = e.op("Greater", e.op("ReduceSum", e.op("Abs", e.op("Sub", [
            spatial, e.const(kernel, np.int64)])), keepdims=0) + [e.const(0, np.int64)])
        ins = _x_scale_taken(e, ins, parted, [e.const(np.float32(count), np.float32)])
        e.checks.shapes.append((dims, functools.partial(
            _whole_window_checked, x_scale, y_scale, axes, kernel), node.name))
    e.op("QLinearAveragePool", ins, outs, domain=MS, kernel_shape=kernel,
         strides=list(a["stride"]), pads=onnx_pads(padding),
         ceil_mode=int(a["ceil_mode"]), count_include_pad=int(a["count_include_pad"]),
         channels_last=int(last))


CONVERTERS: dict[str, Converter] = {
    "qlinear_softmax": qlinear_softmax,
    "qlinear_concat": qlinear_concat,
    "qlinear_sigmoid": _unary("QLinearSigmoid"),
    "qlinear_leaky_relu": _unary("QLinearLeakyRelu"),
    "qlinear_mul": _binary("QLinearMul"),
    "qlinear_add": _binary("QLinearAdd"),
    "qlinear_global_average_pool": qlinear_global_average_pool,
    "qlinear_average_pool": qlinear_average_pool,
}
