"""The replay camera plugin: plays a recorded-frames file (``plugin-host record`` writes one).

The file (format: :mod:`plugin_host.frames.replay_format`) is opened and indexed when the
camera is made, so a hostile or damaged file is refused at load with a
:class:`~plugin_host.errors.ReplayFormatError`, before any buffer is allocated, and again at
each start (it is open only while the camera runs; a file replaced by one of another layout is
refused then); each frame's
checksum is verified as it is read into the pool (a mismatch stops the camera, recorded in
``camera.error``), or every frame up front with ``verify = true``.

- ``pace = "recorded"`` (default): frames are published at the recorded pace, each when its
  recorded ``timestamp_eof`` comes due relative to the first frame's ``timestamp_sof``. When
  no buffer is free the frame is dropped (``no_free_buffer``), and a frame more than one
  frame late is skipped (``late``), as a live camera would. ``pace = "fast"``: as fast as
  the consumers release buffers; the camera waits for a free buffer instead of dropping, so a
  subscription whose queue holds at least ``buffers`` frames receives every frame.
- ``timestamps = "rebased"`` (default): timestamps keep their recorded spacing but are moved
  so that each pass starts now (``timestamp_eof`` is about the moment of publication in
  recorded pace; in fast pace they run ahead of the clock), and with ``loop`` frame ids
  continue across passes (each pass adds the recording's id span), so a loop looks like one
  continuous camera. ``timestamps = "recorded"``: the recorded ids and timestamps exactly;
  with ``loop`` they jump back at each pass, which consumers see as a timestamp going
  backwards.
- ``loop = false`` (default): after the last frame the camera stops producing
  (``camera.finished`` is set); ``true``: start over.

Configuration (``[plugin.config]``; one camera, or several under ``cameras = [{...}]``):
``file`` (required; absolute, or relative to the working directory; ``~`` expanded), ``name``
(default: the camera name in the file), ``pace``, ``timestamps``, ``loop``, ``verify``
(false), ``buffers`` (8), ``leak_age_s`` (2.0), ``leak_frames`` (none),
``max_frame_mb`` (64: larger frames are refused before anything is allocated).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any, Mapping

from plugin_host.errors import CameraConfigError, ReplayFormatError
from plugin_host.frames import ReplayLimits, ReplayReader, ThreadedCamera
from plugin_host.hooks import hookimpl

from ._config import REQUIRED, Key, camera_configs, in_range, one_of, publisher_of

__all__ = ["ReplayCamera", "SCHEMA", "plugin_host_add_cameras"]

SCHEMA: Mapping[str, Key] = {
    "file": Key((str,), REQUIRED, lambda v: None if v else "must not be empty"),
    "name": Key((str, type(None)), None, lambda v: None if v is None or v else
                "must not be empty"),
    "pace": Key((str,), "recorded", one_of("recorded", "fast")),
    "timestamps": Key((str,), "rebased", one_of("rebased", "recorded")),
    "loop": Key((bool,), False),
    "verify": Key((bool,), False),
    "buffers": Key((int,), 8, in_range(1, 64)),
    "leak_age_s": Key((float,), 2.0, in_range(0, None, low_open=True)),
    "leak_frames": Key((int, type(None)), None, in_range(1, None)),
    "max_frame_mb": Key((float,), 64.0, in_range(0, 1024, low_open=True)),
}

#: Slice of a wait for a free buffer in fast pace (the stop flag is checked between slices).
_WAIT_SLICE = 0.05


class ReplayCamera(ThreadedCamera):
    """Plays ``file`` (see the module docstring). Raises ReplayFormatError for a bad file."""

    def __init__(self, file: str | os.PathLike, name: str | None = None, *,
                 pace: str = "recorded", timestamps: str = "rebased", loop: bool = False,
                 verify: bool = False, buffers: int = 8, leak_age_s: float | None = 2.0,
                 leak_frames: int | None = None, max_frame_mb: float = 64.0,
                 publisher: Any = None) -> None:
        if pace not in ("recorded", "fast") or timestamps not in ("rebased", "recorded"):
            raise CameraConfigError(f"replay camera: pace must be recorded or fast and "
                                    f"timestamps rebased or recorded, got {pace!r}, "
                                    f"{timestamps!r}", camera=name)
        self.file = os.path.expanduser(os.fspath(file))
        self.limits = ReplayLimits(max_frame_bytes=int(max_frame_mb * 2**20))
        with self._open(name) as reader:
            if verify:
                reader.verify()
            super().__init__(name or reader.camera, reader.layout, buffers=buffers,
                             leak_age_s=leak_age_s, leak_frames=leak_frames,
                             publisher=publisher)
        self.reader: ReplayReader | None = None  # open while the camera runs
        self.pace, self.timestamps, self.loop = pace, timestamps, loop
        self.passes = 0

    def _open(self, name: str | None) -> ReplayReader:
        """Open and index the file (ReplayFormatError when it is refused)."""
        reader = ReplayReader(self.file, limits=self.limits)
        if not len(reader):
            reader.close()
            raise CameraConfigError(f"replay camera: {self.file} holds no frames",
                                    camera=name or reader.camera)
        records = reader.records
        sofs = [r.timestamp_sof for r in records]
        gaps = [b - a for a, b in zip(sofs, sofs[1:]) if b > a]
        #: time between the last frame of a pass and the first of the next (median interval)
        self.loop_gap_ns = int(statistics.median(gaps)) if gaps else 50_000_000
        #: frame ids one pass spans (rebased loops add it per pass)
        self.id_span = records[-1].frame_id - records[0].frame_id + 1
        return reader

    def _prepare(self) -> None:
        # the file is opened (and checked again: it may have been replaced) for each start,
        # before the pool is allocated; a file whose layout changed is refused
        reader = self._open(self.name)
        if reader.layout != self.layout:
            reader.close()
            raise ReplayFormatError(f"the layout changed from {self.layout.describe()} to "
                                    f"{reader.layout.describe()} since the camera was made",
                                    path=self.file)
        self.reader = reader
        self.passes = 0

    def _cleanup(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None

    def _produce(self, stop: threading.Event) -> None:
        pool, reader = self.pool, self.reader
        assert pool is not None and reader is not None
        records = reader.records
        first = records[0]
        pass_start = time.monotonic_ns()
        pass_no = 0
        while not stop.is_set():
            offset = pass_start - first.timestamp_sof
            for i, info in enumerate(records):
                if stop.is_set():
                    return
                if self.pace == "recorded":
                    due = info.timestamp_eof + offset
                    now = time.monotonic_ns()
                    if now < due:
                        if stop.wait((due - now) / 1e9):
                            return
                    elif i + 1 < len(records) and now > records[i + 1].timestamp_eof + offset:
                        pool.count_dropped("late")
                        continue
                    writer = pool.begin_frame()
                    if writer is None:
                        continue
                else:
                    writer = None
                    while writer is None:
                        if stop.is_set():
                            return
                        writer = pool.begin_frame(wait=_WAIT_SLICE, count_drop=False)
                try:
                    reader.read_into(i, writer.buffer)
                except BaseException:
                    writer.abort()
                    raise
                if self.timestamps == "rebased":
                    frame_id = info.frame_id + pass_no * self.id_span
                    sof, eof = info.timestamp_sof + offset, info.timestamp_eof + offset
                else:
                    frame_id, sof, eof = info.frame_id, info.timestamp_sof, info.timestamp_eof
                self._publish(writer.commit(frame_id, sof, eof))
            self.passes += 1
            if not self.loop:
                return
            pass_no += 1
            if self.pace == "recorded":
                pass_start += records[-1].timestamp_sof - first.timestamp_sof + self.loop_gap_ns
            else:
                pass_start = max(time.monotonic_ns(), pass_start + records[-1].timestamp_sof
                                 - first.timestamp_sof + self.loop_gap_ns)

    def close(self) -> None:
        """Stop the camera (the file is open only while it runs)."""
        self.stop()


@hookimpl
def plugin_host_add_cameras(config):
    """One :class:`ReplayCamera` per configured camera (see the module docstring)."""
    plugin = (config or {}).get("name", "replay")
    publisher = publisher_of(config)
    return [ReplayCamera(**settings, publisher=publisher)
            for settings in camera_configs(plugin, (config or {}).get("config"), SCHEMA)]
