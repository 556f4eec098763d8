"""onnxruntime's CPU arithmetic for its quantized contrib ops (MLAS), reproduced in numpy: the
256-entry lookup tables of QLinearSigmoid, QLinearLeakyRelu and QLinearConcat, QLinearMul's
ratio of scales and the reach of its products, and the folded zero-point constant of
QLinearAdd, QLinearAdd's operand order, QLinearSoftmax's table, QLinearGlobalAveragePool's
scale and the counts its kernel takes, and QLinearAveragePool's divisors and switch to the
global pool's path. The ONNX importer computes constants from it, and the
numpy backend the op table's ``qlinear_*`` ops, so both have onnxruntime's numbers.

onnxruntime 1.32's x86-64 kernels (AVX2 with FMA3) were read and then compared with onnxruntime
over every code of every table and random scales; each function's doc gives its order of
float32 operations. ``fma`` is a fused multiply-add: one rounding of the exact ``a * b + c``.
"""

from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from abi.errors import DomainError, ShapeError
from abi.ops.rules import fmt

_F32 = np.float32


def fma(a, b, c) -> np.ndarray:
    """float32 ``a * b + c`` rounded once, as the FMA3 instruction. The product is exact in
    float64; the float64 sum's own rounding error is recovered (TwoSum) and decides a float32
    tie the float64 sum would otherwise break the wrong way."""
    a, b, c = (np.asarray(v, _F32).astype(np.float64) for v in (a, b, c))
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)  # p + c == s + err exactly
    r = s.astype(_F32)
    r64 = r.astype(np.float64)
    mirror = 2.0 * s - r64  # the other float32 neighbour when s is a tie between two
    mirror32 = mirror.astype(_F32)
    with np.errstate(invalid="ignore"):
        tie = (mirror32.astype(np.float64) == mirror) & (mirror != r64) & np.isfinite(s)
        wrong = tie & (err != 0) & (np.sign(r64 - s) != np.sign(err))
    return np.where(wrong, mirror32, r).astype(_F32)


#: MLAS's logistic: Eigen's rational approximation on [-18, 18], its float32 constants
_LOGISTIC_P = tuple(_F32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07,
                                      6.08574864600143e-05, 8.51377133304701e-03,
                                      2.48287947061529e-01))
_LOGISTIC_Q = tuple(_F32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09,
                                      6.29106785017040e-06, 1.70198817374094e-03,
                                      1.16817656904453e-01, 9.93151921023180e-01))


def logistic(x) -> np.ndarray:
    """MLAS's float32 logistic (its FMA3 kernel): x clamped to [-18, 18], ``x2 = x * x``, p and q
    polynomials in x2 by Horner's rule with fused steps, ``max(0, x * p / q + 0.5)``. It is
    within about 1e-7 of the exact logistic, and a table built from the exact one differs from
    onnxruntime's where a value falls that close to a rounding half-way point."""
    x = np.minimum(_F32(18), np.maximum(_F32(-18), np.asarray(x, _F32)))
    x2 = (x * x).astype(_F32)
    p = fma(x2, _LOGISTIC_P[0], _LOGISTIC_P[1])
    for c in _LOGISTIC_P[2:]:
        p = fma(x2, p, c)
    q = fma(x2, _LOGISTIC_Q[0], _LOGISTIC_Q[1])
    for c in _LOGISTIC_Q[2:]:
        q = fma(x2, q, c)
    p = (x * p).astype(_F32)
    return np.maximum(_F32(0), ((p / q).astype(_F32) + _F32(0.5)).astype(_F32))


def codes(dtype: str) -> np.ndarray:
    """Every value of the 8-bit ``dtype`` in the order of its unsigned byte (int8: -128 first,
    so a code's table position is ``code + 128``)."""
    return np.arange(-128, 128) if dtype == "int8" else np.arange(256)


def dequantized(dtype: str, scale: np.float32, zero_point: int) -> np.ndarray:
    """``scale * (code - zero_point)`` for every code: the difference exact, one float32
    rounding (QlinearBuildLookupTable's input)."""
    return (_F32(scale) * (codes(dtype) - zero_point).astype(_F32)).astype(_F32)


def quantized(y: np.ndarray, dtype: str, scale: np.float32, zero_point: int) -> np.ndarray:
    """MlasQuantizeLinear: ``y / scale`` in float32, clamped to the codes' range less the zero
    point (nan to its low end), rounded half to even, plus the zero point; the codes as
    float32."""
    info = np.iinfo(dtype)
    lo, hi = _F32(int(info.min) - zero_point), _F32(int(info.max) - zero_point)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        v = (np.asarray(y, _F32) / _F32(scale)).astype(_F32)
    v = np.minimum(np.maximum(np.where(np.isnan(v), lo, v), lo), hi)
    return (np.rint(v) + _F32(zero_point)).astype(_F32)


def lookup_table(fn, dtype: str, x_scale, x_zero_point: int, y_scale,
                 y_zero_point: int) -> np.ndarray:
    """The output code for every input code (QlinearBuildLookupTable): dequantized, ``fn`` in
    float32, quantized."""
    y = np.asarray(fn(dequantized(dtype, x_scale, x_zero_point)), _F32)
    return quantized(y, dtype, y_scale, y_zero_point)


#: float32 -> int32 conversions past this magnitude give the type's minimum in onnxruntime's
#: quantized kernels
INT32_LIMIT = 2.0 ** 31


def mul_ratio(a_scale, b_scale, y_scale) -> np.float32:
    """QLinearMul's float32 ``(a_scale * b_scale) / y_scale``, in that order."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _F32(_F32(_F32(a_scale) * _F32(b_scale)) / _F32(y_scale))


def mul_reach(dtype: str, a_zero_point: int, b_zero_point: int, ratio,
              y_zero_point: int) -> float:
    """The largest magnitude QLinearMul's float32 ``p * ratio + y_zero_point`` can take over
    every pair of ``dtype`` codes: onnxruntime converts it to int32 before saturating, so at
    :data:`INT32_LIMIT` or more its answer is the type's minimum."""
    info = np.iinfo(dtype)
    tops = [max(abs(int(info.min) - z), abs(int(info.max) - z))
            for z in (a_zero_point, b_zero_point)]
    return tops[0] * tops[1] * abs(float(ratio)) + abs(y_zero_point)


def add_parameters(a_scale, a_zero_point: int, b_scale, b_zero_point: int, y_scale,
                   y_zero_point: int) -> tuple[np.float32, np.float32, np.float32]:
    """QLinearAdd's float32 ``r_a = a_scale / y_scale``, ``r_b = b_scale / y_scale`` and the
    folded zero points ``fixed = y_zero_point - fma(r_a, a_zero_point, r_b * b_zero_point)``;
    the sum is then ``fma(a, r_a, fma(b, r_b, fixed))`` on the codes, with ``a`` the operand
    of :func:`add_order`."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        r_a, r_b = _F32(_F32(a_scale) / _F32(y_scale)), _F32(_F32(b_scale) / _F32(y_scale))
        fixed = _F32(_F32(y_zero_point) - fma(r_a, _F32(a_zero_point),
                                               _F32(r_b * _F32(b_zero_point))))
    return r_a, r_b, fixed


def add_reach(dtype: str, r_a, r_b, fixed) -> float:
    """The largest magnitude QLinearAdd's sum can take over every pair of ``dtype`` codes (at
    :data:`INT32_LIMIT` or more onnxruntime's conversion gives the type's minimum)."""
    top = 128 if dtype == "int8" else 255
    return top * (abs(float(r_a)) + abs(float(r_b))) + abs(float(fixed))


def add_order(a_shape, b_shape) -> bool:
    """Whether QLinearAdd's operands swap roles for inputs of these shapes: onnxruntime's
    broadcasting loop reads one of them as one value per span (looking at the dims both have,
    from the end, at the first that is not 1 on both, else the first of them: input 0 if its
    dim there is 1, else input 1 if its is; with a 0-d input, at the other's last dim), and
    where that is ``a`` its kernel streams ``b`` as the inner fused step's operand."""
    a, b = list(a_shape), list(b_shape)
    if not a or not b:
        return not a or a[-1] <= 1
    common = min(len(a), len(b))
    for k in range(1, common + 1):
        da, db = a[-k], b[-k]
        if max(da, db) <= 1 and k < common:
            continue
        return da <= 1
    return False


@functools.lru_cache(maxsize=1)
def c_logf():
    """The C library's ``logf`` (float32 in and out) from the process's own symbols (no file
    is opened: the sandbox worker finds it too), or None where there is none."""
    try:
        fn = ctypes.CDLL(None).logf
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


def logf(value: np.float32) -> float:
    """``logf(value)`` as onnxruntime's QLinearSoftmax computes it: the C library's; without
    one, the correctly rounded float32 logarithm (glibc's for counts below 60,594)."""
    fn = c_logf()
    return float(fn(float(value))) if fn is not None else float(_F32(math.log(float(value))))


@functools.lru_cache(maxsize=64)
def softmax_table(x_scale: float, count: int) -> np.ndarray:
    """QLinearSoftmax's 256 float32 exponentials for ``count`` values a softmax, position
    ``i`` holding ``exp((i - 255 + shift) * x_scale)`` computed in double, ``shift = max(0,
    logf(FLT_MAX / count) - 5) / x_scale``: ``i = 255`` the largest code's. Read-only."""
    scale = float(_F32(x_scale))
    shift = max(0.0, logf(_F32(np.finfo(_F32).max) / _F32(count)) - 5.0) / scale
    table = np.array([math.exp((i - 255.0 + shift) * scale) for i in range(256)], _F32)
    table.flags.writeable = False
    return table


def softmax_ratio(y_scale) -> float:
    """QLinearSoftmax's ``floor(1 / y_scale)``, the quotient in float32."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return float(np.floor(_F32(1) / _F32(y_scale)))


#: QLinearGlobalAveragePool's windows hold fewer values than this (onnxruntime refuses more)
GLOBAL_AVERAGE_COUNTS = 2 ** 24
#: the range [low, high) QLinearGlobalAveragePool's scale must fall in (onnxruntime refuses
#: another: the output would not depend on the input)
GLOBAL_AVERAGE_SCALES = (2.0 ** -32, 256.0)


def global_average_axes(rank: int, channels_last: bool) -> tuple[int, ...]:
    """The axes QLinearGlobalAveragePool pools over x of ``rank``: every one but N and C."""
    return tuple(range(1, rank - 1)) if channels_last else tuple(range(2, rank))


def global_average_count(op: str, shape, channels_last: bool) -> int:
    """The count of values each window of a global pool over x of ``shape`` (sizes) holds: a
    ShapeError where it is 0 (no average) or :data:`GLOBAL_AVERAGE_COUNTS` or more."""
    axes = global_average_axes(len(shape), channels_last)
    count = math.prod(shape[a] for a in axes)
    if not 0 < count < GLOBAL_AVERAGE_COUNTS:
        pooled = tuple(shape[a] for a in axes)
        raise ShapeError(f"{op}: x of shape {fmt(tuple(shape))} pools {count} values a window "
                         f"(dims {fmt(pooled)}): onnxruntime's kernel takes 1 to "
                         f"{GLOBAL_AVERAGE_COUNTS - 1}", where=op,
                         expected=f"1 to {GLOBAL_AVERAGE_COUNTS - 1} values",
                         got=tuple(shape))
    return count


def global_average_scale(x_scale, y_scale, count: int) -> np.float32:
    """QLinearGlobalAveragePool's float32 ``x_scale / (y_scale * count)``."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return _F32(_F32(x_scale) / _F32(_F32(y_scale) * _F32(count)))


def global_average_fits(scale) -> bool:
    """Whether a :func:`global_average_scale` falls in :data:`GLOBAL_AVERAGE_SCALES`."""
    low, high = GLOBAL_AVERAGE_SCALES
    return low <= float(scale) < high


def global_average_checked(op: str, x_scale, y_scale, count: int) -> np.float32:
    """:func:`global_average_scale`, a DomainError where it falls outside
    :data:`GLOBAL_AVERAGE_SCALES` (onnxruntime's kernel refuses the call there)."""
    scale = global_average_scale(x_scale, y_scale, count)
    if not global_average_fits(scale):
        raise DomainError(f"{op}: x_scale / (y_scale * count) = {float(scale)!r} for "
                          f"windows of {count} values (x_scale {float(_F32(x_scale))!r}, y_scale "
                          f"{float(_F32(y_scale))!r}) is outside [2**-32, 256), where "
                          f"onnxruntime's kernel refuses it", where=op)
    return scale


def global_average_counts(x_scale, y_scale) -> tuple[int, int]:
    """The counts from 1 to :data:`GLOBAL_AVERAGE_COUNTS` - 1 whose scale
    (:func:`global_average_scale`, falling as the count grows) is in range: ``(first,
    last)``, first > last where there is none."""
    low, high = GLOBAL_AVERAGE_SCALES
    top = GLOBAL_AVERAGE_COUNTS - 1

    def first(fits) -> int:  # the least count in [1, top + 1] where fits holds from then on
        lo, hi = 1, top + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo
    start = first(lambda c: float(global_average_scale(x_scale, y_scale, c)) < high)
    end = first(lambda c: not float(global_average_scale(x_scale, y_scale, c)) >= low) - 1
    return start, end


def average_pool_whole(sizes, kernel, padding) -> bool:
    """Whether QLinearAveragePool's window over spatial dims ``sizes`` is the whole unpadded
    input (``kernel`` equal to them, each ``padding`` pair zeros), where onnxruntime's kernel
    takes the global pool's path instead of its windows' (:func:`global_average_scale`)."""
    return list(sizes) == list(kernel) and not any(p for pair in padding for p in pair)


def average_reach(dtype: str, x_scale, x_zero_point: int, y_scale, y_zero_point: int) -> float:
    """The largest magnitude QLinearAveragePool's average over ``y_scale`` plus its zero point
    can take (an average is at most its largest dequantized code): onnxruntime converts it to
    int32 before saturating, so at :data:`INT32_LIMIT` or more its answer is the type's
    minimum."""
    top = float(np.abs(dequantized(dtype, x_scale, x_zero_point)).max())
    return top / float(_F32(y_scale)) + abs(y_zero_point)


def average_pool_divisors(sizes, kernel, stride, padding, outs, count_include_pad: bool
                          ) -> np.ndarray:
    """QLinearAveragePool's divisor of each window (float32, of shape ``outs``): the kernel's
    size with ``count_include_pad`` (ceil mode's windows past the padding too), else the taps
    on the input; ``padding`` one (before, after) pair per spatial axis."""
    if count_include_pad:
        return np.full(outs, _F32(math.prod(kernel)), _F32)
    divisors = np.ones(outs, np.int64)
    for d, (n, k, s, (before, _)) in enumerate(zip(sizes, kernel, stride, padding)):
        start = np.arange(outs[d]) * s - before
        inside = np.minimum(start + k, n) - np.maximum(start, 0)
        divisors = divisors * inside.reshape([-1 if e == d else 1 for e in range(len(outs))])
    return divisors.astype(_F32)
