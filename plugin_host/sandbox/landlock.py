"""Landlock for the sandbox worker, over the raw system calls (x86_64 numbers) with ctypes.

One ruleset, built for the best ABI the kernel offers:

* file system: every access right the ABI knows is *handled*; the only rules grant read access
  (``READ_FILE``, plus ``READ_DIR`` for directories) beneath the paths the worker needs. So
  nothing can be written, created, removed, renamed, truncated or executed anywhere, and
  nothing outside the allowlist can be read;
* network (ABI 4+): TCP bind and connect are handled with no rule, so both are denied;
* scoping (ABI 6+): signals and abstract unix sockets may not reach outside the domain (the
  host and every other process).

Landlock applies to the calling thread (and the threads it creates later). The worker
restricts itself while it is single-threaded, so every thread of the worker is covered;
:meth:`Ruleset.restrict` refuses to run while other threads exist.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["LandlockError", "LandlockResult", "Ruleset", "abi_version"]

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REFER = 1 << 13      # ABI 2
FS_TRUNCATE = 1 << 14   # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0   # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


class LandlockError(OSError):
    """Landlock is unavailable or refused the ruleset."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class LandlockResult:
    """What :func:`restrict` put in force."""

    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    read_only: tuple[str, ...]
    skipped: tuple[str, ...] = field(default=())

    @property
    def net_denied(self) -> tuple[str, ...]:
        return tuple(n for bit, n in ((NET_BIND_TCP, "tcp_bind"), (NET_CONNECT_TCP, "tcp_connect"))
                     if self.handled_net & bit)

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(n for bit, n in ((SCOPE_SIGNAL, "signal"),
                                      (SCOPE_ABSTRACT_UNIX_SOCKET, "abstract_unix_socket"))
                     if self.scoped & bit)


def _syscall():
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.syscall
    fn.restype = ctypes.c_long
    return fn


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable or disabled."""
    syscall = _syscall()
    rc = syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.c_void_p(None), ctypes.c_size_t(0),
                 ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(rc) if rc > 0 else 0


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: cannot tell
        return 1


class Ruleset:
    """A Landlock ruleset under construction: create it (and add its rules) while the process
    can still open every allowed path, then :meth:`restrict` after dropping privileges.

    ``read_only`` paths that cannot be opened are skipped and listed in ``skipped``.
    ``max_abi`` caps the ABI used (tests). Raises :class:`LandlockError` when Landlock is
    unavailable or refuses a rule.
    """

    def __init__(self, read_only: Iterable[str], *, max_abi: int | None = None) -> None:
        abi = abi_version()
        if max_abi is not None:
            abi = min(abi, max_abi)
        if abi < 1:
            raise LandlockError(errno.ENOSYS, "Landlock is not available on this kernel")
        self.abi = abi
        self.handled_fs = _fs_rights(abi)
        self.handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
        self.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
        attr = _RulesetAttr(self.handled_fs, self.handled_net, self.scoped)
        size = 24 if abi >= 6 else 16 if abi >= 4 else 8
        self._syscall = _syscall()
        fd = self._syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr),
                           ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            e = ctypes.get_errno()
            raise LandlockError(e, f"landlock_create_ruleset: {os.strerror(e)}")
        self.fd: int | None = int(fd)
        self.allowed: list[str] = []
        self.listed: list[str] = []
        self.skipped: list[str] = []
        try:
            for path in dict.fromkeys(read_only):
                self._allow_read(path)
        except BaseException:
            self.close()
            raise

    def allow_list(self, path: str) -> None:
        """Allow listing the directory ``path`` and those beneath it (names only: no file in
        them becomes readable by this)."""
        self._allow_read(path, list_only=True)

    def _allow_read(self, path: str, list_only: bool = False) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            self.skipped.append(path)
            return
        try:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            if list_only and not is_dir:
                return
            access = (FS_READ_DIR if list_only
                      else FS_READ_FILE | (FS_READ_DIR if is_dir else 0))
            rule = _PathBeneathAttr(access & self.handled_fs, fd)
            rc = self._syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(self.fd),
                               ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule),
                               ctypes.c_uint32(0))
            if rc != 0:
                e = ctypes.get_errno()
                raise LandlockError(e, f"landlock_add_rule({path}): {os.strerror(e)}")
            (self.listed if list_only else self.allowed).append(path)
        finally:
            os.close(fd)

    def restrict(self) -> LandlockResult:
        """Enforce the ruleset on this process, which must be single-threaded and have
        ``no_new_privs`` set (or CAP_SYS_ADMIN). Closes the ruleset."""
        if self.fd is None:
            raise LandlockError(errno.EBADF, "the ruleset was already used or closed")
        try:
            threads = _thread_count()
            if threads != 1:
                raise LandlockError(errno.EBUSY, f"Landlock must be applied while "
                                                 f"single-threaded; this process has "
                                                 f"{threads} threads")
            rc = self._syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(self.fd),
                               ctypes.c_uint32(0))
            if rc != 0:
                e = ctypes.get_errno()
                raise LandlockError(e, f"landlock_restrict_self: {os.strerror(e)}")
        finally:
            self.close()
        return LandlockResult(self.abi, self.handled_fs, self.handled_net, self.scoped,
                              tuple(self.allowed), tuple(self.skipped))

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
