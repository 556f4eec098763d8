"""ONNX RoiAlign (torchvision's roi_align and MultiScaleRoIAlign, as a detector's second stage
exports them) in its average mode, written back as ONNX nodes and mapped as the model's own
(:mod:`.written`).

Each roi (x1, y1, x2, y2) is scaled by ``spatial_scale`` and, with ``half_pixel`` (opset 16's
default), moved by half a pixel; without it its size is at least 1 (``output_half_pixel``,
opset 10's only behaviour). Its (output_height, output_width) bins each take sampling_ratio *
sampling_ratio points at ``start + (p + (i + 0.5) / sampling_ratio) * bin``, bilinearly, as
onnxruntime's kernel: a point more than a pixel outside the map gives 0, one less than a pixel
outside takes the border's value (GridSample's border padding, at the points normalised to its
grid, then a mask), and the bin is their mean (an AveragePool over the points). The roi's map
is the batch image its index names (a Gather of the features, so an index outside the batch is
refused when the call runs).

``sampling_ratio`` 0 (torchvision's default -1 exports so) samples ceil(bin size) points per
bin along each axis, a count each roi sets at run time: the points are laid out for the most a
roi of the map's size and a pixel past each side needs, ceil((size + 2) / bins), placed at
start + p * bin + (i + 0.5) * bin / count, those past the roi's count masked, and the bin is
their sum over the roi's count of points (at least 1). A roi needing more points than laid out
is refused when the call runs (an Embedding checks each count), as is a roi of negative size
along one axis only, on which onnxruntime fails (negative along both, both give 0). The golden
cases then draw a rois input's corners in order (:attr:`.convert.ImportedModel.ordered_columns`).

A batch of one map (a device's usual batch) needs no gather: every roi's points are sampled
from it as one grid, and an Embedding of one row of zeros, added to the points, checks that
each batch index is 0; the rois' count may then be a run-time dim. The height and width of the
map must be known at import. Refused naming the node: a run-time count of rois over a batch of
several maps, ``mode`` max, a negative ``sampling_ratio``, inputs of the wrong rank or shape.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from ..errors import ModelFileError

from .ops import _only, maps
from .written import Written


@maps("RoiAlign")
def _roi_align(imp, node, attrs):
    _only(imp, attrs, {"mode": ..., "output_height": ..., "output_width": ...,
                       "sampling_ratio": ..., "spatial_scale": ...,
                       "coordinate_transformation_mode": ...})
    x, rois, index = [*node.input, "", ""][:3]
    mode = attrs.get("mode", "avg")
    if mode != "avg":
        raise imp.unsupported(f"attribute mode={mode!r}: only 'avg' is supported (torchvision's "
                              f"roi_align exports it); onnxruntime's max mode takes the max of "
                              f"each point's four weighted neighbours rather than of the "
                              f"points, which onnxruntime itself warns is incorrect")
    ratio = attrs.get("sampling_ratio", 0)
    if type(ratio) is not int or ratio < 0:
        raise imp.unsupported(f"sampling_ratio={ratio!r} must be a count of points, or 0 for "
                              f"ceil(roi size / bins) (torchvision's -1 exports as 0)")
    oh, ow = attrs.get("output_height", 1), attrs.get("output_width", 1)
    if type(oh) is not int or type(ow) is not int or min(oh, ow) < 1:
        raise imp.unsupported(f"output_height={oh!r} and output_width={ow!r} must be positive "
                              f"counts")
    transform = attrs.get("coordinate_transformation_mode",
                          "half_pixel" if imp.opset >= 16 else "output_half_pixel")
    if transform not in ("half_pixel", "output_half_pixel"):
        raise imp.unsupported(f"coordinate_transformation_mode={transform!r} is not supported "
                              f"(half_pixel, output_half_pixel)")
    scale = attrs.get("spatial_scale", 1.0)
    if not np.isfinite(scale):
        raise imp.unsupported(f"spatial_scale={scale!r} must be finite")
    shape = list(imp.type_of(x).shape)
    if len(shape) != 4 or not all(type(d) is int for d in shape[2:]):
        raise imp.unsupported(f"input {x!r} of shape {shape}: needs (N, C, H, W) with H and W "
                              f"known at import")
    h, w = shape[2:]
    if min(h, w) < 1 or not imp.type_of(x).dtype.startswith("float"):
        raise imp.unsupported(f"input {x!r} of {imp.type_of(x).dtype} {shape}: needs a float "
                              f"map of height and width >= 1")
    # per bin, along y and x: ratio points, or (adaptive) room for the most a roi of the map's
    # size and a pixel past each side needs, ceil((size + 2) / bins)
    counts = (ratio, ratio) if ratio else (-(-(h + 2) // oh), -(-(w + 2) // ow))
    points = oh * counts[0] * ow * counts[1]
    if points > imp.limits.max_tensor_elements:
        raise ModelFileError(f"output_height {oh}, output_width {ow} and sampling_ratio "
                             f"{ratio} sample {points} points per roi, over the cap of "
                             f"{imp.limits.max_tensor_elements}", node=imp.node_name,
                             op=node.op_type)
    r_shape, i_shape = list(imp.type_of(rois).shape), list(imp.type_of(index).shape)
    if len(r_shape) != 2 or r_shape[1] != 4 or len(i_shape) != 1:
        raise imp.unsupported(f"rois {rois!r} of shape {r_shape} and batch_indices {index!r} of "
                              f"shape {i_shape}: need (num_rois, 4) and (num_rois,)")
    single = shape[0] == 1
    if not single and type(r_shape[0]) is not int:
        raise imp.unsupported(f"{r_shape[0]!r} rois, a run-time count, over a batch of "
                              f"{shape[0]!r} maps: each roi's map is gathered by its batch index, "
                              f"which needs the count known at import (a batch of 1 needs no "
                              f"gather)")
    dtype = dtypes.to_numpy(imp.type_of(x).dtype)
    s = Written(imp, node)

    def const(name, value):
        return s.const(name, np.asarray(value, dtype))

    boxes = s.add("Mul", [rois, const("spatial_scale", scale)], "scaled")
    if transform == "half_pixel":
        boxes = s.add("Sub", [boxes, const("half", 0.5)], "shifted")
    start = s.add("Gather", [boxes, s.const("starts", np.array([0, 1], np.int64))], "start",
                  axis=1)
    if single:  # every index must be 0: an Embedding of one row of zeros checks them
        start = s.add("Add", [start, s.checked_zeros(index, 1, dtype, "batch_check")],
                      "checked_start")
    end = s.add("Gather", [boxes, s.const("ends", np.array([2, 3], np.int64))], "end", axis=1)
    size = s.add("Sub", [end, start], "size")
    if transform == "output_half_pixel":
        size = s.add("Max", [size, const("one", 1.0)], "at_least_one")
    bins = s.add("Div", [size, const("bins", [ow, oh])], "bin")  # (num_rois, 2): x, y
    if not ratio:  # each roi's count of points per bin along x and y: ceil(bin size)
        grids = _adaptive_grids(s, const, dtype, bins, counts)
        if rois in imp.abi_inputs:  # golden rois of negative size would fail onnxruntime
            imp.ordered_columns[imp.abi_inputs[rois]] = ((0, 2), (1, 3))
    coordinates, minus_one = [], const("minus_one", -1.0)
    for axis, (count, extent, name, per_bin) in enumerate(((ow, w, "x", counts[1]),
                                                           (oh, h, "y", counts[0]))):
        at = s.const(f"{name}_axis", np.array([axis], np.int64))
        first = s.add("Gather", [start, at], f"{name}_start", axis=1)  # (num_rois, 1)
        step = s.add("Gather", [bins, at], f"{name}_bin", axis=1)
        if ratio:
            steps = (np.arange(count)[:, None] + (np.arange(ratio) + 0.5) / ratio).reshape(-1)
            points = s.add("Add", [first, s.add("Mul", [step, const(f"{name}_steps", steps)],
                                                f"{name}_offsets")], f"{name}_points")
        else:
            points, used = _adaptive_points(s, const, name, first, step, grids[axis], count,
                                            per_bin)
        inside = s.add("And", [
            s.add("GreaterOrEqual", [points, minus_one], f"{name}_after"),
            s.add("LessOrEqual", [points, const(f"{name}_extent", extent)], f"{name}_before")],
            f"{name}_inside")
        if not ratio:
            inside = s.add("And", [inside, used], f"{name}_used")
        normalised = s.add("Add", [s.add("Mul", [points, const(f"{name}_scale", 2 / extent)],
                                         f"{name}_scaled"),
                                   const(f"{name}_shift", 1 / extent - 1)], f"{name}_grid")
        coordinates.append((normalised, inside))
    (gx, x_in), (gy, y_in) = coordinates
    ny, nx = oh * counts[0], ow * counts[1]
    plane = const("plane", np.zeros((1, ny, nx)))
    gx = s.add("Add", [s.with_axes("Unsqueeze", gx, [1], "x_row"), plane], "x_plane")
    gy = s.add("Add", [s.with_axes("Unsqueeze", gy, [2], "y_column"), plane], "y_plane")
    grid = s.add("Concat", [s.with_axes("Unsqueeze", gx, [3], "x_last"),
                            s.with_axes("Unsqueeze", gy, [3], "y_last")], "grid", axis=3)
    inside = s.add("And", [s.with_axes("Unsqueeze", x_in, [1], "x_in_row"),
                           s.with_axes("Unsqueeze", y_in, [2], "y_in_column")], "inside")
    kept = s.with_axes("Unsqueeze", inside, [1], "kept_channels")
    if single:  # one map: every roi's points sampled from it as one grid
        rows = s.reshape(grid, [1, -1, nx, 2], "rows")
        sampled = s.add("GridSample", [x, rows], "sampled_rows", mode="bilinear",
                        padding_mode="border", align_corners=0)
        per_roi = s.reshape(sampled, [0, 0, -1, ny, nx], "per_roi")
        sampled = s.with_axes("Squeeze", s.add("Transpose", [per_roi], "rois_first",
                                               perm=[0, 2, 1, 3, 4]), [0], "sampled")
    else:
        maps_ = s.add("Gather", [x, index], "maps", axis=0)
        sampled = s.add("GridSample", [maps_, grid], "sampled", mode="bilinear",
                        padding_mode="border", align_corners=0)
    masked = s.add("Where", [kept, sampled, const("nought", 0.0)], "masked")
    if ratio:
        s.add("AveragePool", [masked], "mean", node.output[0], kernel_shape=[ratio, ratio],
              strides=[ratio, ratio])
    else:  # the points' sum over the roi's own count of them, at least 1
        mean = s.add("AveragePool", [masked], "mean", kernel_shape=list(counts),
                     strides=list(counts))
        total = s.add("Mul", [mean, const("room", counts[0] * counts[1])], "sum")
        used = s.add("Max", [s.add("Mul", grids, "points_used"), const("at_least_one", 1.0)],
                     "count")
        s.add("Div", [total, s.reshape(used, [-1, 1, 1, 1], "count_per_roi")], "average",
              node.output[0])
    s.inline()


def _adaptive_grids(s: Written, const, dtype, bins: str, counts: tuple[int, int]) -> list[str]:
    """sampling_ratio 0: each roi's count of points per bin along x and y, ceil(bin size) as
    onnxruntime's kernel takes it, at least 0 (a roi of negative size takes none), each
    (num_rois, 1). A count over the room laid out (``counts``, y and x) is refused when the
    call runs (an Embedding of that many rows plus one checks it), and so is a roi of
    negative size along one axis only (onnxruntime then fails on a negative count of points;
    negative along both, it gives 0)."""
    ceil = s.add("Ceil", [bins], "grid_ceil")  # (num_rois, 2): x, y
    per_axis = [s.add("Gather", [ceil, s.const(f"{name}_grid_axis", np.array([axis], np.int64))],
                      f"{name}_ceil", axis=1) for axis, name in enumerate("xy")]
    sign = s.add("Sign", [s.add("Mul", per_axis, "grid_product")], "grid_sign")
    checks = [s.checked_zeros(s.add("Cast", [s.reshape(sign, [-1], "grid_sign_row")],
                                    "grid_sign_index", to=7), 2, dtype, "sign_check")]
    # -1 (one axis negative) is refused; 0 and 1 pass
    grids = []
    for name, room, at in (("x", counts[1], per_axis[0]), ("y", counts[0], per_axis[1])):
        grid = s.add("Max", [at, const(f"{name}_none", 0.0)], f"{name}_grid")
        index = s.add("Cast", [s.reshape(grid, [-1], f"{name}_grid_row")],
                      f"{name}_grid_index", to=7)
        checks.append(s.checked_zeros(index, room + 1, dtype, f"{name}_grid_check"))
        grids.append(grid)
    zeros = s.add("Sum", checks, "grid_checks")  # (num_rois, 1) of zeros, once checked
    return [s.add("Add", [grid, zeros], f"{name}_grid_checked")
            for grid, name in zip(grids, "xy")]


def _adaptive_points(s: Written, const, name: str, first: str, step: str, grid: str,
                     bins: int, room: int) -> tuple[str, str]:
    """sampling_ratio 0 along one axis: ``room`` points laid out per bin, the roi's first
    ``grid`` of them at start + p * bin + (i + 0.5) * bin / grid as onnxruntime's kernel places
    them; the points (num_rois, bins * room), and which of them the roi uses."""
    divisor = s.add("Max", [grid, const(f"{name}_one", 1.0)], f"{name}_divisor")
    bin_at = np.repeat(np.arange(bins), room)
    point_at = np.tile(np.arange(room), bins)
    base = s.add("Add", [first, s.add("Mul", [step, const(f"{name}_bin_at", bin_at)],
                                      f"{name}_bin_offset")], f"{name}_bin_start")
    within = s.add("Div", [s.add("Mul", [const(f"{name}_point_at", point_at + 0.5), step],
                                 f"{name}_point_offset"), divisor], f"{name}_within")
    points = s.add("Add", [base, within], f"{name}_points")
    used = s.add("Less", [const(f"{name}_point_index", point_at), grid], f"{name}_in_grid")
    return points, used
