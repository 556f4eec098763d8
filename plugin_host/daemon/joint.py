"""One model run on the frames of several cameras together (an artifact's ``camera_inputs``).

openpilot's vision model takes two images in one call: ``input_imgs`` from the road camera
and ``big_input_imgs`` from the wide one. With ``camera_inputs = {input_imgs = "road",
big_input_imgs = "wide"}`` in its ``[[artifact]]``, the daemon runs such a model once per
matched set of frames, in one sandbox worker with one recurrent state.

Each camera keeps its :class:`~plugin_host.daemon.stream.CameraStream` for what is the
camera's: its frame gaps and drops, its reset conditions (a gap, a restart or time going
backwards of any camera resets the one state), its stalls and frame ages. What is the run's
is the first camera's stream: the deadline, the resets and the worker's restarts.

The images are made by the host: each frame is converted from the camera's pool (read-only
views, under the lease) straight into the model's input in the worker's shared input region,
which the worker reads in place, so the conversion is the only copy of the frame, as when the
worker makes the one image itself. A two-frame stack's previous half is shifted first (a
colour image of ``image_inputs`` is made of the frame alone); the slot's generation is checked
after the conversion, so a frame overwritten meanwhile is refused, never half-used (the set
does not run, and every image starts again from its next frame stacked with itself). A reset
of the state, for any camera's reason, and new input buffers (a worker restart) forget every
previous frame too.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from ..errors import FrameOverwrittenError, WorkerDiedError
from ..frames.convert import FrameStacker
from ..frames.rgb import RgbImage
from .stats import FrameReport
from .stream import CameraStream

__all__ = ["JointRun"]


class JointRun:
    """The model run on one matched set of several cameras' frames (see the module
    docstring). ``streams`` are the cameras' streams, in ``camera_inputs``' order, sharing
    one executor and one :class:`~plugin_host.daemon.feed.ModelFeed`."""

    def __init__(self, streams: Sequence[CameraStream], emit: Callable[..., None]) -> None:
        self.streams = list(streams)
        self._emit = emit
        #: image input -> its stacker, bound to the input buffers they were made for
        self._stackers: dict[str, FrameStacker | RgbImage] = {}
        self._bound_to: Any = None

    def run(self, group: dict[str, Any]
            ) -> tuple[list[FrameReport], dict[str, Any]] | None:
        """Run the model on the set's frames (``group``: camera name -> lease; each lease is
        taken out and released here whatever happens); returns each camera's frame report
        and the outputs, or None when the set did not run."""
        streams = self.streams
        first = streams[0]
        ex = first.executor
        leases = [group.pop(s.name) for s in streams]
        frames = [lease.frame for lease in leases]
        try:
            arrived = [s.arrive(f) for s, f in zip(streams, frames)]
            reason = next((r for _, r in arrived if r is not None), None)
            if reason is not None:
                first.reset(reason)
            stackers = self._stackers_for(first.input_buffers())
            if reason is not None:
                for stacker in stackers.values():
                    stacker.reset()
            inputs = first.feed.images
            for stream, lease in zip(streams, leases):
                planes = lease.planes()
                name = next(n for n, camera in inputs.items() if camera == stream.name)
                stackers[name].push_planes(planes, lease.frame.layout.format)
                lease.check()  # after reading: the bytes converted are the frame announced
            for lease in leases:  # the images are made: the frames can go back
                _release(lease)
            start = time.perf_counter()
            outputs = ex.run(first.input_buffers())
            took = time.perf_counter() - start
        except WorkerDiedError as exc:
            for stream in streams:
                stream.stats.not_run += 1
            first.worker_died(exc, frames[0])
            for stream in streams[1:]:  # (the images start again: the buffers are new)
                stream.contract.forget()
            return None
        except FrameOverwrittenError as exc:
            for stream in streams:
                stream.stats.not_run += 1
            for stacker in self._stackers.values():
                stacker.reset()
            stream, frame = next(((s, f) for s, f, lease in zip(streams, frames, leases)
                                  if _overwritten(lease)), (first, frames[0]))
            stream.frame_overwritten(exc, frame)
            return None
        finally:
            for lease in leases:
                _release(lease)
        reports = [s.record(f, dropped, took, deadline=s is first)
                   for s, f, (dropped, _) in zip(streams, frames, arrived)]
        return reports, outputs

    def _stackers_for(self, buffers: dict[str, Any]) -> dict[str, FrameStacker | RgbImage]:
        """The image stackers writing into ``buffers`` (new ones, forgetting every previous
        frame, when the buffers are new)."""
        if buffers is not self._bound_to:
            self._stackers = {}
            feed = self.streams[0].feed
            for name in feed.images:
                out, fmt = buffers[name], feed.formats[name]
                self._stackers[name] = (
                    FrameStacker(width=2 * out.shape[3], height=2 * out.shape[2], out=out)
                    if fmt is None else RgbImage(out, feed.layouts[name], fmt))
            self._bound_to = buffers
        return self._stackers


def _overwritten(lease: Any) -> bool:
    if lease.released:
        return False
    try:
        lease.check()
    except FrameOverwrittenError:
        return True
    return False


def _release(lease: Any) -> None:
    """Give the frame back (once); one overwritten after it was read is no news here."""
    if not lease.released:
        try:
            lease.release()
        except FrameOverwrittenError:
            pass
