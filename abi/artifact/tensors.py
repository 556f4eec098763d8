"""The tensor section: layout, per-tensor SHA-256, the root digest, and zero-copy views.

Tensors are stored raw (C order, little-endian), each at a 64-byte-aligned offset relative to
the start of the section, in manifest order, each directly after the previous one (the offset
is the previous end rounded up to 64). Every gap and the tail up to the section's length (the
last end rounded up to 64) are zero. So the table of (name, dtype, shape) fixes every byte
position: there is exactly one valid layout.

The root digest is SHA-256 of the canonical msgpack of the tensor table (every entry's name,
role, dtype, shape, offset, nbytes and sha256), so it binds the whole section.
"""

from __future__ import annotations

import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, Sequence

import numpy as np

from abi import dtypes
from abi.artifact import canonical
from abi.artifact.container import align
from abi.errors import ArtifactFormatError, IncompatibleArtifactError, TensorHashError

__all__ = ["ROLES", "TensorEntry", "plan_tensors", "write_section", "root_digest",
           "verify_section", "tensor_views", "check_byte_order"]

#: weight: a learned parameter; state: frozen running state (BatchNorm running_mean,
#: running_var, num_batches_tracked); golden: a reference input or output.
ROLES = ("weight", "state", "golden")

_HASH_CHUNK = 4 * 2**20
#: Below this many tensor bytes, hashing stays on the calling thread.
_PARALLEL_BYTES = 2 * 2**20


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the section as the manifest declares it."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "dtype": self.dtype,
                "shape": list(self.shape), "offset": self.offset, "nbytes": self.nbytes,
                "sha256": self.sha256}


def check_byte_order() -> None:
    """Tensors are stored little-endian and mapped as native arrays: refuse a big-endian host."""
    if sys.byteorder != "little":  # pragma: no cover - no big-endian CI
        raise IncompatibleArtifactError("artifacts store little-endian tensors; this host is "
                                        "big-endian")


def _raw(array: np.ndarray) -> memoryview:
    a = np.ascontiguousarray(array)
    return memoryview(a.reshape(-1).view(np.uint8))


def plan_tensors(items: Sequence[tuple[str, str, np.ndarray]]) -> tuple[list[TensorEntry], int]:
    """Entries (offsets and SHA-256 filled in) for ``(name, role, array)`` items, and the
    section length."""
    check_byte_order()
    entries, offset = [], 0
    for name, role, array in items:
        if role not in ROLES:
            raise ValueError(f"tensor {name!r}: role {role!r} is not one of {ROLES}")
        dtype = dtypes.from_numpy(array.dtype)
        offset = align(offset)
        raw = _raw(array)
        entries.append(TensorEntry(name, role, dtype, tuple(int(d) for d in array.shape),
                                   offset, raw.nbytes, hashlib.sha256(raw).hexdigest()))
        offset += raw.nbytes
    return entries, align(offset)


def write_section(f: BinaryIO, entries: Sequence[TensorEntry], arrays: Sequence[np.ndarray],
                  length: int) -> None:
    """Write the section for ``entries`` (from :func:`plan_tensors`) and their arrays."""
    position = 0
    for entry, array in zip(entries, arrays, strict=True):
        f.write(bytes(entry.offset - position))
        raw = _raw(array)
        if raw.nbytes != entry.nbytes:
            raise ValueError(f"tensor {entry.name!r} changed size since it was planned")
        f.write(raw)
        position = entry.offset + entry.nbytes
    f.write(bytes(length - position))


def root_digest(entries: Sequence[TensorEntry]) -> str:
    """SHA-256 (hex) of the canonical msgpack of the tensor table."""
    table = [e.to_dict() for e in entries]
    return hashlib.sha256(canonical.encode(table, where="tensors")).hexdigest()


def verify_section(section: memoryview, entries: Sequence[TensorEntry], length: int,
                   expected_root: str, *, workers: int | None = None) -> None:
    """Hash every tensor (streamed from ``section``, no copy), recompute the root digest and
    check that every byte outside the tensors is zero.

    Tensors are hashed on up to ``workers`` threads (default: the usable cores, at most 4;
    hashlib releases the GIL), largest first. Raises TensorHashError listing every tensor
    whose bytes differ from its SHA-256 (or for a root digest that does not match the table),
    ArtifactFormatError for non-zero padding.
    """
    if len(section) != length:
        raise ArtifactFormatError(f"{len(section)} bytes, the manifest declares {length}",
                                  where="tensor section")

    def digest(entry: TensorEntry) -> str:
        h = hashlib.sha256()
        end = entry.offset + entry.nbytes
        for start in range(entry.offset, end, _HASH_CHUNK):
            h.update(section[start:min(start + _HASH_CHUNK, end)])
        return h.hexdigest()

    workers = _workers() if workers is None else max(1, workers)
    total = sum(e.nbytes for e in entries)
    if workers > 1 and total >= _PARALLEL_BYTES and len(entries) > 1:
        order = sorted(range(len(entries)), key=lambda i: -entries[i].nbytes)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            hashed = dict(zip(order, pool.map(lambda i: digest(entries[i]), order)))
        digests = [hashed[i] for i in range(len(entries))]
    else:
        digests = [digest(e) for e in entries]
    mismatched = [e.name for e, d in zip(entries, digests) if d != e.sha256]
    if mismatched:
        raise TensorHashError(mismatched)
    computed = [TensorEntry(e.name, e.role, e.dtype, e.shape, e.offset, e.nbytes, d)
                for e, d in zip(entries, digests)]
    if root_digest(computed) != expected_root:
        raise TensorHashError([], root=True)
    position = 0
    for entry in [*entries, None]:
        stop = length if entry is None else entry.offset
        if any(section[position:stop]):
            where = "the end" if entry is None else f"tensor {entry.name!r}"
            raise ArtifactFormatError(f"padding before {where} (bytes {position}..{stop}) is "
                                      f"not zero", where="tensor section")
        if entry is not None:
            position = entry.offset + entry.nbytes


def _workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def tensor_views(buffer: Any, section_offset: int,
                 entries: Sequence[TensorEntry]) -> dict[str, np.ndarray]:
    """Read-only numpy views of every entry into ``buffer`` (the mapped file): no copy.

    The views keep ``buffer`` alive; they are read-only because the map is.
    """
    check_byte_order()
    views: dict[str, np.ndarray] = {}
    for e in entries:
        dtype = dtypes.to_numpy(e.dtype)
        count = e.nbytes // dtype.itemsize
        if count == 0:
            array = np.zeros(e.shape, dtype)
            array.flags.writeable = False
        else:
            array = np.frombuffer(buffer, dtype=dtype, count=count,
                                  offset=section_offset + e.offset).reshape(e.shape)
        views[e.name] = array
    return views

