"""The recorded-frames file the replay camera plays and ``plugin-host record`` writes.

One camera per file; every frame has the same layout. All integers little-endian::

    offset 0   file header, 32 bytes:
                 magic     8 bytes  b"\\x89PHFRM\\r\\n"
                 version   u32      1
                 meta_len  u32      length M of the file metadata (1 .. 4096)
                 meta_crc  u32      CRC-32 (zlib) of the M metadata bytes
                 reserved  12 bytes zero
    32         file metadata, M bytes of canonical msgpack, exactly the keys
                 camera (str), source (str: the camera plugin, may be ""), format (str),
                 width, height (int), strides, offsets (list of int, one per plane),
                 nbytes (int: bytes of one frame)
    32 + M     records, one per frame, back to back up to the end of the file:
                 magic     4 bytes  b"PHFR"
                 meta_len  u32      length R of the record metadata (1 .. 1024)
                 data_len  u64      bytes of the frame; must equal the file's nbytes
                 metadata  R bytes of canonical msgpack, exactly the keys
                           frame_id, timestamp_sof, timestamp_eof (int, monotonic ns),
                           format, width, height, strides, offsets (as the file's),
                           crc32 (int: CRC-32 of the canonical metadata without crc32,
                           followed by the data)
                 data      data_len bytes: the frame's buffer exactly as in the camera's pool
                           (planes at their offsets, rows at their strides, padding included)

Frame ids strictly increase, ``timestamp_sof`` never decreases, ``timestamp_eof >= sof``.
*Canonical msgpack* is the artifact format's (``abi.artifact.canonical``): one spelling per
value, sorted unique str keys. The checksums detect any changed byte (CRC-32 catches every
error burst up to 32 bits); they are integrity checks, not authentication.

Files are hostile input. :class:`ReplayReader` checks, before allocating anything for them,
every length against its cap (:class:`ReplayLimits`) and against the bytes left; it reads the
file header, then walks every record header and metadata (not the data) to build its index, so
a truncated file, trailing bytes, a record whose layout differs from the file's, or ids and
timestamps out of order are refused at open. Frame data is checked against its CRC when read
(:meth:`ReplayReader.read_into`), or all at once with :meth:`ReplayReader.verify`. Every
refusal is a :class:`~plugin_host.errors.ReplayFormatError` naming the file and byte offset.
"""

from __future__ import annotations

import os
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from abi.artifact import atomic_write, canonical
from abi.errors import ArtifactFormatError

from ..errors import FrameFormatError, ReplayFormatError
from ..files import open_regular
from .frame import MAX_FRAME_BYTES, FrameLayout

__all__ = ["FILE_MAGIC", "RECORD_MAGIC", "VERSION", "ReplayLimits", "RecordInfo",
           "ReplayReader", "ReplayWriter", "Salvaged", "salvage"]

FILE_MAGIC = b"\x89PHFRM\r\n"
RECORD_MAGIC = b"PHFR"
VERSION = 1
_FILE_HEADER = struct.Struct("<8sIII12s")
_RECORD_HEADER = struct.Struct("<4sIQ")
_FILE_KEYS = frozenset({"camera", "source", "format", "width", "height", "strides", "offsets",
                        "nbytes"})
_RECORD_KEYS = frozenset({"frame_id", "timestamp_sof", "timestamp_eof", "format", "width",
                          "height", "strides", "offsets", "crc32"})
_LAYOUT_KEYS = ("format", "width", "height", "strides", "offsets")
_U64 = 2**64 - 1
_MAX_NAME = 256
_COPY_CHUNK = 4 << 20


@dataclass(frozen=True)
class ReplayLimits:
    """Caps checked before anything is allocated: file metadata bytes, record metadata bytes,
    bytes of one frame, number of frames."""

    max_meta: int = 4096
    max_record_meta: int = 1024
    max_frame_bytes: int = MAX_FRAME_BYTES
    max_frames: int = 10_000_000


@dataclass(frozen=True)
class RecordInfo:
    """One record of the index: its frame id and timestamps, where its data is, its CRC."""

    index: int
    frame_id: int
    timestamp_sof: int
    timestamp_eof: int
    offset: int        # of the record header
    data_offset: int
    crc32: int
    _meta_crc: int     # CRC-32 of the canonical metadata without crc32 (the data continues it)


def _meta_limits(max_bytes: int) -> canonical.DecodeLimits:
    return canonical.DecodeLimits(max_bytes=max_bytes, max_depth=3, max_length=_MAX_NAME,
                                  max_items=64)


def _layout_of(meta: dict[str, Any], nbytes: int) -> dict[str, Any]:
    return {**{k: meta[k] for k in _LAYOUT_KEYS}, "nbytes": nbytes}


class ReplayReader:
    """An open recorded-frames file, its header checked and its records indexed.

    ``camera``, ``source``, ``layout`` come from the file metadata; ``records`` is the index
    (``len(reader)`` frames). Read a frame's bytes with :meth:`read_into` (into a buffer, e.g.
    a pool slot: no intermediate copy) or :meth:`read`.

    ``salvage=True`` (what :func:`salvage` uses) also checks every frame's CRC at open and
    indexes the records up to the first that fails any check, instead of refusing the file;
    ``progress(done, total)`` is then called with the bytes walked after each record.
    """

    def __init__(self, path: str | os.PathLike, *, limits: ReplayLimits = ReplayLimits(),
                 salvage: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.path = str(path)
        self.limits = limits
        #: salvage mode (see :func:`salvage`): why the records from ``end`` on were not kept,
        #: or None when every record was whole
        self.dropped: ReplayFormatError | None = None
        self._salvage, self._progress = salvage, progress
        try:
            self._file: BinaryIO = open_regular(path)
        except OSError as exc:
            raise ReplayFormatError(f"cannot open: {exc.strerror}", path=self.path) from None
        try:
            self.size = os.fstat(self._file.fileno()).st_size
            self._read_header()
            self.records: list[RecordInfo] = self._index()
        except BaseException:
            self._file.close()
            raise

    # -- parsing --------------------------------------------------------------------------------

    def _fail(self, message: str, offset: int | None, where: str) -> ReplayFormatError:
        return ReplayFormatError(message, path=self.path, offset=offset, where=where)

    def _pread(self, offset: int, n: int, where: str) -> bytes:
        data = os.pread(self._file.fileno(), n, offset)
        if len(data) != n:
            raise self._fail(f"truncated: {n} bytes needed, {len(data)} left"
                             + self._cut_off_hint(where), offset, where)
        return data

    def _cut_off_hint(self, where: str) -> str:
        """For a record cut short: how to keep the frames before it (not said when salvaging)."""
        if self._salvage or not where.startswith("record"):
            return ""
        return (" (a recording cut off? 'plugin-host record --salvage FILE --out NEW' keeps its "
                "whole frames)")

    def _decode(self, data: bytes, offset: int, where: str, max_bytes: int) -> dict[str, Any]:
        try:
            value = canonical.decode(data, limits=_meta_limits(max_bytes))
        except ArtifactFormatError as exc:
            raise self._fail(f"bad metadata: {exc}", offset, where) from None
        if type(value) is not dict:
            raise self._fail(f"metadata must be a map, got {type(value).__name__}", offset,
                             where)
        return value

    def _read_header(self) -> None:
        head = self._pread(0, _FILE_HEADER.size, "file header")
        magic, version, meta_len, meta_crc, reserved = _FILE_HEADER.unpack(head)
        if magic != FILE_MAGIC:
            raise self._fail("not a recorded-frames file (bad magic)", 0, "file header")
        if version != VERSION:
            raise self._fail(f"format version {version}; this host reads {VERSION}", 8,
                             "file header")
        if reserved != bytes(len(reserved)):
            raise self._fail("reserved header bytes must be zero", 20, "file header")
        if not 0 < meta_len <= self.limits.max_meta:
            raise self._fail(f"metadata length {meta_len} outside [1, {self.limits.max_meta}]",
                             12, "file header")
        offset = _FILE_HEADER.size
        raw = self._pread(offset, meta_len, "file metadata")
        if zlib.crc32(raw) != meta_crc:
            raise self._fail("file metadata CRC-32 mismatch", offset, "file metadata")
        meta = self._decode(raw, offset, "file metadata", self.limits.max_meta)
        if set(meta) != _FILE_KEYS:
            raise self._fail(f"file metadata must have exactly the keys {sorted(_FILE_KEYS)}, "
                             f"got {sorted(meta)}", offset, "file metadata")
        for key in ("camera", "source"):
            if type(meta[key]) is not str or len(meta[key]) > _MAX_NAME:
                raise self._fail(f"{key} must be a str of at most {_MAX_NAME} characters",
                                 offset, "file metadata")
        if not meta["camera"]:
            raise self._fail("camera must not be empty", offset, "file metadata")
        try:
            self.layout = FrameLayout.from_dict(_layout_of(meta, meta["nbytes"]),
                                                max_bytes=self.limits.max_frame_bytes)
        except FrameFormatError as exc:
            raise self._fail(str(exc), offset, "file metadata") from None
        self.camera: str = meta["camera"]
        self.source: str = meta["source"]
        self._layout_meta = {k: meta[k] for k in _LAYOUT_KEYS}
        self._first_record = offset + meta_len

    def _index(self) -> list[RecordInfo]:
        """Every record's header and metadata checked, in order. In salvage mode the walk
        also checks each frame's CRC and stops at the first record that fails a check: the
        records before it are the index, ``end`` is where they stop, ``dropped`` says why."""
        records: list[RecordInfo] = []
        offset = self._first_record
        buf = bytearray(self.layout.nbytes) if self._salvage else None
        while offset < self.size:
            previous = records[-1] if records else None
            if buf is None:
                info = self._walk(len(records), offset, previous)
            else:
                try:
                    info = self._walk(len(records), offset, previous)
                    self._check_crc(info, buf)
                except ReplayFormatError as exc:
                    self.dropped = exc
                    break
            records.append(info)
            offset = info.data_offset + self.layout.nbytes
            if self._progress is not None:
                self._progress(offset, self.size)
        #: where the indexed records end (the file's size, unless salvage dropped a tail)
        self.end = offset
        return records

    def _walk(self, index: int, offset: int, previous: RecordInfo | None) -> RecordInfo:
        """The record at ``offset``: its header and metadata checked (not its data)."""
        where, nbytes, limits = f"record {index}", self.layout.nbytes, self.limits
        if index >= limits.max_frames:
            raise self._fail(f"more than {limits.max_frames} frames", offset, where)
        magic, meta_len, data_len = _RECORD_HEADER.unpack(
            self._pread(offset, _RECORD_HEADER.size, where))
        if magic != RECORD_MAGIC:
            raise self._fail("bad record magic", offset, where)
        if not 0 < meta_len <= limits.max_record_meta:
            raise self._fail(f"metadata length {meta_len} outside "
                             f"[1, {limits.max_record_meta}]", offset + 4, where)
        if data_len != nbytes:
            raise self._fail(f"data length {data_len} differs from the frame size {nbytes}",
                             offset + 8, where)
        meta_at = offset + _RECORD_HEADER.size
        data_at = meta_at + meta_len
        if data_at + data_len > self.size:
            raise self._fail(f"truncated: the record needs {data_at + data_len - offset} "
                             f"bytes, {self.size - offset} left" + self._cut_off_hint(where),
                             offset, where)
        meta = self._decode(self._pread(meta_at, meta_len, where), meta_at, where,
                            limits.max_record_meta)
        info = self._record(meta, index, offset, meta_at, data_at, where)
        if previous is not None:
            if info.frame_id <= previous.frame_id:
                raise self._fail(f"frame_id {info.frame_id} does not increase (previous "
                                 f"{previous.frame_id})", meta_at, where)
            if info.timestamp_sof < previous.timestamp_sof:
                raise self._fail(f"timestamp_sof {info.timestamp_sof} goes backwards "
                                 f"(previous {previous.timestamp_sof})", meta_at, where)
        return info

    def _record(self, meta: dict[str, Any], index: int, offset: int, meta_at: int,
                data_at: int, where: str) -> RecordInfo:
        if set(meta) != _RECORD_KEYS:
            raise self._fail(f"record metadata must have exactly the keys "
                             f"{sorted(_RECORD_KEYS)}, got {sorted(meta)}", meta_at, where)
        for key in ("frame_id", "timestamp_sof", "timestamp_eof", "crc32"):
            value = meta[key]
            high = 2**32 - 1 if key == "crc32" else _U64
            if type(value) is not int or not 0 <= value <= high:
                raise self._fail(f"{key} must be an int in [0, {high}], got {value!r}", meta_at,
                                 where)
        if meta["timestamp_eof"] < meta["timestamp_sof"]:
            raise self._fail(f"timestamp_eof {meta['timestamp_eof']} is before timestamp_sof "
                             f"{meta['timestamp_sof']}", meta_at, where)
        layout = {k: meta[k] for k in _LAYOUT_KEYS}
        if layout != self._layout_meta:
            raise self._fail(f"layout {layout} differs from the file's {self._layout_meta}",
                             meta_at, where)
        unsigned = {k: v for k, v in meta.items() if k != "crc32"}
        return RecordInfo(index, meta["frame_id"], meta["timestamp_sof"],
                          meta["timestamp_eof"], offset, data_at, meta["crc32"],
                          zlib.crc32(canonical.encode(unsigned)))

    # -- reading ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.records)

    def read_into(self, index: int, buffer: Any) -> RecordInfo:
        """Read frame ``index``'s bytes into ``buffer`` (writable, at least ``nbytes`` long;
        e.g. a pool slot) and check its CRC-32 (ReplayFormatError on a mismatch)."""
        return self._check_crc(self.records[index], buffer)

    def _check_crc(self, info: RecordInfo, buffer: Any) -> RecordInfo:
        view = memoryview(buffer).cast("B")[:self.layout.nbytes]
        got = os.preadv(self._file.fileno(), [view], info.data_offset)
        if got != len(view):
            raise self._fail("truncated frame data (the file changed since it was opened?)",
                             info.data_offset, f"record {info.index}")
        if zlib.crc32(view, info._meta_crc) != info.crc32:
            raise self._fail(f"CRC-32 mismatch in frame {info.frame_id}", info.offset,
                             f"record {info.index}")
        return info

    def read(self, index: int) -> bytes:
        """Frame ``index``'s bytes, checked (a copy; prefer :meth:`read_into`)."""
        buf = bytearray(self.layout.nbytes)
        self.read_into(index, buf)
        return bytes(buf)

    def verify(self) -> None:
        """Check every frame's CRC-32 (reads the whole file once)."""
        buf = bytearray(self.layout.nbytes)
        for i in range(len(self.records)):
            self.read_into(i, buf)

    def __iter__(self) -> Iterator[tuple[RecordInfo, bytes]]:
        for i in range(len(self.records)):
            yield self.records[i], self.read(i)

    def summary(self) -> dict[str, Any]:
        """What the index says of the recording (no frame data is read): camera, source,
        layout, frames, first and last frame id, ids missing and in how many gaps (the
        largest), seconds from the first ``timestamp_sof`` to the last, frames per second
        over that span, the median and largest interval between frames and the median
        exposure (``eof - sof``) in ms, and the file's bytes. Unknowns (no frames, one frame)
        are None."""
        records = self.records
        sofs = np.array([r.timestamp_sof for r in records], np.float64)
        gaps = [b.frame_id - a.frame_id - 1 for a, b in zip(records, records[1:])
                if b.frame_id != a.frame_id + 1]
        span = (sofs[-1] - sofs[0]) / 1e9 if len(records) > 1 else None
        intervals = np.diff(sofs) / 1e6
        exposure = np.array([r.timestamp_eof - r.timestamp_sof for r in records], np.float64)
        return {"camera": self.camera, "source": self.source, "layout": self.layout.to_dict(),
                "frames": len(records),
                "first_id": records[0].frame_id if records else None,
                "last_id": records[-1].frame_id if records else None,
                "missing_ids": sum(gaps), "gaps": len(gaps), "largest_gap": max(gaps, default=0),
                "span_s": span,
                "rate_hz": (len(records) - 1) / span if span else None,
                "interval_ms": ({"median": float(np.median(intervals)),
                                 "max": float(intervals.max())} if len(intervals) else None),
                "exposure_ms": float(np.median(exposure)) / 1e6 if len(exposure) else None,
                "file_bytes": self.size}

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "ReplayReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReplayWriter:
    """Writes a recorded-frames file for ``layout``, refusing anything the reader would.

    The file is written under a temporary name next to ``path`` and renamed into place by
    :meth:`close` (so ``path`` never holds a half-written file); :meth:`abort` removes it.
    ``overwrite=False`` refuses an existing ``path``.
    """

    def __init__(self, path: str | os.PathLike, layout: FrameLayout, *, camera: str,
                 source: str = "", overwrite: bool = False) -> None:
        self.path = Path(path)
        self.layout = layout
        if not camera or len(camera) > _MAX_NAME or len(source) > _MAX_NAME:
            raise ReplayFormatError(f"camera and source must be 1 and 0 .. {_MAX_NAME} "
                                    f"characters", path=str(path))
        if self.path.is_dir():
            raise ReplayFormatError("is a folder", path=str(path))
        if not overwrite and self.path.exists():
            raise ReplayFormatError("already exists (refusing to overwrite)", path=str(path))
        meta = canonical.encode({"camera": camera, "source": source,
                                 **layout.to_dict()})
        self._layout_meta = {k: v for k, v in layout.to_dict().items() if k != "nbytes"}
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial",
                                       dir=self.path.parent if str(self.path.parent) else ".")
        except OSError as exc:
            raise ReplayFormatError(f"cannot create: {exc.strerror}", path=str(path)) from None
        self._tmp = Path(tmp)
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600; a recording is not a secret
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
        self._file.write(_FILE_HEADER.pack(FILE_MAGIC, VERSION, len(meta), zlib.crc32(meta),
                                           bytes(12)) + meta)
        self.frames = 0
        self.bytes = _FILE_HEADER.size + len(meta)
        self._last: tuple[int, int] | None = None

    def write(self, frame_id: int, timestamp_sof: int, timestamp_eof: int, data: Any) -> None:
        """Append one frame: its id, timestamps and buffer (``layout.nbytes`` bytes)."""
        if self._file is None:
            raise ReplayFormatError("the writer is closed", path=str(self.path))
        view = memoryview(data).cast("B")
        if len(view) != self.layout.nbytes:
            raise ReplayFormatError(f"frame {frame_id}: {len(view)} bytes, the layout needs "
                                    f"{self.layout.nbytes}", path=str(self.path))
        if not 0 <= timestamp_sof <= timestamp_eof <= _U64 or not 0 <= frame_id <= _U64:
            raise ReplayFormatError(f"frame {frame_id}: ids and timestamps must be in "
                                    f"[0, 2**64) with sof <= eof", path=str(self.path))
        if self._last is not None and (frame_id <= self._last[0]
                                       or timestamp_sof < self._last[1]):
            raise ReplayFormatError(f"frame {frame_id} (sof {timestamp_sof}) does not follow "
                                    f"frame {self._last[0]} (sof {self._last[1]})",
                                    path=str(self.path))
        unsigned = {"frame_id": int(frame_id), "timestamp_sof": int(timestamp_sof),
                    "timestamp_eof": int(timestamp_eof), **self._layout_meta}
        crc = zlib.crc32(view, zlib.crc32(canonical.encode(unsigned)))
        meta = canonical.encode({**unsigned, "crc32": crc})
        try:
            self._file.write(_RECORD_HEADER.pack(RECORD_MAGIC, len(meta), len(view)))
            self._file.write(meta)
            self._file.write(view)
        except OSError as exc:  # a full disk: what was written whole is kept by close()
            raise ReplayFormatError(f"cannot write frame {frame_id}: {exc.strerror}",
                                    path=str(self.path)) from None
        # bytes first: close() keeps exactly self.bytes, so a record cut short by Ctrl-C
        # between the writes above is dropped, never kept truncated
        self.bytes += _RECORD_HEADER.size + len(meta) + len(view)
        self._last = (int(frame_id), int(timestamp_sof))
        self.frames += 1

    def write_lease(self, lease: Any) -> None:
        """Append the frame a lease holds (its bytes straight from the pool, no copy)."""
        f = lease.frame
        if f.layout != self.layout:
            raise ReplayFormatError(f"{f}: layout differs from the file's "
                                    f"{self.layout.describe()}", path=str(self.path))
        self.write(f.frame_id, f.timestamp_sof, f.timestamp_eof, lease.buffer())

    def close(self) -> None:
        """Flush, cut off any record left incomplete, fsync and rename the file into place."""
        if self._file is None:
            return
        f, self._file = self._file, None
        try:
            try:
                f.flush()
                f.truncate(self.bytes)
                os.fsync(f.fileno())
            finally:
                f.close()
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self._tmp.unlink(missing_ok=True)
            raise ReplayFormatError(f"cannot write: {exc.strerror}", path=str(self.path)) \
                from None

    def abort(self) -> None:
        """Discard what was written."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "ReplayWriter":
        return self

    def __exit__(self, exc_type, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


@dataclass(frozen=True)
class Salvaged:
    """What :func:`salvage` kept: frames and their ids, bytes kept and dropped, and why the
    tail was dropped (None when the file was whole)."""

    frames: int
    first_id: int | None
    last_id: int | None
    kept_bytes: int
    dropped_bytes: int
    reason: str | None


def salvage(source: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False,
            limits: ReplayLimits = ReplayLimits(),
            progress: Callable[[int, int], None] | None = None) -> Salvaged:
    """Keep the whole frames of a recording that was cut off, e.g. the ``.partial`` file a
    recording killed mid-way (crash, SIGKILL, power loss) leaves beside its ``--out``.

    The file header must be whole; then every record is checked as the reader checks it, and
    its data against its CRC-32, up to the first record that fails: that record and everything
    after it is the torn tail. The records before it are written to ``out`` (a temporary name,
    fsync, rename: ``out`` never holds a half-written file), which the reader then opens like
    any recording. ``source`` is left as it is. A ``ReplayFormatError`` when the header is not
    whole or no frame is, or ``out`` cannot be written (or exists, without ``overwrite``).
    ``progress(done, total)`` is called with bytes checked."""
    out = Path(out)
    if out.is_dir():
        raise ReplayFormatError("is a folder", path=str(out))
    if not overwrite and out.exists():
        raise ReplayFormatError("already exists (refusing to overwrite)", path=str(out))
    with ReplayReader(source, limits=limits, salvage=True, progress=progress) as reader:
        dropped = reader.dropped
        reason = None if dropped is None else str(dropped).removeprefix(f"{reader.path}: ")
        if not reader.records:
            why = f": {reason}" if reason is not None else " (the file ends after its header)"
            raise ReplayFormatError(f"no whole frame to salvage{why}", path=reader.path)
        end, size, fd = reader.end, reader.size, reader._file.fileno()

        def copy(f: BinaryIO) -> None:  # the kept prefix, a chunk at a time
            done = 0
            while done < end:
                chunk = os.pread(fd, min(_COPY_CHUNK, end - done), done)
                if not chunk:
                    raise ReplayFormatError("the file shrank while it was copied",
                                            path=reader.path)
                f.write(chunk)
                done += len(chunk)

        try:
            atomic_write(out, copy)
        except OSError as exc:
            raise ReplayFormatError(f"cannot write: {exc.strerror}", path=str(out)) from None
        records = reader.records
        return Salvaged(len(records), records[0].frame_id, records[-1].frame_id, end,
                        size - end, reason)
