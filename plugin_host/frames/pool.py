"""The frame pool: a camera's buffers in shared memory, with generation ids and leases.

A :class:`FramePool` is owned by one camera. It allocates ``buffers`` frame buffers once, in a
single memfd (``os.memfd_create``) mapped here read-write, and never allocates again. Another
process maps the same memory **read-only** from :attr:`FramePool.fd` (a read-only descriptor
of a memfd sealed against growing, shrinking and any new writable mapping) with
:func:`map_pool`, which returns read-only numpy views of a frame: the frame crosses to the
sandbox worker without a copy, and the worker cannot write it.

**Memory layout** (little-endian; offsets in bytes)::

    0       pool header, 4096 bytes: magic b"\\x89PHPOOL\\n", u32 version (1), u32 length M,
            then M bytes of canonical msgpack {buffers, camera, data_offset, layout, pool_id,
            slot_size}; zero padding
    4096    slot headers, 64 bytes per slot: u64 generation, u64 writing (1 while the slot is
            being filled), u64 frame_id, u64 timestamp_sof, u64 timestamp_eof, 24 bytes zero
    D       slot data: slot i at D + i * slot_size (page-aligned; slot_size = the layout's
            nbytes rounded up to a page), D = data_offset (page-aligned)

**Generation ids.** Each slot's generation is incremented every time the slot is (re)filled,
*before* any byte of the new frame is written, and its ``writing`` word is 1 until the fill is
committed. A :class:`~plugin_host.frames.frame.Frame` carries the generation it was written
with; a reader re-checks it *after* using the bytes (:meth:`Lease.check`,
:meth:`PoolReader.check`): a different generation, or ``writing`` set, means the bytes may be a
mix of two frames, raised as :class:`~plugin_host.errors.FrameOverwrittenError`. (The stores
are single aligned 8-byte words in program order, which x86-64's memory model keeps ordered;
an ARM port needs explicit barriers around them.)

**Leases.** Consumers in the host hold a frame through a :class:`Lease`. The producer never
refills a slot with an outstanding lease: :meth:`FramePool.begin_frame` picks the least
recently filled free slot, and when every slot is leased it drops the new frame and counts it
(``dropped["no_free_buffer"]``) — or, with ``wait``, waits for a release (replay at full speed).
``release()`` twice, or any use after release, raises
:class:`~plugin_host.errors.LeaseReleasedError`. A lease held longer than ``leak_age_s`` seconds
or ``leak_frames`` produced frames is a leak: :meth:`FramePool.leaks` lists it and a warning is
logged once per lease; leases still outstanding at :meth:`FramePool.close` are logged and
returned, and the memory is unmapped when the last of them is released.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import mmap
import os
import secrets
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from abi.artifact import canonical
from abi.errors import ArtifactFormatError

from ..errors import (FrameError, FrameFormatError, FrameOverwrittenError, LeaseError,
                      LeaseReleasedError, PoolClosedError)
from .frame import MAX_FRAME_BYTES, Frame, FrameLayout, plane_array

__all__ = ["FramePool", "SlotWriter", "Lease", "LeakReport", "PoolReader", "map_pool",
           "POOL_MAGIC", "POOL_VERSION", "MAX_BUFFERS", "MAX_POOL_BYTES"]

log = logging.getLogger("plugin_host.frames")

PAGE = mmap.PAGESIZE
POOL_MAGIC = b"\x89PHPOOL\n"
POOL_VERSION = 1
HEADER_SIZE = 4096
SLOT_HEADER_SIZE = 64
_PREFIX = struct.Struct("<8sII")  # magic, version, metadata length
_MAX_META = HEADER_SIZE - _PREFIX.size

#: Most buffers one pool may have.
MAX_BUFFERS = 256

#: Largest pool (all buffers together) allocated by default.
MAX_POOL_BYTES = 2**30

# words of a slot header (u64 each)
_GEN, _WRITING, _FRAME_ID, _SOF, _EOF = range(5)

F_ADD_SEALS = 1033
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE = 0x1, 0x2, 0x4, 0x10

_META_LIMITS = canonical.DecodeLimits(max_bytes=_MAX_META, max_depth=4, max_length=256,
                                      max_items=256)


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class LeakReport:
    """A lease held too long (or still outstanding when its pool closed)."""

    camera: str
    pool_id: str
    frame_id: int
    slot: int
    holder: str
    age_s: float
    frames: int  # frames the pool produced since the lease was taken

    def __str__(self) -> str:
        return (f"camera {self.camera!r}: lease of frame {self.frame_id} (slot {self.slot}) "
                f"held by {self.holder!r} for {self.age_s:.3f} s / {self.frames} frame(s)")


class Lease:
    """One consumer's hold on one frame; the slot is not refilled until it is released.

    ``frame`` (metadata) stays readable after release; everything that touches the buffer
    (:meth:`planes`, :meth:`array`, :meth:`buffer`, :meth:`check`) and a second release raise
    :class:`~plugin_host.errors.LeaseReleasedError`. Views obtained before the release must
    not be used after it (the slot may be refilled): that is what the generation check is for.
    Usable as a context manager (released on exit).
    """

    __slots__ = ("frame", "holder", "acquired_ns", "acquired_at_frame", "_pool", "_released",
                 "_reported", "_id")

    def __init__(self, pool: "FramePool", frame: Frame, holder: str, lease_id: int) -> None:
        self.frame = frame
        self.holder = holder
        self.acquired_ns = time.monotonic_ns()
        self.acquired_at_frame = pool.produced
        self._pool = pool
        self._released = False
        self._reported = False
        self._id = lease_id

    @property
    def released(self) -> bool:
        return self._released

    @property
    def pool(self) -> "FramePool":
        return self._pool

    @property
    def age_s(self) -> float:
        return (time.monotonic_ns() - self.acquired_ns) / 1e9

    def _live(self, operation: str) -> None:
        if self._released:
            f = self.frame
            raise LeaseReleasedError(
                f"{operation}() on a released lease of frame {f.frame_id} of camera "
                f"{f.camera!r} (slot {f.slot})" if operation != "release" else
                f"double release of the lease of frame {f.frame_id} of camera {f.camera!r} "
                f"(slot {f.slot})", operation=operation, camera=f.camera, frame_id=f.frame_id,
                slot=f.slot)

    def planes(self) -> dict[str, np.ndarray]:
        """Read-only zero-copy views of the frame's planes, by plane name (``Y``, ``UV``...)."""
        self._live("planes")
        return self._pool._planes(self.frame)

    def array(self, plane: str | None = None) -> np.ndarray:
        """One plane's read-only view (``plane`` may be omitted for one-plane formats)."""
        self._live("array")
        planes = self._pool._planes(self.frame)
        if plane is None:
            if len(planes) != 1:
                raise LeaseError(f"{self.frame.format} has {len(planes)} planes "
                                 f"({', '.join(planes)}); name one")
            return next(iter(planes.values()))
        return planes[plane]

    def buffer(self) -> memoryview:
        """The frame's whole buffer (``layout.nbytes``), read-only, zero-copy."""
        self._live("buffer")
        return self._pool._buffer(self.frame)

    def check(self) -> None:
        """Raise FrameOverwrittenError if the slot was refilled since this frame was written."""
        self._live("check")
        self._pool._check(self.frame)

    def release(self) -> None:
        """Return the frame to its pool. A second release raises LeaseReleasedError; if the
        slot was overwritten while leased, the lease is still returned and
        FrameOverwrittenError is raised."""
        self._pool._release(self, None)

    def drop(self, reason: str) -> None:
        """Release the lease and count the frame as dropped for ``reason`` in the pool's
        statistics (a consumer skipped it: conflation, a full queue, no sync partner)."""
        self._pool._release(self, reason)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._released:
            try:
                self.release()
            except FrameOverwrittenError:
                if exc_type is None:
                    raise

    def __repr__(self) -> str:
        state = "released" if self._released else f"held by {self.holder!r}"
        return f"<Lease of {self.frame}, {state}>"


class SlotWriter:
    """The producer's handle on one slot being filled: writable views of its planes.

    Fill the planes (or ``buffer``), then :meth:`FramePool.commit` (or :meth:`abort`). Only
    the camera's producer holds one; it must not be kept after commit.
    """

    def __init__(self, pool: "FramePool", slot: int, generation: int) -> None:
        self.pool, self.slot, self.generation = pool, slot, generation
        base = pool._slot_offset(slot)
        self.buffer = pool._rw[base:base + pool.layout.nbytes]
        self.planes = {p.name: plane_array(pool._map, p, base) for p in pool.layout.planes}
        self.done = False

    def array(self, plane: str | None = None) -> np.ndarray:
        if plane is None:
            if len(self.planes) != 1:
                raise LeaseError(f"{self.pool.layout.format} has {len(self.planes)} planes; "
                                 f"name one")
            return next(iter(self.planes.values()))
        return self.planes[plane]

    def commit(self, frame_id: int, timestamp_sof: int, timestamp_eof: int | None = None
               ) -> Frame:
        return self.pool.commit(self, frame_id, timestamp_sof, timestamp_eof)

    def abort(self) -> None:
        self.pool.abort(self)


class FramePool:
    """``buffers`` frame buffers of one ``layout`` in shared memory, owned by one camera.

    ``camera`` names the owner in metadata and messages. ``leak_age_s`` / ``leak_frames``:
    a lease older than this many seconds / produced frames is reported as leaked (None: no
    limit). ``max_bytes`` caps the whole pool before anything is allocated.
    """

    def __init__(self, layout: FrameLayout, buffers: int = 8, *, camera: str = "camera",
                 leak_age_s: float | None = 2.0, leak_frames: int | None = None,
                 max_bytes: int = MAX_POOL_BYTES) -> None:
        if type(buffers) is not int or not 1 <= buffers <= MAX_BUFFERS:
            raise FrameError(f"camera {camera!r}: a pool needs 1 to {MAX_BUFFERS} buffers, got "
                             f"{buffers!r}")
        self.layout = layout
        self.camera = camera
        self.buffers = buffers
        self.leak_age_s = leak_age_s
        self.leak_frames = leak_frames
        self.id = secrets.token_hex(8)
        self.slot_size = _align(layout.nbytes, PAGE)
        self.data_offset = _align(HEADER_SIZE + SLOT_HEADER_SIZE * buffers, PAGE)
        self.size = self.data_offset + self.slot_size * buffers
        if self.slot_size * buffers > max_bytes:
            raise FrameError(f"camera {camera!r}: {buffers} buffers of {layout.describe()} "
                             f"need {self.slot_size * buffers} bytes, over the cap of "
                             f"{max_bytes}")
        self._map, self.fd = _allocate(self.size, f"plugin-host-frames:{camera}")
        try:
            meta = canonical.encode({"buffers": buffers, "camera": camera,
                                     "data_offset": self.data_offset,
                                     "layout": layout.to_dict(), "pool_id": self.id,
                                     "slot_size": self.slot_size})
            if len(meta) > _MAX_META:
                raise FrameError(f"camera {camera!r}: pool metadata too long ({len(meta)} "
                                 f"bytes)")
            self._map[:_PREFIX.size + len(meta)] = _PREFIX.pack(POOL_MAGIC, POOL_VERSION,
                                                                len(meta)) + meta
        except BaseException:
            os.close(self.fd)
            self._map.close()
            raise
        self._rw = memoryview(self._map)
        self._ro = self._rw.toreadonly()
        self._hdr = np.ndarray((buffers, SLOT_HEADER_SIZE // 8), dtype="<u8", buffer=self._map,
                               offset=HEADER_SIZE)
        self._cond = threading.Condition()
        self._gen = [0] * buffers
        self._leases = [0] * buffers
        self._writing = [False] * buffers
        self._filled = [-1] * buffers  # fill order (-1: never filled)
        self._fills = itertools.count()
        self._lease_ids = itertools.count()
        self._outstanding: dict[int, Lease] = {}
        self._views: list[dict[str, np.ndarray] | None] = [None] * buffers
        self.produced = 0
        self.delivered = 0
        self.dropped: Counter[str] = Counter()
        self.overwrites = 0
        self.leaks_reported = 0
        self.closed = False
        self._unmapped = False

    # -- producer -------------------------------------------------------------------------------

    def begin_frame(self, *, wait: float | None = None, count_drop: bool = True,
                    slot: int | None = None, force: bool = False) -> SlotWriter | None:
        """A free slot to fill, with its generation already advanced; or None when every slot
        is leased (the frame is dropped and counted as ``no_free_buffer``, unless
        ``count_drop=False``: the caller will try again).

        ``wait``: seconds to wait for a slot to be released before giving up (None: don't
        wait). ``slot`` picks the slot; ``force=True`` takes it even while leased — that is
        the misbehaving producer the generation check exists for, for tests only.
        """
        with self._cond:
            self._require_open()
            self._report_leaks_locked()
            if slot is not None:
                if not 0 <= slot < self.buffers:
                    raise FrameError(f"camera {self.camera!r}: no slot {slot} in a pool of "
                                     f"{self.buffers}")
                if not force and (self._leases[slot] or self._writing[slot]):
                    raise LeaseError(f"camera {self.camera!r}: slot {slot} is leased or being "
                                     f"written")
                chosen: int | None = slot
            else:
                chosen = self._free_slot()
                if chosen is None and wait:
                    self._cond.wait_for(lambda: self.closed or self._free_slot() is not None,
                                        wait)
                    self._require_open()
                    chosen = self._free_slot()
                if chosen is None:
                    if count_drop:
                        self.dropped["no_free_buffer"] += 1
                    return None
            self._writing[chosen] = True
            generation = self._gen[chosen] + 1
            self._gen[chosen] = generation
            hdr = self._hdr[chosen]
            hdr[_WRITING] = 1          # invalidate the old frame before touching its bytes
            hdr[_GEN] = generation
        return SlotWriter(self, chosen, generation)

    def _free_slot(self) -> int | None:
        best = None
        for i in range(self.buffers):
            if self._leases[i] or self._writing[i]:
                continue
            if best is None or self._filled[i] < self._filled[best]:
                best = i
        return best

    def commit(self, writer: SlotWriter, frame_id: int, timestamp_sof: int,
               timestamp_eof: int | None = None) -> Frame:
        """Finish filling ``writer``'s slot: stamp the frame and make it leasable."""
        if writer.pool is not self or writer.done:
            raise FrameError(f"camera {self.camera!r}: commit of a writer that is not open "
                             f"on this pool")
        if timestamp_eof is None:
            timestamp_eof = time.monotonic_ns()
        frame = Frame(self.camera, int(frame_id), int(timestamp_sof), int(timestamp_eof),
                      self.layout, writer.slot, writer.generation, self.id)
        writer.done = True
        writer.planes = {}
        writer.buffer = None  # type: ignore[assignment]
        with self._cond:
            self._require_open()
            hdr = self._hdr[writer.slot]
            hdr[_FRAME_ID] = frame.frame_id
            hdr[_SOF] = frame.timestamp_sof
            hdr[_EOF] = frame.timestamp_eof
            hdr[_WRITING] = 0
            self._writing[writer.slot] = False
            self._filled[writer.slot] = next(self._fills)
            self.produced += 1
            self._cond.notify_all()
        return frame

    def abort(self, writer: SlotWriter) -> None:
        """Give up a fill: the slot holds no valid frame (its generation stays advanced)."""
        if writer.done:
            return
        writer.done = True
        writer.planes = {}
        with self._cond:
            if not self._unmapped:
                self._hdr[writer.slot][_WRITING] = 0
            self._writing[writer.slot] = False
            self._filled[writer.slot] = -1
            self._cond.notify_all()

    # -- consumers ------------------------------------------------------------------------------

    def lease(self, frame: Frame, holder: str = "consumer") -> Lease:
        """A lease on ``frame`` for ``holder``. FrameOverwrittenError when its slot was refilled
        already (too late to lease it), PoolClosedError when the pool is closed."""
        with self._cond:
            self._require_open()
            if frame.pool_id != self.id:
                raise FrameError(f"{frame} belongs to pool {frame.pool_id}, not to this pool "
                                 f"{self.id} of camera {self.camera!r}")
            self._check_locked(frame, count=False)  # too late to lease: not an overwrite
            self._leases[frame.slot] += 1
            lease = Lease(self, frame, holder, next(self._lease_ids))
            self._outstanding[lease._id] = lease
            return lease

    def _release(self, lease: Lease, drop_reason: str | None) -> None:
        with self._cond:
            lease._live("release" if drop_reason is None else "drop")
            error = None
            if not self._unmapped:
                try:
                    self._check_locked(lease.frame)
                except FrameOverwrittenError as exc:
                    error = exc
            lease._released = True
            self._leases[lease.frame.slot] -= 1
            self._outstanding.pop(lease._id, None)
            if drop_reason is not None:
                self.dropped[drop_reason] += 1
            self._cond.notify_all()
            if self.closed and not self._outstanding:
                self._unmap()
        if error is not None:
            raise error

    def count_delivered(self, n: int = 1) -> None:
        """Count frames handed to consumers (subscriptions call this from ``recv``)."""
        with self._cond:
            self.delivered += n

    def count_dropped(self, reason: str, n: int = 1) -> None:
        """Count frames dropped for ``reason`` before they reached the pool (``late``)."""
        with self._cond:
            self.dropped[reason] += n

    def _check(self, frame: Frame) -> None:
        with self._cond:
            self._check_locked(frame)

    def _check_locked(self, frame: Frame, *, count: bool = True) -> None:
        if self._unmapped:
            raise PoolClosedError(f"the pool of camera {self.camera!r} is closed and unmapped")
        hdr = self._hdr[frame.slot]
        got, writing = int(hdr[_GEN]), bool(hdr[_WRITING])
        if got != frame.generation or writing:
            if count:
                self.overwrites += 1
            raise _overwritten(frame, got, writing)

    def _planes(self, frame: Frame) -> dict[str, np.ndarray]:
        views = self._views[frame.slot]
        if views is None:  # made once per slot: the views of a slot never change
            base = self._slot_offset(frame.slot)
            views = {p.name: plane_array(self._ro, p, base) for p in self.layout.planes}
            self._views[frame.slot] = views
        return dict(views)

    def _buffer(self, frame: Frame) -> memoryview:
        base = self._slot_offset(frame.slot)
        return self._ro[base:base + self.layout.nbytes]

    def _slot_offset(self, slot: int) -> int:
        return self.data_offset + slot * self.slot_size

    # -- leaks, statistics, shutdown -------------------------------------------------------------

    def leaks(self) -> list[LeakReport]:
        """Every outstanding lease older than ``leak_age_s`` or ``leak_frames``."""
        with self._cond:
            return [self._report(lease) for lease in self._leaked_locked()]

    def _leaked_locked(self) -> list[Lease]:
        now = time.monotonic_ns()
        out = []
        for lease in self._outstanding.values():
            too_old = (self.leak_age_s is not None
                       and now - lease.acquired_ns > self.leak_age_s * 1e9)
            too_many = (self.leak_frames is not None
                        and self.produced - lease.acquired_at_frame > self.leak_frames)
            if too_old or too_many:
                out.append(lease)
        return out

    def _report_leaks_locked(self) -> None:
        for lease in self._leaked_locked():
            if not lease._reported:
                lease._reported = True
                self.leaks_reported += 1
                log.warning("%s: leaked? (limits: %s s, %s frames)", self._report(lease),
                            self.leak_age_s, self.leak_frames)

    def _report(self, lease: Lease) -> LeakReport:
        return LeakReport(self.camera, self.id, lease.frame.frame_id, lease.frame.slot,
                          lease.holder, lease.age_s, self.produced - lease.acquired_at_frame)

    def outstanding(self) -> list[LeakReport]:
        """Every lease not yet released (whatever its age)."""
        with self._cond:
            return [self._report(lease) for lease in self._outstanding.values()]

    def stats(self) -> dict[str, Any]:
        """Counters: frames ``produced``, ``delivered`` (handed to consumers), ``dropped`` by
        reason (and ``dropped_total``), ``leases_outstanding``, ``leaks`` (reported),
        ``overwrites`` (checks of a leased frame that found its slot refilled)."""
        with self._cond:
            return {"camera": self.camera, "pool_id": self.id, "buffers": self.buffers,
                    "frame_bytes": self.layout.nbytes, "produced": self.produced,
                    "delivered": self.delivered, "dropped": dict(self.dropped),
                    "dropped_total": sum(self.dropped.values()),
                    "leases_outstanding": len(self._outstanding),
                    "leaks": self.leaks_reported, "overwrites": self.overwrites,
                    "closed": self.closed}

    def _require_open(self) -> None:
        if self.closed:
            raise PoolClosedError(f"the frame pool {self.id} of camera {self.camera!r} is closed")

    def close(self) -> list[LeakReport]:
        """Stop producing; report (log and return) the leases still outstanding. The memory is
        unmapped now, or when the last outstanding lease is released."""
        with self._cond:
            if self.closed:
                return []
            self.closed = True
            reports = [self._report(lease) for lease in self._outstanding.values()]
            for report in reports:
                log.warning("%s: still outstanding when the pool closed", report)
            self._cond.notify_all()
            if not self._outstanding:
                self._unmap()
        return reports

    def _unmap(self) -> None:
        if self._unmapped:
            return
        self._unmapped = True
        self._hdr = None  # type: ignore[assignment]
        self._views = [None] * self.buffers
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for view in (self._ro, self._rw):
            try:
                view.release()
            except BufferError:  # a consumer still holds an array of it: freed with it
                pass
        try:
            self._map.close()
        except BufferError:
            pass

    def __enter__(self) -> "FramePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<FramePool {self.id} of camera {self.camera!r}: {self.buffers} x "
                f"{self.layout.describe()}{', closed' if self.closed else ''}>")


def _overwritten(frame: Frame, got: int, writing: bool) -> FrameOverwrittenError:
    what = "is being refilled" if writing else "was refilled"
    return FrameOverwrittenError(
        f"{frame} {what} while in use: slot generation is now {got}"
        f"{' (write in progress)' if writing else ''}, expected {frame.generation}",
        camera=frame.camera, frame_id=frame.frame_id, slot=frame.slot,
        expected=frame.generation, got=got, writing=writing)


def _allocate(size: int, name: str) -> tuple[mmap.mmap, int]:
    """A sealed memfd of ``size`` bytes, mapped read-write here (pages populated now), and a
    read-only descriptor of it for other processes."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
        buf = mmap.mmap(fd, size, flags, mmap.PROT_READ | mmap.PROT_WRITE)
        try:
            # no resize, and no new writable mapping through any descriptor: only this one
            fcntl.fcntl(fd, F_ADD_SEALS,
                        F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)
            try:
                ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:  # no /proc: the seal alone keeps readers from writing
                return buf, fd
        except BaseException:
            buf.close()
            raise
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return buf, ro


# --- the read-only side (the sandbox worker) -----------------------------------------------------


class PoolReader:
    """A frame pool mapped read-only from its descriptor (see :func:`map_pool`).

    :meth:`planes` gives read-only numpy views of a frame (no copy; writing them raises, and
    the mapping itself cannot be made writable); :meth:`check` re-checks the frame's generation
    after use and raises FrameOverwrittenError if its slot was refilled meanwhile.
    """

    def __init__(self, buf: mmap.mmap) -> None:
        self._map = buf
        size = len(buf)
        if size < HEADER_SIZE:
            raise FrameFormatError(f"a frame pool is at least {HEADER_SIZE} bytes, got {size}")
        magic, version, meta_len = _PREFIX.unpack_from(buf, 0)
        if magic != POOL_MAGIC:
            raise FrameFormatError("not a frame pool (bad magic)")
        if version != POOL_VERSION:
            raise FrameFormatError(f"frame pool version {version}; this host reads "
                                   f"{POOL_VERSION}")
        if not 0 < meta_len <= _MAX_META:
            raise FrameFormatError(f"frame pool metadata length {meta_len} outside "
                                   f"(0, {_MAX_META}]")
        try:
            meta = canonical.decode(bytes(buf[_PREFIX.size:_PREFIX.size + meta_len]),
                                    limits=_META_LIMITS)
        except ArtifactFormatError as exc:
            raise FrameFormatError(f"frame pool metadata: {exc}") from None
        keys = {"buffers", "camera", "data_offset", "layout", "pool_id", "slot_size"}
        if type(meta) is not dict or set(meta) != keys:
            raise FrameFormatError(f"frame pool metadata must have the keys {sorted(keys)}")
        self.layout = FrameLayout.from_dict(meta["layout"], max_bytes=MAX_FRAME_BYTES)
        self.pool_id, self.camera = meta["pool_id"], meta["camera"]
        self.buffers, self.slot_size = meta["buffers"], meta["slot_size"]
        self.data_offset = meta["data_offset"]
        if (type(self.pool_id) is not str or type(self.camera) is not str
                or type(self.buffers) is not int or not 1 <= self.buffers <= MAX_BUFFERS
                or type(self.slot_size) is not int or self.slot_size < self.layout.nbytes
                or type(self.data_offset) is not int
                or self.data_offset < HEADER_SIZE + SLOT_HEADER_SIZE * self.buffers
                or self.data_offset + self.slot_size * self.buffers > size):
            raise FrameFormatError("frame pool metadata is inconsistent with its size")
        self._hdr = np.ndarray((self.buffers, SLOT_HEADER_SIZE // 8), dtype="<u8", buffer=buf,
                               offset=HEADER_SIZE)
        self._views: list[dict[str, np.ndarray] | None] = [None] * self.buffers

    def _validate(self, frame: Frame) -> None:
        if frame.pool_id != self.pool_id:
            raise FrameError(f"{frame} belongs to pool {frame.pool_id}, but this mapping is "
                             f"pool {self.pool_id} (the camera restarted?)")
        if not 0 <= frame.slot < self.buffers:
            raise FrameFormatError(f"{frame}: no slot {frame.slot} in a pool of {self.buffers}")
        if frame.layout != self.layout:
            raise FrameFormatError(f"{frame}: layout differs from the pool's "
                                   f"{self.layout.describe()}")

    def planes(self, frame: Frame) -> dict[str, np.ndarray]:
        """Read-only views of ``frame``'s planes. Check the generation after using them."""
        self._validate(frame)
        views = self._views[frame.slot]
        if views is None:  # made once per slot
            base = self.data_offset + frame.slot * self.slot_size
            views = {p.name: plane_array(self._map, p, base) for p in self.layout.planes}
            self._views[frame.slot] = views
        return dict(views)

    def generation(self, slot: int) -> tuple[int, bool]:
        """The slot's current ``(generation, writing)``."""
        hdr = self._hdr[slot]
        return int(hdr[_GEN]), bool(hdr[_WRITING])

    def check(self, frame: Frame) -> None:
        """Raise FrameOverwrittenError unless ``frame`` is still what its slot holds."""
        self._validate(frame)
        got, writing = self.generation(frame.slot)
        if got != frame.generation or writing:
            raise _overwritten(frame, got, writing)

    def close(self) -> None:
        self._hdr = None  # type: ignore[assignment]
        self._views = [None] * self.buffers
        try:
            self._map.close()
        except BufferError:  # views still alive: unmapped with the last of them
            pass

    def __enter__(self) -> "PoolReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def map_pool(fd: int, *, max_size: int = MAX_POOL_BYTES + 2**20,
             close_fd: bool = False) -> PoolReader:
    """Map the frame pool behind ``fd`` read-only (``PROT_READ``) and check its header.

    ``fd`` is a pool's :attr:`FramePool.fd` (or a copy received over a socket).
    ``close_fd=True`` closes it once mapped (the mapping keeps the memory).
    """
    try:
        size = os.fstat(fd).st_size
        if not HEADER_SIZE <= size <= max_size:
            raise FrameFormatError(f"a frame pool of {size} bytes is outside "
                                   f"[{HEADER_SIZE}, {max_size}]")
        buf = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        if close_fd:
            os.close(fd)
    try:
        return PoolReader(buf)
    except BaseException:
        buf.close()
        raise
