"""ONNX's reductions and scans: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd,
ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, ArgMax, ArgMin, CumSum,
CumProd and TopK. Registered in :data:`.ops.MAPPERS` on import."""

from __future__ import annotations

import numpy as np

from abi import dtypes
from abi.ops import dims

from ..errors import ModelFileError
from . import symbolic
from .fold import FAR, axis_in, int_vector, one_value
from .ops import _flags, _only, _opt, _scalar, maps
from .run_time_sizes import has_dim, sizes_like


_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "amax", "ReduceMin": "amin",
           "ReduceProd": "prod"}


def _reduction(imp, node, attrs, *, noop: bool = False) -> tuple[str, dict | None]:
    """The input tensor and the ``axes``/``keepdim`` attributes of an ONNX Reduce*: axes from
    the input (newer opsets) or the attribute; none given: every axis, unless
    ``noop_with_empty_axes`` (tf2onnx writes it beside given axes, which it does not change).
    With none given and ``noop_with_empty_axes``, the input is the output, as onnxruntime
    gives it: None for the attributes where the caller takes that (``noop``), else refused."""
    _only(imp, attrs, {"axes": ..., "keepdims": ..., "noop_with_empty_axes": ...})
    x = node.input[0]
    axes = _opt(node, 1)
    axes = imp.const(axes, "axes") if axes else attrs.get("axes")
    if axes is None or not np.size(axes):
        if attrs.get("noop_with_empty_axes", 0) not in (0, 1):
            raise imp.unsupported(f"attribute noop_with_empty_axes="
                                  f"{attrs['noop_with_empty_axes']!r} must be 0 or 1")
        if attrs.get("noop_with_empty_axes", 0):
            if noop:
                return imp.tensor(x), None
            raise imp.unsupported("noop_with_empty_axes=1 with no axes (no reduction) is not "
                                  "supported")
        axes = list(range(len(imp.type_of(x).shape)))
    return imp.tensor(x), {"axes": int_vector(axes, "axes", scalar_ok=True),
                           "keepdim": bool(attrs.get("keepdims", 1))}


@maps(*_REDUCE)
def _reduce(imp, node, attrs):
    """``mean``, ``sum``, ``amax``, ``amin``, ``prod``; no axes with noop_with_empty_axes: x
    itself. ReduceMax and ReduceMin of bools (opset 20): of their uint8 0 and 1, cast back."""
    x, reduce = _reduction(imp, node, attrs, noop=True)
    if reduce is None:
        imp.alias(node.output[0], x)
        return
    op = _REDUCE[node.op_type]
    if op == "mean":
        _refuse_a_mean_of_nothing(imp, x, reduce)
    if op in ("amax", "amin") and imp.types[x].dtype == "bool":
        [x] = imp.emit("cast", [x], [None], {"dtype": "uint8"}, suffix="/uint8")
        [y] = imp.emit(op, [x], [None], reduce, suffix=f"/{op}")
        imp.emit("cast", [y], [node.output[0]], {"dtype": "bool"})
        return
    imp.emit(op, [x], [node.output[0]], reduce)


def _refuse_a_mean_of_nothing(imp, x: str, reduce: dict) -> None:
    """Refuse a mean over an axis of size 0 known at import whose output holds values: the
    ABI's mean gives nan there (0 / 0, as ONNX's reference implementation and torch), where
    onnxruntime, the build's reference, gives 0, so the build could only fail its comparison.
    Over a run-time dim that is 0 when the call runs, the mean is nan."""
    shape = imp.types[x].shape
    axes = {a % len(shape) for a in reduce["axes"] if -len(shape) <= a < len(shape)}
    empty = [a for a in sorted(axes) if shape[a] == 0]
    if empty and all(d != 0 for i, d in enumerate(shape) if i not in axes):
        raise imp.unsupported(f"a mean over axis {empty[0]} of size 0 (input shape "
                              f"{list(shape)}): the ABI's mean of nothing is nan, as ONNX's "
                              f"reference implementation and torch give it, where onnxruntime, "
                              f"the build's reference, gives 0")


#: ONNX reduction -> (the element-wise op before the sum, the one after it)
_AROUND_SUM = {"ReduceL1": ("abs", None), "ReduceL2": ("mul", "sqrt"),
               "ReduceSumSquare": ("mul", None), "ReduceLogSum": (None, "log")}


@maps(*_AROUND_SUM)
def _reduce_around_sum(imp, node, attrs):
    """sum(abs(x)), sqrt(sum(x * x)), sum(x * x) and log(sum(x)), as onnxruntime computes
    them (x * x is inf from about 1.8e19 in float32 there too; the log of a negative sum is
    nan)."""
    x, reduce = _reduction(imp, node, attrs)
    before, after = _AROUND_SUM[node.op_type]
    y = x
    if before is not None:
        [y] = imp.emit(before, [x] if before == "abs" else [x, x], [None], suffix=f"/{before}")
    if after is None:
        imp.emit("sum", [y], [node.output[0]], reduce)
        return
    [y] = imp.emit("sum", [y], [None], reduce, suffix="/sum")
    imp.emit(after, [y], [node.output[0]])


@maps("ReduceLogSumExp")
def _reduce_log_sum_exp(imp, node, attrs):
    """m + log(sum(exp(x - m))), m the max over the axes or 0 where that is infinite (as
    torch.logsumexp and onnxruntime: -inf when all are -inf, inf when one is inf)."""
    x, reduce = _reduction(imp, node, attrs)
    dtype = imp.types[x].dtype
    if not dtype.startswith("float"):
        raise imp.unsupported(f"input of dtype {dtype}: needs a float tensor")

    m = imp.step("amax", [x], "max", {**reduce, "keepdim": True})
    big = _scalar(imp, float(np.finfo(dtypes.to_numpy(dtype)).max), x, f"{imp.node_name}.max")
    infinite = imp.step("greater", [imp.step("abs", [m], "abs"), big], "infinite")
    m = imp.step("where", [infinite, _scalar(imp, 0.0, x, f"{imp.node_name}.zero"), m], "shift")
    s = imp.step("sum", [imp.step("exp", [imp.step("sub", [x, m], "sub")], "exp")], "sum", reduce)
    if not reduce["keepdim"]:  # m's reduced axes are of size 1: their max drops them
        m = imp.step("amax", [m], "squeeze", reduce)
    imp.emit("add", [imp.step("log", [s], "log"), m], [node.output[0]])


_ARG = {"ArgMax": "argmax", "ArgMin": "argmin"}


@maps(*_ARG)
def _arg(imp, node, attrs):
    """argmax/argmin; ``select_last_index=1`` (the last one on ties) is the first one of x
    reversed along the axis, counted back from the axis' last index: ``size - 1 - i``. An
    axis whose size is known only when the call runs is reversed to its far end (ONNX's
    clamp), and its size counted when the call runs: the ``sum`` along it of ones
    (``not(x < x)``, true for every value, nan included)."""
    _only(imp, attrs, {"axis": ..., "keepdims": ..., "select_last_index": ...})
    last = _flags(imp, attrs, {"select_last_index": 0})["select_last_index"]
    x, out = node.input[0], node.output[0]
    axis = attrs.get("axis", 0)
    reduce = {"axis": axis, "keepdim": bool(attrs.get("keepdims", 1))}
    if not last:
        imp.emit(_ARG[node.op_type], [imp.tensor(x)], [out], reduce)
        return
    shape = imp.type_of(x).shape
    size = shape[axis_in(axis, len(shape))]
    fixed = isinstance(size, int)
    [flipped] = imp.emit("slice", [imp.tensor(x)], [None],
                         {"starts": [-1], "ends": [-size - 1 if fixed else -FAR],
                          "axes": [axis], "steps": [-1]}, suffix="/reverse")
    [index] = imp.emit(_ARG[node.op_type], [flipped], [None], reduce, suffix="/reversed")
    if fixed:
        last_index = imp.add_constant(np.asarray(size - 1, np.int64), f"{imp.node_name}.last")
        imp.emit("sub", [last_index, index], [out])
        return
    x_t = imp.tensor(x)
    [ones] = imp.emit("less", [x_t, x_t], [None], suffix="/never")
    [ones] = imp.emit("not", [ones], [None], suffix="/every")
    [ones] = imp.emit("cast", [ones], [None], {"dtype": "int64"}, suffix="/ones")
    [count] = imp.emit("sum", [ones], [None], {"axes": [axis], "keepdim": reduce["keepdim"]},
                       suffix="/size")
    [back] = imp.emit("sub", [count, index], [None], suffix="/from_end")
    imp.emit("sub", [back, imp.add_constant(np.asarray(1, np.int64), f"{imp.node_name}.one")],
             [out])


_RUNNING = {"CumSum": "cumsum", "CumProd": "cumprod"}


@maps(*_RUNNING)
def _running(imp, node, attrs):
    """torch.cumsum, and CumProd (opset 26) alike; the axis input must be a constant."""
    _only(imp, attrs, {"exclusive": ..., "reverse": ...})
    flags = _flags(imp, attrs, {"exclusive": 0, "reverse": 0})
    x = node.input[0]
    axis = one_value(imp.const(node.input[1], "axis"), "axis").item()
    axis_in(axis, len(imp.type_of(x).shape))
    imp.emit(_RUNNING[node.op_type], [imp.tensor(x)], [node.output[0]],
             {"axis": axis, **flags})


@maps("TopK")
def _topk(imp, node, attrs):
    """torch.topk: values and int64 indices; k a constant, the axis' run-time size or at most
    that (:func:`_first_of_the_sorted`). sorted=0 leaves the order
    open in ONNX: the sorted one is taken where the order cannot reach a graph output as it is
    (onnxruntime's differs, so the build's comparison refuses a model whose outputs depend on
    that order further down)."""
    _only(imp, attrs, {"axis": ..., "largest": ..., "sorted": ...})
    flags = _flags(imp, attrs, {"largest": 1, "sorted": 1})
    direct = [o for o in node.output if o in imp.graph_outputs]
    if not flags["sorted"] and direct:
        raise imp.unsupported(f"sorted=0 with {direct} graph output(s): the order of an "
                              f"unsorted result is onnxruntime's own (only the sorted one is "
                              f"computed)")
    x = node.input[0]
    axis = attrs.get("axis", -1)
    size = imp.type_of(x).shape[axis_in(axis, len(imp.type_of(x).shape))]
    given = imp.sym.get(node.input[1])
    if given is not None and given.size == 1 and dims.known_equal(
            symbolic.entries(given.reshape(-1))[0], size):
        # k is the axis' run-time size (torch.sort over it): the whole axis
        imp.emit("topk", [imp.tensor(x)], [o or None for o in node.output],
                 {"k": -1, "axis": axis, "largest": flags["largest"]})
        return
    if given is not None and given.size == 1 and _first_of_the_sorted(imp, node, axis, size,
                                                                      flags["largest"]):
        return
    k = one_value(imp.const(node.input[1], "k"), "k").item()
    if type(k) is not int or k < 0:
        raise ModelFileError(f"k must be an integer >= 0, got {k!r}")
    if k == 0:
        raise imp.unsupported("k=0 (an empty result) is not supported")
    imp.emit("topk", [imp.tensor(x)], [o or None for o in node.output],
             {"k": k, "axis": axis, "largest": flags["largest"]})


def _first_of_the_sorted(imp, node, axis: int, size, largest: int) -> bool:
    """TopK whose k is a run-time dim that a mask carries and that is at most the axis' size
    at every size (``x.topk(x.shape[1] // 2, 1)``, ``x.topk(min(300, x.shape[1]), 1)``): the
    whole axis sorted (``topk`` with k
    -1, onnxruntime's order, ties by index) and each output's first k entries along the axis
    (a ``slice`` whose end is read from the mask when the call runs). False where k is none
    such, for the refusal that names it."""
    k = symbolic.entries(imp.sym[node.input[1]].reshape(-1))[0]
    if type(k) is int or not has_dim(imp, k) or symbolic.maybe_negative(dims.sub(size, k)):
        return False
    rank = len(imp.type_of(node.input[0]).shape)
    whole = imp.emit("topk", [imp.tensor(node.input[0])], [None] * len(node.output),
                     {"k": -1, "axis": axis, "largest": largest}, suffix=".sorted")
    like, [at] = sizes_like(imp, [k])
    for out, sorted_out in zip(node.output, whole):
        if out:
            imp.emit("slice", [sorted_out, like], [out],
                     {"starts": [0], "ends": [0], "axes": [axis_in(axis, rank)],
                      "like_ends": [at]}, suffix=f".first.{out}")
    return True
