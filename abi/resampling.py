"""The arithmetic of ONNX Resize along one axis, as onnxruntime's CPU kernel computes it (float32,
its order of operations): the input coordinate each output position reads, and the taps and
weights it sums there. The numpy backend's ``resize`` (and its antialias windows) and the ONNX
importer's per-axis decomposition of a Resize the ``resize`` op cannot say (tf_crop_and_resize,
a keep_aspect_ratio_policy size) both compute from these, so the two agree bit for bit."""

from __future__ import annotations

import numpy as np

__all__ = ["coordinates", "cubic_weights", "axis_taps", "NEAREST_HALF"]

F32 = np.float32

#: onnxruntime rounds a nearest coordinate within this of a half as the half itself (its
#: nearest modes compare the fraction with 0.5 after such a tolerance)
NEAREST_HALF = 1e-6


def coordinates(out: int, length: int, scale, mode: str, roi=None) -> np.ndarray:
    """The input coordinate of each of the ``out`` positions along an axis of ``length``
    entries (``scale``: the float32 scale, or None for out / length): ``o`` the output
    position, ``s`` the scale,

    - half_pixel ``(o + 0.5) / s - 0.5``; pytorch_half_pixel the same, 0 where out is 1;
    - half_pixel_symmetric the same plus ``length / 2 * (1 - out / (s * length))``, which
      centres the output when out is not exactly ``s * length`` (that offset in float32, the
      sum in float64 and rounded to float32 once, as onnxruntime computes it);
    - tf_half_pixel_for_nn ``(o + 0.5) / s`` (TensorFlow's nearest with half-pixel centres);
    - align_corners ``o * (length - 1) / (out - 1)``, 0 where out is 1; asymmetric ``o / s``;
    - tf_crop_and_resize, for ``roi`` (start, end): ``start * (length - 1) + o * (end -
      start) * (length - 1) / (out - 1)``, ``(start + end) / 2 * (length - 1)`` where out is
      1 (the float32 sum, then float64, rounded once).

    An axis of scale 1 is read as it is (``o``) in every mode but tf_crop_and_resize, as
    onnxruntime does: tf_half_pixel_for_nn would otherwise move it by half an entry.
    """
    o = np.arange(out, dtype=F32)
    s = F32(scale) if scale is not None else F32(out) / F32(length)
    if s == F32(1) and mode != "tf_crop_and_resize":
        return o
    if mode == "tf_crop_and_resize":
        start, end = F32(roi[0]), F32(roi[1])
        if out == 1:
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


def cubic_weights(frac: np.ndarray, a: float) -> list:
    """onnxruntime's cubic (Keys) weights of the taps at floor - 1 .. floor + 2 for the
    fractional parts ``frac`` of the coordinates, float32 in its order of operations."""
    a, one, two = F32(a), F32(1), F32(2)
    d = np.abs(frac)

    def near(t):  # |t| <= 1
        return ((a + two) * t - (a + F32(3))) * t * t + one

    def far(t):  # 1 < |t| < 2
        return ((a * t - F32(5) * a) * t + F32(8) * a) * t - F32(4) * a

    return [far(d + one), near(d), near(one - d), far(two - d)]


def axis_taps(c: np.ndarray, length: int, mode: str, nearest_mode: str, cubic_coeff_a: float,
              exclude_outside: bool, last: bool) -> tuple[list, np.ndarray | None]:
    """What one axis reads at the coordinates ``c``: ``([(indices, weights or None), ...],
    divisor or None)``, the indices int64 and clamped into the input.

    - nearest: one tap, the coordinate rounded by ``nearest_mode`` (a fraction within
      :data:`NEAREST_HALF` of a half taken as the half);
    - linear: the two neighbours of the coordinate clamped into [0, length - 1], each weighted
      by its distance to the other (0.5 each at the last entry);
    - cubic: the 4 taps from floor(c) - 1, weighted by Keys' kernel of ``cubic_coeff_a``; with
      ``exclude_outside`` those outside the input weigh 0 and the rest are divided by their
      sum, folded into the weights of the innermost axis (``last``) or, on another, the
      divisor of each weighted tap.
    """
    if mode == "nearest":
        floor = np.floor(c)
        frac = c - floor
        half = np.abs(frac - F32(0.5)) < NEAREST_HALF
        index = {"floor": floor, "ceil": np.ceil(c),
                 "round_prefer_floor": floor + ((frac > 0.5) & ~half),
                 "round_prefer_ceil": floor + ((frac >= 0.5) | half)}[nearest_mode]
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
    weights = np.stack(cubic_weights(c - floor, cubic_coeff_a))
    divisor = None
    if exclude_outside:
        weights[(taps < 0) | (taps >= length)] = 0
        total = np.zeros(c.shape, F32)
        for w in weights:  # summed one tap after the other, as onnxruntime
            total += w
        if last:
            weights = weights / total
        else:
            divisor = total
    return list(zip(np.clip(taps, 0, length - 1), weights)), divisor
