"""The artifact file: fixed header, manifest, signature block, padding, tensor section.

::

    offset 0    header (64 bytes, little-endian)
                  magic               8 bytes  b"\\x89PHART\\r\\n"
                  format_version      u32      1
                  reserved            u32      0
                  manifest_length     u64      M  (1 .. cap)
                  signatures_length   u64      S  (1 .. cap)
                  tensor_offset       u64      align64(64 + M + S)
                  tensor_length       u64      T  (= the manifest's tensor_section.length)
                  reserved            16 bytes zero
    64          manifest           M bytes, canonical msgpack: what every signature covers
    64+M        signature block    S bytes, canonical msgpack: [{key_id, signature}, ...]
                                   sorted by key_id, one entry per key
    64+M+S      zero padding up to tensor_offset
    tensor_offset  tensor section  T bytes; tensors at 64-byte-aligned offsets (relative to
                                   the section) in manifest order, zero padding between them
                                   and after the last one; the file ends exactly here

Every header field is determined by the manifest and the file size, so a changed header byte
is always refused. Signing rewrites the header and the signature block and moves the tensor
section; the manifest bytes never change after the build.

A signature is Ed25519 over :func:`signed_message` (a fixed context string, then the manifest
bytes); the cryptography itself lives in the host (``plugin_host.artifacts``).
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import stat
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from abi.artifact import canonical
from abi.errors import ArtifactError, ArtifactFormatError

__all__ = ["MAGIC", "FORMAT_VERSION", "HEADER_SIZE", "ALIGNMENT", "SIGNED_CONTEXT", "Limits",
           "DEFAULT_LIMITS", "Header", "SignatureEntry", "align", "layout", "parse_header",
           "encode_signatures", "decode_signatures", "signed_message", "file_prefix",
           "ArtifactFile", "atomic_write", "create_new", "copy_chunks", "is_key_id"]

MAGIC = b"\x89PHART\r\n"
FORMAT_VERSION = 1
HEADER_SIZE = 64
ALIGNMENT = 64
#: Prefixed to the manifest bytes before signing, so an artifact signature can never be
#: replayed as a signature over some other kind of document.
SIGNED_CONTEXT = b"plugin-host artifact manifest v1\x00"

_HEADER = struct.Struct("<8sIIQQQQ16s")
assert _HEADER.size == HEADER_SIZE

#: madvise(2) option that prefaults a range (Linux 5.14+; not in Python 3.11's mmap module).
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform == "linux" else 0)

KEY_ID_HEX = 32  # hex digits: the first 16 bytes of SHA-256 of the raw public key
SIGNATURE_BYTES = 64  # Ed25519


@dataclass(frozen=True)
class Limits:
    """Size caps, checked before anything of that size is read, mapped or decoded."""

    max_file_bytes: int = 8 * 2**30
    max_manifest_bytes: int = 16 * 2**20
    max_signature_block_bytes: int = 64 * 2**10
    max_signatures: int = 32
    max_tensors: int = 2**16

    def manifest_decode_limits(self) -> canonical.DecodeLimits:
        return canonical.DecodeLimits(max_bytes=self.max_manifest_bytes)

    def signature_decode_limits(self) -> canonical.DecodeLimits:
        return canonical.DecodeLimits(max_bytes=self.max_signature_block_bytes, max_depth=3,
                                      max_length=max(self.max_signatures, SIGNATURE_BYTES))


DEFAULT_LIMITS = Limits()


def align(n: int, alignment: int = ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    return -(-n // alignment) * alignment


def is_key_id(value: Any) -> bool:
    """True for a key id: 32 lowercase hex digits."""
    return (type(value) is str and len(value) == KEY_ID_HEX
            and all(c in "0123456789abcdef" for c in value))


# --- header ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    """The fixed header's variable fields (magic, version and reserved bytes are constants)."""

    manifest_length: int
    signatures_length: int
    tensor_offset: int
    tensor_length: int

    @property
    def signatures_offset(self) -> int:
        return HEADER_SIZE + self.manifest_length

    @property
    def padding_offset(self) -> int:
        return HEADER_SIZE + self.manifest_length + self.signatures_length

    @property
    def file_size(self) -> int:
        return self.tensor_offset + self.tensor_length

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, FORMAT_VERSION, 0, self.manifest_length,
                            self.signatures_length, self.tensor_offset, self.tensor_length,
                            bytes(16))


def layout(manifest_length: int, signatures_length: int, tensor_length: int) -> Header:
    """The header of a file with these part lengths."""
    return Header(manifest_length, signatures_length,
                  align(HEADER_SIZE + manifest_length + signatures_length), tensor_length)


def parse_header(raw: bytes, file_size: int, limits: Limits = DEFAULT_LIMITS) -> Header:
    """Check the 64 header bytes against the constants, the caps and the file size.

    Raises ArtifactFormatError saying which field is wrong and what it should be.
    """
    def bad(message: str) -> ArtifactFormatError:
        return ArtifactFormatError(message, where="header")

    if len(raw) != HEADER_SIZE:
        raise bad(f"{len(raw)} bytes, expected {HEADER_SIZE}")
    magic, version, reserved, m, s, t_off, t_len, reserved2 = _HEADER.unpack(raw)
    if magic != MAGIC:
        raise bad(f"magic is {magic!r}, expected {MAGIC!r} (not a plugin-host artifact)")
    if version != FORMAT_VERSION:
        raise bad(f"format version {version} is not supported (this host reads "
                  f"{FORMAT_VERSION})")
    if reserved != 0 or reserved2 != bytes(16):
        raise bad("reserved bytes are not zero")
    if not 1 <= m <= limits.max_manifest_bytes:
        raise bad(f"manifest length {m} is outside [1, {limits.max_manifest_bytes}]")
    if not 1 <= s <= limits.max_signature_block_bytes:
        raise bad(f"signature block length {s} is outside "
                  f"[1, {limits.max_signature_block_bytes}]")
    expected = layout(m, s, t_len)
    if t_off != expected.tensor_offset:
        raise bad(f"tensor section offset is {t_off}, expected {expected.tensor_offset} "
                  f"(64 + manifest {m} + signatures {s}, aligned to {ALIGNMENT})")
    if t_len % ALIGNMENT:
        raise bad(f"tensor section length {t_len} is not a multiple of {ALIGNMENT}")
    if expected.file_size != file_size:
        raise bad(f"the tensor section ({t_len} bytes at {t_off}) ends at byte "
                  f"{expected.file_size} but the file has {file_size} bytes "
                  f"({'truncated' if file_size < expected.file_size else 'trailing bytes'})")
    return expected


# --- signature block ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SignatureEntry:
    """One signature as stored: the signer's key id and the 64 signature bytes (unverified)."""

    key_id: str
    signature: bytes

    def to_dict(self) -> dict[str, Any]:
        return {"key_id": self.key_id, "signature": self.signature}


def encode_signatures(entries: Iterable[SignatureEntry]) -> bytes:
    """The canonical signature block: entries sorted by key id; a key id twice is an error."""
    ordered = sorted(entries, key=lambda e: e.key_id)
    for a, b in zip(ordered, ordered[1:]):
        if a.key_id == b.key_id:
            raise ArtifactFormatError(f"key id {a.key_id} signs twice", where="signature block")
    for e in ordered:
        if not is_key_id(e.key_id) or type(e.signature) is not bytes \
                or len(e.signature) != SIGNATURE_BYTES:
            raise ArtifactFormatError(f"malformed entry for key id {e.key_id!r}",
                                      where="signature block")
    return canonical.encode([e.to_dict() for e in ordered], where="signature block")


def decode_signatures(data: bytes, limits: Limits = DEFAULT_LIMITS) -> tuple[SignatureEntry, ...]:
    """Decode and check a signature block (hostile); ArtifactFormatError if malformed."""
    where = "signature block"
    value = canonical.decode(data, limits=limits.signature_decode_limits(), where=where)
    if type(value) is not list:
        raise ArtifactFormatError(f"expected a list, got {type(value).__name__}", where=where)
    if len(value) > limits.max_signatures:
        raise ArtifactFormatError(f"{len(value)} signatures exceed the cap of "
                                  f"{limits.max_signatures}", where=where)
    entries = []
    previous = ""
    for i, item in enumerate(value):
        if type(item) is not dict or set(item) != {"key_id", "signature"}:
            raise ArtifactFormatError(f"entry {i} must be a map with exactly key_id and "
                                      f"signature", where=where)
        key_id, signature = item["key_id"], item["signature"]
        if not is_key_id(key_id):
            raise ArtifactFormatError(f"entry {i}: key_id must be {KEY_ID_HEX} lowercase hex "
                                      f"digits", where=where)
        if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
            raise ArtifactFormatError(f"entry {i} (key {key_id}): signature must be "
                                      f"{SIGNATURE_BYTES} bytes of bin", where=where)
        if key_id <= previous:
            raise ArtifactFormatError(f"entry {i}: key id {key_id} is "
                                      f"{'repeated' if key_id == previous else 'out of order'}",
                                      where=where)
        previous = key_id
        entries.append(SignatureEntry(key_id, signature))
    return tuple(entries)


def signed_message(manifest_bytes: bytes) -> bytes:
    """The exact bytes an artifact signature covers."""
    return SIGNED_CONTEXT + bytes(manifest_bytes)


def file_prefix(manifest_bytes: bytes, signature_block: bytes, tensor_length: int) -> bytes:
    """Everything before the tensor section: header, manifest, signature block, zero padding."""
    header = layout(len(manifest_bytes), len(signature_block), tensor_length)
    body = header.pack() + manifest_bytes + signature_block
    return body + bytes(header.tensor_offset - len(body))


# --- reading -----------------------------------------------------------------------------------


class ArtifactFile:
    """An artifact file opened for checking: header parsed, the whole file mapped read-only.

    Nothing here is trusted: the manifest bytes and the signature block are exposed as
    ``unverified_*``. Opening checks, in order: a regular file (never a FIFO or device), the
    file-size cap, the header against the caps and the file size, and the zero padding before
    the tensor section. Tensors are views into :attr:`map` (see ``abi.artifact.tensors``).

    Use as a context manager or call :meth:`close`; closing is skipped while numpy views of
    the map are alive (the map then lives as long as they do).
    """

    def __init__(self, path: str | os.PathLike, limits: Limits = DEFAULT_LIMITS) -> None:
        self.path = str(path)
        self.limits = limits
        self.map: mmap.mmap | None = None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise ArtifactError(f"cannot open artifact {self.path}: {exc.strerror}",
                                path=self.path) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._bad("not a regular file")
            size = st.st_size
            if size > limits.max_file_bytes:
                raise self._bad(f"{size} bytes exceed the file size cap of "
                                f"{limits.max_file_bytes}")
            if size < HEADER_SIZE:
                raise self._bad(f"{size} bytes, shorter than the {HEADER_SIZE}-byte header")
            raw = os.pread(fd, HEADER_SIZE, 0)
            self.header = parse_header(raw, size, limits)
            self.size = size
            self.map = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        except ArtifactError as exc:
            exc.path = exc.path or self.path
            exc.context.setdefault("path", self.path)
            raise
        except OSError as exc:
            raise ArtifactError(f"cannot read artifact {self.path}: {exc.strerror}",
                                path=self.path) from None
        finally:
            os.close(fd)
        h = self.header
        if any(self.map[h.padding_offset:h.tensor_offset]):
            self.close()
            raise self._bad("padding before the tensor section is not zero")

    def _bad(self, message: str) -> ArtifactFormatError:
        return ArtifactFormatError(message, where="file", path=self.path)

    # -- the parts (unverified) -----------------------------------------------------------------

    @property
    def unverified_manifest_bytes(self) -> bytes:
        """The manifest bytes exactly as stored (what a signature must cover)."""
        return self.map[HEADER_SIZE:HEADER_SIZE + self.header.manifest_length]

    def unverified_signatures(self) -> tuple[SignatureEntry, ...]:
        """The decoded, format-checked signature block; nothing about it is verified."""
        h = self.header
        try:
            return decode_signatures(self.map[h.signatures_offset:h.padding_offset], self.limits)
        except ArtifactFormatError as exc:
            exc.path = self.path
            raise

    def populate(self) -> None:
        """Map every page of the tensor section in one system call before it is hashed.

        Hashing then runs on both cores without contending page faults. Linux 5.14+
        (``MADV_POPULATE_READ``); elsewhere a no-op, and pages fault in as they are read.
        Call it only after the signatures and the manifest were verified, so an unverified
        file is never paged in.
        """
        h = self.header
        if self.map is None or not h.tensor_length or not _MADV_POPULATE_READ:
            return
        start = h.tensor_offset // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            self.map.madvise(_MADV_POPULATE_READ, start, self.size - start)
        except (OSError, ValueError):  # an older kernel: the faults happen while hashing
            pass

    def section(self) -> memoryview:
        """A read-only memoryview of the tensor section (release it when done)."""
        h = self.header
        return memoryview(self.map)[h.tensor_offset:h.tensor_offset + h.tensor_length]

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # views still alive: the map is freed with the last of them
                pass

    def __enter__(self) -> ArtifactFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- writing -----------------------------------------------------------------------------------


def atomic_write(path: str | os.PathLike, write: Callable[[Any], None], *,
                 mode: int = 0o644) -> None:
    """Write a file by calling ``write(f)`` on a temporary file beside ``path``, then fsync it,
    rename it over ``path`` and fsync the directory: readers see the old file or the new one,
    never a partial one.

    The temporary file has no name while it is written (``O_TMPFILE``), so a process killed
    meanwhile (SIGKILL, power loss) leaves nothing behind; it is named ``.NAME.XXXX.tmp`` only
    for the rename. Where the file system or the kernel has no ``O_TMPFILE``, or ``/proc`` is
    not mounted, it is a named temporary file from the start (removed on any exception)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    tmp = None
    try:
        fd = _unnamed_file(directory)
        if fd is None:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as f:
            _fill(f, write, mode)
            if tmp is None:
                tmp = _link_beside(f.fileno(), directory, path.name)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            _remove(tmp)
        raise
    _fsync_dir(directory)


def _fill(f: Any, write: Callable[[Any], None], mode: int) -> None:
    """``write(f)``, ``mode`` set (the umask must not widen or narrow it), flushed, fsynced."""
    os.fchmod(f.fileno(), mode)
    write(f)
    f.flush()
    os.fsync(f.fileno())


def _remove(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _unnamed_file(directory: Path) -> int | None:
    """A new file in ``directory`` with no name yet (``O_TMPFILE``), or None where that is not
    available: ``O_TMPFILE`` unknown, refused by the file system (EOPNOTSUPP, EISDIR on an old
    kernel, EINVAL), or no ``/proc/self/fd`` to give it a name by."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(directory, flag | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def _link_beside(fd: int, directory: Path, name: str) -> str:
    """Give the unnamed file ``fd`` a new temporary name ``.NAME.XXXX.tmp`` in ``directory``."""
    while True:
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            _link(fd, directory, tmp)
            return os.path.join(directory, tmp)
        except FileExistsError:
            continue


def _link(fd: int, directory: Path, name: str) -> None:
    """Name the unnamed file ``fd`` ``name`` in ``directory`` (FileExistsError where that name
    exists): ``linkat`` following ``/proc/self/fd/N``; a ``dst_dir_fd`` makes Python call
    ``linkat`` with ``AT_SYMLINK_FOLLOW`` rather than ``link``, which would link the symlink."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dfd, follow_symlinks=True)
    finally:
        os.close(dfd)


def create_new(path: str | os.PathLike, write: Callable[[Any], None], *,
               mode: int = 0o644) -> None:
    """Create ``path`` by calling ``write(f)``, complete or not at all, refusing one that exists
    (FileExistsError): written and fsynced as a file with no name, then linked to ``path``,
    which fails where it exists, and the directory fsynced. A process killed meanwhile leaves
    nothing. Without ``O_TMPFILE`` (see :func:`atomic_write`): created with ``O_EXCL`` and
    removed on any exception (a kill leaves it partial)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd = _unnamed_file(directory)
    named = fd is None
    if named:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            _fill(f, write, mode)
            if not named:
                _link(f.fileno(), directory, path.name)
    except BaseException:
        if named:
            _remove(path)
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def copy_chunks(f: Any, view: memoryview, chunk: int = 8 * 2**20) -> None:
    """Write ``view`` to ``f`` in chunks (never a full copy in memory)."""
    for start in range(0, len(view), chunk):
        f.write(view[start:start + chunk])
