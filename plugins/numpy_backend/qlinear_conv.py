"""The ABI's ``qlinear_conv`` (ONNX QLinearConv) on numpy: the exact integer sums as float32
convolutions (``plugins.nn``'s kernel) over runs of input channels whose sums float32 holds
exactly, the runs added in int32, then onnxruntime's requantization
(:func:`abi.quantization.quantize_linear` of the float32 sums times the combined scale)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from abi.quantization import exact_runs, quantize_linear
from plugins.nn import functional as F

F32 = np.float32


def make_integer_conv(weight: np.ndarray, weight_zero_point: np.ndarray, *, stride, padding,
                      dilation, groups: int, where: str) -> Callable:
    """``sums(x, x_zero_point)``: the int32 sums of ``(x - x_zero_point) * (weight -
    weight_zero_point)`` over each output's window (zero padding of the differences), exact
    and wrapping as onnxruntime's int32 accumulation. The input channels of a group are cut
    into runs (:func:`abi.quantization.exact_runs`) over which 255, the most an x less its
    zero point reaches, times the sum of \\|weight - zero point\\| stays within 2**24 for every
    output, so each run's float32 conv is exact in any order; one run for any usual layer."""
    w = weight.astype(np.int64)
    w -= np.reshape(weight_zero_point, (-1,) + (1,) * (w.ndim - 1)).astype(np.int64)
    per_group = w.shape[1]
    reach = 255 * np.abs(w).reshape(w.shape[0], per_group, -1).sum(axis=2).T  # [k, o]
    convs = [(start, end, F.make_conv(w[:, start:end].astype(F32), None, stride=stride,
                                      padding=padding, dilation=dilation, groups=groups,
                                      where=where))
             for start, end in exact_runs(reach)]

    def sums(x: np.ndarray, x_zero_point: np.ndarray) -> np.ndarray:
        v = x.astype(F32)
        v -= F32(x_zero_point)
        total = None
        for start, end, conv in convs:
            part = v
            if end - start < per_group:  # the run's channels of every group
                n, spatial = v.shape[0], v.shape[2:]
                part = v.reshape(n, groups, per_group, *spatial)[:, :, start:end].reshape(
                    n, groups * (end - start), *spatial)
            y = conv(part).astype(np.int32)  # integers within 2**24: exact
            total = y if total is None else np.add(total, y, out=total)  # wraps as int32
        return total

    return sums


def requantize(sums: np.ndarray, bias: np.ndarray | None, x_scale: np.ndarray,
               weight_scale: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray,
               ) -> np.ndarray:
    """``clamp(round(float32(sums + bias) * scale) + y_zero_point)`` as y's codes (its zero
    point's dtype), the float32 scale ``(x_scale * weight_scale) / y_scale`` in that order and
    per output channel (axis 1) where weight_scale has one value per channel; the bias added
    in int32, wrapping."""
    channel = (-1,) + (1,) * (sums.ndim - 2)
    if bias is not None:
        sums = np.add(sums, np.reshape(bias, channel), dtype=np.int32)
    scale = (F32(x_scale) * np.asarray(weight_scale, F32)) / F32(y_scale)
    v = sums.astype(F32)
    v *= scale.reshape(channel) if scale.ndim else scale
    dtype = y_zero_point.dtype
    codes = quantize_linear(v, F32(1), F32(y_zero_point), str(dtype))
    return codes.astype(dtype)


def make_qlinear_conv(attrs: dict, consts: list, where: str) -> Callable:
    """The kernel ``run(x, x_scale, x_zero_point, weight, weight_scale, weight_zero_point,
    y_scale, y_zero_point, bias)``: its integer conv prepared once where the weight and its
    zero point are constants (``consts``), else at every call."""
    weight, zero_point = consts[3], consts[5]
    prepared = None if weight is None or zero_point is None else make_integer_conv(
        weight, zero_point, where=where, **attrs)

    def run(x, x_scale, x_zero_point, weight, weight_scale, weight_zero_point, y_scale,
            y_zero_point, bias=None):
        sums = prepared or make_integer_conv(weight, weight_zero_point, where=where, **attrs)
        return requantize(sums(x, x_zero_point), bias, x_scale, weight_scale, y_scale,
                          y_zero_point)

    return run
