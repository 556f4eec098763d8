"""The worker's PEP 578 audit hook: a tripwire that reports suspicious calls to the host.

It is installed after the worker has confined itself and before any plugin code runs. It
*never* blocks anything: code in the worker can bypass Python's audit events (ctypes, a C
extension) and even tamper with the hook, so the boundary is the kernel (seccomp, Landlock,
uid, namespaces, rlimits). What the hook adds is a record: each suspicious event is sent to the
host at once (so it arrives even if the worker dies right after), where it is logged and kept
in ``SandboxedExecutor.audit_events``. Each event name is reported at most ``per_event`` times
per worker life, so a loop cannot flood the host.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable

__all__ = ["SUSPICIOUS", "install"]

#: Events reported. ``open`` only when it asks for write access.
SUSPICIOUS = frozenset({
    # network
    "socket.__new__", "socket.bind", "socket.connect", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
    "http.client.connect", "urllib.Request", "ftplib.connect", "smtplib.connect",
    # processes and signals
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill", "os.startfile",
    # native code and memory
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata",
    "ctypes.cdata/buffer", "ctypes.call_function", "ctypes.string_at", "ctypes.wstring_at",
    "ctypes.addressof", "mmap.__new__",
    # files
    "open", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
    "os.truncate", "os.link", "os.symlink", "os.utime", "os.setxattr", "os.removexattr",
    "shutil.rmtree", "shutil.copyfile", "shutil.move", "shutil.chown",
    # limits, introspection and tampering
    "resource.setrlimit", "resource.prlimit", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "sys._getframe", "sys._current_frames", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "object.__setattr__", "object.__delattr__",
    "marshal.loads", "pickle.find_class", "code.__new__", "os.putenv", "os.unsetenv",
    "fcntl.ioctl", "webbrowser.open",
})

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_MAX_ARG = 200
_MAX_ARGS = 6


def _is_write_open(args: tuple) -> bool:
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 else 0
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _summary(args: tuple) -> list[str]:
    out = []
    for a in args[:_MAX_ARGS]:
        try:
            text = repr(a)
        except Exception:
            text = f"<{type(a).__name__}>"
        out.append(text[:_MAX_ARG])
    return out


class Auditor:
    """The installed hook's state; ``quiet()`` silences the worker's own calls."""

    def __init__(self, send: Callable[[dict[str, Any]], None], per_event: int) -> None:
        self.send = send
        self.per_event = per_event
        self.counts: dict[str, int] = {}
        self._local = threading.local()

    def __call__(self, event: str, args: tuple) -> None:
        if event not in SUSPICIOUS:
            return
        if event == "open" and not _is_write_open(args):
            return
        local = self._local
        if getattr(local, "busy", False):
            return
        local.busy = True
        try:
            n = self.counts.get(event, 0) + 1
            self.counts[event] = n
            if n <= self.per_event:
                self.send({"op": "audit", "event": event, "args": _summary(args), "count": n})
        except Exception:  # a tripwire never breaks the audited call
            pass
        finally:
            local.busy = False

    def quiet(self) -> "_Quiet":
        return _Quiet(self._local)


class _Quiet:
    def __init__(self, local: threading.local) -> None:
        self._local = local

    def __enter__(self) -> None:
        self._local.busy = True

    def __exit__(self, *exc: object) -> None:
        self._local.busy = False


def install(send: Callable[[dict[str, Any]], None], *, per_event: int = 20) -> Auditor:
    """Add the hook (for the rest of the process's life); returns its state."""
    auditor = Auditor(send, per_event)
    sys.addaudithook(auditor)
    return auditor
