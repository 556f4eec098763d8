"""The ABI's quantized element-wise ops on numpy, with onnxruntime's numbers: ``qlinear_sigmoid``
and ``qlinear_leaky_relu`` look each code up in the 256-entry table MLAS builds
(:func:`abi.mlas.lookup_table`; built once where the scales and zero points are constants),
``qlinear_mul`` is the exact product of the codes less their zero points, times the float32
ratio of the scales, plus the output's zero point, rounded and clamped, ``qlinear_add`` the
two fused multiply-adds of MLAS (:func:`abi.mlas.fma`) in the order its broadcasting loop
takes the operands (:func:`abi.mlas.add_order`), computed once for every pair of codes and
looked up, ``qlinear_concat`` requantizes each input
by such a table where its scale or zero point differs from the output's, and
``qlinear_softmax`` looks the codes up in its table of exponentials
(:func:`abi.mlas.softmax_table`) and divides in double, ``qlinear_global_average_pool`` scales
each window's exact sum once, ``qlinear_average_pool`` sums each window's dequantized codes in
float32 tap by tap (the ops' docs)."""

from __future__ import annotations

import functools
import itertools
from typing import Callable

import numpy as np

from abi import dtypes, mlas
from abi.ops.sampling import pool_windows
from abi.quantization import need_values

from .layers import _binder, broadcasting

F32 = np.float32


def _table(fn, x_dtype: np.dtype, x_scale, x_zero_point, y_scale, y_zero_point) -> np.ndarray:
    """The output code of every input code, in :func:`abi.mlas.codes` order, as x's dtype."""
    dtype = dtypes.from_numpy(x_dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        table = mlas.lookup_table(fn, dtype, F32(x_scale), int(x_zero_point), F32(y_scale),
                                  int(y_zero_point))
    return table.astype(x_dtype)


def _positions(x: np.ndarray) -> np.ndarray:
    """Each code's position in :func:`abi.mlas.codes` order."""
    position = x.astype(np.intp)
    if x.dtype == np.int8:
        position += 128
    return position


def _looked_up(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[_positions(x)]


def _unary(fn) -> Callable:
    """The factory of a table op whose table is ``fn(attrs)``'s of the dequantized codes."""
    def factory(attrs, consts, types, where):
        f = fn(attrs)
        if all(c is not None for c in consts[1:]):
            table = _table(f, np.dtype(dtypes.to_numpy(types[0].dtype)), *consts[1:])
            return _binder(lambda x, *_: _looked_up(x, table), consts, types, {})

        def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point):
            return _looked_up(x, _table(f, x.dtype, x_scale, x_zero_point, y_scale,
                                        y_zero_point))
        return _binder(kernel, consts, types, {})
    return factory


def _leaky_relu(attrs):
    alpha = F32(attrs["alpha"])
    return lambda v: np.where(v >= 0, v, (alpha * v).astype(F32))


qlinear_sigmoid = _unary(lambda attrs: mlas.logistic)
qlinear_leaky_relu = _unary(_leaky_relu)


def _saturated(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``v`` rounded half to even and clamped to ``dtype``'s codes, as ``dtype``."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(v), info.min, info.max).astype(dtype)


def _mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ratio = mlas.mul_ratio(a_scale, b_scale, y_scale)
        p = (a.astype(F32) - F32(a_zero_point)) * (b.astype(F32) - F32(b_zero_point))
        return _saturated((p * ratio).astype(F32) + F32(y_zero_point), a.dtype)


def _requantization(x_dtype, x_scale, x_zero_point, y_scale, y_zero_point):
    """A table from x's codes to y's (None: the same scale and zero point, the codes as they
    are, as onnxruntime copies them)."""
    if F32(x_scale) == F32(y_scale) and int(x_zero_point) == int(y_zero_point):
        return None
    return _table(lambda v: v, x_dtype, x_scale, x_zero_point, y_scale, y_zero_point)


def qlinear_concat(attrs, consts, types, where):
    """Each x requantized to y's parameters (:func:`_requantization`; made once where they are
    constants), then concatenated."""
    axis, count = attrs["axis"], len(types)
    x_dtype = np.dtype(dtypes.to_numpy(types[2].dtype))
    known = {i: _requantization(x_dtype, *consts[i + 1:i + 3], *consts[:2])
             for i in range(2, count, 3)
             if all(c is not None for c in (*consts[:2], *consts[i + 1:i + 3]))}

    def kernel(*args):
        parts = []
        for i in range(2, count, 3):
            table = known[i] if i in known else _requantization(
                args[i].dtype, *args[i + 1:i + 3], *args[:2])
            parts.append(args[i] if table is None else _looked_up(args[i], table))
        return np.concatenate(parts, axis=axis)
    return _binder(kernel, consts, types, {})


@functools.lru_cache(maxsize=64)
def _add_table(dtype: str, r_a: float, r_b: float, fixed: float) -> np.ndarray:
    """qlinear_add's code of every pair of codes, flat (a's position times 256 plus b's): the
    two fused multiply-adds of MLAS once per pair rather than once per element."""
    codes = mlas.codes(dtype).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        v = mlas.fma(codes[:, None], F32(r_a), mlas.fma(codes[None, :], F32(r_b), F32(fixed)))
    return _saturated(v, np.dtype(dtype)).reshape(-1)


def _add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    if mlas.add_order(a.shape, b.shape):  # onnxruntime's kernel streams b past each a
        a, a_scale, a_zero_point, b, b_scale, b_zero_point = (
            b, b_scale, b_zero_point, a, a_scale, a_zero_point)
    r_a, r_b, fixed = mlas.add_parameters(a_scale, int(a_zero_point), b_scale,
                                          int(b_zero_point), y_scale, int(y_zero_point))
    table = _add_table(dtypes.from_numpy(a.dtype), float(r_a), float(r_b), float(fixed))
    return np.asarray(table[_positions(a) * 256 + _positions(b)])


def qlinear_softmax(attrs, consts, types, where):
    """The table of each call's count of values per softmax (:func:`abi.mlas.softmax_table`,
    kept for the last 64 (scale, count) pairs), the float32 running sum, the last step in
    double."""
    axis, trailing = attrs["axis"], attrs["trailing"]

    def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point):
        need_values("qlinear_softmax", x.shape)  # a run-time dim bound to 0
        first = axis % x.ndim
        # one row per softmax: the trailing axes from axis on, or axis moved last
        rows = x.reshape(x.shape[:first] + (-1,)) if trailing else np.moveaxis(x, first, -1)
        table = mlas.softmax_table(float(F32(x_scale)), rows.shape[-1])
        codes = rows.astype(np.int64)
        e = table[255 - (codes.max(axis=-1, keepdims=True) - codes)]
        total = np.cumsum(e, axis=-1, dtype=F32)[..., -1:]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            y = _saturated(np.rint(e.astype(np.float64) * mlas.softmax_ratio(y_scale)
                                   / total.astype(np.float64)) + int(y_zero_point), x.dtype)
        if trailing:
            return y.reshape(x.shape)
        moved = np.moveaxis(x, first, -1).shape
        return np.moveaxis(y.reshape(moved), -1, first)
    return _binder(kernel, consts, types, {})


def _global_average(op: str, x, x_scale, x_zero_point, y_scale, y_zero_point,
                    last: bool) -> np.ndarray:
    """Each window's codes summed exactly, less x_zero_point times the count, wrapped to int32
    as onnxruntime's accumulator, times the float32 scale (the count's and the scale's checks
    those of the op ``op``: :func:`abi.mlas.global_average_count`,
    :func:`abi.mlas.global_average_checked`)."""
    count = mlas.global_average_count(op, x.shape, last)
    scale = mlas.global_average_checked(op, x_scale, y_scale, count)
    axes = mlas.global_average_axes(x.ndim, last)
    total = x.sum(axis=axes, keepdims=True, dtype=np.int64) - int(x_zero_point) * count
    total = (total + 2 ** 31) % 2 ** 32 - 2 ** 31  # int32's wrap
    return _saturated(np.rint(total.astype(F32) * scale) + int(y_zero_point), x.dtype)


def qlinear_global_average_pool(attrs, consts, types, where):
    """:func:`_global_average` over every spatial axis."""
    def kernel(x, *parameters):
        return _global_average("qlinear_global_average_pool", x, *parameters,
                               attrs["channels_last"])
    return _binder(kernel, consts, types, {})


def _average_steps(n: int, o: int, k: int, s: int, b: int) -> list[tuple[slice, slice]]:
    """One spatial axis of an average pool's sums, as (windows, x) slice pairs to add in turn:
    a tap at a time (the windows whose tap lands on x, x at those positions) or, where x is
    shorter than the taps that reach it, an element of x at a time (each window holding it).
    Either way each window takes its values in tap order, since a window's tap and the element
    it lands on grow together: only the taps on x (a tap on the padding adds 0, which changes
    no sum), in as few steps as the shorter of the kernel and x."""
    taps = range(max(0, b - (o - 1) * s), min(k, b + n))  # those that reach x for some window
    if len(taps) <= n:
        steps = [(max(0, -(-(b - t) // s)), min(o, (n - 1 + b - t) // s + 1), t) for t in taps]
        return [(slice(first, end), slice(first * s + t - b, (end - 1) * s + t - b + 1, s))
                for first, end, t in steps if first < end]
    steps = [(max(0, -(-(i + b - k + 1) // s)), min(o, (i + b) // s + 1), i) for i in range(n)]
    return [(slice(first, end), slice(i, i + 1)) for first, end, i in steps if first < end]


def qlinear_average_pool(attrs, consts, types, where):
    """The codes dequantized as MLAS's table holds them, each window's values on x added one
    by one in float32 in row-major order of its taps to zeros (:func:`_average_steps`: nothing
    padded is allocated), then divided by the windows' divisors
    (:func:`abi.mlas.average_pool_divisors`), by y_scale, plus y_zero_point, rounded and
    saturated; a window over the whole unpadded input :func:`_global_average`, as
    onnxruntime's kernel. The output lengths are the op's rule's of the call's sizes
    (:func:`abi.ops.sampling.pool_windows`: a ShapeError where none is left)."""
    op = "qlinear_average_pool"
    kernel_size, stride, padding = attrs["kernel_size"], attrs["stride"], attrs["padding"]
    last, include = attrs["channels_last"], attrs["count_include_pad"]

    def kernel(x, x_scale, x_zero_point, y_scale, y_zero_point):
        axes = mlas.global_average_axes(x.ndim, last)
        sizes = [x.shape[a] for a in axes]
        if mlas.average_pool_whole(sizes, kernel_size, padding):
            return _global_average(op, x, x_scale, x_zero_point, y_scale, y_zero_point, last)
        outs = pool_windows(op, x.shape, attrs, last)
        values = (F32(x_scale) * (x.astype(F32) - F32(x_zero_point))).astype(F32)
        shape = list(x.shape)
        for a, o in zip(axes, outs):
            shape[a] = o
        total = np.zeros(shape, F32)
        for step in itertools.product(*[
                _average_steps(n, o, k, s, b) for n, o, k, s, (b, _) in
                zip(sizes, outs, kernel_size, stride, padding)]):
            into, read = [slice(None)] * x.ndim, [slice(None)] * x.ndim
            for a, (windows, taken) in zip(axes, step):
                into[a], read[a] = windows, taken
            total[tuple(into)] += values[tuple(read)]
        divisors = mlas.average_pool_divisors(sizes, kernel_size, stride, padding, outs, include)
        divisors = np.expand_dims(divisors, (x.ndim - 1, 0) if last else (0, 1))
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            v = (total / divisors / F32(y_scale) + F32(int(y_zero_point))).astype(F32)
        return _saturated(v, x.dtype)
    return _binder(kernel, consts, types, {})


#: op name -> factory(attrs, consts, types, where), as :data:`plugins.numpy_backend.FACTORIES`
FACTORIES = {"qlinear_sigmoid": qlinear_sigmoid, "qlinear_leaky_relu": qlinear_leaky_relu,
             "qlinear_mul": broadcasting(_mul), "qlinear_add": broadcasting(_add),
             "qlinear_concat": qlinear_concat, "qlinear_softmax": qlinear_softmax,
             "qlinear_global_average_pool": qlinear_global_average_pool,
             "qlinear_average_pool": qlinear_average_pool}

mlas.c_logf()  # found now, before the sandbox worker confines itself (the softmax's tables)
