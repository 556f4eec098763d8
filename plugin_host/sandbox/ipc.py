"""The channel between the host and its sandbox worker, and the shared memory tensors cross.

**Control messages** are msgpack maps over a ``SOCK_SEQPACKET`` unix socket pair: the kernel
keeps message boundaries, so one ``send`` is one message (atomic even when several worker
threads send), and a message longer than the cap is detected (``MSG_TRUNC``) instead of
being split. Every message has an ``"op"`` (str). Decoding refuses anything that is not a map
with str keys, ext types, and anything over the cap: a malformed message is a
:class:`~plugin_host.errors.SandboxProtocolError`, never a crash. Descriptors travel only from
the host to the worker (``SCM_RIGHTS``); the host reads without a control buffer, so any
descriptor the worker tries to send it is discarded by the kernel (and the message refused).

**Tensors** never go through the socket and are never pickled. They cross in two shared
memory regions (memfd) created by the host:

* the *input* region: the host maps it read-write and writes the call's inputs; then it seals
  the memfd against growing, shrinking and any future writable mapping
  (``F_SEAL_FUTURE_WRITE``) and hands the worker a *read-only* descriptor. The worker can only
  map it read-only, and ``mprotect`` cannot make that mapping writable;
* the *output* region: sealed against resizing only (so the worker cannot truncate it under
  the host's mapping); the worker maps it read-write and writes the outputs, the host maps it
  read-only and copies them out.

A region grows by replacing it with a bigger one (sent with a ``region`` message).

**The per-call hot path** uses fixed-size binary messages instead of msgpack maps (a msgpack
map starts with a byte in ``0x80-0x8f``, ``0xde`` or ``0xdf``; a binary message starts with
its op byte below and has exactly its struct's size, else it is refused):

* ``RUN`` (host -> worker): run again with the inputs where the last msgpack ``run`` put
  them, optionally with one camera frame of the attached pool (slot, generation, frame id and
  timestamps: the pool's header gives the rest);
* ``HANDOFF`` (host -> worker): one frame of the attached pool, by the same fields;
* ``RESULT`` (worker -> host): the call succeeded and the outputs are where the last msgpack
  ``result`` put them (the host re-uses the views it checked then), with the worker's time;
* ``HANDED`` (worker -> host): a hand-off succeeded, with its CRC.

:func:`unpack` turns either kind into the same dict a msgpack message would give, so the
receiving code has one path; anything unusual (an error, a new layout) goes as msgpack. The
host's per-call receive (:meth:`Channel.recv_result`) takes the ``RESULT`` it waits for as
bare values, without a dict; any other message stays for :meth:`Channel.recv`.
"""

from __future__ import annotations

import array
import fcntl
import mmap
import os
import select
import socket
import struct
from typing import Any, Iterable, Mapping

import msgpack
import numpy as np

from abi import dtypes
from abi.spec import MAX_RANK

from ..errors import SandboxProtocolError

__all__ = ["ALIGN", "START_FAILED", "Channel", "Region", "align", "map_region", "pack",
           "unpack", "require", "pack_call", "pack_answer", "placement"]

#: the worker's exit status when its start-up failed (after trying to report why)
START_FAILED = 3
ALIGN = 64
PAGE = mmap.PAGESIZE

F_ADD_SEALS = 1033
F_SEAL_SEAL = 0x0001
F_SEAL_SHRINK = 0x0002
F_SEAL_GROW = 0x0004
F_SEAL_FUTURE_WRITE = 0x0010

_MAX_FDS = 4
# plain ints: ``socket.MSG_*`` are IntFlag members, and ``int & IntFlag`` runs the enum
# module's Python code on every message (tens of microseconds with cold caches)
_MSG_TRUNC = int(socket.MSG_TRUNC)
_MSG_CTRUNC = int(socket.MSG_CTRUNC)
_SOL_SOCKET = int(socket.SOL_SOCKET)
_SCM_RIGHTS = int(socket.SCM_RIGHTS)
_ANCSIZE = socket.CMSG_SPACE(_MAX_FDS * 4)


def align(n: int, alignment: int = ALIGN) -> int:
    return -(-n // alignment) * alignment


# --- messages ------------------------------------------------------------------------------------


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"ext type {code} is not allowed")


def pack(message: Mapping[str, Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


# --- tensor places -------------------------------------------------------------------------------


def placement(item: Any, kind: str, region_size: int) -> tuple[str, np.dtype, tuple, int, int]:
    """One ``[name, dtype, shape, offset]`` of a ``run`` (``kind`` "input") or ``result``
    ("output"), checked against the region it points into: ``(name, numpy dtype, shape,
    offset, element count)``. The peer is not trusted: SandboxProtocolError otherwise."""
    if (type(item) is not list or len(item) != 4 or type(item[0]) is not str
            or type(item[1]) is not str or type(item[2]) is not list
            or type(item[3]) is not int):
        raise SandboxProtocolError(f"each {kind} is [name, dtype, shape, offset]")
    name, dtype_name, shape, offset = item
    if dtype_name not in dtypes.DTYPES:
        raise SandboxProtocolError(f"{kind} {name[:60]!r}: unknown dtype")
    if len(shape) > MAX_RANK or any(type(d) is not int or d < 0 for d in shape):
        raise SandboxProtocolError(f"{kind} {name[:60]!r}: bad shape")
    dtype = dtypes.to_numpy(dtype_name)
    count = 1
    for d in shape:
        count *= d
    if offset < 0 or offset % ALIGN or offset + count * dtype.itemsize > region_size:
        raise SandboxProtocolError(f"{kind} {name[:60]!r}: outside the {kind} region")
    return name, dtype, tuple(shape), offset, count


# --- binary messages (see the module docstring) ------------------------------------------------

RUN, HANDOFF, RESULT, HANDED = 0x01, 0x02, 0x11, 0x12
#: op, has a frame, frame slot, call id, frame generation, frame id, start and end of frame
_CALL = struct.Struct("<B?xxIQQQQQ")
#: op, value (the worker's microseconds, or a CRC-32), call id
_ANSWER = struct.Struct("<BxxxIQ")
_NO_FRAME = (0, 0, 0, 0, 0)


def pack_call(op: int, call_id: int, frame: tuple[int, int, int, int, int] | None = None
              ) -> bytes:
    """A ``RUN`` or ``HANDOFF``; ``frame`` is ``(slot, generation, frame_id, timestamp_sof,
    timestamp_eof)``."""
    slot, generation, frame_id, sof, eof = frame if frame is not None else _NO_FRAME
    return _CALL.pack(op, frame is not None, slot, call_id, generation, frame_id, sof, eof)


def pack_answer(op: int, call_id: int, value: int) -> bytes:
    """A ``RESULT`` (``value``: the worker's microseconds) or ``HANDED`` (a CRC-32)."""
    return _ANSWER.pack(op, min(max(value, 0), 0xFFFFFFFF), call_id)


def _unpack_binary(data: bytes | memoryview) -> dict[str, Any]:
    op = data[0]
    if op in (RUN, HANDOFF):
        if len(data) != _CALL.size:
            raise SandboxProtocolError(f"a binary call is {_CALL.size} bytes, got {len(data)}")
        _, has_frame, slot, call_id, generation, frame_id, sof, eof = _CALL.unpack(data)
        frame = (slot, generation, frame_id, sof, eof) if has_frame else None
        if op == HANDOFF:
            if frame is None:
                raise SandboxProtocolError("a binary handoff without a frame")
            return {"op": "handoff", "id": call_id, "frame": frame}
        return {"op": "run", "id": call_id, "again": True, "frame": frame}
    if len(data) != _ANSWER.size:
        raise SandboxProtocolError(f"a binary answer is {_ANSWER.size} bytes, got {len(data)}")
    _, value, call_id = _ANSWER.unpack(data)
    if op == RESULT:
        return {"op": "result", "id": call_id, "ok": True, "same": True, "us": value}
    return {"op": "handoff", "id": call_id, "ok": True, "crc": value}


_BINARY = frozenset({RUN, HANDOFF, RESULT, HANDED})


def unpack(data: bytes | memoryview) -> dict[str, Any]:
    """Decode one message (msgpack, or binary: see the module docstring);
    SandboxProtocolError unless it is a map with a str ``op``."""
    if data and data[0] in _BINARY:
        return _unpack_binary(data)
    try:
        n = max(len(data), 1)  # no length inside a message can exceed the message
        value = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True,
                                max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n,
                                max_ext_len=n, ext_hook=_no_ext, timestamp=0)
    except Exception as exc:
        raise SandboxProtocolError(f"undecodable message ({len(data)} bytes): "
                                   f"{type(exc).__name__}: {str(exc)[:200]}") from None
    if type(value) is not dict or type(value.get("op")) is not str:
        raise SandboxProtocolError(f"a message must be a map with a str 'op', got "
                                   f"{type(value).__name__}")
    return value


def require(message: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``message[key]`` if it has type ``kind`` (bool is never an int), else a protocol error."""
    value = message.get(key)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(value) not in kinds:
        raise SandboxProtocolError(f"message {message.get('op')!r}: field {key!r} must be "
                                   f"{' or '.join(k.__name__ for k in kinds)}, got "
                                   f"{type(value).__name__}")
    return value


def _descriptors(ancdata: list) -> list[int]:
    """The descriptors that came with a message (``SCM_RIGHTS``)."""
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
            fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
    return fds


class Channel:
    """One end of the socket pair, with the message cap."""

    def __init__(self, sock: socket.socket, max_message: int) -> None:
        self.sock = sock
        self.max_message = max_message
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        #: a message :meth:`recv_result` or :meth:`recv_call` received but did not take:
        #: ``(length, flags, descriptors)`` of what is in the buffer, for the next :meth:`recv`
        self._held: tuple[int, int, list[int]] | None = None

    @property
    def max_message(self) -> int:
        """The cap on one message's bytes (the receive buffer holds one byte more, so that a
        longer message is seen as such)."""
        return self._max_message

    @max_message.setter
    def max_message(self, value: int) -> None:
        self._max_message = int(value)
        self._buffer = bytearray(self._max_message + 1)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: Mapping[str, Any], fds: Iterable[int] = ()) -> None:
        data = pack(message)
        if len(data) > self.max_message:
            raise SandboxProtocolError(f"message {message.get('op')!r} of {len(data)} bytes "
                                       f"exceeds the cap of {self.max_message}")
        fds = list(fds)
        if fds:
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", fds))])
        else:
            self.sock.send(data)

    def send_packed(self, data: bytes) -> None:
        """Send one message packed already (a binary message), with the cap."""
        if len(data) > self.max_message:
            raise SandboxProtocolError(f"a message of {len(data)} bytes exceeds the cap of "
                                       f"{self.max_message}")
        self.sock.send(data)

    def send_raw(self, data: bytes) -> None:
        """Send bytes as one message, unchecked (tests of the peer's refusals)."""
        self.sock.send(data)

    def poll(self, timeout: float | None) -> bool:
        """True when a message (or end of file) is waiting; waits at most ``timeout`` s."""
        if self._held is not None:
            return True
        ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
        return bool(self._poll.poll(ms))

    def recv_result(self, call_id: int, timeout: float) -> int | None:
        """The host's per-call receive, with as little work as can be: when the next message
        (waited for at most ``timeout`` s) is the binary ``RESULT`` of ``call_id``, its value
        (the worker's microseconds), else None. A message that is not that one stays for
        the next :meth:`recv`, which decodes and checks it as any other; None with nothing
        waiting (``poll`` False) means the time ran out."""
        if self._held is not None or not self.poll(timeout):
            return None
        buffer = self._buffer
        try:
            n, _, flags, _ = self.sock.recvmsg_into([buffer], 0)
        except ConnectionError:  # the peer is gone: the next recv says so (end of file)
            self._held = (0, 0, [])
            return None
        if n == _ANSWER.size and not flags and buffer[0] == RESULT:
            op, value, answered = _ANSWER.unpack_from(buffer)
            if answered == call_id:
                return value
        self._held = (n, flags, [])
        return None

    def recv_call(self) -> tuple[int, tuple[int, int, int, int, int] | None] | None:
        """The worker's per-call receive, the counterpart of :meth:`recv_result`: blocks
        for the next message; a well-formed binary ``RUN`` comes back as ``(call id, frame
        fields or None)``, anything else (None here) stays, with its descriptors, for the
        next :meth:`recv`."""
        buffer = self._buffer
        n, ancdata, flags, _ = self.sock.recvmsg_into([buffer], _ANCSIZE)
        if n == _CALL.size and not ancdata and not flags and buffer[0] == RUN:
            _, framed, slot, call_id, generation, frame_id, sof, eof = _CALL.unpack_from(buffer)
            return call_id, ((slot, generation, frame_id, sof, eof) if framed else None)
        self._held = (n, flags, _descriptors(ancdata))
        return None

    def recv(self, *, accept_fds: bool = False) -> tuple[dict[str, Any] | None, list[int]]:
        """One message and the descriptors that came with it; ``(None, [])`` at end of file
        (an empty message counts as end of file). Blocks until something arrives."""
        if self._held is not None:  # left by recv_result or recv_call
            (n, flags, fds), self._held = self._held, None
        else:
            ancsize = _ANCSIZE if accept_fds else 0
            n, ancdata, flags, _ = self.sock.recvmsg_into([self._buffer], ancsize)
            fds = _descriptors(ancdata)
        data = memoryview(self._buffer)[:n]
        try:
            if fds and not accept_fds:
                flags |= _MSG_CTRUNC  # as the kernel says when it had nowhere to put them
            if flags & _MSG_CTRUNC:
                raise SandboxProtocolError("a message carried descriptors that were not "
                                           "expected (discarded)")
            if flags & _MSG_TRUNC or len(data) > self.max_message:
                raise SandboxProtocolError(f"a message exceeded the cap of {self.max_message} "
                                           "bytes")
            if not n:
                if fds:
                    raise SandboxProtocolError("descriptors without a message")
                return None, []
            return unpack(data), fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


# --- shared memory -------------------------------------------------------------------------------


class Region:
    """A shared memory region created by the host (memfd, page-rounded).

    ``worker_writable=False`` (inputs): mapped read-write here, sealed with
    ``F_SEAL_FUTURE_WRITE`` and shared as a read-only descriptor. ``True`` (outputs): mapped
    read-only here, the worker gets a read-write descriptor. Both are sealed against
    shrinking and growing. ``fd`` is the descriptor to send; :meth:`forget_fd` closes it once
    sent.
    """

    def __init__(self, size: int, *, name: str, worker_writable: bool) -> None:
        self.size = max(PAGE, align(int(size), PAGE))
        self.worker_writable = worker_writable
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, self.size)
            prot = mmap.PROT_READ if worker_writable else mmap.PROT_READ | mmap.PROT_WRITE
            self.map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, prot)
            seals = F_SEAL_SHRINK | F_SEAL_GROW
            if not worker_writable:
                seals |= F_SEAL_FUTURE_WRITE
            fcntl.fcntl(fd, F_ADD_SEALS, seals | F_SEAL_SEAL)
            if not worker_writable:
                try:
                    ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:  # no /proc: the seal alone keeps the worker from writing
                    pass
                else:
                    os.close(fd)
                    fd = ro
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd

    def forget_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def view(self, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> np.ndarray:
        count = 1
        for d in shape:
            count *= d
        if count == 0:
            return np.zeros(shape, dtype)
        return np.frombuffer(self.map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def close(self) -> None:
        self.forget_fd()
        try:
            self.map.close()
        except BufferError:  # views still alive: freed with the last of them
            pass


def map_region(fd: int, *, writable: bool, max_size: int) -> mmap.mmap:
    """Worker side: map a region received from the host and close the descriptor."""
    try:
        size = os.fstat(fd).st_size
        if not 0 < size <= max_size:
            raise SandboxProtocolError(f"a shared region of {size} bytes is outside "
                                       f"(0, {max_size}]")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
    finally:
        os.close(fd)
