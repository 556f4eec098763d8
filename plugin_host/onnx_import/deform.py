"""ONNX DeformConv (opset 19; torchvision's deform_conv2d, DCNv1 and with a mask DCNv2) over
(N, C, H, W), written back as ONNX nodes and mapped as the model's own (:mod:`.written`).

Tap (i, j) of output position (oh, ow) samples x at y = oh * stride - pad + i * dilation plus
its offset, and x likewise, bilinearly, a neighbour outside the input counting as 0, as
onnxruntime's kernel; that is GridSample (bilinear, zeros, align_corners=0) at the positions
normalised to its grid. Per offset group, the taps' positions (the offsets plus a constant base)
form one grid of (K * oH, oW) points, K = kH * kW; the samples, times the mask where given, are
the columns a grouped MatMul with the weight turns into the output, as a conv's im2col is.

The channels, height and width must be known at import (the base grid and the reshapes hold
them); the batch may be a run-time dim. Refused naming the node: another rank, a weight,
offset, mask or bias whose shape does not fit, groups that do not divide the channels.
"""

from __future__ import annotations

import numpy as np

from abi import dtypes

from .ops import _only, maps
from .written import Written


def _ints(imp, attrs: dict, name: str, default: list[int]) -> list[int]:
    value = list(attrs.get(name, default))
    if len(value) != len(default) or any(type(v) is not int for v in value):
        raise imp.unsupported(f"attribute {name}={value!r}: needs {len(default)} integers")
    return value


def _static(imp, name: str, rank: int, what: str) -> list:
    shape = list(imp.type_of(name).shape)
    if len(shape) != rank:
        raise imp.unsupported(f"{what} {name!r} of shape {shape}: needs rank {rank}")
    return shape


@maps("DeformConv")
def _deform_conv(imp, node, attrs):
    _only(imp, attrs, {"dilations": ..., "group": ..., "kernel_shape": ..., "offset_group": ...,
                       "pads": ..., "strides": ...})
    ins = [*node.input, "", "", ""]
    x, w, offset, bias, mask = ins[:5]
    n, c, h, wd = _static(imp, x, 4, "input")
    oc, cpg, kh, kw = _static(imp, w, 4, "weight")
    if not all(type(d) is int for d in (c, h, wd, oc, cpg, kh, kw)):
        raise imp.unsupported(f"input {x!r} of shape {[n, c, h, wd]} and weight {w!r} of shape "
                              f"{[oc, cpg, kh, kw]}: only the batch may be a run-time dim")
    kernel = _ints(imp, attrs, "kernel_shape", [kh, kw])
    strides = _ints(imp, attrs, "strides", [1, 1])
    dilations = _ints(imp, attrs, "dilations", [1, 1])
    pads = _ints(imp, attrs, "pads", [0, 0, 0, 0])
    group, offset_group = attrs.get("group", 1), attrs.get("offset_group", 1)
    if kernel != [kh, kw]:
        raise imp.unsupported(f"kernel_shape {kernel} differs from the weight's {[kh, kw]}")
    if min(strides + dilations) < 1 or min(pads) < 0:
        raise imp.unsupported(f"strides {strides}, dilations {dilations} and pads {pads}: "
                              f"strides and dilations >= 1, pads >= 0")
    for what, g in (("group", group), ("offset_group", offset_group)):
        if type(g) is not int or g < 1 or c % g:
            raise imp.unsupported(f"attribute {what}={g!r} does not divide the {c} channels")
    if oc % group or cpg * group != c:
        raise imp.unsupported(f"weight {w!r} of shape {[oc, cpg, kh, kw]} does not fit {c} "
                              f"channels in {group} group(s)")
    out = [(size + before + after - (d * (k - 1) + 1)) // s + 1 for size, before, after, d, k, s
           in zip((h, wd), pads[:2], pads[2:], dilations, (kh, kw), strides)]
    if min(out) < 1:
        raise imp.unsupported(f"the kernel {[kh, kw]} (dilations {dilations}) does not fit the "
                              f"padded input {[h, wd]} with pads {pads}")
    oh, ow = out
    taps = kh * kw
    for name, channels, what in ((offset, offset_group * taps * 2, "offset"),
                                 (mask, offset_group * taps, "mask")):
        if name:
            shape = _static(imp, name, 4, what)
            if shape[1:] != [channels, oh, ow] or shape[0] != n:
                raise imp.unsupported(f"{what} {name!r} of shape {shape}: needs "
                                      f"{[n, channels, oh, ow]}")
    if bias and list(imp.type_of(bias).shape) != [oc]:
        raise imp.unsupported(f"bias {bias!r} of shape {list(imp.type_of(bias).shape)}: needs "
                              f"{[oc]}")
    dtype = dtypes.to_numpy(imp.type_of(x).dtype)
    # the base positions of each tap, (y, x) as the offsets hold them, then normalised
    i, j = np.divmod(np.arange(taps), kw)
    base = np.empty((taps, 2, oh, ow), np.float64)
    base[:, 0] = (np.arange(oh) * strides[0] - pads[0])[None, :, None] + (i * dilations[0])[
        :, None, None]
    base[:, 1] = (np.arange(ow) * strides[1] - pads[1])[None, None, :] + (j * dilations[1])[
        :, None, None]
    scale = np.array([2 / h, 2 / wd], np.float64).reshape(2, 1, 1)
    shift = np.array([1 / h - 1, 1 / wd - 1], np.float64).reshape(2, 1, 1)
    s = Written(imp, node)
    positions = s.reshape(offset, [0, offset_group, taps, 2, oh, ow], "offsets")
    positions = s.add("Add", [positions, s.const("base", base.astype(dtype))], "positions")
    positions = s.add("Mul", [positions, s.const("scale", scale.astype(dtype))], "scaled")
    positions = s.add("Add", [positions, s.const("shift", shift.astype(dtype))], "normalised")
    xy = s.add("Gather", [positions, s.const("xy", np.array([1, 0], np.int64))], "xy", axis=3)
    grid = s.add("Transpose", [xy], "grid", perm=[0, 1, 2, 4, 5, 3])
    grid = s.reshape(grid, [-1, taps * oh, ow, 2], "grids")
    planes = s.reshape(x, [-1, c // offset_group, h, wd], "planes")
    sampled = s.add("GridSample", [planes, grid], "sampled", mode="bilinear",
                    padding_mode="zeros", align_corners=0)
    cols = s.reshape(sampled, [-1, offset_group, c // offset_group, taps, oh * ow], "columns")
    if mask:
        weights = s.reshape(mask, [0, offset_group, 1, taps, oh * ow], "mask")
        cols = s.add("Mul", [cols, weights], "masked")
    cols = s.reshape(cols, [-1, group, cpg * taps, oh * ow], "groups")
    kernel_rows = s.reshape(w, [group, oc // group, cpg * taps], "kernel")
    y = s.add("MatMul", [kernel_rows, cols], "matmul")
    if not bias:
        s.reshape(y, [-1, oc, oh, ow], "output", node.output[0])
    else:
        y = s.reshape(y, [-1, oc, oh, ow], "output")
        s.add("Add", [y, s.reshape(bias, [1, oc, 1, 1], "bias")], "biased", node.output[0])
    s.inline()
