"""The arithmetic of ONNX DynamicQuantizeLinear, as onnxruntime's CPU kernel computes it
(float32, its order of operations), and as the op table's ``dynamic_quantize`` defines it. The
numpy backend's ``dynamic_quantize`` and the ONNX importer's folding of a DynamicQuantizeLinear
of constants both compute from this, so the two agree bit for bit; the op's rule and both
backends refuse an empty x with :func:`need_values`. :func:`quantize_linear`, the op table's
``quantize_linear`` (ONNX QuantizeLinear), likewise for its numpy backend and the importer's
folding. And :func:`exact_runs`, how the importer (ConvInteger's float32 ``conv``) and the
numpy backend (``integer_linear``) cut an integer sum into runs that float32 adds exactly."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from abi.errors import ShapeError
from abi.ops.rules import fmt

__all__ = ["CODE_RANGES", "FLOAT32_EXACT", "dynamic_quantization", "exact_runs", "need_values",
           "quantize_linear"]

F32 = np.float32
#: Every partial sum of integers is exact in float32 while its magnitude stays within this.
FLOAT32_EXACT = 2 ** 24
#: The integer types quantize_linear writes, and the range of each one's codes.
CODE_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
               "uint16": (0, 65535)}


def need_values(op: str, shape: Sequence, what: str = "x") -> None:
    """ShapeError where ``shape`` (the graph's dims, or the call's sizes) of the tensor to
    quantize (``what``: dynamic_quantize's x, a quantized recurrence's state) holds a 0: the
    min and max of no values are undefined."""
    if 0 in tuple(shape):
        raise ShapeError(f"{op}: {what} of shape {fmt(tuple(shape))} is empty: its min and max "
                         f"are undefined", where=op, expected="no dim 0", got=tuple(shape))


def dynamic_quantization(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The uint8 codes (as float32 integers, x's shape), the scale and the zero point (float32,
    shape ()) of a non-empty float32 ``x``: its min and max widened to include 0, the scale
    ``(max - min) / 255`` (1 where max == min), the zero point ``round(0 - min / scale)``
    clamped as C++'s std::min(255, .) then std::max(0, .) (a nan gives 255), the codes
    ``clamp(round(x / scale) + zero_point, 0, 255)`` with a nan quotient giving 0; rounding is
    half to even. A nan in x makes the scale nan (the min is nan), so every code is 0."""
    lo, hi = np.minimum(np.min(x), F32(0)), np.maximum(np.max(x), F32(0))  # a nan stays
    with np.errstate(all="ignore"):  # inf - inf, inf / inf, x / 0: as onnxruntime
        scale = F32(1) if hi == lo else F32((hi - lo) / F32(255))
        zp = F32(0) - lo / scale
        zp = zp if zp < F32(255) else F32(255)  # std::min(255, zp): a nan gives 255
        zp = F32(np.round(zp if F32(0) < zp else F32(0)))
        y = np.divide(x, scale, out=np.empty(np.shape(x), F32))
    if not F32(0) < scale < F32(np.inf):  # a nan quotient (x's nan, inf / inf, 0 / 0)
        np.copyto(y, F32(-np.inf), where=np.isnan(y))
    y = np.rint(y, out=y)
    y += zp
    return np.clip(y, F32(0), F32(255), out=y), np.asarray(scale), np.asarray(zp)


def quantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
                    dtype: str) -> np.ndarray:
    """The codes of float32 ``x`` (float32 integers, x's shape) quantized to ``dtype`` (a key
    of :data:`CODE_RANGES`): ``clamp(round(x / scale) + zero_point, lo, hi)``, the quotient in
    float32, a nan quotient giving lo, rounding half to even, the zero point (float32; 0 where
    absent, which turns round's -0.0 into 0) broadcast with x as the scale is, as
    onnxruntime's QuantizeLinear (its kernel clamps the quotient to ``[lo - zero_point, hi -
    zero_point]`` before rounding, a nan giving the lower bound: the same codes)."""
    lo, hi = CODE_RANGES[dtype]
    with np.errstate(all="ignore"):  # x / 0, inf / inf: as onnxruntime
        y = np.divide(x, scale, out=np.empty(np.broadcast_shapes(np.shape(x), np.shape(scale)),
                                             F32))
    np.copyto(y, F32(-np.inf), where=np.isnan(y))
    y = np.rint(y, out=y)
    y += F32(0) if zero_point is None else zero_point
    return np.clip(y, F32(lo), F32(hi), out=y)


def exact_runs(reach: np.ndarray, chunk: int = 256) -> list[tuple[int, int]]:
    """Consecutive runs ``(start, end)`` of a sum's contracted axis, as few as keep every
    output's sum within :data:`FLOAT32_EXACT` (greedy: each run as long as it can be), where
    ``reach[k, o]`` (int64, >= 0) is the most term ``k`` adds to output ``o`` in magnitude; a
    term beyond the bound alone is a run of its own. The running sums are taken ``chunk`` terms
    at a time, so a long axis costs a few numpy calls per run, not one per term."""
    size = reach.shape[0]
    runs, start, k = [], 0, 0
    total = np.zeros(reach.shape[1:], np.int64)
    while k < size:
        sums = np.cumsum(reach[k:k + chunk], axis=0) + total
        over = np.flatnonzero((sums > FLOAT32_EXACT).reshape(len(sums), -1).any(axis=1))
        if not over.size:
            total, k = sums[-1], k + len(sums)
            continue
        end = max(k + int(over[0]), start + 1)
        runs.append((start, end))
        start = k = end
        total = np.zeros_like(total)
    return runs + [(start, size)] if start < size or not runs else runs
