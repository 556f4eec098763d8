"""ONNX's shape plumbing: Concat, Reshape, Flatten, Squeeze / Unsqueeze, Expand, Tile,
Transpose, ConstantOfShape, Slice, Split, Pad (constant, reflect, edge, and wrap as slices
and concats) and CenterCropPad. Registered in :data:`.ops.MAPPERS` on import."""

from __future__ import annotations

import itertools

import numpy as np

from abi import dtypes
from abi.ops import dims

from ..errors import ModelFileError
from . import symbolic
from .fold import (FAR, axis_in, flatten_axis, int_vector, one_value, onnx_slice,
                   reshape_target, split_sizes)
from .ops import ON_RUN_TIME_DIMS, _few, _only, _opt, maps


# --- shape plumbing ------------------------------------------------------------------------------


@maps("Concat")
def _concat(imp, node, attrs):
    _only(imp, attrs, {"axis": ...})
    imp.emit("concat", [imp.tensor(t) for t in node.input], [node.output[0]],
             {"axis": attrs["axis"]})


def _reshape_to(imp, node, x: str, shape: list) -> None:
    free = [d for d in shape if type(d) is not int]
    if len(free) > 1 or (free and -1 in shape):
        _regrouped(imp, node, x, symbolic.regroup(imp.type_of(x).shape, shape))
        return
    imp.emit("reshape", [imp.tensor(x)], [node.output[0]],
             {"shape": [-1 if type(d) is not int else d for d in shape]})


def _regrouped(imp, node, x: str, steps: list) -> None:
    """The ``flatten`` and ``unflatten`` steps of :func:`.symbolic.regroup` (none: x as it
    is), the last one writing the node's output."""
    if not steps:
        imp.alias(node.output[0], imp.tensor(x))
        return
    y = imp.tensor(x)
    for k, (op, axis, arg) in enumerate(steps):
        last = k == len(steps) - 1
        ins, attrs = [y], {"start_dim": axis, "end_dim": arg}
        if op == "unflatten":
            like, attrs = _unflatten_sizes(imp, axis, arg)
            ins += [like] if like else []
        [y] = imp.emit(op, ins, [node.output[0] if last else None], attrs,
                       suffix="" if last else f"/{op}{k}")


def _unflatten_sizes(imp, axis: int, sizes: list) -> tuple[str | None, dict]:
    """An ``unflatten``'s ``like`` input (None: none) and attributes for ``sizes`` (ints,
    run-time dims, and a -1 left to the call). One run-time dim is the -1 (the fixed sizes are
    never 0, so it is exact). Two and more, one beside a -1, or one alone (an axis settled as
    that dim: :func:`.symbolic.regroup`), are each read from ``like``
    when the call runs (``like_axes``), as a -1 beside another run-time size would be wrong
    when that size is 0: from a tensor that has them all as its own dims (:func:`dim_source`;
    the input of torch's MultiheadAttention, whose ``(seq*batch, 16)`` goes back to ``(seq,
    batch, 16)``), else from a mask built to carry each on its own axis
    (:func:`_sizes_mask`)."""
    free = [k for k, d in enumerate(sizes) if type(d) is not int]
    if (len(free) <= 1 and -1 not in sizes and len(sizes) > 1) or not free:
        return None, {"axis": axis, "sizes": [-1 if k in free else d
                                              for k, d in enumerate(sizes)]}
    like, like_axes = sizes_like(imp, sizes)
    return like, {"axis": axis, "sizes": [-1 if k in free else d for k, d in enumerate(sizes)],
                  "like_axes": like_axes}


def sizes_like(imp, sizes: list) -> tuple[str, list[int]]:
    """A tensor ``like`` that carries the run-time entries of ``sizes`` (ints and run-time
    dims, one at least) as its own dims, and per entry the axis of ``like`` whose dim it is
    (-1 for an int): a tensor that has them all (:func:`dim_source`), else a mask built to
    carry each on its own axis (:func:`_sizes_mask`). What ``unflatten`` and ``resize`` read
    their run-time sizes from when the call runs."""
    free = [k for k, d in enumerate(sizes) if type(d) is not int]
    found = {k: dim_source(imp, sizes[k]) for k in free}
    sources = {None if f is None else f[0] for f in found.values()}
    if len(sources) == 1 and None not in sources:
        [like] = sources
        at = {k: f[1] for k, f in found.items()}
    else:
        like = _sizes_mask(imp, [sizes[k] for k in free])
        at = {k: n for n, k in enumerate(free)}
    return like, [at.get(k, -1) for k in range(len(sizes))]


def shape_value_tensor(imp, value: np.ndarray, out: str, dtype: str) -> None:
    """ONNX value ``out`` becomes a graph tensor of ``dtype`` holding the shape value
    ``value`` (ints and run-time dims), computed when the call runs (:func:`_entry_count`
    per run-time entry), in int64 (exact) and then cast. What a model that casts its shape
    to float computes from (``x.std()``'s n - 1, a mean as a sum over a count, a linspace's
    step ``2 / (w - 1)``), and what any op that is not shape arithmetic reads a shape value
    as (``max(w - 1, 1)``)."""
    parts = [size_tensor(imp, entry, f".{k}") for k, entry in
             enumerate(value.reshape(-1).tolist())]
    y = parts[0] if len(parts) == 1 else imp.emit("concat", parts, [None], {"axis": 0},
                                                  suffix=".entries")[0]
    shape = {"shape": list(value.shape)}
    if dtype == "int64":
        imp.emit("reshape", [y], [out], shape, suffix=".shape")
        return
    y = imp.emit("reshape", [y], [None], shape, suffix=".shape")[0]
    imp.emit("cast", [y], [out], {"dtype": dtype}, suffix=".cast")


def size_tensor(imp, d, suffix: str) -> str:
    """The size ``d`` as an int64 tensor of shape (1,): a constant for an int (named after
    the node and ``suffix``), else counted when the call runs (:func:`_entry_count`)."""
    if type(d) is int:
        return imp.add_constant(np.array([d], np.int64), f"{imp.node_name}{suffix}")
    return _entry_count(imp, d, suffix)


def _entry_count(imp, entry, suffix: str) -> str:
    """A run-time dim's value as an int64 tensor of shape (1,): the element count of a mask
    that long (:func:`_sizes_mask`) where the dim is a product of dims that tensors of the
    graph have, else its terms' counts added (``w - 1``, ``w - 2*w1``: :func:`dims.as_sum`)
    or its factors' counts multiplied (:func:`_product_count`)."""
    const, terms = dims.as_sum(entry)
    factor, names = dims.as_product(entry)
    single = const == 0 and len(terms) == 1 and terms[0][0] == 1
    if single and not all(has_dim(imp, n) or _plain(n) for n in names):
        return _product_count(imp, factor, names, suffix)
    if single or all(dim_source(imp, n) is not None for n in names):
        y = imp.emit("cast", [_sizes_mask(imp, [entry])], [None], {"dtype": "int64"},
                     suffix=f"{suffix}.ones")[0]
        return imp.emit("sum", [y], [None], {"axes": [0], "keepdim": True},
                        suffix=f"{suffix}.count")[0]
    y = imp.add_constant(np.array([const], np.int64), f"{imp.node_name}{suffix}.const")
    for n, (sign, term) in enumerate(terms):
        count = _entry_count(imp, term, f"{suffix}.{n}")
        y = imp.emit("add" if sign > 0 else "sub", [y, count], [None],
                     suffix=f"{suffix}.term{n}")[0]
    return y


def _plain(name: str) -> bool:
    """Whether ``name`` (one of a product's) is neither a sum nor a floor quotient."""
    return dims.whole_quotient(name) is None and dims.as_sum(name) == (0, [(1, name)])


def _product_count(imp, factor: int, names: tuple, suffix: str) -> str:
    """:func:`_entry_count` of ``factor`` times ``names``, some of which no tensor has as a
    dim: each such sum counted (``3*(t - 2*(t//2))``) and each such floor quotient its
    dividend's count divided (``(t - 2*(t//4)) // 2``: exact, as :mod:`.symbolic` makes a
    quotient of a sum only where the sum is not negative)."""
    y = imp.add_constant(np.array([factor], np.int64), f"{imp.node_name}{suffix}.factor")
    for n, name in enumerate(names):
        quotient = None if has_dim(imp, name) else dims.whole_quotient(name)
        if quotient is None:
            count = _entry_count(imp, name, f"{suffix}.{n}")
        else:
            x, divisor = quotient
            d = imp.add_constant(np.array([divisor], np.int64),
                                 f"{imp.node_name}{suffix}.{n}.divisor")
            count = imp.emit("int_div", [_entry_count(imp, x, f"{suffix}.{n}.sum"), d],
                             [None], suffix=f"{suffix}.{n}.quotient")[0]
        y = imp.emit("mul", [y, count], [None], suffix=f"{suffix}.factor{n}")[0]
    return y


def _sizes_mask(imp, sizes: list) -> str:
    """A bool tensor whose axis k has the run-time size ``sizes[k]``, a product of ints and
    run-time dims (``2*seq``): per size, the :func:`run_time_mask` of its dims, expanded by
    its int factor and flattened into one axis; the sizes' axes broadcast together."""
    mask = None
    for k, size in enumerate(sizes):
        factor, names = dims.as_product(size)
        y = run_time_mask(imp, [*names, factor])  # (n1, ..., 1): the factor expanded next
        if factor != 1:
            y = imp.emit("expand", [y], [None], {"shape": [1] * len(names) + [factor]},
                         suffix=f".size{k}.factor")[0]
        if len(names) + (factor != 1) > 1:
            y = imp.emit("flatten", [y], [None], {"start_dim": 0, "end_dim": -1},
                         suffix=f".size{k}.flat")[0]
        y = imp.emit("reshape", [y], [None], {"shape": [1] * k + [-1] + [1] * (
            len(sizes) - k - 1)}, suffix=f".size{k}")[0]
        mask = y if mask is None else imp.emit("or", [mask, y], [None],
                                                suffix=f".sizes{k}")[0]
    return mask


@maps("Reshape")
def _reshape(imp, node, attrs):
    _only(imp, attrs, {"allowzero": ...})
    x = node.input[0]
    in_shape = imp.type_of(x).shape
    target = reshape_target(imp.shape_value(node.input[1], "shape"), in_shape,
                            attrs.get("allowzero", 0))
    if all(type(d) is int for d in target):
        if -1 not in target and any(type(d) is not int for d in in_shape):
            _traced_size(imp, in_shape, target)  # a fixed target for a run-time input
    else:  # computed from a run-time shape
        x, in_shape = _settled(imp, node, x, in_shape, target)
        if -1 not in target:
            _traced_size(imp, in_shape, target)
        written = symbolic.reshape_target(target, in_shape)
        if written is None:  # (b, s, 48) to (b, s, 3, 16): flatten and unflatten
            _regrouped(imp, node, x, symbolic.regroup(in_shape, target))
            return
        target = written
    _reshape_to(imp, node, x, target)


def _traced_size(imp, in_shape, target: list) -> None:
    """Refuses a Reshape whose ``target`` (no -1) holds as many elements as the input of
    ``in_shape`` only at some sizes of its run-time dims (:func:`.symbolic.counts_differ`): a
    size the exporter saw when tracing, written as a constant. onnxruntime refuses the model
    at every other size, so the build's golden run would fail there with its message."""
    counts = symbolic.counts_differ(in_shape, target)
    if counts is not None:
        raise imp.unsupported(
            f"target shape {target} holds {counts[1]} elements and the input shape "
            f"{in_shape} {counts[0]}, equal only at some sizes of the run-time dims: the "
            f"exporter wrote a size it saw when tracing as a constant (torch's legacy "
            f"exporter does so for MultiheadAttention under a dynamic length, the dynamo "
            f"exporter for a batch-second LSTM's output), and onnxruntime refuses this "
            f"Reshape at the other sizes")


def _settled(imp, node, x: str, shape, target: list) -> tuple[str, tuple]:
    """``x`` with each dim that a broadcast of two run-time dims left undecided
    (``broadcast(a,b)``: the dynamo exporter adds a feature pyramid's upsampled coarse map,
    ``((h+3)//4)*2`` high, to the finer one, ``(h+1)//2`` high, having checked them equal
    when it traced) settled as the one of a and b the Reshape's target names: an ``unflatten``
    of that axis into that dim, read from a tensor that has it (:func:`dim_source`), which
    checks when the call runs that the axis has that size (as onnxruntime's Reshape refuses
    it otherwise). ``(x, shape)`` unchanged where there is none to settle."""
    for axis, d in enumerate(shape):
        operands = dims.broadcast_operands(d)
        named = [o for o in operands or () if type(o) is not int
                 and any(dims.known_equal(o, t) for t in target)]
        found = dim_source(imp, named[0]) if named else None
        if found is None:
            continue
        source, at = found
        settled = f"{node.output[0]}#settled{axis}"
        imp.emit("unflatten", [imp.tensor(x), source], [settled],
                 {"axis": axis, "sizes": [-1], "like_axes": [at]}, suffix=f".settle{axis}")
        x, shape = settled, imp.type_of(settled).shape
    return x, tuple(shape)


@maps("Flatten")
def _flatten(imp, node, attrs):
    _only(imp, attrs, {"axis": ...})
    x = node.input[0]
    shape = imp.type_of(x).shape
    axis = flatten_axis(attrs.get("axis", 1), len(shape))
    if axis == 1 and len(shape) > 1:
        imp.emit("flatten", [imp.tensor(x)], [node.output[0]], {"start_dim": 1, "end_dim": -1})
        return
    _reshape_to(imp, node, x, [dims.product(shape[:axis]), dims.product(shape[axis:])])


@maps("Unsqueeze", "Squeeze")
def _squeeze(imp, node, attrs):
    _only(imp, attrs, {"axes": ...})
    x = node.input[0]
    shape = list(imp.type_of(x).shape)
    axes = _opt(node, 1)
    axes = imp.const(axes, "axes") if axes else attrs.get("axes")
    axes = None if axes is None else int_vector(axes, "axes", scalar_ok=True)
    if node.op_type == "Unsqueeze":
        if axes is None:
            raise imp.unsupported("Unsqueeze without axes")
        rank = len(shape) + len(axes)
        for a in sorted(axis_in(v, rank, "axes") for v in axes):
            shape.insert(a, 1)
    else:
        drop = ({i for i, d in enumerate(shape) if d == 1} if axes is None
                else {axis_in(v, len(shape), "axes") for v in axes})
        if any(shape[i] != 1 for i in drop):
            raise imp.unsupported(f"squeezing axes {sorted(drop)} of shape {shape} (not size 1)")
        shape = [d for i, d in enumerate(shape) if i not in drop]
    _reshape_to(imp, node, x, shape)


@maps("Expand")
def _expand(imp, node, attrs):
    """Constant shape; all ones of at most x's rank change nothing (the legacy exporter's
    ``repeat`` writes one) and alias x. A shape holding run-time dims (``expand_as`` or a
    scatter's value under a dynamic batch: ``Expand(v, Shape(x))``): x expanded over the
    fixed dims, then ``where(mask, y, y)`` with the mask of :func:`run_time_mask`, which
    brings in each run-time dim; x's own dim there must be 1 or that same dim."""
    _only(imp, attrs, {})
    x = node.input[0]
    if not imp.is_const(node.input[1]) and node.input[1] in imp.sym:
        _expand_to_run_time_dims(imp, node, x, imp.shape_value(node.input[1], "shape"))
        return
    shape = int_vector(imp.const(node.input[1], "shape"), "shape")
    imp.check_size("its Expand output", shape)  # before the shape rule multiplies it out
    if set(shape) <= {1} and len(shape) <= len(imp.type_of(x).shape):
        imp.alias(node.output[0], imp.tensor(x))
        return
    imp.emit("expand", [imp.tensor(x)], [node.output[0]], {"shape": shape})


def _expand_to_run_time_dims(imp, node, x: str, target: list) -> None:
    if any(type(d) is int and d < 0 for d in target):
        raise ModelFileError(f"shape {target} has a negative dim")
    have = list(imp.type_of(x).shape)
    rank = max(len(target), len(have))
    want = [1] * (rank - len(target)) + list(target)
    have = [1] * (rank - len(have)) + have
    unsettled = []  # x's run-time dim there is 1 or the target's when the call runs
    for axis, (d, h) in enumerate(zip(want, have)):
        if type(d) is not int and h != 1 and not dims.known_equal(h, d):
            if type(h) is int:
                raise imp.unsupported(f"expanding {x!r} (shape {imp.type_of(x).shape}) to "
                                      f"{target}: its axis {axis} ({h!r}) must be 1 or the "
                                      f"run-time dim {d!r}")
            unsettled.append(axis)
    fixed = [d if type(d) is int else 1 for d in want]
    imp.check_size("its Expand output", fixed)
    y = imp.tensor(x)
    if any(f != 1 for f in fixed) or len(imp.types[y].shape) < rank:
        [y] = imp.emit("expand", [y], [None], {"shape": fixed}, suffix="/fixed")
    mask = run_time_mask(imp, want)
    [y] = imp.emit("where", [mask, y, y], [None if unsettled else node.output[0]])
    for k, axis in enumerate(unsettled):  # x[:, :1] along a run-time t, expanded to p
        source, at = dim_source(imp, want[axis])  # found: run_time_mask read it
        [y] = imp.emit("unflatten", [y, source],
                       [node.output[0] if k == len(unsettled) - 1 else None],
                       {"axis": axis, "sizes": [-1], "like_axes": [at]}, suffix=f".settle{axis}")
    if imp.is_const(x):  # its values are known, not its shape: an index read from the end
        imp.spread[node.output[0]] = imp.const(x)


@maps("Tile")
def _tile(imp, node, attrs):
    """``tile``; repeats holding a run-time dim (RAFT's ``coords.repeat(batch, 1, 1, 1)``
    under a run-time batch), each on an axis of size 1: the fixed repeats tiled, then
    expanded to the run-time ones as Expand does."""
    _only(imp, attrs, {})
    x = node.input[0]
    if not imp.is_const(node.input[1]) and node.input[1] in imp.sym:
        _tile_by_run_time_dims(imp, node, x, imp.shape_value(node.input[1], "repeats"))
        return
    repeats = int_vector(imp.const(node.input[1], "repeats"), "repeats")
    shape = imp.type_of(x).shape
    imp.check_size("its Tile output", [r * d if type(d) is int else r
                                       for r, d in zip(repeats, shape)])
    if set(repeats) <= {1} and len(repeats) == len(shape):
        imp.alias(node.output[0], imp.tensor(x))
        return
    imp.emit("tile", [imp.tensor(x)], [node.output[0]], {"repeats": repeats})


def _tile_by_run_time_dims(imp, node, x: str, repeats: list) -> None:
    shape = list(imp.type_of(x).shape)
    if len(repeats) != len(shape):
        raise ModelFileError(f"repeats {repeats} must have one entry per axis of {x!r} "
                             f"(shape {shape})")
    for axis, (r, d) in enumerate(zip(repeats, shape)):
        if type(r) is not int and d != 1:
            raise imp.unsupported(f"repeats {repeats}: the run-time repeat {r!r} of axis "
                                  f"{axis} needs that axis of size 1 (shape {shape})")
    fixed = [r if type(r) is int else 1 for r in repeats]
    if any(r != 1 for r in fixed):
        tiled = f"{node.output[0]}#tiled"
        imp.emit("tile", [imp.tensor(x)], [tiled], {"repeats": fixed}, suffix="/fixed")
        x = tiled
    have = imp.type_of(x).shape
    _expand_to_run_time_dims(imp, node, x, [h if type(r) is int else r
                                            for r, h in zip(repeats, have)])


@maps("Transpose")
def _transpose(imp, node, attrs):
    _only(imp, attrs, {"perm": ...})
    rank = len(imp.type_of(node.input[0]).shape)
    imp.emit("transpose", [imp.tensor(node.input[0])], [node.output[0]],
             {"perm": attrs.get("perm", list(range(rank))[::-1])})


@maps("ConstantOfShape")
def _constant_of_shape(imp, node, attrs):
    """A shape holding run-time dims (``torch.zeros(x.size(0), 3)`` under a dynamic batch; a
    constant shape was folded): ``where(mask, c, c)``, c the value over the fixed dims, and the
    mask that of :func:`run_time_mask`."""
    _only(imp, attrs, {"value": ...})
    dims = imp.shape_value(node.input[0], "shape")
    value = one_value(attrs.get("value", np.zeros(1, np.float32)), "value")
    if any(type(d) is int and d < 0 for d in dims):
        raise ModelFileError(f"shape {dims} has a negative dim")
    fixed = [d if type(d) is int else 1 for d in dims]
    imp.check_size("its output", fixed)
    mask = run_time_mask(imp, dims)
    c = imp.add_constant(np.full(fixed, value, value.dtype), f"{imp.node_name}.value")
    imp.emit("where", [mask, c, c], [node.output[0]])


def _range_to_a_dim(imp, node, attrs) -> bool:
    """Range over a run-time dim: ``torch.arange(x.shape[1])`` under a dynamic sequence
    length (the positions of a learned positional embedding), ``torch.arange(w,
    dtype=torch.float32)`` (a detector's anchor points, the dim cast to float),
    ``torch.arange(1, t + 1)``, ``torch.arange(0, t, 2)`` (the even positions),
    ``torch.arange(0, w * 8, 8)`` (FCOS's locations of a stride-8 map), counting down,
    ``torch.arange(t - 1, -1, -1)`` (the positions reversed), and from one run-time dim to
    another, ``torch.arange(past, past + t)`` (a decoder's positions after its cache).

    The step k is a nonzero whole number; each end is a whole number or a run-time dim (or
    one cast to float). There are n = ceil(s / |k|) values, s = (limit - start) * sign(k)
    the span. Where n is a dim :func:`run_time_mask` carries, counting up, the values are
    start + |k| * arange(n); counting down, where s is |k| * n (always so for a step of -1),
    the values start - |k| * i are arange(n) reversed (a running sum of ones from the end),
    times |k|, plus limit + |k|; otherwise, where s is a dim it carries, every |k|-th of
    arange(s) reversed, plus limit + 1 (``torch.arange(t - 1, -1, -2)``). A run-time end
    added is its value read when the call runs (:func:`shape_value_tensor`). False for any
    other Range of run-time values, which is refused as before."""
    start, limit, delta = (list(node.input) + ["", "", ""])[:3]
    if not imp.is_const(delta):
        return False
    step = imp.const(delta)
    if step.size != 1 or not _whole(step.item()) or step.item() == 0:
        return False
    k, ends = int(step.item()), []
    for end in (start, limit):
        value = imp.const(end) if imp.is_const(end) else imp.sym.get(
            end, imp.sym_float.get(end))
        if value is None or value.size != 1:
            return False
        [entry] = symbolic.entries(value) if value.dtype == object else [value.item()]
        if type(entry) is not str and not _whole(entry):
            return False
        ends.append(entry if type(entry) is str else int(entry))
    first, last = ends
    m = abs(k)
    span, count = range_length(first, last, k)
    direct = type(count) is str and has_dim(imp, count) and (
        k > 0 or dims.known_equal(span, dims.mul(m, count)))
    if not direct and (k > 0 or type(span) is not str or not has_dim(imp, span)):
        return False
    _only(imp, attrs, {"stash_type": ...})  # opset 27's; it acts on float16 only
    dtype = step.dtype
    if direct:
        y = run_time_arange(imp, [count], 0, dtype=dtype, reverse=k < 0)
        if m != 1:
            y = imp.emit("mul", [y, imp.add_constant(np.asarray(m, dtype),
                                                     f"{node.output[0]}.step")],
                         [None], suffix="/step")[0]
        base, offset = (first, 0) if k > 0 else (last, m)
    else:  # every |k|-th of arange(span) reversed
        y = run_time_arange(imp, [span], 0, dtype=dtype, reverse=True)
        y = imp.emit("slice", [y], [None], {"starts": [0], "ends": [FAR], "axes": [0],
                                            "steps": [m]}, suffix="/step")[0]
        base, offset = last, 1
    if type(base) is int:
        base, offset = 0, base + offset
    if offset != 0:
        y = imp.emit("add", [y, imp.add_constant(np.asarray(offset, dtype),
                                                 f"{node.output[0]}.start")],
                     [None], suffix="/start")[0]
    if base != 0:  # a run-time end, its value read when the call runs
        value = np.empty((), dtype=object)
        value[()] = base
        shape_value_tensor(imp, value, f"{node.output[0]}#end", dtype.name)
        y = imp.emit("add", [y, imp.tensor(f"{node.output[0]}#end")], [None],
                     suffix="/end")[0]
    imp.alias(node.output[0], y)
    return True


def range_length(start, limit, k: int) -> tuple:
    """``(span, n)`` of Range(start, limit, k), each end an int or a run-time dim and k a
    nonzero int: the span (limit - start) * sign(k), like terms added up (``past+seq-past``
    is ``seq``), and the count of values ceil(span / |k|)."""
    m = abs(k)
    span = dims.simplified(dims.sub(limit, start) if k > 0 else dims.sub(start, limit))
    return span, dims.floordiv(dims.add(span, m - 1), m)


def _whole(v) -> bool:
    """Whether the scalar ``v`` is a finite whole number."""
    return bool(np.isfinite(v)) and float(v).is_integer()


ON_RUN_TIME_DIMS["Range"] = _range_to_a_dim


def run_time_arange(imp, dims: list, axis: int, sources: dict | None = None,
                    dtype=np.int64, reverse: bool = False) -> str:
    """``arange(dims[axis])`` laid along ``axis`` of a tensor of rank ``len(dims)`` (1 on
    the other axes), reversed if ``reverse``: a constant for a fixed dim; for a run-time one,
    the running sum (``cumsum``, from the end if ``reverse``) of ones over it
    (``where(mask, 1, 1)``, the mask of :func:`run_time_mask`, ``sources`` as there),
    minus 1."""
    shape = [1] * len(dims)
    shape[axis] = d = dims[axis]
    if type(d) is int:
        values = np.arange(d, dtype=dtype)
        return imp.add_constant((values[::-1] if reverse else values).reshape(shape),
                                f"{imp.node_name}.arange{axis}")
    one = imp.add_constant(np.ones([1] * len(dims), dtype), f"{imp.node_name}.one{axis}")
    [ones] = imp.emit("where", [run_time_mask(imp, shape, sources), one, one], [None],
                      suffix=f"/ones{axis}")
    [count] = imp.emit("cumsum", [ones], [None], {"axis": axis, "reverse": reverse},
                       suffix=f"/count{axis}")
    return imp.emit("sub", [count, one], [None], suffix=f"/arange{axis}")[0]


def dim_source(imp, d) -> tuple[str, int] | None:
    """``(graph tensor, axis)`` of a tensor whose dim there is ``d``, written so or known
    equal (``H//4`` and a conv's ``(H-4)//4+1``): one whose Shape the model took, else the
    first of the graph so far that has it (the model may compute ``H//4`` from the input's
    Shape, where the conv's output has it as a dim); None if none."""
    if d in imp.dim_source:
        return imp.dim_source[d]
    product = dims.as_product(d)
    found = next((v for k, v in imp.dim_source.items() if dims.as_product(k) == product), None)
    if found is None:  # the tensors defined since the last look join the index, once each
        for name, t in itertools.islice(imp.types.items(), imp.dims_indexed, None):
            for axis, have in enumerate(t.shape):
                if type(have) is not int:
                    imp.dims_index.setdefault(dims.as_product(have), (name, axis))
        imp.dims_indexed = len(imp.types)
        found = imp.dims_index.get(product)
    return found


def _derived(imp, d) -> tuple[str, int, int, int] | None:
    """``(x, start, s, q)`` where the run-time dim ``d`` is a floor quotient ``(x+a)//s`` of a
    dim x that a tensor has (``h//2``: ``interpolate(x, size=(h // 2, w // 2))``), or x less
    an int (``t-2``: the dynamo exporter's ``x.unfold(1, 3, 1)``): with a = s * q + r, r in
    [0, s), and start = s - 1 - r, ``range(x)[start::s]`` has d - q entries (where x is at
    least start): q more than that are ``(n+2)//2``, a half spectrum's ``n // 2 + 1``, and
    ``t+1`` (s = 1), a padded tensor's first t + 1 steps. None otherwise."""
    parts = dims.quotient(str(d)) if type(d) is str else None
    if parts is None:  # x//s of a product of dims x that tensors have: (h*w)//4
        whole = dims.whole_quotient(d)
        if whole is None or _factors(imp, whole[0]) is None:
            return None
        return whole[0], whole[1] - 1, whole[1], 0
    if parts[1:] == (0, 1) or dim_source(imp, parts[0]) is None:
        return None
    x, a, s = parts
    q = max(a // s, 0)
    return (x, s - 1 - (a - s * q), s, q) if s - 1 - (a - s * q) >= 0 else None


def has_dim(imp, d) -> bool:
    """Whether :func:`run_time_mask` can carry the run-time dim ``d``."""
    return dim_source(imp, d) is not None or _derived(imp, d) is not None or \
        _summands(imp, d) is not None or _factors(imp, d) is not None or \
        _difference(imp, d) is not None


def _difference(imp, d) -> tuple | None:
    """``(a, b)`` where the run-time dim ``d`` is ``a - b`` of two dims that masks carry and
    not negative at any size (:func:`.symbolic.maybe_negative`): a center crop's end
    ``t - t//4``. None otherwise."""
    const, terms = dims.as_sum(d) if type(d) is str else (0, [])
    if const or len(terms) != 2 or sorted(sign for sign, _ in terms) != [-1, 1] or \
            symbolic.maybe_negative(d):
        return None
    a, b = (term for _, term in sorted(terms, reverse=True))
    return (a, b) if all(has_dim(imp, t) for t in (a, b)) else None


def _difference_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_difference` dim ``a - b``: the mask of a, its first b
    entries sliced off (read from b's mask when the call runs)."""
    found = _difference(imp, d)
    if found is None:
        return None
    a, b = found
    [y] = imp.emit("slice", [run_time_mask(imp, [a]), run_time_mask(imp, [b])], [None],
                   {"starts": [0], "ends": [FAR], "axes": [0], "like_starts": [0]},
                   suffix=f".{d}.less")
    return y, 0


def _factors(imp, d) -> tuple[int, list] | None:
    """``(k, [d1, d2, ...])`` where the run-time dim ``d`` is the product ``k * d1 * d2 * ...``
    of dims that tensors carry, one per name of ``d``, and an int k >= 1, two or more dims or
    one and k > 1: a detector's anchor count per level, a feature map's height times its width
    (``torch.full((h * w, 1), stride)`` under a run-time image size), twice a length (the
    dynamo exporter's linear ``F.interpolate(x, scale_factor=2)`` takes a Range of ``2*t``),
    a multiple of a quotient (Swin's map padded to a multiple of its window, ``4*((t+3)//4)``:
    :func:`_derived`). None otherwise."""
    coefficient, names = dims.as_product(d) if type(d) is str else (1, ())
    if len(names) < 2 and not (names and coefficient > 1):
        return None
    parts = []
    for name in names:
        if dim_source(imp, name) is not None:  # else the index is now up to date
            parts.append(name)
            continue
        found = next(((c, source) for (c, have), source in imp.dims_index.items()
                      if have == (name,) and c > 0 and coefficient % c == 0), None)
        if found is None and _derived(imp, name) is not None:  # (t+3)//4: a mask of its own
            parts.append(name)
            continue
        if found is None:
            return None
        c, (tensor, axis) = found
        coefficient //= c
        parts.append(imp.types[tensor].shape[axis])
    return coefficient, parts


def _product_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_factors` dim ``d``: the mask over its factors, one per
    axis (and k entries on one more), flattened."""
    found = _factors(imp, d)
    if found is None:
        return None
    k, parts = found
    mask = run_time_mask(imp, parts + ([k] if k > 1 else []))
    if k > 1:
        imp.check_size(f"run-time size {d!r}: the mask of its factor {k}", [k])
        wide = imp.add_constant(np.zeros([1] * len(parts) + [k], bool), f"{imp.node_name}.{d}.k")
        mask = imp.emit("or", [mask, wide], [None], suffix=f".{d}.times{k}")[0]
    return imp.emit("reshape", [mask], [None], {"shape": [-1]}, suffix=f".{d}.product")[0], 0


def _summands(imp, d) -> tuple[int, list] | None:
    """``(c, [d1, d2, ...])`` where the run-time dim ``d`` is the sum ``d1 + d2 + ... + c``
    of dims that tensors carry (:func:`dim_source`, :func:`_derived`, :func:`_factors`) and an
    int c >= 0, two or more dims or one and c > 0: a decoder's key length ``past+seq``, its
    cache's length and the new tokens'; a map padded by one step and then to a multiple of 4,
    ``4*(t//4)+4``. None otherwise."""
    const, terms = dims.as_sum(d) if type(d) is str else (0, [])
    if len(terms) + (const > 0) < 2 or const < 0 or any(sign != 1 for sign, _ in terms):
        return None
    parts = [term for _, term in terms]
    if any(dim_source(imp, t) is None and _derived(imp, t) is None and _factors(imp, t) is None
           for t in parts):
        return None
    return const, parts


def _summed_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_summands` dim ``d``: its parts' masks concatenated."""
    found = _summands(imp, d)
    if found is None:
        return None
    const, parts = found
    masks = [run_time_mask(imp, [t]) for t in parts]
    if const:
        imp.check_size(f"run-time size {d!r}: the mask of its {const} entries more", [const])
        masks.append(imp.add_constant(np.ones(const, bool), f"{imp.node_name}.{d}.ones"))
    return imp.emit("concat", masks, [None], {"axis": 0}, suffix=f".{d}.sum")[0], 0


def _derived_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_derived` dim ``d``: the mask of x sliced from start by s
    (and q entries more)."""
    derived = _derived(imp, d)
    if derived is None:
        return None
    x, start, s, q = derived
    [y] = imp.emit("slice", [run_time_mask(imp, [x])], [None],
                   {"starts": [start], "ends": [FAR], "axes": [0], "steps": [s]},
                   suffix=f".{x}.from{start}.by{s}")
    if q:
        imp.check_size(f"run-time size {d!r}: the mask of its {q} entries more", [q])
        more = imp.add_constant(np.ones(q, bool), f"{imp.node_name}.{d}.more")
        [y] = imp.emit("concat", [y, more], [None], {"axis": 0}, suffix=f".{d}.more")
    return y, 0


def run_time_mask(imp, dims: list, sources: dict | None = None) -> str:
    """A bool tensor of rank ``len(dims)`` that carries each run-time dim of ``dims`` on its
    axis (1 on the others), read back from a tensor that has it (``equal`` of a
    one-element-wide slice of it with itself): the one in ``sources`` (dim -> (graph tensor,
    axis)), else :func:`dim_source`'s. The slice of another run-time dim of that tensor is
    summed away (its size is 1 only when the call gives the dim one)."""
    mask = None
    for axis, d in enumerate(dims):
        if type(d) is int:
            continue
        known = (sources or {}).get(d) or dim_source(imp, d) or _derived_source(imp, d) or \
            _summed_source(imp, d) or _product_source(imp, d) or _difference_source(imp, d)
        if known is None:
            raise imp.unsupported(f"shape {dims}: run-time dim {d!r} is a dim of no tensor of "
                                  f"the graph so far, so it cannot be read when the call runs")
        source, at = known
        rank = len(imp.types[source].shape)
        y = source
        if rank > 1:
            others = [a for a in range(rank) if a != at]
            y = imp.emit("slice", [y], [None], {"starts": [0] * len(others),
                                                "ends": [1] * len(others), "axes": others},
                         suffix=f".{axis}.slice")[0]
            free = [a for a in others if type(imp.types[source].shape[a]) is not int]
            if free:
                if imp.types[y].dtype == "bool":
                    y = imp.emit("cast", [y], [None], {"dtype": "uint8"},
                                 suffix=f".{axis}.numeric")[0]
                y = imp.emit("sum", [y], [None], {"axes": free, "keepdim": True},
                             suffix=f".{axis}.sum")[0]
        y = imp.emit("reshape", [y], [None], {"shape": [1] * axis + [-1] + [1] * (
            len(dims) - axis - 1)}, suffix=f".{axis}.dim")[0]
        y = imp.emit("equal", [y, y], [None], suffix=f".{axis}.mask")[0]
        mask = y if mask is None else imp.emit("or", [mask, y], [None],
                                                suffix=f".{axis}.masks")[0]
    if mask is None:  # not reached: a fixed shape is folded
        raise imp.unsupported(f"shape {dims} is fixed but was not folded")
    return mask


@maps("Slice")
def _slice(imp, node, attrs):
    _only(imp, attrs, {})
    x = node.input[0]
    shape = imp.type_of(x).shape
    axes = imp.const(_opt(node, 3), "axes") if _opt(node, 3) else None
    steps = imp.const(_opt(node, 4), "steps") if _opt(node, 4) else None
    late: dict[tuple[str, int], object] = {}  # (bound, k) -> a run-time dim like gives
    if node.input[1] in imp.sym or node.input[2] in imp.sym:
        starts, ends = _run_time_bounds(imp, node, shape, axes, steps, late)
    else:
        starts, ends = imp.const(node.input[1], "starts"), imp.const(node.input[2], "ends")
    sliced = onnx_slice(shape, starts, ends, axes, steps)
    # a run-time axis sliced whole (from 0 to the end by 1) keeps its dim as it is
    kept = [k for k, c in enumerate(sliced) if type(shape[c[0]]) is int or c[1:] != (0, FAR, 1)
            or ("starts", k) in late or ("ends", k) in late]
    if not kept:
        imp.alias(node.output[0], imp.tensor(x))
        return
    sliced = [sliced[k] for k in kept]
    ins, extra = [imp.tensor(x)], {}
    if late:
        order = list(late)
        like, like_axes = sizes_like(imp, [late[key] for key in order])
        at = dict(zip(order, like_axes))
        ins.append(like)
        extra = {f"like_{bound}": [at.get((bound, k), -1) for k in kept]
                 for bound in ("starts", "ends")}
    imp.emit("slice", ins, [node.output[0]],
             {"starts": [s for _, s, _, _ in sliced], "ends": [e for _, _, e, _ in sliced],
              "axes": [a for a, _, _, _ in sliced], "steps": [st for _, _, _, st in sliced],
              **extra})


def _reaches(end, d) -> bool:
    """Whether ``end`` is at least the dim ``d`` at every size: d itself, or s times the
    quotient ``(d+a)//s`` with a >= s - 1 (torch.chunk's last end, ``2*((h+1)//2)``)."""
    if dims.known_equal(end, d):
        return True
    factor, names = dims.as_product(end)
    parts = dims.quotient(names[0]) if len(names) == 1 else None
    return (parts is not None and dims.known_equal(parts[0], d) and parts[2] == factor
            and parts[1] >= factor - 1)


def _run_time_bounds(imp, node, shape, axes, steps, late: dict) -> tuple[list, list]:
    """A Slice's starts and ends holding run-time dims, as ints for :func:`onnx_slice`.

    An end that is the input's own dim along its axis, with a positive step, slices to the
    end (:data:`.fold.FAR`): the legacy exporter's scatter and scatter_add slice their source
    to the index's shape, ``Slice(src, 0, Shape(index))``, under a dynamic batch or length the
    source's own. Another run-time bound on an axis sliced by 1, its other bound a start >= 0
    or an end to the end, is read when the call runs from a tensor that carries it
    (:func:`sizes_like`; ``x[:, :, : h // 2]``, torch.chunk's parts, whose last end reaches
    the dim: :func:`_reaches`; on a fixed axis only an end, BERT's ``position_ids[:, :seq]``),
    written 0 here and recorded in ``late`` under ``(bound, k)``. Any other run-time bound is
    refused, naming it."""
    starts = (imp.shape_value(node.input[1], "starts") if node.input[1] in imp.sym
              else int_vector(imp.const(node.input[1], "starts"), "starts"))
    ends = (imp.shape_value(node.input[2], "ends") if node.input[2] in imp.sym
            else int_vector(imp.const(node.input[2], "ends"), "ends"))
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [
        axis_in(a, rank, "axes") for a in int_vector(axes, "axes")]
    steps = [1] * len(starts) if steps is None else int_vector(steps, "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelFileError(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                             f"must have one entry per sliced axis")
    starts, ends = list(starts), list(ends)
    for k, (axis, start, end, step) in enumerate(zip(axes, starts, ends, steps)):
        if type(end) is not int and step > 0 and _reaches(end, shape[axis]):
            ends[k] = end = FAR
        if type(start) is not int and step > 0 and dims.add(start, shape[axis]) == 0:
            starts[k] = start = 0  # minus the dim: x[..., -d:] of d entries, Mamba's conv
        both = type(start) is not int and type(end) is not int
        if both and symbolic.maybe_negative(dims.sub(end, start)):
            raise imp.unsupported(
                f"starts {starts}, ends {ends}: along axis {axis} (of dim {shape[axis]!r}) the "
                f"end {end!r} may be less than the start {start!r} at some size; run-time "
                f"bounds on both sides need an end at or after the start at every size")
        for bound, value, fine in (("starts", start, both or type(end) is int and end >= FAR),
                                   ("ends", end, both or type(start) is int and start >= 0)):
            if type(value) is int:
                continue
            run_time_axis = type(shape[axis]) is not int
            if not ((run_time_axis or bound == "ends") and step == 1 and fine
                    and has_dim(imp, value)):
                raise imp.unsupported(
                    f"{bound} {starts if bound == 'starts' else ends}: {value!r} along axis "
                    f"{axis} (of dim {shape[axis]!r}) is a run-time dim; "
                    f"{'a start' if bound == 'starts' else 'an end'} must be a constant, an end "
                    f"the input's own dim there with a positive step, or one a tensor of the "
                    f"graph carries on an axis sliced by 1 whose other bound is a start >= 0, "
                    f"an end to the end or one such too (on a fixed axis, only an end)")
            late[(bound, k)] = value
            (starts if bound == "starts" else ends)[k] = 0
    return np.array(starts, np.int64), np.array(ends, np.int64)


def _equal_parts(imp, node, x: str, axis: int) -> None:
    """Split without sizes before opset 18 (F.glu from the legacy exporter at opsets 11 to 17):
    as many equal parts as outputs, which the dim must hold whole when the call runs, as
    onnxruntime requires: an ``unflatten`` of the axis to (parts, -1), which checks that, a
    ``split`` of the parts and a ``flatten`` of each back to one axis."""
    n = len(node.output)
    [y] = imp.emit("unflatten", [imp.tensor(x)], [None], {"axis": axis, "sizes": [n, -1]},
                   suffix=".parts")
    parts = imp.emit("split", [y], [None] * n, {"axis": axis, "sizes": [1] * n},
                     suffix=".part")
    for out, part in zip(node.output, parts):
        if out:
            imp.emit("flatten", [part], [out], {"start_dim": axis, "end_dim": axis + 1},
                     suffix=f".{out}")


def _halves(imp, node, x: str, size, axis: int) -> None:
    """Split's two halves of a run-time dim (``num_outputs=2``, opset 18: F.glu, torch.chunk
    by 2 from either exporter): the first ``(size + 1) // 2`` entries and the rest, each a
    ``slice`` whose bound is read from a mask that long when the call runs. (Three parts
    or more would be a negative last part at some sizes, which onnxruntime refuses: refused.)"""
    half = dims.floordiv(dims.add(size, 1), 2)
    like, [at] = sizes_like(imp, [half])
    for out, bounds in zip(node.output, ({"ends": [0], "like_ends": [at]},
                                         {"ends": [FAR], "like_starts": [at]})):
        if out:
            imp.emit("slice", [imp.tensor(x), like], [out],
                     {"starts": [0], "axes": [axis], **bounds}, suffix=f".{out}")


@maps("Split")
def _split(imp, node, attrs):
    _only(imp, attrs, {"axis": ..., "num_outputs": ...})
    x = node.input[0]
    shape = imp.type_of(x).shape
    axis = axis_in(attrs.get("axis", 0), len(shape))
    given = imp.const(_opt(node, 1), "split") if _opt(node, 1) else None
    if given is None and type(shape[axis]) is not int:
        if attrs.get("num_outputs") is None:
            _equal_parts(imp, node, x, axis)
            return
        if attrs.get("num_outputs") == 2 == len(node.output):
            _halves(imp, node, x, shape[axis], axis)
            return
        raise imp.unsupported(f"splitting a run-time dim of {shape} without sizes (into "
                              f"num_outputs=2 halves only, not {attrs.get('num_outputs')})")
    sizes = split_sizes(shape[axis], given, attrs.get("num_outputs"), len(node.output))
    imp.emit("split", [imp.tensor(x)], list(node.output), {"axis": axis, "sizes": sizes})


@maps("Pad")
def _pad(imp, node, attrs):
    _only(imp, attrs, {"mode": ...})
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise imp.unsupported(f"mode={mode!r} is not supported (constant, reflect, edge, wrap)")
    x = node.input[0]
    rank = len(imp.type_of(x).shape)
    pads = (imp.shape_value(node.input[1], "pads") if node.input[1] in imp.sym
            else int_vector(imp.const(node.input[1], "pads"), "pads"))
    value = _opt(node, 2)
    value = 0.0 if value is None else float(one_value(imp.const(value, "constant_value"),
                                                      "constant_value"))
    axes = _opt(node, 3)
    axes = (list(range(rank)) if axes is None else
            [axis_in(a, rank, "axes") for a in int_vector(imp.const(axes, "axes"), "axes")])
    if len(pads) != 2 * len(axes):
        raise ModelFileError(f"pads {_few(pads)} must be {2 * len(axes)} values, two per axis "
                             f"of {axes}")
    if any(type(p) is not int for p in pads):
        _run_time_pads(imp, node, mode, value, {a: (pads[i], pads[i + len(axes)])
                                                for i, a in enumerate(axes)})
        return
    if mode not in ("constant", "edge") and any(p < 0 for p in pads):
        raise imp.unsupported(f"pads {_few(pads)}: a negative pad (a crop) is supported with "
                              f"mode 'constant' or 'edge', not {mode!r}")
    pairs = [[0, 0] for _ in range(rank)]
    for i, a in enumerate(axes):
        pairs[a] = [pads[i], pads[i + len(axes)]]
    if mode == "wrap":
        _wrap(imp, node, pairs)
        return
    y = _cropped(imp, x, pairs)
    if not any(p > 0 for pair in pairs for p in pair):
        imp.alias(node.output[0], y)
        return
    imp.emit("pad", [y], [node.output[0]],
             {"pads": [[max(p, 0) for p in pair] for pair in pairs], "mode": mode,
              "value": value})


def _run_time_pads(imp, node, mode: str, value: float, pairs: dict) -> None:
    """A Pad whose pads hold run-time dims (axis -> (before, after)): Swin's pad of a map to a
    multiple of its window, ``F.pad(x, (0, 0, 0, (ws - h % ws) % ws))``, under a run-time
    height. Fixed pads are a ``pad`` first (a crop a ``slice``); then each axis with a
    run-time one is a gather of its D = d + before + after positions, ``arange(D) - before``
    clamped to [0, d), from the input (:func:`.gather._runtime_gather`), and, in constant
    mode, ``where`` the position is inside [0, d), else the value; edge mode keeps the
    clamped gather; reflect mode gathers at the position mirrored at both ends, ``last -
    |last - |p||`` (``last = d - 1``), and at -1 where a pad exceeds ``last``, so that call
    is an IndexRangeError naming the node, as onnxruntime refuses it. D must be a dim a mask
    can carry (:func:`run_time_arange`), else refused naming it. Wrap mode is refused."""
    from .gather import _runtime_gather

    if mode not in ("constant", "edge", "reflect"):
        raise imp.unsupported(f"pads {[p for pair in pairs.values() for p in pair]} hold "
                              f"run-time dims: supported with mode 'constant', 'edge' or "
                              f"'reflect', not {mode!r}")
    x = node.input[0]
    rank = len(imp.type_of(x).shape)
    fixed = [list(pairs[a]) if a in pairs and all(type(p) is int for p in pairs[a]) else [0, 0]
             for a in range(rank)]  # an axis with a run-time pad takes both of its own below
    y = _cropped(imp, x, fixed)
    if any(p > 0 for pair in fixed for p in pair):
        [y] = imp.emit("pad", [y], [None], {"pads": [[max(p, 0) for p in pair] for pair in fixed],
                                            "mode": mode, "value": value}, suffix="/fixed")
    numpy_dtype = dtypes.to_numpy(imp.types[y].dtype)
    for a, pair in pairs.items():
        if all(type(p) is int for p in pair):
            continue
        d = imp.types[y].shape[a]
        before, after = pair
        total = dims.simplified(dims.add(dims.add(d, before), after))
        tag = f"/pad{a}"
        const = {what: size_tensor(imp, n, f"{tag}.{what}") for what, n in (
            ("before", before), ("dim", d), ("zero", 0), ("one", 1))}
        arange = run_time_arange(imp, [total], 0)
        [at] = imp.emit("sub", [arange, const["before"]], [None], suffix=f"{tag}.positions")
        [last] = imp.emit("sub", [const["dim"], const["one"]], [None], suffix=f"{tag}.last")
        if mode == "reflect":
            index = _reflected(imp, at, last, const["zero"], tag)
        else:
            [index] = imp.emit("max", [at, const["zero"]], [None], suffix=f"{tag}.from_0")
            [index] = imp.emit("min", [index, last], [None], suffix=f"{tag}.to_last")
        gathered = _runtime_gather(imp, node, y, index, [total], a, graph=True, internal=True)
        if mode != "constant":
            y = gathered
            continue
        [inside] = imp.emit("greater_equal", [at, const["zero"]], [None], suffix=f"{tag}.in")
        [short] = imp.emit("less", [at, const["dim"]], [None], suffix=f"{tag}.short")
        [inside] = imp.emit("and", [inside, short], [None], suffix=f"{tag}.inside")
        [inside] = imp.emit("reshape", [inside], [None], {"shape": [1] * a + [-1] + [1] * (
            rank - a - 1)}, suffix=f"{tag}.along")
        fill = imp.add_constant(np.array(value, numpy_dtype), f"{imp.node_name}.value")
        [y] = imp.emit("where", [inside, gathered, fill], [None], suffix=f"{tag}.padded")
    imp.alias(node.output[0], y)


def _reflected(imp, at: str, last: str, zero: str, tag: str) -> str:
    """Positions ``at`` (from -before to last + after) mirrored into [0, last] as reflect
    mode pads, ``last - |last - |at||``: a pad longer than the dim less one, which
    onnxruntime refuses, is a position below 0 (an after one mirrors to one by itself, a
    before one is made -1: ``at`` below -last)."""
    def step(op, ins, name):
        return imp.emit(op, ins, [None], suffix=f"{tag}.{name}")[0]

    folded = step("sub", [last, step("abs", [step("sub", [last, step("abs", [at], "front")],
                                                  "from_end")], "back")], "mirrored")
    below = step("less", [at, step("sub", [zero, last], "minus_last")], "before_too_far")
    minus_one = imp.add_constant(np.array([-1], np.int64), f"{imp.node_name}{tag}.refused")
    return step("where", [below, minus_one, folded], "reflect")


def _cropped(imp, x: str, pairs: list) -> str:
    """The graph tensor of ``x`` with its negative pads cut off (``F.pad(x, (1, -1))``, kaldi
    fbank's shift of the signal by one step): a ``slice`` of each such axis, a start from
    the front and an end counted from the back; ``x`` itself where there are none. Cutting
    a fixed dim to below 0 is refused, as onnxruntime refuses it."""
    shape = imp.type_of(x).shape
    cut = [(a, -min(before, 0), min(after, 0) or FAR) for a, (before, after) in enumerate(pairs)
           if before < 0 or after < 0]
    if not cut:
        return imp.tensor(x)
    for a, start, end in cut:
        if type(shape[a]) is int and start - (0 if end == FAR else end) > shape[a]:
            raise ModelFileError(f"pads {pairs[a]} on axis {a} cut more than its "
                                 f"{shape[a]} entries")
    return imp.emit("slice", [imp.tensor(x)], [None],
                    {"starts": [c[1] for c in cut], "ends": [c[2] for c in cut],
                     "axes": [c[0] for c in cut]}, suffix="/crop")[0]


@maps("CenterCropPad")
def _center_crop_pad(imp, node, attrs):
    """CenterCropPad (opset 18; an image preprocessing graph's center crop): on each of
    ``axes`` a window of the target size centred on the input, a ``slice`` from
    floor((dim - size) / 2) where the size is smaller, a zero ``pad`` of floor((size - dim) / 2)
    before where it is larger (as the ONNX reference and onnxruntime). The sizes a constant,
    the axes' dims static."""
    _only(imp, attrs, {"axes": ...})
    x = node.input[0]
    shape = list(imp.type_of(x).shape)
    rank = len(shape)
    sizes = int_vector(imp.const(node.input[1], "shape"), "shape")
    given = attrs.get("axes")
    axes = list(range(rank)) if given is None else [axis_in(a, rank, "axes") for a in given]
    if len(sizes) != len(axes) or len(set(axes)) != len(axes) or min(sizes, default=1) < 1:
        raise ModelFileError(f"shape {_few(sizes)} must be one size >= 1 for each of the axes "
                             f"{axes} (distinct) of {x!r}, shape {shape}")
    starts, ends, cropped = [], [], []
    pairs = [[0, 0] for _ in range(rank)]
    for a, size in zip(axes, sizes):
        dim = shape[a]
        if type(dim) is not int:
            raise imp.unsupported(f"axis {a} of {x!r} (shape {shape}) is a run-time dim: the "
                                  f"crop or pad is worked out from a fixed dim")
        if size < dim:
            starts.append((dim - size) // 2)
            ends.append(starts[-1] + size)
            cropped.append(a)
        elif size > dim:
            pairs[a] = [(size - dim) // 2, size - dim - (size - dim) // 2]
    padded = any(before or after for before, after in pairs)
    y, out = imp.tensor(x), node.output[0]
    if cropped:
        [y] = imp.emit("slice", [y], [None if padded else out],
                       {"starts": starts, "ends": ends, "axes": cropped,
                        "steps": [1] * len(cropped)}, suffix="/crop" if padded else "")
    if padded:
        imp.emit("pad", [y], [out], {"pads": pairs, "mode": "constant", "value": 0.0})
    elif not cropped:
        imp.emit("identity", [y], [out])


def _wrap(imp, node, pairs: list) -> None:
    """Pad's wrap mode (torch's circular padding), axis by axis: the last ``before`` and the
    first ``after`` entries of the axis concatenated around it; each pad at most the dim."""
    x = node.input[0]
    shape = imp.type_of(x).shape
    y = imp.tensor(x)
    padded = [a for a, (before, after) in enumerate(pairs) if before or after]
    if not padded:
        imp.emit("identity", [y], [node.output[0]])
    for a in padded:
        (before, after), d = pairs[a], shape[a]
        if type(d) is not int or max(before, after) > d:
            raise imp.unsupported(f"wrap pads {pairs[a]} on axis {a} of input shape "
                                  f"{list(shape)}: each must be at most the dim, a static one")
        parts = [imp.emit("slice", [y], [None], {"starts": [start], "ends": [end], "axes": [a]},
                          suffix=f"/{a}.{side}")[0]
                 for start, end, side, n in ((d - before, d, "before", before),
                                             (0, after, "after", after)) if n]
        parts.insert(1 if before else 0, y)
        [y] = imp.emit("concat", parts, [node.output[0] if a == padded[-1] else None],
                       {"axis": a}, suffix="" if a == padded[-1] else f"/{a}")
