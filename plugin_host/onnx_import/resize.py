"""ONNX Resize (torch's interpolate and Upsample, antialiased too) as ``resize``, or where that
op cannot say it (tf_crop_and_resize's region of interest and extrapolation; a
keep_aspect_ratio_policy size that is not floor(in * scale)) as constant gathers and weights
along each resized axis (:func:`_resize_by_axes`). Registered in :data:`.ops.MAPPERS` on
import.
"""
from __future__ import annotations

import math

import numpy as np

from abi.ops import dims
from abi.ops.glue import scaled_size

from ..errors import ModelFileError

from .fold import axis_in
from .ops import _few, _only, _opt, maps
from .shapes import sizes_like

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


def _coordinates(out: int, length: int, scale: float, mode: str, roi) -> np.ndarray:
    """The input coordinate onnxruntime reads for each of the ``out`` positions ``o`` along an
    axis of ``length`` (float32, its order of operations; ``scale`` the axis' float32 scale):
    tf_crop_and_resize ``start * (in - 1) + o * (end - start) * (in - 1) / (out - 1)`` for
    ``roi`` (start, end), ``(start + end) / 2 * (in - 1)`` where out is 1; the other modes as
    the resize op's (pytorch_half_pixel and align_corners 0 where out is 1)."""
    o = np.arange(out, dtype=F32)
    s = F32(scale)
    if mode == "tf_crop_and_resize":
        start, end = F32(roi[0]), F32(roi[1])
        if out == 1:  # the float32 sum, then float64 as onnxruntime, rounded once
            return np.array([0.5 * float(start + end) * (length - 1)], F32)
        return start * F32(length - 1) + o * (end - start) * F32(length - 1) / F32(out - 1)
    if mode == "asymmetric":
        return o / s
    if mode == "align_corners":
        return np.zeros(1, F32) if out == 1 else o * F32(length - 1) / F32(out - 1)
    if mode == "pytorch_half_pixel" and out == 1:
        return np.zeros(1, F32)
    if mode == "tf_half_pixel_for_nn":
        return (o + F32(0.5)) / s
    if mode == "half_pixel_symmetric":  # the offset in float32, the rest in float64
        offset = F32(length) / F32(2) * (F32(1) - F32(out) / (s * F32(length)))
        return (np.float64(offset) + (o.astype(np.float64) + 0.5) / np.float64(s)
                - 0.5).astype(F32)
    return (o + F32(0.5)) / s - F32(0.5)


def _cubic_weights(frac: np.ndarray, a: float) -> list:
    """onnxruntime's cubic (Keys) weights of the taps at floor - 1 .. floor + 2 for the
    fractional parts ``frac`` of the coordinates, float32 in its order of operations."""
    a, one, two = F32(a), F32(1), F32(2)
    d = np.abs(frac)

    def near(t):  # |t| <= 1
        return ((a + two) * t - (a + F32(3))) * t * t + one

    def far(t):  # 1 < |t| < 2
        return ((a * t - F32(5) * a) * t + F32(8) * a) * t - F32(4) * a

    return [far(d + one), near(d), near(one - d), far(two - d)]


def _axis_taps(c: np.ndarray, length: int, attrs: dict, last: bool) -> tuple[list, object]:
    """What one axis reads at the coordinates ``c``, as onnxruntime: ``([(indices, weights or
    None), ...], divisor or None)``. nearest: the coordinate rounded by nearest_mode (one within
    1e-6 of a half taken as the half, as onnxruntime 1.32 rounds), clamped into the input;
    linear: the two neighbours of the coordinate clamped into [0, in - 1], each weighted by its
    distance to the other (0.5 each at the last element); cubic: the 4 taps from floor(c) - 1,
    clamped into the input, weighted by Keys' kernel; with exclude_outside those outside weigh
    0 and the others are divided by their sum (folded into the innermost axis' weights, else
    the divisor of each weighted tap)."""
    mode = attrs.get("mode", "nearest")
    if mode == "nearest":
        floor = np.floor(c)
        frac = c - floor
        half = np.abs(frac - F32(0.5)) < 1e-6
        index = {"floor": floor, "ceil": np.ceil(c),
                 "round_prefer_floor": floor + ((frac > 0.5) & ~half),
                 "round_prefer_ceil": floor + ((frac >= 0.5) | half)}[
            attrs.get("nearest_mode", "round_prefer_floor")]
        return [(np.clip(index, 0, length - 1).astype(np.int64), None)], None
    if mode == "linear":
        c = np.clip(c, F32(0), F32(length - 1))
        i0 = np.floor(c).astype(np.int64)
        i1 = np.minimum(i0 + 1, length - 1)
        w0 = (i1 - c).astype(F32)
        w1 = (c - i0).astype(F32)
        edge = i0 == i1
        w0[edge] = w1[edge] = 0.5
        return [(i0, w0), (i1, w1)], None
    floor = np.floor(c)
    taps = floor.astype(np.int64) - 1 + np.arange(4, dtype=np.int64)[:, None]
    weights = np.stack(_cubic_weights(c - floor, attrs.get("cubic_coeff_a", -0.75)))
    divisor = None
    if attrs.get("exclude_outside", 0):
        weights[(taps < 0) | (taps >= length)] = 0
        total = np.zeros(c.shape, F32)
        for w in weights:  # summed one tap after the other, as onnxruntime
            total += w
        if last:
            weights = weights / total
        else:
            divisor = total
    return list(zip(np.clip(taps, 0, length - 1), weights)), divisor


def _resize_by_axes(imp, node, attrs: dict, shape: list, size: list, scales,
                    roi: list | None) -> None:
    """Resize as onnxruntime computes it, where the resize op cannot say it (tf_crop_and_resize;
    a keep_aspect_ratio_policy size other than floor(in * scale)): along each spatial axis,
    innermost first, a ``gather`` of constant indices per tap (:func:`_axis_taps` at
    onnxruntime's coordinates, :func:`_coordinates`), a ``mul`` by its constant weights (and
    a ``div`` by the exclude_outside divisor) and an ``add`` of the taps. As onnxruntime, an
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
                c = _coordinates(o, d, s, coordinate, roi[i] if roi is not None else None)
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
        y = _resample(imp, y, axis, rank, _axis_taps(c, d, attrs, i == len(plan) - 1),
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
    """``y`` resampled along ``axis`` by ``taps`` (:func:`_axis_taps`): each tap's ``gather``,
    times its weights, divided by the divisor, the taps added one after the other."""
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
        if antialias:  # the windows are the resize op's
            raise imp.unsupported(f"attribute antialias=1 with {_why(attrs)}: not supported " + (
                "(the resize op's antialias windows have no region of interest)" if crop else
                f"where a size is not floor(in * scale) (sizes {size}, scales {scales}; the "
                f"resize op's antialias windows take no other)"))
        _resize_by_axes(imp, node, attrs, shape, size, scales,
                        _resize_roi(imp, node, shape, axes) if crop else None)
        return
    inputs, like = [imp.tensor(x)], {}
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
    imp.emit("resize", inputs, [node.output[0]],
             {"size": size, "scales": scales, "mode": mode, "coordinate_mode": coordinate,
              "nearest_mode": nearest, "cubic_coeff_a": coeff, "exclude_outside": bool(exclude),
              "antialias": bool(antialias), **like})
