"""ONNX Resize (torch's interpolate and Upsample, antialiased too) as ``resize``, or where that
op cannot say it (tf_crop_and_resize's region of interest and extrapolation; a
keep_aspect_ratio_policy size that is not floor(in * scale)) as constant gathers and weights
along each resized axis (:func:`_resize_by_axes`). 8-bit codes (the QOperator format's Resize)
resize nearest as ``resize`` of the codes in their dtype, bilinear as onnxruntime's kernel
computes them (:func:`_bilinear_codes`). Registered in :data:`.ops.MAPPERS` on import.
"""
from __future__ import annotations

import math

import numpy as np

from abi.ops import dims
from abi.ops.sampling import scaled_size
from abi.resampling import axis_taps, coordinates

from ..errors import ModelFileError

from .fold import axis_in
from .ops import _few, _only, _opt, maps
from .run_time_sizes import sizes_like

_RESIZE_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                       "half_pixel_symmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")
F32 = np.float32


def _resize_given(imp, node, shape: list, axes: list) -> tuple[list, list | None]:
    """``(size, scales)`` of the spatial axes from the constant scales or sizes input (sizes
    that hold run-time dims: those dims, as the input's shape gives them); the batch and
    channel axes must stay as they are."""
    scales, sizes = (_opt(node, i) for i in (2, 3))
    scales = imp.const(scales, "scales") if scales else None
    if sizes and sizes in imp.sym:  # from the input's shape: a run-time batch is kept
        sizes = imp.sym[sizes]
    else:
        sizes = imp.const(sizes, "sizes") if sizes else None
    scales = None if scales is None or not scales.size else scales
    sizes = None if sizes is None or not sizes.size else sizes
    if (scales is None) == (sizes is None):
        raise imp.unsupported("needs exactly one of the scales and sizes inputs, non-empty")
    given = scales if sizes is None else sizes
    what = "scales" if sizes is None else "sizes"
    if given.ndim != 1 or given.size != len(axes) or given.dtype.kind not in (
            "f" if sizes is None else "iO"):
        raise imp.unsupported(f"{what} {_few(given.ravel().tolist())} must be {len(axes)} "
                              f"{'floats' if sizes is None else 'integers'}, one per axis")
    full = [1.0] * len(shape) if sizes is None else list(shape)
    for a, v in zip(axes, given.tolist()):
        full[a] = v
    if full[:2] != ([1.0, 1.0] if sizes is None else list(shape[:2])):
        raise imp.unsupported(f"{what} {_few(given.tolist())} does not keep the batch and "
                              f"channel axes of input shape {shape} as they are (only the "
                              f"spatial axes may change)")
    if sizes is not None:
        return full[2:], None
    bad = [s for s in full[2:] if not (0 < s <= 1e9)]
    if bad:
        raise imp.unsupported(f"scales {_few(given.tolist())} must be in (0, 1e9]")
    # a run-time spatial dim's size is floor(in * scale) when the call runs (-1)
    return ([scaled_size(d, s) if type(d) is int else -1 for d, s in zip(shape[2:], full[2:])],
            [float(s) for s in full[2:]])


def _aspect_policy(imp, attrs: dict, shape: list, axes: list, size: list,
                   scales) -> tuple[list, list]:
    """keep_aspect_ratio_policy not_larger / not_smaller (opset 18), as onnxruntime applies it:
    one float32 scale, the least (not_larger) or the greatest (not_smaller) of sizes / in over
    ``axes``; each of those axes becomes round(scale * in) long (the float32 product, halves
    away from zero) and takes that scale for its coordinates, every other axis keeps its
    length (scale 1). The resized axes must be static and the axes attribute non-negative
    (onnxruntime leaves a negative axis out of the policy: its size is the input's); the batch
    and channel axes must come out with scale 1. Returns the spatial axes' ``(size, scales)``
    (-1 where a kept axis is a run-time dim)."""
    policy = attrs["keep_aspect_ratio_policy"]
    what = f"attribute keep_aspect_ratio_policy={policy!r}"
    if scales is not None:
        raise imp.unsupported(f"{what} needs the sizes input, not scales (onnxruntime refuses "
                              f"scales with it)")
    if any(a < 0 for a in attrs.get("axes", ())):
        raise imp.unsupported(f"{what} with negative axes {attrs['axes']}: onnxruntime leaves "
                              f"a negative axis out of the policy (its size stays the input's), "
                              f"unlike ONNX; give the axes as non-negative")
    full = list(shape[:2]) + list(size)
    given = [full[a] for a in axes]
    for a in axes:
        if type(shape[a]) is not int or type(full[a]) is not int:
            raise imp.unsupported(f"{what} with sizes {given} on input shape {shape}: axis {a} "
                                  f"is a run-time dim (the scale is computed at import, so the "
                                  f"resized axes must be static)")
    if min(given) < 1 or min(shape[a] for a in axes) < 1:
        raise imp.unsupported(f"{what} with sizes {given} on input shape {shape}: every size "
                              f"and input dim on axes {axes} must be >= 1")
    ratios = [F32(full[a]) / F32(shape[a]) for a in axes]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    out, scale_of = list(shape), [F32(1)] * len(shape)
    for a in axes:
        out[a] = int(math.floor(float(scale * F32(shape[a])) + 0.5))
        scale_of[a] = scale
    if out[:2] != list(shape[:2]) or scale_of[0] != 1 or scale_of[1] != 1:
        raise imp.unsupported(f"{what} with sizes {given} on input shape {shape} gives the "
                              f"batch and channel axes the scale {float(scale)} too (output "
                              f"shape {out}): only the spatial axes may change (give axes over "
                              f"the spatial axes alone)")
    if min(o for o in out[2:] if type(o) is int) < 1:
        raise imp.unsupported(f"{what} with sizes {given} on input shape {shape} gives output "
                              f"shape {out} (scale {float(scale)}): an empty output is not "
                              f"supported")
    return [o if type(o) is int else -1 for o in out[2:]], [float(v) for v in scale_of[2:]]


def _resize_roi(imp, node, shape: list, axes: list) -> list[tuple[float, float]]:
    """tf_crop_and_resize's (start, end) per spatial axis from the constant roi (float32, the
    starts then the ends, one of each per entry of ``axes``: every axis without the axes
    attribute); (0, 1) where the roi input is not given, as onnxruntime."""
    name = _opt(node, 1)
    if name is None:
        return [(0.0, 1.0)] * (len(shape) - 2)
    roi = imp.const(name, "roi")
    if roi.ndim != 1 or roi.size != 2 * len(axes):
        raise ModelFileError(f"roi {_few(roi.ravel().tolist())} must hold {2 * len(axes)} "
                             f"values, a start and an end for each of the {len(axes)} axes "
                             f"(input shape {shape}, axes {axes})")
    if roi.dtype != np.float32:
        raise imp.unsupported(f"roi {name!r} of dtype {roi.dtype}: only float32 (onnxruntime "
                              f"reads no other)")
    if not np.isfinite(roi).all():
        raise imp.unsupported(f"roi {_few(roi.tolist())} must be finite")
    ends = {a: (float(roi[i]), float(roi[len(axes) + i])) for i, a in enumerate(axes)}
    return [ends.get(a, (0.0, 1.0)) for a in range(2, len(shape))]


def _resize_by_axes(imp, node, attrs: dict, shape: list, size: list, scales,
                    roi: list | None) -> None:
    """Resize as onnxruntime computes it, where the resize op cannot say it (tf_crop_and_resize;
    a keep_aspect_ratio_policy size other than floor(in * scale)): along each spatial axis,
    innermost first, a ``gather`` of constant indices per tap
    (:func:`abi.resampling.axis_taps` at onnxruntime's coordinates,
    :func:`abi.resampling.coordinates`), a ``mul`` by its constant weights (and a ``div`` by
    the exclude_outside divisor) and an ``add`` of the taps. As onnxruntime, an
    axis whose float32 scale (``scales``, else out / in) is 1 is read where it is, whatever
    its roi (nearest: not at all; linear and cubic weigh its neighbours by 0, so an inf there
    gives nan, as onnxruntime's; a run-time such axis is left alone), and a Resize that keeps
    every size gives x. With tf_crop_and_resize (``roi``: (start, end) per spatial axis), a
    ``where`` per axis then puts extrapolation_value at the positions whose coordinate falls
    outside [0, in - 1]. The other axes must be static and x float32; the numbers are the
    numpy backend's resize's (nearest and cubic onnxruntime's bit for bit)."""
    x, out = node.input[0], node.output[0]
    coordinate = attrs.get("coordinate_transformation_mode", "half_pixel")
    plan = []
    for i, (d, o) in enumerate(zip(shape[2:], size)):
        s = scales[i] if scales is not None else (
            1.0 if dims.known_equal(o, d) else None if type(o) is not int or type(d) is not int
            else float(F32(o) / F32(d)))
        if s is not None and F32(s) == 1:
            plan.append((d, d, None))
            continue
        if type(d) is not int or type(o) is not int or o < 0:
            raise imp.unsupported(f"input shape {shape} to size {size}: spatial axis {i} is "
                                  f"a run-time dim; {_why(attrs)} needs the resized axes "
                                  f"static (the indices and weights are built at import)")
        if o < 1:
            raise imp.unsupported(f"output spatial size {size}: every entry must be >= 1 "
                                  f"(an empty output is not supported)")
        plan.append((d, o, s))
    if all(dims.known_equal(o, d) for d, o, _ in plan):  # onnxruntime copies x, whatever
        imp.emit("identity", [imp.tensor(x)], [out])     # the scales and the roi
        return
    dtype = imp.type_of(x).dtype
    if dtype != "float32":
        raise imp.unsupported(f"input {x!r} of dtype {dtype}: {_why(attrs)} needs float32 "
                              f"(onnxruntime's Resize has no {dtype})")
    y, rank, now = imp.tensor(x), len(shape), list(shape)
    outside = []
    for i in reversed(range(len(plan))):
        d, o, s = plan[i]
        axis = 2 + i
        if s is None:  # kept; linear and cubic still weigh its neighbours by 0, as onnxruntime
            if attrs.get("mode", "nearest") == "nearest" or type(d) is not int:
                continue
            c = np.arange(d, dtype=F32)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                c = coordinates(o, d, s, coordinate, roi[i] if roi is not None else None)
            if not np.isfinite(c).all():  # onnxruntime would read a nan coordinate anywhere
                raise imp.unsupported(f"roi {list(roi[i])} of spatial axis {i} (input shape "
                                      f"{shape}) puts coordinates past float32's range")
        if roi is not None and s is not None:  # read x there: where replaces it
            mask = (c < 0) | (c > F32(d - 1))
            c = np.where(mask, F32(0), c)
            if mask.any():
                outside.append((axis, mask))
        now[axis] = o
        imp.check_size(f"its resize along axis {axis}", now)
        taps = axis_taps(c, d, attrs.get("mode", "nearest"),
                         attrs.get("nearest_mode", "round_prefer_floor"),
                         attrs.get("cubic_coeff_a", -0.75), attrs.get("exclude_outside", 0),
                         i == len(plan) - 1)
        y = _resample(imp, y, axis, rank, taps,
                      f"{out}.axis{axis}", f"/axis{axis}")
    if outside:
        value = imp.add_constant(np.asarray(attrs.get("extrapolation_value", 0.0), F32),
                                 f"{out}.extrapolation_value")
        for axis, mask in outside:
            bool_mask = mask.reshape((-1,) + (1,) * (rank - 1 - axis))
            [y] = imp.emit("where", [imp.add_constant(bool_mask, f"{out}.axis{axis}.outside"),
                                     value, y], [None], suffix=f"/axis{axis}.outside")
    imp.emit("identity", [y], [out])


def _why(attrs: dict) -> str:
    """What sends a Resize to :func:`_resize_by_axes`, for its messages."""
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        return "coordinate_transformation_mode='tf_crop_and_resize'"
    return f"keep_aspect_ratio_policy={attrs.get('keep_aspect_ratio_policy')!r}"


def _resample(imp, y: str, axis: int, rank: int, taps: tuple, origin: str, suffix: str) -> str:
    """``y`` resampled along ``axis`` by ``taps`` (:func:`abi.resampling.axis_taps`): each
    tap's ``gather``, times its weights, divided by the divisor, the taps added one after the
    other."""
    reads, divisor = taps
    shape = (-1,) + (1,) * (rank - 1 - axis)
    if divisor is not None:
        divisor = imp.add_constant(divisor.astype(F32).reshape(shape), f"{origin}.divisor")
    total = None
    for k, (index, weights) in enumerate(reads):
        [t] = imp.emit("gather", [y, imp.add_constant(index, f"{origin}.index{k}")], [None],
                       {"axis": axis}, suffix=f"{suffix}.gather{k}")
        if weights is not None:
            [t] = imp.emit("mul", [t, imp.add_constant(weights.astype(F32).reshape(shape),
                                                       f"{origin}.weight{k}")], [None],
                           suffix=f"{suffix}.weigh{k}")
        if divisor is not None:
            [t] = imp.emit("div", [t, divisor], [None], suffix=f"{suffix}.divide{k}")
        total = t if total is None else imp.emit("add", [total, t], [None],
                                                 suffix=f"{suffix}.sum{k}")[0]
    return total


def _bilinear_codes(imp, x: str, shape: list, size: list, scales, coordinate: str) -> str:
    """onnxruntime's bilinear resize of 8-bit codes ``x`` (float32, (N, C, H, W)), as float32
    codes: its float32 kernel's ``dx2*dy2*X11 + dx1*dy2*X21 + dx2*dy1*X12 + dx1*dy1*X22``
    (X11 at the upper-left neighbour, X21 the one right of it, X12 the one below; the weights'
    products constants formed in float32, the terms added in that order), truncated toward zero
    as its cast to the 8-bit type does."""
    if not all(type(d) is int for d in [*shape[2:], *size]):
        raise imp.unsupported(f"mode='linear' on 8-bit integers of shape {shape} to size "
                              f"{size}: the spatial dims must be static (the weights are built "
                              f"at import)")
    taps = []
    for axis, (length, out) in enumerate(zip(shape[2:], size)):
        c = coordinates(out, length, None if scales is None else scales[axis], coordinate)
        taps.append(axis_taps(c, length, "linear", "", 0.0, False, axis == 1)[0])
    (y1, dy2), (y2, dy1) = taps[0]
    (x1, dx2), (x2, dx1) = taps[1]
    name = imp.node_name
    rows = {key: imp.emit("gather", [x, imp.add_constant(index, f"{name}.rows{key}")], [None],
                          {"axis": 2}, suffix=f"/rows{key}")[0]
            for key, index in (("1", y1), ("2", y2))}
    columns = {key: imp.add_constant(index, f"{name}.columns{key}")
               for key, index in (("1", x1), ("2", x2))}
    y = None
    for row, dy, column, dx in (("1", dy2, "1", dx2), ("1", dy2, "2", dx1), ("2", dy1, "1", dx2),
                                ("2", dy1, "2", dx1)):
        term = f"{row}{column}"
        [corner] = imp.emit("gather", [rows[row], columns[column]], [None], {"axis": 3},
                            suffix=f"/x{term}")
        weight = imp.add_constant((dx[None, :] * dy[:, None]).astype(F32), f"{name}.w{term}")
        [part] = imp.emit("mul", [weight, corner], [None], suffix=f"/w{term}")
        y = part if y is None else imp.emit("add", [y, part], [None], suffix=f"/sum{term}")[0]
    [t] = imp.emit("cast", [y], [None], {"dtype": "int32"}, suffix="/truncate")
    return imp.emit("cast", [t], [None], {"dtype": "float32"}, suffix="/codes")[0]


@maps("Resize")
def _resize(imp, node, attrs):
    """nearest and linear on 1, 2 or 3 spatial axes, cubic on 2 (onnxruntime has no other),
    with constant scales or sizes; antialias=1 (linear and cubic on 1 or 2 spatial axes, as
    onnxruntime) as ``resize``'s antialias. keep_aspect_ratio_policy not_larger / not_smaller
    (with sizes; the resized axes static, the axes attribute non-negative, the batch and
    channel axes left at scale 1) resolves at import to one scale and the sizes
    round(scale * in) (:func:`_aspect_policy`): the ``resize`` op with that scale where each
    size is floor(in * scale), else :func:`_resize_by_axes`. tf_crop_and_resize (a constant
    float32 roi, or none: (0, 1) on every axis; extrapolation_value outside the input; the
    resized axes static; float32; not antialias) is :func:`_resize_by_axes`."""
    _only(imp, attrs, {"mode": ..., "coordinate_transformation_mode": ..., "nearest_mode": ...,
                       "cubic_coeff_a": ..., "exclude_outside": ..., "antialias": ...,
                       "extrapolation_value": ..., "keep_aspect_ratio_policy": ...,
                       "axes": ...})
    mode = attrs.get("mode", "nearest")
    coordinate = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    for name, value, known in (("mode", mode, ("nearest", "linear", "cubic")),
                               ("coordinate_transformation_mode", coordinate,
                                _RESIZE_COORDINATES), ("nearest_mode", nearest, _NEAREST_MODES),
                               ("keep_aspect_ratio_policy", policy, _ASPECT_POLICIES)):
        if value not in known:
            raise imp.unsupported(f"attribute {name}={value!r} is not supported (only "
                                  f"{', '.join(known)})")
    coeff = attrs.get("cubic_coeff_a", -0.75)
    if type(coeff) is not float or not abs(coeff) <= 1e30:
        raise imp.unsupported(f"attribute cubic_coeff_a={coeff!r} must be a finite float")
    exclude = attrs.get("exclude_outside", 0)
    if exclude not in (0, 1):
        raise imp.unsupported(f"attribute exclude_outside={exclude!r} is not supported (only 0, "
                              f"1)")
    antialias = attrs.get("antialias", 0)
    if antialias not in (0, 1):
        raise imp.unsupported(f"attribute antialias={antialias!r} is not supported (only 0, 1)")
    if antialias and mode == "nearest":
        raise imp.unsupported("attribute antialias=1 with mode='nearest' is not supported: "
                              "onnxruntime refuses it (antialias only with linear and cubic)")
    x = node.input[0]
    shape = list(imp.type_of(x).shape)
    codes = imp.fake_quantized.get(x) or imp.type_of(x).dtype
    codes = codes if codes in ("int8", "uint8") else None
    if codes and mode == "cubic":
        raise imp.unsupported(f"mode='cubic' on {codes} input {x!r}: onnxruntime's CPU provider "
                              f"fails on a cubic resize of 8-bit integers when it runs; "
                              f"quantize in QDQ format (quant_format=QuantFormat.QDQ), where "
                              f"the Resize runs in float32")
    if codes and mode == "linear" and (len(shape) != 4 or antialias):
        raise imp.unsupported(f"mode='linear'{' with antialias=1' if antialias else ''} on "
                              f"{codes} input {x!r} of shape {shape}: 8-bit integers resize "
                              f"linearly only as (N, C, H, W) without antialias (onnxruntime's "
                              f"bilinear kernel, reproduced); quantize in QDQ format "
                              f"(quant_format=QuantFormat.QDQ), where the Resize runs in "
                              f"float32")
    if len(shape) not in (3, 4, 5):
        raise imp.unsupported(f"input shape {shape}: only (N, C, L), (N, C, H, W) and (N, C, D, "
                              f"H, W) resize")
    if antialias and len(shape) == 5:
        raise imp.unsupported(f"attribute antialias=1 on input shape {shape}: antialias is "
                              f"supported on 1 or 2 spatial axes")
    if mode == "cubic" and len(shape) != 4:
        raise imp.unsupported(f"input shape {shape}: mode='cubic' needs (N, C, H, W) (bicubic; "
                              f"onnxruntime has no other cubic)")
    axes = [axis_in(a, len(shape), "axes") for a in attrs.get("axes", range(len(shape)))]
    if len(set(axes)) != len(axes):
        raise imp.unsupported(f"attribute axes={attrs['axes']} names an axis twice")
    size, scales = _resize_given(imp, node, shape, axes)
    if policy != "stretch":
        size, scales = _aspect_policy(imp, attrs, shape, axes, size, scales)
    imp.check_size("its resize output", [*(d or 1 for d in shape[:2]),
                                         *(d if d != -1 else "run-time" for d in size)])
    crop = coordinate == "tf_crop_and_resize"
    if crop or scales is not None and not all(
            o == (scaled_size(d, s) if type(d) is int else -1)
            for d, o, s in zip(shape[2:], size, scales)):
        if codes:
            raise imp.unsupported(f"{_why(attrs)} on {codes} input {x!r}: 8-bit integers resize "
                                  f"only where each size is floor(in * scale)")
        if antialias:  # the windows are the resize op's
            raise imp.unsupported(f"attribute antialias=1 with {_why(attrs)}: not supported " + (
                "(the resize op's antialias windows have no region of interest)" if crop else
                f"where a size is not floor(in * scale) (sizes {size}, scales {scales}; the "
                f"resize op's antialias windows take no other)"))
        _resize_by_axes(imp, node, attrs, shape, size, scales,
                        _resize_roi(imp, node, shape, axes) if crop else None)
        return
    from .dynamic import _as_float, _as_integer  # they import .ops, which imports this
    from .qlinear import integer_op
    from .qoperator import bind_codes

    if codes and mode == "linear":
        bind_codes(imp, node, _bilinear_codes(imp, _as_float(imp, x), shape, size, scales,
                                              coordinate), codes)
        return

    inputs, like = [_as_integer(imp, x, codes) if codes else imp.tensor(x)], {}
    if not all(type(d) is int for d in size):  # run-time sizes: read from a tensor's shape
        if antialias:
            raise imp.unsupported(f"attribute antialias=1 to sizes {size}: the sizes must be "
                                  f"known at import (the weights are built then)")
        source, like_axes = sizes_like(imp, size)
        inputs.append(source)
        like = {"like_axes": like_axes}
        size = [d if type(d) is int else -1 for d in size]
    if antialias and not all(type(d) is int for d in shape[2:]):
        raise imp.unsupported(f"attribute antialias=1 on input shape {shape}: the spatial dims "
                              f"must be static (the weights are built at import)")
    if antialias and min(size) < 1:  # as the resize op refuses it
        raise imp.unsupported(f"attribute antialias=1 with output spatial size {size}: every "
                              f"entry must be >= 1 (an empty output is not supported)")
    if antialias and imp.type_of(x).dtype != "float32":
        raise imp.unsupported(f"input {x!r} of dtype {imp.type_of(x).dtype}: antialias=1 needs "
                              f"float32 (onnxruntime's Resize has no {imp.type_of(x).dtype})")
    if antialias and list(size) == list(shape[2:]):  # onnxruntime copies x, as resize does
        antialias = exclude = 0
    attrs = {"size": size, "scales": scales, "mode": mode, "coordinate_mode": coordinate,
             "nearest_mode": nearest, "cubic_coeff_a": coeff, "exclude_outside": bool(exclude),
             "antialias": bool(antialias), **like}
    if codes:  # nearest copies values: the 8-bit codes in their dtype, as onnxruntime's Resize
        integer_op(imp, node, "resize", inputs, attrs, codes)
    else:
        imp.emit("resize", inputs, [node.output[0]], attrs)
