"""Killing a sandbox worker with SIGKILL while it executes a call (shared by the daemon tests).

:func:`kill_during_call` wraps an executor's ``run``: from call ``after`` on, a watcher thread
started with the call polls the worker's scheduler state in ``/proc/PID/stat`` and sends
SIGKILL as soon as the worker is running (``R``): it was asleep waiting for a request before
the call, so it is running that call. A call that returns before the watcher saw the worker
run is not counted and the next call tries again; the call that was killed must raise.
"""

from __future__ import annotations

import os
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
        pid = ex.pid
        done = threading.Event()
        killed: list[int] = []

        def watch() -> None:
            while not done.is_set():
                if _state(pid) == "R":
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return

        watcher = threading.Thread(target=watch, name="test-kill-watch", daemon=True)
        watcher.start()
        try:
            return original(inputs, **kwargs)
        except WorkerDiedError:
            if killed:
                result.raised = True
            raise
        finally:
            done.set()
            watcher.join()
            if killed:
                result.killed_pid = killed[0]

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
