"""ONNX's gathers: Gather (on a constant 2-D float table at run-time indices an Embedding,
whose indices the executor validates at entry; constant indices a ``gather``; run-time ones a
``gather_elements``), GatherND (indices of one or more coordinates, constant or computed at run
time), GatherElements and ReverseSequence. Registered in :data:`.ops.MAPPERS` on import."""

from __future__ import annotations

import math

import numpy as np

from abi.ops import dims as dim_math

from ..errors import ModelFileError
from . import symbolic
from .convert import attributes
from .fold import FAR, axis_in, flatten_axis
from .ops import _few, _only, maps
from .run_time_sizes import entry_count, has_dim, run_time_arange, run_time_mask, sizes_like
from .shapes import _reshape_to, range_length


@maps("Gather")
def _gather(imp, node, attrs):
    """Run-time indices into a constant 2-D float table: an Embedding (its indices validated
    at entry); constant indices into a run-time value: ``gather``; run-time indices into a
    run-time value: ``gather_elements``."""
    _only(imp, attrs, {"axis": ...})
    data, idx = node.input[0], node.input[1]
    if imp.is_const(data) and imp.const(data).ndim == 2 and attrs.get("axis", 0) == 0 \
            and imp.const(data).dtype.kind == "f":
        table = imp.const(data)
        imp.emit("embedding", [imp.tensor(idx),
                               imp.add_constant(table, imp.origin.get(data, data))],
                 [node.output[0]])
        return
    rank = len(imp.type_of(data).shape)
    axis = axis_in(attrs.get("axis", 0), rank)
    if not imp.is_const(idx):
        if _as_strided_view(imp, node, data, idx, axis):
            return
        _runtime_gather(imp, node, data, idx, list(imp.type_of(idx).shape), axis)
        return
    _emit_gather(imp, node, data, imp.const(idx), imp.origin.get(idx, idx), axis)


def _as_strided_view(imp, node, data: str, idx: str, axis: int) -> bool:
    """Run-time indices that are the row-major positions of their own shape, as many as the
    data has along ``axis``: the Gather is a reshape of the data, the indices' shape in place
    of the axis; True when so mapped. torch's dynamo exporter writes ``aten.as_strided``
    (ConvNeXt's average pool of a channels-last map, under a run-time batch) as a Gather from
    the flattened input at indices it computes from ``Range`` over the dims times the strides;
    the legacy one writes advanced indexing by broadcast aranges (``mask[b[:, None], k]``,
    the padding mask of transformers' attention, under a run-time batch and length) as a
    Gather from the flattened tensor at ``b * seq + k``."""
    source = list(imp.type_of(data).shape)
    producers = _producers(imp)
    affine = _affine(imp, producers, idx, 0)
    if _view(imp, node, data, affine, source[:axis], source[axis:axis + 1], source[axis + 1:]) \
            or _range_slice(imp, node, data, affine, axis):
        return True
    flat = producers.get(data)  # the legacy exporter's mask[b, k]: Flatten(mask), b*len + k
    if axis != 0 or flat is None or flat.op_type != "Flatten" or flat.input[0] not in imp.values:
        return False
    unflat = list(imp.type_of(flat.input[0]).shape)
    try:  # ONNX: -1 is the last axis
        k = flatten_axis(attributes(flat, imp.limits).get("axis", 1), len(unflat))
    except ModelFileError:  # the Flatten itself is refused where it is mapped
        return False
    return _sliced_view(imp, node, flat.input[0], k, affine, [dim_math.product(unflat[k:])])


def _coordinates_view(imp, node, data: str, idx: str) -> bool:
    """GatherND's run-time indices of k coordinates, each the row-major position of its own
    shape along one of the data's first k axes (the dynamo exporter's advanced indexing by
    broadcast aranges, ``mask[b[:, None, None, None], k[None, None, None, :]]``: a Concat of
    the two expanded to one shape): a reshape of the data, the indices' shape without its
    last axis in place of the first k; True when so mapped."""
    producers = _producers(imp)
    concat = producers.get(idx)
    rank = len(imp.type_of(idx).shape)
    if concat is None or concat.op_type != "Concat" or \
            attributes(concat, imp.limits).get("axis") not in (-1, rank - 1):
        return False
    source = list(imp.type_of(data).shape)
    k = len(concat.input)
    if k > len(source):
        return False
    total = None
    for i, part in enumerate(concat.input):
        coordinate = _affine(imp, producers, part, 0)
        if coordinate is None or coordinate[0][-1:] != [1]:
            return False
        scaled = _scaled(coordinate, dim_math.product(source[i + 1:k]))
        total = scaled if total is None else _summed(total, scaled)
        if total is None:
            return False
    affine = (total[0][:-1], total[1][:-1], total[2])
    return _view(imp, node, data, affine, [], source[:k], source[k:]) or \
        _sliced_view(imp, node, data, k, affine, source[k:])


def _sliced_view(imp, node, source: str, k: int, affine, after: list) -> bool:
    """Where ``affine`` indexes the first k axes of ``source`` in their order, each from 0
    over a length that is the axis' or shorter (``mask[b, k]`` with k over the cache's and
    the new tokens' lengths, ``past+seq``, of a mask as long as its input says, ``total``; an
    axis not indexed at 0): the node's output as the source sliced to those lengths and
    reshaped to the indices' shape then ``after``; True when so mapped. A length past its
    axis is clamped by the slice, and the reshape then refuses it when the call runs."""
    if affine is None or affine[2] != 0 or k > len(imp.type_of(source).shape):
        return False
    shape, strides, _ = affine
    dims = list(imp.type_of(source).shape)
    steps = [dim_math.product(dims[j + 1:k]) for j in range(k)]
    lengths, last = [1] * k, -1  # per source axis, the entries kept (not indexed: the first)
    for d, stride in zip(shape, strides):
        if d == 1:
            continue
        j = next((j for j in range(last + 1, k) if dim_math.known_equal(stride, steps[j])),
                 None)
        if j is None or type(d) is int and type(dims[j]) is int and d > dims[j]:
            return False
        lengths[j], last = d, j
    cut = [(j, n) for j, n in enumerate(lengths) if not dim_math.known_equal(n, dims[j])]
    if any(type(n) is not int and not has_dim(imp, n) for _, n in cut):
        return False
    for j, n in cut:  # an input's dim read over others' sum: golden cases draw it so
        if type(n) is not int and type(dims[j]) is str and dims[j].isidentifier():
            imp.reads.setdefault(dims[j], n)
    y = imp.tensor(source)
    if cut:
        attrs = {"starts": [0] * len(cut), "ends": [n if type(n) is int else 0 for _, n in cut],
                 "axes": [j for j, _ in cut]}
        ins = [y]
        if any(type(n) is not int for _, n in cut):
            like, like_axes = sizes_like(imp, [n for _, n in cut])
            ins.append(like)
            attrs["like_ends"] = like_axes
        [y] = imp.emit("slice", ins, [None], attrs, suffix="/view")
    kept = f"{node.output[0]}/kept"
    imp.alias(kept, y)
    _reshape_to(imp, node, kept, list(shape) + list(after))
    return True


def _view(imp, node, data: str, affine, before: list, axes: list, after: list) -> bool:
    """Where ``affine`` (:func:`_affine`) is the row-major positions of its own shape, as many
    as the ``axes`` of the data between ``before`` and ``after`` hold: the node's output as
    the data reshaped to that shape in their place; True when so mapped."""
    if affine is None:
        return False
    shape, strides, offset = affine
    kept = [(d, s) for d, s in zip(shape, strides) if d != 1]
    expected: object = 1  # row-major: each stride the product of the dims after it
    for d, s in reversed(kept):
        if not dim_math.known_equal(s, expected):
            return False
        expected = dim_math.mul(expected, d)
    if offset != 0 or not dim_math.known_equal(expected, dim_math.product(axes)):
        return False
    _reshape_to(imp, node, data, before + list(shape) + after)
    return True


def _producers(imp) -> dict:
    """ONNX output name -> the node of the main graph that writes it (built once)."""
    found = getattr(imp, "_producers_of", None)
    if found is None:
        found = imp._producers_of = {o: n for n in imp.model.graph.node for o in n.output}
    return found


def _affine(imp, producers: dict, name: str, depth: int):
    """Integer tensor ``name`` as ``offset + sum(coordinate_i * stride_i)`` over its shape:
    (shape, strides, offset), shape entries ints or run-time dims; None when it is not one
    (or not one this reads: Range by a whole step, Unsqueeze, Mul by a scalar, Add, an
    integer Cast, a Reshape of one axis to (-1,), constants, a shape entry). Strides and
    offset are ints or run-time dims."""
    if depth > 32:
        return None
    if name in imp.sym:  # a dim read from a shape: a scalar, stride 0
        value = imp.sym[name]
        return ([1] * value.ndim, [0] * value.ndim, symbolic.entries(value)[0]) \
            if value.size == 1 else None
    if imp.is_const(name):
        a = imp.const(name)
        if a.dtype.kind not in "iu" or a.size == 0 or a.size > (1 << 16):
            return None
        a = a.astype(np.int64)
        offset = int(a.reshape(-1)[0])
        strides = [int(a[tuple(1 if j == i else 0 for j in range(a.ndim))]) - offset
                   if a.shape[i] > 1 else 0 for i in range(a.ndim)]
        grid = offset + sum(np.arange(n).reshape([-1 if j == i else 1 for j in range(a.ndim)])
                            * st for i, (n, st) in enumerate(zip(a.shape, strides)))
        return (list(a.shape), strides, offset) if np.array_equal(a, grid) else None
    node = producers.get(name)
    if node is None:
        return None
    op, ins = node.op_type, list(node.input)
    if op == "Range" and len(ins) == 3:
        return _range_affine(imp, ins)
    if op == "Unsqueeze" and len(ins) == 2 and imp.is_const(ins[1]):
        inner = _affine(imp, producers, ins[0], depth + 1)
        if inner is None:
            return None
        shape, strides, offset = inner
        rank = len(shape) + imp.const(ins[1]).size
        for a in sorted(int(v) % rank for v in imp.const(ins[1]).reshape(-1)):
            shape.insert(a, 1)
            strides.insert(a, 0)
        return shape, strides, offset
    if op == "Cast" and ins:
        return _affine(imp, producers, ins[0], depth + 1)
    if op == "Reshape" and len(ins) == 2 and imp.is_const(ins[1]):  # to one axis: (-1,)
        inner = _affine(imp, producers, ins[0], depth + 1)
        return inner if inner is not None and len(inner[0]) == 1 and \
            imp.const(ins[1]).reshape(-1).tolist() == [-1] else None
    if op == "Expand" and len(ins) == 2:
        inner = _affine(imp, producers, ins[0], depth + 1)
        target = imp.const(ins[1]).reshape(-1).tolist() if imp.is_const(ins[1]) else (
            symbolic.entries(imp.sym[ins[1]]) if ins[1] in imp.sym else None)
        return None if inner is None or target is None else \
            _summed(inner, ([int(d) if type(d) is not str else d for d in target],
                            [0] * len(target), 0))
    if op in ("Mul", "Add") and len(ins) == 2:
        a, b = (_affine(imp, producers, t, depth + 1) for t in ins)
        if a is None or b is None:
            return None
        if op == "Add":
            return _summed(a, b)
        scalar = next((x for x in (a, b) if not x[0] or all(d == 1 for d in x[0])), None)
        if scalar is None:
            return None
        other = b if scalar is a else a
        return _scaled(other, scalar[2]) if len(other[0]) >= len(scalar[0]) else None
    return None


def _range_affine(imp, ins: list):
    """Range(start, limit, delta) of an integer delta k and start and limit each an int or a
    run-time dim, as an :func:`_affine` tensor: ([n], [k], start), n = ceil((limit - start)
    / k) (``torch.arange(1, t, 3)``, ``torch.arange(t - 1, -1, -1)``); None otherwise."""
    ends = []
    for t in ins:
        if imp.is_const(t):
            v = imp.const(t)
            if v.size != 1 or v.dtype.kind not in "iu":
                return None
            ends.append(int(v.reshape(())))
        elif t in imp.sym and imp.sym[t].size == 1:
            ends.append(symbolic.entries(imp.sym[t])[0])
        else:
            return None
    start, limit, k = ends
    if type(k) is not int or k == 0:
        return None
    _, count = range_length(start, limit, k)
    return [max(count, 0) if type(count) is int else count], [k], start


def _range_slice(imp, node, data: str, affine, axis: int) -> bool:
    """Run-time indices that are a Range over the whole of the data's ``axis`` by a step
    (:func:`_range_affine`): from a whole number o >= 0 to the axis' end by k >= 1 (the
    dynamo exporter's ``x.index_select(1, torch.arange(1, t, 3))``), or from its last
    position back to its first by k <= -1 (``torch.arange(t - 1, -1, -1)``, the positions
    reversed): the Gather is that slice of the data; True when so mapped."""
    if affine is None or len(affine[0]) != 1:
        return False
    [n], [k], start = affine
    size = imp.type_of(data).shape[axis]
    if k > 0 and type(start) is int and start >= 0:
        first, end = start, FAR
    elif k < 0 and dim_math.known_equal(start, dim_math.sub(size, 1)):
        first, end = -1, -FAR
    else:
        return False
    if not dim_math.known_equal(n, dim_math.slice_len(size, first, end, k)):
        return False
    imp.emit("slice", [imp.tensor(data)], [node.output[0]],
             {"starts": [first], "ends": [end], "axes": [axis], "steps": [k]})
    return True


def _scaled(affine, k):
    """An :func:`_affine` tensor times ``k`` (an int or a run-time dim)."""
    shape, strides, offset = affine
    return shape, [dim_math.mul(s, k) for s in strides], dim_math.mul(offset, k)


def _summed(a, b):
    """The sum of two :func:`_affine` tensors, broadcast; None where their shapes do not."""
    rank = max(len(a[0]), len(b[0]))
    pad = [([1] * (rank - len(x[0])) + list(x[0]), [0] * (rank - len(x[1])) + list(x[1]))
           for x in (a, b)]
    shape = []
    for da, db in zip(pad[0][0], pad[1][0]):
        if da != 1 and db != 1 and not dim_math.known_equal(da, db):
            return None
        shape.append(db if da == 1 else da)
    return (shape, [dim_math.add(sa, sb) for sa, sb in zip(pad[0][1], pad[1][1])],
            dim_math.add(a[2], b[2]))


def _int64_indices(imp, idx: str) -> str:
    """The graph tensor of run-time indices ``idx``, widened to int64 (``gather_elements``'
    index dtype) when it is not."""
    index = imp.tensor(idx)
    if imp.types[index].dtype != "int64":
        [index] = imp.emit("cast", [index], [None], {"dtype": "int64"}, suffix="/int64")
    return index


def checked_index(imp, index: str, size: int, name: str, suffix: str) -> str:
    """The int64 graph tensor ``index`` of values computed at run time, each checked against
    [0, ``size``) when the call runs: a ``gather_elements`` from the constant ``arange(size)``
    (named ``{node}.{name}``), which gives each value back, and refuses one outside with an
    IndexRangeError naming the node (``{node}/{suffix}``). ReverseSequence's lengths,
    Attention's cache lengths, TensorScatter's write positions and run-time coordinates are
    checked so, where onnxruntime refuses them too."""
    arange = imp.add_constant(np.arange(size, dtype=np.int64), f"{imp.node_name}.{name}")
    return imp.emit("gather_elements", [arange, index], [None], {"axis": 0},
                    suffix=f"/{suffix}")[0]


def _runtime_gather(imp, node, data: str, idx: str, where: list, axis: int, *,
                    graph: bool = False, counts: str | None = None,
                    internal: bool = False) -> str | None:
    """Run-time indices into a run-time value (torch.index_select, ``x[:, i]`` with ``i``
    computed): ``gather_elements`` of the indices (ONNX ``idx``, taken as of shape ``where``)
    flattened, laid along ``axis`` and expanded to the other axes, then reshaped to ONNX's
    output shape. The indices' shape static, or holding run-time dims: of rank 1 (torch's
    ``y[arange(b), lengths - 1]``, a sequence's last valid step, under a run-time batch; the
    count read from the indices), or of any rank (the dynamo exporter's ``x.unfold(1, 4, 2)``,
    audio framed by a hop over a run-time length, and both exporters' ``F.unfold``, whose
    window positions are ``(windows, size)``), flattened first and the axis unflattened back
    into the indices' dims, read from the indices when the call runs; run-time dims of the
    data on its other axes are brought to the expanded indices by ``where(mask, index, index)``
    (:func:`.run_time_sizes.run_time_mask`, read from the data). A negative index counts from
    the end (:func:`run_time_from_the_end`), then each is checked against [0, dim) when it
    arrives, a run-time dim on ``axis`` against the size the call gives it. ``graph``: ``data``
    and ``idx`` are graph tensors already (``idx`` int64), not ONNX names; ``counts``: a
    graph tensor whose first axes are ``where`` (GatherND's indices, whose flat positions
    ``idx`` is), read for the run-time ones (default: ``idx``); ``internal``: the gathered
    graph tensor is returned, not bound to the node's output."""
    shape = list(imp.types[data].shape if graph else imp.type_of(data).shape)
    out = shape[:axis] + where + shape[axis + 1:]
    run_time = [d for a, d in enumerate(shape) if a != axis and type(d) is not int]
    counted = all(type(d) is int for d in where)  # else run-time counts
    k = math.prod(where) if counted else dim_math.product(where)
    data = data if graph else imp.tensor(data)
    index = idx if graph else run_time_from_the_end(imp, data, axis, _int64_indices(imp, idx))
    indices = counts or index  # what the indices' run-time dims are read from
    if not counted and len(where) != 1:  # one axis of the indices' count
        [index] = imp.emit("flatten", [index], [None], {"start_dim": 0, "end_dim": -1},
                           suffix="/indices")
    sources = {d: (data, a) for a, d in enumerate(shape) if type(d) is not int}
    if not counted:  # the count read from the indices themselves
        sources.setdefault(k, (index, 0))
    [index] = imp.emit("reshape", [index], [None],
                       {"shape": [1] * axis + [k if counted else -1] + [1] * (
                           len(shape) - axis - 1)}, suffix="/along")
    spread = [(k if counted else 1) if a == axis else d if type(d) is int else 1
              for a, d in enumerate(shape)]  # a run-time count kept as the reshape gave it
    [index] = imp.emit("expand", [index], [None], {"shape": spread}, suffix="/expand")
    if run_time:  # over the data's run-time dims too: where(mask, index, index)
        mask = run_time_mask(imp, [k if a == axis else d for a, d in enumerate(shape)],
                             sources)
        [index] = imp.emit("where", [mask, index, index], [None], suffix="/over")
    last = len(where) == 1
    [y] = imp.emit("gather_elements", [data, index],
                   [node.output[0] if last and not internal else None], {"axis": axis},
                   suffix="" if last and not internal else "/gather")
    if last:
        return y
    bound = {"outputs": [None if internal else node.output[0]],
             "suffix": "/gathered" if internal else ""}
    if counted and len([d for d in out if type(d) is not int]) <= 1:
        return imp.emit("reshape", [y], attrs={"shape": [d if type(d) is int else -1
                                                         for d in out]}, **bound)[0]
    attrs = {"axis": axis, "sizes": [-1 if type(d) is not int else d for d in where]}
    if not counted:  # each run-time size read from the indices' own dims
        attrs["like_axes"] = [-1 if type(d) is int else a for a, d in enumerate(where)]
    return imp.emit("unflatten", [y] + ([indices] if not counted else []), attrs=attrs,
                    **bound)[0]


def runtime_positions(imp, data: str, idx: str, index: str | None = None) -> tuple[str, str]:
    """Run-time indices ``idx`` (ONNX, shape ``(..., k)``, k static, the rest static or
    holding run-time counts; ``index``: their int64 graph tensor, when the caller has made
    it) of k coordinates into ``data``'s first k axes: the graph tensor of
    ``data`` with those axes flattened into one, and the int64 graph tensor of each index's
    position along it (shape: the indices' without their last dim, flattened). Each
    coordinate is checked against [0, its dim) when it arrives, on its own (a
    ``gather_elements`` from the ``arange`` of the dim, which gives the coordinate back; of a
    run-time dim, its arange computed when the call runs): a coordinate out of range could
    otherwise land on another element's flat position. A negative one is counted from the end
    of its dim first (:func:`run_time_from_the_end`). Along run-time dims the strides are
    computed when the call runs (the dynamo exporter's ``y[arange(b), lengths - 1]`` over a
    run-time batch and length)."""
    where = list(imp.types[index].shape if index is not None else imp.type_of(idx).shape)
    shape = list(imp.type_of(data).shape)
    k = where[-1]
    count = where[:-1]
    if type(k) is not int:
        raise imp.unsupported(f"indices {idx!r} of {k} coordinates are computed at run time, "
                              f"which needs a static count of coordinates (data {shape}, "
                              f"indices {where})")
    if k > len(shape):
        raise ModelFileError(f"indices of {k} coordinates into {data!r} of rank {len(shape)}")
    lead = shape[:k]
    m = math.prod(count) if all(type(d) is int for d in count) else -1
    x = imp.tensor(data)
    [index] = imp.emit("reshape", [index or _int64_indices(imp, idx)], [None],
                       {"shape": [m, k]}, suffix="/coordinates")
    flat = None
    for c, dim in enumerate(lead):
        [coord] = imp.emit("gather", [index, imp.add_constant(np.array(c, np.int64),
                                                              f"{imp.node_name}.c{c}")],
                           [None], {"axis": 1}, suffix=f"/coordinate{c}")
        coord = run_time_from_the_end(imp, x, c, coord)
        if type(dim) is int:
            coord = checked_index(imp, coord, dim, f"dim{c}", f"check{c}")
        else:  # checked against the size the call gives the dim: its arange, read from x
            arange = run_time_arange(imp, [dim], 0, {dim: (x, c)})
            [coord] = imp.emit("gather_elements", [arange, coord], [None], {"axis": 0},
                               suffix=f"/check{c}")
        stride = math.prod(lead[c + 1:]) if all(type(d) is int for d in lead[c + 1:]) else \
            entry_count(imp, dim_math.product(lead[c + 1:]), f"/stride{c}")
        if stride != 1:
            if type(stride) is int:
                stride = imp.add_constant(np.array(stride, np.int64),
                                          f"{imp.node_name}.stride{c}")
            [coord] = imp.emit("mul", [coord, stride], [None], suffix=f"/stride{c}")
        flat = coord if flat is None else imp.emit("add", [flat, coord], [None],
                                                   suffix=f"/position{c}")[0]
    [values] = imp.emit("flatten", [x], [None], {"start_dim": 0, "end_dim": k - 1},
                        suffix="/flatten")
    return values, flat


def _emit_gather(imp, node, data: str, indices: np.ndarray, origin: str, axis: int) -> None:
    """``gather`` of constant ``indices`` along ``axis``: each checked against the dim and a
    negative one counted from the end, as ONNX does. Along a run-time dim (``x[:, 0]``,
    ``x[:, -1]`` under a dynamic sequence length): :func:`_along_run_time_dim`."""
    shape = imp.type_of(data).shape
    dim = shape[axis]
    if indices.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {indices.dtype}")
    if type(dim) is not int:
        _along_run_time_dim(imp, node, data, indices.astype(np.int64), origin, axis)
        return
    values = indices.astype(np.int64)
    bad = (values < -dim) | (values >= dim)
    if bad.any():
        raise ModelFileError(f"indices {_few(values[bad].tolist())} are outside [-{dim}, {dim}) "
                             f"(axis {axis} of {data!r}, shape {shape})")
    values = np.where(values < 0, values + dim, values)
    imp.emit("gather", [imp.tensor(data), imp.add_constant(values, origin)], [node.output[0]],
             {"axis": axis})


def _along_run_time_dim(imp, node, data: str, values: np.ndarray, origin: str,
                        axis: int) -> None:
    """Constant indices along a run-time dim d: the run-time gather's ``gather_elements``,
    whose indices are checked against d when the call gives it its size. A negative index
    counts from the end there: d + index, with d the ``sum`` of ones over d (the ones are
    ``where(mask, 1, 1)``, the mask of :func:`.run_time_sizes.run_time_mask`, read from the
    data)."""
    x = imp.tensor(data)
    index = _from_the_end(imp, x, axis, values, origin)
    _runtime_gather(imp, node, x, index, list(values.shape), axis, graph=True)


def _from_the_end(imp, x: str, axis: int, values: np.ndarray, origin: str) -> str:
    """Constant int64 indices ``values`` along the run-time dim d on ``axis`` of the graph
    tensor ``x``, a negative one counted from the end as ONNX does: d + index, with d the
    ``sum`` of ones over d (``where(mask, 1, 1)``, the mask of
    :func:`.run_time_sizes.run_time_mask`, read from ``x``). The graph tensor of the indices, of
    ``values``' shape (at least (1,)); each is checked against d when the call runs."""
    return counted_from_the_end(imp, x, axis, imp.add_constant(values, origin), values)


def counted_from_the_end(imp, x: str, axis: int, index: str, values: np.ndarray) -> str:
    """The graph tensor ``index`` (int64), whose values are the constant ``values``
    broadcast, with d added where they are negative (:func:`_from_the_end`)."""
    negative = np.asarray(values) < 0
    if not negative.any():
        return index
    [ends] = imp.emit("mul", [_run_time_size(imp, x, axis), imp.add_constant(
        negative.astype(np.int64), f"{imp.node_name}.from_end")], [None], suffix="/from_end")
    return imp.emit("add", [index, ends], [None], suffix="/index")[0]


def _run_time_size(imp, x: str, axis: int, *, keepdim: bool = True) -> str:
    """The int64 size of the run-time dim on ``axis`` of the graph tensor ``x``, computed when
    the call runs: the ``sum`` of ones over it (``where(mask, 1, 1)``, the mask of
    :func:`.run_time_sizes.run_time_mask`, read from ``x``); shape (1,), or () without
    ``keepdim``."""
    dim = imp.types[x].shape[axis]
    one = imp.add_constant(np.ones(1, np.int64), f"{imp.node_name}.one")
    [ones] = imp.emit("where", [run_time_mask(imp, [dim], {dim: (x, axis)}), one, one], [None],
                      suffix="/ones")
    return imp.emit("sum", [ones], [None], {"axes": [0], "keepdim": keepdim},
                    suffix="/size")[0]


def run_time_from_the_end(imp, x: str, axis: int, index: str) -> str:
    """Run-time int64 indices ``index`` along ``axis`` of the graph tensor ``x``, a negative
    one counted from the end as ONNX counts it: ``where(index < 0, index + dim, index)``, the
    dim a constant when it is fixed, else its size computed when the call runs. An index still
    outside [0, dim) after it is refused when it arrives, naming the index with the dim added
    where it was negative."""
    dim = imp.types[x].shape[axis]
    size = imp.add_constant(np.array(dim, np.int64), f"{imp.node_name}.dim{axis}") \
        if type(dim) is int else _run_time_size(imp, x, axis, keepdim=False)
    zero = imp.add_constant(np.array(0, np.int64), f"{imp.node_name}.zero")
    [negative] = imp.emit("less", [index, zero], [None], suffix="/negative")
    [wrapped] = imp.emit("add", [index, size], [None], suffix="/from_end")
    return imp.emit("where", [negative, wrapped, index], [None], suffix="/counted")[0]


@maps("GatherND")
def _gather_nd(imp, node, attrs):
    """GatherND of indices of one coordinate each (shape ``(..., 1)``, as torch's dynamo
    exporter writes ``x[:, [0, 2]]`` after moving that axis first, and ``x[i]`` for a tensor
    ``i``): a Gather on axis 0 of the indices without their last axis. Constant indices of k
    coordinates (the dynamo exporter's adaptive_avg_pool2d to a size that does not divide the
    input, ``x[rows, cols]``): the data's first k axes (static) flattened into one, and a
    Gather on it of each index's flat position. ``batch_dims``: :func:`_gather_nd_batched`."""
    _only(imp, attrs, {"batch_dims": ...})
    data, idx = node.input[0], node.input[1]
    if attrs.get("batch_dims", 0) != 0:
        _gather_nd_batched(imp, node, data, idx, attrs["batch_dims"])
        return
    if not imp.is_const(idx):
        where = list(imp.type_of(idx).shape)
        if _coordinates_view(imp, node, data, idx):
            return
        if not where or where[-1] == 0:
            raise imp.unsupported(f"indices of shape {where}: GatherND needs indices with one "
                                  f"or more coordinates in their last dim")
        if where[-1] == 1:
            _runtime_gather(imp, node, data, idx, where[:-1], 0)
            return
        flat, positions = runtime_positions(imp, data, idx)
        _runtime_gather(imp, node, flat, positions, where[:-1], 0, graph=True,
                        counts=imp.tensor(idx))
        return
    indices = imp.const(idx, "indices")
    if indices.ndim < 1 or indices.shape[-1] < 1:
        raise imp.unsupported(f"indices of shape {indices.shape}: GatherND needs indices with "
                              f"one or more coordinates in their last dim")
    if indices.shape[-1] == 1:
        _emit_gather(imp, node, data, indices[..., 0], imp.origin.get(idx, idx), 0)
        return
    flat, positions = _flat_coordinates(imp, node, data, indices)
    imp.emit("gather", [flat, imp.add_constant(positions, imp.origin.get(idx, idx))],
             [node.output[0]], {"axis": 0})


def _gather_nd_batched(imp, node, data: str, idx: str, batch) -> None:
    """GatherND with ``batch_dims`` b > 0 (TensorFlow's ``gather_nd(..., batch_dims=b)``, as
    tf2onnx writes it): GatherND with no batch dims of the indices with the b coordinates of
    their own batch entry put before each index's. Constant indices (static shapes): worked
    out here. Run-time ones: each batch coordinate an ``arange`` along its axis (a constant,
    or along a run-time dim, such as a dynamic batch, the running count of it, read from the
    data), spread to the indices' shape by adding the zeros of their first column, ``concat``
    before them, then as :func:`runtime_positions`."""
    shape, where = list(imp.type_of(data).shape), list(imp.type_of(idx).shape)
    if type(batch) is not int or not 0 <= batch < min(len(shape), len(where)):
        raise ModelFileError(f"attribute batch_dims={batch!r} must be in [0, "
                             f"{min(len(shape), len(where))}) (below the ranks of data {shape} "
                             f"and indices {where})")
    for j in range(batch):
        imp.same_dims(shape[j], where[j], f"batch_dims={batch}: dim {j} of data {shape} and "
                                          f"indices {where}")
    if imp.is_const(idx):
        if not all(type(d) is int for d in where[:-1] + shape[:batch]):
            raise imp.unsupported(f"batch_dims={batch} of constant indices over run-time dims "
                                  f"(data {shape}, indices {where})")
        indices = imp.const(idx, "indices")
        if indices.dtype.kind not in "iu":
            raise ModelFileError(f"indices must be integers, got {indices.dtype}")
        grid = np.stack(np.meshgrid(*map(np.arange, where[:batch]), indexing="ij"), axis=-1)
        grid = np.broadcast_to(grid.reshape(where[:batch] + [1] * (len(where) - 1 - batch) +
                                            [batch]), where[:-1] + [batch])
        flat, positions = _flat_coordinates(imp, node, data, np.concatenate(
            [grid, indices.astype(np.int64)], axis=-1))
        imp.emit("gather", [flat, imp.add_constant(positions, imp.origin.get(idx, idx))],
                 [node.output[0]], {"axis": 0})
        return
    index, x, rank = _int64_indices(imp, idx), imp.tensor(data), len(where)
    first = imp.step("slice", [index], "first_column", {"starts": [0], "ends": [1],
                                                         "axes": [rank - 1]})
    zeros = imp.step("sub", [first, first], "zeros")
    coordinates = [imp.step("add", [run_time_arange(imp, where[:-1] + [1], j, {
        where[j]: (x, j)} if type(where[j]) is not int else None), zeros], f"batch{j}")
        for j in range(batch)]
    index = imp.step("concat", [*coordinates, index], "batched", {"axis": -1})
    flat, positions = runtime_positions(imp, data, idx, index)
    _runtime_gather(imp, node, flat, positions, where[:-1], 0, graph=True, counts=index)


def _flat_coordinates(imp, node, data: str, indices: np.ndarray) -> tuple[str, np.ndarray]:
    """GatherND's constant ``indices`` of k coordinates, checked: the graph tensor of ``data``
    with its first k axes reshaped into one, and each index's position along it."""
    k, shape = indices.shape[-1], list(imp.type_of(data).shape)
    if k > len(shape):
        raise ModelFileError(f"indices of {k} coordinates into {data!r} of rank {len(shape)}")
    lead, rest = shape[:k], shape[k:]
    if not all(type(d) is int for d in lead):
        raise imp.unsupported(f"axes 0-{k - 1} of {data!r} (shape {shape}) include a run-time "
                              f"dim: the constant indices cannot be checked against it")
    if sum(type(d) is not int for d in rest) > 1:
        raise imp.unsupported(f"{data!r} (shape {shape}) has more than one run-time dim after "
                              f"the indexed axes")
    if indices.dtype.kind not in "iu":
        raise ModelFileError(f"indices must be integers, got {indices.dtype}")
    values, dims = indices.astype(np.int64), np.array(lead, np.int64)
    bad = (values < -dims) | (values >= dims)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ModelFileError(f"index {values[at[:-1]].tolist()} is outside shape {lead} of "
                             f"{data!r} (coordinate {at[-1]}: {int(values[at])})")
    flat = np.ravel_multi_index(tuple(np.moveaxis(np.where(values < 0, values + dims, values),
                                                  -1, 0)), lead).astype(np.int64)
    [y] = imp.emit("reshape", [imp.tensor(data)], [None],
                   {"shape": [math.prod(lead)] + [d if type(d) is int else -1 for d in rest]},
                   suffix="/flatten")
    return y, flat


@maps("GatherElements")
def _gather_elements(imp, node, attrs):
    """torch.gather, take_along_dim: ``gather_elements``, whose run-time indices, a negative
    one counted from the end (:func:`spread_indices`), are checked against [0, dim) as they
    arrive; constant indices are checked and made non-negative here (along a run-time dim,
    when the call runs: :func:`_from_the_end`), int32 ones widened to int64."""
    _only(imp, attrs, {"axis": ...})
    x, idx = node.input[:2]
    shape = imp.type_of(x).shape
    axis = axis_in(attrs.get("axis", 0), len(shape), "axis")
    if imp.is_const(idx) and type(shape[axis]) is int:
        value, dim = imp.const(idx, "indices"), shape[axis]
        if value.dtype.kind not in "iu" or value.size and not (
                -dim <= value.min() and value.max() < dim):
            raise imp.unsupported(f"constant indices {_few(value.ravel().tolist())} must be "
                                  f"integers in [-{dim}, {dim}) for axis {axis} of shape "
                                  f"{list(shape)}")
        index = imp.add_constant(np.where(value < 0, value + dim, value).astype(np.int64),
                                 imp.origin.get(idx, idx))
    elif imp.is_const(idx):
        value = imp.const(idx, "indices")
        if value.dtype.kind not in "iu":
            raise imp.unsupported(f"constant indices must be integers, got {value.dtype}")
        index = _from_the_end(imp, imp.tensor(x), axis, value.astype(np.int64),
                              imp.origin.get(idx, idx))
    else:
        index = spread_indices(imp, idx, imp.tensor(x), axis)
    imp.emit("gather_elements", [imp.tensor(x), index], [node.output[0]], {"axis": axis})


def spread_indices(imp, idx: str, x: str, axis: int) -> str:
    """Run-time indices ``idx`` (ONNX) for ``axis`` of the graph tensor ``x``, int64, a
    negative one counted from the end when the call runs, as ONNX counts it
    (:func:`run_time_from_the_end`), unless they only spread a constant of no negative value to
    a run-time shape (the dynamo exporter's ``y[:, 0] = v`` expands 0 to the shape of v)."""
    index = _int64_indices(imp, idx)
    values = imp.spread.get(idx)
    if values is not None and values.dtype.kind in "iu" and not (values < 0).any():
        return index
    return run_time_from_the_end(imp, x, axis, index)


@maps("ReverseSequence")
def _reverse_sequence(imp, node, attrs):
    """ReverseSequence (tf2onnx's bidirectional RNNs): along ``time_axis``, each batch entry's
    first ``sequence_lens[b]`` steps reversed and the rest kept, as a ``gather_elements`` at
    source positions ``t < len ? len - 1 - t : t``. Constant lengths: those positions worked
    out here; run-time ones: computed in the graph, each length first checked against
    [0, T] (a ``gather_elements`` from the constant ``arange(T + 1)``), as onnxruntime
    refuses one outside it. Static shapes, but for one length spread over a run-time batch
    (tf2onnx's Keras ``Bidirectional(..., return_sequences=True)``, its lengths the Expand of
    the time steps to the batch): a ``gather`` along time at those positions."""
    _only(imp, attrs, {"batch_axis": ..., "time_axis": ...})
    x, lens = node.input[:2]
    batch_axis, time_axis = attrs.get("batch_axis", 1), attrs.get("time_axis", 0)
    if {batch_axis, time_axis} != {0, 1}:
        raise ModelFileError(f"batch_axis={batch_axis!r} and time_axis={time_axis!r} must be "
                             f"0 and 1, one each")
    spread = imp.spread.get(lens)
    if spread is not None and spread.size and spread.dtype.kind in "iu" and (
            spread == spread.reshape(-1)[0]).all() and len(imp.type_of(x).shape) >= 2 and \
            type(steps := imp.type_of(x).shape[time_axis]) is int:
        length = int(spread.reshape(-1)[0])
        if not 0 <= length <= steps:
            raise ModelFileError(f"sequence_lens {length} must be in [0, {steps}] (axis "
                                 f"{time_axis} of {x!r}, shape {list(imp.type_of(x).shape)})")
        t = np.arange(steps, dtype=np.int64)
        source = imp.add_constant(np.where(t < length, length - 1 - t, t),
                                  f"{node.output[0]}.source")
        imp.emit("gather", [imp.tensor(x), source], [node.output[0]], {"axis": time_axis})
        return
    shape = list(imp.static_shape(x))
    if len(shape) < 2:
        raise ModelFileError(f"input {x!r} of shape {shape} needs rank >= 2")
    steps, batch = shape[time_axis], shape[batch_axis]
    if list(imp.static_shape(lens)) != [batch] or imp.type_of(lens).dtype not in (
            "int64", "int32"):
        raise ModelFileError(f"sequence_lens {lens!r} must be {batch} integers (one per batch "
                             f"entry), got {imp.type_of(lens).dtype} of shape "
                             f"{list(imp.type_of(lens).shape)}")
    along_time = [steps if a == time_axis else 1 for a in range(len(shape))]
    along_batch = [batch if a == batch_axis else 1 for a in range(len(shape))]
    t = np.arange(steps, dtype=np.int64).reshape(along_time)
    if imp.is_const(lens):
        given = imp.const(lens, "sequence_lens").astype(np.int64)
        if given.size and not (0 <= given.min() and given.max() <= steps):
            raise ModelFileError(f"sequence_lens {_few(given.tolist())} must be in [0, "
                                 f"{steps}] (axis {time_axis} of {x!r}, shape {shape})")
        length = given.reshape(along_batch)
        source = np.broadcast_to(np.where(t < length, length - 1 - t, t), shape)
        index = imp.add_constant(np.ascontiguousarray(source), f"{node.output[0]}.source")
        imp.emit("gather_elements", [imp.tensor(x), index], [node.output[0]],
                 {"axis": time_axis})
        return

    length = checked_index(imp, _int64_indices(imp, lens), steps + 1, "lengths", "check")
    length = imp.step("reshape", [length], "along_batch", {"shape": along_batch})
    t = imp.index_constant(t, "steps")
    back = imp.step("sub", [imp.step("sub", [length, t], "from_end"),
                            imp.index_constant(1, "one")], "back")
    source = imp.step("where", [imp.step("less", [t, length], "inside"), back, t], "source")
    source = imp.step("expand", [source], "expand", {"shape": shape})
    imp.emit("gather_elements", [imp.tensor(x), source], [node.output[0]], {"axis": time_axis})
