"""ONNX's Pad (constant, reflect, edge, and wrap as slices and concats; pads computed from
run-time dims in constant, edge and reflect mode) and CenterCropPad. Registered in
:data:`.ops.MAPPERS` on import."""

from __future__ import annotations

import numpy as np

from abi import dtypes
from abi.ops import dims

from ..errors import ModelFileError
from .fold import FAR, axis_in, int_vector, one_value
from .ops import _few, _only, _opt, maps
from .run_time_sizes import run_time_arange, size_tensor


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
    pairs = [[max(p, 0) for p in pair] for pair in pairs]
    if mode == "constant":
        constant_pad(imp, y, pairs, value, node.output[0])
    else:
        imp.emit("pad", [y], [node.output[0]], {"pads": pairs, "mode": mode, "value": value})


def constant_pad(imp, x: str, pairs: list, value: float, out: str | None,
                 suffix: str = "") -> str:
    """``pad`` of graph tensor ``x`` by ``value`` (``pairs``: before and after per axis), bound
    to ONNX value ``out`` (None: internal); returns the tensor. A value the artifact's manifest
    cannot hold (inf, -inf, nan: Attention's function body pads a mask by -inf) is a pad by 0,
    and a ``where`` of the value over the padding: where a pad of all true (``not(x < x)``,
    true for nan too) by false is false."""
    if np.isfinite(value):
        return imp.emit("pad", [x], [out], {"pads": pairs, "mode": "constant", "value": value},
                        suffix=suffix)[0]
    zero = {"pads": pairs, "mode": "constant", "value": 0.0}
    [padded] = imp.emit("pad", [x], [None], zero, suffix=f"{suffix}/by_0")
    [every] = imp.emit("not", imp.emit("less", [x, x], [None], suffix=f"{suffix}/never"), [None],
                       suffix=f"{suffix}/every")
    [inside] = imp.emit("pad", [every], [None], zero, suffix=f"{suffix}/inside")
    fill = imp.add_constant(np.array(value, dtypes.to_numpy(imp.types[x].dtype)),
                            f"{imp.node_name}{suffix}.value")
    return imp.emit("where", [inside, padded, fill], [out], suffix=suffix)[0]


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
        fixed = [[max(p, 0) for p in pair] for pair in fixed]
        y = (constant_pad(imp, y, fixed, value, None, "/fixed") if mode == "constant" else
             imp.emit("pad", [y], [None], {"pads": fixed, "mode": mode, "value": value},
                      suffix="/fixed")[0])
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
