"""The glue ops of the op table as ONNX: activations, arithmetic, comparisons, reductions,
shape ops, pooling, resampling and the indexed ops; each one ONNX op or a short decomposition
where onnxruntime's op differs from numpy's (nan in a max, integer kernels it lacks, guarded
indices)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import onnx
from onnx import helper

from abi import check_indices, dtypes
from abi.errors import BackendError
from abi.ops.sampling import pool_sizes
from abi.quantization import CODE_RANGES, need_values

from . import session
from .emitter import Converter, onnx_dtype, onnx_pads

_FLOATS = frozenset({"float16", "float32", "float64"})


def _simple(op_type: str, **fixed: Any) -> Converter:
    def convert(e, node, ins, outs, a):
        e.op(op_type, ins, outs, **fixed)
    return convert


def relu(e, node, ins, outs, a):
    """Relu; of integers Max(x, 0), which has a kernel for every integer dtype that Relu lacks
    (onnxruntime's Relu takes int8 and int32 only)."""
    x = ins[0]
    if dtypes.is_int(e.types[x].dtype):
        e.op("Max", [x, _scalar(e, x, 0)], outs)
        return
    e.op("Relu", ins, outs)


def gelu(e, node, ins, outs, a):
    """ONNX's Gelu (opset 20) for the erf form: onnxruntime's kernel is bit for bit the five
    ops ``0.5 x * (erf(x / sqrt 2) + 1)`` (Mul, Erf, Mul, Add, Mul; probed over 2^26 random
    float32 bit patterns, and under the tests) in one pass (probed: 33 against 55 us over
    32,768 values; a transformer encoder layer 0.995x bare onnxruntime, 1.038x with the five
    ops). The tanh form as its ops: its kernel rounds otherwise (1e-6 apart)."""
    x = ins[0]
    if a["approximate"] != "tanh":
        e.op("Gelu", [x], outs)
        return
    cube = e.op("Mul", [e.op("Mul", [x, x])[0], x])[0]
    inner = e.op("Add", [x, e.op("Mul", [cube, e.const(0.044715)])[0]])[0]
    t = e.op("Tanh", [e.op("Mul", [inner, e.const(math.sqrt(2 / math.pi))])[0]])[0]
    half_x = e.op("Mul", [x, e.const(0.5)])[0]
    e.op("Mul", [half_x, e.op("Add", [t, e.const(1.0)])[0]], outs)


def _scalar(e, x, value):
    return e.const(value, dtypes.to_numpy(e.types[x].dtype))


def _int_bounds(dtype: str, lo: float | None, hi: float | None):
    """Clip's float bounds for an integer x, as the numpy kernel's float clip then ``astype``
    gives them: ``(lo, hi)``, a bound every value of x passes dropped, the others truncated
    toward zero (what ``astype`` does to the clipped value); None when a bound lies beyond the
    dtype's range on the far side."""
    info = np.iinfo(dtypes.to_numpy(dtype))
    if (lo is not None and lo > info.max) or (hi is not None and hi < info.min):
        return None
    lo = None if lo is None or lo <= info.min else math.trunc(lo)
    hi = None if hi is None or hi >= info.max else math.trunc(hi)
    return lo, hi


def clip(e, node, ins, outs, a):
    """Clip with both bounds; one bound alone is Max or Min, since onnxruntime's Clip fills a
    missing bound with the dtype's largest finite value and so clamps inf (numpy keeps it).
    An integer x takes the bounds of :func:`_int_bounds`; a bound beyond its dtype's range on
    the far side (every element would become a value the dtype lacks, which numpy's cast
    turns into what the CPU gives) is refused."""
    x, lo, hi = ins[0], a["min"], a["max"]
    dtype = e.types[x].dtype
    if dtypes.is_int(dtype):
        bounds = _int_bounds(dtype, lo, hi)
        if bounds is None:
            raise BackendError(f"onnxruntime backend: node {node.name!r}: clip of {dtype} to "
                               f"[{lo}, {hi}] makes every element a value outside {dtype}",
                               node=node.name, op=node.op)
        lo, hi = bounds
    if lo is not None and hi is not None:
        e.op("Clip", [x, _scalar(e, x, lo), _scalar(e, x, hi)], outs)
    elif lo is not None or hi is not None:
        e.op("Max" if hi is None else "Min", [x, _scalar(e, x, hi if lo is None else lo)], outs)
    else:
        e.op("Identity", [x], outs)


def _alpha(op_type: str, *names: str) -> Converter:
    """An ONNX activation whose float attributes are the op's of the same names."""
    def convert(e, node, ins, outs, a):
        e.op(op_type, ins, outs, **{name: float(a[name]) for name in names})
    return convert


def _reduce(op_type: str) -> Converter:
    def convert(e, node, ins, outs, a):
        e.op(op_type, [ins[0], e.const(list(a["axes"]), np.int64)], outs,
             keepdims=int(a["keepdim"]))
    return convert


def _extreme(op_type: str) -> Converter:
    """ReduceMax or ReduceMin, which skip a nan, with nan where the reduced values hold one,
    as numpy and torch give: times 1, or nan where a nan is among them (:func:`bound_or_nan`
    of their :func:`sum_of_squares`); the extreme times 1 is itself bit for bit. Two passes
    over x, where an IsNaN mask reduced beside it took four. Over nothing the sum is 0 and
    the extreme onnxruntime's (the lowest or highest value) stays."""
    plain = _reduce(op_type)

    def convert(e, node, ins, outs, a):
        dtype = e.types[ins[0]].dtype
        if dtype not in _FLOATS:
            plain(e, node, ins, outs, a)
            return
        extreme = [e.fresh()]
        plain(e, node, ins, extreme, a)
        squares = sum_of_squares(e, ins[0], a["axes"], a["keepdim"])
        e.op("Mul", extreme + [bound_or_nan(e, squares, e.const(1, dtypes.to_numpy(dtype)))],
             outs)
    return convert


def mean(e, node, ins, outs, a):
    """ReduceMean, which gives 0 over nothing: nan there, as 0 / 0 (the ABI's mean), where a
    reduced dim is 0 or symbolic (its element count read with ``Shape`` when the call runs)."""
    x = ins[0]
    shape = e.types[x].shape
    dims = [shape[ax] for ax in a["axes"]]
    if all(isinstance(d, int) and d > 0 for d in dims):
        _reduce("ReduceMean")(e, node, ins, outs, a)
        return
    reduced = e.op("Gather", [*e.op("Shape", [x]), e.const(list(a["axes"]), np.int64)])
    [count] = e.op("ReduceProd", reduced, keepdims=0)
    [empty] = e.op("Equal", [count, e.const(0, np.int64)])
    plain = [e.fresh()]
    _reduce("ReduceMean")(e, node, ins, plain, a)
    e.op("Where", [empty, e.const(np.nan, dtypes.to_numpy(e.types[x].dtype)), *plain], outs)


def prod(e, node, ins, outs, a):
    """ReduceProd; of integers, whose products onnxruntime's ReduceProd saturates where numpy
    wraps, a tree of Mul (which wraps) over the reduced axes moved last and flattened: each
    step pads them to an even length with 1 and multiplies the halves (static reduced dims)."""
    x = ins[0]
    shape, dtype = e.types[x].shape, e.types[x].dtype
    axes = sorted(ax % len(shape) for ax in a["axes"])
    n = math.prod(shape[ax] if isinstance(shape[ax], int) else -1 for ax in axes)
    if not dtypes.is_int(dtype) or 0 <= n <= 1:
        _reduce("ReduceProd")(e, node, ins, outs, a)
        return
    if n < 0:
        raise BackendError(f"onnxruntime backend: node {node.name!r}: the integer prod over "
                           f"axes {list(a['axes'])} of x shape {shape} needs static dims there",
                           node=node.name, op=node.op)
    kept = [ax for ax in range(len(shape)) if ax not in axes]
    y = e.op("Transpose", [x], perm=kept + axes)[0]
    keep = [0] * len(kept)  # Reshape's 0: the input's dim
    y = e.op("Reshape", [y, e.const(keep + [n], np.int64)])[0]
    while n > 1:
        if n % 2:
            y = e.op("Pad", [y, e.const([0] * len(kept) + [0] + [0] * len(kept) + [1],
                                        np.int64), _scalar(e, x, 1)])[0]
            n += 1
        n //= 2
        halves = e.op("Reshape", [y, e.const(keep + [2, n], np.int64)])[0]
        y = e.op("Mul", [e.op("Gather", [halves, e.const(k, np.int64)], axis=len(kept))[0]
                         for k in (0, 1)])[0]
    out = [0] * len(kept)
    if a["keepdim"]:
        out = [0] * len(kept) + [1] * len(axes)
        y = e.op("Reshape", [y, e.const(out, np.int64)])[0]
        inverse = [(kept + axes).index(ax) for ax in range(len(shape))]
        y = e.op("Transpose", [y], perm=inverse)[0]
        e.op("Identity", [y], outs)
        return
    e.op("Reshape", [y, e.const(out, np.int64)], outs)


def _arg(op_type: str) -> Converter:
    """ArgMax/ArgMin; on floats the first nan along the axis wins, as in numpy and torch
    (onnxruntime's own kernel skips a nan unless it comes first). Finding the first nan takes
    an IsNaN mask, cast, reduced twice, some times the op's own cost (bench_extremes'
    segmentation head, an argmax over 19 classes, 1.25x bare onnxruntime with it). So an If on
    whether x holds a nan at all (:func:`nan_seen`, one pass) runs the op alone where none is
    (1.02x to 1.05x), and the mask only where one is."""
    def convert(e, node, ins, outs, a):
        keep = dict(axis=int(a["axis"]), keepdims=int(a["keepdim"]), select_last_index=0)
        if e.types[ins[0]].dtype not in _FLOATS:
            e.op(op_type, ins, outs, **keep)
            return
        masked, plain = e.subgraph("nan"), e.subgraph("no_nan")
        first, alone = masked.fresh(), plain.fresh()
        nan = masked.op("Cast", masked.op("IsNaN", ins), to=onnx.TensorProto.INT32)
        has_nan = masked.op("ReduceMax", [nan[0], masked.const([keep["axis"]], np.int64)],
                            keepdims=keep["keepdims"])
        masked.op("Where", masked.op("Cast", has_nan, to=onnx.TensorProto.BOOL)
                  + masked.op("ArgMax", nan, **keep) + masked.op(op_type, ins, **keep), [first])
        plain.op(op_type, ins, [alone], **keep)
        int64 = onnx.TensorProto.INT64
        e.op("If", [nan_seen(e, ins[0])], outs, then_branch=masked.branch([(first, int64)]),
             else_branch=plain.branch([(alone, int64)]))
    return convert


def cast(e, node, ins, outs, a):
    e.op("Cast", ins, outs, to=onnx_dtype(a["dtype"]))


def bitcast(e, node, ins, outs, a):
    e.op("BitCast", ins, outs, to=onnx_dtype(a["dtype"]))


def reshape(e, node, ins, outs, a):
    e.op("Reshape", [ins[0], e.const(list(a["shape"]), np.int64)], outs, allowzero=1)


def resize(e, node, ins, outs, a):
    """Resize of the spatial axes alone, so a symbolic batch needs no Shape: scales of 1 for
    the batch and channel axes then the spatial ones, as torch's exporters write them, which
    onnxruntime runs in its blocked-channel layout between convs there (its NCHWc transform
    takes no ``axes``: written with them, each of HF transformers' DPT's five 2x upsamplings
    between convs left that layout and came back, 1.10x bare onnxruntime over the model).
    Fixed sizes that are whole multiples of fixed input sizes (an ``interpolate(size=...)``
    to twice a map's size) are those scales too: onnxruntime computes a resize to sizes with
    the scales out / in, exact for whole ratios, so the output's size and every coordinate
    are the same. Other sizes over the spatial ``axes``, those like gives Shape slices of
    like, concatenated with the fixed ones."""
    spatial, like = len(a["size"]), (ins[1] if len(ins) > 1 and ins[1] else None)
    axes = {"axes": list(range(2, 2 + spatial))}
    scales = a["scales"]
    if scales is None and like is None:
        sizes, spatial_in = a["size"], e.types[ins[0]].shape[2:]
        if all(type(n) is int and n > 0 and size >= n and size % n == 0
               for n, size in zip(spatial_in, sizes)):
            scales = [float(size // n) for n, size in zip(spatial_in, sizes)]
    if scales is not None:
        given, axes = ["", e.const([1.0, 1.0, *scales])], {}
    elif like is not None:
        given = ["", "", _vector_from(e, like, a["size"], a["like_axes"])]
    else:
        given = ["", "", e.const(list(a["size"]), np.int64)]
    e.op("Resize", [ins[0], *given], outs, **axes, mode=a["mode"],
         coordinate_transformation_mode=a["coordinate_mode"], nearest_mode=a["nearest_mode"],
         cubic_coeff_a=float(a["cubic_coeff_a"]),
         exclude_outside=int(a["exclude_outside"]), antialias=int(a["antialias"]))


def dynamic_quantize(e, node, ins, outs, a):
    """onnxruntime's DynamicQuantizeLinear (one kernel: min and max, then the codes), its
    uint8 outputs cast to float32, with the ABI's answer where x holds a nan (scale nan, zero
    point 255, codes 0; onnxruntime's vectorised min and max keep or drop a nan by where it
    sits): whether one is there is :func:`nan_seen`. An empty x: :func:`values_needed`."""
    x = ins[0]
    values_needed(e, node, x)
    codes, scale, zp = e.op("DynamicQuantizeLinear", [x], 3)
    nan = nan_seen(e, x)
    e.op("Where", [nan, e.const(np.nan, np.float32), scale], [outs[1]])
    for value, v, out in ((0, codes, outs[0]), (255, zp, outs[2])):
        e.op("Cast", e.op("Where", [nan, e.const(value, np.uint8), v]), [out],
             to=onnx.TensorProto.FLOAT)


def values_needed(e, node, x: str) -> None:
    """Over sizes known only when the call runs, ``x`` empty refused by the ABI's rule of
    ``node`` (a dynamic quantization: :func:`abi.quantization.need_values`) after the run."""
    if any(type(d) is not int for d in e.types[x].shape):
        [size] = e.op("Shape", [x])
        e.checks.shapes.append((size, functools.partial(need_values, node.op), node.name))


def quantize_linear(e, node, ins, outs, a):
    """onnxruntime's QuantizeLinear (one kernel: :func:`quantize_linear_codes`), its codes
    cast to float32; where it does not serve (a scale computed when the call runs, which may
    be 0, inf or nan, a zero point that is no code) the ABI's arithmetic in element-wise ops
    (:func:`_quantize_linear_ops`)."""
    codes = quantize_linear_codes(e, ins, a["dtype"])
    if codes is None:
        _quantize_linear_ops(e, ins, outs, *CODE_RANGES[a["dtype"]])
    else:
        e.op("Cast", [codes], outs, to=onnx.TensorProto.FLOAT)


def quantize_linear_kernel(shape, scale: np.ndarray | None, zp: str | None,
                           z: np.ndarray | None, dtype: str) -> int | None:
    """The axis onnxruntime's QuantizeLinear takes to quantize x of ``shape`` by the scale of
    constant value ``scale`` (None: computed when the call runs) and the zero point named
    ``zp`` (None: none) of constant value ``z`` into ``dtype`` codes, where it computes the
    ABI's quantize_linear: the scale positive and finite, one value or one per entry of one
    axis of x, the zero point (if any) constant integers of the codes' range. None where it
    does not."""
    axis = quantization_axis(shape, scale)
    if (axis is None or not np.all((scale > 0) & (scale < np.inf))
            or (zp is not None and (z is None or not are_codes(z, dtype)))):
        return None
    return axis


def are_codes(z: np.ndarray, dtype: str) -> bool:
    """Whether constant ``z`` holds integers of ``dtype``'s code range only (a zero point
    onnxruntime's QuantizeLinear and DequantizeLinear can take as that dtype)."""
    lo, hi = CODE_RANGES[dtype]
    return bool(np.all((z >= lo) & (z <= hi) & (z == np.round(z))))


def quantize_linear_codes(e, ins, dtype: str) -> str | None:
    """onnxruntime's QuantizeLinear of ``ins`` (x, the scale, the zero point or none) into
    ``dtype`` codes where it computes the ABI's quantize_linear
    (:func:`quantize_linear_kernel`): the codes' name; None, and nothing written, where it
    does not."""
    x, scale, zp = (ins + [None])[:3]
    s, z = e.array(scale), e.array(zp)
    axis = quantize_linear_kernel(e.types[x].shape, s, zp, z, dtype)
    if axis is None:
        return None
    code, shape = np.dtype(dtype), (() if s.size == 1 else (-1,))
    zero = e.derived(f"quantize_linear.zero_point.{code}", [zp, scale], lambda: (
        np.zeros(s.shape, code) if z is None else z).astype(code).reshape(shape), code)
    scale = e.derived("quantize_linear.scale", [scale], lambda: s.reshape(shape))
    return e.op("QuantizeLinear", [x, scale, zero], axis=axis)[0]


def quantization_axis(shape, scale: np.ndarray | None) -> int | None:
    """0 for a constant scale of one value (per tensor: QuantizeLinear's axis is then unused
    but must be valid), the axis of x (of ``shape``) a constant scale broadcasts along (one
    dim not 1), else None (computed at run time, or along several axes)."""
    if scale is None:
        return None
    if scale.size == 1:
        return 0
    along = [i for i, d in enumerate(scale.shape) if d != 1]
    return len(shape) - scale.ndim + along[0] if len(along) == 1 else None


def _quantize_linear_ops(e, ins, outs, lo: int, hi: int) -> None:
    """quantize_linear as Div, a nan quotient made -inf, Round, Add of the zero point (of 0
    where there is none: it turns Round's -0.0 into 0), Clip."""
    x, scale, zp = (ins + [None])[:3]
    [y] = e.op("Div", [x, scale])
    y = e.op("Where", [e.op("IsNaN", [y])[0], e.const(-np.inf), y])[0]
    y = e.op("Add", [e.op("Round", [y])[0], e.const(0.0) if zp is None else zp])[0]
    e.op("Clip", [y, e.const(lo), e.const(hi)], outs)


def sum_of_squares(e, x: str, axes=None, keepdim: bool = False) -> str:
    """The sum of float ``x``'s squares over ``axes`` (None: all of x), in one pass: a nan
    exactly where a nan is among the values summed (squares are never negative, so no
    inf - inf makes one, and an overflow gives inf; a sum carries a nan wherever it sits,
    where onnxruntime's vectorised max and min may drop it); 0 over nothing. The nan checks
    here and in ``fusion.py`` read it."""
    ins = [x] if axes is None else [x, e.const(list(axes), np.int64)]
    return e.op("ReduceSumSquare", ins, keepdims=int(keepdim))[0]


def bound_or_nan(e, sums: str, bound: str) -> str:
    """``bound`` (a constant of one value, not nan and not -0.0), or nan where ``sums`` (nan
    exactly where a nan was summed: :func:`sum_of_squares`, the max pool check's Conv) is
    nan: Clip of the sums to [bound, bound], one kernel, or none where onnxruntime fuses it
    into the Conv before (its Clip keeps a nan, probed and under the tests; with a bound of
    -0.0 it gives a sum of +0 back, with a nan bound the sum)."""
    return e.op("Clip", [sums, bound, bound])[0]


def nan_seen(e, x: str) -> str:
    """Whether float32 ``x`` holds a nan, a bool scalar: whether :func:`sum_of_squares` is a
    nan (an empty x sums to 0)."""
    return e.op("IsNaN", [sum_of_squares(e, x)])[0]


def topk(e, node, ins, outs, a):
    """TopK, sorted; k = -1 (the whole axis, a sort) is the axis' size read from x's shape."""
    axis = a["axis"] % len(e.types[ins[0]].shape)
    k = (e.op("Shape", [ins[0]], start=axis, end=axis + 1)[0] if a["k"] == -1 else
         e.const([a["k"]], np.int64))
    e.op("TopK", [ins[0], k], outs, axis=a["axis"], largest=int(a["largest"]), sorted=1)


def grid_sample(e, node, ins, outs, a):
    """GridSample of 2 or 3 spatial axes; opset 20 names bilinear (and trilinear) linear, and
    cubic (2-D only) cubic."""
    e.op("GridSample", ins, outs, mode={"bilinear": "linear"}.get(a["mode"], a["mode"]),
         padding_mode=a["padding_mode"], align_corners=int(a["align_corners"]))


def _sizes_from(e, like, sizes, like_axes) -> list:
    """``sizes`` with each size that ``like_axes`` names (not -1) a Shape slice of like (a
    tensor name; the other sizes stay ints)."""
    return [e.op("Shape", [like], start=t, end=t + 1)[0] if t != -1 else s
            for s, t in zip(sizes, like_axes)]


def _vector_from(e, like, values, like_axes) -> str:
    """A 1-D int64 tensor of ``values``, each one ``like_axes`` names read from like's shape
    (:func:`_sizes_from`), the others constants."""
    parts = [s if type(s) is str else e.const([s], np.int64)
             for s in _sizes_from(e, like, list(values), like_axes)]
    return e.op("Concat", parts, axis=0)[0] if len(parts) > 1 else parts[0]


def unflatten(e, node, ins, outs, a):
    """Reshape to the dims before axis, the sizes and the dims after (read from x, and from
    like for the sizes it gives, when any is symbolic); a dim that does not split so is
    onnxruntime's refusal of the run."""
    x, like = ins[0], (ins[1] if len(ins) > 1 and ins[1] else None)
    out = e.types[outs[0]].shape
    if all(isinstance(d, int) for d in out):
        e.op("Reshape", [x, e.const(list(out), np.int64)], outs, allowzero=1)
        return
    axis, sizes = a["axis"] % len(e.types[x].shape), list(a["sizes"])
    split = _sizes_from(e, like, sizes, a["like_axes"]) if like is not None else sizes
    if -1 in split:  # worked out here, so that the Reshape can take a 0 dim literally
        k = split.index(-1)
        others = split[:k] + split[k + 1:]
        fixed, read = math.prod(d for d in others if type(d) is int), [
            d for d in others if type(d) is not int]
        known = e.const([fixed], np.int64)
        if read:  # the like sizes' product; at least 1, as the numpy backend divides
            known = e.op("Max", [e.op("ReduceProd", [e.op("Concat", [known, *read], axis=0)[0]],
                                      keepdims=1)[0], e.const([1], np.int64)])[0]
        split[k] = e.op("Div", [e.op("Shape", [x], start=axis, end=axis + 1)[0], known])[0]
    merged: list = []  # runs of fixed sizes as one constant each
    for d in split:
        if type(d) is int and merged and type(merged[-1]) is list:
            merged[-1].append(d)
        else:
            merged.append([d] if type(d) is int else d)
    split = [e.const(d, np.int64) if type(d) is list else d for d in merged]
    parts = [e.op("Shape", [x], end=axis)[0], *split, e.op("Shape", [x], start=axis + 1)[0]]
    e.op("Reshape", [x, e.op("Concat", parts, axis=0)[0]], outs, allowzero=1)


def flatten(e, node, ins, outs, a):
    x = ins[0]
    out = e.types[outs[0]].shape
    if all(isinstance(d, int) for d in out):
        e.op("Reshape", [x, e.const(list(out), np.int64)], outs, allowzero=1)
        return
    rank = len(e.types[x].shape)
    start, end = a["start_dim"] % rank, a["end_dim"] % rank
    head = e.op("Shape", [x], end=start)[0]
    tail = e.op("Shape", [x], start=end + 1)[0]
    shape = e.op("Concat", [head, e.const([-1], np.int64), tail], axis=0)[0]
    e.op("Reshape", [x, shape], outs)


def gather(e, node, ins, outs, a):
    """ONNX Gather with the graph's constant indices, checked again here, at load."""
    x, indices = ins[:2]
    values = e.array(indices)
    if values is None:
        raise BackendError(f"onnxruntime backend: node {node.name!r}: gather indices must be a "
                           f"constant", node=node.name, op=node.op)
    shape = e.types[x].shape
    axis = a["axis"] % len(shape)
    check_indices(values, shape[axis], f"node {node.name!r}: gather axis {axis}", kind="gather")
    e.op("Gather", [x, indices], outs, axis=axis)


def _ints_input(op_type: str, attr: str) -> Converter:
    """An ONNX op whose second input is the op's int list attribute ``attr``."""
    def convert(e, node, ins, outs, a):
        e.op(op_type, [ins[0], e.const(list(a[attr]), np.int64)], outs)
    return convert


def slice_(e, node, ins, outs, a):
    """Slice; the starts and ends like gives are Shape slices of like, concatenated with the
    written ones."""
    n = len(a["starts"])
    axes = a["axes"] if a["axes"] is not None else range(n)
    steps = a["steps"] if a["steps"] is not None else [1] * n
    like = ins[1] if len(ins) > 1 and ins[1] else None
    bounds = [e.const(list(written), np.int64) if like is None or a[key] is None else
              _vector_from(e, like, written, a[key])
              for key, written in (("like_starts", a["starts"]), ("like_ends", a["ends"]))]
    e.op("Slice", [ins[0], *bounds, *(e.const(list(v), np.int64) for v in (axes, steps))], outs)


def split(e, node, ins, outs, a):
    e.op("Split", [ins[0], e.const(list(a["sizes"]), np.int64)], outs, axis=a["axis"])


def pad(e, node, ins, outs, a):
    x = ins[0]
    value = _scalar(e, x, a["value"]) if a["mode"] == "constant" else None
    e.op("Pad", [x, e.const(onnx_pads(a["pads"]), np.int64), value], outs, mode=a["mode"])


def max_pool(e, node, ins, outs, a):
    spatial = len(a["kernel_size"])
    e.op("MaxPool", ins, outs, kernel_shape=list(a["kernel_size"]), strides=list(a["stride"]),
         pads=onnx_pads(a["padding"]), dilations=list(a.get("dilation") or [1] * spatial),
         ceil_mode=int(a["ceil_mode"]))


def _max_pool_by_conv(e, node, ins, outs, a) -> bool:
    """A float32 2-D ``max_pool`` with nan wherever its window holds a nan (onnxruntime's MaxPool
    skips one) written in ops onnxruntime keeps in its blocked-channel (NCHWc) layout, so the
    tensors stay in it around the pool where the convs around are in it (16 channels or a
    multiple with AVX-512, 8 with AVX2), and cheaper than a mask elsewhere too: MaxPool times a
    Conv of HardSigmoid(x) over the same windows, weights 0 and bias 1 per channel (depthwise).
    HardSigmoid (0.2 x + 0.5, clamped to [0, 1]) bounds every non-nan value, infinities
    included, and gives nan for nan, so each tap's product with the weight 0 is a zero or nan
    and the Conv gives exactly 1 or nan; times it, the pool's value is itself, bit for bit and
    sign (-0.0, infinities, the lowest float), or nan. Where it takes fewer taps per output
    (``kh * sw + kw < kh * kw``: YOLO's 5x5 stride-1 pools, not a 2x2 or 3x3 stride-2 one), the
    Conv is two, over each window's columns (bias 0: a zero or nan) and then its rows (bias 1).
    Where x holds no -inf (:func:`_never_minus_inf`: after a ``relu``, a SiLU, a sigmoid, ...,
    so no sum meets inf - inf) the Conv reads x itself, with weights of 2^-(n + 1) for a window
    of fewer than 2^n taps (no sum of finite values overflows; smaller weights would make the
    products of small values denormals, which run far slower: 2^-100 made GoogLeNet, whose
    activations are small at its initial weights, 1.37x bare onnxruntime rather than 1.12x to
    1.14x) and bias 1, and a Clip to [1, 1] that onnxruntime fuses into it: finite sums or +inf
    give 1, a nan nan; that saves the HardSigmoid's pass over x (bench_extremes' VGG-like net
    1.16x to 1.17x bare onnxruntime rather than 1.35x to 1.41x, its ResNet-like one 1.06x rather
    than 1.09x to 1.10x); a row Conv's weights are then 1.
    :func:`_max_pool_masked` (IsNaN, Cast, a MaxPool of it, Greater, Where) is ops outside that
    layout, which took the tensors out of it and back around each pool, and five passes over
    them.

    Written only where it pays and holds: 8 channels or more, and a multiple of 4 for the
    HardSigmoid's form (onnxruntime runs a depthwise Conv of such counts in the blocked layout,
    others in its plain one; in a conv, pool, conv on this AVX-512 machine the Conv form took
    0.66x the mask's time at 24 channels, 0.67x at 40, 0.77x at 12, 0.84x at 8, 0.85x to 0.95x
    at 9, 11 and 33 after a relu; the HardSigmoid's 0.77x to 0.99x at 8, 12, 20, 24, 36 and 40,
    1.07x to 1.17x at 9, 10 and 33; either 1.03x to 1.27x at 3 channels, 1.64x at 1), windows
    the Conv can take (``ceil_mode`` only over static sizes, its last window's end padding
    added, and no longer than x and its padding: a wider one ceil mode lets run past both
    would make the Conv's weights the kernel's size, where most of its taps read nothing),
    and an onnxruntime whose HardSigmoid keeps a nan
    (:func:`.session.hard_sigmoid_keeps_nan` asks it once; of an x without -inf, whose fused
    Clip keeps one: :func:`.session.fused_clip_keeps_nan`). False where it is not."""
    x = ins[0]
    shape = e.types[x].shape
    if (e.types[x].dtype != "float32" or len(shape) != 4 or type(shape[1]) is not int
            or shape[1] < 8):
        return False
    kernel, stride = list(a["kernel_size"]), list(a["stride"])
    dilation = list(a.get("dilation") or [1, 1])
    pads = onnx_pads(a["padding"])
    if a["ceil_mode"]:
        sizes, out = shape[2:], e.types[outs[0]].shape[2:]
        if any(type(n) is not int for n in (*sizes, *out)):
            return False
        for i, (n, o, k, s, d) in enumerate(zip(sizes, out, kernel, stride, dilation)):
            if d * (k - 1) + 1 > n + pads[i] + pads[2 + i]:
                return False  # one window past x and its padding: the Conv's taps would be
                # the kernel's (a 2560 x 2560 window over 2560 channels: 125 GiB of weights)
            pads[2 + i] += max(0, (o - 1) * s + d * (k - 1) + 1 - (n + pads[i] + pads[2 + i]))
    no_minus_inf = _never_minus_inf(e, x) and session.fused_clip_keeps_nan()
    if not no_minus_inf and (shape[1] % 4 or not session.hard_sigmoid_keeps_nan()):
        return False
    channels = shape[1]
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    if no_minus_inf:
        # no -inf in x, so no inf - inf in a sum: the Conv reads x itself, a weight below
        # 1 / (kh * kw) keeping every sum finite (or +inf), and no smaller (a product below
        # float32's smallest normal value is a denormal, which the Conv takes far slower)
        source, tap, row_tap = x, 2.0 ** -((kh * kw).bit_length() + 1), 1.0
    else:
        source, tap, row_tap = e.op("HardSigmoid", [x], alpha=0.2, beta=0.5)[0], 0.0, 0.0
    if kh * sw + kw < kh * kw:  # fewer taps per output as a column, then a row, of taps
        [column] = e.op("Conv", [source, _taps(e, channels, tap, kh, 1), _filled(e, channels, 0)],
                        group=channels, kernel_shape=[kh, 1], strides=[sh, 1],
                        pads=[pads[0], 0, pads[2], 0], dilations=[dh, 1])
        [ones] = e.op("Conv", [column, _taps(e, channels, row_tap, 1, kw),
                               _filled(e, channels, 1)], group=channels, kernel_shape=[1, kw],
                      strides=[1, sw], pads=[0, pads[1], 0, pads[3]], dilations=[1, dw])
    else:
        [ones] = e.op("Conv", [source, _taps(e, channels, tap, kh, kw), _filled(e, channels, 1)],
                      group=channels, kernel_shape=kernel, strides=stride, pads=pads,
                      dilations=dilation)
    if no_minus_inf:  # finite sums, +inf or nan: 1 or nan (the Clip fused into the Conv)
        ones = bound_or_nan(e, ones, e.const(1.0))
    plain = [e.fresh()]
    max_pool(e, node, ins, plain, a)
    e.op("Mul", plain + [ones], outs)
    return True


#: ops whose output onnxruntime never makes -inf, whatever their input (a nan aside): bounded
#: below (by 0, -1, a clamp, or elu's -|alpha|, which the ABI has finite), or hard_swish's x
#: times a factor clamped to exactly 0 there
_ABOVE_MINUS_INF = frozenset({"relu", "sigmoid", "hard_sigmoid", "tanh", "exp", "softplus",
                              "abs", "elu", "hard_swish"})


def _never_minus_inf(e, x: str) -> bool:
    """Whether onnxruntime's x holds no -inf whatever the model's input, read from the nodes
    computing it: an op of :data:`_ABOVE_MINUS_INF`; ``clip`` of a lower bound above -inf;
    SiLU as the importer writes it, ``mul`` of v and ``sigmoid(v)``, where this onnxruntime
    gives nan for v = -inf, as -inf * 0 (:func:`.session.silu_of_minus_inf_is_nan`: another
    build's sigmoid might give a tiny positive value there, and the product -inf); a
    ``max_pool`` of such a tensor (its values are its input's, or nan) and a ``concat`` of
    such tensors (GoogLeNet's and SqueezeNet's pools of their blocks' joined outputs), walked
    back over at most :data:`_WALK` tensors."""
    pending, seen = [x], set()
    while pending:
        node = e.producers.get(pending.pop())
        if node is None or len(seen) >= _WALK:
            return False
        if node.op in ("max_pool", "concat"):
            pending += [t for t in node.inputs if t not in seen]
            seen.update(node.inputs)
        elif not _bounded_below(e, node):
            return False
    return True


#: how many tensors :func:`_never_minus_inf` reads back at most before it answers no
_WALK = 64


def _bounded_below(e, node) -> bool:
    """Whether onnxruntime's output of ``node`` is never -inf (:func:`_never_minus_inf`)."""
    if node.op in _ABOVE_MINUS_INF:
        return True
    if node.op == "clip":
        low = dict(node.attrs)["min"]
        return low is not None and low > -math.inf
    if node.op == "mul" and len(node.inputs) == 2:
        for v, gate in (node.inputs, node.inputs[::-1]):
            sigmoid = e.producers.get(gate)
            if sigmoid is not None and sigmoid.op == "sigmoid" and sigmoid.inputs[0] == v:
                return session.silu_of_minus_inf_is_nan()
    return False


def _taps(e, channels: int, value: float, *kernel: int) -> str:
    return e.derived(f"max_pool.taps({channels}x{kernel}, {value})", [],
                     lambda: np.full((channels, 1, *kernel), value))


def _filled(e, channels: int, value: float) -> str:
    return e.derived(f"max_pool.bias({channels}, {value})", [],
                     lambda: np.full(channels, value))


def _max_pool_masked(e, node, ins, outs, a) -> None:
    """MaxPool, and a MaxPool of x's IsNaN mask (1 where a nan, 0 where none) beside it: nan
    where that pool is positive."""
    dtype = e.types[ins[0]].dtype
    mask = e.op("Cast", e.op("IsNaN", ins[:1]), to=onnx_dtype(dtype))
    seen, plain = [e.fresh()], [e.fresh()]
    max_pool(e, node, mask, seen, a)
    max_pool(e, node, ins, plain, a)
    e.op("Where", e.op("Greater", [*seen, e.const(0, dtypes.to_numpy(dtype))])
         + [e.const(np.nan, dtypes.to_numpy(dtype))] + plain, outs)


def max_pool_nan(e, node, ins, outs, a):
    """``max_pool`` with nan wherever its window holds a nan, as numpy and torch give, where
    onnxruntime's MaxPool skips one: :func:`_max_pool_by_conv` where it applies, else
    :func:`_max_pool_masked`; of integers MaxPool alone."""
    if e.types[ins[0]].dtype not in _FLOATS:
        max_pool(e, node, ins, outs, a)
    elif not _max_pool_by_conv(e, node, ins, outs, a):
        _max_pool_masked(e, node, ins, outs, a)


def max_pool_with_indices(e, node, ins, outs, a):
    """MaxPool's Indices are flat over the whole tensor and skip nans: the index within the
    (n, c) plane is Indices mod H*W, and a window holding a nan takes its last one, the max
    over a float64 mask numbering each nan by its position + 1 (0 elsewhere)."""
    x = ins[0]
    y, flat = e.fresh(), e.fresh()
    max_pool(e, node, ins, [y, flat], a)
    spatial = e.op("Shape", [x], start=2)
    [plane] = e.op("ReduceProd", spatial, keepdims=0)
    index = e.op("Mod", [flat, plane])
    one = e.const(1, np.int64)
    position = e.op("Range", [one, e.op("Add", [plane, one])[0], one])
    position = e.op("Reshape", e.op("Cast", position, to=onnx.TensorProto.DOUBLE)
                    + e.op("Concat", [e.const([1, 1], np.int64), spatial[0]], axis=0))
    numbered = e.op("Mul", e.op("Cast", e.op("IsNaN", [x]), to=onnx.TensorProto.DOUBLE)
                    + position)
    last = [e.fresh()]
    max_pool(e, node, numbered, last, a)
    seen = e.op("Greater", last + [e.const(0.0, np.float64)])
    e.op("Where", seen + e.op("Sub", e.op("Cast", last, to=onnx.TensorProto.INT64) + [one])
         + index, [outs[1]])
    e.op("Where", seen + [e.const(np.nan, dtypes.to_numpy(e.types[x].dtype)), y], [outs[0]])


def mod(e, node, ins, outs, a):
    """ONNX Mod; the floor modulus of floats (fmod=False), which onnxruntime's Mod takes only
    from opset 28, as numpy's remainder computes it: C's fmod r, plus b where r is not 0 and
    its sign is not b's. Its result, a zero too, has b's sign: |r| times b's sign (onnxruntime's
    Where gives a -0.0 as 0.0, so the sign is set after it)."""
    x, b = ins
    dtype = dtypes.to_numpy(e.types[x].dtype)
    if a["fmod"] or dtype.kind != "f":
        e.op("Mod", ins, outs, fmod=int(a["fmod"]))
        return
    [r] = e.op("Mod", [x, b], fmod=1)
    zero = e.const(0, dtype)
    [other_sign] = e.op("Xor", e.op("Less", [r, zero]) + e.op("Less", [b, zero]))
    [shift] = e.op("And", [other_sign, *e.op("Not", e.op("Equal", [r, zero]))])
    [r] = e.op("Where", [shift, *e.op("Add", [r, b]), r])
    e.op("Mul", e.op("Abs", [r]) + e.op("Sign", [b]), outs)


def int_div(e, node, ins, outs, a):
    """ONNX Div truncates integers and refuses a zero divisor; the one overflowing quotient,
    the minimum / -1, would trap the process, so there the divisor is made 0: refused too."""
    x, y = ins
    dtype = dtypes.to_numpy(e.types[x].dtype)
    if dtype.kind == "i":
        over = e.op("And", e.op("Equal", [x, e.const(np.iinfo(dtype).min, dtype)])
                    + e.op("Equal", [y, e.const(-1, dtype)]))
        y = e.op("Where", over + [e.const(0, dtype), y])[0]
    e.op("Div", [x, y], outs)


def gather_elements(e, node, ins, outs, a):
    """GatherElements of the indices clipped to [0, dim - 1], guarded as an Embedding's are:
    they come back as an extra output, checked after the run (onnxruntime would count a
    negative index from the end).

    A symbolic dim on axis is read from x when the call runs (``Shape``) and comes back as an
    extra output too, for the guard's check. x gets one more element on that axis (zero) and
    the indices are clipped to [0, max(dim - 1, 0)], so the gather reads in bounds even from
    an empty axis, where every index is refused after the run."""
    x, idx = ins
    axis = a["axis"] % len(e.types[x].shape)
    dim = e.types[x].shape[axis]
    where = f"gather_elements: node {node.name!r}: axis {axis} of x"
    if type(dim) is int:
        e.checks.guards.append((idx, int(dim), where, "gather_elements"))
        safe = e.op("Clip", [idx, e.const(0, np.int64), e.const(dim - 1, np.int64)])
        e.op("GatherElements", [x] + safe, outs, axis=axis)
        return
    padded, safe, _ = _along_symbolic(e, x, idx, axis, where, "gather_elements")
    e.op("GatherElements", [padded, safe], outs, axis=axis)


def _along_symbolic(e, x: str, idx: str, axis: int, where: str, kind: str):
    """For an index op along a symbolic dim of x: ``(x padded by one element on axis, the
    indices clipped to [0, max(size - 1, 0)], the size)``, the size read from x when the call
    runs (``Shape``) and the indices guarded against it. The pad lets onnxruntime's kernel
    stay in bounds even on an empty axis, where every index is refused after the run."""
    rank = len(e.types[x].shape)
    [size] = e.op("Shape", [x], start=axis, end=axis + 1)
    e.checks.guards.append((idx, size, where, kind))
    [top] = e.op("Sub", [size, e.const([1], np.int64)])
    [safe] = e.op("Max", [*e.op("Min", [idx, top]), e.const([0], np.int64)])
    pads = [0] * (2 * rank)
    pads[rank + axis] = 1
    [padded] = e.op("Pad", [x, e.const(pads, np.int64)])
    return padded, safe, size


def scatter_elements(e, node, ins, outs, a):
    """ScatterElements; onnxruntime's kernel applies the updates in order, as the op defines.
    Constant indices are checked here, at load; run-time ones are clipped to [0, dim - 1] and
    guarded as gather_elements' are (checked after the run, before anything is returned).
    Along a symbolic dim, every index is guarded, into x padded by one (:func:`_along_symbolic`)
    and the result cut back to the size."""
    x, idx, updates = ins
    axis = a["axis"] % len(e.types[x].shape)
    dim = e.types[x].shape[axis]
    where = f"scatter_elements: node {node.name!r}: axis {axis} of x"
    values = e.array(idx)
    if type(dim) is not int:  # written into the padded x, which is then cut back to size
        padded, safe, size = _along_symbolic(e, x, idx, axis, where, "scatter_elements")
        [y] = e.op("ScatterElements", [padded, safe, updates], axis=axis,
                   reduction=a["reduction"])
        e.op("Slice", [y, e.const([0], np.int64), size, e.const([axis], np.int64)], outs)
        return
    if values is not None:
        check_indices(values, int(dim), where, kind="scatter_elements")
        safe = [idx]
    else:
        e.checks.guards.append((idx, int(dim), where, "scatter_elements"))
        safe = e.op("Clip", [idx, e.const(0, np.int64), e.const(dim - 1, np.int64)])
    e.op("ScatterElements", [x, *safe, updates], outs, axis=axis, reduction=a["reduction"])


def det(e, node, ins, outs, a):
    """Det, nan where the matrix holds a nan or an infinity (the ABI's rule): |x| < inf is
    False exactly there, and its minimum over the matrix picks Det or nan."""
    [x] = ins
    [finite] = e.op("Less", [*e.op("Abs", [x]), e.const(np.inf)])
    [finite] = e.op("Cast", [finite], to=onnx.TensorProto.FLOAT)
    [finite] = e.op("ReduceMin", [finite, e.const([-2, -1], np.int64)], keepdims=0)
    [finite] = e.op("Cast", [finite], to=onnx.TensorProto.BOOL)
    e.op("Where", [finite, *e.op("Det", [x]), e.const(np.nan)], outs)


def cumprod(e, node, ins, outs, a):
    """A Scan (onnxruntime's CumProd has no kernel for 8- and 16-bit integers) whose state is
    the running product, ones of one slice's shape at first (ConstantOfShape of x's shape read
    when the call runs): each step multiplies it by the next slice and gives the product, or
    with ``exclusive`` the state before; ``reverse`` scans and writes from the last slice
    back. Mul wraps integers and has a kernel for all eight (:mod:`.widen` does not look into
    the body, and need not).

    The axis is transposed to the front and back: onnxruntime's Scan along another axis dies
    of a division by zero on an empty tensor. One slice of ones is appended to it and cut off
    after, since onnxruntime's Scan fails on zero steps and the axis may be a run-time 0; with
    ``reverse`` that slice is scanned first, and 1 * 1 leaves the state exactly 1."""
    [x] = ins
    rank = len(e.types[x].shape)
    dtype = onnx_dtype(e.types[x].dtype)
    axis = a["axis"] % rank
    perm = [axis] + [i for i in range(rank) if i != axis]
    front = e.op("Transpose", [x], perm=perm)[0] if axis else x
    [init] = e.op("ConstantOfShape", e.op("Shape", [front], start=1),
                  value=helper.make_tensor("one", dtype, [1], [1]))
    [ones] = e.op("Unsqueeze", [init, e.const([0], np.int64)])
    [padded] = e.op("Concat", [front, ones], axis=0)
    state, row, new_state, row_out = e.fresh(), e.fresh(), e.fresh(), e.fresh()
    body = helper.make_graph(
        [helper.make_node("Mul", [state, row], [new_state], name=f"{e.prefix}/body/mul"),
         helper.make_node("Identity", [state if a["exclusive"] else new_state], [row_out],
                          name=f"{e.prefix}/body/out")],
        f"{e.prefix}/body",
        [helper.make_tensor_value_info(t, dtype, [None] * (rank - 1)) for t in (state, row)],
        [helper.make_tensor_value_info(t, dtype, [None] * (rank - 1))
         for t in (new_state, row_out)])
    direction = [int(a["reverse"])]
    [_, scanned] = e.op("Scan", [init, padded], 2, body=body, num_scan_inputs=1,
                        scan_input_directions=direction, scan_output_directions=direction)
    cut = [scanned, e.const([0], np.int64), e.const([-1], np.int64), e.const([0], np.int64)]
    if not axis:
        e.op("Slice", cut, outs)
        return
    e.op("Transpose", e.op("Slice", cut), outs, perm=[perm.index(i) for i in range(rank)])


def avg_pool(e, node, ins, outs, a):
    """AveragePool; ``dilations`` (opset 19's) only where a dilation is not 1, so an undilated
    pool is the node it always was."""
    dilation = list(a.get("dilation") or [])
    dilated = {"dilations": dilation} if any(d != 1 for d in dilation) else {}
    e.op("AveragePool", ins, outs, kernel_shape=list(a["kernel_size"]),
         strides=list(a["stride"]), pads=onnx_pads(a["padding"]),
         count_include_pad=int(a["count_include_pad"]), ceil_mode=int(a["ceil_mode"]), **dilated)


def _window_checked(convert: Converter) -> Converter:
    """``convert`` of a pool whose input has spatial sizes known only when the call runs, with
    the ABI's pool rule asked of them after the run (:class:`~.emitter.Checks`): where the
    input cannot hold a window the rule refuses the call, as the numpy backend does, where
    onnxruntime computes one window past the input (``(n + pads - k) / s`` truncated toward
    0) or an empty output."""
    def wrapped(e, node, ins, outs, a):
        if any(type(d) is not int for d in e.types[ins[0]].shape[2:]):
            [shape] = e.op("Shape", ins[:1])
            e.checks.shapes.append((shape, functools.partial(pool_sizes, node.op, attrs=a),
                                    node.name))
        convert(e, node, ins, outs, a)
    return wrapped


#: glue op name (version 1) -> converter(emitter, node, input names, output names, attrs)
CONVERTERS: dict[str, Converter] = {
    "identity": _simple("Identity"), "relu": relu, "sigmoid": _simple("Sigmoid"),
    "tanh": _simple("Tanh"), "gelu": gelu, "softmax": lambda e, n, i, o, a: e.op(
        "Softmax", i, o, axis=a["axis"]),
    "elu": _alpha("Elu", "alpha"), "leaky_relu": _alpha("LeakyRelu", "alpha"),
    "hard_sigmoid": _alpha("HardSigmoid", "alpha", "beta"), "hard_swish": _simple("HardSwish"),
    "softplus": _simple("Softplus"), "exp": _simple("Exp"), "log": _simple("Log"),
    "sqrt": _simple("Sqrt"), "reciprocal": _simple("Reciprocal"), "erf": _simple("Erf"),
    "abs": _simple("Abs"), "neg": _simple("Neg"), "prelu": _simple("PRelu"),
    "pow": _simple("Pow"), "max": _simple("Max"), "min": _simple("Min"),
    "equal": _simple("Equal"), "greater": _simple("Greater"),
    "greater_equal": _simple("GreaterOrEqual"), "less": _simple("Less"),
    "less_equal": _simple("LessOrEqual"), "not": _simple("Not"), "where": _simple("Where"),
    "and": _simple("And"), "or": _simple("Or"), "floor": _simple("Floor"),
    "ceil": _simple("Ceil"), "round": _simple("Round"),
    "add": _simple("Add"), "sub": _simple("Sub"), "mul": _simple("Mul"), "div": _simple("Div"),
    "matmul": _simple("MatMul"), "mean": mean, "cast": cast, "bitcast": bitcast, "clip": clip,
    "sum": _reduce("ReduceSum"), "amax": _extreme("ReduceMax"), "amin": _extreme("ReduceMin"),
    "argmax": _arg("ArgMax"),
    "sin": _simple("Sin"), "cos": _simple("Cos"), "sign": _simple("Sign"),
    "log_softmax": lambda e, n, i, o, a: e.op("LogSoftmax", i, o, axis=a["axis"]),
    "argmin": _arg("ArgMin"), "prod": prod,
    "mod": mod,
    "int_div": int_div,
    "bitwise_and": _simple("BitwiseAnd"), "bitwise_or": _simple("BitwiseOr"),
    "bitwise_xor": _simple("BitwiseXor"), "bitwise_not": _simple("BitwiseNot"),
    "bit_shift": lambda e, n, i, o, a: e.op("BitShift", i, o, direction=a["direction"].upper()),
    "gather_elements": gather_elements,
    "scatter_elements": scatter_elements, "det": det,
    "tan": _simple("Tan"), "atan": _simple("Atan"), "asin": _simple("Asin"),
    "acos": _simple("Acos"), "sinh": _simple("Sinh"), "cosh": _simple("Cosh"),
    "asinh": _simple("Asinh"), "acosh": _simple("Acosh"), "atanh": _simple("Atanh"),
    "isnan": _simple("IsNaN"),
    "isinf": lambda e, n, i, o, a: e.op("IsInf", i, o, detect_positive=int(a["detect_positive"]),
                                        detect_negative=int(a["detect_negative"])),
    "cumsum": lambda e, n, i, o, a: e.op("CumSum", [i[0], e.const(a["axis"], np.int64)], o,
                                         exclusive=int(a["exclusive"]),
                                         reverse=int(a["reverse"])),
    "cumprod": cumprod, "topk": topk, "dynamic_quantize": dynamic_quantize,
    "quantize_linear": quantize_linear,
    "concat": lambda e, n, i, o, a: e.op("Concat", i, o, axis=a["axis"]),
    "reshape": reshape, "flatten": flatten, "unflatten": unflatten,
    "transpose": lambda e, n, i, o, a: e.op("Transpose", i, o, perm=list(a["perm"])),
    "slice": slice_, "split": split, "pad": pad,
    "max_pool": _window_checked(max_pool_nan),
    "max_pool_with_indices": _window_checked(max_pool_with_indices),
    "avg_pool": _window_checked(avg_pool),
    "resize": resize, "grid_sample": grid_sample,
    "gather": gather, "expand": _ints_input("Expand", "shape"),
    "tile": _ints_input("Tile", "repeats"),
}
