"""Subscriptions: how a consumer receives a camera's frames, as leases, newest-wins if asked.

A camera hands every frame it produces to each of its subscriptions as a new
:class:`~plugin_host.frames.pool.Lease`. A subscription queues them until the consumer calls
:meth:`Subscription.recv`, which returns the next lease (the consumer must release it) or
``None`` on timeout, as openpilot's ``VisionIpcClient.recv``.

- ``conflate=True``: at most one frame waits; a newer frame replaces it, and the replaced
  one is released at once and counted as dropped (``conflated``). ``recv`` always returns the
  newest frame. This is what a model that must run on the latest frame wants.
- otherwise up to ``maxlen`` frames wait, oldest first; when the queue is full the oldest is
  released and counted as dropped (``queue_full``), so a slow consumer never blocks the camera
  and never holds more than ``maxlen`` buffers through its queue.

A queued frame holds its buffer (the producer does not refill a leased slot). A consumer ties
up at most ``maxlen`` queued buffers plus those it has received and not released (a conflating
one that releases each frame before the next ``recv``: two), and the producer needs one free
buffer to fill; size the pool for all subscriptions together.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import Any, Callable

from ..errors import FrameOverwrittenError, PoolClosedError
from .pool import Lease

__all__ = ["Subscription"]


class Subscription:
    """A queue of leases for one consumer of one camera (see the module docstring)."""

    def __init__(self, name: str, *, conflate: bool = False, maxlen: int = 4,
                 on_close: Callable[["Subscription"], None] | None = None) -> None:
        if type(maxlen) is not int or maxlen < 1:
            raise ValueError(f"a subscription queue needs maxlen >= 1, got {maxlen!r}")
        self.name = name
        self.conflate = conflate
        self.maxlen = 1 if conflate else maxlen
        self.received = 0
        self.dropped: Counter[str] = Counter()
        self.closed = False
        self._queue: deque[Lease] = deque()
        self._ready = threading.Condition()
        self._on_close = on_close

    def _deliver(self, lease: Lease) -> None:
        """Queue ``lease`` (called by the camera's producer)."""
        stale = None
        with self._ready:
            if self.closed:
                stale, reason = lease, "closed"
            else:
                if len(self._queue) >= self.maxlen:
                    stale = self._queue.popleft()
                    reason = "conflated" if self.conflate else "queue_full"
                self._queue.append(lease)
                self._ready.notify()
        if stale is not None:
            self.dropped[reason] += 1
            _drop(stale, reason)

    def recv(self, timeout: float | None = None) -> Lease | None:
        """The next frame's lease (the newest with ``conflate``), waiting up to ``timeout``
        seconds (None: forever, 0: not at all); ``None`` on timeout or once closed."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._queue or self.closed, timeout):
                return None
            if not self._queue:
                return None
            lease = self._queue.popleft()
            self.received += 1
        lease.pool.count_delivered()
        return lease

    def pending(self) -> int:
        """Frames waiting in the queue."""
        with self._ready:
            return len(self._queue)

    def flush(self, reason: str | None = None) -> int:
        """Release every queued lease (counted as dropped for ``reason`` when given)."""
        with self._ready:
            stale = list(self._queue)
            self._queue.clear()
        for lease in stale:
            if reason is None:
                _drop(lease, None)
            else:
                self.dropped[reason] += 1
                _drop(lease, reason)
        return len(stale)

    def close(self) -> None:
        """Stop receiving: release what is queued, wake a waiting ``recv`` (it returns None)."""
        with self._ready:
            if self.closed:
                return
            self.closed = True
            self._ready.notify_all()
        self.flush()
        if self._on_close is not None:
            self._on_close(self)

    def stats(self) -> dict[str, Any]:
        with self._ready:
            return {"name": self.name, "conflate": self.conflate, "maxlen": self.maxlen,
                    "received": self.received, "pending": len(self._queue),
                    "dropped": dict(self.dropped)}

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<Subscription {self.name!r}{' conflate' if self.conflate else ''}: "
                f"{len(self._queue)} pending, received {self.received}>")


def _drop(lease: Lease, reason: str | None) -> None:
    """Release a lease nobody will receive; an overwrite found now was counted by the pool."""
    try:
        if reason is None:
            lease.release()
        else:
            lease.drop(reason)
    except (FrameOverwrittenError, PoolClosedError):
        pass
