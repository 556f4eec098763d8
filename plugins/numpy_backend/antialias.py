"""The weights of the ``resize`` op with ``antialias`` (onnxruntime's antialias Resize, which
torch's interpolate(..., antialias=True) with bilinear or bicubic exports as): the resize is
separable and linear in x, so each axis whose size changes is resampled by a window of taps per
output position, built here once per input shape as onnxruntime's CPU kernel builds them, and
applied tap by tap by :func:`.glue.make_resize` (so an inf or nan reaches only the outputs whose
windows hold it, as there).

onnxruntime's weights, per output position i along an axis of ``length`` entries resized to
``out`` by the float32 scale s (the given scale, or out / length from sizes): the filter
(linear: the triangle of support 2; cubic: Keys' kernel with ``cubic_coeff_a``, support 4) is
widened by 1 / s when s < 1 and read at (j - center + 0.5) * s; its window starts at
floor(center - support / 2 + 0.5), center = 0.5 + the input coordinate of i under the
coordinate transformation mode. Taps outside the input are dropped (``exclude_outside``) or
added to the edge tap; the weights are normalised to sum 1 (multiplied by the float32
reciprocal of their sum, taken one tap after the other). Everything is in float32 in
onnxruntime's order of operations, so the weights are onnxruntime's bit for bit. The width is
resampled first, then the height, as there; an axis whose size is kept is copied, as there,
whatever its scale.
"""

from __future__ import annotations

import numpy as np

from abi.resampling import coordinates

F32 = np.float32
_SUPPORT = {"linear": F32(2.0), "cubic": F32(4.0)}


def _filter(mode: str, t: np.ndarray, a) -> np.ndarray:
    """The linear (triangle) or cubic (Keys, coefficient ``a``) filter at ``t``, in float32
    with onnxruntime's order of operations."""
    t = np.abs(t)
    if mode == "linear":
        return np.where(t < F32(1), F32(1) - t, F32(0)).astype(F32)
    near = ((a + F32(2)) * t - (a + F32(3))) * t * t + F32(1)
    far = (((t - F32(5)) * t + F32(8)) * t - F32(4)) * a
    return np.where(t < F32(1), near, np.where(t < F32(2), far, F32(0))).astype(F32)


def _support(mode: str, scale) -> tuple:
    """(input entries per output entry, the filter's half width, onnxruntime's window: the
    most taps an output reads) for the float32 ``scale``."""
    s = F32(1) / F32(scale)
    support = (_SUPPORT[mode] * F32(0.5)) * (s if s >= F32(1) else F32(1))
    return s, support, int(np.ceil(support)) * 2 + 1


def antialias_taps(length: int, out: int, scale, mode: str, coordinate: str,
                   cubic_coeff_a: float, exclude_outside: bool) -> tuple:
    """onnxruntime's antialias window of each output position along one axis (``scale``: the
    float32 scale; see the module docstring): ``(start, count, weights)``, output i reading
    the ``count[i]`` inputs from ``start[i]`` on with the float32 ``weights[i, :count[i]]``
    (normalised; 0 past ``count[i]``)."""
    rscale, a = F32(scale), F32(cubic_coeff_a)
    s, support, window = _support(mode, rscale)
    inv = F32(1) / s if s >= F32(1) else F32(1)
    with np.errstate(all="ignore"):
        where = (np.arange(out, dtype=F32) if s == F32(1)
                 else coordinates(out, length, rscale, coordinate))
        center = F32(0.5) + where
        lo = np.floor(center - support + F32(0.5)).astype(np.int64)
        hi = np.floor(center + support + F32(0.5)).astype(np.int64)
    hi = lo + np.clip(hi - lo, 0, window)
    lo_cut, hi_cut = np.clip(lo, 0, length), np.clip(hi, 0, length)
    first, last = (lo_cut, hi_cut) if exclude_outside else (lo, hi)
    taps = last - first
    buffer = np.zeros((out, window), F32)
    total = np.zeros(out, F32)
    for k in range(window):  # tap by tap, as onnxruntime sums them
        on = k < taps
        w = _filter(mode, ((first + k).astype(F32) - center + F32(0.5)) * inv, a)
        buffer[on, k] = w[on]
        total[on] += w[on]
    if not exclude_outside:  # taps outside the input are added to the edge taps
        for i in np.flatnonzero((lo_cut < hi_cut) & ((lo < 0) | (hi > length))):
            row, n = buffer[i], int(taps[i])
            before = min(max(-int(lo[i]), 0), n - 1)
            for k in range(before):
                row[before] += row[k]
            after = min(max(int(hi[i]) - length, 0), n - 1)
            for k in range(n - after, n):
                row[n - after - 1] += row[k]
            if before or after:
                row[:hi_cut[i] - lo_cut[i]] = row[before:before + hi_cut[i] - lo_cut[i]].copy()
    inverse = np.ones(out, F32)  # a total of 0 leaves the weights as they are
    inverse[total != 0] = F32(1) / total[total != 0]
    count = (hi_cut - lo_cut).astype(np.int64)
    weights = np.zeros((out, window), F32)
    for i in range(out):
        weights[i, :count[i]] = buffer[i, :count[i]] * inverse[i]
    return lo_cut.astype(np.int64), count, weights
