"""Constant folding: run a node whose inputs are all constants once, at import, with numpy.

Exporters emit shape arithmetic (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``),
transposed weights, ``Constant`` nodes and the like. Wherever every input of a node is known at
import time (an initializer, a Constant, an earlier folded value, or the static shape of a
tensor for ``Shape``) the node is evaluated here and its outputs become constants; nothing of it
reaches the artifact's graph. Only the ops in :data:`FOLDERS` fold; every result is capped in
size, and ops that allocate from a value (ConstantOfShape, Expand, Tile, Range) are checked
before they allocate.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from abi.ops import dims as dim_math

from ..errors import ModelFileError, UnsupportedModelError
from .reader import ONNX_DTYPES, element_type

__all__ = ["FOLDERS", "OverCap", "fold", "register", "onnx_slice", "int_vector", "one_value",
           "axis_in", "flatten_axis"]

Arrays = Sequence["np.ndarray | None"]
Folder = Callable[[Arrays, dict, int], list]


class OverCap(ModelFileError):
    """A value a fold would make has more elements than the cap the fold was given."""


def _need(n: int, cap: int, what: str) -> None:
    if n > cap:
        raise OverCap(f"{what} would have {n} elements, above the cap of {cap}")


def int_vector(value: Any, what: str, *, scalar_ok: bool = False) -> list[int]:
    """``value`` (a constant input or an attribute) as a list of ints; ModelFileError unless it
    is a 1-D integer tensor (or a single integer where ``scalar_ok``)."""
    a = np.asarray(value)
    if a.ndim == 0 and scalar_ok:
        a = a.reshape(1)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ModelFileError(f"{what} must be a 1-D integer tensor, got {a.dtype} of shape "
                             f"{a.shape}")
    return [int(v) for v in a]


def one_value(value: Any, what: str) -> np.ndarray:
    """``value`` as a 0-d array; ModelFileError unless it holds exactly one value."""
    a = np.asarray(value)
    if a.size != 1 or a.dtype.kind not in "biuf":
        raise ModelFileError(f"{what} must be one number, got {a.dtype} of shape {a.shape}")
    return a.reshape(())


def axis_in(axis: Any, rank: int, what: str = "axis") -> int:
    """ONNX ``axis`` (``-rank <= axis < rank``) as ``0..rank-1``; ModelFileError otherwise."""
    if type(axis) is not int and not isinstance(axis, np.integer):
        raise ModelFileError(f"{what} must be an integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ModelFileError(f"{what} {axis} is out of range for rank {rank}")
    return int(axis) % rank


def flatten_axis(axis: Any, rank: int) -> int:
    """ONNX Flatten's ``axis`` (``-rank <= axis <= rank``, a negative one counted back from
    ``rank``) as ``0..rank``; ModelFileError otherwise."""
    if type(axis) is not int and not isinstance(axis, np.integer):
        raise ModelFileError(f"axis must be an integer, got {axis!r}")
    if not -rank <= axis <= rank:
        raise ModelFileError(f"axis {axis} is out of range for Flatten of rank {rank}")
    return int(axis) + rank if axis < 0 else int(axis)


def _axes(value: Any, rank: int) -> list[int]:
    return [axis_in(a, rank, "axes") for a in int_vector(value, "axes", scalar_ok=True)]


def _unsqueeze(ins: Arrays, a: dict, cap: int) -> list:
    x, axes = ins[0], ins[1] if len(ins) > 1 and ins[1] is not None else a.get("axes")
    out_rank = x.ndim + len(int_vector(axes, "axes", scalar_ok=True))
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
    """ONNX Reshape's target with 0 ("copy this dim") resolved against ``in_shape``; ``shape``
    is a constant, or a list of entries already read (ints and run-time dims)."""
    target = list(shape) if isinstance(shape, list) else int_vector(shape, "shape")
    if not allowzero:
        target = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(target)]
    return target


def _reshape(ins: Arrays, a: dict, cap: int) -> list:
    x = ins[0]
    return [x.reshape(reshape_target(ins[1], x.shape, a.get("allowzero", 0)))]


#: past any dim: ONNX's INT64_MAX and INT64_MIN ("to the end") along a run-time dim are cut
#: to +-FAR, which the slice clamps to the dim when the call runs
FAR = 2 ** 62

#: tf2onnx's "to the end" (TensorFlow's shapes are int32): a bound at or past INT32_MAX
#: (INT32_MIN) along a run-time dim is taken as FAR (-FAR). Both clamp alike on every dim up to
#: INT32_MAX.
INT32_END = 2 ** 31 - 1


def _far(bound: int) -> int:
    """A Slice bound along a run-time dim: FAR from :data:`INT32_END` up, -FAR from INT32_MIN
    down, else as given."""
    return FAR if bound >= INT32_END else -FAR if bound <= -INT32_END - 1 else bound


def onnx_slice(shape: Sequence, starts, ends, axes, steps) -> list[tuple[int, int, int, int]]:
    """ONNX Slice's ``(axis, start, end, step)`` per sliced axis, clamped to the static dims so
    that Python slicing gives the same result (ONNX uses INT64_MAX/MIN for "to the end"). Along
    a run-time dim the start and end are kept as given (cut to +-FAR; one at or past
    INT32_MAX or INT32_MIN is +-FAR): ONNX counts a negative one from the end and clamps both as
    Python slicing does, when the dim is known."""
    rank = len(shape)
    starts, ends = int_vector(starts, "starts"), int_vector(ends, "ends")
    if axes is None and len(starts) > rank:
        raise ModelFileError(f"starts {starts} slice {len(starts)} axes of a rank-{rank} value "
                             f"(shape {list(shape)})")
    axes = list(range(len(starts))) if axes is None else [
        axis_in(x, rank, "axes") for x in int_vector(axes, "axes")]
    steps = [1] * len(starts) if steps is None else int_vector(steps, "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        raise ModelFileError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} must "
                             f"have one entry per sliced axis, each axis once")
    if 0 in steps:
        raise ModelFileError(f"steps {steps}: a step of 0")
    for e, st in zip(ends, steps):
        if st < 0 and e in (INT32_END, 2 ** 63 - 1):
            raise UnsupportedModelError(
                f"ends {ends} with steps {steps}: an end of {e} by a negative step runs to the "
                f"dim's first position in onnxruntime, the reference, but stops at its last "
                f"in ONNX's Slice; write {-2 ** 63} (INT64_MIN) to run to the first")
    out = []
    for ax, s, e, st in zip(axes, starts, ends, steps):
        d = shape[ax]
        if type(d) is not int:
            out.append((ax, _far(s), _far(e), st))
            continue
        taken = dim_math.slice_range(d, s, e, st)
        start, stop = taken.start, taken.stop
        if st < 0 and stop < 0:
            stop = -d - 1   # "before index 0", spelled so that Python slicing agrees
        out.append((ax, start, stop, st))
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
        sizes = int_vector(given, "split", scalar_ok=True)
        if any(v < 0 for v in sizes) or type(dim) is int and sum(sizes) != dim:
            raise ModelFileError(f"split sizes {sizes} must be >= 0 and add up to the dim {dim}")
        return sizes
    n = num_outputs or outputs
    if type(n) is not int or n < 1:
        raise ModelFileError(f"num_outputs {n!r} must be an integer >= 1")
    part = -(-dim // n)
    return [min(part, dim - i * part) for i in range(n)]


def _split(ins: Arrays, a: dict, cap: int) -> list:
    x = ins[0]
    axis = axis_in(a.get("axis", 0), x.ndim)
    sizes = split_sizes(x.shape[axis], ins[1] if len(ins) > 1 else None,
                        a.get("num_outputs"), a["_outputs"])
    return list(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _perm(perm: Any, rank: int) -> list[int] | None:
    if perm is not None and sorted(int_vector(perm, "perm")) != list(range(rank)):
        raise ModelFileError(f"perm {perm} is not a permutation of the {rank} axes")
    return perm


def _gather(ins: Arrays, a: dict, cap: int) -> list:
    data, indices = ins
    if indices.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {indices.dtype}")
    axis = axis_in(a.get("axis", 0), data.ndim)
    if indices.size and not (-data.shape[axis] <= indices.min() and
                             indices.max() < data.shape[axis]):
        raise ModelFileError(f"indices outside [-{data.shape[axis]}, {data.shape[axis]})")
    _need(math.prod(data.shape[:axis]) * indices.size * math.prod(data.shape[axis + 1:]), cap,
          "Gather")
    return [np.take(data, indices, axis=axis)]


def _concat(ins: Arrays, a: dict, cap: int) -> list:
    _need(sum(x.size for x in ins), cap, "Concat")
    return [np.concatenate(ins, axis=axis_in(a["axis"], ins[0].ndim))]


def _no_integer_zero(op: str, y: np.ndarray) -> None:
    if y.dtype.kind in "iu" and not y.all():
        raise ModelFileError(f"integer {op} by zero in constant inputs")


def _div(ins: Arrays, a: dict, cap: int) -> list:
    x, y = ins
    if x.dtype.kind in "iu":
        _no_integer_zero("division", y)
        return [(np.trunc(x / y)).astype(x.dtype)]  # ONNX integer Div truncates
    return [x / y]


def _mod(ins: Arrays, a: dict, cap: int) -> list:
    """ONNX Mod: fmod=1 is C's fmod (the dividend's sign), fmod=0 the floor modulus (the
    divisor's sign), which ONNX allows on floats from opset 28 (:data:`FLOAT_FLOOR_MOD`)."""
    x, y = ins
    if x.dtype != y.dtype:
        raise ModelFileError(f"Mod of {x.dtype} by {y.dtype}")
    if a.get("fmod", 0) not in (0, 1):
        raise ModelFileError(f"fmod={a.get('fmod', 0)!r} must be 0 or 1")
    if not a.get("fmod", 0) and x.dtype.kind == "f":
        floor_mod_of_floats(a["_opset"])
    _no_integer_zero("modulo", y)
    return [(np.fmod if a.get("fmod", 0) else np.mod)(x, y)]


def _constant_of_shape(ins: Arrays, a: dict, cap: int) -> list:
    shape = int_vector(ins[0], "shape")
    if any(d < 0 for d in shape):
        raise ModelFileError(f"shape {shape} has a negative dim")
    _need(math.prod(shape), cap, "ConstantOfShape")
    value = one_value(a.get("value", np.zeros(1, np.float32)), "value")
    return [np.full(shape, value, value.dtype)]


def _expand(ins: Arrays, a: dict, cap: int) -> list:
    x, shape = ins[0], int_vector(ins[1], "shape")
    out = np.broadcast_shapes(x.shape, tuple(shape))
    _need(math.prod(out), cap, "Expand")
    return [np.array(np.broadcast_to(x, out))]


def _tile(ins: Arrays, a: dict, cap: int) -> list:
    x, repeats = ins[0], int_vector(ins[1], "repeats")
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ModelFileError(f"repeats {repeats} must be {x.ndim} values >= 0, one per axis")
    _need(math.prod(d * r for d, r in zip(x.shape, repeats)), cap, "Tile")
    return [np.tile(x, repeats)]


def _range(ins: Arrays, a: dict, cap: int) -> list:
    start, limit, delta = (one_value(v, what) for v, what in zip(ins, ("start", "limit",
                                                                        "delta")))
    if delta == 0 or not all(np.isfinite(v) for v in (start, limit, delta)):
        raise ModelFileError(f"Range from {start} to {limit} by {delta}: the delta must not be 0 "
                             f"and all three must be finite")
    n = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    _need(n, cap, "Range")
    return [np.arange(start, limit, delta, dtype=start.dtype)]


def _cast(ins: Arrays, a: dict, cap: int) -> list:
    to = ONNX_DTYPES.get(a["to"])
    if to is None:
        raise UnsupportedModelError(f"Cast to ONNX element type {element_type(a['to'])} (not "
                                    f"an ABI dtype)")
    return [ins[0].astype(to)]


def _cast_like(ins: Arrays, a: dict, cap: int) -> list:
    return [ins[0].astype(ins[1].dtype)]


def _reduce_prod(ins: Arrays, a: dict, cap: int) -> list:
    """ReduceProd (torch's legacy exporter writes Shape -> ReduceProd for a count of elements):
    axes from the input or the attribute; none: every axis, or none with noop_with_empty_axes."""
    x = ins[0]
    axes = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("axes")
    if axes is None or not np.size(axes):
        if a.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.ndim))
    return [np.prod(x, axis=tuple(_axes(axes, x.ndim)), keepdims=bool(a.get("keepdims", 1)))
            .astype(x.dtype)]


def _extremum(f: Callable, ins: Arrays) -> np.ndarray:
    """ONNX's variadic Max / Min (torch's legacy exporter computes shapes with them, e.g. for
    torch.diagonal): numpy's, which keeps a nan as onnxruntime does, of one dtype."""
    if not ins or any(x is None for x in ins) or len({x.dtype for x in ins}) != 1:
        raise ModelFileError(f"{'Max' if f is np.maximum else 'Min'} needs one or more inputs "
                             f"of one dtype")
    out = ins[0]
    for x in ins[1:]:
        out = f(out, x)
    return np.asarray(out)


def _sum_mean(op: str, ins: Arrays) -> np.ndarray:
    """ONNX's variadic Sum / Mean: the inputs added in order, of one dtype; Mean then scaled by
    1/count in that dtype (onnxruntime's order and rounding)."""
    if not ins or any(x is None for x in ins) or len({x.dtype for x in ins}) != 1:
        raise ModelFileError(f"{op} needs one or more inputs of one dtype")
    out = ins[0]
    for x in ins[1:]:
        out = np.add(out, x)
    if op == "Mean" and len(ins) > 1:
        if out.dtype.kind != "f":
            raise ModelFileError(f"Mean of {out.dtype} inputs (needs float)")
        out = out * (out.dtype.type(1) / out.dtype.type(len(ins)))
    return np.asarray(out, ins[0].dtype)


def _binary(f: Callable) -> Folder:
    return lambda ins, a, cap: [np.asarray(f(ins[0], ins[1])).astype(
        np.result_type(ins[0], ins[1]) if f not in _COMPARISONS else bool)]


_COMPARISONS = (np.equal, np.less, np.greater, np.less_equal, np.greater_equal, np.logical_and,
                np.logical_or)


def _clip(ins: Arrays, a: dict, cap: int) -> list:
    """Clip as onnxruntime computes it: ``std::max(x, lo)`` then ``std::min(y, hi)``, each
    bound one value, a missing one the dtype's lowest or largest value (an infinite float
    becomes the largest finite one) (timm's "same" padding under the legacy exporter clips the
    pads it computes from a static shape at 0)."""
    x, bounds = ins[0], (list(ins[1:]) + [None, None])[:2]
    for name, bound in zip(("min", "max"), bounds):
        if bound is not None and bound.size != 1:
            raise ModelFileError(f"{name} must be one value, got shape {list(bound.shape)}")
    limits = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype) \
        if x.dtype.kind in "iu" else None
    if limits is not None:
        bounds = [np.asarray(limits.min if k == 0 else limits.max, x.dtype) if b is None else b
                  for k, b in enumerate(bounds)]
    lo, hi = (None if b is None else b.reshape(()) for b in bounds)
    y = x if lo is None else np.where(x < lo, lo, x)
    y = y if hi is None else np.where(hi < y, hi, y)
    return [np.asarray(y, x.dtype)]


def _unary(f: Callable) -> Folder:
    return lambda ins, a, cap: [np.asarray(f(ins[0])).astype(ins[0].dtype)]


FOLDERS: dict[str, Folder] = {
    "Identity": lambda ins, a, cap: [ins[0]],
    "Shape": lambda ins, a, cap: [np.array(ins[0].shape[a.get("start", 0):a.get("end")],
                                           np.int64)],  # Python's slice clamps as ONNX does
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Flatten": lambda ins, a, cap: [ins[0].reshape(
        math.prod(ins[0].shape[:flatten_axis(a.get("axis", 1), ins[0].ndim)]), -1)],
    "Transpose": lambda ins, a, cap: [np.transpose(ins[0], _perm(a.get("perm"), ins[0].ndim))],
    "Concat": _concat,
    "Gather": _gather,
    "Slice": _slice,
    "Split": _split,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _div,
    "Mod": _mod,
    "Pow": lambda ins, a, cap: [np.power(ins[0], ins[1]).astype(ins[0].dtype)],
    "Equal": _binary(np.equal),
    "Less": _binary(np.less),
    "Greater": _binary(np.greater),
    "LessOrEqual": _binary(np.less_equal),
    "GreaterOrEqual": _binary(np.greater_equal),
    "And": _binary(np.logical_and),
    "Or": _binary(np.logical_or),
    "Where": lambda ins, a, cap: [np.where(ins[0], ins[1], ins[2])],
    "Neg": _unary(np.negative),
    "Not": lambda ins, a, cap: [np.logical_not(ins[0])],
    "Sqrt": _unary(np.sqrt),
    "Reciprocal": _unary(np.reciprocal),
    "Abs": _unary(np.abs),
    # exact in any implementation (Round: halves to even, as ONNX): shape and index arithmetic
    # (the dynamo exporter's adaptive pooling windows) folds through them
    "Floor": _unary(np.floor),
    "Ceil": _unary(np.ceil),
    "Round": _unary(np.rint),
    "Sign": _unary(np.sign),
    "Relu": _unary(lambda x: np.maximum(x, 0)),
    "Sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))),
    "Tanh": _unary(np.tanh),
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Tile": _tile,
    "Range": _range,
    "ReduceProd": _reduce_prod,
    "Clip": _clip,
    "Max": lambda ins, a, cap: [_extremum(np.maximum, ins)],
    "Min": lambda ins, a, cap: [_extremum(np.minimum, ins)],
    "Sum": lambda ins, a, cap: [_sum_mean("Sum", ins)],
    "Mean": lambda ins, a, cap: [_sum_mean("Mean", ins)],
}


#: Input positions that may be empty ("") in a folded op.
_OPTIONAL = {"Slice": (3, 4), "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
             "ReduceProd": (1,), "Clip": (1, 2)}


#: Ops whose result has the broadcast shape of their inputs: capped before they run.
_BROADCASTING = {"Add", "Sub", "Mul", "Div", "Mod", "Pow", "Equal", "Less", "Greater",
                 "LessOrEqual", "GreaterOrEqual", "And", "Or", "Where", "Max", "Min", "Sum",
                 "Mean"}


#: Ops whose folder reads the model's opset (the attribute ``_opset``)
_BY_OPSET: set[str] = {"Mod"}

#: The first opset whose Mod takes floats with fmod=0 (the floor modulus)
FLOAT_FLOOR_MOD = 28


def floor_mod_of_floats(opset: int) -> None:
    """Refuse Mod's fmod=0 on floats in a model of an opset before :data:`FLOAT_FLOOR_MOD`,
    as ONNX and onnxruntime do."""
    if opset < FLOAT_FLOOR_MOD:
        raise ModelFileError(f"fmod=0 on floats (the floor modulus) needs opset "
                             f"{FLOAT_FLOOR_MOD} or later, the model's is {opset}; before it "
                             f"floats need fmod=1")


def register(op: str, folder: Folder, optional: tuple[int, ...] = (), *,
             broadcasting: bool = False, by_opset: bool = False) -> None:
    """Fold ``op`` with ``folder`` (a module of its own mappings registers here); ``optional``
    are the input positions that may be empty; ``broadcasting``: the result has the broadcast
    shape of the inputs, which is checked against the cap before the folder runs;
    ``by_opset``: the folder reads the model's opset as the attribute ``_opset``."""
    FOLDERS[op] = folder
    if optional:
        _OPTIONAL[op] = optional
    if broadcasting:
        _BROADCASTING.add(op)
    if by_opset:
        _BY_OPSET.add(op)


def fold(op: str, inputs: Arrays, attrs: dict, *, outputs: int, cap: int,
         opset: int = 0) -> list[np.ndarray]:
    """Evaluate ``op`` on constant ``inputs``; the caller names the node in errors. A folder
    finds the number of outputs as the attribute ``_outputs`` and, registered ``by_opset``,
    the model's opset (0 when not known) as ``_opset``."""
    missing = [i for i, x in enumerate(inputs) if x is None and i not in _OPTIONAL.get(op, ())]
    if missing:
        raise ModelFileError(f"input(s) {missing} are empty, but {op} requires them")
    try:
        if op in _BROADCASTING:  # (2**20, 1) + (1, 2**20) must not allocate 2**40 elements
            shape = np.broadcast_shapes(*(np.shape(x) for x in inputs if x is not None))
            _need(math.prod(shape), cap, f"{op}'s broadcast result")
        with np.errstate(all="ignore"):
            extra = {"_outputs": outputs, **({"_opset": opset} if op in _BY_OPSET else {})}
            results = FOLDERS[op](inputs, {**attrs, **extra}, cap)
    except (ModelFileError, UnsupportedModelError):
        raise
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError,
            OverflowError, MemoryError) as exc:
        raise ModelFileError(f"cannot evaluate on its constant inputs: {exc}") from None
    out = []
    for r in results:
        r = np.require(r, requirements="C")  # a 0-d result stays 0-d
        _need(r.size, cap, "a folded value")
        out.append(r)
    return out
