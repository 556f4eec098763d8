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
is :class:`~plugin_host.sandbox.process.Worker`, in ``process.py``; what the executor does with
it (the start-up handshake and the protections' check, the messages and their timeouts, a
death's report and the restart, ``close``) is
:class:`~plugin_host.sandbox.supervisor.WorkerSupervisor`'s, in ``supervisor.py``.

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
import stat
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from abi import Signature, check_indices, dtypes

from ..errors import ArtifactError, ArtifactFormatError, SandboxError, SandboxProtocolError
from ..executor import RecurrentState, check_mapping, entry_index_checks
from . import ipc, placement, remote
from .camera_frames import CameraFrames
from .config import DEFAULT_PRELOAD, Protections, SandboxLimits, SandboxRequirements
from .process import Worker, kill_all
from .supervisor import WorkerSupervisor

__all__ = ["SandboxedExecutor"]

_DTYPE_NAMES: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtypes.from_numpy(dtype)
    return name


class SandboxedExecutor(CameraFrames, WorkerSupervisor, RecurrentState):
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
        environment only OpenBLAS's settings are passed on
        (:func:`~plugin_host.sandbox.supervisor.blas_environment`: its kernel choice and cache
        sizes, so that the worker computes with the host's kernels); nothing else.
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

        try:  # not blocking: a FIFO at the path is refused below, not waited on
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ArtifactError(f"cannot open artifact {self.path}: {exc.strerror}",
                                path=self.path) from None
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
        #: how it is made: None for the two-frame YUV stack, else its colour image's format
        self._frame_image: Any = None
        static = all(type(d) is int for spec in graph.outputs for d in spec.shape)
        self._static_out_bytes = self._output_bytes({}) if static else 0
        self.call_timeout = (limits.call_timeout if limits.call_timeout is not None
                             else max(2.0, 20 * self.manifest.latency_ms / 1000))
        try:
            self._worker = self._start()
        except BaseException:
            self.close()
            raise

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> SandboxedExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
