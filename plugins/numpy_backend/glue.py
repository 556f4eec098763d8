"""numpy kernels for the glue ops of the op table (activations, arithmetic, shape ops, pooling).

Each function takes the op's tensors positionally and its attributes as keywords, and returns
one array (the backend wraps it into the tuple the executor expects; ``split`` returns a tuple
itself). Shapes and attributes were checked by the op table's shape rules at load, so these
kernels do not re-validate them.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator

import numpy as np

from abi import dtypes, quantization
from abi.errors import DomainError, ShapeError
from abi.indices import check_indices
from abi.ops.sampling import pool_sizes, scale_fraction, scaled_size
from abi.quantization import dynamic_quantization, exact_runs, need_values
from abi.resampling import axis_taps, coordinates

from .antialias import antialias_taps


# --- activations -------------------------------------------------------------------------------

def relu(x):
    return np.maximum(x, 0, dtype=x.dtype)


def sigmoid(x):
    """exp(min(x, 0)) / (1 + exp(-|x|)): never overflows, and keeps its relative precision in
    the negative tail, where the tanh form 0.5 * (1 + tanh(x / 2)) cancels (0 at x = -20, 13
    times the value near -16), which a product by a large value then shows (SwiGLU's gate)."""
    with np.errstate(under="ignore"):  # exp of a large negative number: 0, as torch gives
        num = np.minimum(x, 0)
        np.exp(num, out=num)
        den = np.abs(x)
        np.negative(den, out=den)
        np.exp(den, out=den)
        den += 1
        return np.divide(num, den, out=num)


def tanh(x):
    return np.tanh(x)


def _gelu_erf_term(v):
    """erf of the float64 array ``v``, which it overwrites, for GELU's 1 + erf(x / sqrt(2)):
    Abramowitz & Stegun 7.1.26 refined, within 1.5e-7 of erf, which is all a sum with 1
    keeps (near 0 not relatively: 1e-20 gives 1e-9, so the Erf op takes :func:`_erf`), at a
    third of its cost; each step into an array already made rather than a new one per step
    (a GELU of (1, 256, 56, 56) 9.5 ms where it took 21)."""
    s = np.sign(v)
    a = np.abs(v, out=v)
    t = np.multiply(a, 0.3275911)
    t += 1.0
    np.divide(1.0, t, out=t)
    poly = np.multiply(t, 1.061405429)  # t * (0.254829592 + t * (-0.284496736 + t * (...)))
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += c
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    poly *= np.exp(a, out=a)
    np.subtract(1.0, poly, out=poly)
    poly *= s
    return poly


def _chebyshev_fit(f, lo, hi, degree):
    """Power-series coefficients (lowest first) of the polynomial interpolating ``f`` at the
    Chebyshev points of [lo, hi], near the best polynomial of that degree for a smooth ``f``."""
    k = np.arange(degree + 1)
    points = lo + (hi - lo) * (np.cos(np.pi * (k + 0.5) / (degree + 1)) + 1) / 2
    fit = np.polynomial.Chebyshev.fit(points, [f(float(p)) for p in points], degree,
                                      domain=[lo, hi])
    return fit.convert(kind=np.polynomial.Polynomial, domain=[-1, 1], window=[-1, 1]).coef


#: erf(x) = x * P(x**2) for |x| < 1: P fitted to erf(sqrt(u)) / sqrt(u) over u in [0, 1]
#: (within 3e-15 of it) from Python's math.erf when the backend is imported
_ERF_NEAR_ZERO = _chebyshev_fit(lambda u: math.erf(math.sqrt(u)) / math.sqrt(u), 0.0, 1.0, 10)
#: |x| past which erf is +-1 in float64 (erfc(6) is 2e-17)
_ERF_ONE = 6.0
#: erf(x) = 1 - exp(-x**2) * Q(1 / (1 + x / 2)) for 1 <= x <= 6: Q fitted to
#: erfc(x) * exp(x**2) over that variable's [1 / 4, 2 / 3] (within 1e-12) from math.erfc
_ERFC_SCALED = _chebyshev_fit(lambda t: math.erfc(2 / t - 2) * math.exp((2 / t - 2) ** 2),
                              1 / (1 + _ERF_ONE / 2), 2 / 3, 11)


def _polynomial(coef, t):
    """``coef``'s polynomial (lowest first) at the float64 array ``t`` by Horner's rule."""
    y = np.full_like(t, coef[-1])
    for c in coef[-2::-1]:
        y *= t
        y += c
    return y


def _erf(v):
    """erf of the float64 array ``v`` within 1e-13 of it relatively at every value
    (1e-20 gives 1.1e-20, -0.0 gives -0.0), so a float32 result is erf rounded (600,000
    values: every one), where torch's and onnxruntime's are a step off in 3 %: a polynomial
    in x**2 for |x| < 1, where erf is as small as x, and elsewhere one minus exp(-x**2) times
    a polynomial in 1 / (1 + |x| / 2), Abramowitz & Stegun 7.1.26's variable (its five
    terms, :func:`_gelu_erf_term`, are 1.5e-7 from erf). Both are computed for every value,
    cheaper than splitting the values by a mask and putting them back (16 against 24 ms over
    a (1, 256, 56, 56) float32 tensor; 15 ms as it is, where the five terms took 5)."""
    near = _polynomial(_ERF_NEAR_ZERO, v * v)
    near *= v
    a = np.abs(v)
    small = a < 1  # a nan is not: it stays nan below
    np.minimum(a, _ERF_ONE, out=a)
    t = np.multiply(a, 0.5)
    t += 1
    np.divide(1, t, out=t)
    far = _polynomial(_ERFC_SCALED, t)
    a *= a
    np.negative(a, out=a)
    far *= np.exp(a, out=a)
    np.subtract(1, far, out=far)
    np.copysign(far, v, out=far)
    return np.where(small, near, far)


#: Values a float64 step of erf or GELU takes at a time: its arrays stay in the CPU's cache
#: (a GELU of (1, 256, 56, 56) 6.2 ms in runs of 2**16, 11.3 ms over the whole tensor at once)
_RUN = 1 << 16


def _in_runs(x, f):
    """``f`` of ``x``'s values (flat, float64 results) run by run, as an array of ``x``'s
    dtype and shape (the values as ``astype`` rounds them)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    y = np.empty(flat.shape, x.dtype)
    for i in range(0, flat.size, _RUN):
        y[i:i + _RUN] = f(flat[i:i + _RUN])
    return y.reshape(x.shape)


def _gelu_erf(v):
    y = _gelu_erf_term(v / np.sqrt(2))  # float64: numpy's scalar is
    y += 1
    y *= 0.5 * v
    return y


def gelu(x, *, approximate):
    if approximate == "tanh":
        inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x * x * x)
        return (0.5 * x * (1 + np.tanh(inner))).astype(x.dtype, copy=False)
    return _in_runs(x, _gelu_erf)


def elu(x, *, alpha):
    negative = alpha * np.expm1(np.minimum(x, 0))  # exp of the negative part only: no overflow
    return np.where(x > 0, x, negative).astype(x.dtype, copy=False)


def leaky_relu(x, *, alpha):
    return np.where(x >= 0, x, x * np.asarray(alpha, x.dtype))


def hard_sigmoid(x, *, alpha, beta):
    return np.clip(x * np.asarray(alpha, x.dtype) + np.asarray(beta, x.dtype), 0, 1,
                   dtype=x.dtype)


def hard_swish(x):
    return x * np.clip(x / np.asarray(6, x.dtype) + np.asarray(0.5, x.dtype), 0, 1,
                       dtype=x.dtype)


def _ieee(fn):
    """``fn`` with IEEE results (inf, nan) and no warnings, as onnxruntime and torch give."""
    @functools.wraps(fn)
    def kernel(*args, **attrs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            return fn(*args, **attrs)
    return kernel


@_ieee
def softplus(x):
    return np.logaddexp(np.asarray(0, x.dtype), x)  # log(exp(0) + exp(x)), never overflows


@_ieee
def erf(x):
    return _in_runs(x, lambda v: _erf(v.astype(np.float64)))


exp = _ieee(np.exp)
log = _ieee(np.log)
sqrt = _ieee(np.sqrt)
reciprocal = _ieee(np.reciprocal)
pow_ = _ieee(np.power)
sin = _ieee(np.sin)
cos = _ieee(np.cos)
tan = _ieee(np.tan)
atan = _ieee(np.arctan)
asin = _ieee(np.arcsin)
acos = _ieee(np.arccos)
sinh = _ieee(np.sinh)
cosh = _ieee(np.cosh)
asinh = _ieee(np.arcsinh)
acosh = _ieee(np.arccosh)
atanh = _ieee(np.arctanh)


def isinf(x, *, detect_positive, detect_negative):
    if detect_positive and detect_negative:
        return np.isinf(x)
    if detect_positive:
        return np.isposinf(x)
    if detect_negative:
        return np.isneginf(x)
    return np.zeros(x.shape, np.bool_)


def prelu(x, slope):
    return np.where(x >= 0, x, x * slope)


@_ieee
def softmax(x, *, axis):
    # initial=-inf: an axis of size 0 gives an empty result, not numpy's ValueError
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


@_ieee
def log_softmax(x, *, axis):
    # initial=-inf: an axis of size 0 gives an empty result, not numpy's ValueError
    shifted = x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(
        x.dtype, copy=False)


def clip(x, *, min=None, max=None):  # noqa: A002 - the op's attribute names
    return np.clip(x, min, max).astype(x.dtype, copy=False)


def identity(x):
    return x


# --- arithmetic --------------------------------------------------------------------------------

@_ieee
def add(a, b):
    return np.add(a, b)


@_ieee
def sub(a, b):
    return np.subtract(a, b)


@_ieee
def mul(a, b):
    return np.multiply(a, b)


@_ieee
def div(a, b):
    return np.divide(a, b).astype(np.result_type(a, b), copy=False)


@_ieee
def _mod(a, b, fmod):
    return np.fmod(a, b) if fmod else np.remainder(a, b)


def mod(a, b, *, fmod):
    if a.dtype.kind in "iu" and not np.all(b):
        raise DomainError(f"mod: integer modulo by zero: b has {b.size - np.count_nonzero(b)} "
                          f"zero(s)", where="mod")
    return _mod(a, b, fmod)


def int_div(a, b):
    """Integer a / b truncated toward zero (numpy's // floors: one is added back where the
    division is inexact and the signs differ)."""
    zeros = b.size - np.count_nonzero(b)
    if zeros:
        raise DomainError(f"int_div: integer division by zero: b has {zeros} zero(s)",
                          where="int_div")
    if a.dtype.kind == "i" and np.any((a == np.iinfo(a.dtype).min) & (b == -1)):
        raise DomainError(f"int_div: {np.iinfo(a.dtype).min} / -1 overflows {a.dtype}",
                          where="int_div")
    q = np.floor_divide(a, b)
    return q + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(q.dtype)


def bit_shift(a, b, *, direction):
    """a << b or a >> b of unsigned integers; a shift by the bit width or more gives 0 (numpy's
    shifts do too, but that is not written down: the mask makes it so)."""
    shift = np.left_shift if direction == "left" else np.right_shift
    inside = b < a.dtype.itemsize * 8
    return np.where(inside, shift(a, np.where(inside, b, 0)), np.zeros((), a.dtype))


@_ieee
def matmul(a, b):
    return np.matmul(a, b)


@_ieee
def mean(x, *, axes, keepdim):
    if _empty(x, axes):  # 0 / 0, without numpy's "Mean of empty slice" warning
        return np.full(_reduced(x.shape, axes, keepdim), np.nan, x.dtype)
    return x.mean(axis=tuple(axes) if axes else None, keepdims=keepdim).astype(x.dtype, copy=False)


def _empty(x, axes) -> bool:
    return any(x.shape[a] == 0 for a in axes)


def _reduced(shape, axes, keepdim) -> tuple:
    """The shape a reduction over ``axes`` leaves."""
    axes = {a % len(shape) for a in axes}
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdim or i not in axes)


def _over(x, axes, op):
    """``axes`` as numpy takes them; a typed refusal for an empty one (a symbolic dim bound
    to 0 at run time) where ``op`` has no value for nothing."""
    if _empty(x, axes):
        raise ShapeError(f"{op}: x shape {x.shape} is empty along a reduced axis", where=op,
                         got=x.shape)
    return tuple(axes)


@_ieee
def sum_(x, *, axes, keepdim):
    return x.sum(axis=tuple(axes), keepdims=keepdim).astype(x.dtype, copy=False)


@_ieee
def prod(x, *, axes, keepdim):
    return x.prod(axis=tuple(axes), keepdims=keepdim).astype(x.dtype, copy=False)


def _extreme(x, axes, keepdim, method: str):
    """x's ``method`` ("max", "min") over ``axes``; over nothing the dtype's lowest (max) or
    highest (min): -inf or inf for a float."""
    if _empty(x, axes):
        if x.dtype.kind == "f":
            value = -np.inf if method == "max" else np.inf
        else:
            value = np.iinfo(x.dtype).min if method == "max" else np.iinfo(x.dtype).max
        return np.full(_reduced(x.shape, axes, keepdim), value, x.dtype)
    return getattr(x, method)(axis=tuple(axes), keepdims=keepdim)


def amax(x, *, axes, keepdim):
    return _extreme(x, axes, keepdim, "max")


def amin(x, *, axes, keepdim):
    return _extreme(x, axes, keepdim, "min")


def argmax(x, *, axis, keepdim):
    _over(x, [axis], "argmax")
    return np.argmax(x, axis=axis, keepdims=keepdim).astype(np.int64, copy=False)


def argmin(x, *, axis, keepdim):
    _over(x, [axis], "argmin")
    return np.argmin(x, axis=axis, keepdims=keepdim).astype(np.int64, copy=False)


@_ieee
def cumsum(x, *, axis, exclusive, reverse):
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)  # sequential, in x's dtype
    if exclusive:  # shift by one: 0, x0, x0 + x1, ...
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)),
                            np.take(y, range(y.shape[axis] - 1), axis=axis)], axis=axis)
    return np.ascontiguousarray(np.flip(y, axis) if reverse else y)


@_ieee
def cumprod(x, *, axis, exclusive, reverse):
    """Multiplied one element after the other in x's dtype (``np.cumprod`` with ``dtype``
    accumulates so; integers wrap without a warning, float32 overflows to inf)."""
    if reverse:
        x = np.flip(x, axis)
    y = np.cumprod(x, axis=axis, dtype=x.dtype)
    if exclusive:  # shift by one: 1, x0, x0 * x1, ... (an empty axis stays empty)
        ones = np.ones_like(x, shape=tuple(1 if i == axis % x.ndim else d
                                           for i, d in enumerate(x.shape)))
        y = np.concatenate([ones, y], axis=axis)
        y = np.take(y, range(x.shape[axis]), axis=axis)
    return np.ascontiguousarray(np.flip(y, axis) if reverse else y)


def det(x):
    """LU with partial pivoting in float64 (LAPACK), rounded to x's dtype; nan for a matrix
    holding a nan or an infinity (the ABI's rule: libraries disagree on LU of infinities, and
    LAPACK's singularity check turns some nans into 0)."""
    with np.errstate(all="ignore"):  # a determinant past float32's range rounds to inf
        y = np.asarray(np.linalg.det(x.astype(np.float64)))
        return np.where(np.isfinite(x).all(axis=(-2, -1)), y, np.nan).astype(x.dtype)


def dynamic_quantize(x):
    """The ABI's dynamic_quantize (:func:`abi.quantization.dynamic_quantization`)."""
    need_values("dynamic_quantize", x.shape)  # a symbolic dim bound to 0
    return dynamic_quantization(x)


def quantize_linear(x, scale, zero_point=None, *, dtype):
    """The ABI's quantize_linear (:func:`abi.quantization.quantize_linear`)."""
    return quantization.quantize_linear(x, scale, zero_point, dtype)


def integer_weight(weight, weight_zero_point=None) -> list:
    """integer_linear's weight less its zero point, transposed to (in, out) for ``x @ w``, in
    float32 runs of consecutive inputs: ``[(start, end, w), ...]``, each run as long as every
    output's sum over it stays exact in float32 (255, the most an x less its zero point
    reaches, times the sum of |weight - zero point| over the run within 2**24: any summation
    order is exact)."""
    w = weight.astype(np.int64)
    if weight_zero_point is not None:
        w -= np.reshape(weight_zero_point, (-1, 1)).astype(np.int64)
    runs = exact_runs(255 * np.abs(w.T))  # [k, o]: the most input k adds to output o
    return [(a, b, np.ascontiguousarray(w[:, a:b].T.astype(np.float32))) for a, b in runs]


def integer_sums(x, x_zero_point, runs: list):
    """``(x - x_zero_point) @ w`` for the :func:`integer_weight` ``runs``, exact: each run's
    sum in float32, the runs' sums added in int32, which wraps (two's complement) as
    onnxruntime's int32 accumulation does."""
    # one GEMM over every leading axis (matmul would run one per leading index)
    a = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]).astype(np.float32)
    if x_zero_point is not None:
        a -= np.float32(x_zero_point)
    total = None
    for start, end, w in runs:
        part = (a[:, start:end] @ w).astype(np.int32)
        total = part if total is None else np.add(total, part, out=total)
    return total.reshape(x.shape[:-1] + total.shape[-1:])


def integer_linear(x, weight, x_zero_point=None, weight_zero_point=None):
    """The ABI's integer_linear (the op's doc), weights not constant: prepared every call."""
    return integer_sums(x, x_zero_point, integer_weight(weight, weight_zero_point))


def topk(x, *, k, axis, largest):
    """Sorted by a stable sort, so equal values keep their order (lower index first); nan
    counts as above every number, as onnxruntime; k = -1: the whole axis (a sort)."""
    if k == -1:
        k = x.shape[axis]
    if k > x.shape[axis]:  # a symbolic dim bound smaller than k
        raise ShapeError(f"topk: k={k} is larger than axis {axis} of x shape {x.shape}",
                         where="topk", expected=k, got=x.shape)
    if x.dtype.kind == "f" and largest:  # nan first, then descending
        order = np.lexsort((np.negative(x), ~np.isnan(x)), axis=axis)
    elif largest:  # ~x reverses the order of any integer without overflow (-x would not)
        order = np.argsort(np.invert(x), axis=axis, kind="stable")
    else:  # ascending, nan last
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64, copy=False)
    return np.take_along_axis(x, indices, axis=axis), indices


def cast(x, *, dtype):
    return x.astype(dtypes.to_numpy(dtype))


def bitcast(x, *, dtype):
    return x.view(dtypes.to_numpy(dtype))  # one width: a view of any layout


# --- shape ops ---------------------------------------------------------------------------------

def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


def reshape(x, *, shape):
    return x.reshape(shape)


def flatten(x, *, start_dim, end_dim):
    """The axes from start_dim to end_dim as one, of their product: numpy cannot work a -1
    out of an empty tensor (a batch of 0)."""
    nd = x.ndim
    start = start_dim % nd if nd else 0
    end = end_dim % nd if nd else 0
    return x.reshape(x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:])


def sizes_from(like, sizes, like_axes) -> tuple:
    """``sizes`` with each size that ``like_axes`` names (not -1) read from like's shape."""
    return tuple(s if a == -1 else like.shape[a] for s, a in zip(sizes, like_axes))


def unflatten(x, like=None, *, axis, sizes, like_axes=None):
    """axis split into sizes (those ``like_axes`` names taken from like's shape); a dim that
    does not fit them (a symbolic one, known only now) is a ShapeError, not numpy's
    ValueError. The -1 is worked out here (0 when the other sizes hold no element), as the
    onnxruntime backend works it out."""
    if like is not None:
        sizes = sizes_from(like, sizes, like_axes)
    axis %= x.ndim
    dim, known = x.shape[axis], int(np.prod([s for s in sizes if s != -1]))
    wanted = [dim // max(known, 1) if s == -1 else s for s in sizes]
    if int(np.prod(wanted)) != dim:
        raise ShapeError(f"unflatten: axis {axis} of x shape {x.shape} ({dim}) does not split "
                         f"into sizes {list(sizes)}", where="unflatten", expected=list(sizes),
                         got=x.shape)
    return x.reshape(x.shape[:axis] + tuple(wanted) + x.shape[axis + 1:])


def transpose(x, *, perm):
    return np.transpose(x, perm)


def slice_(x, like=None, *, starts, ends, axes=None, steps=None, like_starts=None,
           like_ends=None):
    """ONNX Slice; the starts and ends ``like_starts`` / ``like_ends`` name (not -1) read
    from like's shape. A negative step from a start before the dim's first position starts
    at 0 (ONNX's clamp, :func:`abi.ops.dims.slice_range`), where Python's slicing takes
    nothing."""
    if like is not None:
        starts = sizes_from(like, starts, like_starts or [-1] * len(starts))
        ends = sizes_from(like, ends, like_ends or [-1] * len(ends))
    axes = list(axes) if axes else list(range(len(starts)))
    steps = list(steps) if steps else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st < 0 and s < -x.shape[a]:
            s = 0
        index[a] = slice(s, e, st)
    return x[tuple(index)]


def split(x, *, axis, sizes):
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, bounds, axis=axis))


def expand(x, *, shape):
    try:
        out = np.broadcast_shapes(x.shape, tuple(shape))
    except ValueError:  # a symbolic dim bound at run time to neither 1 nor the target
        raise ShapeError(f"expand: x shape {x.shape} does not broadcast with {tuple(shape)}",
                         where="expand", expected=tuple(shape), got=x.shape) from None
    return np.array(np.broadcast_to(x, out), order="C")  # its own array, not a strided view


def gather_elements(x, indices, *, axis, where: str = ""):
    """np.take_along_axis of x cut to indices' extent on the other axes; every index checked
    against the axis' dim first (IndexRangeError, prefixed by ``where``), so nothing is read out
    of bounds."""
    axis %= x.ndim
    check_indices(indices, x.shape[axis], f"{where}gather_elements: axis {axis} of x shape "
                  f"{x.shape}", kind="gather_elements")
    if any(i > s for d, (i, s) in enumerate(zip(indices.shape, x.shape)) if d != axis):
        raise ShapeError(f"gather_elements: indices shape {indices.shape} exceeds x shape "
                         f"{x.shape} off axis {axis}", where="gather_elements")
    cut = tuple(slice(None) if d == axis else slice(0, i) for d, i in enumerate(indices.shape))
    return np.take_along_axis(x[cut], indices, axis=axis)


def scatter_elements(x, indices, updates, *, axis, reduction, where: str = ""):
    """x with updates written (or combined) at indices along axis, in the indices' row-major
    order (the op's doc in abi/ops/glue.py); every index checked against the axis' dim first
    (IndexRangeError, prefixed by ``where``), so nothing is written out of bounds."""
    axis %= x.ndim
    check_indices(indices, x.shape[axis], f"{where}scatter_elements: axis {axis} of x shape "
                  f"{x.shape}", kind="scatter_elements")
    if any(i > s for d, (i, s) in enumerate(zip(indices.shape, x.shape)) if d != axis) \
            or updates.shape != indices.shape:
        raise ShapeError(f"scatter_elements: indices shape {indices.shape} and updates shape "
                         f"{updates.shape} do not fit x shape {x.shape} off axis {axis}",
                         where="scatter_elements")
    return scatter_apply(x, updates, scatter_plan(indices, x.shape, axis, reduction), reduction)


def scatter_plan(indices, shape, axis: int, reduction: str) -> tuple:
    """Where scatter_elements' updates go, for indices already checked against x ``shape``:
    reduction none, (the flat output positions, the flat update positions) of each element's
    last update; add and mul, every update's flat output position (combined in order by the
    ufunc's ``at``); max and min, one such pair per round, round k holding each element's k-th
    update."""
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices
    target = np.ravel_multi_index(tuple(np.broadcast_arrays(*grid)), shape).ravel()
    if reduction in ("add", "mul"):
        return (target,)
    order = np.argsort(target, kind="stable")  # each element's updates, in their order
    ranked = target[order]
    if reduction == "none":  # the last update to each element stays
        last = np.r_[ranked[1:] != ranked[:-1], True] if target.size else []
        return ((ranked[last], order[last]),)
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    occurrence = np.empty_like(target)
    occurrence[order] = np.arange(target.size) - np.repeat(starts, np.diff(np.r_[starts,
                                                                              target.size]))
    return tuple((target[occurrence == k], np.flatnonzero(occurrence == k))
                 for k in range(int(occurrence.max()) + 1 if target.size else 0))


def scatter_apply(x, updates, plan: tuple, reduction: str):
    """scatter_elements by a :func:`scatter_plan`: a copy of x with the updates placed."""
    y = np.array(x, order="C")
    values, flat = updates.reshape(-1), y.reshape(-1)
    if reduction in ("add", "mul"):  # unbuffered, in order: the same sums as a loop
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # IEEE results
            (np.add if reduction == "add" else np.multiply).at(flat, plan[0], values)
        return y
    for at, source in plan:  # none: one pair; max and min: round k, each element's k-th
        u = values[source]
        if reduction == "none":
            flat[at] = u
        elif reduction == "max":
            flat[at] = np.where(u < flat[at], flat[at], u)
        else:
            flat[at] = np.where(flat[at] < u, flat[at], u)
    return y


def tile(x, *, repeats):
    return np.tile(x, repeats)


def pad(x, *, pads, mode, value):
    width = [(0, 0)] * (x.ndim - len(pads)) + [tuple(p) for p in pads]
    if mode == "constant":
        return np.pad(x, width, mode="constant", constant_values=value)
    return np.pad(x, width, mode=mode)


# --- pooling -----------------------------------------------------------------------------------

def _windows(x, kernel, stride, dilation, out):
    """A strided view (N, C, *out, *kernel) of ``x`` (already padded)."""
    nsp = len(kernel)
    strides = x.strides
    shape = x.shape[:2] + tuple(out) + tuple(kernel)
    view_strides = (strides[:2] + tuple(strides[2 + i] * stride[i] for i in range(nsp))
                    + tuple(strides[2 + i] * dilation[i] for i in range(nsp)))
    return np.lib.stride_tricks.as_strided(x, shape, view_strides, writeable=False)


def _pool_geometry(name, shape, kernel, stride, padding, dilation, ceil_mode):
    """The output sizes (the ABI's rule: a ShapeError where a size leaves no window), the
    taps of each window's axis that can land on an element or its explicit padding, and the
    zeros each spatial axis needs past its padding for ceil mode's last window.

    A window's j-th tap lies at least j * dilation into the padded axis, so taps from
    ceil(padded length / dilation) on land past it in every window, on what ceil mode adds
    (which no pool reads: -inf to a max, nothing to a mean's sum or count). Leaving them out
    changes no value, and keeps what the pool allocates to the size of its input where the
    kernel is far larger (HF transformers' EfficientNet averages its 7x7 map with a 2560x2560
    kernel in ceil mode: padding for the whole kernel took 62.5 GiB)."""
    out = pool_sizes(name, shape, {"kernel_size": kernel, "stride": stride, "padding": padding,
                                   "dilation": dilation, "ceil_mode": ceil_mode})
    padded = [n + pb + pa for n, (pb, pa) in zip(shape[2:], padding)]
    reach = tuple(min(k, max(1, -(-length // d)))
                  for k, length, d in zip(kernel, padded, dilation))
    extra = [max(0, (n - 1) * s + d * (k - 1) + 1 - length)
             for n, k, s, d, length in zip(out, reach, stride, dilation, padded)]
    return out, reach, extra


def max_pool(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    out, kernel_size, extra = _pool_geometry("max_pool", x.shape, kernel_size, stride, padding,
                                             dilation, ceil_mode)
    width = [(0, 0), (0, 0)] + [(pb, pa + e) for (pb, pa), e in zip(padding, extra)]
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = np.pad(x, width, mode="constant", constant_values=fill)
    return _window_taps(np.maximum, _windows(xp, kernel_size, stride, dilation, out),
                        kernel_size, out)


def max_pool_with_indices(x, *, kernel_size, stride, padding, dilation, ceil_mode):
    """max_pool and the flat index of each maximum in its (n, c) plane, as torch: the first
    maximum in window order among the real (unpadded) elements, or the window's last nan.

    Tap by tap over the whole output, as max_pool (the windows' values were copied out, a
    copy of the taps times the outputs: 25 times the input for a 5x5 window by 1), or where
    the taps outnumber a plane's outputs, window by window (:func:`_window_pick`)."""
    nsp = len(kernel_size)
    out, kernel_size, extra = _pool_geometry("max_pool_with_indices", x.shape, kernel_size,
                                             stride, padding, dilation, ceil_mode)
    width = [(0, 0), (0, 0)] + [(pb, pa + e) for (pb, pa), e in zip(padding, extra)]
    xp = np.pad(x, width, mode="constant", constant_values=-np.inf)
    where = np.arange(int(np.prod(x.shape[2:])), dtype=np.int64).reshape((1, 1) + x.shape[2:])
    where = np.pad(where, width, mode="constant", constant_values=-1)  # -1: padding
    values = _windows(xp, kernel_size, stride, dilation, out)
    index = _windows(where, kernel_size, stride, dilation, out)
    taps = math.prod(kernel_size)
    if taps > math.prod(out):
        y = np.empty(values.shape[:2 + nsp], x.dtype)
        at = np.empty(values.shape[:2 + nsp], np.int64)
        for o in itertools.product(*(range(n) for n in out)):
            here = (slice(None), slice(None), *o)
            y[here], at[here] = _window_pick(values[here].reshape(values.shape[:2] + (taps,)),
                                             index[here].reshape(1, 1, taps))
        return y, at
    shape = values.shape[:2 + nsp]
    best = np.full(shape, -np.inf, x.dtype)
    at = np.full(shape, -1, np.int64)
    last_nan = np.full(shape, -1, np.int64)
    seen = np.zeros(shape, bool)  # a real value that is not nan taken
    for tap in itertools.product(*(range(k) for k in kernel_size)):
        v, i = values[(..., *tap)], index[(..., *tap)]
        nan = np.isnan(v)  # the padding is -inf: a nan is real
        np.copyto(last_nan, i, where=nan)
        take = (i >= 0) & ~nan & ((v > best) | ~seen)  # strictly greater: the first maximum
        np.copyto(best, v, where=take)
        np.copyto(at, i, where=take)
        seen |= take
    has_nan = last_nan >= 0
    best[has_nan] = np.nan
    return best, np.where(has_nan, last_nan, at)


def _window_pick(values, index):
    """:func:`max_pool_with_indices` of windows laid out flat along the last axis of
    ``values`` (N, C, T) and ``index`` (1, 1, T): each window's value and index."""
    index = np.broadcast_to(index, values.shape)
    real = index >= 0
    nan = np.isnan(values)
    best = np.where(real, values, -np.inf)
    top = np.where(nan, -np.inf, best).max(axis=-1, keepdims=True)
    first = np.argmax(real & (best == top), axis=-1)
    last_nan = values.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
    pick = np.where(nan.any(axis=-1), last_nan, first)[..., None]
    return (np.take_along_axis(values, pick, axis=-1)[..., 0],
            np.take_along_axis(index, pick, axis=-1)[..., 0])


def _window_taps(ufunc, win, kernel, out):
    """Each window's taps of the view ``win`` (:func:`_windows`) taken one after another in
    window order by ``ufunc`` (np.maximum: a nan wins, from either side; np.add: onnxruntime's
    AveragePool's order, its outputs bit for bit). Done as one ``ufunc`` over the whole output
    per tap (a reduction over the view's window axes runs a small loop per output element, in
    an order of its own: ten to seventy times slower on the max pools of
    bench/bench_extremes.py, 9 times on a 3x3 average pool of (1, 64, 56, 56), whose sums
    differed from onnxruntime's in up to 4 in 10), or where the taps outnumber a plane's
    outputs (a window far larger than its stride, where a step per tap would be a Python step
    per tap: 16 million for a 4000x4000 window) as ``ufunc``'s running accumulation along
    each window, an output at a time."""
    nsp, taps = len(kernel), math.prod(kernel)
    if taps <= math.prod(out):
        each = itertools.product(*(range(k) for k in kernel))
        y = np.array(win[(..., *next(each))])
        for tap in each:
            ufunc(y, win[(..., *tap)], out=y)
        return y
    y = np.empty(win.shape[:2 + nsp], win.dtype)
    for at in itertools.product(*(range(n) for n in out)):  # the taps' count, not -1: N may be 0
        values = win[(slice(None), slice(None), *at)].reshape(win.shape[:2] + (taps,))
        y[(slice(None), slice(None), *at)] = ufunc.accumulate(values, axis=-1)[..., -1]
    return y


def avg_pool(x, *, kernel_size, stride, padding, count_include_pad, ceil_mode, dilation=None):
    """The mean of each window's taps, dilation apart (None: 1 on every axis), as onnxruntime:
    the divisor counts the taps on real elements, or with count_include_pad those on the
    explicit padding too, never those past it that ceil_mode adds. A dilated window can step
    over every real element: with count_include_pad=False it gives 0 (onnxruntime's), not nan."""
    nsp = len(kernel_size)
    dilation = dilation or (1,) * nsp
    out, kernel_size, extra = _pool_geometry("avg_pool", x.shape, kernel_size, stride, padding,
                                             dilation, ceil_mode)
    width = [(0, 0), (0, 0)] + [(pb, pa + e) for (pb, pa), e in zip(padding, extra)]
    xp = np.pad(x, width)
    axes = tuple(range(-nsp, 0))
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf: nan, as IEEE and torch
        total = _window_taps(np.add, _windows(xp, kernel_size, stride, dilation, out),
                             kernel_size, out)
    # divisor: real elements, plus explicit padding when count_include_pad (never the ceil extra)
    mask = np.zeros((1, 1) + xp.shape[2:], dtype=x.dtype)
    inner = tuple(slice(pb, pb + n) for (pb, _), n in zip(padding, x.shape[2:]))
    if count_include_pad:
        inner = tuple(slice(0, pb + n + pa) for (pb, pa), n in zip(padding, x.shape[2:]))
    mask[(0, 0) + inner] = 1
    count = _windows(mask, kernel_size, stride, dilation, out).sum(axis=axes)
    # a window with no tap counted sums only padding zeros: 0 / 1
    total /= np.maximum(count, 1)
    return total


# --- resize ------------------------------------------------------------------------------------

def _resize_axis(out: int, length: int, scale, attrs: dict, last: bool):
    """What one axis gathers, :func:`abi.resampling.axis_taps` at the coordinates of its
    mode: ``([(indices, weights or None), ...], divisor or None)``."""
    c = coordinates(out, length, scale, attrs["coordinate_mode"])
    return axis_taps(c, length, attrs["mode"], attrs.get("nearest_mode", "round_prefer_floor"),
                     attrs.get("cubic_coeff_a", -0.75), attrs.get("exclude_outside", False), last)


def _resize_plan(spatial, attrs: dict) -> list | tuple | None:
    """Each axis' gather (see :func:`_resize_axis`), or with antialias ``("antialias", [each
    axis' windows (:func:`.antialias.antialias_taps`), None where kept])``; None when size
    keeps every spatial dim:
    onnxruntime then copies x, whatever the scales (with scales such as 1.1 the coordinates
    would move, and the zero weights of linear and cubic would give nan next to an inf)."""
    if any(d == 0 for d in spatial):
        raise ShapeError(f"resize: spatial dims {tuple(spatial)} of x include 0; there is "
                         f"nothing to sample from", where="resize", got=tuple(spatial))
    scales = attrs["scales"] or (None,) * len(spatial)
    size = [o if o != -1 else _scaled(d, s) for o, d, s in zip(attrs["size"], spatial, scales)]
    if tuple(size) == tuple(spatial):
        return None
    attrs = {**attrs, "size": size}
    if attrs.get("antialias"):  # onnxruntime's windows per axis whose size changes
        f32 = np.float32
        return ("antialias", [None if o == d else antialias_taps(
            d, o, f32(s) if s is not None else f32(o) / f32(d), attrs["mode"],
            attrs["coordinate_mode"], attrs["cubic_coeff_a"], attrs["exclude_outside"])
            for o, d, s in zip(attrs["size"], spatial, scales)])
    last = len(spatial) - 1
    return [_resize_axis(o, d, s, attrs, i == last)
            for i, (o, d, s) in enumerate(zip(attrs["size"], spatial, scales))]


def _scaled(length: int, scale: float) -> int:
    """A -1 size: floor(length * scale) as onnxruntime computes it (float32), which must be the
    exact floor the ABI's dim for it says ((length*k)//2**m)."""
    got = scaled_size(length, scale)
    k, q = scale_fraction(scale)
    if got != length * k // q:
        raise ShapeError(f"resize: floor({length} * {scale}) is {length * k // q}, but float32 "
                         f"arithmetic (onnxruntime's) gives {got}; the output size would differ "
                         f"from the ABI's", where="resize", got=(length,))
    return got


def _windows_apply(x, axis: int, start, count, weights):
    """``x`` resampled along ``axis`` by antialias windows: tap after tap, each output's k-th
    input times its weight, 0 past a shorter window (so an inf or nan outside it does not
    reach the output), summed in tap order."""
    shape = (-1,) + (1,) * (x.ndim - 1 - axis)
    y = None
    for k in range(int(count.max())):
        term = np.take(x, np.minimum(start + k, x.shape[axis] - 1), axis=axis)
        term = term * weights[:, k].astype(x.dtype).reshape(shape)
        inside = k < count
        if not inside.all():
            term = np.where(inside.reshape(shape), term, x.dtype.type(0))
        y = term if y is None else y + term
    return y


def _resize_apply(x, plan, mode: str):
    if plan is None:
        return x.copy()
    if isinstance(plan, tuple):  # antialias: the width first, then the height, as onnxruntime
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # IEEE results
            for axis, step in reversed(list(enumerate(plan[1], start=2))):
                if step is not None:  # a kept axis is copied, whatever its scale
                    x = _windows_apply(x, axis, *step)
        return x
    if mode == "nearest":
        index = np.ix_(*(taps[0][0] for taps, _ in plan))
        return x[(slice(None), slice(None), *index)]
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # inf * 0: nan (IEEE)
        for axis, (taps, divisor) in reversed(list(enumerate(plan, start=2))):
            shape = (-1,) + (1,) * (x.ndim - 1 - axis)
            # the innermost axis first; cubic sums from 0 tap by tap, linear adds its two
            y = np.zeros(x.shape[:axis] + taps[0][0].shape + x.shape[axis + 1:], x.dtype) \
                if mode == "cubic" else None
            for tap, w in taps:
                term = np.take(x, tap, axis=axis) * w.astype(x.dtype).reshape(shape)
                if divisor is not None:
                    term /= divisor.astype(x.dtype).reshape(shape)
                y = term if y is None else y + term
            x = y
    return x


def make_resize(attrs, consts, types, where):
    """A resize kernel of (x, like=None); the gather indices and weights are computed here
    when the spatial dims are static and no size comes from like, else once per input shape
    (and sizes like gives)."""
    attrs = dict(attrs)
    spatial, mode = types[0].shape[2:], attrs["mode"]
    like_axes = attrs.get("like_axes") if len(types) > 1 and types[1] is not None else None
    if like_axes is None and all(type(d) is int for d in spatial):
        plan = _resize_plan(spatial, attrs)
        return lambda x, like=None: _resize_apply(x, plan, mode)

    @functools.lru_cache(maxsize=8)
    def plan_for(shape, size=None):
        return _resize_plan(shape, attrs if size is None else {**attrs, "size": size})

    if like_axes is None:
        return lambda x, like=None: _resize_apply(x, plan_for(x.shape[2:]), mode)
    fixed = attrs["size"]

    def resize_like(x, like):  # the sizes like gives, read from its shape on each call
        size = sizes_from(like, fixed, like_axes)
        if 0 in size:  # onnxruntime refuses it too (a scale of 0)
            raise ShapeError(f"resize: sizes {size} read from like shape {like.shape} include "
                             f"0", where="resize", got=like.shape)
        return _resize_apply(x, plan_for(x.shape[2:], size), mode)

    return resize_like


# --- grid_sample -------------------------------------------------------------------------------

def _grid_coordinate(g, size: int, padding_mode: str, align_corners: bool):
    """Pixel coordinates along one axis from grid values ``g``, with torch's float arithmetic
    (its vectorized CPU kernel): unnormalized, then reflected and/or clipped by padding_mode (a
    nan clipped gives 0, as torch's clip does)."""
    t = g.dtype.type
    if align_corners:
        c = (g + t(1)) * t((size - 1) / 2)
    else:
        c = (g + t(1)) * t(size / 2) - t(0.5)
    if padding_mode == "reflection":
        if align_corners and size == 1:
            c = np.zeros_like(c)
        else:
            span = t(2 * (size - 1) if align_corners else 2 * size)
            a = np.abs(c if align_corners else c + t(0.5))
            extra = a - np.trunc(a / span) * span
            c = np.minimum(extra, span - extra) - t(0 if align_corners else 0.5)
    if padding_mode != "zeros":
        c = np.where(np.isnan(c), t(0), np.clip(c, t(0), t(size - 1)))
    return c


def _grid_gather(xt, batch, index: list, sizes) -> np.ndarray:
    """``xt`` (N, *spatial, C) at float pixel indices (one array per spatial axis, outermost
    first): 0 where an index is outside x (nan too), without casting a non-finite float to an
    integer."""
    inside = np.logical_and.reduce([(i >= 0) & (i <= size - 1) for i, size in zip(index,
                                                                                 sizes)])
    values = xt[(batch, *(np.where(inside, i, 0).astype(np.intp) for i in index))]
    return np.where(inside[..., None], values, xt.dtype.type(0))


#: A cubic position (in pixels) beyond this magnitude, or nan, samples as the axis' first edge
#: does, as onnxruntime's GridSample does (2 ** 62 itself is still taken as it is).
_CUBIC_LIMIT = 2.0 ** 62


def _cubic_taps(g, size: int, padding_mode: str, align_corners: bool):
    """The 4 tap indices (int64, each clipped into x) and weights, and where each tap is inside
    x, of cubic grid positions ``g`` along one axis, in onnxruntime's float arithmetic (the
    dtype of g): its unnormalization, floor(position) - 1 as the first tap, its Keys weights
    (a = -0.75) of the distance, and per tap padding (reflection by float arithmetic, as its
    GsReflect)."""
    t = g.dtype.type
    low, high = (t(0), t(size - 1)) if align_corners else (t(-0.5), t(size - 0.5))
    if align_corners:
        c = (g + t(1)) / t(2) * t(size - 1)
    else:
        c = ((g + t(1)) * t(size) - t(1)) / t(2)
    c = np.where(np.abs(c) <= _CUBIC_LIMIT, c, low)  # nan, inf, huge: the first edge
    first = np.floor(c).astype(np.int64) - 1
    d = np.abs(c - first.astype(g.dtype) - t(1))
    a = t(-0.75)
    u, s, v = d + t(1), t(1) - d, t(2) - d
    weights = [((a * u - t(5) * a) * u + t(8) * a) * u - t(4) * a,
               ((a + t(2)) * d - (a + t(3))) * d * d + t(1),
               ((a + t(2)) * s - (a + t(3))) * s * s + t(1),
               ((a * v - t(5) * a) * v + t(8) * a) * v - t(4) * a]
    taps, inside = [], []
    for k in range(4):
        i = first + k
        inside.append((i >= 0) & (i <= size - 1))
        if padding_mode == "reflection" and high > low:  # one pixel with align_corners: 0
            f = i.astype(g.dtype)
            span = high - low
            below, above = f < low, f > high
            out = np.where(below, low - f, f - high)
            n = np.trunc(out / span)
            r = out - n * span
            even = np.fmod(n, t(2)) == 0
            f = np.where(below, np.where(even, low + r, high - r),
                         np.where(above, np.where(even, high - r, low + r), f))
            i = np.trunc(f).astype(np.int64)
        taps.append(np.clip(i, 0, size - 1))  # border; zeros and reflection: already inside
    return taps, weights, inside


def _grid_sample_cubic(xt, batch, grid, padding_mode: str, align_corners: bool):
    """cubic grid_sample of ``xt`` (N, H, W, C) at ``grid`` (N, Ho, Wo, 2) as onnxruntime's
    GridSample: the 16 taps, each row weighed along x (left to right), then the rows along y
    (top to bottom); a tap outside x counts 0 with zeros."""
    h, w = xt.shape[1:3]
    ys, wy, iny = _cubic_taps(grid[..., 1], h, padding_mode, align_corners)
    xs, wx, inx = _cubic_taps(grid[..., 0], w, padding_mode, align_corners)
    zero = xt.dtype.type(0)
    y = None
    for j in range(4):
        row = None
        for k in range(4):
            p = xt[batch, ys[j], xs[k]]
            if padding_mode == "zeros":
                p = np.where((iny[j] & inx[k])[..., None], p, zero)
            term = wx[k][..., None] * p
            row = term if row is None else row + term
        term = wy[j][..., None] * row
        y = term if y is None else y + term
    return y


def grid_sample(x, grid, *, mode, padding_mode, align_corners):
    """torch's grid_sample, 2-D or 3-D: indices and weights for the whole grid at once, one
    gather per neighbour (the corners in order, outermost axis first; each weight the product
    of the axes' weights, outermost first); cubic (2-D) as onnxruntime computes it."""
    if x.shape[0] != grid.shape[0]:  # run-time dims the shape rule could not compare
        raise ShapeError(f"grid_sample: grid's batch dim {grid.shape[0]} is not x's "
                         f"{x.shape[0]}", where="grid_sample", expected=x.shape[0],
                         got=grid.shape[0])
    sizes = x.shape[2:]
    n = len(sizes)
    xt = np.moveaxis(x, 1, -1)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * n)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # IEEE results
        coords = [] if mode == "cubic" else [
            _grid_coordinate(grid[..., n - 1 - a], size, padding_mode, align_corners)
            for a, size in enumerate(sizes)]  # grid's last dim: x, y(, z)
        if mode == "cubic":
            y = _grid_sample_cubic(xt, batch, grid, padding_mode, align_corners)
        elif mode == "nearest":
            y = _grid_gather(xt, batch, [np.rint(c) for c in coords], sizes)
        else:
            low = [np.floor(c) for c in coords]
            far = [c - f for c, f in zip(coords, low)]  # the weights of the upper neighbours
            near = [1 - w for w in far]
            y = None
            for corner in itertools.product((0, 1), repeat=n):
                weight = functools.reduce(operator.mul, [(far if k else near)[a]
                                                         for a, k in enumerate(corner)])
                term = _grid_gather(xt, batch, [f + k for f, k in zip(low, corner)], sizes)
                term = term * weight[..., None]
                y = term if y is None else y + term
    return np.ascontiguousarray(np.moveaxis(y, -1, 1), dtype=x.dtype)
