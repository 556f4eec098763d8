"""The host side: :class:`SandboxedExecutor`, an executor whose kernels run in a sandbox worker.

It has the call surface of :class:`~plugin_host.executor.Executor` (``run``, ``reset``,
``state``, ``resets``, ``resets_by_reason``, ``calls``, ``index_inputs``) plus ``restarts``,
``protections``, ``audit_events`` and ``close``. What happens where:

* **host, once**: ``load_verified`` on an open descriptor of the artifact (signatures, trust,
  thresholds, compatibility, rollback, every hash); the same descriptor is then passed to the
  worker, which pins the manifest to what the host verified and re-hashes the tensors;
* **host, every call** (cheap, before anything is sent): the inputs against the ABI
  (``Signature.check``: names, shapes, dtypes, layouts, symbolic dims; its result reused while
  the inputs' names, dtypes and shapes stay the last call's) and every Embedding index value,
  so a bad input never reaches the worker; then the inputs are copied into the shared input
  region (which the worker can only read; input buffers are not copied), one control message
  goes out, one comes back; the outputs are copied out of the output region, checked against
  the output specs with the inputs' bindings whenever their places are new (the worker is not
  trusted to have done it);
* **worker, every call**: the executor's ABI check again on a new layout, the Embedding index
  values always, the kernels, the output check, state.

The handle on one worker process (starting it, stopping and reaping it, saying how it ended)
is :class:`~plugin_host.sandbox.process.Worker`, in ``process.py``.

Camera frames travel without a copy: ``attach_pool``, ``handoff`` and ``feed_frames``
(:class:`~plugin_host.sandbox.camera_frames.CameraFrames`, in ``camera_frames.py``) give the
worker a camera pool's read-only descriptor and then one frame's metadata at a time; the worker
finds the planes in its read-only mapping of the pool (see ``worker.py``).

Recurrent state lives in the worker's executor; the host mirrors it as views of the state
outputs in the output region (so ``state`` needs no round trip). If the worker dies (crash,
signal, rlimit, timeout, malformed message), the call raises
:class:`~plugin_host.errors.WorkerDiedError` (or ``WorkerTimeoutError`` /
``SandboxProtocolError``), the recurrent state is reset with reason
``"worker restart"`` (the state lived in the dead worker; no contract allows resuming from a
guess), and a new worker is started before the error propagates - immediately the first time,
with a doubling back-off when failures follow each other without a successful call. The call
is **not** retried: a call that crashed the worker may crash it again, and a retry would run on
reset state without the caller knowing.
"""

from __future__ import annotations

import collections
import logging
import operator
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from abi import Signature, check_indices, dtypes

from ..errors import (ArtifactError, ArtifactFormatError, PluginHostError,
                      ProtectionUnavailableError, SandboxError, SandboxProtocolError,
                      WorkerDiedError, WorkerTimeoutError)
from ..executor import RecurrentState, check_mapping, entry_index_checks
from . import confine, ipc, placement, remote
from .camera_frames import CameraFrames
from .config import DEFAULT_PRELOAD, Protections, SandboxLimits, SandboxRequirements
from .process import BOOT, PROJECT_ROOT, Worker, describe_exit, kill_all, spawn

__all__ = ["SandboxedExecutor"]

_MAX_REGION = 2**31


_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtypes.from_numpy(dtype)
    return name


#: OpenBLAS settings of the host that the worker does not take: it sets its own thread count
_OWN_BLAS_SETTINGS = frozenset({"OPENBLAS_NUM_THREADS", "OPENBLAS_DEFAULT_NUM_THREADS"})


def blas_environment() -> dict[str, str]:
    """The host's ``OPENBLAS_*`` variables but the thread counts. OpenBLAS picks its kernels
    when it loads, by ``OPENBLAS_CORETYPE`` where given, else by probing the CPU; a host that
    pins the kernel set (for numbers that do not depend on which CPU the probe finds) must
    have the worker pin the same one, else the two compute the same graph with different
    kernels and their outputs differ in the last bits."""
    return {k: v for k, v in os.environ.items()
            if k.startswith("OPENBLAS_") and k not in _OWN_BLAS_SETTINGS}


class SandboxedExecutor(CameraFrames, RecurrentState):
    """Run a signed artifact's model in a sandbox worker, with the Executor's call surface.

    Parameters
    ----------
    artifact_path:
        The artifact file. It is opened once; that descriptor is verified here and handed to
        the worker.
    trust, rollback, audited_ops:
        As for :func:`plugin_host.artifacts.load_verified` (``rollback=None`` skips rollback
        protection deliberately).
    backend:
        Name of the inference backend the worker runs (provided by a plugin of
        ``backend_plugins`` or of ``plugin_modules``).
    backend_plugins:
        Entry-point names (group ``plugin_host``) of the installed inference-hardware plugins
        the worker loads, as trusted code, before it confines itself. No other entry point is
        imported in the worker (cameras, sinks and control plugins never are).
    plugin_modules:
        Import paths of model-layer / backend plugins to register in the worker's plugin
        manager. They are imported only inside the worker, after it is confined; never here.
    kernel_overrides:
        ``{op: plugin}``: the one plugin (by import path) allowed to replace the backend's
        kernel for ``op`` (the policy's ``kernels``). Any other replacement is refused at load.
    requirements, limits:
        :class:`SandboxRequirements` (a missing required protection refuses to start, with
        :class:`~plugin_host.errors.ProtectionUnavailableError`) and :class:`SandboxLimits`.
    preload_modules:
        Extra standard-library modules to import before confinement (see
        :data:`~plugin_host.sandbox.config.DEFAULT_PRELOAD`).
    read_paths:
        Extra paths the worker may read (Landlock allowlist), e.g. a plugin's data files.
    env:
        Extra environment variables for the worker (plugin configuration). Of the host's
        environment only OpenBLAS's settings are passed on (:func:`blas_environment`: its
        kernel choice and cache sizes, so that the worker computes with the host's kernels);
        nothing else.
    on_audit:
        Called with each audit event the worker's tripwire reports (``{"pid", "event",
        "args", "time"}``), e.g. to append it to the host's audit log. Events are also logged
        and kept in ``audit_events``.
    on_event:
        Called as ``on_event(kind, detail)`` with the worker's lifecycle events: ``"start"``
        (pid, artifact, the protections in force), ``"refuse"`` (a required protection is
        missing; the worker is not used), ``"died"`` (pid, how, during which step) and
        ``"restart"`` (the new pid, restarts so far). A sink that raises on ``"start"``
        refuses the start (an event that cannot be recorded does not happen); on the others
        its error is logged and ignored, so the call's own error propagates.
    artifact_limits:
        Size caps for verifying the artifact (``abi.artifact.Limits``; a policy's
        ``artifact_max_mb``); default the reader's caps.
    log:
        Logger for start-up reports, audit events, deaths and restarts.
    """

    def __init__(self, artifact_path: str | os.PathLike, *, trust, backend: str = "numpy",
                 backend_plugins: Iterable[str] = ("numpy_backend",),
                 plugin_modules: Iterable[str] = (),
                 kernel_overrides: Mapping[str, str] | None = None,
                 requirements: SandboxRequirements = SandboxRequirements(),
                 limits: SandboxLimits = SandboxLimits(),
                 audited_ops: Iterable[tuple[str, int]] = (), rollback=None,
                 preload_modules: Iterable[str] = (), read_paths: Iterable[str] = (),
                 env: Mapping[str, str] | None = None,
                 on_audit: Callable[[dict[str, Any]], None] | None = None,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None,
                 artifact_limits=None,
                 log: logging.Logger | None = None) -> None:
        from ..artifacts import load_verified

        self.log = log or logging.getLogger("plugin_host.sandbox")
        self.requirements = requirements
        self.limits = limits
        for name in ("call_timeout", "start_timeout"):
            value = getattr(limits, name)
            if value is not None and not (isinstance(value, (int, float))
                                          and not isinstance(value, bool) and 0 < value < 1e6):
                raise SandboxError(f"limits.{name} must be a positive number of seconds "
                                   f"(below 1e6), not {value!r}", where=f"limits.{name}")
        #: the CPU the calls' threads share (``SandboxLimits.cpu``), or None
        self.cpu = placement.resolve_cpu(limits.cpu, where="limits.cpu")
        self._cpus = placement.usable_cpus()
        #: threading ident -> native id of each thread this executor pinned (released on close)
        self._pinned_threads: dict[int, int] = {}
        self._placement_warned = False
        self.backend = backend
        self.backend_plugins = tuple(str(p) for p in backend_plugins)
        self.plugin_modules = tuple(str(m) for m in plugin_modules)
        self.kernel_overrides = dict(kernel_overrides or {})
        self._preload = list(dict.fromkeys([*DEFAULT_PRELOAD, *preload_modules]))
        self._read_paths = [os.path.realpath(p) for p in read_paths]
        self._env = {str(k): str(v) for k, v in (env or {}).items()}
        self._audit_sink = on_audit
        self._event_sink = on_event
        self._lock = threading.RLock()
        #: (read-only descriptor owned here, pool id) of the attached frame pool, or None
        self._pool: tuple[int, str] | None = None
        self._live: set[Worker] = set()
        self._finalizer = weakref.finalize(self, kill_all, self._live)
        self._worker: Worker | None = None
        self._closed = False
        self._failures = 0
        self._next_id = 0
        self.path = os.fspath(artifact_path)

        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise ArtifactFormatError("not a regular file", where="file", path=self.path)
            try:
                self.artifact = load_verified(f"/proc/self/fd/{self._fd}", trust=trust,
                                              rollback=rollback, backends={backend},
                                              audited_ops=audited_ops,
                                              **({"limits": artifact_limits}
                                                 if artifact_limits is not None else {}))
            except ArtifactError as exc:
                exc.path = self.path
                exc.context["path"] = self.path
                raise
        except BaseException:
            os.close(self._fd)
            raise

        graph = self.graph = self.artifact.graph
        self.manifest = self.artifact.manifest
        self._in_sig = Signature(graph.inputs, where="inputs")
        self._out_sig = Signature(graph.outputs, where="outputs")
        self._out_names = frozenset(s.name for s in graph.outputs)
        self._init_state(graph)
        self._placeholders = {}
        for name, spec in self._state_specs.items():
            zeros = np.zeros(spec.shape, dtypes.to_numpy(spec.dtype))
            zeros.flags.writeable = False
            self._placeholders[name] = zeros
        self._index_checks = entry_index_checks(graph)
        #: graph input -> vocabulary size, for every input that indexes an Embedding
        self.index_inputs = {name: vocab for name, vocab, _ in self._index_checks}
        self.calls = 0
        self.restarts = 0
        #: suspicious events the workers' audit hooks reported (most recent last)
        self.audit_events: collections.deque[dict[str, Any]] = collections.deque(maxlen=1000)
        self.protections: Protections | None = None
        self.fused: list[list[str]] = []
        self.last_worker_seconds: float | None = None
        self.last_pid: int | None = None
        self._buffers: dict[str, tuple[np.ndarray, int]] = {}
        self._buffers_end = 0
        self._out_cache: tuple | None = None
        #: (inputs' layout, packed head) of the last msgpack run message
        self._run_head: tuple | None = None
        #: the input buffers of the last call, when it passed nothing else: (framed, names,
        #: buffers, the steady call :meth:`_steady_call` made for them); None otherwise
        self._fast: tuple | None = None
        #: (inputs' names, dtypes and shapes, bindings) of the last full input check
        self._checked_key: tuple | None = None
        self._checked_bindings: dict[str, int] = {}
        #: the input the worker makes from camera frames (``feed_frames``), and its stand-in
        #: for the host-side checks
        self._frame_input: str | None = None
        self._frame_placeholder: dict[str, np.ndarray] = {}
        static = all(type(d) is int for spec in graph.outputs for d in spec.shape)
        self._static_out_bytes = self._output_bytes({}) if static else 0
        self.call_timeout = (limits.call_timeout if limits.call_timeout is not None
                             else max(2.0, 20 * self.manifest.latency_ms / 1000))
        try:
            self._worker = self._start()
        except BaseException:
            self.close()
            raise

    # -- lifecycle --------------------------------------------------------------------------------

    _sleep = staticmethod(time.sleep)

    @property
    def pid(self) -> int | None:
        """The running worker's pid (None between a death and the restart)."""
        return self._worker.pid if self._worker is not None else None

    def _blas_threads(self) -> int:
        if self.limits.blas_threads is not None:
            return self.limits.blas_threads
        try:
            return max(1, int(os.environ.get("OPENBLAS_NUM_THREADS", "")))
        except ValueError:
            return len(os.sched_getaffinity(0))

    def _bootstrap(self) -> dict[str, Any]:
        limits = self.limits
        return {
            "op": "bootstrap", "host_pid": os.getpid(),
            "sys_path": [p for p in sys.path if p and os.path.isabs(p)],
            "preload": self._preload, "backend_plugins": list(self.backend_plugins),
            "plugin_modules": list(self.plugin_modules),
            "kernel_overrides": self.kernel_overrides, "backend": self.backend,
            "manifest_sha256": self.artifact.manifest_sha256,
            "root_digest": self.manifest.root_digest, "rlimits": limits.rlimits(),
            "uid": limits.uid, "gid": limits.gid, "blas_threads": self._blas_threads(),
            "max_message": limits.max_message,
            "max_region": min(_MAX_REGION, limits.address_space),
            "read_paths": self._read_paths, "audit_per_event": 20,
        }

    def _start(self) -> Worker:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**blas_environment(), "OPENBLAS_NUM_THREADS": "1", "LC_ALL": "C.UTF-8",
               **self._env}
        try:
            proc = spawn(
                [sys.executable, "-I", "-c", BOOT, PROJECT_ROOT, str(child.fileno()),
                 str(self._fd)],
                pass_fds=(child.fileno(), self._fd), close_fds=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd="/",
                start_new_session=True)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        worker = Worker(proc, ipc.Channel(parent, self.limits.max_message))
        #: the newest worker's pid, kept after it ends (``pid`` is None then): for summaries
        self.last_pid = worker.pid
        self._live.add(worker)
        self._buffers, self._buffers_end = {}, 0  # they belonged to the old worker's region
        self._run_head = self._out_cache = self._fast = None  # what the old worker knew
        try:
            self._handshake(worker)
        except BaseException:
            self._discard(worker)
            raise
        self._colocate(worker)
        return worker

    def _colocate(self, worker: Worker) -> None:
        """Co-location (``SandboxLimits.cpu``, see ``placement.py``): the worker's main thread
        onto the calls' CPU, its other threads off it. Done at start and again after the
        first call (a runtime may start its threads lazily). A refusal (EPERM) is logged once;
        placement is about speed, never about protection."""
        if self.cpu is None:
            return
        try:
            placement.pin_worker(worker.pid, self.cpu, self._cpus)
        except OSError as exc:
            self._placement_failed(f"cannot place worker {worker.pid}'s threads: {exc}")

    def _pin_caller(self) -> None:
        ident = threading.get_ident()
        if ident in self._pinned_threads:
            return
        with self._lock:  # not while close releases the pins
            if ident in self._pinned_threads or self._closed:
                return
            self._pinned_threads[ident] = 0
            try:
                self._pinned_threads[ident] = placement.pin_thread(self.cpu)  # type: ignore
            except OSError as exc:
                self._placement_failed(f"cannot pin the calling thread: {exc}")

    def _placement_failed(self, why: str) -> None:
        if not self._placement_warned:
            self._placement_warned = True
            self.log.warning("sandbox: co-location on CPU %s is not in force: %s", self.cpu, why)

    def _handshake(self, worker: Worker) -> None:
        timeout = self.limits.start_timeout
        try:
            worker.chan.send(self._bootstrap())
        except OSError as exc:
            raise self._start_failure(worker, f"channel: {exc}") from None
        confined = self._expect(worker, "confined", timeout, during="start-up")
        report = confined.get("report")
        if type(report) is not dict:
            raise SandboxProtocolError("the worker's protection report is malformed")
        try:
            observed = confine.observe(worker.pid)
        except OSError as exc:
            raise self._start_failure(worker, f"cannot inspect /proc/{worker.pid}: {exc}")
        protections = self._protections(worker.pid, report, observed)
        missing = protections.missing(self.requirements, self.limits)
        if missing:
            first = next(iter(missing))
            self.log.error("sandbox worker %d refused: %s", worker.pid,
                           "; ".join(f"{k}: {v}" for k, v in missing.items()))
            self._event("refuse", {"pid": worker.pid, "missing": dict(missing)}, strict=False)
            raise ProtectionUnavailableError(
                "required sandbox protection(s) not in force: "
                + "; ".join(f"{k} ({v})" for k, v in missing.items()),
                protection=first, missing=missing)
        self.log.info("sandbox worker %d for %s %s: %s", worker.pid, self.manifest.name,
                      self.manifest.version, protections.summary())
        self._event("start", {"pid": worker.pid, "protections": protections.summary(),
                              "in_force": protections.in_force(self.limits)}, strict=True)
        try:
            worker.chan.send({"op": "go"})
        except OSError as exc:
            raise self._start_failure(worker, f"channel: {exc}") from None
        ready = self._expect(worker, "ready", timeout, during="start-up")
        self.protections = protections
        fused = ready.get("fused")
        self.fused = [list(map(str, c)) for c in fused] if type(fused) is list else []
        if worker.proc.stderr is not None:
            worker.proc.stderr.close()
            worker.proc.stderr = None
        in_bytes = self._layout_bytes(self.graph.inputs)
        self._region(worker, "in", in_bytes)
        self._region(worker, "out", self._layout_bytes(self.graph.outputs))

    @staticmethod
    def _layout_bytes(specs, bindings: Mapping[str, int] | None = None) -> int:
        """Bytes of ``specs`` laid out one after another, each aligned; a symbolic dim counts
        as its binding, else 1."""
        total = 0
        for spec in specs:
            n = dtypes.to_numpy(spec.dtype).itemsize
            for d in spec.shape:
                n *= d if type(d) is int else (bindings or {}).get(d, 1)
            total = ipc.align(total + n)
        return total

    def _protections(self, pid: int, report: dict[str, Any], seen: dict[str, Any]) -> Protections:
        problems = {str(k): str(v)[:300] for k, v in dict(report.get("problems") or {}).items()}
        threads = seen["threads"]
        seccomp = bool(threads) and all(t["seccomp"] == 2 for t in threads)
        nnp = bool(threads) and all(t["no_new_privs"] for t in threads)
        uids, gids = seen["uids"], seen["gids"]
        if len(set(uids)) != 1 or len(set(gids)) != 1:
            problems.setdefault("uid", f"mixed ids: uids {uids}, gids {gids}")
        uid = max(uids) if len(set(uids)) == 1 else 0
        gid = max(gids) if len(set(gids)) == 1 else 0
        if any(t["uid"] != uid for t in threads):
            problems.setdefault("uid", "threads run with different uids")
            uid = 0
        host_netns = os.stat("/proc/self/ns/net").st_ino
        netns = seen["netns"] != host_netns and report.get("netns") == seen["netns"]
        landlock_abi = report.get("landlock_abi")
        landlock_abi = landlock_abi if type(landlock_abi) is int else 0

        def strs(key: str) -> tuple[str, ...]:
            value = report.get(key)
            return tuple(str(v) for v in value) if type(value) is list else ()

        instructions = report.get("seccomp_instructions")
        return Protections(
            pid=pid, seccomp=seccomp and seen["seccomp"] == 2,
            seccomp_instructions=instructions if type(instructions) is int else 0,
            landlock_abi=landlock_abi, landlock_read_only=strs("landlock_read_only"),
            landlock_scopes=strs("landlock_scopes"),
            landlock_net_denied=strs("landlock_net_denied"), netns=netns,
            no_new_privs=nnp and seen["no_new_privs"], uid=uid, gid=gid,
            groups=tuple(seen["groups"]),
            capabilities=seen["cap_effective"] | seen["cap_permitted"],
            rlimits=dict(seen["rlimits"]), fds=dict(seen["fds"]), threads=len(threads),
            audit_hook=report.get("audit_hook") is True, problems=problems)

    def _start_failure(self, worker: Worker, why: str) -> SandboxError:
        rc = worker.stop(grace=0.5)
        detail = worker.stderr_text()
        text = f"sandbox worker {worker.pid} failed to start: {why}; {describe_exit(rc, None)}"
        if rc == ipc.START_FAILED:  # its start-up failed and even the report of it did
            text += (f" (start-up failed and could not say why, as when memory runs out: the "
                     f"worker's address space is limited to "
                     f"{self.limits.address_space / 2**20:g} MiB: SandboxLimits.address_space, "
                     f"a policy's [limits] memory_mb)")
        if detail:
            text += f"; stderr: {detail[-1500:]}"
        return WorkerDiedError(text, pid=worker.pid, returncode=rc, during="start-up")

    def _discard(self, worker: Worker) -> int | None:
        rc = worker.stop()
        worker.close()
        self._live.discard(worker)
        if self._worker is worker:
            self._worker = None
        return rc

    def close(self) -> None:
        """Stop the worker (asking first, then SIGKILL) and release everything."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker, self._worker = self._worker, None
            if worker is not None:
                try:
                    worker.chan.send({"op": "exit"})
                except (OSError, SandboxError):
                    pass
                worker.stop(grace=1.0)
                worker.close()
                self._live.discard(worker)
            kill_all(self._live)
            try:
                os.close(self._fd)
            except OSError:
                pass
            if self._pool is not None:
                os.close(self._pool[0])
                self._pool = None
            pinned, self._pinned_threads = self._pinned_threads, {}
            for tid in pinned.values():
                if tid:  # 0: the pin was refused
                    placement.release_thread(tid)

    def __enter__(self) -> SandboxedExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- messages ---------------------------------------------------------------------------------

    def _expect(self, worker: Worker, op: str, timeout: float, *, during: str,
                call_id: int | None = None) -> dict[str, Any]:
        """The next message ``op`` from ``worker`` (audit events are handled on the way).

        Start-up failures raise here; during calls a death, timeout or protocol violation
        goes through :meth:`_failed`.
        """
        deadline = time.monotonic() + timeout
        chan = worker.chan
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not chan.poll(remaining):
                if during == "start-up":
                    raise self._start_failure(worker, f"no answer within {timeout:g} s")
                raise self._failed(worker, during, timeout=timeout)
            try:
                message, _ = chan.recv()
            except SandboxProtocolError as exc:
                if during == "start-up":
                    raise self._start_failure(worker, str(exc))
                raise self._failed(worker, during, protocol=str(exc))
            except OSError as exc:
                message = None
                if during == "start-up":
                    raise self._start_failure(worker, f"channel: {exc}")
            if message is None:
                if during == "start-up":
                    raise self._start_failure(worker, "it closed its channel")
                raise self._failed(worker, during)
            kind = message["op"]
            if kind == "audit":
                self._on_audit(worker, message)
                continue
            if kind == "failed" and during == "start-up":
                rc = worker.stop(grace=1.0)
                error = remote.rebuild(message.get("error"), during="start-up")
                stage = remote._text(message.get("stage", "?"), 40)
                if isinstance(error, PluginHostError):
                    error.message = f"sandbox worker start-up ({stage}): {error.message}"
                    error.args = (error.message,)
                    error.context.setdefault("stage", stage)
                    error.context.setdefault("returncode", rc)
                raise error
            if (call_id is not None and type(message.get("id")) is int
                    and message["id"] < call_id and kind != "audit"):
                # the late answer to a call abandoned earlier (e.g. Ctrl-C): its outputs'
                # places may be new to us, so ask for them again on the next call
                if kind == "result":
                    self._out_cache = self._fast = None
                continue
            if kind == "error":  # the worker refused a message
                if call_id is not None and message.get("id") == call_id:
                    raise remote.rebuild(message.get("error"), during=during)
                self.log.warning("sandbox worker %d refused a message: %s", worker.pid,
                                 remote._text(str(message.get("error"))[:300]))
                continue
            if kind != op or (call_id is not None and message.get("id") != call_id):
                reason = f"expected {op!r}" + (f" for call {call_id}" if call_id else "") + \
                         f", got {remote._text(kind, 40)!r}"
                if during == "start-up":
                    raise self._start_failure(worker, reason)
                raise self._failed(worker, during, protocol=reason)
            return message

    def _request(self, worker: Worker, message: dict[str, Any], reply: str, *,
                 during: str, fds: Iterable[int] = ()) -> dict[str, Any]:
        """Send ``message`` with a fresh id and wait for the reply ``reply`` to it."""
        self._next_id += 1
        message["id"] = self._next_id
        self._send(worker, message, during=during, fds=fds)
        return self._expect(worker, reply, self.call_timeout, during=during,
                            call_id=self._next_id)

    def _request_binary(self, worker: Worker, op: int, frame: tuple | None, reply: str, *,
                        during: str) -> dict[str, Any] | int:
        """:meth:`_request` for a binary ``RUN`` or ``HANDOFF`` (see ``ipc.py``). The binary
        ``RESULT`` answering a ``RUN`` (the steady state) comes back as the worker's
        microseconds (int), taken without a dict (``Channel.recv_result``); anything else as
        :meth:`_expect` gives it."""
        self._next_id += 1
        call_id = self._next_id
        chan = worker.chan
        try:
            chan.send_packed(ipc.pack_call(op, call_id, frame))
        except (BrokenPipeError, ConnectionError):  # the worker is gone
            raise self._failed(worker, during) from None
        if op == ipc.RUN:
            us = chan.recv_result(call_id, self.call_timeout)
            if us is not None:
                return us
            if not chan.poll(0):  # nothing came in time
                raise self._failed(worker, during, timeout=self.call_timeout)
        return self._expect(worker, reply, self.call_timeout, during=during, call_id=call_id)

    def _send(self, worker: Worker, message: dict[str, Any], *, during: str,
              fds: Iterable[int] = ()) -> None:
        try:
            worker.chan.send(message, fds)
        except (BrokenPipeError, ConnectionError):  # the worker is gone
            raise self._failed(worker, during) from None

    def _event(self, kind: str, detail: dict[str, Any], *, strict: bool) -> None:
        """Hand a lifecycle event to ``on_event`` (see the class docstring)."""
        if self._event_sink is None:
            return
        detail = {"artifact": self.manifest.name, "version": self.manifest.version, **detail}
        if strict:
            self._event_sink(kind, detail)
            return
        try:
            self._event_sink(kind, detail)
        except Exception:  # a broken sink must not hide the error being raised
            self.log.exception("on_event failed")

    def _on_audit(self, worker: Worker, message: dict[str, Any]) -> None:
        event = remote._text(message.get("event", "?"), 80)
        raw = message.get("args")
        args = [remote._text(a, 200) for a in raw[:6]] if type(raw) is list else []
        record = {"pid": worker.pid, "event": event, "args": args, "time": time.time()}
        self.audit_events.append(record)
        self.log.warning("sandbox worker %d audit: %s %s", worker.pid, event, " ".join(args))
        if self._audit_sink is not None:
            try:
                self._audit_sink(dict(record))
            except Exception:  # a broken sink must not break the call
                self.log.exception("on_audit failed")

    def _failed(self, worker: Worker, during: str, *, timeout: float | None = None,
                protocol: str | None = None) -> SandboxError:
        """The worker died or must die: reap it, reset state, restart; the error to raise."""
        killed_by_host = (f"call timeout of {timeout:g} s" if timeout is not None else
                          f"protocol violation: {protocol}" if protocol is not None else None)
        rc = worker.stop(grace=0.0 if killed_by_host else 0.5)
        pid = worker.pid
        worker.close()
        self._live.discard(worker)
        if self._worker is worker:
            self._worker = None
        how = describe_exit(rc, killed_by_host)
        self._failures += 1
        self._reset_state("worker restart", tell_worker=False)
        self.log.warning("sandbox worker %d %s during %s; recurrent state reset", pid, how,
                         during)
        self._event("died", {"pid": pid, "how": how, "during": during, "returncode": rc},
                    strict=False)
        restarted = ""
        try:
            self._worker = self._restart()
            restarted = f"; restarted as pid {self._worker.pid}"
        except PluginHostError as exc:
            self.log.error("sandbox worker could not be restarted: %s", exc)
            restarted = f"; restart failed ({exc}), retried at the next call"
        text = f"sandbox worker {pid} {how} during {during}{restarted}; recurrent state reset"
        if protocol is not None:
            return SandboxProtocolError(text, pid=pid, returncode=rc, during=during)
        cls = WorkerTimeoutError if timeout is not None else WorkerDiedError
        return cls(text, pid=pid, returncode=rc, during=during)

    def _restart(self) -> Worker:
        if self._failures > 1:
            delay = min(self.limits.max_backoff,
                        self.limits.restart_backoff * 2 ** (self._failures - 2))
            self.log.info("sandbox worker restart in %.2f s (failure %d in a row)", delay,
                          self._failures)
            self._sleep(delay)
        worker = self._start()
        self.restarts += 1
        self.log.warning("sandbox worker restarted as pid %d (%d restart(s) so far)",
                         worker.pid, self.restarts)
        self._event("restart", {"pid": worker.pid, "restarts": self.restarts}, strict=False)
        return worker

    def _live_worker(self) -> Worker:
        if self._closed:
            raise SandboxError("this SandboxedExecutor is closed")
        worker = self._worker
        if worker is not None and worker.proc.poll() is not None:
            raise self._failed(worker, "idle")
        if worker is None:
            self._worker = worker = self._restart()
        return worker

    def _region(self, worker: Worker, kind: str, needed: int) -> ipc.Region:
        region = worker.regions.get(kind)
        if region is not None and region.size >= needed:
            return region
        size = max(needed, 2 * region.size if region is not None else 0)
        if size > min(_MAX_REGION, self.limits.address_space):
            raise SandboxError(f"a call needs {needed} bytes of shared {kind}put memory, over "
                               f"the limit")
        new = ipc.Region(size, name=f"plugin-host-{kind}", worker_writable=kind == "out")
        self._next_id += 1
        call_id = self._next_id
        try:
            self._send(worker, {"op": "region", "kind": kind, "id": call_id}, fds=[new.fd],
                       during="region")
        except BaseException:
            new.close()
            raise
        new.forget_fd()
        try:
            self._expect(worker, "region", self.call_timeout, during="region", call_id=call_id)
        except BaseException:
            new.close()
            raise
        if region is not None:
            region.close()
        worker.regions[kind] = new
        return new

    # -- per call ---------------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray], *,
            layouts: Mapping[str, str] | None = None, frame: Any = None
            ) -> dict[str, np.ndarray]:
        """Run one inference in the worker; returns every graph output by name (host copies).

        ``frame``: a :class:`~plugin_host.frames.Frame` of the attached pool (``attach_pool``)
        that the worker makes into the input chosen with :meth:`feed_frames`, from its
        read-only mapping of the pool (``inputs`` then holds the other inputs). The caller
        keeps its lease on the frame for the call.
        """
        check_mapping(inputs)
        if self.cpu is not None:
            self._pin_caller()
        with self._lock:
            fast = self._fast
            if (fast is not None and layouts is None and (frame is not None) is fast[0]
                    and len(inputs) == len(fast[1]) and self._worker is not None
                    and all(map(operator.is_, map(inputs.get, fast[1]), fast[2]))):
                return fast[3](frame)
            self._fast = None
            feed = dict(inputs)
            bindings = self._check_inputs(feed, layouts, frame is not None)
            worker = self._worker
            # a worker that died since the last call is found when the call is sent (the
            # socket's peer is gone) or answered (end of file): no liveness syscall per call
            if worker is None or self._closed:
                worker = self._live_worker()
            fields = self._frame_fields(worker, frame) if frame is not None else None

            placed, end = self._place(feed)
            region = worker.regions.get("in")
            if self._region(worker, "in", end) is not region:  # grown: buffers are gone
                self._buffers, self._buffers_end = {}, 0
                placed, end = self._place(feed)
            region = worker.regions["in"]
            key = []
            for name, array, at, copy in placed:
                if copy and array.size:
                    np.copyto(region.view(array.dtype, array.shape, at), array)
                key.append((name, array.dtype, array.shape, at))
            key = tuple(key)
            out_bytes = self._static_out_bytes or self._output_bytes(bindings)
            if out_bytes > worker.regions["out"].size:
                self._region(worker, "out", out_bytes)
            try:
                head = self._run_head
                if (not layouts and head is not None and head[0] == key
                        and self._out_cache is not None):
                    # the steady state: the same inputs' places as the last call, and the
                    # outputs' places known: one binary message each way
                    reply = self._request_binary(worker, ipc.RUN, fields, "result", during="run")
                else:
                    specs = [[name, _dtype_name(dt), list(shape), at]
                             for name, dt, shape, at in key]
                    message: dict[str, Any] = {"op": "run", "in": specs}
                    if layouts:
                        message["layouts"] = dict(layouts)
                    if fields is not None:
                        message["frame"] = list(fields)
                    if self._out_cache is None:
                        message["full"] = True
                    self._run_head = None
                    reply = self._request(worker, message, "result", during="run")
                    if not layouts:
                        self._run_head = (key, None)
                while (type(reply) is dict and reply.get("ok") is False
                       and type(reply.get("grow")) is int):
                    self._region(worker, "out", reply["grow"])
                    reply = self._request(worker, {"op": "collect"}, "result", during="run")
            except BaseException:
                self._run_head = None  # the worker may not have taken these places
                raise
            outputs = self._answered(worker, reply, bindings)
            if self.cpu is not None and not worker.placed_after_run:
                worker.placed_after_run = True
                self._colocate(worker)
            if not layouts and all(not copy for _, _, _, copy in placed):
                # every input was one of the input buffers: the next call with these very
                # buffers (and nothing else) can skip straight to the binary message
                arrays = {name: array for name, array, _, _ in placed}
                self._fast = (frame is not None, tuple(arrays), tuple(arrays.values()),
                              self._steady_call(worker, arrays, bindings))
            return outputs

    def _answered(self, worker: Worker, reply: dict[str, Any] | int,
                  bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
        """A call's reply (or the worker's microseconds from a binary ``RESULT``): the
        outputs (checked), the mirrored state, the counters."""
        self._failures = 0  # the worker answered: it is healthy
        if type(reply) is int:
            us = reply
            outputs = self._outputs_again(worker, bindings)
        else:
            if reply.get("ok") is not True:
                raise remote.rebuild(reply.get("error"), during="run")
            outputs = self._outputs(worker, reply, bindings)
            us = reply.get("us")
        #: the worker's own time for the last call (executor + writing outputs), seconds
        self.last_worker_seconds = us / 1e6 if type(us) is int else None
        # the mirrored state: views of the state outputs where the worker wrote them (they
        # stay the worker's state until its next answer; ``state`` copies them under the lock)
        self._state = self._out_cache[4]  # type: ignore[index]
        self.calls += 1
        return outputs

    def _steady_call(self, worker: Worker, buffers: Mapping[str, np.ndarray],
                     bindings: Mapping[str, int]) -> Callable[[Any], dict[str, np.ndarray]]:
        """The zero-copy steady state as one function: :meth:`run` with exactly ``buffers``
        (the input buffers of the call that just passed every check, and nothing else) goes
        straight here. Their names, dtypes, shapes and places were checked then; the Embedding
        index values are checked again on every call, before the binary ``RUN`` goes out; a
        binary ``RESULT`` means the outputs lie where the last checked result put them.

        It is what ``_request_binary``, ``Channel.recv_result`` and ``_answered`` do for such
        a call, with every lookup made once here: the host's share of a call runs on caches
        the model has just emptied, where each Python frame and attribute costs several times
        its warm price. Anything else that arrives (an error, an audit event, a late answer,
        end of file) goes the general path, :meth:`_expect`."""
        chan, cached = worker.chan, self._out_cache
        assert cached is not None and cached[0] is worker.regions["out"]
        views, state = cached[3], cached[4]
        checks = []
        for name, vocab, where in self._index_checks:
            array = buffers.get(name)
            if array is None:  # a stand-in (state or frame input): constant zeros, checked
                check_indices(self._placeholders.get(name, self._frame_placeholder.get(name)),
                              vocab, where)
            else:
                checks.append((array, vocab, where))
        send, recv_into, poll = chan.sock.send, chan.sock.recvmsg_into, chan.poll
        buffer = chan._buffer
        into = [buffer]
        pack, run_op = ipc._CALL.pack, ipc.RUN
        unpack, answer_size, result_op = ipc._ANSWER.unpack_from, ipc._ANSWER.size, ipc.RESULT
        timeout = self.call_timeout

        def call(frame: Any) -> dict[str, np.ndarray]:
            for array, vocab, where in checks:
                check_indices(array, vocab, where)
            try:
                framed, fields = ((False, ipc._NO_FRAME) if frame is None
                                  else (True, self._frame_fields(worker, frame)))
                self._next_id = call_id = self._next_id + 1
                slot, generation, frame_id, sof, eof = fields
                try:
                    send(pack(run_op, framed, slot, call_id, generation, frame_id, sof, eof))
                except (BrokenPipeError, ConnectionError):  # the worker is gone
                    raise self._failed(worker, "run") from None
                # the wait is a poll, then the receive: a blocking receive under SO_RCVTIMEO
                # saved one system call (about 4 us a call) but a signal handler restarts
                # the kernel's timer, so a stream of signals could hold a hung call open;
                # poll's remaining time is recomputed after each signal (PEP 475)
                if chan._held is None and poll(timeout):
                    try:
                        n, _, flags, _ = recv_into(into, 0)
                    except ConnectionError:  # the peer is gone: the next recv says so (EOF)
                        n, flags = 0, 0
                    if n == answer_size and not flags and buffer[0] == result_op:
                        _, us, answered = unpack(buffer)
                        if answered == call_id:
                            self._failures = 0
                            self.last_worker_seconds = us / 1e6
                            self._state = state
                            self.calls += 1
                            return {name: view.copy() for name, view in views}
                    chan._held = (n, flags, [])  # for the general path's recv
                elif not poll(0):
                    raise self._failed(worker, "run", timeout=timeout)
                reply = self._expect(worker, "result", timeout, during="run", call_id=call_id)
            except BaseException:
                self._run_head = self._fast = None
                raise
            return self._answered(worker, reply, bindings)

        return call

    def _check_index_values(self, inputs: Mapping[str, Any]) -> None:
        """Every Embedding index input in range (those left out: their stand-ins)."""
        for name, vocab, where in self._index_checks:
            array = inputs.get(name)
            if array is None:
                array = self._placeholders.get(name, self._frame_placeholder.get(name))
            check_indices(array, vocab, where)

    def _check_inputs(self, feed: dict[str, Any], layouts: Mapping[str, str] | None,
                      framed: bool) -> dict[str, int]:
        """The host-side input checks; the symbolic dims' bindings.

        The ABI check (names, dtypes, shapes, layouts) runs in full whenever the inputs'
        names, dtypes or shapes differ from the last call's; the same ones again (the steady
        state) cannot fail it, so its result is reused. Embedding indices are values: they are
        checked on every call.
        """
        try:
            key = (framed, *[(n, a.dtype, a.shape) for n, a in feed.items()])
        except AttributeError:  # not arrays: the full check says what is wrong
            key = None
        if layouts or key is None or key != self._checked_key:
            check = feed
            if framed:
                if self._frame_input is None:
                    raise SandboxError("a frame was given but no input is made from frames "
                                       "(feed_frames first)")
                if self._frame_input in feed:
                    raise SandboxError(f"input {self._frame_input!r} is made from the frame; "
                                       f"do not pass it too")
                check = {**self._frame_placeholder, **feed}
            if any(name not in check for name in self._placeholders):
                check = {**self._placeholders, **check}
            bindings = self._in_sig.check(check, layouts)
            self._checked_key = None if layouts else key
            self._checked_bindings = bindings
        else:
            bindings, check = self._checked_bindings, feed
        self._check_index_values(check)
        return bindings

    __call__ = run

    def _place(self, feed: Mapping[str, np.ndarray]) -> tuple[list, int]:
        """Where each input goes in the input region: a buffer from :meth:`input_buffers`
        stays where it is (no copy); everything else is copied after the buffers."""
        placed, end = [], self._buffers_end
        for name, array in feed.items():
            buffer = self._buffers.get(name)
            if buffer is not None and array is buffer[0]:
                placed.append((name, array, buffer[1], False))
                continue
            placed.append((name, array, end, True))
            end = ipc.align(end + array.nbytes)
        return placed, end

    def input_buffers(self, dims: Mapping[str, int] | None = None,
                      names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """Writable arrays in the shared input region, for zero-copy calls.

        One per input in ``names`` (default: every feed input, i.e. not the recurrent state),
        shaped by its spec, with symbolic dims taken from ``dims``. Fill them and pass them
        to :meth:`run`: an input that *is* its buffer is not copied (the worker reads it
        where it is, read-only). A new call of this method, a region that had to grow, or a
        worker restart retires the previous buffers (passing one then simply copies it).
        Do not write a buffer while a call is running.
        """
        dims = dict(dims or {})
        wanted = set(names) if names is not None else {
            s.name for s in self.graph.inputs if s.name not in self._state_specs}
        with self._lock:
            worker = self._live_worker()
            layout, end = [], 0
            for spec in self.graph.inputs:
                if spec.name not in wanted:
                    continue
                try:
                    shape = tuple(d if type(d) is int else int(dims[d]) for d in spec.shape)
                except KeyError as exc:
                    raise SandboxError(f"input {spec.name!r} has the symbolic dim "
                                       f"{exc.args[0]!r}: give its size in dims") from None
                dtype = dtypes.to_numpy(spec.dtype)
                layout.append((spec.name, shape, dtype, end))
                end = ipc.align(end + dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
            self._buffers, self._buffers_end, self._fast = {}, 0, None
            region = self._region(worker, "in", end)
            self._buffers = {name: (region.view(dtype, shape, at), at)
                             for name, shape, dtype, at in layout}
            self._buffers_end = end
            return {name: view for name, (view, _) in self._buffers.items()}

    def _output_bytes(self, bindings: Mapping[str, int]) -> int:
        return self._layout_bytes(self.graph.outputs, bindings)

    def _outputs(self, worker: Worker, reply: dict[str, Any],
                 bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
        if reply.get("same") is True:  # a binary result: where the last result said
            return self._outputs_again(worker, bindings)
        region = worker.regions["out"]
        cached = self._out_cache
        items = reply.get("out")
        if (cached is not None and cached[0] is region and cached[1] == items
                and cached[2] == bindings):
            # the very layout checked on an earlier call: copy out of the same views
            return {name: view.copy() for name, view in cached[3]}
        outputs: dict[str, np.ndarray] = {}
        try:
            if type(items) is not list:
                raise SandboxProtocolError("'out' must be a list")
            for item in items:
                name, dtype, shape, offset, count = ipc.placement(item, "output", region.size)
                if name not in self._out_names or name in outputs:
                    raise SandboxProtocolError(f"unexpected or repeated output {name[:60]!r}")
                outputs[name] = (region.view(dtype, shape, offset).copy() if count
                                 else np.zeros(shape, dtype))
        except SandboxProtocolError as exc:
            raise self._failed(worker, "run", protocol=f"malformed result: {exc}")
        self._out_sig.check(outputs, bindings=bindings)
        views = [(name, region.view(a.dtype, a.shape, offset)) for (name, _, _, offset), a
                 in zip(items, outputs.values())]
        by_name = dict(views)
        state = {src: by_name[dst] for src, dst in self.graph.state.items()}
        self._out_cache = (region, items, dict(bindings), views, state)
        return outputs

    def _outputs_again(self, worker: Worker, bindings: Mapping[str, int]
                       ) -> dict[str, np.ndarray]:
        """The outputs of a binary ``RESULT``: copied from the views the last full result
        gave (checked then; checked again only if the symbolic dims' bindings changed)."""
        cached = self._out_cache
        if cached is None or cached[0] is not worker.regions["out"]:
            raise self._failed(worker, "run", protocol="a result 'where the last one was' "
                               "with no earlier result")
        if cached[2] != bindings:
            self._out_sig.check({name: view for name, view in cached[3]}, bindings=bindings)
        return {name: view.copy() for name, view in cached[3]}

    # -- state ------------------------------------------------------------------------------------

    @property
    def state(self) -> dict[str, np.ndarray]:
        """A copy of the recurrent state that the next call will use (taken between calls:
        the mirror is a view of the output region, which a running call writes)."""
        with self._lock:
            return RecurrentState.state.fget(self)  # type: ignore[attr-defined]

    def _reset_state(self, reason: str, *, tell_worker: bool) -> None:
        self._count_reset(reason, self.log)
        if tell_worker and self._worker is not None:
            self._request(self._worker, {"op": "reset", "reason": reason}, "reset",
                          during="reset")

    def reset(self, reason: str = "explicit") -> None:
        """Zero the recurrent state; counted in ``resets`` and ``resets_by_reason``."""
        with self._lock:
            if self._closed:
                raise SandboxError("this SandboxedExecutor is closed")
            self._reset_state(reason, tell_worker=True)

    def check_golden(self) -> None:
        """Acceptance in the sandbox: run every golden case of the artifact (state inputs given
        explicitly) and compare with the declared tolerances; GoldenMismatchError otherwise.
        The recurrent state is reset afterwards (reason ``"acceptance"``)."""
        with self._lock:
            for i, (inputs, _) in enumerate(self.artifact.golden_cases()):
                self.artifact.compare_golden(i, self.run(dict(inputs)),
                                             where=f"on backend {self.backend!r} in the sandbox")
            self.reset("acceptance")

    def ping(self) -> float:
        """Round trip to the worker, in seconds (a health check)."""
        with self._lock:
            worker = self._live_worker()
            start = time.perf_counter()
            self._request(worker, {"op": "ping"}, "pong", during="ping")
            return time.perf_counter() - start
