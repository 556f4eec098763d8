"""Loading an artifact from an open descriptor, pinned to digests a verifier already checked.

Used by the sandbox worker (``plugin_host.sandbox.worker``), zero-copy.

The host runs the full :func:`plugin_host.artifacts.load_verified` (signatures, trust,
thresholds, compatibility, expiry, rollback, hashes) on an open descriptor and passes that
same descriptor to the worker, so no path is resolved twice and the file cannot be swapped in
between. The worker holds no keys and does not need them: it pins the manifest to the SHA-256
the host verified the signatures over, checks that its root digest is the one the host saw,
and then hashes every tensor again from its own read-only map before building the graph over
read-only views of it (nothing is copied). A file changed in place since the host's check is
refused with :class:`~abi.errors.TensorHashError` (or ``ArtifactError`` for the manifest).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat

from abi.artifact import (DEFAULT_LIMITS, HEADER_SIZE, Limits, Manifest, check_manifest, decode,
                          parse_header, tensor_views, verify_section)
from abi.errors import ArtifactError, ArtifactFormatError

from ..graph import Graph

__all__ = ["load_pinned"]

_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)


def load_pinned(fd: int, *, manifest_sha256: str, root_digest: str,
                limits: Limits = DEFAULT_LIMITS) -> tuple[Graph, Manifest, mmap.mmap]:
    """``(graph, manifest, map)`` of the artifact open as ``fd``, pinned to the host's check.

    The descriptor may be closed afterwards; the map (and the graph's views) stay valid.
    """
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactFormatError("not a regular file", where="file")
    if st.st_size > limits.max_file_bytes:
        raise ArtifactFormatError(f"{st.st_size} bytes exceed the cap", where="file")
    header = parse_header(os.pread(fd, HEADER_SIZE, 0), st.st_size, limits)
    amap = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
    manifest_bytes = amap[HEADER_SIZE:HEADER_SIZE + header.manifest_length]
    if hashlib.sha256(manifest_bytes).hexdigest() != manifest_sha256:
        raise ArtifactError("the artifact's manifest is not the one the host verified (the "
                            "file changed in place)")
    manifest = check_manifest(decode(manifest_bytes, limits=limits.manifest_decode_limits(),
                                     where="manifest"), limits=limits)
    if manifest.root_digest != root_digest or manifest.section_length != header.tensor_length:
        raise ArtifactError("the artifact's tensor table is not the one the host verified")
    if header.tensor_length:
        start = header.tensor_offset // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            amap.madvise(_MADV_POPULATE_READ, start, st.st_size - start)
        except (OSError, ValueError):
            pass
    section = memoryview(amap)[header.tensor_offset:header.tensor_offset + header.tensor_length]
    try:
        # one thread: the worker must stay single-threaded until it has confined itself
        verify_section(section, manifest.tensors, manifest.section_length, manifest.root_digest,
                       workers=1)
    finally:
        section.release()
    views = tensor_views(amap, header.tensor_offset, manifest.tensors)
    constants = {e.name: views[e.name] for e in manifest.tensors if e.role != "golden"}
    return Graph.from_dict(dict(manifest.graph), constants), manifest, amap
