"""The glue ops: element-wise math, broadcasting arithmetic, and shape plumbing between layers.

Broadcasting and matmul follow numpy; flatten follows torch; slice follows ONNX (clamped
starts/ends, which is also Python's slicing); axes may be negative wherever an axis is taken.
"""

from __future__ import annotations

import math

import numpy as np

from abi import dtypes, mlas
from abi.errors import ContractError, DTypeError, ShapeError
from abi.indices import check_indices
from abi.ops import dims
from abi.ops.rules import (fmt, need_attr_len, need_axis, need_dim, need_float, need_int,
                           need_numeric, need_rank, need_same_dtype, need_shape,
                           sizes_from_like)
from abi.ops.sampling import (grid_sample_shape, pool_indices_shape, pool_shape, pool_windows,
                              resize_shape)
from abi.ops.table import (AttrSpec, OpDef, all_of, between, each_at_least,
                            non_empty)
from abi.quantization import CODE_RANGES, need_values
from abi.spec import TensorType

__all__ = ["OPS"]


# --- element-wise ------------------------------------------------------------------------------


def _same(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    return [inputs[0]]


def _numeric_unary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    need_numeric(op.name, "x", inputs[0])
    return [inputs[0]]


def _float_unary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    need_float(op.name, "x", inputs[0])
    return [inputs[0]]


def _float_predicate(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    need_float(op.name, "x", inputs[0])
    return [TensorType(inputs[0].shape, "bool")]


def _signed_unary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    if x.dtype.startswith("uint") or x.dtype == "bool":
        raise DTypeError(f"{op.name}: x must be a signed integer or float tensor, got {x.dtype}",
                         where=op.name, expected="signed", got=x.dtype)
    return [x]


def _broadcast_shapes(op: str, a: tuple, b: tuple) -> tuple:
    r = max(len(a), len(b))
    pa, pb = (1,) * (r - len(a)) + tuple(a), (1,) * (r - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        d = dims.broadcast(x, y)
        if d is None:
            raise ShapeError(f"{op}: shapes {fmt(a)} and {fmt(b)} do not broadcast (aligned from "
                             f"the right, axis {i - r} is {x} vs {y})", where=op,
                             expected=a, got=b)
        out.append(d)
    return tuple(out)


def _binary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    a, b = inputs
    n = op.name
    check = need_float if n in ("div", "pow") else need_numeric
    check(n, "a", a)
    check(n, "b", b)
    need_same_dtype(n, [("a", a), ("b", b)])
    return [TensorType(_broadcast_shapes(n, a.shape, b.shape), a.dtype)]


def _mod(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    return _binary(op, inputs, attrs)


def _int_binary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    """int_div and the bitwise ops: a and b of one integer dtype (the output's), broadcast."""
    a, b = inputs
    need_int(op.name, "a", a)
    need_int(op.name, "b", b)
    need_same_dtype(op.name, [("a", a), ("b", b)])
    return [TensorType(_broadcast_shapes(op.name, a.shape, b.shape), a.dtype)]


def _int_unary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    need_int(op.name, "x", inputs[0])
    return [inputs[0]]


def _bit_shift(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    for name, t in zip(("a", "b"), inputs):
        if not t.dtype.startswith("uint"):
            raise DTypeError(f"{op.name}: {name} must be an unsigned integer tensor (uint8, "
                             f"uint16, uint32, uint64), got {t.dtype}", where=op.name,
                             expected="unsigned integer", got=t.dtype)
    return _int_binary(op, inputs, attrs)


def _compare(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    a, b = inputs
    n = op.name
    if n != "equal":
        need_numeric(n, "a", a)
        need_numeric(n, "b", b)
    need_same_dtype(n, [("a", a), ("b", b)])
    return [TensorType(_broadcast_shapes(n, a.shape, b.shape), "bool")]


def _need_bool(op: str, name: str, t: TensorType) -> None:
    if t.dtype != "bool":
        raise DTypeError(f"{op}: {name} must be a bool tensor, got {t.dtype}", where=op,
                         expected="bool", got=t.dtype)


def _not(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    _need_bool(op.name, "x", inputs[0])
    return [inputs[0]]


def _logical(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    a, b = inputs
    _need_bool(op.name, "a", a)
    _need_bool(op.name, "b", b)
    return [TensorType(_broadcast_shapes(op.name, a.shape, b.shape), "bool")]


def _where(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    cond, a, b = inputs
    n = op.name
    _need_bool(n, "cond", cond)
    need_same_dtype(n, [("a", a), ("b", b)])
    shape = _broadcast_shapes(n, _broadcast_shapes(n, cond.shape, a.shape), b.shape)
    return [TensorType(shape, a.dtype)]


def _prelu(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, slope = inputs
    need_float(op.name, "x", x)
    need_float(op.name, "slope", slope)
    need_same_dtype(op.name, [("x", x), ("slope", slope)])
    if _broadcast_shapes(op.name, x.shape, slope.shape) != tuple(x.shape):
        raise ShapeError(f"{op.name}: slope shape {fmt(slope.shape)} must broadcast to x's "
                         f"shape {fmt(x.shape)} (aligned from the right)", where=op.name,
                         expected=x.shape, got=slope.shape)
    return [x]


def _matmul(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    a, b = inputs
    n = op.name
    need_rank(n, "a", a, at_least=1)
    need_rank(n, "b", b, at_least=1)
    need_numeric(n, "a", a)
    need_numeric(n, "b", b)
    need_same_dtype(n, [("a", a), ("b", b)])
    sa = a.shape if len(a.shape) > 1 else (1, *a.shape)
    sb = b.shape if len(b.shape) > 1 else (*b.shape, 1)
    need_dim(n, f"the contracted dim of b shape {fmt(b.shape)}", sb[-2], sa[-1],
             f"a shape {fmt(a.shape)}: a[..., M, K] @ b[..., K, N]")
    batch = _broadcast_shapes(n, sa[:-2], sb[:-2])
    out = batch + ((sa[-2],) if len(a.shape) > 1 else ()) + ((sb[-1],) if len(b.shape) > 1
                                                             else ())
    return [TensorType(out, a.dtype)]


def _clip(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    need_numeric(op.name, "x", x)
    lo, hi = attrs["min"], attrs["max"]
    if lo is not None and hi is not None and lo > hi:
        raise ContractError(f"{op.name}: min={lo} is greater than max={hi}", op=op.name)
    return [x]


def _softmax(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    need_float(op.name, "x", x)
    need_rank(op.name, "x", x, at_least=1)
    need_axis(op.name, attrs["axis"], len(x.shape))
    return [x]


def _cast(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    return [TensorType(inputs[0].shape, attrs["dtype"])]


def _bitcast(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    """x's bits as ``dtype``: both numeric and of one width."""
    x, to = inputs[0], attrs["dtype"]
    need_numeric(op.name, "x", x)
    if to == "bool":
        raise DTypeError(f"{op.name}: attribute 'dtype' must be numeric, got bool", where=op.name,
                         expected="numeric", got="bool")
    have, want = (np.dtype(dtypes.to_numpy(d)).itemsize for d in (x.dtype, to))
    if have != want:
        raise DTypeError(f"{op.name}: x of dtype {x.dtype} ({have} bytes) and dtype {to} "
                         f"({want} bytes) differ in width", where=op.name,
                         expected=f"{have} bytes", got=to)
    return [TensorType(x.shape, to)]


def _reduce(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    """mean (float), sum, prod, amax, amin (numeric) over ``axes``; argmax, argmin over
    ``axis`` (int64)."""
    x = inputs[0]
    n = op.name
    arg = n in ("argmax", "argmin")
    (need_float if n == "mean" else need_numeric)(n, "x", x)
    r = len(x.shape)
    if arg:
        axes = [need_axis(n, attrs["axis"], r)]
    else:
        axes = [need_axis(n, a, r, "axes") for a in attrs["axes"]]
    if len(set(axes)) != len(axes):
        raise ContractError(f"{n}: attribute 'axes' {list(attrs['axes'])} names an axis twice "
                            f"(rank {r})", op=n, attribute="axes")
    if arg and x.shape[axes[0]] == 0:
        raise ShapeError(f"{n}: x shape {fmt(x.shape)} is empty along a reduced axis (the "
                         f"{n} of nothing is undefined)", where=n, got=x.shape)
    if attrs["keepdim"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(shape, "int64" if arg else x.dtype)]


def _cumsum(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    need_numeric(op.name, "x", x)
    need_axis(op.name, attrs["axis"], need_rank(op.name, "x", x, at_least=1))
    return [x]


def _det(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    need_float(n, "x", x)
    need_rank(n, "x", x, at_least=2)
    rows, cols = x.shape[-2:]
    if rows != cols or rows == 0:
        raise ShapeError(f"{n}: x must be square matrices (its last two dims equal and not 0), "
                         f"got shape {fmt(x.shape)}", where=n, expected="(..., n, n)",
                         got=x.shape)
    return [TensorType(tuple(x.shape[:-2]), x.dtype)]


def _dynamic_quantize(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    if x.dtype != "float32":
        raise DTypeError(f"{n}: x must be float32, got {x.dtype}", where=n, expected="float32",
                         got=x.dtype)
    need_values(n, x.shape)
    return [x, TensorType((), "float32"), TensorType((), "float32")]


def _quantize_linear(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, scale, zero_point = inputs
    n = op.name
    for name, t in (("x", x), ("scale", scale), ("zero_point", zero_point)):
        if t is not None and t.dtype != "float32":
            raise DTypeError(f"{n}: {name} must be float32, got {t.dtype}", where=n,
                             expected="float32", got=t.dtype)
    if zero_point is not None:
        need_shape(n, "zero_point", zero_point, scale.shape, f"the scale's, {fmt(scale.shape)}")
    shape = _broadcast_shapes(n, x.shape, scale.shape)
    if shape != tuple(x.shape):
        raise ShapeError(f"{n}: scale of shape {fmt(scale.shape)} would broadcast x of shape "
                         f"{fmt(x.shape)} to {fmt(shape)}: it must broadcast to x's shape",
                         where=n, expected=x.shape, got=scale.shape)
    return [x]


def _codes_and_parameters(n: str, codes: list, parameters: list) -> None:
    """The qlinear element-wise ops' inputs: ``codes`` [(name, type)] uint8 or int8, all of one
    dtype; ``parameters`` [(name, type, dtype)] each of shape (), a scale float32, a zero point
    of the codes' dtype."""
    first = codes[0][1]
    if first.dtype not in ("uint8", "int8"):
        raise DTypeError(f"{n}: {codes[0][0]} must be uint8 or int8, got {first.dtype}",
                         where=n, expected="uint8 or int8", got=first.dtype)
    need_same_dtype(n, codes + [(name, t) for name, t, kind in parameters if kind == "codes"])
    for name, t, kind in parameters:
        if kind == "scale" and t.dtype != "float32":
            raise DTypeError(f"{n}: {name} must be float32, got {t.dtype}", where=n,
                             expected="float32", got=t.dtype)
        need_shape(n, name, t, ())


def _qlinear_unary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, x_scale, x_zp, y_scale, y_zp = inputs
    _codes_and_parameters(op.name, [("x", x)], [
        ("x_scale", x_scale, "scale"), ("x_zero_point", x_zp, "codes"),
        ("y_scale", y_scale, "scale"), ("y_zero_point", y_zp, "codes")])
    return [x]


def _qlinear_binary(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = inputs
    _codes_and_parameters(op.name, [("a", a), ("b", b)], [
        ("a_scale", a_scale, "scale"), ("a_zero_point", a_zp, "codes"),
        ("b_scale", b_scale, "scale"), ("b_zero_point", b_zp, "codes"),
        ("y_scale", y_scale, "scale"), ("y_zero_point", y_zp, "codes")])
    return [TensorType(_broadcast_shapes(op.name, a.shape, b.shape), a.dtype)]


def _qlinear_concat(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    n = op.name
    if len(inputs) < 5 or (len(inputs) - 2) % 3:
        raise ContractError(f"{n}: {len(inputs)} inputs: takes y_scale, y_zero_point, then one "
                            f"or more (x, x_scale, x_zero_point)", where=n)
    parts = [(f"inputs[{i}]", inputs[i]) for i in range(2, len(inputs), 3)]
    parameters = [("inputs[0] (y_scale)", inputs[0], "scale"),
                  ("inputs[1] (y_zero_point)", inputs[1], "codes")]
    for i in range(3, len(inputs), 3):
        parameters += [(f"inputs[{i}] (its scale)", inputs[i], "scale"),
                       (f"inputs[{i + 1}] (its zero point)", inputs[i + 1], "codes")]
    _codes_and_parameters(n, parts, parameters)
    return [_joined(n, parts, attrs)]


def _qlinear_softmax(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    _qlinear_unary(op, inputs, attrs)
    need_axis(n, attrs["axis"], need_rank(n, "x", x, at_least=1))
    need_values(n, x.shape)
    return [x]


def _qlinear_global_average_pool(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    _qlinear_unary(op, inputs, attrs)
    rank = need_rank(n, "x", x, at_least=3)
    axes = mlas.global_average_axes(rank, attrs["channels_last"])
    if all(type(x.shape[a]) is int for a in axes):
        mlas.global_average_count(n, x.shape, attrs["channels_last"])
    return [TensorType(tuple(1 if a in axes else d for a, d in enumerate(x.shape)), x.dtype)]


def _qlinear_average_pool(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    _qlinear_unary(op, inputs, attrs)
    rank = need_rank(n, "x", x, one_of=(3, 4, 5))
    last = attrs["channels_last"]
    axes = mlas.global_average_axes(rank, last)
    if math.prod(attrs["kernel_size"]) >= mlas.GLOBAL_AVERAGE_COUNTS:
        raise ContractError(f"{n}: kernel_size {list(attrs['kernel_size'])} holds "
                            f"{math.prod(attrs['kernel_size'])} taps: onnxruntime's kernel "
                            f"takes fewer than {mlas.GLOBAL_AVERAGE_COUNTS}", op=n,
                            attribute="kernel_size")
    out = iter(pool_windows(n, x.shape, attrs, last))
    return [TensorType(tuple(next(out) if a in axes else d for a, d in enumerate(x.shape)),
                       x.dtype)]


def _integer_linear(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, w, x_zp, w_zp = inputs
    n = op.name
    for name, t in (("x", x), ("weight", w)):
        if t.dtype not in ("uint8", "int8"):
            raise DTypeError(f"{n}: {name} must be uint8 or int8, got {t.dtype}", where=n,
                             expected="uint8 or int8", got=t.dtype)
    need_same_dtype(n, [("x", x), ("x_zero_point", x_zp)])
    need_same_dtype(n, [("weight", w), ("weight_zero_point", w_zp)])
    need_rank(n, "x", x, at_least=1)
    need_rank(n, "weight", w, exact=2)
    need_dim(n, f"the last dim of x shape {fmt(x.shape)}", x.shape[-1], w.shape[1],
             f"weight shape {fmt(w.shape)} is (out_features, in_features)")
    if x_zp is not None:
        need_shape(n, "x_zero_point", x_zp, ())
    if w_zp is not None and len(w_zp.shape) != 0:
        need_shape(n, "weight_zero_point", w_zp, (w.shape[0],),
                   f"one value, or one per output feature of weight shape {fmt(w.shape)}")
    return [TensorType((*x.shape[:-1], w.shape[0]), "int32")]


def _topk(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    need_numeric(n, "x", x)
    axis = need_axis(n, attrs["axis"], need_rank(n, "x", x, at_least=1))
    k, size = attrs["k"], x.shape[axis]
    if k == -1:  # every element of the axis: a sort
        k = size
    if type(size) is int and k > size:
        raise ShapeError(f"{n}: k={k} is larger than axis {attrs['axis']} of x shape "
                         f"{fmt(x.shape)}", where=n, expected=k, got=x.shape)
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


# --- shape plumbing ----------------------------------------------------------------------------


def _concat(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    return [_joined(op.name, [(f"inputs[{i}]", t) for i, t in enumerate(inputs)], attrs)]


def _joined(n: str, parts: list, attrs: dict) -> TensorType:
    """The concatenation of ``parts`` [(name, type)] along ``attrs["axis"]``."""
    (first_name, first), *rest = parts
    r = need_rank(n, first_name, first, at_least=1)
    axis = need_axis(n, attrs["axis"], r)
    need_same_dtype(n, parts)
    for name, t in rest:
        if len(t.shape) != r or any(dims.known_different(a, b) for j, (a, b)
                                    in enumerate(zip(t.shape, first.shape)) if j != axis):
            raise ShapeError(f"{n}: {name} shape {fmt(t.shape)} must match {first_name} shape "
                             f"{fmt(first.shape)} on every axis but {axis}", where=n,
                             expected=first.shape, got=t.shape)
    shape = list(first.shape)
    shape[axis] = dims.total(t.shape[axis] for _, t in parts)
    return TensorType(tuple(shape), first.dtype)


def _reshape(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    target = attrs["shape"]
    numel = dims.product(x.shape)
    known = dims.product(d for d in target if d != -1)
    if -1 in target:
        if known == 0:
            raise ShapeError(f"{n}: shape {fmt(target)} has -1 next to a 0 dim; the -1 is "
                             f"ambiguous", where=n, got=target)
        if type(numel) is int and numel % known:
            raise ShapeError(f"{n}: cannot reshape x shape {fmt(x.shape)} ({numel} elements) to "
                             f"{fmt(target)}: {numel} is not a multiple of {known}", where=n,
                             expected=target, got=x.shape)
        fill = dims.floordiv(numel, known)
        shape = tuple(fill if d == -1 else d for d in target)
    else:
        if type(numel) is int and numel != known:
            raise ShapeError(f"{n}: cannot reshape x shape {fmt(x.shape)} ({numel} elements) to "
                             f"{fmt(target)} ({known} elements)", where=n, expected=target,
                             got=x.shape)
        shape = target
    return [TensorType(tuple(shape), x.dtype)]


def _flatten(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    shape = x.shape if x.shape else (1,)  # torch treats a scalar as shape (1,)
    r = len(shape)
    start = need_axis(n, attrs["start_dim"], r, "start_dim")
    end = need_axis(n, attrs["end_dim"], r, "end_dim")
    if start > end:
        raise ContractError(f"{n}: start_dim {attrs['start_dim']} comes after end_dim "
                            f"{attrs['end_dim']} for rank {r}", op=n)
    out = (*shape[:start], dims.product(shape[start:end + 1]), *shape[end + 1:])
    return [TensorType(out, x.dtype)]


def _unflatten(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, like = inputs
    n = op.name
    axis = need_axis(n, attrs["axis"], need_rank(n, "x", x, at_least=1))
    sizes, dim = list(attrs["sizes"]), x.shape[axis]
    given = sizes_from_like(n, like, attrs["like_axes"], sizes)
    if given is not None:  # each size that like gives is its dim there
        sizes = [s if g is None else g for s, g in zip(sizes, given)]
    if sum(s == -1 for s in sizes) > 1:
        raise ContractError(f"{n}: sizes {list(attrs['sizes'])} leave more than one size to "
                            f"infer (-1)", op=n, attribute="sizes")
    known = dims.product(s for s in sizes if s != -1)
    if -1 in sizes:
        if dims.is_static(dim) and dims.is_static(known) and dim % known:
            raise ShapeError(f"{n}: axis {axis} of x shape {fmt(x.shape)} ({dim}) is not a "
                             f"multiple of {known}, the sizes {list(sizes)} without the -1",
                             where=n, expected=list(sizes), got=x.shape)
        fill = dims.floordiv(dim, known)
    elif dims.is_static(dim) and dims.is_static(known) and dim != known:
        raise ShapeError(f"{n}: axis {axis} of x shape {fmt(x.shape)} ({dim}) cannot be split "
                         f"into sizes {list(sizes)} ({known} elements)", where=n,
                         expected=list(sizes), got=x.shape)
    out = [fill if s == -1 else s for s in sizes]
    return [TensorType((*x.shape[:axis], *out, *x.shape[axis + 1:]), x.dtype)]


def _no_zero(v) -> str | None:
    return None if all(x != 0 for x in v) else f"must have no 0 entry, got {list(v)}"


def _transpose(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    perm = attrs["perm"]
    if sorted(perm) != list(range(len(x.shape))):
        raise ContractError(f"{op.name}: perm {list(perm)} is not a permutation of the "
                            f"{len(x.shape)} axes of x shape {fmt(x.shape)}", op=op.name,
                            attribute="perm")
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


def _slice(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, like = inputs[0], inputs[1] if len(inputs) > 1 else None
    n = op.name
    r = len(x.shape)
    starts, ends = attrs["starts"], attrs["ends"]
    axes = attrs["axes"] if attrs["axes"] is not None else tuple(range(len(starts)))
    steps = attrs["steps"] if attrs["steps"] is not None else (1,) * len(starts)
    need_attr_len(n, attrs, ("ends", "axes", "steps"), len(starts), "'starts'")
    axes = [need_axis(n, a, r, "axes") for a in axes]
    if len(set(axes)) != len(axes):
        raise ContractError(f"{n}: attribute 'axes' {list(attrs['axes'])} names an axis twice",
                            op=n, attribute="axes")
    if 0 in steps:
        raise ContractError(f"{n}: attribute 'steps' {list(steps)} contains 0", op=n,
                            attribute="steps")
    shape = list(x.shape)
    bounds = _slice_bounds(n, x, like, attrs, axes, steps)
    for k, (a, s, e, st) in enumerate(zip(axes, starts, ends, steps)):
        if bounds is not None and (bounds[0][k] is not None or bounds[1][k] is not None):
            start, end = bounds[0][k], bounds[1][k]
            shape[a] = dims.sub(shape[a] if end is None else end, s if start is None else start)
        else:
            shape[a] = dims.slice_len(shape[a], s, e, st)
    return [TensorType(tuple(shape), x.dtype)]


def _slice_bounds(n: str, x: TensorType, like: TensorType | None, attrs: dict, axes: list,
                  steps) -> tuple[list, list] | None:
    """Per sliced axis, the start and the end like gives (None where it gives none); None
    without like. Checked: like and like_starts / like_ends come together, one entry per
    sliced axis, each -1 or an axis of like; where like gives a bound, the written one is 0,
    the step 1, the other bound a start >= 0, an end to the end or like's too, and the axis
    symbolic or the bound an end."""
    given = {k: attrs[k] for k in ("like_starts", "like_ends")}
    if (like is None) != all(v is None for v in given.values()):
        raise ContractError(f"{n}: input 'like' and attributes 'like_starts' / 'like_ends' come "
                            f"together", op=n, attribute="like_starts")
    if like is None:
        return None
    out = []
    for key, written in (("like_starts", attrs["starts"]), ("like_ends", attrs["ends"])):
        picks = given[key] if given[key] is not None else [-1] * len(axes)
        if len(picks) != len(axes):
            raise ContractError(f"{n}: {key} {list(picks)} must have one entry per sliced axis",
                                op=n, attribute=key)
        row = []
        for k, a in enumerate(picks):
            if a != -1 and not 0 <= a < len(like.shape):
                raise ContractError(f"{n}: {key}[{k}] is {a}, not an axis of like shape "
                                    f"{fmt(like.shape)} (or -1)", op=n, attribute=key)
            fixed = dims.is_static(x.shape[axes[k]])
            if a != -1 and (written[k] != 0 or steps[k] != 1 or fixed and (
                    key == "like_starts" or attrs["starts"][k] < 0)):
                raise ContractError(f"{n}: {key}[{k}] reads like's axis {a} for axis {axes[k]} "
                                    f"of x shape {fmt(x.shape)}: needs step 1 and 0 written in "
                                    f"its place, and a symbolic axis or an end after a start "
                                    f">= 0", op=n, attribute=key)
            row.append(None if a == -1 else like.shape[a])
        out.append(row)
    for k, (start, end) in enumerate(zip(*out)):
        if (start is not None or end is not None) and (
                (start is None and attrs["starts"][k] < 0)
                or (end is None and attrs["ends"][k] < dims.TO_THE_END)):
            raise ContractError(f"{n}: axis {axes[k]} takes a bound from like: its other bound "
                                f"must be a start >= 0 or an end to the end", op=n,
                                attribute="like_starts")
    return out[0], out[1]


def _split(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    need_rank(n, "x", x, at_least=1)
    axis = need_axis(n, attrs["axis"], len(x.shape))
    sizes = attrs["sizes"]
    need_dim(n, f"the sum of sizes {list(sizes)}", sum(sizes), x.shape[axis],
             f"it must equal dim {axis} of x shape {fmt(x.shape)}")
    out = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        out.append(TensorType(tuple(shape), x.dtype))
    return out


def _gather(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, idx = inputs
    n = op.name
    axis = need_axis(n, attrs["axis"], need_rank(n, "x", x, at_least=1))
    if idx.dtype != "int64":
        raise DTypeError(f"{n}: indices must be an int64 tensor, got {idx.dtype}", where=n,
                         expected="int64", got=idx.dtype)
    if not dims.is_static(x.shape[axis]):
        raise ShapeError(f"{n}: axis {axis} of x shape {fmt(x.shape)} is symbolic; the indices "
                         f"are checked against a fixed dim", where=n, got=x.shape)
    return [TensorType((*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]), x.dtype)]


def _gather_elements(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, idx = inputs
    n = op.name
    rank = need_rank(n, "x", x, at_least=1)
    axis = need_axis(n, attrs["axis"], rank)
    if idx.dtype != "int64":
        raise DTypeError(f"{n}: indices must be an int64 tensor, got {idx.dtype}", where=n,
                         expected="int64", got=idx.dtype)
    need_rank(n, "indices", idx, exact=rank)
    for d, (i, s) in enumerate(zip(idx.shape, x.shape)):
        if d != axis and i != s and not (dims.is_static(i) and dims.is_static(s) and i <= s):
            raise ShapeError(f"{n}: indices shape {fmt(idx.shape)} exceeds x shape "
                             f"{fmt(x.shape)} on axis {d} (each axis but {axis} must be at "
                             f"most x's, as torch.gather)", where=n, expected=x.shape,
                             got=idx.shape)
    return [TensorType(idx.shape, x.dtype)]


def _scatter_elements(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, idx, updates = inputs
    n = op.name
    [index] = _gather_elements(op, [x, idx], attrs)
    if updates.dtype != x.dtype:
        raise DTypeError(f"{n}: updates must have x's dtype {x.dtype}, got {updates.dtype}",
                         where=n, expected=x.dtype, got=updates.dtype)
    if tuple(updates.shape) != tuple(index.shape):
        raise ShapeError(f"{n}: updates shape {fmt(updates.shape)} is not the indices' shape "
                         f"{fmt(idx.shape)}", where=n, expected=idx.shape, got=updates.shape)
    if attrs["reduction"] != "none" and x.dtype == "bool":
        raise DTypeError(f"{n}: reduction {attrs['reduction']!r} needs a numeric x, got bool",
                         where=n, expected="numeric", got=x.dtype)
    return [x]


def _gather_values(op: OpDef, inputs: list, consts: list, attrs: dict) -> None:
    """The indices are a constant of the graph, each in [0, dim): checked once, at load."""
    x = inputs[0]
    if consts[1] is None:
        raise ContractError(f"{op.name}: indices must be a constant tensor of the graph, not a "
                            f"value computed at run time", op=op.name)
    axis = attrs["axis"] % len(x.shape)
    check_indices(consts[1], x.shape[axis], f"{op.name}: axis {axis} of x shape "
                  f"{fmt(x.shape)}", kind="gather")


def _element_index_values(op: OpDef, inputs: list, consts: list, attrs: dict) -> None:
    """Constant indices (run-time ones are checked as they arrive) each in [0, dim): checked
    once, at load; against a symbolic dim, on every call, as run-time ones."""
    x = inputs[0]
    axis = attrs["axis"] % len(x.shape)
    if consts[1] is None or not dims.is_static(x.shape[axis]):
        return
    check_indices(consts[1], x.shape[axis], f"{op.name}: axis {axis} of x shape "
                  f"{fmt(x.shape)}", kind=op.name)


#: The most elements an expand or tile may produce (its fixed dims; a symbolic one counts as 1):
#: these ops make a large tensor from a small one, so a graph cannot ask for 2**40 at load.
MAX_EXPANDED = 1 << 31


def _capped(op: str, x: TensorType, shape: tuple) -> list[TensorType]:
    n = 1
    for d in shape:
        n *= d if type(d) is int else 1
    if n > MAX_EXPANDED:
        raise ShapeError(f"{op}: the output shape {fmt(shape)} would have {n} elements, above "
                         f"the cap of {MAX_EXPANDED}", where=op, got=shape)
    return [TensorType(shape, x.dtype)]


def _expand(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    return _capped(op.name, x, _broadcast_shapes(op.name, x.shape, attrs["shape"]))


def _tile(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    need_attr_len(n, attrs, ("repeats",), len(x.shape), f"x shape {fmt(x.shape)} has "
                  f"{len(x.shape)} axes and")
    return _capped(n, x, tuple(dims.mul(d, r) for d, r in zip(x.shape, attrs["repeats"])))


def _pad(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    pads, mode = attrs["pads"], attrs["mode"]
    need_attr_len(n, attrs, ("pads",), len(x.shape), f"x shape {fmt(x.shape)} has "
                  f"{len(x.shape)} axes and")
    shape = []
    for i, (d, (before, after)) in enumerate(zip(x.shape, pads)):
        if type(d) is int and mode == "reflect" and max(before, after) >= d:
            raise ShapeError(f"{n}: reflect padding ({before}, {after}) on axis {i} must be "
                             f"smaller than the dim, which is {d} (x shape {fmt(x.shape)})",
                             where=n, got=x.shape)
        if d == 0 and mode == "edge" and (before or after):
            raise ShapeError(f"{n}: edge padding on axis {i} needs a non-empty dim (x shape "
                             f"{fmt(x.shape)})", where=n, got=x.shape)
        shape.append(dims.add(d, before + after))
    return [TensorType(tuple(shape), x.dtype)]


_EXTREME = ("; nan if any reduced element is nan; over an axis of size 0, the dtype's {}"
            " ({}inf for a float: tinygrad's identity element, ONNX's and onnxruntime's)")


# --- the table ---------------------------------------------------------------------------------

_POSITIVE_INTS = all_of(non_empty, each_at_least(1))
_MAX_POOL = {  # max_pool's attributes, and max_pool_with_indices'
    "kernel_size": AttrSpec("ints", check=_POSITIVE_INTS),
    "stride": AttrSpec("ints", check=_POSITIVE_INTS),
    "padding": AttrSpec("pads"),
    "dilation": AttrSpec("ints", check=_POSITIVE_INTS),
    "ceil_mode": AttrSpec("bool", False),
}
_FINITE = between(-1e30, 1e30)
_AXIS = AttrSpec("int")


def _scales(v) -> str | None:
    return None if all(0 < s <= 1e9 for s in v) else f"must have every entry in (0, 1e9], got " \
        f"{list(v)}"


def _topk_k(v) -> str | None:
    return None if v >= 1 or v == -1 else f"must be >= 1, or -1 for the whole axis, got {v}"


def _resize_sizes(v) -> str | None:
    return None if all(x >= 1 or x == -1 for x in v) else (
        f"must have every entry >= 1, or -1 for floor(in * scale) when the call runs, got "
        f"{list(v)}")


def _unary(name: str, rule, doc: str, attrs: dict | None = None) -> OpDef:
    return OpDef(name, 1, ("x",), ("y",), attrs or {}, rule, doc=doc)


def _binary_op(name: str, symbol: str, dtypes_doc: str) -> OpDef:
    return OpDef(name, 1, ("a", "b"), ("y",), {}, _binary, doc=f"""\
Element-wise a {symbol} b with numpy broadcasting; a and b share one dtype ({dtypes_doc}), which
is the output's.""")


_QLINEAR_UNARY = ("x", "x_scale", "x_zero_point", "y_scale", "y_zero_point")
_QLINEAR_BINARY = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale",
                   "y_zero_point")

OPS: tuple[OpDef, ...] = (
    _unary("identity", _same, "Returns x unchanged (any dtype)."),
    _unary("relu", _numeric_unary, "max(x, 0), element-wise; x numeric (not bool)."),
    _unary("sigmoid", _float_unary, "1 / (1 + exp(-x)), element-wise; x float."),
    _unary("tanh", _float_unary, "tanh(x), element-wise; x float."),
    _unary("gelu", _float_unary, """\
GELU, element-wise; x float. approximate='none' is x * Phi(x) (erf), 'tanh' is torch's tanh
approximation.""", {"approximate": AttrSpec("enum:none|tanh", "none")}),
    _unary("elu", _float_unary, """\
x where x > 0, else alpha * (exp(x) - 1), element-wise; x float.""",
           {"alpha": AttrSpec("float", 1.0, check=_FINITE)}),
    _unary("leaky_relu", _float_unary, """\
x where x >= 0, else alpha * x, element-wise; x float (torch's default alpha is 0.01, as
ONNX's).""", {"alpha": AttrSpec("float", 0.01, check=_FINITE)}),
    _unary("hard_sigmoid", _float_unary, """\
max(0, min(1, alpha * x + beta)), element-wise; x float. ONNX's defaults (0.2, 0.5); torch's
Hardsigmoid is alpha 1/6.""", {"alpha": AttrSpec("float", 0.2, check=_FINITE),
                               "beta": AttrSpec("float", 0.5, check=_FINITE)}),
    _unary("hard_swish", _float_unary, """\
x * max(0, min(1, x / 6 + 1 / 2)), element-wise; x float (torch's Hardswish, ONNX HardSwish)."""),
    _unary("softplus", _float_unary, """\
log(1 + exp(x)), element-wise, computed without overflow; x float."""),
    _unary("exp", _float_unary, "exp(x), element-wise; x float."),
    _unary("log", _float_unary, """\
Natural log, element-wise; x float (-inf at 0, nan below, as IEEE)."""),
    _unary("sqrt", _float_unary, "Square root, element-wise; x float (nan below 0, as IEEE)."),
    _unary("reciprocal", _float_unary, "1 / x, element-wise; x float (inf at 0, as IEEE)."),
    _unary("erf", _float_unary, "The error function, element-wise; x float."),
    _unary("floor", _float_unary, "The largest integer <= x, element-wise; x float."),
    _unary("ceil", _float_unary, "The smallest integer >= x, element-wise; x float."),
    _unary("round", _float_unary, """\
x rounded to the nearest integer, halves to even (numpy, torch and ONNX alike); x float."""),
    _unary("abs", _numeric_unary, "|x|, element-wise; x numeric (not bool)."),
    _unary("neg", _signed_unary, "-x, element-wise; x a signed integer or float."),
    _unary("sin", _float_unary, "sin(x), element-wise, x in radians; x float (nan at +-inf)."),
    _unary("cos", _float_unary, "cos(x), element-wise, x in radians; x float (nan at +-inf)."),
    _unary("sign", _numeric_unary, """\
-1, 0 or 1 by the sign of x, element-wise, in x's dtype; x numeric (not bool). nan gives nan,
as numpy and ONNX Sign (torch.sign gives 0 there)."""),
    *(_unary(name, _float_unary, f"{what}, element-wise; x float{domain}.")
      for name, what, domain in (
          ("tan", "tan(x), x in radians", " (nan at +-inf)"),
          ("atan", "arctan(x) in [-pi/2, pi/2]", ""),
          ("asin", "arcsin(x) in [-pi/2, pi/2]", " (nan outside [-1, 1])"),
          ("acos", "arccos(x) in [0, pi]", " (nan outside [-1, 1])"),
          ("sinh", "sinh(x)", " (+-inf where it overflows)"),
          ("cosh", "cosh(x)", " (inf where it overflows)"),
          ("asinh", "arsinh(x)", ""),
          ("acosh", "arcosh(x)", " (nan below 1)"),
          ("atanh", "artanh(x)", " (+-inf at +-1, nan outside [-1, 1])"))),
    _unary("isnan", _float_predicate, """\
True where x is nan, element-wise, as a bool tensor of x's shape; x float (ONNX IsNaN)."""),
    _unary("isinf", _float_predicate, """\
True where x is +inf (if detect_positive) or -inf (if detect_negative), element-wise, as a bool
tensor of x's shape; x float (ONNX IsInf; torch.isposinf / isneginf are one of the two).""",
           {"detect_positive": AttrSpec("bool", True),
            "detect_negative": AttrSpec("bool", True)}),
    OpDef("prelu", 1, ("x", "slope"), ("y",), {}, _prelu, doc="""\
x where x >= 0, else slope * x, element-wise; slope (one dtype with x, float) broadcasts to x's
shape (torch's PReLU: one slope per channel, shape (C, 1, 1) for NCHW, or a single one)."""),
    _binary_op("add", "+", "numeric"),
    _binary_op("sub", "-", "numeric"),
    _binary_op("mul", "*", "numeric"),
    _binary_op("div", "/", "float: integer division would change the dtype"),
    _binary_op("pow", "** (a to the power b)", "float: nan for a negative a and a fractional b"),
    OpDef("mod", 1, ("a", "b"), ("y",), {"fmod": AttrSpec("bool", False)}, _mod, doc="""\
Element-wise remainder of a / b with numpy broadcasting, one numeric dtype (the output's), as
ONNX Mod. fmod=True is C's fmod, the sign of a (torch.fmod); fmod=False the floor modulus,
the sign of b (Python's %, torch.remainder). An integer b of 0 is refused at run time
(DomainError; onnxruntime refuses it too); a float one gives nan, as IEEE."""),
    OpDef("int_div", 1, ("a", "b"), ("y",), {}, _int_binary, doc="""\
Element-wise a / b of integers truncated toward zero, with numpy broadcasting; one integer dtype
(the output's), as ONNX Div on integers and C (torch.div with rounding_mode='trunc'; torch's //
floors, which its exporters write as this and a correction). A b of 0, and the one quotient
that overflows (the dtype's minimum / -1), are refused at run time (DomainError)."""),
    *(OpDef(f"bitwise_{name}", 1, ("a", "b"), ("y",), {}, _int_binary, doc=f"""\
Element-wise bitwise {name} of a and b (a {symbol} b) with numpy broadcasting; one integer dtype,
signed or unsigned (the output's), as ONNX Bitwise{name.capitalize()} and torch's {symbol} on
integer tensors (two's complement for the signed ones).""") for name, symbol in (
        ("and", "&"), ("or", "|"), ("xor", "^"))),
    _unary("bitwise_not", _int_unary, """\
Element-wise bitwise complement ~x of an integer x (signed: -x - 1; unsigned: the maximum -
x), as ONNX BitwiseNot and torch's ~ on integer tensors."""),
    OpDef("bit_shift", 1, ("a", "b"), ("y",), {"direction": AttrSpec("enum:left|right")},
          _bit_shift, doc="""\
Element-wise a << b (direction='left') or a >> b ('right') with numpy broadcasting; a and b one
UNSIGNED integer dtype (the output's), as ONNX BitShift (a signed shift is not an op: torch's
arithmetic >> of a signed tensor is written by its exporter from this and a sign mask). Bits
shifted out are lost; a shift b >= the bit width of the dtype gives 0, as onnxruntime and
torch.bitwise_left_shift / bitwise_right_shift (C leaves it undefined)."""),
    OpDef("max", 1, ("a", "b"), ("y",), {}, _binary, doc="""\
Element-wise maximum of a and b with numpy broadcasting; one numeric dtype (nan wins, as
numpy.maximum, ONNX Max and torch.maximum)."""),
    OpDef("min", 1, ("a", "b"), ("y",), {}, _binary, doc="""\
Element-wise minimum of a and b with numpy broadcasting; one numeric dtype (nan wins)."""),
    *(OpDef(name, 1, ("a", "b"), ("y",), {}, _compare, doc=f"""\
Element-wise a {symbol} b with numpy broadcasting, as a bool tensor; a and b share one dtype
({'any' if name == 'equal' else 'numeric'}).""") for name, symbol in (
        ("equal", "=="), ("greater", ">"), ("greater_equal", ">="), ("less", "<"),
        ("less_equal", "<="))),
    OpDef("not", 1, ("x",), ("y",), {}, _not, doc="Element-wise logical not of a bool x."),
    OpDef("and", 1, ("a", "b"), ("y",), {}, _logical, doc="""\
Element-wise logical and of bool a and b, with numpy broadcasting."""),
    OpDef("or", 1, ("a", "b"), ("y",), {}, _logical, doc="""\
Element-wise logical or of bool a and b, with numpy broadcasting."""),
    OpDef("where", 1, ("cond", "a", "b"), ("y",), {}, _where, doc="""\
a where cond else b, element-wise, with numpy broadcasting of all three; cond bool, a and b one
dtype (the output's)."""),
    OpDef("matmul", 1, ("a", "b"), ("y",), {}, _matmul, doc="""\
numpy matmul: a (..., M, K) @ b (..., K, N) -> (broadcast(...), M, N); a 1-D a is (1, K) and a
1-D b is (K, 1), with that axis removed from the result. Same numeric dtype."""),
    OpDef("concat", 1, ("inputs*",), ("y",), {"axis": _AXIS}, _concat, doc="""\
Concatenate one or more tensors along axis; all share rank, dtype and every other dim."""),
    OpDef("reshape", 1, ("x",), ("y",), {"shape": AttrSpec("shape")}, _reshape, doc="""\
Reshape x (C order) to shape; one entry may be -1 (inferred); 0 is a literal empty dim. The
element count must not change."""),
    OpDef("flatten", 1, ("x",), ("y",), {
        "start_dim": AttrSpec("int", 1),
        "end_dim": AttrSpec("int", -1),
    }, _flatten, doc="""\
torch.flatten: merge axes start_dim..end_dim (inclusive, negative allowed) into one; a scalar
is treated as shape (1,)."""),
    OpDef("unflatten", 1, ("x", "like?"), ("y",), {
        "axis": AttrSpec("int", 0),
        "sizes": AttrSpec("ints", check=all_of(non_empty, each_at_least(-1), _no_zero)),
        "like_axes": AttrSpec("ints", None, check=each_at_least(-1), added=True),
    }, _unflatten, doc="""\
torch.unflatten: axis (negative allowed) split into sizes (C order; each >= 1, or one -1,
inferred); the inverse of flatten. A symbolic dim on axis can be split, which reshape's one
-1 cannot do next to another symbolic dim: (N, L, 48) to (N, L, 3, 16). With like (any
tensor; only its shape is read) and like_axes (one entry per size: an axis of like, or -1),
a size is like's dim on that axis, written -1 in sizes: (L*N, 16) to (L, N, 16), two
symbolic dims, from an x of shape (L, N, 16). At most one size is left to infer. The dim
must be the sizes' product (a multiple of it with a -1) when the call runs, else
ShapeError."""),
    OpDef("transpose", 1, ("x",), ("y",), {"perm": AttrSpec("ints")}, _transpose, doc="""\
Permute axes: output axis i is input axis perm[i]; perm is a permutation of range(rank)."""),
    OpDef("slice", 1, ("x", "like?"), ("y",), {
        "starts": AttrSpec("ints", check=non_empty),
        "ends": AttrSpec("ints"),
        "axes": AttrSpec("ints", None),
        "steps": AttrSpec("ints", None),
        "like_starts": AttrSpec("ints", None, check=each_at_least(-1), added=True),
        "like_ends": AttrSpec("ints", None, check=each_at_least(-1), added=True),
    }, _slice, doc="""\
ONNX Slice: for each (start, end, axis, step), x[..., start:end:step, ...] on that axis, with
negative starts/ends counted from the end and both clamped to the dim, as ONNX clamps them
(Python's slicing rule but for a negative step from a start before the dim's first position,
which starts at 0 where Python takes nothing).
axes defaults to 0..len(starts)-1, steps to 1; steps may be negative, never 0. With like (any
tensor; only its shape is read) and like_starts / like_ends (one entry per sliced axis: an
axis of like, or -1), a start or end is like's dim on that axis when the call runs, written 0
in starts / ends, on an axis sliced by 1, the other bound a start >= 0, an end to the end
(at least 2**62) or like's too: x[:, :h//2] under a symbolic h, like a tensor h//2 long;
x[:, h//4 : h - h//4], like two tensors of those lengths (or one of both). On a fixed axis
only the end comes from like: a table's first n rows, table[:n] (BERT's position ids, sliced
to a run-time sequence length). The length is named end - start, its value where the end
is at most the dim (Python's slicing clamps a larger one, and so do both backends)."""),
    OpDef("split", 1, ("x",), ("outputs*",), {
        "axis": _AXIS,
        "sizes": AttrSpec("ints", check=all_of(non_empty, each_at_least(0))),
    }, _split, doc="""\
Split x along axis into len(sizes) tensors of those sizes; sizes must sum to the dim."""),
    OpDef("pad", 1, ("x",), ("y",), {
        "pads": AttrSpec("pads"),
        "mode": AttrSpec("enum:constant|reflect|edge", "constant"),
        "value": AttrSpec("float", 0.0),
    }, _pad, doc="""\
Pad every axis by pads[i] = [before, after] (one pair per axis, natural order). constant fills
with value; reflect mirrors without repeating the edge (pads < dim, as torch); edge repeats the
edge (numpy's 'edge', torch's 'replicate')."""),
    OpDef("gather", 1, ("x", "indices"), ("y",), {"axis": AttrSpec("int", 0)}, _gather,
          values=_gather_values, doc="""\
ONNX Gather (numpy.take): y[..., j..., ...] = x[..., indices[j...], ...] along axis, y shape
x.shape[:axis] + indices.shape + x.shape[axis+1:]; x of rank >= 1 and any dtype. indices is an
int64 constant tensor of the graph (any rank, 0-d too), each in [0, dim) of a fixed dim
(negative ones are normalized by whoever builds the graph): the graph checks them when it is
built or loaded, so a kernel never reads out of bounds."""),
    OpDef("gather_elements", 1, ("x", "indices"), ("y",), {"axis": AttrSpec("int", 0)},
          _gather_elements, values=_element_index_values, doc="""\
torch.gather and ONNX GatherElements: y[i, j, ...] = x[i, ..., indices[i, j, ...], ...] with
the index replacing the position on axis; indices an int64 tensor of x's rank, a run-time value
too, each axis but axis at most x's (y has indices' shape). Every index must be in [0, dim),
checked at run time (IndexRangeError; constant indices into a fixed dim once, when the graph is
built or loaded; torch refuses a negative one too; ONNX counts it from the end, which the ONNX
import writes before the op). The dim on axis may be symbolic: the indices are then checked
against the size the call gives it."""),
    OpDef("scatter_elements", 1, ("x", "indices", "updates"), ("y",), {
        "axis": AttrSpec("int", 0),
        "reduction": AttrSpec("enum:none|add|mul|max|min", "none"),
    }, _scatter_elements, values=_element_index_values, doc="""\
torch.scatter / scatter_reduce and ONNX ScatterElements: y is x with, for every position p of
indices in row-major order, y[p with axis replaced by indices[p]] set to updates[p] (reduction
none: of two updates to one element the later one stays), or combined with what is there: add,
mul, max as (u < v ? v : u) and min as (v < u ? v : u) for the update u and the value v (so a
nan value gives way to a number and a nan update stays, as onnxruntime's kernel). indices int64
of x's rank, a run-time value too, each axis but axis at most x's; updates of the indices'
shape and x's dtype (numeric with a reduction). Every index must be in [0, dim), checked at run
time (IndexRangeError; constant indices into a fixed dim once, when the graph is built or
loaded), so nothing is written out of bounds. The dim on axis may be symbolic: the indices are
then checked against the size the call gives it."""),
    OpDef("expand", 1, ("x",), ("y",), {"shape": AttrSpec("ints", check=each_at_least(0))},
          _expand, doc=f"""\
ONNX Expand: x broadcast with shape, numpy's rule both ways (the result's rank is the larger
one; a dim of 1 on either side takes the other's), so a 1 in shape keeps x's dim. At most
{MAX_EXPANDED} elements (fixed dims; refused by the shape rule)."""),
    OpDef("tile", 1, ("x",), ("y",), {"repeats": AttrSpec("ints", check=each_at_least(0))},
          _tile, doc=f"""\
ONNX Tile (torch's repeat with one entry per axis): x repeated repeats[i] times along axis i;
one entry per axis of x; at most {MAX_EXPANDED} elements (fixed dims)."""),
    OpDef("cast", 1, ("x",), ("y",), {"dtype": AttrSpec("dtype")}, _cast, doc="""\
Convert x to dtype (numpy astype semantics: float to int truncates toward zero)."""),
    OpDef("bitcast", 1, ("x",), ("y",), {"dtype": AttrSpec("dtype")}, _bitcast, doc="""\
x's bits read as dtype, element by element (numpy's view, torch's Tensor.view(dtype), ONNX's
BitCast): x and dtype numeric and of one width (float32 and int32, float16 and uint16 ...)."""),
    OpDef("clip", 1, ("x",), ("y",), {
        "min": AttrSpec("float", None),
        "max": AttrSpec("float", None),
    }, _clip, doc="""\
Clamp x to [min, max]; either bound may be None (absent); min <= max when both are given."""),
    OpDef("softmax", 1, ("x",), ("y",), {"axis": AttrSpec("int", -1)}, _softmax, doc="""\
exp(x - max) / sum(exp(x - max)) along axis; x float."""),
    OpDef("log_softmax", 1, ("x",), ("y",), {"axis": AttrSpec("int", -1)}, _softmax, doc="""\
log(softmax(x)) along axis, computed as x - max - log(sum(exp(x - max))) (no overflow, no
log of 0 for finite x); x float."""),
    OpDef("mean", 1, ("x",), ("y",), {
        "axes": AttrSpec("ints", check=non_empty),
        "keepdim": AttrSpec("bool", False),
    }, _reduce, doc="""\
Mean over axes (non-empty, distinct; negative allowed); keepdim keeps them as size 1; nan
over an axis of size 0 (0 / 0, as numpy, torch and tinygrad)."""),
    *(OpDef(name, 1, ("x",), ("y",), {
        "axes": AttrSpec("ints", check=non_empty),
        "keepdim": AttrSpec("bool", False),
    }, _reduce, doc=f"""\
{what} over axes (non-empty, distinct; negative allowed); keepdim keeps them as size 1; x
numeric, the output of its dtype{extra}.""") for name, what, extra in (
        ("sum", "Sum", " (numpy's sum, kept in that dtype)"),
        ("prod", "Product", " (numpy's prod, kept in that dtype; 1 over an axis of size 0)"),
        ("amax", "Maximum", _EXTREME.format("lowest", "-")),
        ("amin", "Minimum", _EXTREME.format("highest", "")))),
    OpDef("argmax", 1, ("x",), ("y",), {
        "axis": AttrSpec("int", 0),
        "keepdim": AttrSpec("bool", False),
    }, _reduce, doc="""\
The index of the largest value along axis, int64 (the first one on ties, as numpy, torch and
ONNX with select_last_index=0; a nan counts as the largest, so the first nan wins, as in numpy
and torch); keepdim keeps the axis as size 1; x numeric; an axis of size 0 is refused."""),
    OpDef("argmin", 1, ("x",), ("y",), {
        "axis": AttrSpec("int", 0),
        "keepdim": AttrSpec("bool", False),
    }, _reduce, doc="""\
The index of the smallest value along axis, int64 (the first one on ties; a nan counts as
the smallest, the first nan wins); otherwise as argmax."""),
    OpDef("dynamic_quantize", 1, ("x",), ("y", "scale", "zero_point"), {}, _dynamic_quantize,
          doc="""\
uint8 quantization with its parameters taken from x itself (ONNX DynamicQuantizeLinear,
onnxruntime's CPU kernel, the step before each MatMulInteger of onnxruntime's quantize_dynamic),
every value float32: lo and hi are x's min and max widened to include 0, scale is (hi - lo) /
255 (1 where hi == lo), zero_point is round(clamp(0 - lo / scale, 0, 255)) (a nan there gives
255, as C++'s std::min/std::max), and y is clamp(round(x / scale) + zero_point, 0, 255) (a nan
quotient gives 0); rounding is half to even. y (x's shape) and zero_point hold the uint8 codes
as float32 integers; scale and zero_point have shape (). A nan anywhere in x gives scale nan,
zero_point 255 and y 0 (onnxruntime's vectorised min and max keep or drop a nan by its
position). x float32 and not empty (a dim of 0, fixed or bound when the call runs, is a
ShapeError: its min and max are undefined)."""),
    OpDef("quantize_linear", 1, ("x", "scale", "zero_point?"), ("y",),
          {"dtype": AttrSpec("enum:" + "|".join(CODE_RANGES))}, _quantize_linear, doc="""\
Linear quantization to the integer codes of dtype (ONNX QuantizeLinear, as onnxruntime's CPU
kernel computes it), every value float32: y = clamp(round(x / scale) + zero_point, lo, hi)
with [lo, hi] dtype's range (int8, uint8, int16, uint16), the quotient in float32, rounding
half to even, a nan quotient giving lo (a nan x; 0 / 0 or inf / inf where the scale is 0 or
inf), zero_point 0 where absent. y (x's shape) holds the codes as float32 integers (no -0.0).
scale and zero_point broadcast to x's shape without changing it (one value per tensor, or
e.g. (C, 1, 1) per channel of (N, C, H, W)); zero_point of the scale's shape, holding an
integer (added as it is)."""),
    OpDef("qlinear_sigmoid", 1, _QLINEAR_UNARY, ("y",), {}, _qlinear_unary, doc="""\
Quantized logistic (com.microsoft QLinearSigmoid, as onnxruntime's CPU kernel computes it; what
onnxruntime's graph optimizer makes of a QDQ model's DequantizeLinear, Sigmoid and
QuantizeLinear): each code through a table of the 256 codes, built as MLAS builds it: the code
dequantized in float32, x_scale * float32(code - x_zero_point), MLAS's logistic (its rational
approximation on [-18, 18] with fused multiply-adds, within about 1e-7 of the exact one:
abi.mlas.logistic), then quantized: the float32 quotient by y_scale clamped to y's codes less
y_zero_point (nan to the low end), rounded half to even, plus y_zero_point. x uint8 or int8
(any shape), each zero point of x's dtype; scales float32; every scale and zero point of shape
(). y: x's shape and dtype."""),
    OpDef("qlinear_leaky_relu", 1, _QLINEAR_UNARY, ("y",), {"alpha": AttrSpec("float", 0.01)},
          _qlinear_unary, doc="""\
Quantized leaky ReLU (com.microsoft QLinearLeakyRelu, as onnxruntime's CPU kernel computes
it): each code through a table of the 256 codes built as qlinear_sigmoid's, with v >= 0 ? v :
float32(alpha * v) in place of the logistic. Inputs, shapes and dtypes as qlinear_sigmoid's."""),
    OpDef("qlinear_mul", 1, _QLINEAR_BINARY, ("y",), {}, _qlinear_binary,
          doc="""\
Quantized product (com.microsoft QLinearMul, as onnxruntime's CPU kernel computes it): with
the float32 ratio (a_scale * b_scale) / y_scale computed in that order, y = clamp(round(
float32(float32(p * ratio) + y_zero_point)), lo, hi), p = (a - a_zero_point) * (b -
b_zero_point) exact, rounding half to even, [lo, hi] y's range. a and b uint8 or int8, one
dtype, broadcasting as numpy; every zero point of theirs, every scale float32, each of shape
(). y: the broadcast shape, a's dtype. Where |p * ratio| + |y_zero_point| can reach 2**31
onnxruntime's conversion to int32 gives the type's minimum instead: the onnxruntime backend
refuses such constant scales (and scales that come when the call runs), naming the node."""),
    OpDef("qlinear_add", 1, _QLINEAR_BINARY, ("y",), {}, _qlinear_binary,
          doc="""\
Quantized sum (com.microsoft QLinearAdd, as onnxruntime's CPU kernel computes it, with fused
multiply-adds): with the float32 r_a = a_scale / y_scale, r_b = b_scale / y_scale and fixed =
float32(y_zero_point) - fma(r_a, a_zero_point, float32(r_b * b_zero_point)), y = clamp(round(
fma(a, r_a, fma(b, r_b, fixed))), lo, hi) on the codes, each fma rounded once to float32,
rounding half to even, [lo, hi] y's range. Where onnxruntime's broadcasting loop reads a as one
value per span, a and b (with their scales and zero points) swap roles: looking at the dims both
have, from the end, at the first that is not 1 on both (else the first of them), a's dim there
is 1; with a 0-d input, the other's last dim (a 0-d a, or a b of 0 dims beside an a whose last
dim is 1). The shapes are the call's. a and b uint8 or int8, one dtype, broadcasting as numpy;
every zero point of theirs, every scale float32, each of shape (). y: the broadcast shape, a's
dtype. Where top * (|r_a| + |r_b|) + |fixed| (top 128 for int8, 255 for uint8) can reach 2**31,
onnxruntime's conversion gives the type's minimum instead: the onnxruntime backend refuses
such constant scales (and scales that come when the call runs), naming the node."""),
    OpDef("qlinear_softmax", 1, _QLINEAR_UNARY, ("y",), {
        "axis": AttrSpec("int", -1),
        "trailing": AttrSpec("bool", False),
    }, _qlinear_softmax, doc="""\
Quantized softmax (com.microsoft QLinearSoftmax, as onnxruntime's CPU kernel computes it) over
axis, or with trailing over every axis from axis on as one (ONNX Softmax before opset 13): with
D the count of values one softmax takes, a table T of 256 float32 values, T[i] =
exp((i - 255 + shift) * x_scale) computed in double, shift = max(0, logf(FLT_MAX / D) - 5) /
x_scale with the C library's float32 logf (abi.mlas.softmax_table); each code x looks up e =
T[255 - (m - x)], m the largest code of its softmax (x_zero_point cancels); s is the float32
sum of its e one by one in order (row-major); y = clamp(nearbyint(double(e) * R / double(s)) +
y_zero_point, lo, hi) with R = floor(1 / y_scale) (the quotient in float32), the product and
quotient in double, rounding half to even, [lo, hi] y's range. x uint8 or int8 and not empty,
each zero point of its dtype, scales float32, every scale and zero point of shape (). y: x's
shape and dtype."""),
    OpDef("qlinear_global_average_pool", 1, _QLINEAR_UNARY, ("y",), {
        "channels_last": AttrSpec("bool", False),
    }, _qlinear_global_average_pool, doc="""\
Quantized global average pool (com.microsoft QLinearGlobalAveragePool, as onnxruntime's CPU
kernel computes it) over every axis of x but N and C: x (N, C, *spatial), or with
channels_last (N, *spatial, C). With count the values each window holds and the float32
scale = x_scale / (y_scale * float32(count)) computed in that order, y = clamp(round(float32(
s) * scale) + y_zero_point, lo, hi), s = the window's sum of x less x_zero_point * count, in
int32 (wrapping as onnxruntime's accumulator wraps), rounding half to even, [lo, hi] y's range.
count must be 1 to 2**24 - 1 (ShapeError: onnxruntime refuses more, and an empty window has no
average) and scale in [2**-32, 256) (DomainError, when the call runs: onnxruntime refuses the
call), by the graph's sizes or the call's. x uint8 or int8, each zero point of its dtype,
scales float32, every scale and zero point of shape (). y: x's shape with the pooled dims 1,
x's dtype."""),
    OpDef("qlinear_average_pool", 1, _QLINEAR_UNARY, ("y",), {
        "kernel_size": AttrSpec("ints", check=_POSITIVE_INTS),
        "stride": AttrSpec("ints", check=_POSITIVE_INTS),
        "padding": AttrSpec("pads"),
        "ceil_mode": AttrSpec("bool", False),
        "count_include_pad": AttrSpec("bool", False),
        "channels_last": AttrSpec("bool", False),
    }, _qlinear_average_pool, doc="""\
Quantized average pool (com.microsoft QLinearAveragePool, as onnxruntime's CPU kernel computes
it) over 1, 2 or 3 spatial axes of x (N, C, *spatial), or with channels_last (N, *spatial,
C); windows, padding and output lengths as max_pool's (no dilation). Each code is dequantized
as x_scale * float32(x - x_zero_point) in float32 (MLAS's table), each window's values summed
in float32 one tap after another in row-major order of the kernel (a tap on the padding adds
0), then y = clamp(round(float32(float32(s / d) / y_scale) + y_zero_point), lo, hi), each step
in float32, rounding half to even, [lo, hi] y's range, d the window's divisor: the kernel's
size with count_include_pad, else its taps on the input. Where the window is the whole input
(the spatial dims equal kernel_size) and nothing pads it, by the graph's sizes or the call's,
y is qlinear_global_average_pool's instead, as onnxruntime's kernel switches to it (its
DomainError too). kernel_size must hold fewer than 2**24 taps. x uint8 or int8, each zero point
of its dtype, scales float32, every scale and zero point of shape (). y: x's shape with the
pooled lengths, x's dtype."""),
    OpDef("qlinear_concat", 1, ("inputs*",), ("y",), {"axis": _AXIS}, _qlinear_concat,
          doc="""\
Quantized concatenation (com.microsoft QLinearConcat, as onnxruntime's CPU kernel computes it):
inputs are y_scale, y_zero_point, then one or more (x, x_scale, x_zero_point); each x is
requantized to y's scale and zero point (as it is where both equal its own, else through a
table of the 256 codes built as MLAS builds it: dequantized in float32, x_scale *
float32(code - x_zero_point), then quantized as qlinear_sigmoid's), and the results are
concatenated along axis as concat's. Every x uint8 or int8, one dtype, every zero point of it,
every scale float32, each scale and zero point of shape (). y: concat's shape, the xs' dtype."""),
    OpDef("integer_linear", 1, ("x", "weight", "x_zero_point?", "weight_zero_point?"), ("y",),
          {}, _integer_linear, doc="""\
linear of 8-bit integers (ONNX MatMulInteger with the weight in linear's layout, the product of
onnxruntime's quantize_dynamic and quantize_static models): y[..., o] = sum over k of
(x[..., k] - x_zero_point) * (weight[o, k] - weight_zero_point[o]), the exact integer sum
wrapped to int32 as onnxruntime's int32 accumulation wraps (two's complement). x (...,
in_features) and weight (out_features, in_features) uint8 or int8, each zero point of its
tensor's dtype (absent: 0), x_zero_point of shape (), weight_zero_point of shape () or
(out_features,); y (..., out_features) int32."""),
    OpDef("cumsum", 1, ("x",), ("y",), {
        "axis": AttrSpec("int"),
        "exclusive": AttrSpec("bool", False),
        "reverse": AttrSpec("bool", False),
    }, _cumsum, doc="""\
Running sum along axis (ONNX CumSum, torch.cumsum), accumulated in x's dtype from the first
element on (integers wrap; float32 sums in float32, as onnxruntime; torch accumulates float32
in float64 on the CPU, which differs where a partial sum overflows); exclusive leaves each
element out of its own sum (the first is 0); reverse sums from the last element back; x
numeric of rank >= 1."""),
    OpDef("cumprod", 1, ("x",), ("y",), {
        "axis": AttrSpec("int"),
        "exclusive": AttrSpec("bool", False),
        "reverse": AttrSpec("bool", False),
    }, _cumsum, doc="""\
Running product along axis (ONNX CumProd), multiplied in x's dtype one element after the
other from the first on (integers wrap; float32 multiplies in float32, as onnxruntime: a
partial product that overflows to inf stays inf, and a 0 after it gives nan, where a later
factor would have brought it back; torch accumulates float32 in float64 on the CPU); exclusive
leaves each element out of its own product (the first is 1); reverse multiplies from the last
element back; x numeric of rank >= 1."""),
    OpDef("det", 1, ("x",), ("y",), {}, _det, doc="""\
Determinant of each matrix over the last two axes (ONNX Det, torch.linalg.det): x float of
shape (..., n, n), n >= 1 (a fixed dim or one symbol for both), y of shape (...). Computed by LU
with partial pivoting (onnxruntime's Eigen in float32, numpy's LAPACK in float64), so backends
agree within a float32 tolerance, not bit for bit. A matrix holding a nan or an infinity gives
nan on every backend (LU of infinities gives nan or either infinity by the pivots' order:
torch, numpy and onnxruntime disagree there)."""),
    OpDef("topk", 1, ("x",), ("values", "indices"), {
        "k": AttrSpec("int", check=_topk_k),
        "axis": AttrSpec("int", -1),
        "largest": AttrSpec("bool", True),
    }, _topk, doc="""\
The k largest (smallest without largest) values along axis and their int64 indices (ONNX
TopK, torch.topk), sorted: largest first (smallest first), equal values by lower index first,
nan above every number (as onnxruntime: first for largest, last for smallest; torch orders
equal nans by index only for largest); -0.0 and 0.0 are equal. x numeric of rank >= 1; k >= 1
and at most the axis' size (a run-time dim is checked when it is bound), or -1: every element
of the axis, a sort (torch.sort over a symbolic dim)."""),
    OpDef("resize", 1, ("x", "like?"), ("y",), {
        "size": AttrSpec("ints", check=all_of(non_empty, _resize_sizes)),
        "scales": AttrSpec("floats", None, check=_scales),
        "mode": AttrSpec("enum:nearest|linear|cubic", "nearest"),
        "coordinate_mode": AttrSpec("enum:half_pixel|pytorch_half_pixel|align_corners|"
                                    "asymmetric|half_pixel_symmetric|tf_half_pixel_for_nn",
                                    "half_pixel"),
        "nearest_mode": AttrSpec("enum:floor|ceil|round_prefer_floor|round_prefer_ceil",
                                 "round_prefer_floor"),
        "cubic_coeff_a": AttrSpec("float", -0.75, check=_FINITE, added=True),
        "exclude_outside": AttrSpec("bool", False, added=True),
        "antialias": AttrSpec("bool", False, added=True),
        "like_axes": AttrSpec("ints", None, check=each_at_least(-1), added=True),
    }, resize_shape, doc="""\
ONNX Resize (torch's interpolate / Upsample) of the 1, 2 or 3 spatial axes of x (N, C, L), (N, C,
H, W) or (N, C, D, H, W), float (or with mode nearest uint8 or int8, a quantized model's codes,
copied as they are), to size (one length per spatial axis, each >= 1, or -1 with
scales: floor(in * s) when the call runs, the only size a symbolic spatial axis takes with scales;
its dim is (in*k)//2**m for the float32 scale k / 2**m, and a symbolic axis takes only a scale
whose float32 floor(in * s), onnxruntime's, is that exact floor for every in below 65536); the
output is (N, C, *size). With like (any tensor; only its shape is read) and like_axes (one entry
per spatial axis: an axis of like, or -1), a size is like's dim on that axis, written -1 in size
(torch's interpolate(x, size=skip.shape[2:]) over a symbolic image), without scales or antialias; a
size of 0 that like gives is refused when the call runs (ShapeError; onnxruntime refuses it too).
Output position o on an axis maps to the input coordinate given by coordinate_mode with scale s:
half_pixel (o + 0.5) / s - 0.5; pytorch_half_pixel the same, 0 where the output length is 1;
half_pixel_symmetric the same plus in / 2 * (1 - out / (s * in)) (centred where out is not s * in);
tf_half_pixel_for_nn (o + 0.5) / s (TensorFlow's half-pixel centres, which tf2onnx writes);
align_corners o * (in - 1) / (out - 1), 0 where out is 1; asymmetric o / s. s is scales (float32,
one per spatial axis, > 0; then each size must be floor(in * s) or -1) or, without scales, out /
in. mode nearest takes the input element at that coordinate rounded by nearest_mode (floor, ceil,
round with halves down or up; a fraction within 1e-6 of a half is the half, as onnxruntime
rounds it), clamped into the input; linear interpolates between the two
neighbours along each axis (the coordinate clamped into [0, in - 1]; bilinear for 2 spatial axes,
trilinear for 3); cubic (x (N, C, H, W) only, as onnxruntime's bicubic) weighs the 4 elements
floor(c) - 1 .. floor(c) + 2 by Keys' cubic kernel with coefficient cubic_coeff_a (-0.75 as torch's
bicubic, -0.5 as Catmull-Rom), those outside the input taking the nearest edge element, or with
exclude_outside weighing 0 and the other weights divided by their sum (nearest and linear ignore
both); W is interpolated first, then H, each sum float32 from 0 tap by tap, as onnxruntime. Where
size equals every spatial dim, y is x in every mode, whatever the scales (onnxruntime copies x).
antialias (linear and cubic over 1 or 2 spatial axes, as onnxruntime's Resize and torch's
interpolate(..., antialias=True)): along each axis whose size changes, the filter (linear's
triangle, cubic's Keys kernel) is widened by 1 / s where s < 1, each output reads its window of
taps with onnxruntime's float32 weights (exclude_outside drops the taps past the edge, else they
add to the edge tap; normalised to sum 1), summed tap after tap, W first, then H; an axis whose
size is kept is copied, whatever its scale."""),
    OpDef("grid_sample", 1, ("x", "grid"), ("y",), {
        "mode": AttrSpec("enum:bilinear|nearest|cubic", "bilinear"),
        "padding_mode": AttrSpec("enum:zeros|border|reflection", "zeros"),
        "align_corners": AttrSpec("bool", False),
    }, grid_sample_shape, doc="""\
torch's grid_sample (ONNX GridSample) of x (N, C, H, W) at the positions in grid (N, Ho, Wo,
2), or of x (N, C, D, H, W) at grid (N, Do, Ho, Wo, 3), both float of one dtype; the output is
(N, C, Ho, Wo) or (N, C, Do, Ho, Wo). grid[..., 0] is the x (width), grid[..., 1] the y
(height) and grid[..., 2] the z (depth) coordinate, -1 and 1 the first and last pixel's centre
with align_corners, their outer edges without. A position outside the input takes zeros, the
nearest border pixel (border) or its mirror image at the edges (reflection, by pixel centres
with align_corners, by edges without). mode bilinear weighs the 4 neighbours (8 in a volume:
trilinear; one outside x counts as 0; one inside x with weight 0 still multiplies in, so an inf
there gives nan), nearest takes the pixel at the position rounded half to even. As torch: a
non-finite position (nan, +-inf, or one beyond float32 once scaled) gives nan in bilinear with
zeros, 0 in nearest with zeros, and otherwise the first pixel of the axis (+inf or a huge
positive the last, with border). mode cubic (torch's bicubic; (N, C, H, W) only) weighs the 4x4
taps from floor(position) - 1 by Keys' cubic convolution (a = -0.75) of their distance, in x's
dtype as onnxruntime: each row along x, then the rows along y; the padding applies to each tap
(zeros: a tap outside counts 0; border: clamped onto the edge; reflection: mirrored as above),
not to the position, and every tap multiplies in (an inf at weight 0 gives nan). As
onnxruntime, not torch (nan): a nan or infinite position, or one beyond 2**62 pixels once
scaled, samples as -1 there (the axis' first edge)."""),
    OpDef("max_pool", 1, ("x",), ("y",), _MAX_POOL, pool_shape, doc="""\
Max pooling over 1, 2 or 3 spatial axes of x (N, C, L), (N, C, H, W) or (N, C, D, H, W),
torch semantics (a window holding a nan gives nan); padding is one [before, after] pair per
spatial axis (implicit -inf), each less than kernel_size (as ONNX; torch takes at most half
of it). Output length floor((L + before + after - dilation*(k-1) - 1)/stride) + 1, or with
ceil_mode rounded up unless the last window would start in the trailing padding. A dilated
window whose taps all fall in the padding has no max and is refused (ShapeError; torch gives
-inf, onnxruntime the float's lowest value), by the graph's sizes or the call's. x float, or
uint8 or int8 (a quantized model's codes; the padding their type's lowest value); y x's dtype."""),
    OpDef("max_pool_with_indices", 1, ("x",), ("y", "indices"), _MAX_POOL,
          pool_indices_shape, doc="""\
max_pool's y, and where each maximum was taken (torch's return_indices): an int64 tensor of y's
shape holding the flat index h * W + w (1-D: l; 3-D: (d * H + h) * W + w) of that element
within its (n, c) plane of x, never a padded position. The first maximum in window order wins;
a window holding a nan gives nan and the index of its last nan, as torch's CPU kernel
(onnxruntime skips nans)."""),
    OpDef("avg_pool", 1, ("x",), ("y",), {
        "kernel_size": AttrSpec("ints", check=_POSITIVE_INTS),
        "stride": AttrSpec("ints", check=_POSITIVE_INTS),
        "padding": AttrSpec("pads"),
        "count_include_pad": AttrSpec("bool", True),
        "ceil_mode": AttrSpec("bool", False),
        "dilation": AttrSpec("ints", None, check=_POSITIVE_INTS, added=True),
    }, pool_shape, doc="""\
Average pooling over 1, 2 or 3 spatial axes, torch semantics; padding as max_pool (zeros,
counted in the divisor when count_include_pad). dilation (ONNX AveragePool's dilations; one
entry >= 1 per spatial axis, None for 1 on each) spaces the window's taps as max_pool's; the
divisor counts the taps on real elements, with count_include_pad those on the padding too, never
those past it that ceil_mode adds, and a window whose taps all miss the input gives 0 without
count_include_pad, as onnxruntime. Output length as max_pool."""),
)
