"""ONNX's scatter ops: ScatterND (torch's legacy exporter writes it for an assignment into part
of a tensor, ``y[:, 0] = x``), ScatterElements (the dynamo exporter's form of the same, and
torch.scatter / scatter_add / scatter_reduce), the old Scatter, and MaxUnpool. Registered in
:data:`.ops.MAPPERS` and, for constant inputs, :func:`.fold.register` on import.

Constant indices say, for every element of the updates, which element of the output it goes
to. That is worked out here, once (every index checked, negative ones counted from the end):
the data and the updates are flattened (``reshape``) and the updates scattered at those
constant flat positions (``scatter_elements`` on axis 0, which applies them in the updates'
order, as onnxruntime's kernel, and checks the constant positions again at load), then the
result takes the data's shape. With a reduction (``add``, ``mul``, ``max``, ``min``) the
updates combine in that order; max and min are onnxruntime's ``std::max(update, value)`` and
``std::min(update, value)``: a nan already there gives way to the update, a nan update stays,
and of two equal values (0 and -0) the update is kept. Without one, an element written twice is
refused (ONNX leaves which update wins undefined). Of constant data and updates the result
folds (:func:`combine`, round by round, within the tensor cap).

Indices computed at run time become the ABI's ``scatter_elements`` (:func:`_runtime_scatter`),
which checks each index when it arrives and applies the updates in the indices' order, as
onnxruntime does; so do constant indices into data with run-time dims (ScatterND:
:func:`_scatter_nd` of :func:`_fixed_indices`; ScatterElements:
:func:`_elements_into_run_time_data`), a negative one along a run-time dim counted from the end
of the size the call gives. MaxUnpool is one into zeros of the output's size
(:func:`_max_unpool`).
"""

from __future__ import annotations

import math

import numpy as np

from abi import dtypes
from abi.ops import dims as dim_math

from ..errors import ModelFileError
from .fold import _need, axis_in
from .fold import register as register_fold
from .gather import (_int64_indices, checked_index, counted_from_the_end, runtime_positions,
                     spread_indices)
from .ops import _few, _only, _opt, maps
from .run_time_sizes import run_time_mask
from .shapes import _unflatten_sizes

_REDUCTIONS = ("add", "mul", "max", "min")


def combine(reduction: str, value: np.ndarray, update: np.ndarray) -> np.ndarray:
    """One round of ``reduction`` in numpy, as onnxruntime's kernel and the emitted ops."""
    if reduction == "add":
        return value + update
    if reduction == "mul":
        return value * update
    if reduction == "max":  # std::max(update, value): value only where update < value
        return np.where(update < value, value, update)
    return np.where(value < update, value, update)  # std::min(update, value)


def _indices(value: np.ndarray, dims, what: str) -> np.ndarray:
    """Integer ``value`` checked against ``dims`` (broadcast along its last axis for ScatterND,
    one dim for ScatterElements), negative ones counted from the end, as int64."""
    if value.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {value.dtype}")
    idx = value.astype(np.int64)
    dims = np.asarray(dims, dtype=np.int64)
    bad = (idx < -dims) | (idx >= dims)
    if bad.any():
        raise ModelFileError(f"indices {_few(idx[bad].tolist())} are outside {what}")
    return np.where(idx < 0, idx + dims, idx)


def nd_targets(indices: np.ndarray, shape: tuple[int, ...], updates: tuple[int, ...]
               ) -> np.ndarray:
    """ScatterND: the flat output position of every update element, in the updates' order.
    ``indices`` (..., k) address the first k dims of ``shape``; the updates must be of shape
    ``indices.shape[:-1] + shape[k:]``."""
    if indices.ndim < 1 or not 1 <= indices.shape[-1] <= len(shape):
        raise ModelFileError(f"indices of shape {list(indices.shape)}: the last dim must be "
                             f"between 1 and the data's rank {len(shape)}")
    k = indices.shape[-1]
    expected = tuple(indices.shape[:-1]) + tuple(shape[k:])
    if tuple(updates) != expected:
        raise ModelFileError(f"updates of shape {list(updates)} must be of shape "
                             f"{list(expected)} (the indices' {list(indices.shape[:-1])} and "
                             f"the data's dims after the first {k})")
    idx = _indices(indices, shape[:k], f"the data's dims {list(shape[:k])}")
    positions = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    return positions[tuple(np.moveaxis(idx, -1, 0))].reshape(-1)


def element_targets(indices: np.ndarray, axis: int, shape: tuple[int, ...],
                    updates: tuple[int, ...]) -> np.ndarray:
    """ScatterElements: the flat output position of every update element (of the indices'
    shape, each dim at most the data's but along ``axis``), in the updates' order."""
    if tuple(updates) != tuple(indices.shape) or indices.ndim != len(shape):
        raise ModelFileError(f"indices of shape {list(indices.shape)} and updates of shape "
                             f"{list(updates)} must be of one shape, of the data's rank "
                             f"{len(shape)}")
    over = [d for d in range(len(shape)) if d != axis and indices.shape[d] > shape[d]]
    if over:
        raise ModelFileError(f"indices of shape {list(indices.shape)} exceed the data's shape "
                             f"{list(shape)} on axis {over[0]}")
    idx = _indices(indices, shape[axis], f"[-{shape[axis]}, {shape[axis]}) (axis {axis} of "
                                         f"shape {list(shape)})")
    grid = list(np.indices(indices.shape, dtype=np.int64, sparse=True))
    grid[axis] = idx
    return np.ravel_multi_index(np.broadcast_arrays(*grid), shape).reshape(-1)


def rounds(targets: np.ndarray, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(source, mask)]``, one per round: in round k, for every output element written more
    than k times, ``source`` holds the flat position in the updates of its (k+1)-th update
    (in the updates' order) and ``mask`` is True."""
    if not targets.size:
        return []
    order = np.argsort(targets, kind="stable")
    t = targets[order]
    starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    rank = np.arange(t.size) - np.repeat(starts, np.diff(np.r_[starts, t.size]))
    out = []
    for k in range(int(rank.max()) + 1):
        pick = rank == k
        source = np.zeros(size, dtype=np.int64)
        mask = np.zeros(size, dtype=bool)
        source[t[pick]] = order[pick]
        mask[t[pick]] = True
        out.append((source, mask))
    return out


def _reduction(attrs: dict, op: str) -> str:
    value = attrs.get("reduction", b"none")
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value != "none" and value not in _REDUCTIONS:
        raise ModelFileError(f"{op}: reduction {value!r} is not one of none, add, mul, max, min")
    return value


def _twice(targets: np.ndarray, shape: tuple[int, ...]) -> str:
    values, counts = np.unique(targets, return_counts=True)
    return _written_twice([np.unravel_index(int(v), shape) for v in values[counts > 1][:3]])


def _written_twice(elements) -> str:
    """The message for output ``elements`` (coordinates) written more than once."""
    where = ", ".join(str([int(i) for i in e]) for e in elements)
    return (f"the indices write output element(s) {where} more than once with reduction "
            f"'none', where ONNX leaves the result undefined")


def _targets(op: str, data_shape, idx: np.ndarray, updates_shape, attrs: dict) -> np.ndarray:
    if op == "ScatterND":
        return nd_targets(idx, tuple(data_shape), tuple(updates_shape))
    axis = axis_in(attrs.get("axis", 0), len(data_shape), "axis")
    return element_targets(idx, axis, tuple(data_shape), tuple(updates_shape))


def _fold(op: str):
    def fold(ins, a: dict, cap: int) -> list:
        data, idx, updates = ins
        if data.dtype != updates.dtype:
            raise ModelFileError(f"{op}: updates of dtype {updates.dtype} into data of "
                                 f"{data.dtype}")
        reduction = _reduction(a, op)
        targets = _targets(op, data.shape, idx, updates.shape, a)
        per_round = rounds(targets, data.size)
        if reduction == "none" and len(per_round) > 1:
            raise ModelFileError(_twice(targets, data.shape))
        _need(len(per_round) * data.size, cap, f"{op}'s rounds")
        out, values = data.reshape(-1), updates.reshape(-1)
        for source, mask in per_round:
            update = values[source]
            if reduction != "none":
                update = combine(reduction, out, update)
            out = np.where(mask, update, out)
        return [out.reshape(data.shape)]
    return fold


for _op in ("ScatterND", "ScatterElements", "Scatter"):
    register_fold(_op, _fold("ScatterND" if _op == "ScatterND" else "ScatterElements"))


@maps("ScatterND", "ScatterElements", "Scatter")
def _scatter(imp, node, attrs):
    """See the module docstring: ``scatter_elements`` at the constant flat positions of the
    updates, or at run-time indices (:func:`_runtime_scatter`)."""
    op = "ScatterND" if node.op_type == "ScatterND" else "ScatterElements"
    _only(imp, attrs, {"reduction": ...} if op == "ScatterND" else
          {"reduction": ..., "axis": ...})
    if len(node.input) < 3 or not all(node.input[:3]):
        raise imp.unsupported(f"inputs {list(node.input)!r:.80}: needs data, indices and "
                              f"updates")
    data, idx, updates = node.input[:3]
    reduction = _reduction(attrs, node.op_type)
    if imp.type_of(data).dtype != imp.type_of(updates).dtype:
        raise ModelFileError(f"updates of dtype {imp.type_of(updates).dtype} into data of "
                             f"{imp.type_of(data).dtype}")
    if not imp.is_const(idx):
        _runtime_scatter(imp, node, op, attrs, reduction)
        return
    if not all(type(d) is int for d in imp.type_of(data).shape):
        if op == "ScatterND":
            _scatter_nd(imp, node, reduction, _fixed_indices(imp, node, reduction))
        else:
            _elements_into_run_time_data(imp, node, reduction, axis_in(
                attrs.get("axis", 0), len(imp.type_of(data).shape), "axis"))
        return
    shape = imp.static_shape(data)
    updates_shape = imp.static_shape(updates)
    imp.check_size("its output", shape)
    targets = _targets(op, shape, imp.const(idx, "indices"), updates_shape, attrs)
    if reduction == "none" and np.unique(targets).size < targets.size:
        raise imp.unsupported(_twice(targets, shape))
    out = node.output[0]
    if not targets.size:  # nothing written
        imp.emit("identity", [imp.tensor(data)], [out])
        return
    [flat] = imp.emit("reshape", [imp.tensor(data)], [None], {"shape": [-1]}, suffix="/flat")
    [values] = imp.emit("reshape", [imp.tensor(updates)], [None], {"shape": [-1]},
                        suffix="/updates")
    [y] = imp.emit("scatter_elements", [flat, imp.add_constant(targets, f"{out}.positions"),
                                        values], [None], {"axis": 0, "reduction": reduction},
                   suffix="/scatter")
    imp.emit("reshape", [y], [out], {"shape": list(shape)})


def _runtime_scatter(imp, node, op: str, attrs: dict, reduction: str) -> None:
    """Indices computed at run time: ``scatter_elements``, which checks each index against
    [0, dim) when it arrives (a run-time dim against the size the call gives it), a negative
    index counted from the end first as ONNX counts it (:func:`.gather.spread_indices`), and
    applies the updates in the
    indices' order, as onnxruntime does (so of two updates to one element without a reduction
    the later one stays). ScatterND: :func:`_scatter_nd`."""
    data, idx, updates = node.input[:3]
    if op == "ScatterND":
        _scatter_nd(imp, node, reduction, _int64_indices(imp, idx))
        return
    shape = list(imp.type_of(data).shape)
    target = imp.tensor(data)
    axis = axis_in(attrs.get("axis", 0), len(shape), "axis")
    # along a run-time dim too: checked against the call's size
    imp.emit("scatter_elements", [target, spread_indices(imp, idx, target, axis),
                                  imp.tensor(updates)], [node.output[0]],
             {"axis": axis, "reduction": reduction})


def _fixed_indices(imp, node, reduction: str) -> str:
    """ScatterND's constant indices into data with run-time dims, as an int64 graph tensor:
    checked here against the data's fixed dims, a negative one counted from the end; along a
    run-time dim a negative one is counted from the end of the size the call gives it (the
    dim added in the graph: the legacy exporter's ``y[:, -1] = v`` under a run-time length),
    and the result checked when the call runs, as any index there. Without a reduction, two
    indices that name one element are refused, as with fixed data (a negative and a
    non-negative one along a run-time dim meet only at one size; there the later update
    stays, as in onnxruntime)."""
    data, idx = node.input[:2]
    value = imp.const(idx, "indices")
    shape = list(imp.type_of(data).shape)
    if value.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {value.dtype}")
    if value.ndim < 1 or not 1 <= value.shape[-1] <= len(shape):
        raise ModelFileError(f"indices of shape {list(value.shape)}: the last dim must be "
                             f"between 1 and the data's rank {len(shape)}")
    value = value.astype(np.int64)
    lead = shape[:value.shape[-1]]
    fixed = [a for a, d in enumerate(lead) if type(d) is int]
    if fixed:
        value[..., fixed] = _indices(value[..., fixed], [lead[a] for a in fixed],
                                     f"the data's dims {lead}")
    _refuse_twice(imp, value.reshape(-1, value.shape[-1]), reduction)
    index = imp.add_constant(value, imp.origin.get(idx, idx))
    for a, d in enumerate(lead):
        if type(d) is not int:
            column = np.zeros_like(value)
            column[..., a] = value[..., a]
            index = counted_from_the_end(imp, imp.tensor(data), a, index, column)
    return index


def _refuse_twice(imp, rows: np.ndarray, reduction: str) -> None:
    """Without a reduction, constant ``rows`` (one element's coordinates each) that name one
    element twice are refused, as ONNX leaves which update wins undefined."""
    unique, counts = np.unique(rows, axis=0, return_counts=True)
    if reduction == "none" and (counts > 1).any():
        raise imp.unsupported(_written_twice(unique[counts > 1][:3]))


def _elements_into_run_time_data(imp, node, reduction: str, axis: int) -> None:
    """ScatterElements of constant indices into data with run-time dims (the dynamo
    exporter's ``y[:, -1] = v`` under a run-time length, a fixed batch): the indices checked
    here along a fixed axis (a negative one counted from the end), counted from the end of
    the call's size along a run-time one, and ``scatter_elements`` checks them when the call
    runs, as their shape against the data's. Without a reduction, an element named twice is
    refused."""
    data, idx, updates = node.input[:3]
    value = imp.const(idx, "indices")
    shape = list(imp.type_of(data).shape)
    if value.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {value.dtype}")
    got = list(imp.type_of(updates).shape)
    if len(got) != value.ndim or not all(map(dim_math.known_equal, got, value.shape)) or \
            value.ndim != len(shape):
        raise ModelFileError(f"indices of shape {list(value.shape)} and updates of shape "
                             f"{got} must be of one shape, of the data's rank {len(shape)}")
    value = value.astype(np.int64)
    dim = shape[axis]
    if type(dim) is int:
        value = _indices(value, dim, f"[-{dim}, {dim}) (axis {axis} of shape {shape})")
    grid = np.stack(np.broadcast_arrays(*np.indices(value.shape, sparse=True)), axis=-1)
    grid[..., axis] = value
    _refuse_twice(imp, grid.reshape(-1, value.ndim), reduction)
    target = imp.tensor(data)
    index = imp.add_constant(value, imp.origin.get(idx, idx))
    if type(dim) is not int:
        index = counted_from_the_end(imp, target, axis, index, value)
    imp.emit("scatter_elements", [target, index, imp.tensor(updates)], [node.output[0]],
             {"axis": axis, "reduction": reduction})


def _scatter_nd(imp, node, reduction: str, index: str) -> None:
    """ScatterND of int64 indices ``index`` (the graph tensor of ONNX's ``(..., k)``
    indices, computed at run time or constant) into data that may have run-time dims (a
    sinusoidal position table written by slice assignment over a run-time length,
    ``pe[:, 0::2] = sin(...)``): ``scatter_elements`` along axis 0, which checks each index
    when it arrives. Indices of one coordinate each (``y[i] = v``, max_unpool's flat
    positions) are laid along axis 0 and expanded over the data's other dims (run-time ones
    by ``where(mask, index, index)``: :func:`.run_time_sizes.run_time_mask`); of k coordinates
    (``y[i, j] = v``), the data's first k axes are flattened into one and each index becomes
    its position there (:func:`.gather.runtime_positions`, which checks every coordinate on
    its own), and the result is unflattened back."""
    data, idx, updates = node.input[:3]
    shape = list(imp.type_of(data).shape)
    where = list(imp.types[index].shape)
    if not where or where[-1] == 0:
        raise imp.unsupported(f"indices {idx!r} of shape {where}: ScatterND needs indices "
                              f"with one or more coordinates in their last dim")
    coordinates = where[-1]
    if type(coordinates) is not int or coordinates > len(shape):
        raise ModelFileError(f"indices of {coordinates} coordinates into {data!r} of rank "
                             f"{len(shape)}")
    where, lead, rest = where[:-1], shape[:coordinates], shape[coordinates:]
    expected, got = where + rest, list(imp.type_of(updates).shape)
    if len(got) != len(expected) or not all(map(dim_math.known_equal, got, expected)):
        raise ModelFileError(f"updates of shape {got} must be of shape {expected} (the "
                             f"indices' {where} and the data's dims after the first "
                             f"{coordinates})")
    out, flat = node.output[0], coordinates > 1
    if flat:  # the first axes merged into one, each index's position on it
        target, index = runtime_positions(imp, data, idx, index)
    else:
        target = imp.tensor(data)
    count = dim_math.product(where)
    [index] = imp.emit("reshape", [index], [None],
                       {"shape": [count if type(count) is int else -1] + [1] * len(rest)},
                       suffix="/along")
    if any(type(d) is int and d != 1 for d in rest):
        [index] = imp.emit("expand", [index], [None],
                           {"shape": [1] + [d if type(d) is int else 1 for d in rest]},
                           suffix="/expand")
    if any(type(d) is not int for d in rest):  # over the data's run-time dims too
        sources = {d: (target, 1 + a) for a, d in enumerate(rest) if type(d) is not int}
        mask = run_time_mask(imp, [1] + rest, sources)
        [index] = imp.emit("where", [mask, index, index], [None], suffix="/over")
    values = imp.tensor(updates)
    if len(where) > 1:
        [values] = imp.emit("flatten", [values], [None],
                            {"start_dim": 0, "end_dim": len(where) - 1}, suffix="/updates")
    elif not where:
        [values] = (imp.emit("unflatten", [values], [None], {"axis": 0, "sizes": [1, -1]},
                             suffix="/updates") if rest else
                    imp.emit("reshape", [values], [None], {"shape": [1]}, suffix="/updates"))
    [y] = imp.emit("scatter_elements", [target, index, values], [None if flat else out],
                   {"axis": 0, "reduction": reduction}, suffix="/scatter" if flat else "")
    if flat:  # back to the data's shape
        like, attrs = _unflatten_sizes(imp, 0, lead)
        imp.emit("unflatten", [y] + ([like] if like else []), [out], attrs)


def _unpool_shape(imp, node, attrs: dict, shape: list[int]) -> list[int]:
    """MaxUnpool's output shape: its ``output_shape`` input (a constant) when given, else
    ``(in - 1) * stride - pad_begin - pad_end + kernel`` on each spatial axis."""
    spatial = len(shape) - 2
    if len(node.input) > 2 and node.input[2]:
        given = imp.const(node.input[2], "output_shape")
        if given.dtype.kind not in "iu" or given.shape != (len(shape),) or (given < 1).any():
            raise ModelFileError(f"output_shape {_few(given.ravel().tolist())} must be "
                                 f"{len(shape)} integers >= 1 (one per dim of the input)")
        return [int(d) for d in given]
    kernel = attrs.get("kernel_shape")
    strides = attrs.get("strides", [1] * spatial)
    pads = attrs.get("pads", [0] * 2 * spatial)
    for name, value, size, least in (("kernel_shape", kernel, spatial, 1),
                                     ("strides", strides, spatial, 1),
                                     ("pads", pads, 2 * spatial, 0)):
        if not isinstance(value, list) or len(value) != size or not all(
                type(v) is int and v >= least for v in value):
            raise ModelFileError(f"attribute {name}={value!r} must be {size} integers >= "
                                 f"{least} for input shape {shape}")
    out = [(d - 1) * s - pads[a] - pads[a + spatial] + k
           for a, (d, s, k) in enumerate(zip(shape[2:], strides, kernel))]
    if min(out) < 1:
        raise ModelFileError(f"the output's spatial dims {out} (from input shape {shape}, "
                             f"kernel_shape {kernel}, strides {strides}, pads {pads}) must be "
                             f">= 1")
    return shape[:2] + out


@maps("MaxUnpool")
def _max_unpool(imp, node, attrs):
    """torch's max_unpool1d/2d/3d (the inverse of MaxPool with Indices): zeros of the output's
    size with X written at the flat positions I, a ``scatter_elements`` on the flattened
    output, its run-time indices checked against the output's size when they arrive. Static
    shapes."""
    _only(imp, attrs, {"kernel_shape": ..., "strides": ..., "pads": ...})
    x, idx = node.input[:2]
    shape = list(imp.static_shape(x))
    if len(shape) < 3:
        raise imp.unsupported(f"input shape {shape}: needs (N, C, spatial...)")
    if list(imp.static_shape(idx)) != shape:
        raise ModelFileError(f"indices of shape {list(imp.static_shape(idx))} must be of the "
                             f"input's shape {shape}")
    out_shape = _unpool_shape(imp, node, attrs, shape)
    imp.check_size("its output", out_shape)
    total, out, dtype = math.prod(out_shape), node.output[0], imp.type_of(x).dtype
    zero = imp.add_constant(np.zeros((), dtypes.to_numpy(dtype)), f"{out}.zero")
    [base] = imp.emit("expand", [zero], [None], {"shape": [total]}, suffix="/zeros")
    [index] = imp.emit("reshape", [_int64_indices(imp, idx)], [None], {"shape": [-1]},
                       suffix="/indices")
    [values] = imp.emit("reshape", [imp.tensor(x)], [None], {"shape": [-1]}, suffix="/values")
    [y] = imp.emit("scatter_elements", [base, index, values], [None], {"axis": 0},
                   suffix="/scatter")
    imp.emit("reshape", [y], [out], {"shape": out_shape})


@maps("TensorScatter")
def _tensor_scatter(imp, node, attrs):
    """Opset 24's key-value cache update: ``past_cache`` with ``update`` written along the
    sequence ``axis`` (default -2, never the batch's 0) from each batch entry's
    ``write_indices[b]`` on (0 without the input), modulo the cache's length in ``circular``
    mode: a ``scatter_elements`` along the axis at those positions, expanded to the update's
    shape. Run-time write indices are checked when they arrive, as onnxruntime refuses them:
    in ``linear`` mode each must be in [0, cache length - update length] (a
    ``gather_elements`` from the constant ``arange`` of that range, which gives it back), in
    ``circular`` mode at least 0 (a ``gather_elements`` from ``[0]`` at ``min(index, 0)``).
    The two sequence lengths must be static."""
    _only(imp, attrs, {"axis": ..., "mode": ...})
    past, update = node.input[:2]
    write = _opt(node, 2)
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ModelFileError(f"attribute mode={mode!r} must be 'linear' or 'circular'")
    shape, along = list(imp.type_of(past).shape), list(imp.type_of(update).shape)
    if imp.type_of(past).dtype != imp.type_of(update).dtype or len(shape) != len(along) or \
            len(shape) < 2:
        raise ModelFileError(f"update {update!r} ({imp.type_of(update).dtype} {along}) must be "
                             f"of past_cache {past!r}'s dtype and rank "
                             f"({imp.type_of(past).dtype} {shape}), at least 2")
    axis = axis_in(attrs.get("axis", -2), len(shape), "axis")
    if axis == 0:
        raise ModelFileError("attribute axis is 0, the batch's: the sequence axis is another")
    for a, (d, u) in enumerate(zip(shape, along)):
        if a != axis and d != u:
            raise ModelFileError(f"update {update!r} of shape {along} differs from past_cache "
                                 f"{past!r} of shape {shape} on axis {a}, where only axis "
                                 f"{axis} (the sequence) may")
    length, steps = shape[axis], along[axis]
    if type(length) is not int or type(steps) is not int:
        raise imp.unsupported(f"sequence axis {axis} of run-time length (cache {length!r}, "
                              f"update {steps!r}): the write positions need static lengths")
    if steps > length:
        raise ModelFileError(f"update {update!r} of {steps} steps along axis {axis} exceeds "
                             f"the cache's {length}")

    rank = len(shape)
    positions = imp.index_constant(np.arange(steps).reshape([steps if a == axis else 1
                                                             for a in range(rank)]), "steps")
    if write is not None:
        if list(imp.type_of(write).shape) != [shape[0]]:
            raise ModelFileError(f"write_indices {write!r} of shape "
                                 f"{list(imp.type_of(write).shape)} must be of shape "
                                 f"[{shape[0]!r}] (one per batch entry)")
        start = _int64_indices(imp, write)
        if mode == "linear":  # [0, length - steps]: the update fits from it
            start = checked_index(imp, start, length - steps + 1, "starts", "write_check")
        else:  # at least 0: min(start, 0) must index [0]
            below = imp.step("min", [start, imp.index_constant(0, "zero")], "below_zero")
            check = imp.step("gather_elements", [imp.index_constant([0], "none"), below],
                             "write_check", {"axis": 0})
            start = imp.step("add", [start, check], "checked")
        start = imp.step("reshape", [start], "per_batch", {"shape": [-1] + [1] * (rank - 1)})
        positions = imp.step("add", [start, positions], "positions")
        if mode == "circular":
            positions = imp.step("mod", [positions, imp.index_constant(length, "length")],
                                 "wrapped", {"fmod": False})
    fixed = [d if type(d) is int else 1 for d in along]
    positions = imp.step("expand", [positions], "expand", {"shape": fixed})
    if any(type(d) is not int for d in along):
        positions = imp.step("where", [run_time_mask(imp, along), positions, positions], "spread")
    imp.emit("scatter_elements", [imp.tensor(past), positions, imp.tensor(update)],
             [node.output[0]], {"axis": axis, "reduction": "none"})
