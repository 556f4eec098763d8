"""Worker side: a model input made from camera frames, inside the sandbox.

The daemon's models take one ``(1, 12, h, w)`` float32 or uint8 input: two stacked YUV420
frames of a ``2w x 2h`` model frame, previous then current
(:func:`plugin_host.frames.nv12_to_yuv6`); or, given an :class:`~plugin_host.frames.RgbFormat`,
one colour image ``(1, 3, h, w)`` or ``(1, h, w, 3)`` of the current frame, NV12, RGB or GRAY
(:mod:`plugin_host.frames.rgb`).
With :meth:`SandboxedExecutor.feed_frames`, that input is made here, in the worker, straight
from the camera pool it maps read-only: the host sends only the frame's slot, generation, id
and timestamps, the worker converts the planes where they lie into a buffer of its own (the
conversion is the only copy of the frame), checks the slot's generation *after* reading it
(a frame overwritten meanwhile is refused, never half-used), and runs the model on it.

The previous frame's half is kept here between calls; a reset of the recurrent state (any
reason: the daemon's contract, a worker restart, an explicit reset) forgets it, so the next
frame is stacked with itself. A colour image keeps nothing between frames.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FrameError, FrameFormatError, SandboxProtocolError
from ..frames.convert import IMAGE_DTYPES, nv12_to_yuv6
from ..frames.frame import Frame
from ..frames.pool import PoolReader
from ..frames.rgb import SOURCE_FORMATS, RgbFormat, RgbImage, rgb_input_problem, rgb_layout

__all__ = ["FrameFeed", "image_input_problem", "frame_of"]

_U64 = 2**64 - 1


def image_input_problem(spec: Any) -> str | None:
    """Why ``spec`` cannot be made from frames (None when it can)."""
    shape = tuple(spec.shape)
    if (spec.dtype in {d.name for d in IMAGE_DTYPES} and len(shape) == 4
            and shape[:2] == (1, 12) and all(type(d) is int and d > 0 for d in shape[2:])):
        return None
    return (f"input {spec.name!r} is {spec.dtype}{shape}; frames make a float32 or uint8 "
            f"(1, 12, h, w) two-frame YUV stack")


def frame_of(pool: PoolReader | None, fields: Any) -> Frame:
    """The frame of the attached pool described by ``(slot, generation, frame_id, sof, eof)``
    (a binary call) or a :meth:`Frame.to_dict` (a msgpack call); typed errors otherwise."""
    if pool is None:
        raise FrameError("no frame pool attached")
    if type(fields) is dict:
        frame = Frame.from_dict(fields)  # FrameFormatError if malformed
        pool.planes(frame)  # validated against the pool (FrameError / FrameFormatError)
        return frame
    if (type(fields) not in (tuple, list) or len(fields) != 5
            or any(type(v) is not int or not 0 <= v <= _U64 for v in fields)):
        raise FrameFormatError("frame metadata is a Frame.to_dict() or (slot, generation, "
                               "frame_id, timestamp_sof, timestamp_eof), each an int in "
                               "[0, 2**64)")
    slot, generation, frame_id, sof, eof = fields
    if not slot < pool.buffers:
        raise FrameFormatError(f"no slot {slot} in a pool of {pool.buffers}")
    if eof < sof:
        raise FrameFormatError(f"frame {frame_id}: timestamp_eof {eof} is before "
                               f"timestamp_sof {sof}")
    return Frame(pool.camera, frame_id, sof, eof, pool.layout, slot, generation, pool.pool_id)


class FrameFeed:
    """One image input filled from pool frames: the two-frame YUV stack, or with ``image`` (an
    :class:`RgbFormat`) a colour image."""

    def __init__(self, spec: Any, image: RgbFormat | None = None) -> None:
        problem = image_input_problem(spec) if image is None else rgb_input_problem(spec, image)
        if problem:
            raise SandboxProtocolError(problem)
        self.name = spec.name
        self.width, self.height = 2 * spec.shape[3], 2 * spec.shape[2]
        # two stacks, used in turn: the next frame is built in the other one, so a frame
        # refused half-way (overwritten) leaves the current stack as it was
        self._stacks = [np.zeros(tuple(spec.shape), spec.dtype) for _ in range(2)]
        self._views = [a.view() for a in self._stacks]
        for view in self._views:
            view.flags.writeable = False  # what the kernels get
        self._current = 0
        self._have_previous = False
        #: with ``image``: the colour image's maker of each stack
        self._rgb: list[RgbImage] | None = None
        if image is not None:
            layout = rgb_layout(tuple(spec.shape), spec.layout)
            self._rgb = [RgbImage(a, layout, image) for a in self._stacks]

    def reset(self) -> None:
        """Forget the previous frame: the next one is stacked with itself."""
        self._have_previous = False

    def fill(self, pool: PoolReader, frame: Frame) -> np.ndarray:
        """The stack ``[previous, frame]`` (read-only); FrameOverwrittenError if the frame's
        slot was refilled while it was read (the feed then stays as it was)."""
        fmt = frame.layout.format
        if fmt not in (SOURCE_FORMATS if self._rgb is not None else ("NV12",)):
            raise FrameFormatError(f"{frame}: a {'colour image' if self._rgb else 'YUV stack'} "
                                   f"is not made from {fmt} frames")
        planes = pool.planes(frame)
        nxt = 1 - self._current
        if self._rgb is not None:
            self._rgb[nxt].push_planes(planes, fmt)
            pool.check(frame)
            self._current = nxt
            return self._views[nxt]
        img = self._stacks[nxt][0]
        nv12_to_yuv6(planes["Y"], planes["UV"], width=self.width, height=self.height,
                     out=img[6:])
        pool.check(frame)  # after reading: the bytes converted are the frame announced
        img[:6] = self._stacks[self._current][0, 6:] if self._have_previous else img[6:]
        self._current, self._have_previous = nxt, True
        return self._views[nxt]
