"""ONNX ops that select by position, written as ``where`` over a mask: Trilu (torch's triu and
tril, and the causal mask of scaled_dot_product_attention under the legacy exporter) and
OneHot (one_hot). Registered in :data:`.ops.MAPPERS` on import; a Trilu of a constant folds.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from .fold import axis_in, one_value, triangle, trilu_k
from .ops import _only, _opt, maps


@maps("Trilu")
def _trilu(imp, node, attrs):
    """``where(mask, x, 0)`` with the constant triangle mask over the last two axes, which
    must be static; k a constant."""
    _only(imp, attrs, {"upper": ...})
    upper = attrs.get("upper", 1)
    if upper not in (0, 1):
        raise imp.unsupported(f"attribute upper={upper!r} must be 0 or 1")
    x = node.input[0]
    t = imp.type_of(x)
    if len(t.shape) < 2 or not all(type(d) is int for d in t.shape[-2:]):
        raise imp.unsupported(f"input shape {list(t.shape)}: needs rank >= 2 with the last two "
                              f"dims static")
    k = _opt(node, 1)
    k = 0 if k is None else trilu_k(imp.const(k, "k"))
    mask = imp.add_constant(triangle(tuple(t.shape[-2:]), k, bool(upper)),
                            f"{node.output[0]}.mask")
    zero = imp.add_constant(np.zeros((), dtypes.to_numpy(t.dtype)), f"{node.output[0]}.zero")
    imp.emit("where", [mask, imp.tensor(x), zero], [node.output[0]])


@maps("OneHot")
def _one_hot(imp, node, attrs):
    """Integer indices against a constant ``arange(depth)`` along the new axis: ``where(equal,
    on, off)``; a negative index counts from depth, one out of range gives all off (ONNX).
    depth and values must be constants."""
    _only(imp, attrs, {"axis": ...})
    indices, depth, values = node.input[:3]
    t = imp.type_of(indices)
    if t.dtype not in ("int32", "int64"):
        raise imp.unsupported(f"indices of dtype {t.dtype}: only int32 and int64 indices")
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
    [neg] = imp.emit("less", [imp.tensor(indices),
                              imp.add_constant(np.zeros((), index_dtype), f"{out}.zero")],
                     [None], suffix="/negative")
    [up] = imp.emit("add", [imp.tensor(indices),
                            imp.add_constant(np.array(d, index_dtype), f"{out}.depth")],
                    [None], suffix="/wrapped")
    [wrapped] = imp.emit("where", [neg, up, imp.tensor(indices)], [None], suffix="/index")
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
