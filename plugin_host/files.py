"""Opening the files that users and policy files name: never blocking on a FIFO or a device.

``open()`` of a FIFO waits until the other end opens it, so a policy, key, record, recording
or input path that names one (by mistake or by malice) would hang the host. Every reader of
such a path opens it through :func:`open_regular`, and the audit log through
:func:`open_regular_append`: ``O_NONBLOCK`` at open, then anything but a regular file is
refused with :class:`NotARegularFile`, an ``OSError`` whose ``strerror`` is ``"not a
regular file"``, so the callers' existing ``except OSError`` turn it into their own typed,
one-line error.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

__all__ = ["NotARegularFile", "open_regular", "open_regular_append"]


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a folder."""

    def __init__(self, path: str | os.PathLike) -> None:
        super().__init__(errno.EINVAL, "not a regular file", os.fspath(path))


def _checked(fd: int, path: str | os.PathLike) -> int:
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading, binary, if it is a regular file (symbolic links
    followed); OSError otherwise (:class:`NotARegularFile`, or the open's own)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    return os.fdopen(_checked(fd, path), "rb")


def open_regular_append(path: str | os.PathLike, mode: int = 0o600) -> int:
    """A descriptor appending to ``path``, created with ``mode`` if missing, if it is a
    regular file; OSError otherwise."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO that nothing reads
            raise NotARegularFile(path) from None
        raise
    return _checked(fd, path)
