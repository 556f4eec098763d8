"""Where a colour image's pixels lie in its camera frame: a detector's boxes back to the frame.

A colour image input (:mod:`plugin_host.frames.rgb`) is made from the frame's box
``(x, y, width, height)`` that its ``fit`` chose, scaled onto the image's box (the whole image,
or a letterbox's part of it). A model that finds things in the image (a detector's boxes, a
pose model's keypoints) finds them in image pixels; a user of its outputs wants them in the
camera's pixels, where calibration, other cameras and the recording of the frame live.
:class:`ImageGeometry` holds the two boxes and maps coordinates either way.

Coordinates are continuous pixel coordinates, as detectors give them: pixel ``(row r, column
c)`` covers ``[c, c + 1) x [r, r + 1)``, its centre at ``(c + 0.5, r + 0.5)``. Along each axis
the map is the one the resampling used: image coordinate ``u`` is frame coordinate
``x = fx + (u - ix) * fw / iw`` (``fx, fw`` the frame box's start and size on that axis,
``ix, iw`` the image box's), so an image pixel's centre maps to the source position its sample
was taken at: the pixel nearest sampling read (the floor of that position), the centre of the
footprint the bilinear resizes weigh. Sizes (a box's width and height) scale by ``fw / iw``
alone.

A point in a letterbox's pad maps outside the frame; ``clip=True`` holds the results to the
frame, ``[0, width] x [0, height]``, as YOLO's own post-processing does (a box's corners, or a
centre-size box as its corners).

The daemon puts one in each model message for each colour image input (``image_geometry``:
input name -> :class:`ImageGeometry`; README, "Colour images"), so that a sink maps the
outputs of the frame they came from without re-deriving the fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ShapeError
from .rgb import FITS, _fraction, fit_boxes

__all__ = ["ImageGeometry", "KINDS"]

#: The coordinate layouts :meth:`ImageGeometry.to_frame` maps, by the last axis of the array:
#: points ``(x, y)``, corner boxes ``(x1, y1, x2, y2)``, corner-size boxes ``(x, y, w, h)``
#: (COCO's) and centre-size boxes ``(cx, cy, w, h)`` (YOLO's raw head)
KINDS = ("xy", "xyxy", "xywh", "cxcywh")


def _size(value: Any, what: str) -> tuple[int, int]:
    if type(value) not in (tuple, list) or len(value) != 2 \
            or any(type(v) is not int or v < 1 for v in value):
        raise ShapeError(f"{what} must be (width, height), two positive ints, got {value!r}",
                         where="ImageGeometry", expected="(width, height)", got=value)
    return int(value[0]), int(value[1])


@dataclass(frozen=True)
class ImageGeometry:
    """A colour image's place in its frame (module docstring). ``frame_size`` and
    ``image_size`` are ``(width, height)``; ``frame_box`` and ``image_box`` are ``(x, y,
    width, height)`` in their own pixels: the frame's box is resampled onto the image's box.
    Make one with :meth:`of`."""

    frame_size: tuple[int, int]
    image_size: tuple[int, int]
    frame_box: tuple[int, int, int, int]
    image_box: tuple[int, int, int, int]

    @staticmethod
    def of(frame_size: tuple[int, int], image_size: tuple[int, int], fit: str = "stretch",
           crop_fraction: float = 1.0) -> "ImageGeometry":
        """The geometry of a ``(width, height)`` image made from a ``(width, height)`` frame
        by ``fit`` (and ``crop_fraction``), as :class:`~plugin_host.frames.rgb.RgbFormat`
        names them; ValueError or ShapeError naming what is wrong."""
        frame_size, image_size = _size(frame_size, "frame_size"), _size(image_size,
                                                                         "image_size")
        if fit not in FITS:
            raise ValueError(f"fit must be one of {', '.join(map(repr, FITS))}, got {fit!r}")
        # (checked before the cache, which takes only what it can hash)
        return _geometry(frame_size, image_size, fit, _fraction(crop_fraction, fit))

    @property
    def scale(self) -> tuple[float, float]:
        """``(x, y)``: frame pixels per image pixel along each axis."""
        return self.frame_box[2] / self.image_box[2], self.frame_box[3] / self.image_box[3]

    def to_frame(self, coords: Any, kind: str = "xyxy", *, clip: bool = False) -> np.ndarray:
        """``coords`` (any shape whose last axis is the ``kind``'s: 2 for ``"xy"``, else 4;
        see :data:`KINDS`), in image pixels, as float64 frame pixels of the same shape and
        kind; with ``clip``, held to the frame."""
        return self._mapped(coords, kind, clip, to_frame=True)

    def to_image(self, coords: Any, kind: str = "xyxy", *, clip: bool = False) -> np.ndarray:
        """The inverse of :meth:`to_frame`: frame pixels to image pixels (with ``clip``, held
        to the image)."""
        return self._mapped(coords, kind, clip, to_frame=False)

    def _mapped(self, coords: Any, kind: str, clip: bool, *, to_frame: bool) -> np.ndarray:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got "
                             f"{kind!r}")
        values = np.asarray(coords)
        if values.dtype.kind not in "iuf":
            raise ValueError(f"coordinates must be numbers, got an array of {values.dtype}")
        width = 2 if kind == "xy" else 4
        if values.ndim == 0 or values.shape[-1] != width:
            raise ShapeError(f"{kind} coordinates need a last axis of {width}, got shape "
                             f"{values.shape}", where="ImageGeometry", expected=width,
                             got=values.shape)
        values = values.astype(np.float64)  # a copy: the caller's array is never written
        src, dst = (self.image_box, self.frame_box) if to_frame else (self.frame_box,
                                                                      self.image_box)
        start_src = np.array(src[:2], np.float64)
        start_dst = np.array(dst[:2], np.float64)
        size_src = np.array(src[2:], np.float64)
        size_dst = np.array(dst[2:], np.float64)
        pairs = values.reshape(values.shape[:-1] + (width // 2, 2))
        # positions: multiplied before dividing, so that an exact result (an image pixel's
        # centre landing on a frame pixel's edge) is exact in float64 too
        for p in range(width // 2) if kind in ("xy", "xyxy") else (0,):
            pairs[..., p, :] = (pairs[..., p, :] - start_src) * size_dst / size_src + start_dst
        if kind in ("xywh", "cxcywh"):
            pairs[..., 1, :] = pairs[..., 1, :] * size_dst / size_src
        if clip:
            _clip(values, kind, self.frame_size if to_frame else self.image_size)
        return values


def _clip(values: np.ndarray, kind: str, size: tuple[int, int]) -> None:
    """``values`` (float64, ``kind``) held to ``[0, width] x [0, height]``, in place: a
    point's and a corner box's coordinates each; a size box as its corners, then back."""
    limit = np.array(size, np.float64)
    pairs = values.reshape(values.shape[:-1] + (values.shape[-1] // 2, 2))
    if kind in ("xy", "xyxy"):
        np.clip(pairs, 0, limit, out=pairs)
        return
    half = 0.5 if kind == "cxcywh" else 0.0
    first = pairs[..., 0, :] - half * pairs[..., 1, :]
    second = first + pairs[..., 1, :]
    first, second = np.clip(first, 0, limit), np.clip(second, 0, limit)
    pairs[..., 1, :] = second - first
    pairs[..., 0, :] = first + half * pairs[..., 1, :]


@lru_cache(maxsize=64)
def _geometry(frame_size: tuple[int, int], image_size: tuple[int, int], fit: str,
              crop_fraction: float) -> ImageGeometry:
    (sy, sx, sh, sw), (oy, ox, oh, ow) = fit_boxes(frame_size[::-1], image_size[::-1], fit,
                                                   crop_fraction)
    return ImageGeometry(frame_size, image_size, (sx, sy, sw, sh), (ox, oy, ow, oh))
