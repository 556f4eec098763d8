"""ONNX ops that select by position, written as ``where`` over a mask: Trilu (torch's triu and
tril, and the causal mask of scaled_dot_product_attention under the legacy exporter) and
OneHot (one_hot); and EyeLike (torch.diagonal and torch.eye-like masks from both exporters),
whose output depends only on its input's shape: a constant, or over run-time dims a mask
computed when the call runs. Registered in
:data:`.ops.MAPPERS` on import; a Trilu or EyeLike of a constant folds (:func:`.fold.register`).
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from ..errors import ModelFileError
from .fold import axis_in, one_value
from .fold import register as register_fold
from .ops import _only, _opt, maps
from .reader import ONNX_DTYPES
from .run_time_sizes import run_time_arange


def triangle(shape: tuple, k: int, upper: bool) -> np.ndarray:
    """The bool mask of the entries Trilu keeps in a (rows, cols) matrix: on and above
    diagonal ``k`` if ``upper``, else on and below it (k clamped, which changes nothing)."""
    rows, cols = shape
    k = min(max(k, -rows - 1), cols + 1)
    ones = np.ones((rows, cols), dtype=bool)
    return np.triu(ones, k) if upper else np.tril(ones, k)


def trilu_k(value, what: str = "k") -> int:
    """Trilu's diagonal offset: one integer (ModelFileError otherwise)."""
    k = one_value(value, what)
    if k.dtype.kind not in "iu":
        raise ModelFileError(f"{what} must be an integer, got {k.dtype}")
    return int(k)


def _fold_trilu(ins, a: dict, cap: int) -> list:
    """Trilu: np.triu / np.tril over the last two axes (torch's triu, tril; the causal mask)."""
    x = ins[0]
    if x.ndim < 2 or a.get("upper", 1) not in (0, 1):
        raise ModelFileError(f"Trilu of a rank-{x.ndim} value with upper={a.get('upper', 1)!r} "
                             f"(needs rank >= 2 and upper 0 or 1)")
    k = 0 if len(ins) < 2 or ins[1] is None else trilu_k(ins[1])
    return [np.where(triangle(x.shape[-2:], k, bool(a.get("upper", 1))), x,
                     np.zeros((), x.dtype))]


register_fold("Trilu", _fold_trilu, optional=(1,))


@maps("Trilu")
def _trilu(imp, node, attrs):
    """``where(mask, x, 0)`` with the triangle mask over the last two axes. Over fixed dims
    and a constant k the mask is a constant; over run-time ones (the causal mask of a model
    exported with a dynamic sequence length), or with k computed at run time (a decoder's
    mask over its cached steps and the new ones, ``tril(p)`` for p cached), it compares each
    column's position less its row's with k, positions from
    :func:`.run_time_sizes.run_time_arange`."""
    _only(imp, attrs, {"upper": ...})
    upper = attrs.get("upper", 1)
    if upper not in (0, 1):
        raise imp.unsupported(f"attribute upper={upper!r} must be 0 or 1")
    x = node.input[0]
    t = imp.type_of(x)
    if len(t.shape) < 2:
        raise imp.unsupported(f"input shape {list(t.shape)}: needs rank >= 2")
    k = _opt(node, 1)
    late = k is not None and not imp.is_const(k)  # computed when the call runs
    if late:
        kt = imp.type_of(k)
        if kt.dtype != "int64" or kt.shape not in ((), (1,)):
            raise imp.unsupported(f"k {k!r} of {kt.dtype} {list(kt.shape)}: a run-time k must "
                                  f"be one int64")
        [k_value] = imp.emit("reshape", [imp.tensor(k)], [None], {"shape": []}, suffix="/k")
    else:
        k = 0 if k is None else trilu_k(imp.const(k, "k"))
        k_value = imp.add_constant(np.array(k, np.int64), f"{node.output[0]}.k")
    zero = imp.add_constant(np.zeros((), dtypes.to_numpy(t.dtype)), f"{node.output[0]}.zero")
    square = list(t.shape[-2:])
    if all(type(d) is int for d in square) and not late:
        mask = imp.add_constant(triangle(tuple(square), k, bool(upper)),
                                f"{node.output[0]}.mask")
    else:
        y = imp.tensor(x)
        sources = {d: (y, a) for a, d in enumerate(t.shape) if type(d) is not int}
        rows = run_time_arange(imp, [square[0], 1], 0, sources)
        cols = run_time_arange(imp, [1, square[1]], 1, sources)
        [diagonal] = imp.emit("sub", [cols, rows], [None], suffix="/diagonal")
        [mask] = imp.emit("greater_equal" if upper else "less_equal", [diagonal, k_value],
                          [None], suffix="/mask")
    imp.emit("where", [mask, imp.tensor(x), zero], [node.output[0]])


@maps("OneHot")
def _one_hot(imp, node, attrs):
    """Integer indices against a constant ``arange(depth)`` along the new axis: ``where(equal,
    on, off)``; a negative index counts from depth, one out of range gives all off (ONNX).
    Float32 indices are cast to int64 first, truncated toward zero, as onnxruntime casts them.
    depth and values must be constants."""
    _only(imp, attrs, {"axis": ...})
    indices, depth, values = node.input[:3]
    t = imp.type_of(indices)
    index = imp.tensor(indices)
    if t.dtype == "float32":
        [index] = imp.emit("cast", [index], [None], {"dtype": "int64"}, suffix="/int64")
        t = imp.types[index]
    elif t.dtype not in ("int32", "int64"):
        raise imp.unsupported(f"indices of dtype {t.dtype}: only int32, int64 and float32 "
                              f"indices")
    d = one_value(imp.const(depth, "depth"), "depth")
    if d.dtype.kind == "f" and (not np.isfinite(d) or d != np.round(d)):
        raise imp.unsupported(f"depth {d} must be a whole number")
    d = int(d)
    if not 1 <= d <= imp.limits.max_tensor_elements:
        raise imp.unsupported(f"depth {d} must be in [1, {imp.limits.max_tensor_elements}]")
    pair = imp.const(values, "values")
    if pair.shape != (2,):
        raise imp.unsupported(f"values of shape {list(pair.shape)}: must be [off, on]")
    rank = len(t.shape) + 1
    axis = axis_in(attrs.get("axis", -1), rank, "axis")
    shape = list(t.shape)
    imp.check_size("its OneHot output", shape[:axis] + [d] + shape[axis:])
    index_dtype = dtypes.to_numpy(t.dtype)
    out = node.output[0]
    [neg] = imp.emit("less", [index, imp.add_constant(np.zeros((), index_dtype),
                                                      f"{out}.zero")],
                     [None], suffix="/negative")
    [up] = imp.emit("add", [index, imp.add_constant(np.array(d, index_dtype), f"{out}.depth")],
                    [None], suffix="/wrapped")
    [wrapped] = imp.emit("where", [neg, up, index], [None], suffix="/index")
    target = shape[:axis] + [1] + shape[axis:]
    if sum(type(n) is not int for n in target) > 1:
        raise imp.unsupported(f"indices of shape {shape} have more than one run-time dim")
    [expanded] = imp.emit("reshape", [wrapped], [None], {
        "shape": [n if type(n) is int else -1 for n in target]}, suffix="/unsqueeze")
    positions = np.arange(d, dtype=index_dtype).reshape([d] + [1] * (rank - 1 - axis))
    [hit] = imp.emit("equal", [expanded, imp.add_constant(positions, f"{out}.arange")],
                     [None], suffix="/equal")
    off, on = (imp.add_constant(np.array(v, dtype=pair.dtype), f"{out}.{what}")
               for v, what in zip(pair, ("off", "on")))
    imp.emit("where", [hit, on, off], [out])


def _eye_attrs(shape: tuple, attrs: dict, like: np.dtype) -> tuple[int, np.dtype]:
    """EyeLike's diagonal ``k`` and output dtype (an ONNX element type; absent: the input's
    ``like``), its input 2-D."""
    if len(shape) != 2:
        raise ModelFileError(f"EyeLike needs a 2-D input, got shape {list(shape)}")
    k = attrs.get("k", 0)
    if type(k) is not int:
        raise ModelFileError(f"attribute k={k!r} must be an integer")
    code = attrs.get("dtype")
    if code is None:
        return k, like
    if code in ONNX_DTYPES:
        return k, dtypes.to_numpy(ONNX_DTYPES[code])
    raise ModelFileError(f"attribute dtype={code!r} is not an ABI dtype")


def _eye(shape: tuple, attrs: dict, like: np.dtype) -> np.ndarray:
    """EyeLike's value: ones on diagonal ``k`` of a 2-D static ``shape``."""
    k, dtype = _eye_attrs(shape, attrs, like)
    return np.eye(*shape, k=max(min(k, shape[1]), -shape[0]), dtype=dtype)


register_fold("EyeLike", lambda ins, a, cap: [_eye(ins[0].shape, a, ins[0].dtype)])


@maps("EyeLike")
def _eye_like(imp, node, attrs):
    """A constant: ones on diagonal k of the input's static 2-D shape. Over run-time dims
    (torch.diagonal of a run-time square, which both exporters write as a product with an
    EyeLike and a sum): where each column's position less its row's is k, positions from
    :func:`.run_time_sizes.run_time_arange` read from the input, cast to the dtype."""
    _only(imp, attrs, {"dtype": ..., "k": ...})
    x = node.input[0]
    t = imp.type_of(x)
    like = dtypes.to_numpy(t.dtype)
    if all(type(d) is int for d in t.shape):
        shape = imp.static_shape(x)
        imp.check_size("its output", shape)
        imp.set_const(node.output[0], _eye(shape, attrs, like))
        return
    k, dtype = _eye_attrs(t.shape, attrs, like)
    y = imp.tensor(x)
    sources = {d: (y, a) for a, d in enumerate(t.shape) if type(d) is not int}
    rows = run_time_arange(imp, [t.shape[0], 1], 0, sources)
    cols = run_time_arange(imp, [1, t.shape[1]], 1, sources)
    [diagonal] = imp.emit("sub", [cols, rows], [None], suffix="/diagonal")
    [mask] = imp.emit("equal", [diagonal, imp.add_constant(np.array(k, np.int64),
                                                            f"{node.output[0]}.k")],
                      [None], suffix="/mask")
    imp.emit("cast", [mask], [node.output[0]], {"dtype": dtypes.from_numpy(dtype)})
