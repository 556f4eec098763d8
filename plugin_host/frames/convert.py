"""NV12 frames -> the demo model's ``img`` input: two stacked YUV420 frames, 12 x 128 x 256.

openpilot's vision models take each frame as six half-resolution channels (the convention of
its ``frames_to_tensor``): for a model frame of ``H x W`` luma pixels,

====== ==================================================================
channel  values (``Y``, ``U``, ``V``: the frame resized to the model size)
====== ==================================================================
0        ``Y[0::2, 0::2]``  (even rows, even columns)
1        ``Y[1::2, 0::2]``  (odd rows, even columns)
2        ``Y[0::2, 1::2]``  (even rows, odd columns)
3        ``Y[1::2, 1::2]``  (odd rows, odd columns)
4        ``U``  (``H/2 x W/2``)
5        ``V``  (``H/2 x W/2``)
====== ==================================================================

and the model input stacks the previous frame's six channels before the current frame's:
``img[0, 0:6]`` = previous, ``img[0, 6:12]`` = current, shape ``(1, 12, H/2, W/2)``, float32
or uint8 (see below).
For the demo model ``W x H = 512 x 256``, so ``img`` is ``(1, 12, 128, 256)``.

**Resizing.** A camera frame (1928 x 1208 by default) is first resized to the model size with
*nearest-neighbour* sampling at pixel centres: output pixel ``(r, c)`` takes source pixel
``(floor((r + 0.5) * H_in / H_out), floor((c + 0.5) * W_in / W_out))``. The luma plane is
resized from ``H_in x W_in`` to ``H x W``, the interleaved chroma plane from ``H_in/2 x W_in/2``
to ``H/2 x W/2`` by the same rule, so both sample the same scene points. The aspect ratio is
not preserved (1928 x 1208 is 1.60:1, the model 2:1) and nothing is calibrated or warped:
openpilot warps each frame with the calibrated camera-to-model transform first; this host has
no calibration, and nearest sampling needs no arithmetic on pixel values, so the model sees
exactly the camera's values (an identity when the sizes are equal). The sampling indices are
computed once per size pair; each conversion is two gathers, no Python loop over pixels.

Values are the raw 8-bit samples, not normalized: as float32 (0.0 .. 255.0) for a float32
input, as they are for a uint8 one (openpilot's newer vision models take ``uint8`` and convert
inside the model); the model's first layer is trained on that range, as openpilot's is. The
functions take plain numpy arrays (the read-only views the sandbox worker maps), so they run
on either side.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ShapeError

__all__ = ["MODEL_WIDTH", "MODEL_HEIGHT", "IMAGE_DTYPES", "check_nv12", "nearest_indices",
           "nv12_to_yuv6",
           "stack_frames", "FrameStacker"]

#: The demo model's frame size (luma pixels); its input channels are half of it each way.
MODEL_WIDTH, MODEL_HEIGHT = 512, 256
#: The element types an image input may have: the samples as floats, or as the bytes they are.
IMAGE_DTYPES = (np.dtype(np.float32), np.dtype(np.uint8))


def _check_out(out: np.ndarray, shape: tuple, where: str) -> None:
    if out.shape != shape or out.dtype not in IMAGE_DTYPES:
        raise ShapeError(f"out must be float32 or uint8 {shape}, got {out.dtype} {out.shape}",
                         where=where, expected=shape, got=out.shape)


def check_nv12(y: np.ndarray, uv: np.ndarray, where: str) -> tuple[int, int]:
    """``(H, W)`` of the NV12 planes ``y`` ``(H, W)`` and ``uv`` ``(H/2, W/2, 2)``; ShapeError
    (naming ``where``) for any other shapes."""
    if y.ndim != 2 or uv.ndim != 3 or uv.shape[2] != 2:
        raise ShapeError(f"NV12 planes: expected Y (H, W) and UV (H/2, W/2, 2), got "
                         f"{y.shape} and {uv.shape}", where=where,
                         expected="(H, W), (H/2, W/2, 2)", got=(y.shape, uv.shape))
    h_in, w_in = y.shape
    if h_in % 2 or w_in % 2 or uv.shape[:2] != (h_in // 2, w_in // 2):
        raise ShapeError(f"NV12 planes: Y {y.shape} needs an even size and UV "
                         f"({h_in // 2}, {w_in // 2}, 2), got UV {uv.shape}",
                         where=where, expected=(h_in // 2, w_in // 2, 2), got=uv.shape)
    return h_in, w_in


@lru_cache(maxsize=64)
def nearest_indices(size_in: int, size_out: int) -> np.ndarray:
    """Source index for each of ``size_out`` outputs: ``floor((i + 0.5) * in / out)``
    (exact integer arithmetic), read-only."""
    out = ((2 * np.arange(size_out, dtype=np.int64) + 1) * size_in) // (2 * size_out)
    out.setflags(write=False)
    return out


def nv12_to_yuv6(y: np.ndarray, uv: np.ndarray, *, width: int = MODEL_WIDTH,
                 height: int = MODEL_HEIGHT, out: np.ndarray | None = None,
                 dtype=np.float32) -> np.ndarray:
    """Six channels ``(6, height/2, width/2)`` of ``dtype`` (float32 or uint8) from one NV12
    frame (see the module).

    ``y`` is the ``(H, W)`` luma plane and ``uv`` the ``(H/2, W/2, 2)`` interleaved chroma
    plane (any strides, e.g. read-only pool views); ``width`` x ``height`` is the model's
    frame size (even). ``out`` (float32 or uint8) receives the result when given.
    """
    h_in, w_in = check_nv12(y, uv, "nv12_to_yuv6")
    if width % 2 or height % 2 or width < 2 or height < 2:
        raise ShapeError(f"model frame size must be even, got {width}x{height}",
                         where="nv12_to_yuv6", expected="even", got=(width, height))
    h2, w2 = height // 2, width // 2
    if out is None:
        out = np.empty((6, h2, w2), dtype=dtype)
    _check_out(out, (6, h2, w2), "nv12_to_yuv6")
    rows = nearest_indices(h_in, height)
    cols = nearest_indices(w_in, width)
    # the four luma phases gathered straight from the source: no full-size intermediate
    out[0] = y[np.ix_(rows[0::2], cols[0::2])]
    out[1] = y[np.ix_(rows[1::2], cols[0::2])]
    out[2] = y[np.ix_(rows[0::2], cols[1::2])]
    out[3] = y[np.ix_(rows[1::2], cols[1::2])]
    chroma = uv[np.ix_(nearest_indices(h_in // 2, h2), nearest_indices(w_in // 2, w2))]
    out[4] = chroma[..., 0]
    out[5] = chroma[..., 1]
    return out


def stack_frames(previous: np.ndarray, current: np.ndarray, *,
                 out: np.ndarray | None = None) -> np.ndarray:
    """``(1, 12, h, w)``: ``previous`` (6, h, w) then ``current`` (6, h, w), in ``out`` (float32
    or uint8) or a new array, uint8 for uint8 frames, else float32."""
    if previous.shape != current.shape or previous.ndim != 3 or previous.shape[0] != 6:
        raise ShapeError(f"stack_frames: expected two (6, h, w) frames, got {previous.shape} "
                         f"and {current.shape}", where="stack_frames",
                         expected="(6, h, w) twice", got=(previous.shape, current.shape))
    shape = (1, 12) + previous.shape[1:]
    if out is None:
        out = np.empty(shape, dtype=np.uint8 if current.dtype == np.uint8 else np.float32)
    _check_out(out, shape, "stack_frames")
    out[0, :6] = previous
    out[0, 6:] = current
    return out


class FrameStacker:
    """Keeps the previous frame and produces the model's ``img`` for each new NV12 frame.

    ``push(y, uv)`` returns ``(1, 12, height/2, width/2)`` of ``dtype`` (float32 or uint8): the
    previous frame's six
    channels, then this frame's. The first frame after construction or :meth:`reset` (a
    camera restart, a frame gap: the previous frame is not the one before this one) is
    stacked with itself. The returned array is reused by the next push (copy it to keep it).
    ``out`` (float32 or uint8, ``(1, 12, height/2, width/2)``) is where the stack is kept
    when given, e.g. a model's input buffer; its ``dtype`` then is ``out``'s.
    """

    def __init__(self, *, width: int = MODEL_WIDTH, height: int = MODEL_HEIGHT,
                 dtype=np.float32, out: np.ndarray | None = None) -> None:
        self.width, self.height = width, height
        shape = (1, 12, height // 2, width // 2)
        self._img = np.zeros(shape, dtype=dtype) if out is None else out
        _check_out(self._img, shape, "FrameStacker")
        self._have_previous = False

    def reset(self) -> None:
        self._have_previous = False

    def push_planes(self, planes: Any, format: str) -> np.ndarray:
        """:meth:`push` of an NV12 frame's planes (``Y``, ``UV``); ShapeError for any other
        format (the same call as :meth:`~plugin_host.frames.RgbImage.push_planes`)."""
        if format != "NV12":
            raise ShapeError(f"a YUV stack is made from NV12 frames, got {format}",
                             where="FrameStacker", expected="NV12", got=format)
        return self.push(planes["Y"], planes["UV"])

    def push(self, y: np.ndarray, uv: np.ndarray) -> np.ndarray:
        img = self._img
        if self._have_previous:
            img[0, :6] = img[0, 6:]
        nv12_to_yuv6(y, uv, width=self.width, height=self.height, out=img[0, 6:])
        if not self._have_previous:
            img[0, :6] = img[0, 6:]
            self._have_previous = True
        return img
