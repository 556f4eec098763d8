"""The artifact's contract, enforced per frame: when to reset the recurrent state, and the
deadline every call must meet.

The manifest declares (``state_contract.reset``, ``latency_ms``; see README "Artifacts")::

    frame_gap_ms         reset when consecutive frames' timestamp_sof lie further apart
                         (frames were dropped: the state no longer follows the scene); None: off
    camera_restart       reset when the frame's pool id changed (the camera restarted)
    timestamp_backwards  reset when timestamp_sof went backwards (or frame_id did, same pool)
    artifact_swap        reset when another artifact takes over (the daemon calls
                         :meth:`StateContract.artifact_swapped`)
    explicit             reset on request (:meth:`StateContract.request_reset`)
    latency_ms           the declared worst case of one call; a call that takes longer is a
                         deadline miss (counted by :class:`Deadline`, never a reset)

:class:`StateContract` only decides; the caller performs the reset on the executor. It works
on frame metadata alone (camera, frame_id, timestamp_sof, pool_id), so it is tested without a
camera. A condition that occurs while the artifact disables it is counted under ``ignored``
and logged, never silently dropped. The first frame never resets (the state starts zeroed).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["StateContract", "Deadline", "FrameMeta", "FRAME_GAP", "CAMERA_RESTART",
           "TIMESTAMP_BACKWARDS", "ARTIFACT_SWAP", "EXPLICIT"]

#: reset reasons (the executor's ``resets_by_reason`` keys)
FRAME_GAP = "frame gap"
CAMERA_RESTART = "camera restart"
TIMESTAMP_BACKWARDS = "timestamp backwards"
ARTIFACT_SWAP = "artifact swap"
EXPLICIT = "explicit"


@dataclass(frozen=True)
class FrameMeta:
    """What the contract reads of a frame (a :class:`~plugin_host.frames.Frame` has it all)."""

    camera: str
    frame_id: int
    timestamp_sof: int
    pool_id: str


class StateContract:
    """Decides, frame by frame, whether the recurrent state must be reset.

    ``reset`` is the manifest's :class:`~abi.artifact.manifest.ResetConditions`; ``on_event``
    (optional) is called as ``on_event(kind, detail)`` for every reset and ignored condition.
    """

    def __init__(self, reset: Any, *, on_event: Callable[[str, dict], None] | None = None
                 ) -> None:
        self.conditions = reset
        self.frame_gap_ms = reset.frame_gap_ms
        self._enabled = {FRAME_GAP: reset.frame_gap_ms is not None,
                         CAMERA_RESTART: bool(reset.camera_restart),
                         TIMESTAMP_BACKWARDS: bool(reset.timestamp_backwards),
                         ARTIFACT_SWAP: bool(reset.artifact_swap),
                         EXPLICIT: bool(reset.explicit)}
        self._on_event = on_event
        self._last: FrameMeta | None = None
        self._pending: list[tuple[str, dict]] = []
        #: resets decided, by reason
        self.resets: collections.Counter[str] = collections.Counter()
        #: conditions seen while the artifact disables them, by reason
        self.ignored: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        return sum(self.resets.values())

    # -- requests from outside the frame stream ----------------------------------------------

    def request_reset(self, why: str = "requested") -> None:
        """An explicit reset, applied before the next frame."""
        self._pending.append((EXPLICIT, {"why": why}))

    def artifact_swapped(self, old: str, new: str) -> None:
        """Another artifact takes over; its state starts from zero before the next frame."""
        self._pending.append((ARTIFACT_SWAP, {"old": old, "new": new}))

    # -- per frame ------------------------------------------------------------------------------

    def check(self, frame: Any) -> str | None:
        """The reset reason for ``frame`` (applied before it runs), or None.

        Several conditions at once give one reset, named by the first in the order: pending
        requests, camera restart, timestamp backwards, frame gap.
        """
        meta = FrameMeta(frame.camera, int(frame.frame_id), int(frame.timestamp_sof),
                         str(frame.pool_id))
        last, self._last = self._last, meta
        found: list[tuple[str, dict]] = list(self._pending)
        self._pending.clear()
        if last is not None and last.camera == meta.camera:
            if meta.pool_id != last.pool_id:
                found.append((CAMERA_RESTART, {"old_pool": last.pool_id,
                                               "new_pool": meta.pool_id}))
            elif (meta.timestamp_sof < last.timestamp_sof or meta.frame_id <= last.frame_id):
                found.append((TIMESTAMP_BACKWARDS, {
                    "previous_frame_id": last.frame_id, "frame_id": meta.frame_id,
                    "back_ms": (last.timestamp_sof - meta.timestamp_sof) / 1e6}))
            else:
                gap_ms = (meta.timestamp_sof - last.timestamp_sof) / 1e6
                limit = self.frame_gap_ms
                if limit is not None and gap_ms > limit:
                    found.append((FRAME_GAP, {"gap_ms": round(gap_ms, 3), "limit_ms": limit,
                                              "previous_frame_id": last.frame_id}))
        elif last is not None:  # another camera: its first frame is a restart of the stream
            found.append((CAMERA_RESTART, {"old_camera": last.camera,
                                           "new_camera": meta.camera}))
        reason = None
        for kind, detail in found:
            detail = {"frame_id": meta.frame_id, "camera": meta.camera, **detail}
            if self._enabled[kind]:
                if reason is None:
                    reason = kind
                    self.resets[kind] += 1
                    self._emit("reset", {"reason": kind, **detail})
                else:
                    self._emit("reset_merged", {"reason": kind, "into": reason, **detail})
            else:
                self.ignored[kind] += 1
                self._emit("reset_disabled", {"reason": kind, **detail})
        return reason

    def carry_from(self, other: "StateContract") -> None:
        """Continue after ``other``'s last frame (a swapped-in artifact's contract: gaps and
        restarts are still detected across the swap)."""
        self._last = other._last
        self._pending.extend(other._pending)
        other._pending.clear()

    def forget(self) -> None:
        """Drop the previous frame (the state was reset for another reason, e.g. a worker
        restart): the next frame is compared with nothing."""
        self._last = None

    def _emit(self, kind: str, detail: dict) -> None:
        if self._on_event is not None:
            self._on_event(kind, detail)


class Deadline:
    """Counts calls slower than the artifact's declared worst case (``latency_ms``)."""

    def __init__(self, latency_ms: float) -> None:
        self.latency_ms = float(latency_ms)
        self.misses = 0
        self.worst_ms = 0.0

    def observe(self, seconds: float) -> bool:
        """Record one call's duration; True when it missed the deadline."""
        ms = seconds * 1e3
        self.worst_ms = max(self.worst_ms, ms)
        if ms > self.latency_ms:
            self.misses += 1
            return True
        return False
