"""The host's handle on one sandbox worker process.

:func:`spawn` starts it (always from one long-lived thread, see :data:`_SPAWNER`) with the
command line :data:`BOOT` and :data:`PROJECT_ROOT`; :class:`Worker` holds the process, the
host's end of its channel, its shared-memory regions and what it has been told (frame pool,
frame feed, thread placement); :meth:`Worker.stop` ends and reaps it, :func:`kill_all` every
worker of an executor (its finalizer); :func:`describe_exit` says how it ended and
:func:`exited` whether it may have, without reaping it.

What the worker process does is in ``worker.py`` (its own ``Worker`` is its main loop); what
the host asks of it, and when, is :class:`~plugin_host.sandbox.client.SandboxedExecutor`'s.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import plugin_host

from . import ipc

__all__ = ["BOOT", "PROJECT_ROOT", "Worker", "spawn", "describe_exit", "exited", "kill_all"]

#: the worker's ``python -I -c`` program: argv[1] is :data:`PROJECT_ROOT`, the rest goes to
#: ``worker.main`` (its channel's and the artifact's descriptors)
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
        "from plugin_host.sandbox.worker import main; main(sys.argv[2:])")
PROJECT_ROOT = str(Path(plugin_host.__file__).resolve().parent.parent)
_SIGNAL_HINTS = {
    signal.SIGXCPU: "CPU time limit (RLIMIT_CPU)",
    signal.SIGSEGV: "memory fault",
    signal.SIGBUS: "memory fault",
    signal.SIGSYS: "seccomp killed it",
    signal.SIGXFSZ: "file size limit",
}


def describe_exit(returncode: int | None, killed_by_host: str | None) -> str:
    if returncode is None:
        return "did not exit"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
            name = sig.name
        except ValueError:
            sig, name = None, f"signal {-returncode}"
        if killed_by_host:
            return f"killed by the host ({killed_by_host})"
        hint = _SIGNAL_HINTS.get(sig) if sig is not None else None
        return f"killed by {name}" + (f" ({hint})" if hint else "")
    return f"exited with status {returncode}"


def exited(pid: int) -> bool:
    """Whether the worker may have exited (a zombie, or already reaped): without reaping it,
    so that the full liveness check (``Popen.poll`` in ``SandboxedExecutor._live_worker``)
    still sees it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except OSError:  # reaped already (ECHILD) or unknown: let the full check decide
        return True


#: Workers are started from this one thread. The worker arms PR_SET_PDEATHSIG, which Linux
#: ties to the *thread* that started it, not the process: a worker started from a short-lived
#: thread (a restart inside a caller's thread, a hot-swap) would be killed when that thread
#: ends. The pool's single thread lives as long as the host process.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="sandbox-spawner")


def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen:
    return _SPAWNER.submit(subprocess.Popen, *args, **kwargs).result()


class Worker:
    """One worker process and the host's end of its channel."""

    def __init__(self, proc: subprocess.Popen, chan: ipc.Channel) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.chan = chan
        self.regions: dict[str, ipc.Region] = {}
        #: the id of the frame pool this worker has mapped (``attach_pool``), or None
        self.pool_id: str | None = None
        #: the input this worker makes from frames (``feed_frames``), or None
        self.feed: str | None = None
        #: its threads were placed after its first call (``SandboxLimits.cpu``)
        self.placed_after_run = False

    def stderr_text(self) -> str:
        """What the worker wrote to stderr before its channel was up (start-up failures)."""
        if self.proc.stderr is None:
            return ""
        try:
            os.set_blocking(self.proc.stderr.fileno(), False)
            data = self.proc.stderr.read(8192) or b""
        except (OSError, ValueError):
            data = b""
        return data.decode("utf-8", "replace").strip()

    def stop(self, grace: float = 0.0) -> int | None:
        """End the process (SIGKILL after ``grace`` seconds) and reap it; its return code."""
        if grace > 0:
            try:
                return self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            return None

    def close(self) -> None:
        self.chan.close()
        for region in self.regions.values():
            region.close()
        self.regions.clear()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def kill_all(live: set) -> None:
    for worker in list(live):
        try:
            worker.stop()
            worker.close()
        except Exception:
            pass
    live.clear()
