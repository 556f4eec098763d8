"""The input coordinate each output position of the ``resize`` op reads, per coordinate
transformation mode, in float32 with onnxruntime's order of operations (the plain resize in
:mod:`.glue` and the antialias windows in :mod:`.antialias` both start from it)."""

from __future__ import annotations

import numpy as np

__all__ = ["resize_coordinates"]

F32 = np.float32


def resize_coordinates(out: int, length: int, scale, mode: str) -> np.ndarray:
    """The input coordinate of each of the ``out`` positions along an axis of ``length``
    entries (``scale``: the given float32 scale, or None for out / length): ``o`` the output
    position, ``s`` the scale,

    - half_pixel ``(o + 0.5) / s - 0.5``; pytorch_half_pixel the same, 0 where out is 1;
    - half_pixel_symmetric the same plus ``length / 2 * (1 - out / (s * length))``, which
      centres the output when out is not exactly ``s * length`` (that offset in float32, the
      sum in float64 and rounded to float32 once, as onnxruntime computes it);
    - tf_half_pixel_for_nn ``(o + 0.5) / s`` (TensorFlow's nearest with half-pixel centres);
    - align_corners ``o * (length - 1) / (out - 1)``, 0 where out is 1; asymmetric ``o / s``.
    """
    o = np.arange(out, dtype=F32)
    s = F32(scale) if scale is not None else F32(out) / F32(length)
    if mode == "asymmetric":
        return o / s
    if mode == "align_corners":
        if out == 1:
            return np.zeros(1, F32)
        return o * F32(length - 1) / F32(out - 1)
    if mode == "pytorch_half_pixel" and out == 1:
        return np.zeros(1, F32)
    if mode == "tf_half_pixel_for_nn":
        return (o + F32(0.5)) / s
    if mode == "half_pixel_symmetric":  # the offset in float32, the rest in float64
        adjustment = F32(out) / (s * F32(length))
        offset = F32(length) / F32(2) * (F32(1) - adjustment)
        return (np.float64(offset) + (o.astype(np.float64) + 0.5) / np.float64(s)
                - 0.5).astype(F32)
    return (o + F32(0.5)) / s - F32(0.5)
