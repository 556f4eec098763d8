"""One camera's model stream: its own sandboxed executor, state contract, deadline and
statistics.

With several cameras the daemon runs one :class:`CameraStream` per camera. Each stream owns a
:class:`~plugin_host.sandbox.SandboxedExecutor` (its own worker, so its own recurrent state),
a :class:`~plugin_host.daemon.feed.ModelFeed` (which input is the image, checked at load),
a :class:`StateContract` (resets on a gap, a restart or time going backwards of *this*
camera) and its own :class:`FrameStats`. The daemon hands a stream one frame of each matched
set (:meth:`CameraStream.run`); a worker that dies, a frame overwritten while converted, a
reset, touch only that stream.

The frame itself never crosses to the worker: the camera's pool is attached to the worker
(read-only), and the worker makes the image input from the frame where it lies
(``SandboxedExecutor.feed_frames``; its previous frame for the two-frame stack is kept there
and forgotten on every reset). Only the frame's slot, generation, id and timestamps are sent.

A model that takes several cameras' frames in one run (an artifact's ``camera_inputs``) is run
by :class:`~plugin_host.daemon.joint.JointRun` from the steps of :meth:`CameraStream.run`
(``arrive``, ``reset``, ``input_buffers``, ``record``) on every camera's stream; there the
streams share one executor.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from ..errors import FrameOverwrittenError, SandboxError, WorkerDiedError
from .contract import Deadline, StateContract
from .feed import ModelFeed
from .metrics import AGE_BUCKETS_S, LATENCY_BUCKETS_S, Histogram
from .stats import FrameReport, FrameStats

__all__ = ["CameraStream", "WORKER_RESTART"]

#: the reset reason counted when a stream's worker died and was restarted
WORKER_RESTART = "worker restart"


class CameraStream:
    """The model run on the frames of one camera (see the module docstring).

    ``emit(kind, **detail)`` receives the stream's log events (each names the camera);
    ``lock`` guards what a metrics scrape reads.
    """

    def __init__(self, camera: Any, executor: Any, feed: ModelFeed, *,
                 emit: Callable[..., None], lock: threading.Lock) -> None:
        self.camera = camera
        self.name: str = camera.name
        self.executor = executor
        self._emit = emit
        self._lock = lock
        manifest = executor.manifest
        self.feed = feed
        self.contract = StateContract(manifest.reset, on_event=self._contract_event)
        self.deadline = Deadline(manifest.latency_ms)
        rate = float(getattr(camera, "rate", 20.0) or 20.0)
        self.stats = FrameStats(1.0 / rate)
        self.model_hist = Histogram(LATENCY_BUCKETS_S)
        self.age_hist = Histogram(AGE_BUCKETS_S)
        self.resets: collections.Counter[str] = collections.Counter()
        #: frames of this camera dropped because no frame of another camera matched them
        self.unmatched = 0
        self.subscription: Any = None
        self.last_report: FrameReport | None = None
        self._buffers: dict[str, Any] | None = None
        self._restarts_seen = executor.restarts
        self._pool_id: str | None = None
        #: (executor, pool id) the pool and the frame feed were last set up for
        self._attached: tuple[Any, str] | None = None
        #: times the camera went silent for the stall time (:meth:`watch`)
        self.stalls = 0
        #: while stalled: when its last frame came (monotonic s); else None
        self.stalled_since: float | None = None
        self._heard: tuple[Any, int, float] | None = None  # (pool, produced, when)

    # -- per frame --------------------------------------------------------------------------------

    def run(self, lease: Any) -> tuple[FrameReport, dict[str, Any]] | None:
        """Run the model on ``lease``'s frame (released here whatever happens); returns the
        frame's report and the outputs, or None when the frame did not run."""
        ex = self.executor
        frame = lease.frame
        try:
            dropped, reason = self.arrive(frame)
            if reason is not None:
                self.reset(reason)  # the worker forgets the previous frame too
            buffers = self.input_buffers()
            if self._attached != (ex, frame.pool_id):  # a new executor or a camera restart
                ex.attach_pool(self.camera.pool)
                ex.feed_frames(self.feed.image, self.feed.formats[self.feed.image])
                self._attached = (ex, frame.pool_id)
            start = time.perf_counter()
            outputs = ex.run(buffers, frame=frame)  # converted in the worker, then checked
            took = time.perf_counter() - start
        except WorkerDiedError as exc:
            self.stats.not_run += 1
            self.worker_died(exc, frame)
            return None
        except FrameOverwrittenError as exc:
            self.stats.not_run += 1
            self.frame_overwritten(exc, frame)
            return None
        finally:
            if not lease.released:
                try:
                    lease.release()
                except FrameOverwrittenError:
                    pass
        return self.record(frame, dropped, took), outputs

    # -- the steps of a run (also taken by a joint run: ``joint.py``) ----------------------------

    def arrive(self, frame: Any) -> tuple[int, str | None]:
        """A frame of this camera arrived: the frames dropped before it, and the contract's
        reset reason (None: none)."""
        if frame.pool_id != self._pool_id:
            self._pool_id = frame.pool_id
            self.stats.restart()
        return self.stats.gap(frame.frame_id), self.contract.check(frame)

    def reset(self, reason: str) -> None:
        """Reset the recurrent state for ``reason``, counted."""
        self.executor.reset(reason)
        with self._lock:
            self.resets[reason] += 1

    def record(self, frame: Any, dropped: int, took: float, *, deadline: bool = True
               ) -> FrameReport:
        """The frame ran in ``took`` seconds: statistics, histograms, the deadline (unless
        ``deadline`` is False: a joint run's is counted once) and the frame's report."""
        age = max(0.0, (time.monotonic_ns() - frame.timestamp_eof) / 1e9)
        stats = self.stats
        with self._lock:
            miss = self.deadline.observe(took) if deadline else False
            stats.ran(took, age)
            self.model_hist.observe(took)
            self.age_hist.observe(age)
        report = FrameReport(frame.frame_id, dropped, stats.frame_drop_perc, took * 1e3,
                             age * 1e3, miss)
        self.last_report = report
        if miss:
            self._emit("deadline_miss", camera=self.name, frame_id=frame.frame_id,
                       model_execution_ms=round(took * 1e3, 3),
                       latency_ms=self.deadline.latency_ms, misses=self.deadline.misses)
        return report

    def frame_overwritten(self, exc: FrameOverwrittenError, frame: Any) -> None:
        self._emit("frame_overwritten", camera=self.name, frame_id=frame.frame_id,
                   error=str(exc))

    def input_buffers(self) -> dict[str, Any]:
        """The shared input buffers, taken again after a worker restart (the old ones belonged
        to the dead worker's region)."""
        ex = self.executor
        if self._buffers is None or ex.restarts != self._restarts_seen:
            self._buffers = ex.input_buffers(names=self.feed.buffered)
            self._restarts_seen = ex.restarts
            self.feed.prepare(self._buffers)
        return self._buffers

    def worker_died(self, exc: SandboxError, frame: Any) -> None:
        with self._lock:
            self.resets[WORKER_RESTART] += 1
        self.contract.forget()
        self._buffers = None
        self._emit("worker_died", camera=self.name, frame_id=frame.frame_id, error=str(exc),
                   restarts=self.executor.restarts, reset=WORKER_RESTART)

    def _contract_event(self, kind: str, detail: dict) -> None:
        self._emit(kind, **detail)

    # -- artifact swap ----------------------------------------------------------------------------

    def switch(self, ex: Any, feed: ModelFeed, old_name: str, new_name: str) -> Any:
        """``ex`` takes over (between two frames); returns the old executor (to close). The
        new contract continues after the old one's last frame and resets before the next."""
        old = self.executor
        manifest = ex.manifest
        contract = StateContract(manifest.reset, on_event=self._contract_event)
        contract.carry_from(self.contract)
        contract.artifact_swapped(old_name, new_name)
        with self._lock:
            self.executor = ex
            self.feed = feed
            self.contract = contract
            self.deadline.latency_ms = float(manifest.latency_ms)
            self._buffers = None
            self._restarts_seen = ex.restarts
        return old

    # -- the camera's pulse ---------------------------------------------------------------------

    def watch(self, now: float, stall_s: float) -> None:
        """Note whether the camera produced a frame since the last look (its pool's
        ``produced`` counter; a restarted camera has a new pool); after ``stall_s`` seconds
        without one, a ``camera_stalled`` event (once), and ``camera_resumed`` when frames
        come again. Called by the daemon's frame loop, at least every ``recv_timeout``."""
        pool = self.camera.pool
        produced = pool.produced if pool is not None else 0
        heard = self._heard
        if heard is None or heard[0] is not pool or heard[1] != produced:
            if self.stalled_since is not None:
                silent = now - self.stalled_since
                with self._lock:
                    self.stalled_since = None
                self._emit("camera_resumed", camera=self.name, silent_ms=round(silent * 1e3),
                           frames_produced=produced)
            self._heard = (pool, produced, now)
        elif self.stalled_since is None and now - heard[2] >= stall_s:
            with self._lock:
                self.stalled_since = heard[2]
                self.stalls += 1
            self._emit("camera_stalled", camera=self.name,
                       silent_ms=round((now - heard[2]) * 1e3), stall_ms=round(stall_s * 1e3),
                       frames_produced=produced)

    # -- reporting --------------------------------------------------------------------------------

    @property
    def pool_stats(self) -> dict[str, Any]:
        pool = self.camera.pool
        return pool.stats() if pool is not None else {}

    def summary(self) -> dict[str, Any]:
        """This camera's part of the daemon's summary."""
        pool = self.pool_stats
        return {**self.stats.summary(), "unmatched": self.unmatched,
                "deadline_misses": self.deadline.misses,
                "resets": sum(self.resets.values()), "resets_by_reason": dict(self.resets),
                "worker_restarts": self.executor.restarts,
                "stalls": self.stalls, "stalled": self.stalled_since is not None,
                "worker_pid": getattr(self.executor, "last_pid", self.executor.pid),
                "camera_dropped": dict(pool.get("dropped", {})),
                "camera_produced": pool.get("produced"),
                "leases_outstanding": pool.get("leases_outstanding")}
