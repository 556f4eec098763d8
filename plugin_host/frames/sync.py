"""Matching frames of several cameras by their start-of-frame timestamps.

A model that looks at several cameras (openpilot's road and wide road cameras) must see frames
taken at the same moment. :class:`FrameSync` receives from one subscription per camera and
returns a group (one lease per camera) only when every frame's ``timestamp_sof`` lies within
``max_skew_ms`` of the others (openpilot's modeld allows 10 ms). A frame that can no longer
match — it is more than ``max_skew_ms`` older than another camera's current frame, and later
frames only get newer — is released, counted as dropped (``out_of_sync``) in its pool and in
:attr:`FrameSync.unmatched`, and the next frame of that camera is taken.

Use conflating subscriptions for a live model (each camera's newest frame) or queued ones to
process every frame. Frames not yet matched when ``recv`` times out stay held for the next call;
:meth:`FrameSync.close` releases them. With a conflating subscription the newest frame wins
there too: a held frame is replaced by a newer one of its camera as soon as one is waiting
(released, counted ``conflated`` in its pool and in :attr:`FrameSync.superseded`), so a camera
whose partner stalls never has a frame held for longer than about a frame period.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Mapping, Sequence

from ..errors import FrameOverwrittenError, PoolClosedError
from .pool import Lease
from .queue import Subscription

__all__ = ["FrameSync", "DEFAULT_MAX_SKEW_MS"]

#: openpilot's limit for frames of two cameras to count as one moment.
DEFAULT_MAX_SKEW_MS = 10.0


class FrameSync:
    """Groups frames of several cameras by ``timestamp_sof`` (see the module docstring).

    ``subscriptions``: one per camera, as ``{camera name: subscription}`` or a sequence (keyed
    by the subscription's name). ``recv(timeout)`` returns ``{camera: lease}`` (the caller
    releases every lease) or ``None`` on timeout.
    """

    def __init__(self, subscriptions: Mapping[str, Subscription] | Sequence[Subscription], *,
                 max_skew_ms: float = DEFAULT_MAX_SKEW_MS) -> None:
        if isinstance(subscriptions, Mapping):
            self.subscriptions = dict(subscriptions)
        else:
            self.subscriptions = {s.name: s for s in subscriptions}
        if len(self.subscriptions) < 1:
            raise ValueError("FrameSync needs at least one subscription")
        if not max_skew_ms >= 0:
            raise ValueError(f"max_skew_ms must be >= 0, got {max_skew_ms!r}")
        self.max_skew_ns = int(max_skew_ms * 1e6)
        self.matched = 0
        self.unmatched: Counter[str] = Counter()
        self.superseded: Counter[str] = Counter()
        self._heads: dict[str, Lease] = {}

    def recv(self, timeout: float | None = None) -> dict[str, Lease] | None:
        """The next group of frames within ``max_skew_ms`` of each other, or None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for name, sub in self.subscriptions.items():
                held = self._heads.get(name)
                if held is not None and getattr(sub, "conflate", False):
                    newer = sub.recv(0)
                    if newer is not None:  # the newest frame wins (see the module docstring)
                        self.superseded[name] += 1
                        self._heads[name] = newer
                        _drop(held, "conflated")
                while name not in self._heads:
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    lease = sub.recv(remaining)
                    if lease is None:
                        return None
                    self._heads[name] = lease
            newest = max(lease.frame.timestamp_sof for lease in self._heads.values())
            stale = [name for name, lease in self._heads.items()
                     if newest - lease.frame.timestamp_sof > self.max_skew_ns]
            if not stale:
                group, self._heads = self._heads, {}
                self.matched += 1
                return group
            for name in stale:
                self.unmatched[name] += 1
                _drop(self._heads.pop(name))

    def stats(self) -> dict:
        return {"matched": self.matched, "unmatched": dict(self.unmatched),
                "superseded": dict(self.superseded),
                "max_skew_ms": self.max_skew_ns / 1e6, "held": sorted(self._heads)}

    def close(self) -> None:
        """Release the frames held while waiting for their partners."""
        heads, self._heads = self._heads, {}
        for lease in heads.values():
            _drop(lease, None)

    def __enter__(self) -> "FrameSync":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop(lease: Lease, reason: str | None = "out_of_sync") -> None:
    try:
        lease.release() if reason is None else lease.drop(reason)
    except (FrameOverwrittenError, PoolClosedError):
        pass
