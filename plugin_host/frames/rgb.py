"""Camera frames -> an RGB (or BGR) image input of one frame, for detectors and classifiers.

The daemon's own models take openpilot's two-frame YUV stack (``convert.py``). A model
exported from torchvision, timm, YOLO and the like takes one colour image instead:
``(1, 3, H, W)`` (NCHW) or ``(1, H, W, 3)`` (NHWC), float32 or uint8. The policy names such an
input in its ``[[artifact]]``'s ``image_inputs`` with an :class:`RgbFormat`; this module makes
it from one NV12 frame (converted as below), RGB frame (its samples as they are) or GRAY frame
(its one sample in every channel, as OpenCV's ``COLOR_GRAY2RGB`` and PIL's ``convert("RGB")``
make a colour image of a monochrome one, e.g. an infrared driver camera's): :func:`frame_to_rgb`.

**Resizing**, by default as for the YUV stack: nearest-neighbour sampling at pixel centres
(:func:`~plugin_host.frames.convert.nearest_indices`), no calibration. Each output pixel takes
one source pixel's luma and that pixel's own chroma sample (NV12 shares one ``U, V`` among each
2 x 2 block of luma pixels), so an output pixel is exactly the colour of the source pixel it
samples. ``fit`` says how a frame of another aspect ratio fills the ``W x H`` image
(:func:`fit_boxes`):

- ``"stretch"`` (the default; the YUV stack's): the whole frame onto the whole image, each
  axis scaled on its own;
- ``"letterbox"`` (YOLO's): the whole frame scaled by ``s = min(W / W_in, H / H_in)`` to
  ``round(W_in s) x round(H_in s)``, centred, the rest of the image the sample ``pad`` (114,
  YOLO's grey, by default) in every channel;
- ``"crop"`` (torchvision's resize of the shorter side then centre crop): the centred part of
  the frame of the image's aspect ratio, ``round(f W / s) x round(f H / s)`` for
  ``s = max(W / W_in, H / H_in)``, onto the whole image; ``f``, ``crop_fraction`` (1 by
  default), the share of that box kept on each side: 0.875 is ImageNet's evaluation (resize
  the shorter side to 256, crop 224) and timm's ``crop_pct``.

Within its box an image pixel ``(r, c)`` samples source pixel ``(sy + floor((r - oy + 0.5)
sh / oh), sx + floor((c - ox + 0.5) sw / ow))``: ``(sy, sx, sh, sw)`` the frame's box,
``(oy, ox, oh, ow)`` the image's. A detector's boxes map back to the frame by the same two
boxes.

``resize`` may instead ask for the frame's box converted to 8-bit samples (below) and then
resampled as the model's training pipeline did, each channel on its own, separably (along the
rows, then down the columns), in float32, rounded to samples again:

- ``"bilinear"`` (OpenCV's ``INTER_LINEAR``, which YOLO's letterbox uses; torch's
  ``interpolate(mode="bilinear", align_corners=False)``): output ``i`` of an axis weighs the
  two source samples around ``x = (i + 0.5) in / out - 0.5`` (``x`` held at 0 below the first,
  the last sample repeated past the end) by their distance;
- ``"bilinear-antialias"`` (PIL's bilinear filter, torchvision's ``Resize`` with
  ``antialias=True``, torch's ``antialias=True``): shrinking by ``s = in / out``, output
  ``i`` weighs every source sample whose centre lies within ``s`` of ``(i + 0.5) s`` by a
  triangle of half-width ``s``, normalized, so each output averages its whole footprint
  rather than two samples of it; growing, it is ``"bilinear"``.

Both read only the source pixels their weights reach, a strip of rows at a time, weighing each
strip as it is converted; the weights are made once per camera and image size, as blocks of a
few small matrix products.

**Colour**: ITU-R BT.601 in video range (luma 16..235, chroma 16..240, centred on 128), the
matrix camera pipelines and OpenCV's ``COLOR_YUV2RGB_NV12`` use. With ``Kr = 0.299``,
``Kb = 0.114``, ``Kg = 1 - Kr - Kb``::

    R = 255/219 (Y - 16) + 255/224 * 2 (1 - Kr) (V - 128)
    G = 255/219 (Y - 16) - 255/224 * 2 (Kb (1 - Kb) / Kg) (U - 128)
                         - 255/224 * 2 (Kr (1 - Kr) / Kg) (V - 128)
    B = 255/219 (Y - 16) + 255/224 * 2 (1 - Kb) (U - 128)

with a luma below 16 (below black) taken as 16, summed in float32, rounded to the nearest
integer and clipped to 0..255: the 8-bit samples a decoder gives (a value within a float32
rounding of a half may round either way; R and B are looked up, by their two samples, from
those sums made once). OpenCV computes the same in fixed point: over every (Y, U, V) its
samples and these are the same or one apart.

**Values**: a uint8 input takes those samples as they are. A float32 input takes
``(sample * scale - mean[c]) / std[c]`` per channel ``c`` in the input's colour order, in
float32 (``scale = 1/255`` with ImageNet's mean and std for torchvision's models; ``scale =
1/255`` alone for YOLO's); the defaults (1, 0, 1) give the samples as floats. A sample has 256
values, so each channel's 256 results are computed once and looked up.

One frame makes the whole input (no previous frame is kept), so a reset of the recurrent state
changes nothing here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ShapeError
from .convert import IMAGE_DTYPES, check_nv12, nearest_indices

__all__ = ["RgbFormat", "RgbImage", "COLORS", "FITS", "RESIZES", "SOURCE_FORMATS", "fit_boxes",
           "frame_to_rgb", "nv12_to_rgb", "rgb_to_rgb", "gray_to_rgb", "rgb_layout", "rgb_size",
           "rgb_input_problem"]

#: The channel orders an image input may take.
COLORS = ("rgb", "bgr")
#: How a frame fills an image of another aspect ratio (see the module).
FITS = ("stretch", "letterbox", "crop")
#: How a frame is resampled to the image's size (see the module).
RESIZES = ("nearest", "bilinear", "bilinear-antialias")
#: The fields of an :class:`RgbFormat`, as a policy table and a sandbox message hold them.
FIELDS = ("color", "scale", "mean", "std", "fit", "pad", "resize", "crop_fraction")
#: The frame formats a colour image is made from.
SOURCE_FORMATS = ("NV12", "RGB", "GRAY")

# BT.601's luma weights, and the video-range scales of luma (219 levels) and chroma (224)
_KR, _KB = 0.299, 0.114
_KG = 1.0 - _KR - _KB
_Y_SCALE, _C_SCALE = 255.0 / 219.0, 255.0 / 224.0


def _table(values: np.ndarray) -> np.ndarray:
    table = values.astype(np.float32)
    table.setflags(write=False)
    return table


_LEVELS = np.arange(256, dtype=np.float64)
#: float32 terms by sample value: luma's, V's in R, U's and V's in G, U's in B
_LUMA = _table(_Y_SCALE * np.maximum(_LEVELS - 16, 0))  # below black is black
_R_V = _table(_C_SCALE * 2 * (1 - _KR) * (_LEVELS - 128))
_G_U = _table(-_C_SCALE * 2 * (_KB * (1 - _KB) / _KG) * (_LEVELS - 128))
_G_V = _table(-_C_SCALE * 2 * (_KR * (1 - _KR) / _KG) * (_LEVELS - 128))
_B_U = _table(_C_SCALE * 2 * (1 - _KB) * (_LEVELS - 128))


def _samples(terms: np.ndarray) -> np.ndarray:
    out = np.clip(np.rint(terms), 0, 255).astype(np.uint8).ravel()
    out.setflags(write=False)
    return out


#: R and B depend on two samples each: their 8-bit values by ``Y * 256 + V`` and
#: ``Y * 256 + U``, 64 KiB each, from the same float32 sums as G's (bit for bit what summing
#: per pixel gives, at one gather per pixel)
_R_BY_YV = _samples(_LUMA[:, None] + _R_V[None, :])
_B_BY_YU = _samples(_LUMA[:, None] + _B_U[None, :])


@dataclass(frozen=True)
class RgbFormat:
    """How an image input is made from frames: its channel order (``color``: ``"rgb"`` or
    ``"bgr"``), how a frame fills it (``fit``, with the sample ``pad`` around a letterbox or
    the ``crop_fraction`` of a crop), how it is resampled (``resize``) and, for a float32 input,
    ``(sample * scale - mean[c]) / std[c]``.

    Built from untrusted values (a policy file, a sandbox message) it refuses anything else
    with a ``ValueError`` naming the field: an unknown colour, fit or resize, a non-finite
    number, means or stds not given as three numbers, a scale or a std of 0, a pad that is not
    an integer of 0..255, a crop fraction outside (0, 1] or given without ``fit = "crop"``."""

    color: str = "rgb"
    scale: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    fit: str = "stretch"
    pad: int = 114
    resize: str = "nearest"
    crop_fraction: float = 1.0

    def __post_init__(self) -> None:
        if self.color not in COLORS:
            raise ValueError(f"color must be one of {', '.join(map(repr, COLORS))}, got "
                             f"{self.color!r}")
        if self.fit not in FITS:
            raise ValueError(f"fit must be one of {', '.join(map(repr, FITS))}, got "
                             f"{self.fit!r}")
        if self.resize not in RESIZES:
            raise ValueError(f"resize must be one of {', '.join(map(repr, RESIZES))}, got "
                             f"{self.resize!r}")
        if type(self.pad) is not int or not 0 <= self.pad <= 255:
            raise ValueError(f"pad must be a sample value, an integer of 0..255, got "
                             f"{self.pad!r}")
        object.__setattr__(self, "scale", _number(self.scale, "scale"))
        if self.scale == 0:
            raise ValueError("scale must not be 0 (every value would be the same)")
        for field in ("mean", "std"):
            value = getattr(self, field)
            if type(value) not in (tuple, list) or len(value) != 3:
                raise ValueError(f"{field} must be three numbers (one per channel, in the "
                                 f"input's colour order), got {value!r}")
            object.__setattr__(self, field, tuple(_number(v, field) for v in value))
        if any(v == 0 for v in self.std):
            raise ValueError(f"std must not be 0, got {list(self.std)}")
        object.__setattr__(self, "crop_fraction", _fraction(self.crop_fraction, self.fit))

    @property
    def normalizes(self) -> bool:
        """True when the values are not the samples themselves (a uint8 input cannot)."""
        return (self.scale, self.mean, self.std) != (1.0, (0.0,) * 3, (1.0,) * 3)

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-friendly dict (:meth:`from_wire` reads it back)."""
        return {"color": self.color, "scale": self.scale, "mean": list(self.mean),
                "std": list(self.std), "fit": self.fit, "pad": self.pad,
                "resize": self.resize, "crop_fraction": self.crop_fraction}

    @classmethod
    def from_wire(cls, value: Any) -> "RgbFormat":
        """An :class:`RgbFormat` from :meth:`to_wire`'s dict; ValueError if malformed."""
        if type(value) is not dict or set(value) != set(FIELDS):
            raise ValueError(f"an image format is a dict of {', '.join(FIELDS)}")
        if any(type(value[k]) is not str for k in ("color", "fit", "resize")):
            raise ValueError("color, fit and resize must be str")
        return cls(**value)

    def tables(self) -> np.ndarray:
        """``(3, 256)`` float32: channel ``c``'s value for each sample, read-only."""
        levels = np.arange(256, dtype=np.float32)
        out = np.stack([(levels * np.float32(self.scale) - np.float32(m)) / np.float32(s)
                        for m, s in zip(self.mean, self.std)])
        out.setflags(write=False)
        return out


def _number(value: Any, field: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        what = "a finite number" if field == "scale" else "finite numbers"
        raise ValueError(f"{field} must be {what}, got {value!r}")
    if abs(value) > 3.4e38:
        raise ValueError(f"{field} {value!r} does not fit a float32")
    return float(value)


def _fraction(value: Any, fit: Any) -> float:
    """A crop fraction checked: a number in (0, 1], other than 1 only for ``fit = "crop"``."""
    if type(value) not in (int, float) or not 0 < value <= 1:
        raise ValueError(f"crop_fraction must be a number in (0, 1], the share of the crop "
                         f"kept on each side, got {value!r}")
    if value != 1 and fit != "crop":
        raise ValueError(f"crop_fraction is for fit = \"crop\", got fit {fit!r}")
    return float(value)


def rgb_layout(shape: tuple, layout: str) -> str | None:
    """``"NCHW"`` or ``"NHWC"``: where a ``(1, 3, H, W)`` or ``(1, H, W, 3)`` shape keeps its
    channels (the ABI's ``layout`` decides a ``(1, 3, H, 3)``); None for any other shape."""
    if len(shape) != 4 or shape[0] != 1 or not all(type(d) is int and d > 0 for d in shape):
        return None
    first, last = shape[1] == 3, shape[3] == 3
    if first and last:
        return "NHWC" if layout == "NHWC" else "NCHW"
    return "NCHW" if first else "NHWC" if last else None


def rgb_size(shape: tuple, layout: str) -> tuple[int, int]:
    """``(width, height)`` of a colour image of ``shape`` in ``layout`` (``"NCHW"`` or
    ``"NHWC"``, as :func:`rgb_layout` gives it)."""
    return (shape[2], shape[1]) if layout == "NHWC" else (shape[3], shape[2])


def rgb_input_problem(spec: Any, fmt: RgbFormat | None = None) -> str | None:
    """Why ``spec`` cannot be made as a colour image (in ``fmt``, when given: a uint8 input
    cannot be normalized); None when it can."""
    shape = tuple(spec.shape)
    if spec.dtype not in {d.name for d in IMAGE_DTYPES} or not rgb_layout(shape, spec.layout):
        return (f"input {spec.name!r} is {spec.dtype}{shape}; a colour image is a float32 or "
                f"uint8 (1, 3, h, w) or (1, h, w, 3) of a fixed size")
    if fmt is not None and spec.dtype == "uint8" and fmt.normalizes:
        return (f"input {spec.name!r} is uint8: it takes the samples as they are (scale, mean "
                f"and std are for float32 inputs)")
    return None


def fit_boxes(size_in: tuple[int, int], size_out: tuple[int, int], fit: str,
              crop_fraction: float = 1.0
              ) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """``((sy, sx, sh, sw), (oy, ox, oh, ow))``: the box of a ``(H_in, W_in)`` frame that
    fills the box of an ``(H, W)`` image, by ``fit`` (and ``crop_fraction`` for a crop; see
    the module). Sizes are at least 1; halves round to even (Python's ``round``)."""
    crop_fraction = _fraction(crop_fraction, fit)
    (h_in, w_in), (h, w) = size_in, size_out
    if fit == "stretch":
        return (0, 0, h_in, w_in), (0, 0, h, w)
    if fit == "letterbox":
        s = min(w / w_in, h / h_in)
        oh, ow = min(h, max(1, round(h_in * s))), min(w, max(1, round(w_in * s)))
        return (0, 0, h_in, w_in), ((h - oh) // 2, (w - ow) // 2, oh, ow)
    if fit == "crop":
        s = max(w / w_in, h / h_in) / crop_fraction
        sh, sw = min(h_in, max(1, round(h / s))), min(w_in, max(1, round(w / s)))
        return ((h_in - sh) // 2, (w_in - sw) // 2, sh, sw), (0, 0, h, w)
    raise ValueError(f"fit must be one of {', '.join(map(repr, FITS))}, got {fit!r}")


def _check_size(width: Any, height: Any, color: str, fit: Any, pad: Any, resize: Any,
                out: np.ndarray | None, where: str) -> None:
    if type(width) is not int or type(height) is not int or width < 1 or height < 1:
        raise ShapeError(f"image size must be positive, got {width}x{height}",
                         where=where, expected="positive", got=(width, height))
    if color not in COLORS:
        raise ValueError(f"color must be one of {', '.join(map(repr, COLORS))}, got {color!r}")
    if fit not in FITS:  # (before the cached sampling, which takes only what it can hash)
        raise ValueError(f"fit must be one of {', '.join(map(repr, FITS))}, got {fit!r}")
    if type(pad) is not int or not 0 <= pad <= 255:
        raise ValueError(f"pad must be an integer of 0..255, got {pad!r}")
    if resize not in RESIZES:
        raise ValueError(f"resize must be one of {', '.join(map(repr, RESIZES))}, got "
                         f"{resize!r}")
    if out is not None and (out.shape != (3, height, width) or out.dtype != np.uint8):
        raise ShapeError(f"out must be uint8 (3, {height}, {width}), got {out.dtype} "
                         f"{out.shape}", where=where, expected=(3, height, width),
                         got=out.shape)


def _linear_taps(size_in: int, size_out: int, antialias: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, weights)``, each ``(size_out, k)``: the source samples each output sample
    sums and their weights (float64, summing to 1). Output ``i``'s centre falls on source
    coordinate ``x = (i + 0.5) * size_in / size_out``. Bilinear: the two samples around
    ``x - 0.5`` (held at 0 below the first, the last sample repeated past the end).
    Antialiased, when shrinking by ``s = size_in / size_out > 1``: the triangle of half-width
    ``s`` centred on ``x`` over the samples' centres, normalized (PIL's filter, and torch's
    ``antialias=True``); growing, it is bilinear."""
    scale = size_in / size_out
    centre = (np.arange(size_out, dtype=np.float64) + 0.5) * scale
    if not antialias:
        src = np.maximum(centre - 0.5, 0.0)
        first = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
        frac = src - first
        return (np.stack([first, np.minimum(first + 1, size_in - 1)], 1),
                np.stack([1 - frac, frac], 1))
    half = max(scale, 1.0)
    lo = np.maximum(np.trunc(centre - half + 0.5).astype(np.int64), 0)
    hi = np.minimum(np.trunc(centre + half + 0.5).astype(np.int64), size_in)
    indices = lo[:, None] + np.arange(int((hi - lo).max()))[None, :]
    weights = np.maximum(0.0, 1 - np.abs((indices - centre[:, None] + 0.5) / half))
    weights[indices >= hi[:, None]] = 0
    weights /= weights.sum(1, keepdims=True)
    return np.minimum(indices, size_in - 1), weights


#: Output samples per block of a resample's weight matrices (see :func:`_axis`)
_BLOCK = 16
#: Rows of a frame converted at a time
_STRIP = 32


def _axis(start: int, size_in: int, size_out: int, resize: str
          ) -> tuple[np.ndarray, tuple | None]:
    """One axis of a resample: the source samples read (from ``start``, in order, each once)
    and, unless nearest, the weights as blocks ``(first, end, lo, hi, matrix)``: outputs
    ``first:end`` are the read samples ``lo:hi`` times the float32 ``(hi - lo, end - first)``
    matrix. The taps of a block of outputs lie close together, so a few small matrix products
    do what one per tap would, several times faster."""
    if resize == "nearest":
        return start + nearest_indices(size_in, size_out), None
    indices, weights = _linear_taps(size_in, size_out, resize == "bilinear-antialias")
    # (not np.unique, which imports numpy.ma on first use: the confined worker cannot)
    used = np.bincount(indices.ravel(), minlength=size_in) > 0
    read = np.flatnonzero(used)
    positions = (np.cumsum(used) - 1)[indices]
    blocks = []
    for first in range(0, size_out, _BLOCK):
        end = min(size_out, first + _BLOCK)
        taps = positions[first:end]
        lo, hi = int(taps.min()), int(taps.max()) + 1
        matrix = np.zeros((hi - lo, end - first))
        np.add.at(matrix, (taps - lo, np.arange(end - first)[:, None]), weights[first:end])
        matrix = matrix.astype(np.float32)
        matrix.setflags(write=False)
        blocks.append((first, end, lo, hi, matrix))
    return start + read, tuple(blocks)


@lru_cache(maxsize=64)
def _sampled(size_in: tuple[int, int], size_out: tuple[int, int], fit: str, resize: str,
             crop_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                        tuple[int, int, int, int], Any, Any]:
    """(source rows, source columns, their chroma rows and columns, the image's box, the rows'
    weight blocks, the columns') of ``fit`` and ``resize``, read-only: made once per camera
    and image size, not per frame. Nearest reads one source pixel per image pixel (no
    weights)."""
    (sy, sx, sh, sw), box = fit_boxes(size_in, size_out, fit, crop_fraction)
    rows, row_blocks = _axis(sy, sh, box[2], resize)
    cols, col_blocks = _axis(sx, sw, box[3], resize)
    out = rows, cols, rows // 2, cols // 2
    for array in out:
        array.setflags(write=False)
    return out + (box, row_blocks, col_blocks)


def _made(read: Any, n_rows: int, n_cols: int, row_blocks: Any, col_blocks: Any,
          channels: int = 3) -> np.ndarray:
    """``(channels, oh, ow)`` uint8: the samples that ``read(strip, out)`` writes into ``out``
    (a ``(channels, rows, n_cols)`` uint8 buffer) for each strip of the ``n_rows`` read rows,
    weighted along each strip's rows as it is read (while it is in the cache), then down the
    columns, in float32, rounded; as read for nearest (no weights)."""
    if row_blocks is None:
        samples = np.empty((channels, n_rows, n_cols), np.uint8)
        for first in range(0, n_rows, _STRIP):
            read(slice(first, first + _STRIP), samples[:, first:first + _STRIP])
        return samples
    across = np.empty((channels, n_rows, col_blocks[-1][1]), np.float32)
    buffer = np.empty((channels, min(n_rows, _STRIP), n_cols), np.uint8)
    for first in range(0, n_rows, _STRIP):
        strip = slice(first, first + _STRIP)
        samples = buffer[:, :min(_STRIP, n_rows - first)]
        read(strip, samples)
        values = samples.astype(np.float32)
        for start, end, lo, hi, matrix in col_blocks:
            np.matmul(values[:, :, lo:hi], matrix, out=across[:, strip, start:end])
    down = np.empty((channels, row_blocks[-1][1], across.shape[2]), np.float32)
    for start, end, lo, hi, matrix in row_blocks:
        np.matmul(matrix.T, across[:, lo:hi], out=down[:, start:end])
    # weights of 0..1 summing to 1 keep each sum within 0..255 (float32's rounding may pass
    # 255 by far less than a half): no clip needed
    np.rint(down, out=down)
    return down.astype(np.uint8)


def _placed(rgb: np.ndarray, box: tuple[int, int, int, int], size: tuple[int, int], pad: int,
            out: np.ndarray | None) -> np.ndarray:
    """``rgb`` (3, oh, ow) in its box of a (3, H, W) image (``out`` when given), the sample
    ``pad`` around it."""
    oy, ox, oh, ow = box
    if out is None and (oh, ow) == size:
        return rgb
    if out is None:
        out = np.empty((3,) + size, np.uint8)
    if (oh, ow) != size:  # a letterbox: the pad around the frame
        out[:, :oy] = pad
        out[:, oy + oh:] = pad
        out[:, oy:oy + oh, :ox] = pad
        out[:, oy:oy + oh, ox + ow:] = pad
    out[:, oy:oy + oh, ox:ox + ow] = rgb
    return out


def nv12_to_rgb(y: np.ndarray, uv: np.ndarray, *, width: int, height: int,
                color: str = "rgb", out: np.ndarray | None = None, fit: str = "stretch",
                pad: int = 114, resize: str = "nearest", crop_fraction: float = 1.0
                ) -> np.ndarray:
    """``(3, height, width)`` uint8 planes in ``color`` order from one NV12 frame, fitted by
    ``fit`` (``pad`` around a letterbox, ``crop_fraction`` of a crop) and resampled by
    ``resize`` (see the module), in
    ``out`` (uint8, any strides) when given: ``y`` the ``(H, W)`` luma plane, ``uv`` the
    ``(H/2, W/2, 2)`` chroma plane (any strides, e.g. read-only pool views).
    ``.transpose(1, 2, 0)`` is the ``(height, width, 3)`` image a decoder gives."""
    h_in, w_in = check_nv12(y, uv, "nv12_to_rgb")
    if y.dtype != np.uint8 or uv.dtype != np.uint8:
        raise ShapeError(f"NV12 planes: expected uint8 samples, got {y.dtype} and {uv.dtype}",
                         where="nv12_to_rgb", expected="uint8", got=(y.dtype, uv.dtype))
    _check_size(width, height, color, fit, pad, resize, out, "nv12_to_rgb")
    rows, cols, chroma_rows, chroma_cols, box, row_blocks, col_blocks = _sampled(
        (h_in, w_in), (height, width), fit, resize, _fraction(crop_fraction, fit))
    red, blue = (0, 2) if color == "rgb" else (2, 0)

    def read(strip: slice, rgb: np.ndarray) -> None:
        # gathers one axis at a time (take), and planes rather than interleaved channels: a
        # few times faster than one fancy index of both axes; a strip of rows at a time keeps
        # the temporaries in the cache (twice as fast on a whole frame as one pass)
        luma = y.take(rows[strip], 0).take(cols, 1)
        # each chroma pair read as one little-endian 16-bit word: U its low byte, V its high
        chroma = uv.take(chroma_rows[strip], 0).take(chroma_cols, 1).view("<u2")[..., 0]
        u, v = chroma & 0xFF, chroma >> 8
        high = luma.astype(np.uint16) << 8
        _R_BY_YV.take(high | v, out=rgb[red], mode="clip")  # (every index is in range)
        _B_BY_YU.take(high | u, out=rgb[blue], mode="clip")
        green = _LUMA.take(luma)
        green += _G_U.take(u)
        green += _G_V.take(v)
        np.rint(green, out=green)
        np.clip(green, 0, 255, out=green)
        rgb[1] = green  # whole numbers in 0..255: exact

    rgb = _made(read, len(rows), len(cols), row_blocks, col_blocks)
    return _placed(rgb, box, (height, width), pad, out)


def rgb_to_rgb(plane: np.ndarray, *, width: int, height: int, color: str = "rgb",
               out: np.ndarray | None = None, fit: str = "stretch", pad: int = 114,
               resize: str = "nearest", crop_fraction: float = 1.0) -> np.ndarray:
    """``(3, height, width)`` uint8 planes in ``color`` order from one RGB frame's ``(H, W, 3)``
    plane (any strides), its samples as they are, fitted and resampled as :func:`nv12_to_rgb`
    does."""
    if plane.ndim != 3 or plane.shape[2] != 3 or plane.dtype != np.uint8 \
            or not all(plane.shape):
        raise ShapeError(f"RGB plane: expected uint8 (H, W, 3), got {plane.dtype} "
                         f"{plane.shape}", where="rgb_to_rgb", expected="(H, W, 3)",
                         got=plane.shape)
    _check_size(width, height, color, fit, pad, resize, out, "rgb_to_rgb")
    rows, cols, _, _, box, row_blocks, col_blocks = _sampled(
        plane.shape[:2], (height, width), fit, resize, _fraction(crop_fraction, fit))
    channels = (0, 1, 2) if color == "rgb" else (2, 1, 0)

    def read(strip: slice, rgb: np.ndarray) -> None:
        picked = plane.take(rows[strip], 0).take(cols, 1)
        for c, channel in enumerate(channels):
            rgb[c] = picked[:, :, channel]

    rgb = _made(read, len(rows), len(cols), row_blocks, col_blocks)
    return _placed(rgb, box, (height, width), pad, out)


def gray_to_rgb(plane: np.ndarray, *, width: int, height: int, color: str = "rgb",
                out: np.ndarray | None = None, fit: str = "stretch", pad: int = 114,
                resize: str = "nearest", crop_fraction: float = 1.0) -> np.ndarray:
    """``(3, height, width)`` uint8 planes, each the samples of one GRAY frame's ``(H, W)``
    plane (any strides), fitted and resampled as :func:`nv12_to_rgb` does (the channels are
    equal, so ``color`` changes nothing)."""
    if plane.ndim != 2 or plane.dtype != np.uint8 or not all(plane.shape):
        raise ShapeError(f"GRAY plane: expected uint8 (H, W), got {plane.dtype} {plane.shape}",
                         where="gray_to_rgb", expected="(H, W)", got=plane.shape)
    _check_size(width, height, color, fit, pad, resize, out, "gray_to_rgb")
    rows, cols, _, _, box, row_blocks, col_blocks = _sampled(
        plane.shape, (height, width), fit, resize, _fraction(crop_fraction, fit))

    def read(strip: slice, gray: np.ndarray) -> None:
        gray[0] = plane.take(rows[strip], 0).take(cols, 1)

    # one channel resampled, then written to all three
    gray = _made(read, len(rows), len(cols), row_blocks, col_blocks, channels=1)
    if out is None and box[2:] == (height, width):
        return np.repeat(gray, 3, 0)
    return _placed(np.broadcast_to(gray, (3,) + gray.shape[1:]), box, (height, width), pad,
                   out)


def frame_to_rgb(planes: Any, format: str, **kwargs: Any) -> np.ndarray:
    """:func:`nv12_to_rgb` of an NV12 frame's planes (``Y``, ``UV``), :func:`rgb_to_rgb` of an
    RGB frame's (``RGB``), :func:`gray_to_rgb` of a GRAY frame's (``Y``), with the same
    keywords; a ValueError for any other format."""
    if format == "NV12":
        return nv12_to_rgb(planes["Y"], planes["UV"], **kwargs)
    if format == "RGB":
        return rgb_to_rgb(planes["RGB"], **kwargs)
    if format == "GRAY":
        return gray_to_rgb(planes["Y"], **kwargs)
    raise ValueError(f"a colour image is made from {', '.join(SOURCE_FORMATS)} frames, got "
                     f"{format}")


class RgbImage:
    """Makes one image input ``out`` (float32 or uint8, ``(1, 3, H, W)`` NCHW or
    ``(1, H, W, 3)`` NHWC as ``layout`` says) from each frame (NV12, RGB or GRAY), in ``fmt``'s
    colour order, fit and values. The same calls as
    :class:`~plugin_host.frames.convert.FrameStacker` (``push(y, uv)``, ``push_planes(planes,
    format)``, ``reset()``), for the places that make either."""

    def __init__(self, out: np.ndarray, layout: str, fmt: RgbFormat) -> None:
        if out.dtype not in IMAGE_DTYPES or rgb_layout(out.shape, layout) != layout:
            raise ShapeError(f"RgbImage: out must be a float32 or uint8 image of layout "
                             f"{layout}, got {out.dtype} {out.shape}", where="RgbImage",
                             expected=layout, got=out.shape)
        if out.dtype == np.uint8 and fmt.normalizes:
            raise ValueError("a uint8 image takes the samples as they are: scale, mean and "
                             "std are for float32 inputs")
        self.out, self.layout, self.format = out, layout, fmt
        self.width, self.height = rgb_size(out.shape, layout)
        self._tables = fmt.tables() if out.dtype == np.float32 else None

    def reset(self) -> None:
        """Nothing to forget: each frame makes the whole image."""

    def push(self, y: np.ndarray, uv: np.ndarray) -> np.ndarray:
        """The image of this NV12 frame, in ``out`` (returned)."""
        return self.push_planes({"Y": y, "UV": uv}, "NV12")

    def push_planes(self, planes: Any, format: str) -> np.ndarray:
        """The image of a frame of ``format`` (NV12, RGB or GRAY) given its planes, in
        ``out``."""
        image = self.out[0] if self.layout == "NCHW" else self.out[0].transpose(2, 0, 1)
        fmt = self.format
        options = dict(width=self.width, height=self.height, color=fmt.color, fit=fmt.fit,
                       pad=fmt.pad, resize=fmt.resize, crop_fraction=fmt.crop_fraction)
        if self._tables is None:
            frame_to_rgb(planes, format, out=image, **options)
            return self.out
        samples = frame_to_rgb(planes, format, **options)
        for c in range(3):
            if image[c].flags.c_contiguous:
                self._tables[c].take(samples[c], out=image[c])
            else:
                image[c] = self._tables[c].take(samples[c])
        return self.out
