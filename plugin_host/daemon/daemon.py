"""The host daemon: frames from a camera plugin, the artifact in the sandbox, outputs on the
model topic, the artifact's contract enforced, until told to stop.

Start-up, in order (everything checked before the first frame; any refusal stops here):

1. first use of the demo policy: its key and artifact are created in ``${STATE_DIR}``
   (:mod:`~plugin_host.daemon.demo_setup`);
2. the host-side plugins the policy allows (cameras, sinks, control) are loaded and configured
   with their capabilities (:func:`~plugin_host.plugins.load_plugins`); the sinks are connected
   to the model topic;
3. the artifact: :func:`~plugin_host.policy.load_allowed_artifact` (trust, thresholds, backend,
   audited ops, size caps, name, ``min_version``, rollback, the plugins' checks; not yet
   recorded), then :class:`~plugin_host.sandbox.SandboxedExecutor` verifies the descriptor it
   hands to the worker, which must hold the very manifest checked in step 3 (same SHA-256);
   acceptance (golden cases in the sandbox) when the policy requires it; only then is the
   version recorded as accepted (rollback state);
4. the model's inputs are matched with the camera (:class:`~plugin_host.daemon.feed.ModelFeed`);
5. the camera starts.

Per frame (:meth:`Daemon._frame`): the newest frame's lease (conflated subscription: a slow
model skips frames, never queues them), the contract (:class:`StateContract`: reset before the
frame on a gap, a camera restart, time going backwards, an explicit request), NV12 to the
model input in the shared input region, the generation check (a frame overwritten while
converted is not run), the sandboxed call, the deadline (:class:`Deadline`), the lease
released, the outputs and the frame's statistics published on the ``model`` topic. A worker
that dies costs that frame (the executor restarts it and resets the state; counted as a reset
``worker restart``).

Between frames (:meth:`Daemon._poll_swap`): the artifact hot-swap. When the artifact file
changed (checked every ``swap_poll`` s) or on SIGHUP (:meth:`Daemon.request_swap`), a
long-lived swap thread runs step 3 again on the file with a new worker beside the running
one (the sandbox starts every worker from its own long-lived thread, so the worker's
``PR_SET_PDEATHSIG`` does not depend on which thread asked); once ready, the frame loop switches to it between two frames, records
the version, and the contract resets the state (``artifact swap``) before the next frame; the
old executor is closed on its own thread. A refused file is logged (``swap_refused``) and the
running artifact stays. With ``metrics`` set, :mod:`~plugin_host.daemon.metrics` serves
``/metrics`` and ``/status`` on loopback from a thread.

Stop: ``--duration`` / ``--frames`` reached, SIGTERM or SIGINT (a flag checked between frames,
never an exception in the middle of a call), or the camera failing. Then the subscription and
the camera stop (every lease returned; any still outstanding is reported), the worker is
closed and the plugins are unconfigured.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import (FrameOverwrittenError, PluginHostError, SandboxError, WorkerDiedError)
from .contract import Deadline, StateContract
from .events import EventLog
from .feed import ModelFeed
from .metrics import AGE_BUCKETS_S, LATENCY_BUCKETS_S, Histogram
from .stats import FrameReport, FrameStats

__all__ = ["Daemon", "DaemonOptions", "WORKER_RESTART"]


def _file_signature(path: Any) -> tuple[int, ...] | None:
    """What changes when a file is replaced or rewritten (None: it does not exist)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

WORKER_RESTART = "worker restart"


@dataclass
class DaemonOptions:
    """``duration`` (s) / ``frames`` (frames run): stop by itself; ``camera`` / ``artifact``:
    which one when the policy provides several; ``stats_interval`` (s): a ``stats`` event;
    ``log_frames``: one ``frame`` event per frame; ``swap_poll`` (s): how often the artifact
    file is checked for a new version to swap in (None: only on SIGHUP / :meth:`request_swap`);
    ``metrics``: where to serve ``/status`` and
    ``/metrics`` (``127.0.0.1:PORT``, ``[::1]:PORT``, ``localhost:PORT`` or ``unix:PATH``;
    loopback only, see :mod:`~plugin_host.daemon.metrics`)."""

    duration: float | None = None
    frames: int | None = None
    camera: str | None = None
    artifact: str | None = None
    stats_interval: float = 1.0
    log_frames: bool = False
    metrics: str | None = None
    swap_poll: float | None = 1.0
    recv_timeout: float = 0.05


class Daemon:
    """One run of the host daemon under ``policy`` (see the module docstring).

    ``state_dir`` is what the policy's ``${STATE_DIR}`` expands to (the rollback state lives
    there too); ``events`` receives the structured log; ``say`` prints the human lines (the
    first-use message, the summary).
    """

    def __init__(self, policy: Any, *, state_dir: str | os.PathLike,
                 options: DaemonOptions | None = None, events: EventLog | None = None,
                 say: Callable[[str], None] = print) -> None:
        self.policy = policy
        self.state_dir = Path(state_dir)
        self.options = options or DaemonOptions()
        self.events = events or EventLog()
        self.say = say
        self.plugins: Any = None
        self.executor: Any = None
        self.camera: Any = None
        self.subscription: Any = None
        self.metrics_server: Any = None
        self.resets: collections.Counter[str] = collections.Counter()
        self.stop_reason: str | None = None
        self.leaks_at_stop: list[Any] = []
        self.started_at: float | None = None
        self.last_report: FrameReport | None = None
        self._stop = threading.Event()
        self._closed = False
        self._buffers: dict[str, Any] | None = None
        self._restarts_seen = 0
        self._pool_id: str | None = None
        self._sinks: list[Any] = []
        #: guards what a metrics scrape reads (taken around each frame's bookkeeping)
        self._lock = threading.Lock()
        self.model_hist = Histogram(LATENCY_BUCKETS_S)
        self.age_hist = Histogram(AGE_BUCKETS_S)
        self.artifact_swaps = 0
        self.artifact_swaps_refused = 0
        self._swap_requested: str | None = None
        self._swap_ready: tuple[Any, Any] | None = None
        self._swap_thread: threading.Thread | None = None
        self._swap_queue: queue.Queue[str | None] = queue.Queue()
        self._swap_busy = threading.Event()
        self._swap_seen: Any = None
        self._next_swap_poll = 0.0
        self._closers: list[threading.Thread] = []

    # -- start-up ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Steps 1-4 of the module docstring; the camera is not started yet."""
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self) -> None:
        from ..artifacts import RollbackStore
        from ..plugins import load_plugins
        from ..policy import HOST_KINDS
        from ..sandbox.policy import sandbox_config_from_policy
        from .demo_setup import ensure_demo_artifact

        policy = self.policy
        if self.options.metrics:  # a bad address is refused before anything starts
            from .metrics import parse_address

            parse_address(self.options.metrics)
        self.events.emit("start", policy=policy.path, state_dir=str(self.state_dir),
                         pid=os.getpid())
        ensure_demo_artifact(policy, self.state_dir, self.say)

        self.plugins = load_plugins(policy, kinds=HOST_KINDS)
        self.events.emit("plugins", loaded=self.plugins.names)
        self.camera = self._pick_camera(self.plugins.cameras())
        self._sinks = self.plugins.connect_sinks()

        rule = self._rule = self._pick_artifact()
        rollback = self._rollback = RollbackStore(self.state_dir)
        sandbox = sandbox_config_from_policy(policy).executor_kwargs()
        if sandbox["limits"].blas_threads is None:
            # one core stays with the camera and the host: with every core to BLAS, the
            # worker's threads and the camera thread preempt each other (measured on 2 cores:
            # p99 108 ms and 23 deadline misses in 10 s, against p99 14 ms and none)
            sandbox["limits"] = dataclasses.replace(
                sandbox["limits"], blas_threads=max(1, len(os.sched_getaffinity(0)) - 1))
        self._sandbox_kwargs = sandbox
        self._swap_seen = _file_signature(rule.file)
        self.executor = ex = self._open_executor()
        digest = ex.artifact.manifest_sha256
        manifest = ex.manifest
        rollback.accept(manifest.name, manifest.version, digest)
        self.artifact_name = manifest.name
        self.publisher = f"artifact:{manifest.name}"
        self.events.emit("loaded", artifact=manifest.name, version=manifest.version,
                         file=str(rule.file), signers=list(ex.artifact.signers),
                         backend=rule.backend, latency_ms=manifest.latency_ms,
                         reset=manifest.reset.to_dict(), acceptance=rule.acceptance_required,
                         worker_pid=ex.pid, protections=ex.protections.summary()
                         if ex.protections else None)

        self.feed = ModelFeed(ex.graph, ex.index_inputs, self.camera.layout)
        self.contract = StateContract(manifest.reset, on_event=self._contract_event)
        self.deadline = Deadline(manifest.latency_ms)
        rate = float(getattr(self.camera, "rate", 20.0) or 20.0)
        self.stats = FrameStats(1.0 / rate)
        if self.options.metrics:
            from .metrics import MetricsServer

            self.metrics_server = MetricsServer(self, self.options.metrics)
            self.events.emit("metrics", address=self.metrics_server.address,
                             paths=["/metrics", "/status"])

    def _open_executor(self) -> Any:
        """The policy's checks on the artifact file, then a new sandbox worker on it (the very
        manifest checked), then acceptance when required; not yet recorded as accepted."""
        from ..policy import load_allowed_artifact
        from ..sandbox import SandboxedExecutor
        from ..sandbox.policy import audit_sinks

        policy, rule = self.policy, self._rule
        checked = load_allowed_artifact(policy, rule.name, rollback=self._rollback,
                                        available_backends={rule.backend},
                                        plugins=self.plugins, record=False)
        digest = checked.manifest_sha256
        close = getattr(checked, "close", None)
        if close is not None:
            close()
        ex = SandboxedExecutor(
            rule.file, trust=policy.trust_store(), backend=rule.backend,
            audited_ops=policy.audited_op_pairs(rule.backend), rollback=None,
            artifact_limits=policy.limits.artifact_limits(), **self._sandbox_kwargs,
            **audit_sinks(self.plugins.broker.audit))
        try:
            if ex.artifact.manifest_sha256 != digest:
                raise PluginHostError(f"artifact {rule.file} changed while it was loaded "
                                      f"(manifest {digest[:16]}... checked, "
                                      f"{ex.artifact.manifest_sha256[:16]}... handed to the "
                                      f"worker); refusing to run either")
            if rule.acceptance_required:
                ex.check_golden()
        except BaseException:
            ex.close()
            raise
        return ex

    # -- artifact hot-swap ------------------------------------------------------------------------

    def request_swap(self, why: str = "requested") -> None:
        """Re-verify the artifact file and swap it in if it holds another accepted artifact
        (thread- and signal-safe: acted on between frames)."""
        self._swap_requested = why

    def _poll_swap(self, now: float) -> None:
        """Between frames: switch to a prepared executor, or start preparing one when the
        file changed (every ``swap_poll`` s) or a swap was requested (SIGHUP)."""
        if self._swap_ready is not None:
            self._switch()
        why, self._swap_requested = self._swap_requested, None
        poll = self.options.swap_poll
        if why is None and poll and now >= self._next_swap_poll:
            self._next_swap_poll = now + poll
            if _file_signature(self._rule.file) != self._swap_seen:
                why = "file changed"
        if why is None:
            return
        if self._swap_busy.is_set():
            self._swap_requested = why  # after the one in progress
            return
        self._swap_seen = _file_signature(self._rule.file)
        self.events.emit("swap_check", why=why, file=str(self._rule.file))
        self._swap_busy.set()
        if self._swap_thread is None:
            # one long-lived thread that verifies and starts new artifacts off the frame loop
            # (it stops in close(), after every executor is closed)
            self._swap_thread = threading.Thread(target=self._swap_loop,
                                                 name="plugin-host-swap", daemon=True)
            self._swap_thread.start()
        self._swap_queue.put(why)

    def _swap_loop(self) -> None:
        while True:
            why = self._swap_queue.get()
            if why is None:
                return
            try:
                self._prepare_swap(why)
            except BaseException as exc:  # never leave the loop with a swap "in progress"
                self.events.emit("swap_refused", why=why, error=f"{type(exc).__name__}: {exc}")
            finally:
                self._swap_busy.clear()

    def _prepare_swap(self, why: str) -> None:
        """On the swap thread: verify the new file and start its worker beside the old one."""
        old = self.executor
        kept = {"kept": old.manifest.name, "kept_version": old.manifest.version}
        try:
            ex = self._open_executor()
        except Exception as exc:  # refused: the running artifact stays
            with self._lock:
                self.artifact_swaps_refused += 1
            self.events.emit("swap_refused", why=why, file=str(self._rule.file),
                             error=f"{type(exc).__name__}: {exc}", **kept)
            return
        if ex.artifact.manifest_sha256 == old.artifact.manifest_sha256:
            ex.close()
            self.events.emit("swap_unchanged", why=why, file=str(self._rule.file), **kept)
            return
        try:
            feed = ModelFeed(ex.graph, ex.index_inputs, self.camera.layout)
        except Exception as exc:
            ex.close()
            with self._lock:
                self.artifact_swaps_refused += 1
            self.events.emit("swap_refused", why=why, file=str(self._rule.file),
                             error=f"{type(exc).__name__}: {exc}", **kept)
            return
        with self._lock:
            if not self._closed:
                self._swap_ready = (ex, feed)
                return
        ex.close()

    def _switch(self) -> None:
        """On the frame loop, between two frames: the prepared executor takes over; the old
        one is closed on a thread of its own."""
        ex, feed = self._swap_ready
        self._swap_ready = None
        old = self.executor
        manifest = ex.manifest
        digest = ex.artifact.manifest_sha256
        try:
            self._rollback.accept(manifest.name, manifest.version, digest)
        except Exception as exc:  # e.g. a higher version accepted meanwhile
            ex.close()
            with self._lock:
                self.artifact_swaps_refused += 1
            self.events.emit("swap_refused", why="rollback", error=f"{type(exc).__name__}: "
                             f"{exc}", kept=old.manifest.name, kept_version=old.manifest.version)
            return
        contract = StateContract(manifest.reset, on_event=self._contract_event)
        contract.carry_from(self.contract)
        contract.artifact_swapped(f"{old.manifest.name} {old.manifest.version}",
                                  f"{manifest.name} {manifest.version}")
        with self._lock:
            self.executor = ex
            self.feed = feed
            self.contract = contract
            self.deadline.latency_ms = float(manifest.latency_ms)
            self._buffers = None
            self._restarts_seen = ex.restarts
            self.artifact_swaps += 1
        self.artifact_name = manifest.name
        self.publisher = f"artifact:{manifest.name}"
        self.events.emit("artifact_swapped", old=old.manifest.name,
                         old_version=old.manifest.version, new=manifest.name,
                         version=manifest.version, manifest_sha256=digest,
                         signers=list(ex.artifact.signers), worker_pid=ex.pid,
                         latency_ms=manifest.latency_ms, reset=manifest.reset.to_dict())
        closer = threading.Thread(target=old.close, name="plugin-host-close-old", daemon=True)
        closer.start()
        self._closers.append(closer)

    def _pick_camera(self, cameras: list[Any]) -> Any:
        names = [c.name for c in cameras]
        if not cameras:
            raise PluginHostError(f"policy {self.policy.path} allows no camera plugin that "
                                  f"provides a camera; the daemon needs one (e.g. the built-in "
                                  f"'synthetic', kind camera)")
        wanted = self.options.camera
        if wanted is None:
            if len(cameras) > 1:
                raise PluginHostError(f"the policy provides {len(cameras)} cameras "
                                      f"({', '.join(names)}): choose one with --camera")
            return cameras[0]
        for camera in cameras:
            if camera.name == wanted:
                return camera
        raise PluginHostError(f"no camera named {wanted!r}; the policy provides: "
                              f"{', '.join(names)}")

    def _pick_artifact(self) -> Any:
        rules = self.policy.artifacts
        wanted = self.options.artifact
        if wanted is None:
            if len(rules) != 1:
                names = ", ".join(r.name for r in rules) or "none"
                raise PluginHostError(f"policy {self.policy.path} allows {len(rules)} "
                                      f"artifacts ({names}): choose one with --artifact")
            return rules[0]
        rule = self.policy.artifact(wanted)
        if rule is None:
            raise PluginHostError(f"policy {self.policy.path} allows no artifact named "
                                  f"{wanted!r}")
        return rule

    # -- running ----------------------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Stop after the frame in progress (thread- and signal-safe)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()

    def request_reset(self, why: str = "requested") -> None:
        """An explicit state reset before the next frame (the contract's ``explicit``)."""
        self.contract.request_reset(why)

    def run(self) -> dict[str, Any]:
        """Start the camera and process frames until a stop; returns the summary. Installs
        SIGTERM/SIGINT handlers while running when called on the main thread."""
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                handlers[sig] = signal.signal(
                    sig, lambda signum, _f: self.request_stop(signal.Signals(signum).name))
            handlers[signal.SIGHUP] = signal.signal(
                signal.SIGHUP, lambda _s, _f: self.request_swap("SIGHUP"))
        try:
            self._run()
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
            self.close()
        return self.summary()  # after the stop: the pool's counters are final

    def _run(self) -> None:
        opts = self.options
        self.subscription = self.camera.subscribe("daemon", conflate=True)
        self.camera.start()
        self.events.emit("camera_start", camera=self.camera.name,
                         layout=self.camera.layout.describe(),
                         pool_id=self.camera.pool.id if self.camera.pool else None,
                         rate=getattr(self.camera, "rate", None))
        self.started_at = time.monotonic()
        end = None if opts.duration is None else self.started_at + opts.duration
        next_stats = self.started_at + opts.stats_interval
        while not self._stop.is_set():
            now = time.monotonic()
            if end is not None and now >= end:
                self.request_stop("duration")
                break
            if opts.frames is not None and self.stats.frames_run >= opts.frames:
                self.request_stop("frames")
                break
            if now >= next_stats:
                self._emit_stats()
                next_stats = now + opts.stats_interval
            self._poll_swap(now)
            timeout = opts.recv_timeout if end is None else max(0.0, min(opts.recv_timeout,
                                                                          end - now))
            lease = self.subscription.recv(timeout=timeout)
            if lease is None:
                if getattr(self.camera, "finished", None) is not None and \
                        self.camera.finished.is_set():
                    error = getattr(self.camera, "error", None)
                    self.request_stop("camera stopped")
                    if error is not None:
                        raise PluginHostError(f"camera {self.camera.name!r} failed: {error}")
                continue
            self._frame(lease)

    def _frame(self, lease: Any) -> None:
        ex, stats = self.executor, self.stats
        frame = lease.frame
        try:
            if frame.pool_id != self._pool_id:
                self._pool_id = frame.pool_id
                stats.restart()
            dropped = stats.gap(frame.frame_id)
            reason = self.contract.check(frame)
            if reason is not None:
                ex.reset(reason)
                with self._lock:
                    self.resets[reason] += 1
                self.feed.reset()
            buffers = self._input_buffers()
            self.feed.fill(buffers, lease.planes())
            lease.check()  # the bytes converted were this frame's
            start = time.perf_counter()
            outputs = ex.run(buffers)
            took = time.perf_counter() - start
        except WorkerDiedError as exc:
            stats.not_run += 1
            self._worker_died(exc, frame)
            return
        except FrameOverwrittenError as exc:
            stats.not_run += 1
            self.events.emit("frame_overwritten", frame_id=frame.frame_id, error=str(exc))
            return
        finally:
            if not lease.released:
                try:
                    lease.release()
                except FrameOverwrittenError:
                    pass
        age = max(0.0, (time.monotonic_ns() - frame.timestamp_eof) / 1e9)
        with self._lock:
            miss = self.deadline.observe(took)
            stats.ran(took, age)
            self.model_hist.observe(took)
            self.age_hist.observe(age)
        report = FrameReport(frame.frame_id, dropped, stats.frame_drop_perc, took * 1e3,
                             age * 1e3, miss)
        self.last_report = report
        self.plugins.broker.topics["model"].publish(self.publisher, {
            "camera": frame.camera, "timestamp_sof": frame.timestamp_sof,
            "timestamp_eof": frame.timestamp_eof, "outputs": outputs, **report.to_dict()})
        if miss:
            self.events.emit("deadline_miss", frame_id=frame.frame_id,
                             model_execution_ms=round(took * 1e3, 3),
                             latency_ms=self.deadline.latency_ms, misses=self.deadline.misses)
        if self.options.log_frames:
            self.events.emit("frame", **report.to_dict())

    def _input_buffers(self) -> dict[str, Any]:
        """The shared input buffers, taken again after a worker restart (the old ones belonged
        to the dead worker's region)."""
        ex = self.executor
        if self._buffers is None or ex.restarts != self._restarts_seen:
            self._buffers = ex.input_buffers()
            self._restarts_seen = ex.restarts
            self.feed.prepare(self._buffers)
        return self._buffers

    def _worker_died(self, exc: SandboxError, frame: Any) -> None:
        with self._lock:
            self.resets[WORKER_RESTART] += 1
        self.contract.forget()
        self.feed.reset()
        self._buffers = None
        self.events.emit("worker_died", frame_id=frame.frame_id, error=str(exc),
                         restarts=self.executor.restarts, reset=WORKER_RESTART)

    def _contract_event(self, kind: str, detail: dict) -> None:
        self.events.emit(kind, **detail)

    def _emit_stats(self) -> None:
        s = self.stats
        pool = self.camera.pool.stats() if self.camera.pool is not None else {}
        self.events.emit("stats", frames_in=s.frames_in, frames_run=s.frames_run,
                         dropped=s.dropped, frame_drop_perc=round(s.frame_drop_perc, 3),
                         model_execution_ms=round(s.model_ms[-1], 3) if s.model_ms else None,
                         frame_age_ms=round(s.age_ms[-1], 3) if s.age_ms else None,
                         deadline_misses=self.deadline.misses, resets=sum(self.resets.values()),
                         leases_outstanding=pool.get("leases_outstanding"),
                         worker_restarts=self.executor.restarts)

    def metrics_snapshot(self) -> dict[str, Any]:
        """What the metrics endpoint reads, taken consistently (any thread)."""
        ex = self.executor
        protections: dict[str, bool] = {}
        if ex is not None and getattr(ex, "protections", None) is not None:
            from ..sandbox.config import SandboxRequirements

            on = set(ex.protections.in_force(ex.limits))
            protections = {name: name in on for name in SandboxRequirements.NAMES}
        artifact = None
        if ex is not None and getattr(ex, "manifest", None) is not None:
            artifact = {"name": ex.manifest.name, "version": ex.manifest.version,
                        "manifest_sha256": ex.artifact.manifest_sha256}
        camera = self.camera
        pool = camera.pool.stats() if camera is not None and camera.pool is not None else None
        with self._lock:
            summary = self.summary() if getattr(self, "stats", None) is not None else {}
            return {**summary, "summary": summary,
                    "frames_in": summary.get("frames_in", 0),
                    "frames_run": summary.get("frames_run", 0),
                    "dropped": summary.get("dropped", 0),
                    "not_run": summary.get("not_run", 0),
                    "frame_drop_perc": summary.get("frame_drop_perc", 0.0),
                    "deadline_misses": summary.get("deadline_misses", 0),
                    "latency_ms": summary.get("latency_ms", 0.0),
                    "resets_by_reason": dict(self.resets),
                    "worker_restarts": ex.restarts if ex is not None else 0,
                    "artifact_swaps": self.artifact_swaps,
                    "artifact_swaps_refused": self.artifact_swaps_refused,
                    "model_hist": copy.deepcopy(self.model_hist),
                    "age_hist": copy.deepcopy(self.age_hist),
                    "pool": pool, "protections": protections, "artifact": artifact,
                    "camera": camera.name if camera is not None else None,
                    "worker_pid": ex.pid if ex is not None else None,
                    "running": self.started_at is not None and not self._closed,
                    "seconds": summary.get("seconds", 0.0)}

    # -- stop -------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        s = self.stats.summary()
        pool = self.camera.pool.stats() if self.camera is not None and self.camera.pool else {}
        return {**s, "deadline_misses": self.deadline.misses,
                "latency_ms": self.deadline.latency_ms,
                "resets": sum(self.resets.values()), "resets_by_reason": dict(self.resets),
                "worker_restarts": self.executor.restarts if self.executor else 0,
                "camera_dropped": dict(pool.get("dropped", {})),
                "camera_produced": pool.get("produced"),
                "leases_outstanding": pool.get("leases_outstanding"),
                "leaks_at_stop": len(self.leaks_at_stop),
                "seconds": round(time.monotonic() - self.started_at, 3)
                if self.started_at is not None else 0.0,
                "stop_reason": self.stop_reason}

    def close(self) -> None:
        """Stop the camera (every lease back), close the worker, unconfigure the plugins.
        Safe to call more than once and after a failed start."""
        if self._closed:
            return
        self._closed = True
        if self.metrics_server is not None:
            self.metrics_server.close()
        if self.subscription is not None:
            self.subscription.close()
        if self.camera is not None:
            self.leaks_at_stop = list(self.camera.stop())
            for report in self.leaks_at_stop:
                self.events.emit("lease_leaked", report=str(report))
            self.events.emit("camera_stop", camera=self.camera.name,
                             leases_outstanding=len(self.leaks_at_stop))
        self._buffers = None
        deadline = time.monotonic() + 60
        while self._swap_busy.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)  # a swap being prepared: let it finish, then close its executor
        if self._swap_ready is not None:
            self._swap_ready[0].close()
            self._swap_ready = None
        if self.executor is not None:
            self.executor.close()
        for closer in self._closers:
            closer.join(timeout=30)
        if self._swap_thread is not None:
            self._swap_queue.put(None)
            self._swap_thread.join(timeout=10)
        for sink in self._sinks:
            sink.close()
        if self.plugins is not None:
            self.plugins.unconfigure()
        self.events.emit("stop", reason=self.stop_reason)
