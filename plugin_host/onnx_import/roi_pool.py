"""ONNX MaxRoiPool (torchvision's roi_pool, Fast R-CNN's RoI pooling), written back as ONNX
nodes and mapped as the model's own (:mod:`.written`).

Each roi is a row (batch index, x1, y1, x2, y2) of a run-time tensor. As onnxruntime's kernel
(and torchvision's) does: the batch index is the first entry truncated to an integer; the
corners are scaled by ``spatial_scale`` and rounded half away from zero (C's ``round``: ONNX's
Round rounds half to even, so it is written as floor(|v|) plus one where the fraction is at
least a half, with v's sign); the roi spans end - start + 1 pixels, at least 1; bin i along an
axis covers [floor(i * size / bins), ceil((i + 1) * size / bins)) from the start, clipped to the
map, and takes the max there, never below the lowest float32 (so -inf gives -3.4e38); a bin
empty after the clipping gives 0.

Bins differ from roi to roi, so the max is taken by masks computed at run time: along the width
(each bin's columns kept, the others -inf, a ReduceMax), then along the height, over tensors of
rois * channels * height * width * bins elements (capped at import by the element cap). A nan
inside a bin gives nan; onnxruntime's running max there depends on where in the bin the nan lies
(it gives nan only when the nan is the bin's last element in row order).

A batch of one map needs no gather: an Embedding of one row of zeros checks that every batch
index is 0, and the count of rois may be a run-time dim. Over several maps each roi's map is a
Gather checked when the call runs, and the count must be known at import. The map's height,
width and channels must be known at import. The golden cases draw a rois input's batch column
as indices into the batch (:attr:`.convert.ImportedModel.index_columns`): a standard normal
there would mostly name no map, and onnxruntime refuses such a roi.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from ..errors import ModelFileError

from .ops import _only, maps
from .written import Written


@maps("MaxRoiPool")
def _max_roi_pool(imp, node, attrs):
    _only(imp, attrs, {"pooled_shape": ..., "spatial_scale": ...})
    x, rois = [*node.input, "", ""][:2]
    pooled = attrs.get("pooled_shape")
    if not isinstance(pooled, list) or len(pooled) != 2 \
            or not all(type(p) is int and p >= 1 for p in pooled):
        raise imp.unsupported(f"pooled_shape={pooled!r}: needs two positive counts (height, "
                              f"width)")
    ph, pw = pooled
    scale = attrs.get("spatial_scale", 1.0)
    if not (np.isfinite(scale) and scale > 0):
        raise imp.unsupported(f"spatial_scale={scale!r} must be finite and above 0 (onnxruntime "
                              f"refuses the others)")
    x_type = imp.type_of(x)
    shape = list(x_type.shape)
    if len(shape) != 4 or not all(type(d) is int for d in shape[1:]):
        raise imp.unsupported(f"input {x!r} of shape {shape}: needs (N, C, H, W) with C, H and "
                              f"W known at import")
    c, h, w = shape[1:]
    if min(h, w) < 1 or shape[0] == 0 or not x_type.dtype.startswith("float"):
        raise imp.unsupported(f"input {x!r} of {x_type.dtype} {shape}: needs a float map of "
                              f"height and width >= 1, in a batch of at least one (each roi "
                              f"names its map)")
    r_shape = list(imp.type_of(rois).shape)
    if len(r_shape) != 2 or r_shape[1] != 5:
        raise imp.unsupported(f"rois {rois!r} of shape {r_shape}: needs (num_rois, 5), each "
                              f"(batch index, x1, y1, x2, y2)")
    single = shape[0] == 1
    count = r_shape[0]
    if not single and type(count) is not int:
        raise imp.unsupported(f"{count!r} rois, a run-time count, over a batch of {shape[0]!r} "
                              f"maps: each roi's map is gathered by its batch index, which "
                              f"needs the count known at import (a batch of 1 needs no gather)")
    per_roi = c * h * w * max(ph, pw)
    total = per_roi * (count if type(count) is int else 1)
    if total > imp.limits.max_tensor_elements:
        raise ModelFileError(f"pooled_shape {pooled} over a map of {c} x {h} x {w} takes the max "
                             f"through masks of {total} elements, over the cap of "
                             f"{imp.limits.max_tensor_elements}", node=imp.node_name,
                             op=node.op_type)
    if rois in imp.abi_inputs:  # the golden cases draw its batch column inside the batch
        imp.index_columns[imp.abi_inputs[rois]] = (0, shape[0])
    dtype = dtypes.to_numpy(x_type.dtype)
    s = Written(imp, node)

    def const(name, value):
        return s.const(name, np.asarray(value, dtype))

    def columns(of, which, step):
        return s.add("Gather", [of, s.const(step, np.array(which, np.int64))], step, axis=1)

    index = s.add("Cast", [s.reshape(columns(rois, [0], "index_column"), [-1], "index_row")],
                  "index", to=7)  # truncated, as C's cast does
    corners = s.add("Mul", [columns(rois, [1, 2, 3, 4], "corners"),
                            const("spatial_scale", scale)], "scaled")
    if single:  # every index must be 0: an Embedding of one row of zeros checks them
        corners = s.add("Add", [corners, s.checked_zeros(index, 1, dtype, "batch_check")],
                        "checked")
        maps_ = x
    else:
        maps_ = s.add("Gather", [x, index], "maps", axis=0)
    magnitude = s.add("Abs", [corners], "magnitude")
    whole = s.add("Floor", [magnitude], "whole")
    half_up = s.add("Where", [s.add("GreaterOrEqual", [s.add("Sub", [magnitude, whole],
                                                                 "fraction"),
                                                       const("half", 0.5)], "half_or_more"),
                              const("one_up", 1.0), const("none_up", 0.0)], "half_up")
    rounded = s.add("Mul", [s.add("Sign", [corners], "sign"),
                            s.add("Add", [whole, half_up], "rounded_magnitude")], "rounded")
    start, end = columns(rounded, [0, 1], "start"), columns(rounded, [2, 3], "end")
    size = s.add("Max", [s.add("Add", [s.add("Sub", [end, start], "extent"), const("one", 1.0)],
                               "pixels"), const("at_least", 1.0)], "size")
    bins = s.add("Div", [size, const("bins", [pw, ph])], "bin")  # (rois, 2): x, y
    masks, empties = [], []
    for axis, (bins_, extent, name) in enumerate(((pw, w, "x"), (ph, h, "y"))):
        step = columns(bins, [axis], f"{name}_bin")  # (rois, 1)
        first = columns(start, [axis], f"{name}_start")
        bounds, columns_ = [], []
        for edge, op, offset in (("low", "Floor", 0), ("high", "Ceil", 1)):
            at = s.add(op, [s.add("Mul", [step, const(f"{name}_{edge}_steps",
                                                       np.arange(bins_) + offset)],
                                  f"{name}_{edge}_offset")], f"{name}_{edge}_whole")
            bounds.append(s.add("Clip", [s.add("Add", [at, first], f"{name}_{edge}_at"),
                                         const(f"{name}_floor", 0.0),
                                         const(f"{name}_ceiling", float(extent))],
                                f"{name}_{edge}"))  # (rois, bins)
            columns_.append(s.with_axes("Unsqueeze", bounds[-1], [2], f"{name}_{edge}_column"))
        low, high = columns_
        pixels = const(f"{name}_pixels", np.arange(extent).reshape(1, 1, -1))
        masks.append(s.add("And", [s.add("GreaterOrEqual", [pixels, low], f"{name}_after"),
                                   s.add("Less", [pixels, high], f"{name}_before")],
                           f"{name}_mask"))  # (rois, bins, extent)
        empties.append(s.add("LessOrEqual", [bounds[1], bounds[0]], f"{name}_empty"))
    x_mask, y_mask = masks
    lowest = const("minus_inf", -np.inf)
    # along the width: (rois, C, H, 1, W) against (rois, 1, 1, PW, W) -> (rois, C, H, PW)
    rows = s.with_axes("Unsqueeze", maps_, [3], "rows")
    kept = s.add("Where", [s.with_axes("Unsqueeze", x_mask, [1, 2], "x_mask_wide"), rows,
                           lowest], "x_kept")
    across = s.with_axes("ReduceMax", kept, [4], "x_max", keepdims=0)
    # along the height: (rois, C, 1, H, PW) against (rois, 1, PH, H, 1) -> (rois, C, PH, PW)
    kept = s.add("Where", [s.with_axes("Unsqueeze", y_mask, [1, 4], "y_mask_wide"),
                           s.with_axes("Unsqueeze", across, [2], "columns"), lowest], "y_kept")
    peak = s.add("Max", [s.with_axes("ReduceMax", kept, [3], "y_max", keepdims=0),
                         const("lowest", np.finfo(dtype).min)], "at_least_lowest")
    x_empty, y_empty = empties
    empty = s.add("Or", [s.with_axes("Unsqueeze", y_empty, [1, 3], "y_empty_wide"),
                         s.with_axes("Unsqueeze", x_empty, [1, 2], "x_empty_wide")], "empty")
    s.add("Where", [empty, const("nought", 0.0), peak], "pooled", node.output[0])
    s.inline()
