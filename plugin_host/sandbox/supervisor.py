"""Supervision of the sandbox worker process: :class:`WorkerSupervisor`, part of
:class:`~plugin_host.sandbox.client.SandboxedExecutor`.

Starting a worker (its bootstrap message, the handshake, the protections it reports checked
against what ``/proc`` shows and against the requirements, its shared regions, co-location on
the calls' CPU), the messages exchanged with it (every wait bounded by a timeout, audit events
handled on the way, a late answer to an abandoned call skipped), and what happens when it dies
or misbehaves: it is reaped, the recurrent state is reset, the death reported and a new worker
started, with a doubling back-off when failures follow each other; and ``close``.

It uses the executor's attributes set in ``SandboxedExecutor.__init__`` (limits, requirements,
the artifact and its descriptor, the lock, the sinks) and its ``_reset_state``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Iterable, Mapping

from abi import dtypes

from ..errors import (PluginHostError, ProtectionUnavailableError, SandboxError,
                      SandboxProtocolError, WorkerDiedError, WorkerTimeoutError)
from ..stop_signals import POLL_S, check_stop
from . import confine, ipc, placement, remote
from .config import Protections
from .process import BOOT, PROJECT_ROOT, Worker, describe_exit, kill_all, spawn

__all__ = ["WorkerSupervisor", "blas_environment"]

#: the largest shared region (input or output) a worker is given
MAX_REGION = 2**31

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


class WorkerSupervisor:
    """Start, supervise, restart and stop the worker of a sandboxed executor."""

    # -- start-up and stop ------------------------------------------------------------------------

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
            "max_region": min(MAX_REGION, limits.address_space),
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
            if during == "start-up":  # a stop the command defers ends it (worker discarded)
                check_stop()
                if remaining > POLL_S and not chan.poll(POLL_S):
                    continue
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
        if size > min(MAX_REGION, self.limits.address_space):
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
