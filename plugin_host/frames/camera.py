"""The camera interface, and the threaded base the built-in cameras share.

A camera (what ``plugin_host_add_cameras`` returns) is a frame source that owns its buffer
pool. The host uses it only through the :class:`Camera` protocol:

- ``name`` (also ``id``): unique among the host's cameras; ``layout``: its frames' format,
  size, strides and plane offsets;
- ``start()``: allocate the pool (once per start, with a new random pool id, so consumers see a
  restart) and begin producing; ``stop(timeout)``: stop producing, release what the
  subscriptions still queue, close the pool and return the leases still outstanding (each also
  logged); ``pool``: the current (or last) :class:`~plugin_host.frames.pool.FramePool`, whose
  ``fd`` and ``size`` the sandbox worker maps read-only;
- ``subscribe(name, conflate=False, maxlen=4)``: a
  :class:`~plugin_host.frames.queue.Subscription` whose ``recv(timeout)`` returns a
  :class:`~plugin_host.frames.pool.Lease` or ``None``; subscriptions outlive restarts;
- ``stats()``: counters (frames produced, delivered, dropped by reason, leases outstanding,
  leaks, overwrites) of the current pool, plus the subscriptions' own.

:class:`ThreadedCamera` implements all of that around one producer thread; a subclass writes
:meth:`ThreadedCamera._produce`, which fills buffers from ``self.pool.begin_frame()`` and hands
each committed frame to :meth:`ThreadedCamera._publish`.

If the camera plugin holds the ``camera.publish`` capability, each start and stop is announced
on the host's ``camera`` topic (camera, pool id, layout; on stop the statistics): one audited
use per start or stop. Frames themselves flow through subscriptions, never through the topic
(whose every use is written to the audit log).
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any, Protocol, runtime_checkable

from ..errors import CameraError, PluginHostError
from .frame import Frame, FrameLayout
from .pool import FramePool, LeakReport
from .queue import Subscription

__all__ = ["Camera", "ThreadedCamera"]

log = logging.getLogger("plugin_host.frames")


@runtime_checkable
class Camera(Protocol):
    """What the host requires of a camera object (see the module docstring)."""

    name: str
    layout: FrameLayout

    @property
    def id(self) -> str: ...

    @property
    def pool(self) -> FramePool | None: ...

    def start(self) -> None: ...

    def stop(self, timeout: float = 5.0) -> list[LeakReport]: ...

    def subscribe(self, name: str | None = None, *, conflate: bool = False,
                  maxlen: int = 4) -> Subscription: ...

    def stats(self) -> dict[str, Any]: ...


class ThreadedCamera:
    """A camera producing on its own thread into its own pool (see the module docstring).

    ``buffers``: buffers in the pool; ``leak_age_s`` / ``leak_frames``: when a lease counts as
    leaked; ``publisher``: the plugin's ``camera.publish`` capability, or None.
    """

    def __init__(self, name: str, layout: FrameLayout, *, buffers: int = 8,
                 leak_age_s: float | None = 2.0, leak_frames: int | None = None,
                 publisher: Any = None) -> None:
        if type(name) is not str or not name:
            raise CameraError(f"a camera needs a non-empty str name, got {name!r}", camera=None)
        self.name = name
        self.layout = layout
        self.buffers = buffers
        self.leak_age_s, self.leak_frames = leak_age_s, leak_frames
        self.publisher = publisher
        self.starts = 0
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self._pool: FramePool | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._subs: list[Subscription] = []
        self._subs_lock = threading.Lock()
        self._sub_ids = itertools.count()
        self._lifecycle = threading.Lock()

    @property
    def id(self) -> str:
        return self.name

    @property
    def pool(self) -> FramePool | None:
        return self._pool

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Allocate a new pool (new pool id) and start the producer thread."""
        with self._lifecycle:
            if self._thread is not None:
                raise CameraError(f"camera {self.name!r} is already started", camera=self.name)
            self._prepare()
            try:
                self._pool = FramePool(self.layout, self.buffers, camera=self.name,
                                       leak_age_s=self.leak_age_s,
                                       leak_frames=self.leak_frames)
            except BaseException:
                self._cleanup()
                raise
            self.starts += 1
            self.error = None
            self.finished.clear()
            self._stop.clear()
            self._thread = threading.Thread(target=self._main, name=f"camera-{self.name}",
                                            daemon=True)
            self._thread.start()
            self._announce({"event": "start", "camera": self.name, "pool_id": self._pool.id,
                            "layout": self.layout.to_dict(), "buffers": self.buffers})

    def stop(self, timeout: float = 5.0) -> list[LeakReport]:
        """Stop producing, release queued frames, close the pool. Returns (and logs) the
        leases still outstanding. Stopping a stopped camera does nothing."""
        with self._lifecycle:
            thread, self._thread = self._thread, None
            if thread is None:
                return []
            self._stop.set()
            thread.join(timeout)
            if thread.is_alive():
                log.error("camera %r: the producer thread did not stop within %.1f s",
                          self.name, timeout)
            with self._subs_lock:
                subs = list(self._subs)
            for sub in subs:
                sub.flush("stopped")
            pool = self._pool
            assert pool is not None
            outstanding = pool.close()
            self._announce({"event": "stop", "camera": self.name, "pool_id": pool.id,
                            "stats": pool.stats()})
            self._cleanup()
            return outstanding

    def _main(self) -> None:
        try:
            self._produce(self._stop)
        except PluginHostError as exc:
            self.error = exc
            log.error("camera %r stopped producing: %s", self.name, exc)
        except Exception as exc:  # a bug in the producer: keep the traceback in the log
            self.error = exc
            log.exception("camera %r failed", self.name)
        finally:
            self.finished.set()

    def _announce(self, data: dict[str, Any]) -> None:
        if self.publisher is None:
            return
        try:
            self.publisher.publish(data)
        except PluginHostError as exc:
            log.warning("camera %r: could not announce %s: %s", self.name, data["event"], exc)

    # -- for subclasses -------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Called by ``start`` before the pool is allocated (open files, check config)."""

    def _cleanup(self) -> None:
        """Called by ``stop`` after the pool is closed."""

    def _produce(self, stop: threading.Event) -> None:
        """Produce frames until ``stop`` is set (or the source ends); runs on the thread."""
        raise NotImplementedError

    def _publish(self, frame: Frame) -> None:
        """Hand ``frame`` to every subscription, each as its own lease."""
        pool = self._pool
        assert pool is not None
        with self._subs_lock:
            subs = list(self._subs)
        for sub in subs:
            sub._deliver(pool.lease(frame, holder=sub.name))

    # -- consumers ------------------------------------------------------------------------------

    def subscribe(self, name: str | None = None, *, conflate: bool = False,
                  maxlen: int = 4) -> Subscription:
        """A new subscription to this camera's frames (valid across restarts)."""
        if name is None:
            name = f"{self.name}/sub{next(self._sub_ids)}"
        sub = Subscription(name, conflate=conflate, maxlen=maxlen, on_close=self._unsubscribe)
        with self._subs_lock:
            self._subs.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._subs_lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def stats(self) -> dict[str, Any]:
        with self._subs_lock:
            subs = list(self._subs)
        return {"camera": self.name, "running": self.running, "starts": self.starts,
                "layout": self.layout.to_dict(),
                "error": None if self.error is None else str(self.error),
                "pool": None if self._pool is None else self._pool.stats(),
                "subscriptions": [s.stats() for s in subs]}

    def __enter__(self) -> "ThreadedCamera":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name!r} {self.layout.describe()}, {state}>"
