"""ONNX's shape plumbing: Concat, Reshape, Flatten, Squeeze / Unsqueeze, Expand, Tile,
Transpose, ConstantOfShape, Range over a run-time dim, Slice and Split. Registered in
:data:`.ops.MAPPERS` on import; Pad and CenterCropPad are :mod:`.pads`'. Shapes that hold
run-time dims read them from tensors when the call runs: :mod:`.run_time_sizes`."""

from __future__ import annotations

import numpy as np

from abi.ops import dims

from ..errors import ModelFileError
from . import symbolic
from .fold import (FAR, axis_in, flatten_axis, int_vector, one_value, onnx_slice,
                   reshape_target, split_sizes)
from .ops import ON_RUN_TIME_DIMS, _only, _opt, maps
from .run_time_sizes import (dim_source, filled, has_dim, run_time_arange, run_time_mask,
                             shape_value_tensor, sizes_like)


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
    constant shape was folded): :func:`filled`."""
    _only(imp, attrs, {"value": ...})
    dims = imp.shape_value(node.input[0], "shape")
    value = one_value(attrs.get("value", np.zeros(1, np.float32)), "value")
    if any(type(d) is int and d < 0 for d in dims):
        raise ModelFileError(f"shape {dims} has a negative dim")
    filled(imp, dims, value, node.output[0])


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


