"""The host daemon: frames from camera plugins, the artifact in the sandbox, outputs on the
model topic, the artifact's contract enforced, until told to stop.

Start-up, in order (everything checked before the first frame; any refusal stops here):

1. first use of the demo policy: its key and artifact are created in ``${STATE_DIR}``
   (:mod:`~plugin_host.daemon.demo_setup`);
2. the host-side plugins the policy allows (cameras, sinks, control) are loaded and configured
   with their capabilities (:func:`~plugin_host.plugins.load_plugins`); the sinks are connected
   to the model topic; the cameras are picked: the artifact's ``camera_inputs``, else
   ``--camera``, else the policy's ``[cameras] use``, else the one camera provided;
3. the artifact: :func:`~plugin_host.policy.load_allowed_artifact` (trust, thresholds, backend,
   audited ops, size caps, name, ``min_version``, rollback, the plugins' checks; not yet
   recorded), then one :class:`~plugin_host.sandbox.SandboxedExecutor` per camera (one in
   all with ``camera_inputs``), each of which
   verifies the descriptor it hands to its worker, which must hold the very manifest checked in
   step 3 (same SHA-256); acceptance (golden cases in each sandbox) when the policy requires
   it; only then is the version recorded as accepted (rollback state);
4. the model's inputs are matched with each camera (:class:`~plugin_host.daemon.feed.ModelFeed`);
5. the cameras start.

Several cameras (:class:`~plugin_host.daemon.stream.CameraStream`): every camera has its own
stream (its own worker, hence its own recurrent state, contract, deadline and statistics).
:class:`~plugin_host.frames.FrameSync` matches the cameras' newest frames by
``timestamp_sof`` within ``[cameras] max_skew_ms`` (default 10 ms, as openpilot); a frame that
can no longer be matched is released and counted as dropped (``out_of_sync`` in its pool,
``unmatched`` in its stream). The cameras of a matched set run at the same time, each on a
thread of its own stream (so a stream's executor is always called from the same thread, and
the workers share the cores); the next set waits until the whole set is done. Each camera's
outputs are then published on the ``model`` topic, in the policy's order, tagged with the
camera and the set's number. One camera is the same path with sets of one, run on the frame
loop's thread. Co-location (``[limits] cpu``) applies as the policy says, except that its
default, ``"auto"``, is off with several cameras: their workers would all queue on one CPU.

With the artifact's ``camera_inputs`` (a model taking an image of each of several cameras,
as openpilot's vision model takes the road and the wide camera) the streams share one worker
and one :class:`~plugin_host.daemon.joint.JointRun` runs the model once per matched set on
every camera's frame, and its outputs are published once (``joint.py``).

Per frame (:meth:`CameraStream.run`): the contract (:class:`StateContract`: reset before the
frame on a gap, a camera restart, time going backwards, an explicit request), NV12 to the
model input in the shared input region, the generation check (a frame overwritten while
converted is not run), the sandboxed call, the deadline (:class:`Deadline`), the lease
released, the outputs and the frame's statistics published on the ``model`` topic. A worker
that dies costs that frame of that camera (the executor restarts it and resets the state;
counted as a reset ``worker restart``).

Between frames, each camera's pulse (:meth:`CameraStream.watch`): a camera that produces no
frame for ``[cameras] stall_ms`` (default: 1 s or five frame periods, the longer) is reported
once (``camera_stalled``), and again when its frames come back (``camera_resumed``); the
daemon keeps waiting for it (a camera that *fails* stops the daemon, below).

Also between frames (:meth:`Daemon._poll_swap`): the artifact hot-swap. When the artifact file
changed (checked every ``swap_poll`` s) or on SIGHUP (:meth:`Daemon.request_swap`), a
long-lived swap thread runs step 3 again on the file with new workers (one per camera) beside
the running ones (the sandbox starts every worker from its own long-lived thread, so the
worker's ``PR_SET_PDEATHSIG`` does not depend on which thread asked); once ready, the frame
loop switches every stream to them between two sets, records the version, and each contract
resets the state (``artifact swap``) before the next frame; the old executors are closed on
threads of their own. A refused file is logged (``swap_refused``) and the running artifact
stays. With ``metrics`` set, :mod:`~plugin_host.daemon.metrics` serves ``/metrics`` and
``/status`` on loopback from a thread.

Stop: ``--duration`` / ``--frames`` reached, SIGTERM or SIGINT (a flag checked between sets,
never an exception in the middle of a call), or a camera failing. Then the matcher, the
subscriptions and the cameras stop (every lease returned; any still outstanding is reported),
the workers are closed and the plugins are unconfigured.

A stop asked for during the start-up (:meth:`Daemon.request_stop`, which ``plugin-host run``
calls on the first stop signal rather than raising an exception: ``plugin_host/stop_signals.py``
says why) is a flag too, acted on between the steps above and between the demo acceptance's
calls: :meth:`Daemon.load` closes what it opened and raises :class:`StartUpStopped`.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import PluginHostError, PolicyError, PolicyProblem
from ..policy.model import stall_seconds
from ..stop_signals import stop_signals
from .events import EventLog
from .feed import ModelFeed
from .joint import JointRun
from .metrics import AGE_BUCKETS_S, LATENCY_BUCKETS_S, Histogram
from .stats import percentiles
from .stream import WORKER_RESTART, CameraStream

__all__ = ["Daemon", "DaemonOptions", "StartUpStopped", "WORKER_RESTART"]


class StartUpStopped(Exception):
    """A stop asked for during :meth:`Daemon.load`; ``reason`` is what was given to
    :meth:`Daemon.request_stop` (``"SIGTERM"``, ``"SIGINT"``, ...)."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(f"stopped during start-up by {reason}")
        self.reason = reason


def _file_signature(path: Any) -> tuple[int, ...] | None:
    """What changes when a file is replaced or rewritten (None: it does not exist)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class DaemonOptions:
    """``duration`` (s) / ``frames`` (frames run, by every camera): stop by itself;
    ``camera``: run on this one camera only (overrides the policy's ``[cameras] use``);
    ``artifact``: which one when the policy allows several; ``stats_interval`` (s): a
    ``stats`` event; ``log_frames``: one ``frame`` event per frame; ``swap_poll`` (s): how
    often the artifact file is checked for a new version to swap in (None: only on SIGHUP /
    :meth:`request_swap`); ``metrics``: where to serve ``/status`` and ``/metrics``
    (``127.0.0.1:PORT``, ``[::1]:PORT``, ``localhost:PORT`` or ``unix:PATH``; loopback only,
    see :mod:`~plugin_host.daemon.metrics`)."""

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
    first-use message, the summary). ``streams`` holds one
    :class:`~plugin_host.daemon.stream.CameraStream` per camera, in the policy's order;
    ``camera``, ``executor``, ``stats`` and ``contract`` are the first stream's (the only one
    with one camera).
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
        self.cameras: list[Any] = []
        self.streams: list[CameraStream] = []
        self.sync: Any = None
        #: ``[cameras] stall_ms`` (None: from each camera's rate, ``stall_seconds``)
        self.stall_ms = getattr(getattr(policy, "cameras", None), "stall_ms", None)
        self.max_skew_ms = float(getattr(getattr(policy, "cameras", None), "max_skew_ms",
                                         10.0))
        self.matched_sets = 0
        #: one thread per stream when there are several (each stream's calls on its own)
        self._runners: list[ThreadPoolExecutor] = []
        #: the run on every camera's frame together (an artifact's ``camera_inputs``), or None
        self._joint: JointRun | None = None
        self.metrics_server: Any = None
        self.stop_reason: str | None = None
        self.leaks_at_stop: list[Any] = []
        self.started_at: float | None = None
        self._stop = threading.Event()
        self._closed = False
        self._sinks: list[Any] = []
        #: guards what a metrics scrape reads (taken around each frame's bookkeeping)
        self._lock = threading.Lock()
        self.artifact_swaps = 0
        self.artifact_swaps_refused = 0
        self._swap_requested: str | None = None
        self._swap_ready: list[tuple[Any, Any]] | None = None
        self._swap_thread: threading.Thread | None = None
        self._swap_queue: queue.Queue[str | None] = queue.Queue()
        self._swap_busy = threading.Event()
        self._swap_seen: Any = None
        self._next_swap_poll = 0.0
        self._closers: list[threading.Thread] = []

    # -- the first stream (the only one with one camera) ------------------------------------------

    @property
    def camera(self) -> Any:
        return self.cameras[0] if self.cameras else None

    @property
    def executor(self) -> Any:
        return self.streams[0].executor if self.streams else None

    @property
    def stats(self) -> Any:
        return self.streams[0].stats if self.streams else None

    @property
    def contract(self) -> Any:
        return self.streams[0].contract if self.streams else None

    @property
    def last_report(self) -> Any:
        return self.streams[0].last_report if self.streams else None

    @property
    def resets(self) -> collections.Counter[str]:
        """Resets of every stream, by reason."""
        total: collections.Counter[str] = collections.Counter()
        for stream in self.streams:
            total.update(stream.resets)
        return total

    # -- start-up ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Steps 1-4 of the module docstring; the cameras are not started yet. A stop asked
        for before or during it raises :class:`StartUpStopped` at the next step (everything
        opened closed)."""
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _checkpoint(self) -> None:
        """Between two start-up steps: act on a stop asked for."""
        if self._stop.is_set():
            raise StartUpStopped(self.stop_reason)

    def _load(self) -> None:
        from ..artifacts import RollbackStore
        from ..plugins import load_plugins
        from ..policy import HOST_KINDS
        from ..sandbox import placement
        from ..sandbox.policy import sandbox_config_from_policy
        from .demo_setup import ensure_demo_artifact

        policy = self.policy
        if self.options.metrics:  # a bad address is refused before anything starts
            from .metrics import parse_address

            parse_address(self.options.metrics)
        self.events.emit("start", policy=policy.path, state_dir=str(self.state_dir),
                         pid=os.getpid())
        self._checkpoint()
        ensure_demo_artifact(policy, self.state_dir, self.say, checkpoint=self._checkpoint)
        self._checkpoint()

        self.plugins = load_plugins(policy, kinds=HOST_KINDS)
        self.events.emit("plugins", loaded=self.plugins.names)
        self._checkpoint()
        rule = self._rule = self._pick_artifact()
        self.cameras = self._pick_cameras(self.plugins.cameras())
        self._sinks = self.plugins.connect_sinks()
        workers = 1 if rule.camera_inputs else len(self.cameras)
        rollback = self._rollback = RollbackStore(self.state_dir)
        sandbox = sandbox_config_from_policy(policy).executor_kwargs()
        if sandbox["limits"].blas_threads is None:
            # one core stays with the cameras and the host: with every core to BLAS, the
            # worker's threads and the camera thread preempt each other (measured on 2 cores:
            # p99 108 ms and 23 deadline misses in 10 s, against p99 14 ms and none)
            sandbox["limits"] = dataclasses.replace(
                sandbox["limits"], blas_threads=max(1, len(os.sched_getaffinity(0)) - 1))
        if policy.limits.cpu == placement.AUTO and workers > 1:
            # several workers' main threads and callers on one CPU queue behind each other
            # (measured, three cameras on onnxruntime at 20 Hz, 15-22 s: p50 7.5-11.3 ms and
            # 44-314 deadline misses, against 7.1-7.9 ms and 10-37 unplaced; README)
            sandbox["limits"] = dataclasses.replace(sandbox["limits"], cpu=None)
        self._sandbox_kwargs = sandbox
        self._swap_seen = _file_signature(rule.file)
        executors = self._open_executors(workers)
        try:
            if rule.camera_inputs:  # one worker, one run on every camera's frame of a set
                feed = self._feed(executors[0], None)
                self.streams.extend(CameraStream(camera, executors[0], feed,
                                                 emit=self.events.emit, lock=self._lock)
                                    for camera in self.cameras)
                self._joint = JointRun(self.streams, self.events.emit)
            else:
                for camera, ex in zip(self.cameras, executors):
                    self.streams.append(CameraStream(camera, ex, self._feed(ex, camera),
                                                     emit=self.events.emit, lock=self._lock))
        except BaseException:
            for ex in executors[len(self.streams):] if not rule.camera_inputs else executors:
                ex.close()
            raise
        ex = executors[0]
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
                         if ex.protections else None,
                         cameras=[c.name for c in self.cameras],
                         worker_pids=[e.pid for e in executors], cpu=ex.cpu,
                         max_skew_ms=self.max_skew_ms,
                         fixed_inputs=list(self.streams[0].feed.values),
                         camera_inputs=dict(rule.camera_inputs),
                         image_inputs={name: fmt.color for name, fmt
                                       in self.streams[0].feed.formats.items() if fmt})
        if self.options.metrics:
            from .metrics import MetricsServer

            self.metrics_server = MetricsServer(self, self.options.metrics)
            self.events.emit("metrics", address=self.metrics_server.address,
                             paths=["/metrics", "/status"])
        self._checkpoint()

    def _open_executors(self, count: int) -> list[Any]:
        """The policy's checks on the artifact file, then ``count`` new sandbox workers on it
        (each on the very manifest checked), then acceptance in each when required; not yet
        recorded as accepted."""
        from ..policy import load_allowed_artifact
        from ..sandbox import SandboxedExecutor
        from ..sandbox.policy import audit_sinks

        policy, rule = self.policy, self._rule
        checked = load_allowed_artifact(policy, rule.name, rollback=self._rollback,
                                        available_backends={rule.backend},
                                        plugins=self.plugins, record=False)
        digest = checked.manifest_sha256
        problem = policy.call_timeout_problem(rule.name, checked.manifest.latency_ms)
        if problem is not None:
            close = getattr(checked, "close", None)
            if close is not None:
                close()
            raise PolicyError([problem])
        if rule.acceptance_required:  # a valid signed acceptance record for this backend
            from ..policy import require_acceptance

            require_acceptance(policy, checked, backend=rule.backend)
        close = getattr(checked, "close", None)
        if close is not None:
            close()
        opened: list[Any] = []
        try:
            for _ in range(count):
                ex = SandboxedExecutor(
                    rule.file, trust=policy.trust_store(), backend=rule.backend,
                    audited_ops=policy.audited_op_pairs(rule.backend), rollback=None,
                    artifact_limits=policy.limits.artifact_limits(), **self._sandbox_kwargs,
                    **audit_sinks(self.plugins.broker.audit))
                opened.append(ex)
                if ex.artifact.manifest_sha256 != digest:
                    raise PluginHostError(
                        f"artifact {rule.file} changed while it was loaded (manifest "
                        f"{digest[:16]}... checked, {ex.artifact.manifest_sha256[:16]}... "
                        f"handed to the worker); refusing to run either")
                if rule.acceptance_required:
                    ex.check_golden()
                self._checkpoint()
        except BaseException:
            for ex in opened:
                ex.close()
            raise
        return opened

    # -- artifact hot-swap ------------------------------------------------------------------------

    def request_swap(self, why: str = "requested") -> None:
        """Re-verify the artifact file and swap it in if it holds another accepted artifact
        (thread- and signal-safe: acted on between frames)."""
        self._swap_requested = why

    def _poll_swap(self, now: float) -> None:
        """Between frames: switch to prepared executors, or start preparing them when the
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

    def _refuse_swap(self, why: str, exc: BaseException, kept: dict) -> None:
        with self._lock:
            self.artifact_swaps_refused += 1
        self.events.emit("swap_refused", why=why, file=str(self._rule.file),
                         error=f"{type(exc).__name__}: {exc}", **kept)

    def _prepare_swap(self, why: str) -> None:
        """On the swap thread: verify the new file and start its workers (one per camera)
        beside the old ones."""
        old = self.executor
        kept = {"kept": old.manifest.name, "kept_version": old.manifest.version}
        try:
            executors = self._open_executors(len(self._executors()))
        except Exception as exc:  # refused: the running artifact stays
            self._refuse_swap(why, exc, kept)
            return
        if executors[0].artifact.manifest_sha256 == old.artifact.manifest_sha256:
            for ex in executors:
                ex.close()
            self.events.emit("swap_unchanged", why=why, file=str(self._rule.file), **kept)
            return
        try:
            if self._joint is not None:
                ready = [(executors[0], self._feed(executors[0], None))] * len(self.streams)
            else:
                ready = [(ex, self._feed(ex, stream.camera))
                         for ex, stream in zip(executors, self.streams)]
        except Exception as exc:
            for ex in executors:
                ex.close()
            self._refuse_swap(why, exc, kept)
            return
        with self._lock:
            if not self._closed:
                self._swap_ready = ready
                return
        for ex in executors:
            ex.close()

    def _switch(self) -> None:
        """On the frame loop, between two sets: the prepared executors take over; the old
        ones are closed on threads of their own."""
        ready, self._swap_ready = self._swap_ready, None
        assert ready is not None
        old = self.executor
        ex = ready[0][0]
        manifest = ex.manifest
        digest = ex.artifact.manifest_sha256
        try:
            self._rollback.accept(manifest.name, manifest.version, digest)
        except Exception as exc:  # e.g. a higher version accepted meanwhile
            for new, _ in ready:
                new.close()
            with self._lock:
                self.artifact_swaps_refused += 1
            self.events.emit("swap_refused", why="rollback", error=f"{type(exc).__name__}: "
                             f"{exc}", kept=old.manifest.name, kept_version=old.manifest.version)
            return
        old_name = f"{old.manifest.name} {old.manifest.version}"
        new_name = f"{manifest.name} {manifest.version}"
        olds = list(dict.fromkeys(stream.switch(new, feed, old_name, new_name)
                                  for stream, (new, feed) in zip(self.streams, ready)))
        with self._lock:
            self.artifact_swaps += 1
        self.artifact_name = manifest.name
        self.publisher = f"artifact:{manifest.name}"
        self.events.emit("artifact_swapped", old=old.manifest.name,
                         old_version=old.manifest.version, new=manifest.name,
                         version=manifest.version, manifest_sha256=digest,
                         signers=list(ex.artifact.signers), worker_pid=ex.pid,
                         worker_pids=[new.pid for new in dict.fromkeys(n for n, _ in ready)],
                         latency_ms=manifest.latency_ms, reset=manifest.reset.to_dict())
        for previous in olds:
            closer = threading.Thread(target=previous.close, name="plugin-host-close-old",
                                      daemon=True)
            closer.start()
            self._closers.append(closer)

    # -- which cameras, which artifact ------------------------------------------------------------

    def _pick_cameras(self, cameras: list[Any]) -> list[Any]:
        """``--camera``, else the policy's ``[cameras] use`` (in its order), else the one
        camera provided."""
        names = [c.name for c in cameras]
        by_name = {c.name: c for c in cameras}
        if not cameras:
            raise PluginHostError(f"policy {self.policy.path} allows no camera plugin that "
                                  f"provides a camera; the daemon needs one (e.g. the built-in "
                                  f"'synthetic', kind camera)")
        bound = list(self._rule.camera_inputs.values())
        if bound:  # the artifact runs on these cameras' frames together
            if self.options.camera is not None:
                raise PluginHostError(f"artifact {self._rule.name!r} runs on the frames of "
                                      f"{', '.join(bound)} together (its camera_inputs): "
                                      f"--camera cannot choose one of them")
            unknown = [n for n in bound if n not in by_name]
            if unknown:
                raise PolicyError([PolicyProblem(
                    self.policy.path, self._rule.camera_inputs_line,
                    f"artifact[{self._rule.index}].camera_inputs",
                    f"no camera named {', '.join(repr(n) for n in unknown)}; the allowed "
                    f"camera plugins provide: {', '.join(names)}")])
            return [by_name[n] for n in bound]
        wanted = self.options.camera
        if wanted is not None:
            if wanted not in by_name:
                raise PluginHostError(f"no camera named {wanted!r}; the policy provides: "
                                      f"{', '.join(names)}")
            return [by_name[wanted]]
        settings = getattr(self.policy, "cameras", None)
        use = tuple(getattr(settings, "use", ()) or ())
        if use:
            unknown = [n for n in use if n not in by_name]
            if unknown:
                raise PolicyError([PolicyProblem(
                    self.policy.path, settings.use_line, "cameras.use",
                    f"no camera named {', '.join(repr(n) for n in unknown)}; the allowed "
                    f"camera plugins provide: {', '.join(names)}")])
            return [by_name[n] for n in use]
        if len(cameras) > 1:
            raise PluginHostError(f"the policy provides {len(cameras)} cameras "
                                  f"({', '.join(names)}): list the ones to run in [cameras] "
                                  f"use, or choose one with --camera")
        return cameras

    def _feed(self, ex: Any, camera: Any) -> ModelFeed:
        """Which of the model's inputs ``camera`` makes (None: the cameras of the artifact's
        ``camera_inputs``, each its input) and which the policy fixes."""
        rule = self._rule
        bound = None
        if camera is None:
            layouts = {c.name: c.layout for c in self.cameras}
            bound = {name: (cam, layouts[cam]) for name, cam in rule.camera_inputs.items()}
        return ModelFeed(ex.graph, ex.index_inputs, None if camera is None else camera.layout,
                         fixed=rule.fixed_inputs, source=self.policy.path, bound=bound,
                         bound_line=rule.camera_inputs_line, colour=rule.image_inputs)

    def _executors(self) -> list[Any]:
        """The streams' executors, each once (one for every stream in a joint run)."""
        return list(dict.fromkeys(stream.executor for stream in self.streams))

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
        """Stop after the set in progress (thread- and signal-safe)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()

    def request_reset(self, why: str = "requested") -> None:
        """An explicit state reset of every stream before its next frame (the contract's
        ``explicit``)."""
        for stream in self.streams:
            stream.contract.request_reset(why)

    def run(self) -> dict[str, Any]:
        """Start the cameras and process frames until a stop; returns the summary. Installs
        SIGTERM/SIGINT handlers while running when called on the main thread (not over one
        ignored when it started: :mod:`plugin_host.stop_signals`)."""
        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in stop_signals():
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
        return self.summary()  # after the stop: the pools' counters are final

    def _frames_run(self) -> int:
        """Frames run by every camera (the slowest stream's count)."""
        return min(stream.stats.frames_run for stream in self.streams)

    def _run(self) -> None:
        from ..frames import FrameSync

        opts = self.options
        subscriptions = {}
        for stream in self.streams:
            stream.subscription = stream.camera.subscribe("daemon", conflate=True)
            subscriptions[stream.name] = stream.subscription
        self.sync = FrameSync(subscriptions, max_skew_ms=self.max_skew_ms)
        for camera in self.cameras:
            camera.start()
            self.events.emit("camera_start", camera=camera.name,
                             layout=camera.layout.describe(),
                             pool_id=camera.pool.id if camera.pool else None,
                             rate=getattr(camera, "rate", None))
        self.started_at = time.monotonic()
        end = None if opts.duration is None else self.started_at + opts.duration
        next_stats = self.started_at + opts.stats_interval
        stall_s = [stall_seconds(self.stall_ms, getattr(s.camera, "rate", None))
                   for s in self.streams]
        while not self._stop.is_set():
            now = time.monotonic()
            for stream, stall in zip(self.streams, stall_s):
                stream.watch(now, stall)
            if end is not None and now >= end:
                self.request_stop("duration")
                break
            if opts.frames is not None and self._frames_run() >= opts.frames:
                self.request_stop("frames")
                break
            if now >= next_stats:
                self._emit_stats()
                next_stats = now + opts.stats_interval
            self._poll_swap(now)
            timeout = opts.recv_timeout if end is None else max(0.0, min(opts.recv_timeout,
                                                                          end - now))
            group = self.sync.recv(timeout=timeout)
            self._count_unmatched()
            if group is None:
                for camera in self.cameras:
                    finished = getattr(camera, "finished", None)
                    if finished is not None and finished.is_set():
                        error = getattr(camera, "error", None)
                        self.request_stop("camera stopped")
                        if error is not None:
                            raise PluginHostError(f"camera {camera.name!r} failed: {error}")
                continue
            self._frame_set(group)

    def _count_unmatched(self) -> None:
        unmatched = self.sync.unmatched
        if unmatched:
            with self._lock:
                for stream in self.streams:
                    stream.unmatched = unmatched.get(stream.name, 0)

    def _frame_set(self, group: dict[str, Any]) -> None:
        """One matched set: each camera's frame through its stream, in the policy's order."""
        with self._lock:
            self.matched_sets += 1
        set_id = self.matched_sets
        try:
            frames = [group[stream.name].frame for stream in self.streams]
            if self._joint is not None:
                self._publish_joint(set_id, frames, self._joint.run(group))
                return
            if len(self.streams) == 1:
                results = [self.streams[0].run(group.pop(self.streams[0].name))]
            else:
                if not self._runners:
                    self._runners = [ThreadPoolExecutor(1, f"plugin-host-{stream.name}")
                                     for stream in self.streams]
                futures = [runner.submit(stream.run, group.pop(stream.name))
                           for runner, stream in zip(self._runners, self.streams)]
                results = [f.result() for f in _all_done(futures)]
            for stream, frame, result in zip(self.streams, frames, results):
                if result is None:
                    continue
                report, outputs = result
                self.plugins.broker.topics["model"].publish(self.publisher, {
                    "camera": frame.camera, "set_id": set_id,
                    "timestamp_sof": frame.timestamp_sof,
                    "timestamp_eof": frame.timestamp_eof, "outputs": outputs,
                    "image_geometry": stream.feed.geometry({None: (frame.width,
                                                                   frame.height)}),
                    **report.to_dict()})
                if self.options.log_frames:
                    self.events.emit("frame", camera=stream.name, set_id=set_id,
                                     **report.to_dict())
        finally:
            for lease in group.values():  # only after a bug: never keep a lease
                if not lease.released:
                    lease.release()

    def _publish_joint(self, set_id: int, frames: list[Any], result: Any) -> None:
        """A joint run's outputs, once for the set: the first camera's report and timestamps,
        and every camera's frame id."""
        if result is None:
            return
        reports, outputs = result
        first = frames[0]
        self.plugins.broker.topics["model"].publish(self.publisher, {
            "camera": first.camera, "set_id": set_id,
            "frames": {f.camera: f.frame_id for f in frames},
            "timestamp_sof": first.timestamp_sof, "timestamp_eof": first.timestamp_eof,
            "outputs": outputs, "image_geometry": self.streams[0].feed.geometry(
                {f.camera: (f.width, f.height) for f in frames}),
            **reports[0].to_dict()})
        if self.options.log_frames:
            for stream, report in zip(self.streams, reports):
                self.events.emit("frame", camera=stream.name, set_id=set_id,
                                 **report.to_dict())

    def _emit_stats(self) -> None:
        s = self.summary()
        extra = {}
        if len(self.streams) > 1:
            extra["cameras"] = {name: {k: c[k] for k in ("frames_in", "frames_run", "dropped",
                                                         "unmatched", "frame_drop_perc",
                                                         "stalls")}
                                for name, c in s["cameras"].items()}
        last = self.streams[0].stats
        self.events.emit("stats", frames_in=s["frames_in"], frames_run=s["frames_run"],
                         dropped=s["dropped"], frame_drop_perc=s["frame_drop_perc"],
                         model_execution_ms=round(last.model_ms[-1], 3) if last.model_ms
                         else None,
                         frame_age_ms=round(last.age_ms[-1], 3) if last.age_ms else None,
                         deadline_misses=s["deadline_misses"], resets=s["resets"],
                         leases_outstanding=s["leases_outstanding"],
                         worker_restarts=s["worker_restarts"], stalls=s["stalls"], **extra)

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
        pools = {c.name: c.pool.stats() for c in self.cameras if c.pool is not None}
        with self._lock:
            summary = self.summary() if self.streams else {}
            return {**summary, "summary": summary,
                    "frames_in": summary.get("frames_in", 0),
                    "frames_run": summary.get("frames_run", 0),
                    "dropped": summary.get("dropped", 0),
                    "not_run": summary.get("not_run", 0),
                    "frame_drop_perc": summary.get("frame_drop_perc", 0.0),
                    "deadline_misses": summary.get("deadline_misses", 0),
                    "latency_ms": summary.get("latency_ms", 0.0),
                    "resets_by_reason": dict(self.resets),
                    "worker_restarts": summary.get("worker_restarts", 0),
                    "artifact_swaps": self.artifact_swaps,
                    "artifact_swaps_refused": self.artifact_swaps_refused,
                    "model_hist": _merged([s.model_hist for s in self.streams],
                                          LATENCY_BUCKETS_S),
                    "age_hist": _merged([s.age_hist for s in self.streams], AGE_BUCKETS_S),
                    "pool": _merge_pools(list(pools.values())) if pools else None,
                    "pools": pools, "protections": protections, "artifact": artifact,
                    "camera": self.camera.name if self.camera is not None else None,
                    "cameras": summary.get("cameras", {}),
                    "worker_pid": ex.pid if ex is not None else None,
                    "worker_pids": {s.name: s.executor.pid for s in self.streams},
                    "running": self.started_at is not None and not self._closed,
                    "seconds": summary.get("seconds", 0.0)}

    # -- stop -------------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Totals over every camera (``frame_drop_perc``: the worst camera's; percentiles over
        every camera's frames) and, under ``cameras``, each camera's own."""
        per = {stream.name: stream.summary() for stream in self.streams}
        parts = list(per.values())

        def total(key: str) -> int:
            return sum(p[key] or 0 for p in parts)

        model = np.concatenate([np.asarray(s.stats.model_ms, np.float64)
                                for s in self.streams]) if self.streams else np.empty(0)
        age = np.concatenate([np.asarray(s.stats.age_ms, np.float64)
                              for s in self.streams]) if self.streams else np.empty(0)
        camera_dropped: collections.Counter[str] = collections.Counter()
        for p in parts:
            camera_dropped.update(p["camera_dropped"])
        produced = [p["camera_produced"] for p in parts if p["camera_produced"] is not None]
        outstanding = [p["leases_outstanding"] for p in parts
                       if p["leases_outstanding"] is not None]
        return {"frames_in": total("frames_in"), "frames_run": total("frames_run"),
                "dropped": total("dropped"), "gap_dropped": total("gap_dropped"),
                "not_run": total("not_run"), "unmatched": total("unmatched"),
                "frame_drop_perc": max((p["frame_drop_perc"] for p in parts), default=0.0),
                "model_execution_ms": percentiles(model, max(
                    (s.stats.max_model_ms for s in self.streams), default=None)),
                "frame_age_ms": percentiles(age, max(
                    (s.stats.max_age_ms for s in self.streams), default=None)),
                "deadline_misses": total("deadline_misses"),
                "latency_ms": self.streams[0].deadline.latency_ms if self.streams else 0.0,
                "resets": total("resets"), "resets_by_reason": dict(self.resets),
                "worker_restarts": sum(ex.restarts for ex in self._executors()),
                "stalls": total("stalls"),
                "camera_dropped": dict(camera_dropped),
                "camera_produced": sum(produced) if produced else None,
                "leases_outstanding": sum(outstanding) if outstanding else None,
                "leaks_at_stop": len(self.leaks_at_stop),
                "matched_sets": self.matched_sets, "max_skew_ms": self.max_skew_ms,
                "cameras": per,
                "seconds": round(time.monotonic() - self.started_at, 3)
                if self.started_at is not None else 0.0,
                "stop_reason": self.stop_reason}

    def close(self) -> None:
        """Stop the cameras (every lease back), close the workers, unconfigure the plugins.
        Safe to call more than once and after a failed start."""
        if self._closed:
            return
        self._closed = True
        if self.metrics_server is not None:
            self.metrics_server.close()
        for runner in self._runners:
            runner.shutdown(wait=True)
        if self.sync is not None:
            self.sync.close()  # frames held while waiting for their partners
        for stream in self.streams:
            if stream.subscription is not None:
                stream.subscription.close()
        for camera in self.cameras:
            leaks = list(camera.stop())
            self.leaks_at_stop.extend(leaks)
            for report in leaks:
                self.events.emit("lease_leaked", camera=camera.name, report=str(report))
            self.events.emit("camera_stop", camera=camera.name,
                             leases_outstanding=len(leaks))
        deadline = time.monotonic() + 60
        while self._swap_busy.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)  # a swap being prepared: let it finish, then close its executors
        if self._swap_ready is not None:
            for ex, _ in self._swap_ready:
                ex.close()
            self._swap_ready = None
        for ex in self._executors():
            ex.close()
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


def _all_done(futures: list[Any]) -> list[Any]:
    """``futures`` once every one has finished (a failure raises only after all are done:
    each releases its own lease)."""
    for f in futures:
        f.exception()
    return futures


def _merged(hists: list[Histogram], bounds: tuple[float, ...]) -> Histogram:
    """One histogram holding every stream's observations (a copy)."""
    out = Histogram(bounds)
    for h in hists:
        out.counts = [a + b for a, b in zip(out.counts, h.counts)]
        out.sum += h.sum
        out.count += h.count
    return out


def _merge_pools(pools: list[dict[str, Any]]) -> dict[str, Any]:
    """Several pools' counters as one (numbers summed, counters merged); one pool as is."""
    if len(pools) == 1:
        return copy.deepcopy(pools[0])
    out: dict[str, Any] = {}
    for stats in pools:
        for key, value in stats.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
                continue
            if isinstance(value, dict):
                merged = out.setdefault(key, {})
                for k, v in value.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        merged[k] = merged.get(k, 0) + v
            else:
                out[key] = out.get(key, 0) + value
    return out
