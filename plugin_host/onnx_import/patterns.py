"""Decompositions recognized as one layer op.

Some exporters write a layer as a chain of primitive ops the ABI has no glue op for. torch's
default exporter writes ``nn.RMSNorm`` as ``Pow(x, 2) -> ReduceMean(last axis, keepdims) ->
Add(eps) -> Sqrt -> Reciprocal -> Mul(x, .) [-> Mul(weight)]``; :func:`rms_norm` folds that
chain into one ``rms_norm`` node. A pattern function returns False when the chain does not match
exactly (the node is then mapped on its own, and refused if it has no mapping), and only
matches when every intermediate value feeds the next node alone and is not a graph output.

``SplitToSequence`` read only through ``SequenceAt`` at constant positions (torch's dynamo
exporter without its optimizer writes ``chunk`` so) becomes one ``split``. A constant ``Pad``
of -inf read by a ``MaxPool`` alone (timm's "same" max pooling) becomes one ``max_pool`` whose
padding, implicitly -inf, holds the Pad's (:func:`padded_max_pool`).

Two Slices of one axis at a bound computed when the call runs, concatenated the other way round
(``Concat(x[m:], x[:m])``: torch's dynamo exporter writes ``torch.roll`` along a run-time dim
so), become one gather along the axis (:func:`rolled_slices`).

Decompositions made of ops that do have glue ops (torch's LSTMCell, GroupNorm and GELU before
opset 20) are mapped one to one during the walk and recognized afterwards, in :mod:`.fusion`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .convert import attributes

__all__ = ["PATTERNS"]


def _next(imp, tensor: str, op: str):
    """``(index, node)`` of the only consumer of ``tensor`` when it is an ``op`` node."""
    users = imp.consumers.get(tensor, [])
    if len(users) != 1 or tensor in imp.graph_outputs:
        return None
    node = imp.model.graph.node[users[0]]
    return (users[0], node) if node.op_type == op else None


def _scalar(imp, name: str) -> float | None:
    v = imp.consts.get(name)
    return float(v.reshape(())) if v is not None and v.size == 1 else None


def _other(node, tensor: str) -> str | None:
    ins = list(node.input)
    if len(ins) != 2 or tensor not in ins:
        return None
    return ins[1] if ins[0] == tensor else ins[0]


def rms_norm(imp, pow_node, attrs: dict, index: int) -> bool:
    x = pow_node.input[0]
    if x in imp.consts or _scalar(imp, pow_node.input[1]) != 2.0:
        return False
    rank = len(imp.type_of(x).shape)
    chain = []
    mean = _next(imp, pow_node.output[0], "ReduceMean")
    if mean is None:
        return False
    chain.append(mean[0])
    m = mean[1]
    axes = (imp.consts.get(m.input[1]) if len(m.input) > 1 and m.input[1] else
            next((list(a.ints) for a in m.attribute if a.name == "axes"), None))
    keep = next((a.i for a in m.attribute if a.name == "keepdims"), 1)
    if axes is None or not keep or np.asarray(axes).dtype.kind not in "iu" or \
            [int(a) for a in np.atleast_1d(axes)] not in ([rank - 1], [-1]):
        return False
    add = _next(imp, m.output[0], "Add")
    if add is None:
        return False
    eps = _scalar(imp, _other(add[1], m.output[0]) or "")
    sqrt = _next(imp, add[1].output[0], "Sqrt")
    if eps is None or eps <= 0 or sqrt is None:
        return False
    chain += [add[0], sqrt[0]]
    recip = _next(imp, sqrt[1].output[0], "Reciprocal")
    if recip is None:
        return False
    chain.append(recip[0])
    scale = _next(imp, recip[1].output[0], "Mul")
    if scale is None or _other(scale[1], recip[1].output[0]) != x:
        return False
    chain.append(scale[0])
    out, weight = scale[1].output[0], None
    affine = _next(imp, out, "Mul")
    if affine is not None:
        w = _other(affine[1], out)
        if w in imp.consts and imp.consts[w].shape == imp.type_of(x).shape[-1:]:
            chain.append(affine[0])
            out, weight = affine[1].output[0], w
    imp.emit("rms_norm", [imp.tensor(x), weight and imp.tensor(weight)], [out], {"eps": eps},
             suffix=".rms_norm")
    imp.skip.update(chain)
    return True


def split_to_sequence(imp, node, attrs: dict, index: int) -> bool:
    """``SplitToSequence`` read only by ``SequenceAt`` with constant positions: one ``split``."""
    x = node.input[0]
    seq = node.output[0]
    users = imp.consumers.get(seq, [])
    if x in imp.consts or seq in imp.graph_outputs or not users or \
            not set(attrs) <= {"axis", "keepdims"} or attrs.get("keepdims", 1) != 1:
        return False
    shape = imp.type_of(x).shape
    axis = attrs.get("axis", 0)
    if type(axis) is not int or not -len(shape) <= axis < len(shape):
        return False
    axis %= len(shape)
    sizes = imp.consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if sizes is None or sizes.ndim > 1 or sizes.dtype.kind not in "iu" or \
            type(shape[axis]) is not int:
        return False
    if sizes.ndim == 0:  # one chunk size: equal parts, the last one smaller
        dim, step = shape[axis], int(sizes)
        if step < 1:
            return False
        sizes = np.array([min(step, dim - i) for i in range(0, dim, step)])
    if (sizes < 0).any() or int(sizes.sum()) != shape[axis]:
        return False
    outputs: list[str | None] = [None] * len(sizes)
    for u in users:
        at = imp.model.graph.node[u]
        pos = imp.consts.get(at.input[1]) if at.op_type == "SequenceAt" and \
            len(at.input) > 1 else None
        if pos is None or pos.size != 1 or pos.dtype.kind not in "iu" or \
                not -len(sizes) <= int(pos.reshape(())) < len(sizes) or \
                outputs[int(pos.reshape(())) % len(sizes)]:
            return False
        outputs[int(pos.reshape(())) % len(sizes)] = at.output[0]
    imp.emit("split", [imp.tensor(x)], outputs, {"axis": axis, "sizes": [int(v) for v in sizes]})
    imp.skip.update(users)
    return True


def padded_max_pool(imp, node, attrs: dict, index: int) -> bool:
    """A constant Pad of -inf on the spatial axes read only by a MaxPool (timm's
    ``MaxPool2dSame``, TensorFlow's "same" pooling in EfficientDet's BiFPN, as the legacy
    exporter writes it): one ``max_pool`` whose padding, implicitly -inf, is the Pad's plus
    the pool's own. Only where that padding is one the op takes (each side less than the
    kernel) and without ``ceil_mode`` (whose last window may start in the padding, which the
    op leaves out and onnxruntime would read)."""
    value = _scalar(imp, node.input[2]) if len(node.input) > 2 and node.input[2] else None
    pads = imp.consts.get(node.input[1]) if len(node.input) > 1 else None
    x = node.input[0]
    if attrs.get("mode", "constant") != "constant" or value != -np.inf or pads is None or \
            pads.dtype.kind not in "iu" or (len(node.input) > 3 and node.input[3]) or \
            x in imp.consts:
        return False
    shape = imp.type_of(x).shape
    rank = len(shape)
    pool = _next(imp, node.output[0], "MaxPool")
    if pool is None or not 3 <= rank <= 5 or pads.shape != (2 * rank,):
        return False
    pool_attrs = attributes(pool[1], imp.limits)
    spatial = rank - 2
    kernel = pool_attrs.get("kernel_shape")
    if len(pool[1].output) > 1 and pool[1].output[1] or kernel is None or \
            len(kernel) != spatial or pool_attrs.get("ceil_mode", 0) or \
            pool_attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or \
            not set(pool_attrs) <= {"kernel_shape", "strides", "pads", "dilations", "ceil_mode",
                                    "auto_pad", "storage_order"} or \
            pool_attrs.get("storage_order", 0):
        return False
    before, after = [int(p) for p in pads[:rank]], [int(p) for p in pads[rank:]]
    own = pool_attrs.get("pads", [0] * 2 * spatial)
    if any(before[:2] + after[:2]) or min(before + after) < 0 or len(own) != 2 * spatial:
        return False
    padding = [[before[2 + i] + own[i], after[2 + i] + own[spatial + i]] for i in range(spatial)]
    if any(max(pair) >= k for pair, k in zip(padding, kernel)):
        return False
    imp.emit("max_pool", [imp.tensor(x)], [pool[1].output[0]],
             {"kernel_size": list(kernel), "stride": pool_attrs.get("strides", [1] * spatial),
              "padding": padding, "ceil_mode": False,
              "dilation": pool_attrs.get("dilations", [1] * spatial)}, suffix=".max_pool")
    imp.skip.add(pool[0])
    return True


def _one_axis_slice(imp, node) -> tuple[str, int, str, str] | None:
    """``(x, axis, starts, ends)`` of a Slice of one axis by 1 (ONNX names of its bounds,
    each one entry) whose inputs are all defined by now, or None."""
    ins = list(node.input) + [""] * (5 - len(node.input))
    x, starts, ends, axes, steps = ins[:5]
    if not (x and starts and ends) or x in imp.consts or not all(
            n in imp.values or n in imp.consts or n in imp.sym for n in ins if n) or (
            steps and (steps not in imp.consts or imp.consts[steps].size != 1
                       or imp.consts[steps].dtype.kind not in "iu"
                       or int(imp.consts[steps].reshape(())) != 1)):
        return None
    rank = len(imp.type_of(x).shape)
    axis = imp.consts.get(axes) if axes else np.zeros(1, np.int64)
    if axis is None or axis.size != 1 or axis.dtype.kind not in "iu" or \
            not -rank <= int(axis.reshape(())) < rank or \
            any(imp.type_of(b).shape != (1,) for b in (starts, ends)):
        return None
    return x, int(axis.reshape(())) % rank, starts, ends


def _reaches_the_end(imp, end: str, d) -> bool:
    """Whether the Slice end ``end`` is at least the dim ``d`` at every size: a constant at
    least d (for a run-time d, at least :data:`.fold.FAR` or its dtype's largest value), or
    the shape value of d itself."""
    from abi.ops import dims

    from .fold import FAR

    if end in imp.consts:
        e = imp.consts[end]
        return e.dtype.kind in "iu" and int(e.reshape(())) >= (
            d if type(d) is int else min(FAR, int(np.iinfo(e.dtype).max)))
    value = imp.sym.get(end)
    return value is not None and dims.known_equal(value.reshape(-1)[0], d)


def rolled_slices(imp, node, attrs: dict, index: int) -> bool:
    """``Concat(x[m:], x[:m])`` along one axis, m computed when the call runs (torch's dynamo
    exporter writes ``torch.roll`` along a run-time dim so, m being ``-shift mod dim``): one
    ``gather`` along the axis at ``(arange(d) + m') wrapped by d``, m' being m counted from
    the end if negative and clamped to [0, d], as Slice reads a bound. A Slice bound computed
    at run time is refused anywhere else (its output's dim would depend on a value)."""
    from .gather import _producers, _runtime_gather
    from .run_time_sizes import run_time_arange, size_tensor

    part = _one_axis_slice(imp, node)
    cat = _next(imp, node.output[0], "Concat")
    if part is None or cat is None or len(cat[1].input) != 2 or node.input[1] == node.input[2]:
        return False
    cat_index, cat = cat
    cat_attrs = attributes(cat, imp.limits)
    other_name = _other(cat, node.output[0])
    other = _producers(imp).get(other_name)
    if other is None or other.op_type != "Slice" or \
            imp.consumers.get(other_name) != [cat_index] or other_name in imp.graph_outputs:
        return False
    pair = _one_axis_slice(imp, other)
    x, axis = part[:2]
    if pair is None or pair[:2] != (x, axis) or set(cat_attrs) != {"axis"} or \
            type(cat_attrs["axis"]) is not int or cat_attrs["axis"] % len(
                imp.type_of(x).shape) != axis:
        return False
    head, tail = (part, pair) if cat.input[0] == node.output[0] else (pair, part)
    m, d = head[2], imp.type_of(x).shape[axis]
    start = imp.consts.get(tail[2])
    if m != tail[3] or m in imp.consts or m in imp.sym or \
            imp.type_of(m).dtype not in ("int32", "int64") or start is None or \
            start.dtype.kind not in "iu" or int(start.reshape(())) != 0 or \
            not _reaches_the_end(imp, head[3], d):
        return False
    y = imp.tensor(x)
    shift = imp.tensor(m)
    if imp.type_of(m).dtype != "int64":
        [shift] = imp.emit("cast", [shift], [None], {"dtype": "int64"}, suffix="/roll.m")
    size, zero = size_tensor(imp, d, "/roll.size"), size_tensor(imp, 0, "/roll.zero")
    [negative] = imp.emit("less", [shift, zero], [None], suffix="/roll.negative")
    [counted] = imp.emit("add", [shift, size], [None], suffix="/roll.from_end")
    [shift] = imp.emit("where", [negative, counted, shift], [None], suffix="/roll.start")
    [shift] = imp.emit("max", [shift, zero], [None], suffix="/roll.at_least_0")
    [shift] = imp.emit("min", [shift, size], [None], suffix="/roll.at_most_d")
    arange = run_time_arange(imp, [d], 0, {d: (y, axis)})
    [at] = imp.emit("add", [arange, shift], [None], suffix="/roll.positions")
    [past] = imp.emit("greater_equal", [at, size], [None], suffix="/roll.past_the_end")
    [back] = imp.emit("sub", [at, size], [None], suffix="/roll.wrapped")
    [at] = imp.emit("where", [past, back, at], [None], suffix="/roll.indices")
    _runtime_gather(imp, cat, y, at, [d], axis, graph=True)
    imp.skip.update((list(imp.model.graph.node).index(other), cat_index))
    return True


Pattern = Callable[[Any, Any, dict, int], bool]

#: ONNX op that starts a pattern -> the pattern function.
PATTERNS: dict[str, Pattern] = {"Pow": rms_norm, "SplitToSequence": split_to_sequence,
                                "Pad": padded_max_pool, "Slice": rolled_slices}
