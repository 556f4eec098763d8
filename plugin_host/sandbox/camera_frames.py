"""The host side of camera frames in the sandbox: a camera pool's read-only descriptor given to
the worker once, then one frame's metadata per call (no copy of the frame).

:class:`CameraFrames` is part of :class:`~plugin_host.sandbox.client.SandboxedExecutor`: it
uses the executor's lock, its live worker and its request helpers, and keeps the attached pool
(``_pool``: the executor's own duplicate of the descriptor, and the pool id) and the graph
input made from frames (``_frame_input``). The worker's side is ``worker.py`` (the pool's
mapping, :meth:`handoff`'s checks) and ``frame_feed.py`` (an input made from frames).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import FrameError, FrameFormatError, SandboxError
from ..frames.frame import Frame
from ..frames.rgb import RgbFormat, rgb_input_problem
from . import ipc, remote
from .process import Worker, exited

__all__ = ["CameraFrames"]


class CameraFrames:
    """``attach_pool``, ``handoff`` and ``feed_frames`` of a sandboxed executor."""

    def attach_pool(self, pool: Any, pool_id: str | None = None) -> None:
        """Give the worker read-only access to a camera's frame pool, for :meth:`handoff`.

        ``pool`` is a :class:`~plugin_host.frames.FramePool` (its read-only ``fd`` and ``id``
        are used) or a pool descriptor with its ``pool_id``. The descriptor is duplicated
        (the executor owns its copy) and sent to the worker once per pool id, and again to a
        restarted worker before its first hand-off; the worker maps it ``PROT_READ`` (it can
        never write the pool: the memfd is sealed and the descriptor ``O_RDONLY``), checks the
        pool header and that it is the announced pool, and forgets the previous pool's
        mapping. Attaching the pool already attached does nothing.

        A new pool id (a camera restart) does **not** reset the recurrent state here: deciding
        that is the daemon's contract (its reset conditions), not the executor's.
        """
        if isinstance(pool, int) and not isinstance(pool, bool):
            if type(pool_id) is not str or not pool_id:
                raise SandboxError("attach_pool(fd, pool_id): the pool id is a non-empty str")
            fd, pid = pool, pool_id
        else:
            fd, pid = pool.fd, pool.id
            if pool_id is not None and pool_id != pid:
                raise SandboxError(f"pool {pid!r} is not pool {pool_id!r}")
        with self._lock:
            if self._closed:
                raise SandboxError("this SandboxedExecutor is closed")
            if self._pool is not None and self._pool[1] == pid:
                return
            mine = os.dup(fd)  # non-inheritable
            old, self._pool = self._pool, (mine, pid)
            if old is not None:
                os.close(old[0])
            try:
                self._attach(self._live_worker())
            except BaseException:
                if self._pool is not None and self._pool[0] == mine:
                    self._pool = None
                    os.close(mine)
                raise

    def _attach(self, worker: Worker) -> None:
        """Send the attached pool's descriptor to ``worker`` and wait for its mapping."""
        fd, pool_id = self._pool  # type: ignore[misc]
        worker.pool_id = None
        reply = self._request(worker, {"op": "pool", "pool_id": pool_id}, "pool",
                              during="attach_pool", fds=[fd])
        if reply.get("ok") is not True:
            raise remote.rebuild(reply.get("error"), during="attach_pool")
        worker.pool_id = pool_id

    def handoff(self, frame: Any) -> dict[str, int]:
        """Hand one frame of the attached pool to the worker, by its metadata only.

        ``frame`` is a :class:`~plugin_host.frames.Frame` of the attached pool (sent as its
        slot, generation, id and timestamps: the worker takes the rest from the pool's
        header) or a ``Frame.to_dict()`` (sent as is: the worker validates it with
        ``Frame.from_dict``). The worker locates the frame's planes in its read-only mapping
        of the pool (no copy), reads the first and last 16 bytes of each plane's first and
        last rows, then re-checks the slot's generation, and answers ``{"frame_id": ...,
        "crc": ...}`` (CRC-32 of those bytes, planes in layout order). Malformed metadata
        raises ``FrameFormatError``, a frame of another pool or a missing pool ``FrameError``,
        a slot refilled meanwhile ``FrameOverwrittenError``; the worker keeps serving. The
        caller keeps its lease on the frame for the call.
        """
        with self._lock:
            if self._pool is None:
                raise SandboxError("no frame pool attached (attach_pool first)")
            worker = self._worker
            if worker is None or self._closed or exited(worker.pid):
                worker = self._live_worker()
            if worker.pool_id != self._pool[1]:  # a restarted worker, or a new pool
                self._attach(worker)
            if isinstance(frame, Frame):
                reply = self._request_binary(worker, ipc.HANDOFF, self._frame_fields(
                    worker, frame), "handoff", during="handoff")
                frame_id = frame.frame_id
            else:
                try:
                    reply = self._request(worker, {"op": "handoff", "frame": frame}, "handoff",
                                          during="handoff")
                except (OverflowError, TypeError) as exc:  # not msgpack-able: nothing sent
                    raise FrameFormatError(f"frame metadata cannot be sent: {exc}") from None
                frame_id = reply.get("frame_id")
            self._failures = 0
            if reply.get("ok") is not True:
                raise remote.rebuild(reply.get("error"), during="handoff")
            crc = reply.get("crc")
            if type(frame_id) is not int or type(crc) is not int:
                raise self._failed(worker, "handoff", protocol="malformed handoff reply")
            return {"frame_id": frame_id, "crc": crc}

    def _frame_fields(self, worker: Worker, frame: Any) -> tuple[int, int, int, int, int]:
        """What travels of ``frame`` (a Frame of the attached pool); (re-)attaches the pool
        and the frame feed to ``worker`` where it lacks them (a restarted worker)."""
        if self._pool is None:
            raise SandboxError("no frame pool attached (attach_pool first)")
        if not isinstance(frame, Frame):
            raise FrameFormatError(f"expected a Frame, got {type(frame).__name__}")
        if frame.pool_id != self._pool[1]:
            raise FrameError(f"{frame} belongs to pool {frame.pool_id}, not to the attached "
                             f"pool {self._pool[1]} (the camera restarted?)")
        if worker.pool_id != self._pool[1]:
            self._attach(worker)
        if worker.feed != self._frame_input:
            self._send_feed(worker)
        return (frame.slot, frame.generation, frame.frame_id, frame.timestamp_sof,
                frame.timestamp_eof)

    def feed_frames(self, input_name: str | None, image: RgbFormat | None = None) -> None:
        """Make the graph input ``input_name`` in the worker from the frame given to
        :meth:`run` (``None``: stop).

        Without ``image`` the input must be a ``(1, 12, h, w)`` float32 or uint8 two-frame YUV
        stack of a ``2w x 2h`` model frame; with ``image`` (an
        :class:`~plugin_host.frames.RgbFormat`) a float32 or uint8 colour image ``(1, 3, h,
        w)`` or ``(1, h, w, 3)`` (``plugin_host/frames/rgb.py``; from NV12, RGB or GRAY
        frames). The worker converts each frame from its read-only mapping of the attached pool
        (the only copy of the frame), keeps the previous frame's half of a stack for the next
        call (forgotten on every state reset) and refuses a frame whose slot was refilled while
        it was read (``FrameOverwrittenError``). See ``frame_feed.py``.
        """
        from .frame_feed import image_input_problem

        with self._lock:
            if input_name is not None:
                spec = next((s for s in self.graph.inputs if s.name == input_name), None)
                if spec is None or input_name in self._state_specs:
                    raise SandboxError(f"model {self.graph.name!r} has no input "
                                       f"{input_name!r} to make from frames")
                if image is not None and not isinstance(image, RgbFormat):
                    raise SandboxError(f"image must be an RgbFormat or None, got "
                                       f"{type(image).__name__}")
                problem = (image_input_problem(spec) if image is None
                           else rgb_input_problem(spec, image))
                if problem:
                    raise SandboxError(f"model {self.graph.name!r}: {problem}")
                zeros = np.zeros(tuple(spec.shape), spec.dtype)
                zeros.flags.writeable = False
                self._frame_placeholder = {input_name: zeros}
            else:
                self._frame_placeholder = {}
            self._frame_input = input_name
            self._frame_image = image if input_name is not None else None
            self._checked_key = self._fast = None
            self._send_feed(self._live_worker())

    def _send_feed(self, worker: Worker) -> None:
        worker.feed = None
        image = self._frame_image
        self._request(worker, {"op": "feed", "input": self._frame_input,
                               "image": None if image is None else image.to_wire()}, "feed",
                      during="feed_frames")
        worker.feed = self._frame_input
