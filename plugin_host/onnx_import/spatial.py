"""ONNX's spatial rearranging and sampling ops but Resize (:mod:`.resize`): DepthToSpace and
SpaceToDepth (pixel_shuffle and its inverse) as reshape, transpose, reshape; GridSample
(grid_sample) as ``grid_sample``; AffineGrid (affine_grid) as a ``matmul`` of a constant base
grid by theta; Col2Im (F.fold) as the sum of its block positions spread over the image with
pad, reshape and slice. Registered in :data:`.ops.MAPPERS` on import.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from abi.ops import dims

from ..errors import ModelFileError

from .fold import _need, int_vector
from .fold import register as register_fold
from .ops import _few, _only, maps


def _blocks(imp, node, attrs) -> tuple[int, list]:
    """The block size and the (N, C, H, W) shape of DepthToSpace / SpaceToDepth's input (C
    static)."""
    b = attrs.get("blocksize")
    shape = list(imp.type_of(node.input[0]).shape)
    if len(shape) != 4 or type(shape[1]) is not int:
        raise imp.unsupported(f"input shape {shape}: needs (N, C, H, W) with C static")
    if type(b) is not int or b < 1:
        raise imp.unsupported(f"attribute blocksize={b!r} must be an integer >= 1")
    return b, shape


def _rearrange(imp, node, split: list, perm: list, merged: list, steps: list) -> None:
    """reshape to ``split``, transpose by ``perm``, reshape to ``merged``: no arithmetic.
    With H or W a run-time dim, which reshape's one -1 cannot keep apart from N, ``steps``
    instead: ``(op, attrs)`` of ``unflatten`` (a run-time part its -1, checked when the call
    runs), ``transpose`` and ``flatten``, in order."""
    if any(type(d) is not int for d in split[1:]):
        y = imp.tensor(node.input[0])
        for k, (op, attrs) in enumerate(steps):
            last = k == len(steps) - 1
            y = imp.emit(op, [y], [node.output[0] if last else None], attrs,
                         suffix="" if last else f".{op}{k}")[0]
        return
    y = imp.emit("reshape", [imp.tensor(node.input[0])], [None],
                 {"shape": [-1 if type(d) is not int else d for d in split]},
                 suffix=".split")[0]
    y = imp.emit("transpose", [y], [None], {"perm": perm}, suffix=".transpose")[0]
    imp.emit("reshape", [y], [node.output[0]],
             {"shape": [-1 if type(d) is not int else d for d in merged]})


def _merge(start: int, end: int) -> tuple[str, dict]:
    return "flatten", {"start_dim": start, "end_dim": end}


@maps("DepthToSpace")
def _depth_to_space(imp, node, attrs):
    """torch's pixel_shuffle (CRD) and the DCR layout, as reshape -> transpose -> reshape
    (H and W may be run-time dims)."""
    _only(imp, attrs, {"blocksize": ..., "mode": ...})
    b, (n, c, h, w) = _blocks(imp, node, attrs)
    mode = attrs.get("mode", "DCR")
    if c % (b * b):
        raise imp.unsupported(f"{c} channels are not a multiple of blocksize^2 = {b * b}")
    if mode == "DCR":
        split, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    elif mode == "CRD":
        split, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    else:
        raise imp.unsupported(f"attribute mode={mode!r} is not supported (only DCR, CRD)")
    _rearrange(imp, node, split, perm, [n, c // (b * b), dims.mul(h, b), dims.mul(w, b)], [
        ("unflatten", {"axis": 1, "sizes": split[1:4]}), ("transpose", {"perm": perm}),
        _merge(4, 5), _merge(2, 3)])


@maps("SpaceToDepth")
def _space_to_depth(imp, node, attrs):
    """The inverse of DepthToSpace's DCR mode (the one layout before opset 28; torch's
    pixel_unshuffle is the CRD one, which its exporters write as Reshape and Transpose), or
    from opset 28 of the ``mode`` given (CRD: the inverse of DepthToSpace's CRD), as reshape
    -> transpose -> reshape (H and W may be run-time dims, each then checked to be a multiple
    of the blocksize when the call runs)."""
    _only(imp, attrs, {"blocksize": ..., "mode": ...})
    b, (n, c, h, w) = _blocks(imp, node, attrs)
    if type(h) is int and h % b or type(w) is int and w % b:
        raise imp.unsupported(f"spatial dims {h}x{w} are not multiples of blocksize {b}")
    mode = attrs.get("mode", "DCR")
    perms = {"DCR": [0, 3, 5, 1, 2, 4], "CRD": [0, 1, 3, 5, 2, 4]}
    if mode not in perms:
        raise imp.unsupported(f"attribute mode={mode!r} is not supported (only DCR, CRD)")
    perm = perms[mode]
    _rearrange(imp, node, [n, c, dims.floordiv(h, b), b, dims.floordiv(w, b), b], perm,
               [n, c * b * b, dims.floordiv(h, b), dims.floordiv(w, b)], [
                   ("unflatten", {"axis": 3, "sizes": [-1, b]}),
                   ("unflatten", {"axis": 2, "sizes": [-1, b]}), ("transpose", {"perm": perm}),
                   _merge(1, 3)])


@maps("GridSample")
def _grid_sample(imp, node, attrs):
    """torch's grid_sample on (N, C, H, W) or a volume (N, C, D, H, W): modes bilinear
    (trilinear on a volume; opset 20 calls it linear), nearest, and on (N, C, H, W) bicubic
    (opset 20: cubic), every padding mode; the grid a run-time value or a constant."""
    _only(imp, attrs, {"mode": ..., "padding_mode": ..., "align_corners": ...})
    mode = attrs.get("mode", "bilinear")
    padding = attrs.get("padding_mode", "zeros")
    align = attrs.get("align_corners", 0)
    modes = ("bilinear", "linear", "nearest", "bicubic", "cubic")
    for name, value, known in (("mode", mode, modes),
                               ("padding_mode", padding, ("zeros", "border", "reflection")),
                               ("align_corners", align, (0, 1))):
        if value not in known:
            raise imp.unsupported(f"attribute {name}={value!r} is not supported (only "
                                  f"{', '.join(map(str, known))})")
    shape = list(imp.type_of(node.input[0]).shape)
    if len(shape) not in (4, 5):
        raise imp.unsupported(f"input shape {shape}: only (N, C, H, W) and (N, C, D, H, W) are "
                              f"sampled")
    cubic = mode in ("bicubic", "cubic")
    if cubic and len(shape) == 5:
        raise imp.unsupported(f"attribute mode={mode!r} on input shape {shape}: only "
                              f"(N, C, H, W) is sampled cubic")
    imp.emit("grid_sample", [imp.tensor(n) for n in node.input[:2]], [node.output[0]],
             {"mode": "cubic" if cubic else "nearest" if mode == "nearest" else "bilinear",
              "padding_mode": padding, "align_corners": bool(align)})


def affine_base(size: list[int], align_corners: bool) -> np.ndarray:
    """AffineGrid's base grid for spatial ``size`` ([H, W] or [D, H, W]): for every position,
    row-major, its normalised coordinates x (width) first, then y (and z), then a 1, in float32
    as onnxruntime computes them: d points from -1 to 1 (-1 + i * (2 / (d - 1)), the last
    exactly 1; one point is 1), without align_corners then times (d - 1) and divided by d."""
    f32 = np.float32
    axes = []
    for d in size:
        c = np.arange(d, dtype=f32) * (f32(2) / f32(max(d - 1, 1))) + f32(-1)
        c[-1] = f32(1)
        if not align_corners:
            c = c * f32(d - 1) / f32(d)
        axes.append(c)
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(math.prod(size), f32)]
    return np.stack(coords, axis=-1)


def _affine_size(size, theta_shape, align) -> list:
    """AffineGrid's checked ``size`` (N, C, H, W) or (N, C, D, H, W) for ``theta`` of shape
    (N, 2, 3) or (N, 3, 4); N may be a run-time dim, theta's own."""
    size = list(size) if isinstance(size, list) else int_vector(size, "size")
    spatial = len(size) - 2
    if spatial not in (2, 3) or min(d for d in size if type(d) is int) < 1:
        raise ModelFileError(f"size {_few(size)} must be (N, C, H, W) or (N, C, D, H, W), each "
                             f">= 1")
    want = [size[0], spatial, spatial + 1]
    if len(theta_shape) != 3 or not all(dims.known_equal(a, b)
                                        for a, b in zip(theta_shape, want)):
        raise ModelFileError(f"theta of shape {list(theta_shape)} must be of shape {want} for "
                             f"size {size}")
    if align not in (0, 1):
        raise ModelFileError(f"attribute align_corners={align!r} must be 0 or 1")
    return size


def _fold_affine_grid(ins, a: dict, cap: int) -> list:
    theta, size = ins
    if theta.dtype != np.float32:
        raise ModelFileError(f"theta of dtype {theta.dtype}: only float32 is supported")
    size = _affine_size(size, theta.shape, a.get("align_corners", 0))
    _need(math.prod(size[:1] + size[2:]) * (len(size) - 2), cap, "AffineGrid's grid")
    base = affine_base(size[2:], bool(a.get("align_corners", 0)))
    grid = np.matmul(base, np.swapaxes(theta, 1, 2))
    return [grid.reshape(size[:1] + size[2:] + [len(size) - 2]).astype(np.float32)]


register_fold("AffineGrid", _fold_affine_grid)


@maps("AffineGrid")
def _affine_grid(imp, node, attrs):
    """torch's affine_grid (spatial transformer networks; opset 20) of a run-time theta (N, 2, 3)
    or (N, 3, 4) and a constant size, or one whose N is theta's run-time batch (the legacy
    exporter's ``affine_grid(theta, (x.size(0), ...))``): the constant base grid (one row per
    position: x, y(, z), 1) ``matmul`` theta transposed, reshaped to (N, H, W, 2) or (N, D,
    H, W, 3). A constant theta folds."""
    _only(imp, attrs, {"align_corners": ...})
    theta = node.input[0]
    if imp.type_of(theta).dtype != "float32":
        raise imp.unsupported(f"theta {theta!r} of dtype {imp.type_of(theta).dtype}: only "
                              f"float32 is supported")
    given = imp.shape_value(node.input[1], "size")
    batch = imp.type_of(theta).shape[:1]
    if batch and type(batch[0]) is not int and type(given[0]) is int:
        raise imp.unsupported(f"size {given}: its N is fixed, but theta's is the run-time dim "
                              f"{batch[0]!r}")
    if any(type(d) is not int for d in given[1:]):
        raise imp.unsupported(f"size {given}: only the batch N may be a run-time dim (the "
                              f"grid's spatial size must be known at import)")
    size = _affine_size(given, imp.type_of(theta).shape, attrs.get("align_corners", 0))
    spatial = size[2:]
    imp.check_size("its grid", size[:1] + spatial + [len(spatial)])
    imp.check_size("its base grid", spatial + [len(spatial) + 1])
    base = affine_base(spatial, bool(attrs.get("align_corners", 0)))
    out = node.output[0]
    [t] = imp.emit("transpose", [imp.tensor(theta)], [None], {"perm": [0, 2, 1]},
                   suffix="/theta")
    [g] = imp.emit("matmul", [imp.add_constant(base[None], f"{out}.base"), t], [None],
                   suffix="/grid")
    batch = size[0] if type(size[0]) is int else -1
    imp.emit("reshape", [g], [out], {"shape": [batch] + spatial + [len(spatial)]})


def _col2im_geometry(imp, node, attrs) -> tuple:
    """(image sizes, block sizes, dilations, strides, pads [begins..., ends...], channels,
    blocks per axis) of a Col2Im over any number of spatial axes, every value checked."""
    size = int_vector(imp.const(node.input[1], "image_shape"), "image_shape")
    block = int_vector(imp.const(node.input[2], "block_shape"), "block_shape")
    d = len(size)
    if d < 1 or len(block) != d:
        raise imp.unsupported(f"image_shape {size} and block_shape {block}: need as many "
                              f"sizes, one or more")
    dil, stride = attrs.get("dilations", [1] * d), attrs.get("strides", [1] * d)
    pads = attrs.get("pads", [0] * 2 * d)
    if (len(dil), len(stride), len(pads)) != (d, d, 2 * d) or \
            min(dil + stride + size + block) < 1 or min(pads) < 0:
        raise imp.unsupported(f"dilations {dil}, strides {stride}, pads {pads}, image_shape "
                              f"{size}, block_shape {block}: need {d}, {d}, {2 * d}, {d} and "
                              f"{d} values, pads >= 0 and the rest >= 1")
    if d != 2 and max(dil) > 1:
        raise imp.unsupported(f"dilations {dil} of a {d}-D Col2Im: onnxruntime's Col2Im "
                              f"dilates only 2 axes as ONNX's reference and torch's fold do "
                              f"(probed), so its golden outputs would be another's")
    shape = list(imp.type_of(node.input[0]).shape)
    if len(shape) != 3 or not all(type(n) is int for n in shape[1:]):
        raise imp.unsupported(f"input shape {shape}: needs (N, C * {' * '.join(['k'] * d)}, L) "
                              f"with the last two static")
    out = [(size[a] + pads[a] + pads[a + d] - dil[a] * (block[a] - 1) - 1) // stride[a] + 1
           for a in range(d)]
    if shape[1] % math.prod(block) or min(out) < 1 or math.prod(out) != shape[2]:
        raise imp.unsupported(f"input shape {shape}: needs C * {' * '.join(map(str, block))} "
                              f"channels and {' * '.join(map(str, out))} blocks for "
                              f"image_shape {size}")
    imp.check_size("its Col2Im output", [shape[0], shape[1], *size])
    return size, block, dil, stride, pads, shape[1] // math.prod(block), out


@maps("Col2Im")
def _col2im(imp, node, attrs):
    """torch's F.fold (2-D), and Col2Im over any number of spatial axes: the sum of the
    block's positions, each spread over the padded image with the stride between its entries
    (reshape, zero pad, reshape) and moved to its offset (zero pad, or a slice where the
    spread runs past the edge); the padding is cut off at the end."""
    _only(imp, attrs, {"dilations": ..., "pads": ..., "strides": ...})
    size, block, dil, stride, pads, c, out = _col2im_geometry(imp, node, attrs)
    d, axes = len(size), list(range(2, 2 + len(size)))
    n = imp.type_of(node.input[0]).shape[0]
    n = n if type(n) is int else -1
    canvas = [size[a] + pads[a] + pads[a + d] for a in range(d)]
    spread = [out[a] * stride[a] for a in range(d)]
    [x] = imp.emit("reshape", [imp.tensor(node.input[0])], [None],
                   {"shape": [n, c, *block, *out]}, suffix="/blocks")
    total = None
    for at in itertools.product(*map(range, block)):
        tag = "/" + ".".join(map(str, at))
        [y] = imp.emit("slice", [x], [None], {"starts": list(at), "ends": [i + 1 for i in at],
                                              "axes": axes}, suffix=tag)
        if stride == [1] * d:
            [y] = imp.emit("reshape", [y], [None], {"shape": [n, c, *out]}, suffix=f"{tag}.rows")
        else:
            [y] = imp.emit("reshape", [y], [None], {"shape": [n, c, *itertools.chain(
                *((o, 1) for o in out))]}, suffix=f"{tag}.split")
            [y] = imp.emit("pad", [y], [None], {"pads": [[0, 0], [0, 0], *itertools.chain(
                *(([0, 0], [0, s - 1]) for s in stride))]}, suffix=f"{tag}.spread")
            [y] = imp.emit("reshape", [y], [None], {"shape": [n, c, *spread]},
                           suffix=f"{tag}.rows")
        offset = [i * k for i, k in zip(at, dil)]
        room = [canvas[a] - offset[a] for a in range(d)]
        if any(spread[a] > room[a] for a in range(d)):
            [y] = imp.emit("slice", [y], [None], {"starts": [0] * d, "ends": room,
                                                  "axes": axes}, suffix=f"{tag}.fit")
        [y] = imp.emit("pad", [y], [None], {"pads": [[0, 0], [0, 0]] + [
            [offset[a], max(room[a] - spread[a], 0)] for a in range(d)]}, suffix=f"{tag}.place")
        total = y if total is None else imp.emit("add", [total, y], [None],
                                                 suffix=f"{tag}.sum")[0]
    imp.emit("slice", [total], [node.output[0]], {
        "starts": pads[:d], "ends": [pads[a] + size[a] for a in range(d)], "axes": axes})
