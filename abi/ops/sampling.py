"""Shape rules of the ops that sample space: pooling windows, resize and grid sampling, and the
resize arithmetic that onnxruntime's float32 scales impose (shared with the backends and the
ONNX import). The ops themselves are declared in the glue table (:mod:`abi.ops.glue`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from abi.errors import ContractError, ShapeError
from abi.ops import dims
from abi.ops.rules import (fmt, need_attr_len, need_dim, need_float, need_rank,
                           need_same_dtype, sizes_from_like)
from abi.ops.table import OpDef
from abi.spec import TensorType

__all__ = ["pool_shape", "pool_indices_shape", "pool_sizes", "pool_windows", "resize_shape",
           "grid_sample_shape", "scaled_size", "scale_fraction", "first_inexact_length",
           "scaled_dim", "resolved_sizes", "EXACT_SCALED_BELOW", "MAX_ANTIALIAS_WEIGHTS"]


def pool_shape(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x = inputs[0]
    n = op.name
    need_rank(n, "x", x, one_of=(3, 4, 5))
    if not (n == "max_pool" and x.dtype in ("uint8", "int8")):  # max_pool of 8-bit codes
        need_float(n, "x", x)
    out = pool_windows(n, x.shape, attrs)
    return [TensorType((*x.shape[:2], *out), x.dtype)]


def pool_windows(name: str, shape: tuple, attrs: dict, channels_last: bool = False) -> list:
    """:func:`pool_sizes` of x of ``shape`` (N, C, spatial...; with ``channels_last`` (N,
    spatial..., C)) once the window's attributes are checked against it: one entry per spatial
    axis each, every padding less than its kernel (as ONNX and onnxruntime; torch takes at
    most half of it)."""
    spatial = len(shape) - 2
    need_attr_len(name, attrs, ("kernel_size", "stride", "padding", "dilation"), spatial,
                  f"x shape {fmt(shape)} has {spatial} spatial axes and")
    for i, (k, (pb, pa)) in enumerate(zip(attrs["kernel_size"], attrs["padding"])):
        if max(pb, pa) >= k:
            raise ContractError(f"{name}: padding {[pb, pa]} on spatial axis {i} must be "
                                f"less than the kernel size {k} (<= {k - 1})", op=name,
                                attribute="padding")
    return pool_sizes(name, shape, attrs, channels_last)


def pool_sizes(name: str, shape: tuple, attrs: dict, channels_last: bool = False) -> list:
    """A pool's output sizes over the spatial axes of an input of ``shape`` (N, C, spatial...;
    with ``channels_last`` (N, spatial..., C)): :func:`dims.pool_out` of each, a ShapeError
    where a known size leaves no window, or, for the max pools (``name`` max_pool or
    max_pool_with_indices), a dilated window of padding alone. The shape rule asks it of the
    sizes the graph knows; a backend asks it again of the sizes a call gives, where the
    graph's were known only then."""
    kernel, stride, padding = attrs["kernel_size"], attrs["stride"], attrs["padding"]
    dilation = attrs.get("dilation") or (1,) * len(kernel)
    out = []
    first = 1 if channels_last else 2
    for i, (k, s, (pb, pa), d) in enumerate(zip(kernel, stride, padding, dilation)):
        size = shape[first + i]
        o = dims.pool_out(size, k, s, pb, pa, d, attrs["ceil_mode"])
        if type(o) is int and o < 1:
            raise ShapeError(f"{name}: spatial axis {i} of x shape {fmt(shape)} is {size} (+ "
                             f"padding {pb}+{pa}), smaller than the window {d}*({k}-1)+1; "
                             f"output size would be {o}", where=name, got=tuple(shape))
        if d > 1 and name.startswith("max_pool") and type(o) is int and type(size) is int:
            _no_window_of_padding_alone(name, i, shape, o, k, s, pb, d)
        out.append(o)
    return out


def _no_window_of_padding_alone(name: str, axis: int, shape: tuple, out: int, k: int, s: int,
                                pb: int, d: int) -> None:
    """A ShapeError where a dilated max pool's window has its taps all in the padding (each
    window of an undilated one holds an element when the padding is less than the kernel): it
    has no max (torch gives -inf, onnxruntime the float's lowest value). avg_pool's such
    window gives 0, as onnxruntime."""
    size = shape[2 + axis]
    start = np.arange(out) * s - pb                      # each window's first tap
    first_in = np.where(start < 0, -(start // d), 0)     # its first tap at or after 0
    empty = (first_in >= k) | (start + first_in * d >= size)
    if empty.any():
        j = int(np.argmax(empty))
        raise ShapeError(f"{name}: window {j} on spatial axis {axis} of x shape {fmt(shape)} "
                         f"holds padding alone (taps {j * s - pb} to {j * s - pb + d * (k - 1)}"
                         f" by {d}, the input's 0 to {size - 1})", where=name,
                         got=tuple(shape))


def pool_indices_shape(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    [y] = pool_shape(op, inputs, attrs)
    return [y, TensorType(y.shape, "int64")]


def scaled_size(length: int, scale: float) -> int:
    """ONNX Resize's output length for a scale: floor(length * scale), computed in float32 as
    onnxruntime does (the scale is a float32 value)."""
    return int(np.floor(np.float32(length) * np.float32(scale)))


def scale_fraction(scale: float) -> tuple[int, int]:
    """The float32 value of ``scale`` as an exact fraction ``(k, 2**m)``, lowest terms."""
    return float(np.float32(scale)).as_integer_ratio()


#: A symbolic spatial axis takes a scale only where onnxruntime's float32 floor(in * scale)
#: is the exact floor for every length below this (scale 0.7 is not: 10 * 0.7 gives 7)
EXACT_SCALED_BELOW = 1 << 16


@functools.lru_cache(maxsize=256)
def first_inexact_length(scale: float, below: int = EXACT_SCALED_BELOW) -> int | None:
    """The least length under ``below`` whose float32 floor(length * scale) (onnxruntime's)
    is not the exact floor of length * float32(scale), or None."""
    k, q = scale_fraction(scale)
    length = np.arange(1, below, dtype=np.int64)
    wrong = np.flatnonzero(np.floor(length.astype(np.float32) * np.float32(scale))
                           .astype(np.int64) != length * k // q)
    return int(length[wrong[0]]) if wrong.size else None


def scaled_dim(length: dims.Dim, scale: float) -> dims.Dim:
    """floor(length * scale) of a dim that may be symbolic: ``(length*k)//2**m`` for the
    float32 scale k / 2**m, exact; onnxruntime's float32 product gives the same size for
    every length below EXACT_SCALED_BELOW where the resize rule accepts the scale (the numpy
    backend refuses a call where the two differ)."""
    if type(length) is int:
        return scaled_size(length, scale)
    k, q = scale_fraction(scale)
    return dims.floordiv(dims.mul(length, k), q)


def resolved_sizes(spatial, attrs: dict, given: list | None = None) -> list:
    """resize's output lengths over ``spatial``: ``size``, each -1 as the dim ``given`` has
    there (like's), else as floor(in * scale)."""
    scales, given = attrs["scales"], given or [None] * len(spatial)
    return [g if g is not None else scaled_dim(d, s) if o == -1 else o
            for d, o, s, g in zip(spatial, attrs["size"], scales or [None] * len(spatial),
                                  given)]


def _need_spatial(n: str, x: TensorType) -> None:
    """ShapeError when a spatial axis (after N and C) of x is empty: nothing to sample from."""
    for i, d in enumerate(x.shape[2:]):
        if d == 0:
            raise ShapeError(f"{n}: spatial axis {i} of x shape {fmt(x.shape)} is empty; there "
                             f"is nothing to sample from", where=n, got=x.shape)


def resize_shape(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, like = inputs
    n = op.name
    r = need_rank(n, "x", x, one_of=(3, 4, 5))
    if not (attrs["mode"] == "nearest" and x.dtype in ("uint8", "int8")):  # it copies codes
        need_float(n, "x", x)
    given = sizes_from_like(n, like, attrs["like_axes"], list(attrs["size"]))
    if given is not None and (attrs["scales"] is not None or attrs["antialias"]):
        raise ContractError(f"{n}: sizes read from like come without "
                            f"{'scales' if attrs['scales'] is not None else 'antialias'}", op=n,
                            attribute="like_axes")
    if attrs["antialias"] and (attrs["mode"] == "nearest" or r == 5):
        raise ContractError(f"{n}: antialias needs mode linear or cubic over 1 or 2 spatial "
                            f"axes (as onnxruntime); got mode {attrs['mode']} on x shape "
                            f"{fmt(x.shape)}", op=n, attribute="antialias")
    if attrs["antialias"]:
        _antialias_windows(n, x, attrs)
    if attrs["mode"] == "cubic" and r != 4:
        raise ShapeError(f"{n}: mode cubic needs x of rank 4 (N, C, H, W), as onnxruntime's "
                         f"bicubic; got x shape {fmt(x.shape)}", where=n, got=x.shape)
    spatial = x.shape[2:]
    need_attr_len(n, attrs, ("size", "scales"), r - 2, f"x shape {fmt(x.shape)} has {r - 2} "
                  f"spatial axes and")
    _need_spatial(n, x)
    scales = attrs["scales"]
    if scales is None and any(o == -1 and g is None for o, g in zip(
            attrs["size"], given or [None] * len(attrs["size"]))):
        raise ContractError(f"{n}: size {list(attrs['size'])} has a -1 (floor(in * scale) when "
                            f"the call runs) but no scales", op=n, attribute="size")
    if scales is not None:
        for i, (d, s, out) in enumerate(zip(spatial, scales, attrs["size"])):
            if type(d) is not int and out != -1:
                raise ShapeError(f"{n}: spatial axis {i} of x shape {fmt(x.shape)} is symbolic; "
                                 f"with scales its size must be -1, floor(in * {s}) when the "
                                 f"call runs (or give size alone)", where=n, got=x.shape)
            if type(d) is int and out not in (-1, scaled_size(d, s)):
                raise ContractError(f"{n}: size {out} on spatial axis {i} is not floor({d} * "
                                    f"{s}) = {scaled_size(d, s)}", op=n, attribute="size")
            inexact = first_inexact_length(s) if type(d) is not int else None
            if inexact is not None:
                k, q = scale_fraction(s)
                raise ContractError(f"{n}: scale {s} on symbolic spatial axis {i}: float32 "
                                    f"floor({inexact} * {s}) (onnxruntime's) is "
                                    f"{scaled_size(inexact, s)}, not the exact "
                                    f"{inexact * k // q}; a symbolic axis takes a scale whose "
                                    f"float32 floor is exact below {EXACT_SCALED_BELOW} (or give "
                                    f"size alone)", op=n, attribute="scales")
    out = resolved_sizes(spatial, attrs, given)
    for i, o in enumerate(out):
        if scales is not None and type(o) is int and o < 1:  # a static axis scaled to nothing
            raise ShapeError(f"{n}: spatial axis {i} of x shape {fmt(x.shape)} scaled by "
                             f"{scales[i]} has no element (floor gives {o})", where=n,
                             got=x.shape)
    return [TensorType((*x.shape[:2], *out), x.dtype)]


#: The most antialias weights a resize may hold along one axis: (output length) x (taps per
#: window), the window widening as the axis shrinks (2 * ceil(support / scale) + 1 taps).
MAX_ANTIALIAS_WEIGHTS = 1 << 26


def _antialias_windows(n: str, x: TensorType, attrs: dict) -> None:
    """ContractError when an axis' antialias weights would exceed MAX_ANTIALIAS_WEIGHTS."""
    half = 1.0 if attrs["mode"] == "linear" else 2.0
    scales = attrs["scales"] or (None,) * len(attrs["size"])
    for i, (d, out, s) in enumerate(zip(x.shape[2:], resolved_sizes(x.shape[2:], attrs),
                                        scales)):
        if type(d) is not int or d == out:
            continue
        scale = s if s is not None else out / d
        taps = 2 * math.ceil(half * max(1.0, 1.0 / scale)) + 1
        if out * taps > MAX_ANTIALIAS_WEIGHTS:
            raise ContractError(f"{n}: antialias on spatial axis {i} ({d} to {out}) needs "
                                f"{out} windows of {taps} taps, over the cap of "
                                f"{MAX_ANTIALIAS_WEIGHTS} weights", op=n, attribute="antialias")


def grid_sample_shape(op: OpDef, inputs: list, attrs: dict) -> list[TensorType]:
    x, grid = inputs
    n = op.name
    r = need_rank(n, "x", x, one_of=(4, 5))
    if r == 5 and attrs["mode"] == "cubic":
        raise ShapeError(f"{n}: mode cubic needs x of rank 4 (N, C, H, W), as onnxruntime's "
                         f"cubic; got x shape {fmt(x.shape)}", where=n, got=x.shape)
    need_rank(n, "grid", grid, exact=r)
    need_float(n, "x", x)
    need_same_dtype(n, [("x", x), ("grid", grid)])
    axes = "an x and a y" if r == 4 else "an x, a y and a z"
    need_dim(n, "grid's last dim", grid.shape[-1], r - 2, f"grid shape {fmt(grid.shape)}: "
             f"{axes} per output position")
    need_dim(n, "grid's batch dim", grid.shape[0], x.shape[0], f"x shape {fmt(x.shape)}")
    _need_spatial(n, x)
    batch = x.shape[0] if dims.is_static(x.shape[0]) else grid.shape[0]
    return [TensorType((batch, x.shape[1], *grid.shape[1:-1]), x.dtype)]
