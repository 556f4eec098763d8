"""Killing a sandbox worker with SIGKILL while it executes a call (shared by the daemon tests).

:func:`kill_during_call` wraps an executor's ``run``: from call ``after`` on, a watcher thread
started with the call polls the worker's scheduler state in ``/proc/PID/stat``; when the worker
runs (``R``) it stops it (SIGSTOP), and only then decides. A stopped worker sends nothing, so
the call is still unanswered exactly when nothing is waiting on the host's end of the socket
(or held by the host), the host has not counted an answer, and the calling thread is blocked
in the wait for the reply (``poll``): then the worker is killed (SIGKILL) in the middle of the
call, which must raise. Otherwise the worker was caught just after answering (still running on
its way back to its receive); it is continued (SIGCONT), the call returns, and the next call
tries again.
"""

from __future__ import annotations

import os
import platform
import select
import signal
import threading
import time
from typing import Any

from plugin_host.errors import WorkerDiedError


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:][:1].decode()  # the field after "(comm)"


# the system calls the host waits for a reply in (Channel.poll: poll, or ppoll where the C
# library makes poll of it), by machine; the kernel's wait channel names the same wait
_POLL_CALLS = {"x86_64": ("7", "271"), "aarch64": ("73",)}.get(platform.machine(), ())


def _waiting_in_poll(tid: int) -> bool:
    """Thread ``tid`` of this process is blocked in poll (the wait for a worker's reply)."""
    task = f"/proc/self/task/{tid}"
    try:
        with open(f"{task}/wchan") as f:
            if "poll" in f.read():
                return True
        with open(f"{task}/syscall") as f:
            return f.read().split(" ", 1)[0] in _POLL_CALLS
    except OSError:
        return False


def _answered(ex: Any, calls: int, done: threading.Event) -> bool:
    """With the worker stopped: the call has its answer (returned, counted, held by the
    host, or waiting on the host's end of the socket)."""
    worker = ex._worker
    if done.is_set() or ex.calls != calls or worker is None:
        return True
    chan = worker.chan
    if chan._held is not None:
        return True
    waiting = select.poll()
    waiting.register(chan.sock, select.POLLIN)
    return bool(waiting.poll(0))


class KillDuringCall:
    """What happened: ``killed_pid``, ``raised`` (the killed call raised WorkerDiedError),
    ``calls`` (every call), ``after_kill`` (calls after the killed one), ``on_next`` (what
    the hook returned on the first call after the kill)."""

    def __init__(self) -> None:
        self.calls = 0
        self.killed_pid: int | None = None
        self.raised = False
        self.after_kill = 0
        self.on_next: Any = None


def _arm(ex: Any, after: int, on_next, attempt) -> KillDuringCall:
    """Wrap ``ex.run``: calls before ``after`` and after the kill pass through (``on_next()``
    runs on the first call after it); from call ``after`` on, ``attempt(original, inputs,
    kwargs, result)`` makes the call and tries to kill the worker."""
    original = ex.run
    result = KillDuringCall()

    def run(inputs, **kwargs):
        result.calls += 1
        if result.killed_pid is not None:
            result.after_kill += 1
            if result.after_kill == 1 and on_next is not None:
                result.on_next = on_next()
            return original(inputs, **kwargs)
        if result.calls < after:
            return original(inputs, **kwargs)
        return attempt(original, inputs, kwargs, result)

    ex.run = run
    return result


def kill_during_call(ex: Any, *, after: int = 3, on_next=None) -> KillDuringCall:
    """Arm ``ex`` (see the module docstring); ``on_next()`` runs on the first call after the
    kill (e.g. to sample the pool's counters once the worker is back)."""

    def attempt(original, inputs, kwargs, result):
        pid, calls, caller = ex.pid, ex.calls, threading.get_native_id()
        done = threading.Event()
        killed: list[int] = []

        def mid_call() -> bool:
            """Stop the running worker; True when the call is still unanswered (the worker
            is then left stopped for the kill), else it is continued."""
            os.kill(pid, signal.SIGSTOP)
            while _state(pid) not in ("T", None, "Z"):
                time.sleep(0.0005)
            while True:
                if _state(pid) in (None, "Z") or _answered(ex, calls, done):
                    break
                if _waiting_in_poll(caller) and not _answered(ex, calls, done):
                    return True  # checked again: the host took nothing in between
                time.sleep(0.0005)
            os.kill(pid, signal.SIGCONT)
            return False

        def watch() -> None:
            while not done.is_set():
                if _state(pid) == "R":
                    if mid_call():
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    return

        watcher = threading.Thread(target=watch, name="test-kill-watch", daemon=True)
        watcher.start()
        try:
            answer = original(inputs, **kwargs)
        except WorkerDiedError:
            if killed:
                result.raised = True
            raise
        finally:
            done.set()
            watcher.join()
            if killed:
                result.killed_pid = killed[0]
        assert not killed, "the worker was killed before it answered, yet the call returned"
        return answer

    return _arm(ex, after, on_next, attempt)


def kill_before_call(ex: Any, *, after: int = 3, on_next=None) -> KillDuringCall:
    """Arm ``ex``: call ``after`` first kills the (idle) worker with SIGKILL and waits until it
    is dead, then runs, so that call must fail and the host must restart the worker."""

    def attempt(original, inputs, kwargs, result):
        pid = ex.pid
        os.kill(pid, signal.SIGKILL)
        result.killed_pid = pid
        deadline = time.monotonic() + 10.0
        while _state(pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.001)
        try:
            return original(inputs, **kwargs)
        except WorkerDiedError:
            result.raised = True
            raise

    return _arm(ex, after, on_next, attempt)
