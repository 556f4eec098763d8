"""The synthetic camera plugin: a deterministic moving test pattern at a steady rate.

Every frame's bytes are a function of its ``frame_id`` only (:func:`synthetic_pattern`), so a
test can predict them; timestamps are real: the camera ticks every ``1/rate`` seconds of
``time.monotonic_ns()``, stamps ``timestamp_sof`` at the tick and ``timestamp_eof`` after the
exposure (``exposure_ms``). Ticks fall on multiples of the period of the monotonic clock, so
cameras of one rate tick together (as hardware-synchronized sensors do, and frames of several
cameras can be matched); ``phase_ms`` shifts a camera's ticks off that grid (a camera out of
sync with the others by that much). ``timestamp_sof`` is the tick itself, however late the
thread woke. ``frame_id`` counts ticks from 0 at each start; a tick the thread missed (it ran
late by a whole period) is skipped and counted as dropped (``late``), and a tick with no free
buffer is dropped and counted (``no_free_buffer``), so ``frame_id`` gaps always mean dropped
frames.

The pattern (8-bit samples, ``f`` = frame_id, ``r``/``c`` = row/column in the plane):

- luma (NV12 ``Y``, ``GRAY``): ``(r + c + 4f) mod 256``, plus a white box (255) of
  ``max(1, H/8)`` rows from row ``H/4`` and ``max(1, W/16)`` columns from column
  ``8f mod W`` (clipped at the right edge) moving right 8 pixels a frame;
- NV12 chroma: ``U = (c + 2f) mod 256``, ``V = (r + 3f) mod 256`` (``r``, ``c`` on the
  half-resolution chroma grid);
- RGB: ``R = (c + 4f)``, ``G = (r + 2f)``, ``B = (r + c + f)`` mod 256, and the same box
  white in all three;
- finally the first 8 bytes of the first row of the first plane hold ``f`` as a
  little-endian u64 (when the row has 8 bytes), so any frame identifies itself.

Configuration (``[plugin.config]``; one camera, or several under ``cameras = [{...}]``):
``name`` ("synthetic"), ``width`` (1928), ``height`` (1208), ``format`` ("NV12"; also "RGB",
"GRAY"), ``rate`` (20.0 Hz), ``exposure_ms`` (half the period, at most 10), ``buffers`` (8),
``stride_align`` (64), ``leak_age_s`` (2.0), ``leak_frames`` (none), ``phase_ms`` (0.0, less
than the frame period).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

import numpy as np

from plugin_host.errors import CameraConfigError, FrameFormatError
from plugin_host.frames import FORMATS, MAX_DIM, FrameLayout, ThreadedCamera
from plugin_host.hooks import hookimpl

from ._config import Key, camera_configs, in_range, one_of, publisher_of

__all__ = ["SyntheticCamera", "SyntheticPattern", "synthetic_pattern", "SCHEMA",
           "plugin_host_add_cameras"]

SCHEMA: Mapping[str, Key] = {
    "name": Key((str,), "synthetic", lambda v: None if v else "must not be empty"),
    "width": Key((int,), 1928, in_range(2, MAX_DIM)),
    "height": Key((int,), 1208, in_range(2, MAX_DIM)),
    "format": Key((str,), "NV12", one_of(*FORMATS)),
    "rate": Key((float,), 20.0, in_range(0, 1000, low_open=True)),
    "exposure_ms": Key((float, type(None)), None, in_range(0, None)),
    "buffers": Key((int,), 8, in_range(1, 64)),
    "stride_align": Key((int,), 64, in_range(1, 4096)),
    "leak_age_s": Key((float,), 2.0, in_range(0, None, low_open=True)),
    "leak_frames": Key((int, type(None)), None, in_range(1, None)),
    "phase_ms": Key((float,), 0.0, in_range(0, None)),
}


class SyntheticPattern:
    """Renders the test pattern of one layout (the constant parts computed once)."""

    def __init__(self, layout: FrameLayout) -> None:
        self.layout = layout
        h, w = layout.height, layout.width
        self._box_rows = slice(h // 4, h // 4 + max(1, h // 8))
        self._box_width = max(1, w // 16)
        if layout.format in ("NV12", "GRAY"):
            self._luma = _ramp(h, w, 1, 1)
            if layout.format == "NV12":
                uv = np.empty((h // 2, w // 2, 2), np.uint8)
                uv[..., 0] = _ramp(h // 2, w // 2, 0, 1)
                uv[..., 1] = _ramp(h // 2, w // 2, 1, 0)
                self._uv = uv
        else:
            rgb = np.empty((h, w, 3), np.uint8)
            rgb[..., 0] = _ramp(h, w, 0, 1)
            rgb[..., 1] = _ramp(h, w, 1, 0)
            rgb[..., 2] = _ramp(h, w, 1, 1)
            self._rgb = rgb

    def fill(self, planes: Mapping[str, np.ndarray], frame_id: int) -> None:
        """Write frame ``frame_id``'s pattern into ``planes`` (writable views, any strides)."""
        f = int(frame_id)
        fmt = self.layout.format
        if fmt == "RGB":
            rgb = planes["RGB"]
            # one channel at a time: a ufunc broadcasting over an innermost axis of 3 (or 2)
            # runs about 7x slower than over whole rows
            for ch, step in enumerate(((4 * f) & 0xFF, (2 * f) & 0xFF, f & 0xFF)):
                np.add(self._rgb[..., ch], np.uint8(step), out=rgb[..., ch])
            self._box(rgb, f)
            first = rgb
        else:
            y = planes["Y"]
            np.add(self._luma, np.uint8((4 * f) & 0xFF), out=y)
            self._box(y, f)
            if fmt == "NV12":
                uv = planes["UV"]
                np.add(self._uv[..., 0], np.uint8((2 * f) & 0xFF), out=uv[..., 0])
                np.add(self._uv[..., 1], np.uint8((3 * f) & 0xFF), out=uv[..., 1])
            first = y
        row = first[0].reshape(-1)
        if row.size >= 8:
            row[:8] = np.frombuffer((f & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"), np.uint8)

    def _box(self, plane: np.ndarray, f: int) -> None:
        w = self.layout.width
        start = (8 * f) % w
        plane[self._box_rows, start:min(w, start + self._box_width)] = 255

    def render(self, frame_id: int) -> dict[str, np.ndarray]:
        """Frame ``frame_id``'s planes as new packed arrays."""
        planes = {p.name: np.empty(p.shape, np.uint8) for p in self.layout.planes}
        self.fill(planes, frame_id)
        return planes


def _ramp(h: int, w: int, kr: int, kc: int) -> np.ndarray:
    rows = (np.arange(h, dtype=np.int64) * kr)[:, None]
    cols = (np.arange(w, dtype=np.int64) * kc)[None, :]
    return ((rows + cols) & 0xFF).astype(np.uint8)


def synthetic_pattern(layout: FrameLayout, frame_id: int) -> dict[str, np.ndarray]:
    """The synthetic camera's planes for ``frame_id`` (what its frames hold)."""
    return SyntheticPattern(layout).render(frame_id)


class SyntheticCamera(ThreadedCamera):
    """A camera producing :class:`SyntheticPattern` frames at ``rate`` Hz on its thread."""

    def __init__(self, name: str = "synthetic", *, width: int = 1928, height: int = 1208,
                 format: str = "NV12", rate: float = 20.0, exposure_ms: float | None = None,
                 buffers: int = 8, stride_align: int = 64, leak_age_s: float | None = 2.0,
                 leak_frames: int | None = None, phase_ms: float = 0.0,
                 publisher: Any = None) -> None:
        try:
            layout = FrameLayout.create(format, width, height, stride_align=stride_align)
        except FrameFormatError as exc:
            raise CameraConfigError(f"camera {name!r}: {exc}", camera=name) from None
        if not 0 < rate <= 1000:
            raise CameraConfigError(f"camera {name!r}: rate must be in (0, 1000] Hz, got "
                                    f"{rate!r}", camera=name)
        period_ms = 1000.0 / rate
        if exposure_ms is None:
            exposure_ms = min(10.0, period_ms / 2)
        if not 0 <= exposure_ms < period_ms:
            raise CameraConfigError(f"camera {name!r}: exposure_ms {exposure_ms} must be at "
                                    f"least 0 and shorter than the frame period "
                                    f"{period_ms:.3f} ms", camera=name)
        if not 0 <= phase_ms < period_ms:
            raise CameraConfigError(f"camera {name!r}: phase_ms {phase_ms} must be at least 0 "
                                    f"and shorter than the frame period {period_ms:.3f} ms",
                                    camera=name)
        super().__init__(name, layout, buffers=buffers, leak_age_s=leak_age_s,
                         leak_frames=leak_frames, publisher=publisher)
        self.rate = float(rate)
        self.exposure_ns = int(exposure_ms * 1e6)
        self.phase_ns = int(phase_ms * 1e6)
        self.pattern = SyntheticPattern(layout)

    def _produce(self, stop: threading.Event) -> None:
        pool = self.pool
        assert pool is not None
        period = int(round(1e9 / self.rate))
        # ticks on a grid of the monotonic clock: cameras of one rate tick together, like
        # hardware-synchronized sensors (frames of several cameras can be matched)
        phase = self.phase_ns
        start = ((time.monotonic_ns() - phase) // period + 1) * period + phase
        frame_id = 0
        while not stop.is_set():
            tick = start + frame_id * period
            now = time.monotonic_ns()
            if now < tick:
                if stop.wait((tick - now) / 1e9):
                    return
            elif now - tick >= period:  # late by whole periods: those ticks are lost
                missed = (now - tick) // period
                pool.count_dropped("late", missed)
                frame_id += missed
                continue
            # the sensor starts exposing at the tick, whenever this thread got to run (a
            # wake-up delay is the host's, not the sensor's: cameras of one rate keep equal
            # timestamps, and the frame's age counts the delay)
            sof = tick
            writer = pool.begin_frame()
            if writer is not None:
                try:
                    self.pattern.fill(writer.planes, frame_id)
                    rest = sof + self.exposure_ns - time.monotonic_ns()
                    if rest > 0 and stop.wait(rest / 1e9):
                        writer.abort()
                        return
                except BaseException:
                    writer.abort()
                    raise
                frame = writer.commit(frame_id, sof, time.monotonic_ns())
                self._publish(frame)
            frame_id += 1


@hookimpl
def plugin_host_add_cameras(config):
    """One :class:`SyntheticCamera` per configured camera (see the module docstring)."""
    plugin = (config or {}).get("name", "synthetic")
    publisher = publisher_of(config)
    return [SyntheticCamera(**settings, publisher=publisher)
            for settings in camera_configs(plugin, (config or {}).get("config"), SCHEMA)]
