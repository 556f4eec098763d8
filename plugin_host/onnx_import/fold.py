"""Constant folding: run a node whose inputs are all constants once, at import, with numpy.

Exporters emit shape arithmetic (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``),
transposed weights, ``Constant`` nodes and the like. Wherever every input of a node is known at
import time (an initializer, a Constant, an earlier folded value, or the static shape of a
tensor for ``Shape``) the node is evaluated here and its outputs become constants; nothing of it
reaches the artifact's graph. Only the ops in :data:`FOLDERS` fold; every result is capped in
size, and ops that allocate from a value (ConstantOfShape, Expand, Range) are checked before
they allocate.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ModelFileError, UnsupportedModelError
from .reader import ONNX_DTYPES

__all__ = ["FOLDERS", "fold", "onnx_slice"]

Arrays = Sequence["np.ndarray | None"]
Folder = Callable[[Arrays, dict, int], list]


def _need(n: int, cap: int, what: str) -> None:
    if n > cap:
        raise ModelFileError(f"{what} would have {n} elements, above the cap of {cap}")


def _axes(value: Any, rank: int) -> list[int]:
    return [int(a) % rank for a in np.atleast_1d(value)] if rank else []


def _unsqueeze(ins: Arrays, a: dict, cap: int) -> list:
    x, axes = ins[0], ins[1] if len(ins) > 1 and ins[1] is not None else a.get("axes")
    out_rank = x.ndim + len(np.atleast_1d(axes))
    y = x
    for ax in sorted(_axes(axes, out_rank)):
        y = np.expand_dims(y, ax)
    return [y]


def _squeeze(ins: Arrays, a: dict, cap: int) -> list:
    x = ins[0]
    axes = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("axes")
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(_axes(axes, x.ndim)))]


def reshape_target(shape: Sequence[int], in_shape: Sequence[int], allowzero: int) -> list[int]:
    """ONNX Reshape's target with 0 ("copy this dim") resolved against ``in_shape``."""
    target = [int(d) for d in shape]
    if not allowzero:
        target = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(target)]
    return target


def _reshape(ins: Arrays, a: dict, cap: int) -> list:
    x = ins[0]
    return [x.reshape(reshape_target(ins[1], x.shape, a.get("allowzero", 0)))]


def onnx_slice(shape: Sequence[int], starts, ends, axes, steps) -> list[tuple[int, int, int, int]]:
    """ONNX Slice's ``(axis, start, end, step)`` per sliced axis, clamped to the static dims so
    that Python slicing gives the same result (ONNX uses INT64_MAX/MIN for "to the end")."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [int(x) % rank for x in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    out = []
    for ax, s, e, st in zip(axes, starts, ends, steps):
        d = shape[ax]
        s, e = int(s), int(e)
        start, stop, step = slice(s, e, st).indices(d)
        if st < 0 and stop < 0:
            stop = -d - 1   # Python's "before index 0", spelled so that Python slicing agrees
        out.append((ax, start, stop, step))
    return out


def _slice(ins: Arrays, a: dict, cap: int) -> list:
    x = ins[0]
    axes = ins[3] if len(ins) > 3 else None
    steps = ins[4] if len(ins) > 4 else None
    index = [slice(None)] * x.ndim
    for ax, s, e, st in onnx_slice(x.shape, ins[1], ins[2], axes, steps):
        index[ax] = slice(s, e, st)
    return [x[tuple(index)]]


def split_sizes(dim: int, given: Any, num_outputs: int | None, outputs: int) -> list[int]:
    """ONNX Split's sizes: the ``split`` input, else ``num_outputs`` (last part may be smaller)."""
    if given is not None:
        return [int(v) for v in np.atleast_1d(given)]
    n = num_outputs or outputs
    part = -(-dim // n)
    return [min(part, dim - i * part) for i in range(n)]


def _split(ins: Arrays, a: dict, cap: int) -> list:
    x = ins[0]
    axis = int(a.get("axis", 0)) % x.ndim
    sizes = split_sizes(x.shape[axis], ins[1] if len(ins) > 1 else None,
                        a.get("num_outputs"), a["_outputs"])
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _div(ins: Arrays, a: dict, cap: int) -> list:
    x, y = ins
    if x.dtype.kind in "iu":
        return [(np.trunc(x / y)).astype(x.dtype)]  # ONNX integer Div truncates
    return [x / y]


def _constant_of_shape(ins: Arrays, a: dict, cap: int) -> list:
    shape = [int(d) for d in ins[0]]
    _need(math.prod(shape), cap, "ConstantOfShape")
    value = a.get("value", np.zeros(1, np.float32))
    return [np.full(shape, value.reshape(-1)[0], value.dtype)]


def _expand(ins: Arrays, a: dict, cap: int) -> list:
    x, shape = ins[0], [int(d) for d in ins[1]]
    out = np.broadcast_shapes(x.shape, tuple(shape))
    _need(math.prod(out), cap, "Expand")
    return [np.array(np.broadcast_to(x, out))]


def _range(ins: Arrays, a: dict, cap: int) -> list:
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins)
    if delta == 0:
        raise ModelFileError("Range with delta 0")
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    _need(n, cap, "Range")
    return [np.arange(start, limit, delta, dtype=start.dtype)]


def _cast(ins: Arrays, a: dict, cap: int) -> list:
    to = ONNX_DTYPES.get(a["to"])
    if to is None:
        raise UnsupportedModelError(f"Cast to ONNX element type {a['to']} (not an ABI dtype)")
    return [ins[0].astype(to)]


def _cast_like(ins: Arrays, a: dict, cap: int) -> list:
    return [ins[0].astype(ins[1].dtype)]


def _binary(f: Callable) -> Folder:
    return lambda ins, a, cap: [np.asarray(f(ins[0], ins[1])).astype(
        np.result_type(ins[0], ins[1]) if f not in (np.equal, np.less, np.greater) else bool)]


def _unary(f: Callable) -> Folder:
    return lambda ins, a, cap: [np.asarray(f(ins[0])).astype(ins[0].dtype)]


FOLDERS: dict[str, Folder] = {
    "Identity": lambda ins, a, cap: [ins[0]],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Flatten": lambda ins, a, cap: [ins[0].reshape(
        math.prod(ins[0].shape[:int(a.get("axis", 1)) % (ins[0].ndim + 1)]), -1)],
    "Transpose": lambda ins, a, cap: [np.transpose(ins[0], a.get("perm"))],
    "Concat": lambda ins, a, cap: [np.concatenate(ins, axis=int(a["axis"]))],
    "Gather": lambda ins, a, cap: [np.take(ins[0], ins[1], axis=int(a.get("axis", 0)))],
    "Slice": _slice,
    "Split": _split,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _div,
    "Pow": lambda ins, a, cap: [np.power(ins[0], ins[1]).astype(ins[0].dtype)],
    "Equal": _binary(np.equal),
    "Less": _binary(np.less),
    "Greater": _binary(np.greater),
    "Where": lambda ins, a, cap: [np.where(ins[0], ins[1], ins[2])],
    "Neg": _unary(np.negative),
    "Sqrt": _unary(np.sqrt),
    "Reciprocal": _unary(np.reciprocal),
    "Abs": _unary(np.abs),
    "Relu": _unary(lambda x: np.maximum(x, 0)),
    "Sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "Tanh": _unary(np.tanh),
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Range": _range,
}


_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater",
                           "Where"})


def fold(op: str, inputs: Arrays, attrs: dict, *, outputs: int, cap: int) -> list[np.ndarray]:
    """Evaluate ``op`` on constant ``inputs``; the caller names the node in errors."""
    try:
        if op in _BROADCASTING:  # (2**20, 1) + (1, 2**20) must not allocate 2**40 elements
            shape = np.broadcast_shapes(*(np.shape(x) for x in inputs if x is not None))
            _need(math.prod(shape), cap, f"{op}'s broadcast result")
        with np.errstate(all="ignore"):
            results = FOLDERS[op](inputs, {**attrs, "_outputs": outputs}, cap)
    except (ModelFileError, UnsupportedModelError):
        raise
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError,
            OverflowError, MemoryError) as exc:
        raise ModelFileError(f"cannot evaluate on its constant inputs: {exc}") from None
    out = []
    for r in results:
        r = np.ascontiguousarray(r)
        _need(r.size, cap, "a folded value")
        out.append(r)
    return out
