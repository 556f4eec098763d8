"""Load an artifact only after verifying it; read a manifest for inspection without trust.

:func:`load_verified` checks, in this order, and raises at the first failure (it never returns
a bool):

1. size caps, then the fixed header against the file size (``ArtifactFormatError``);
2. the signature block's format, then every signature over the raw manifest bytes against the
   trust store: revoked (``RevokedKeyError``), unknown or without the signer role
   (``UntrustedKeyError``), invalid (``SignatureError``), none (``ThresholdError``);
3. only then the manifest is decoded (canonical msgpack, capped) and checked against the
   schema and its own cross-references (``ArtifactFormatError``), and the per-name k-of-n
   threshold applied (``ThresholdError``);
4. host ABI version, every op and op version known here, atomic flags agree
   (``IncompatibleArtifactError``); atomic ops need an audit (``UnauditedOpError``);
5. a target backend is available (``IncompatibleArtifactError``);
6. expiry, if set (``ExpiredArtifactError``);
7. rollback against the persisted state (``RollbackError``);
8. every tensor hashed straight from the mapped file and the root digest recomputed
   (``TensorHashError``, naming every mismatched tensor), then every padding byte zero;
9. the Graph is built from the manifest with read-only views of the map as its tensors (its
   shape checks run), and the version is recorded as accepted.

Nothing large is copied: tensors stay in the page cache, mapped read-only.

The mapped file must not be modified while loaded (a verified view would change with it):
keep artifacts where only the integrator can write, and replace files by renaming a new file
over the old one (what ``sign`` does), never by writing in place.
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from abi.artifact import (DEFAULT_LIMITS, FORMAT_VERSION, ArtifactFile, Limits, Manifest,
                          check_compatible, check_manifest, decode, tensor_views, verify_section)

from ..backend import Backend
from ..errors import (ArtifactError, ArtifactFormatError, ExpiredArtifactError,
                      GoldenMismatchError, IncompatibleArtifactError, UnauditedOpError)
from ..executor import Executor
from ..graph import Graph
from ..stop_signals import unbroken
from .rollback import RollbackStore
from .trust import TrustStore

__all__ = ["VerifiedArtifact", "load_verified", "read_manifest_unverified"]


@dataclass(frozen=True)
class VerifiedArtifact:
    """An artifact that passed every check of :func:`load_verified`.

    ``graph`` has read-only views of the mapped file as its tensors; ``tensors`` holds every
    tensor of the file (weights, state and golden vectors) the same way; ``signers`` are the
    key ids whose signatures verified; ``backends`` the target backends available here.
    """

    path: str
    manifest: Manifest
    manifest_sha256: str
    signers: tuple[str, ...]
    graph: Graph
    tensors: Mapping[str, np.ndarray] = field(repr=False)
    backends: tuple[str, ...]
    audited_ops: tuple[tuple[str, str, int], ...]

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def signatures(self) -> list[dict[str, Any]]:
        """The verified signatures: ``[{"key_id": ...}]`` in signature-block order."""
        return [{"key_id": k} for k in self.signers]

    def golden_cases(self) -> list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]:
        """``(inputs, outputs)`` per golden case, as read-only views."""
        return [({k: self.tensors[t] for k, t in case.inputs.items()},
                 {k: self.tensors[t] for k, t in case.outputs.items()})
                for case in self.manifest.golden]

    def check_golden(self, backend: Backend) -> None:
        """Run every golden case on ``backend``; GoldenMismatchError beyond the tolerances."""
        executor = Executor(self.graph, backend)
        for i, (inputs, _) in enumerate(self.golden_cases()):
            self.compare_golden(i, executor.run(dict(inputs)),
                                where=f"on backend {backend.name!r}")

    def compare_golden(self, case: int, outputs: Mapping[str, np.ndarray], *,
                       where: str) -> None:
        """Compare ``outputs`` of golden case ``case`` with the reference, within each output's
        declared tolerance (exact for integer outputs); GoldenMismatchError otherwise.
        ``where`` says what produced them, for the message."""
        _, want = self.golden_cases()[case]
        for name, expected in want.items():
            tol = self.manifest.tolerances[name]
            worst, bad = tol.compare(np.asarray(outputs[name]), expected)
            if bad:
                raise GoldenMismatchError(
                    f"golden case {case}: output {name!r} {where} differs from the reference in "
                    f"{bad} of {expected.size} element(s) (max |diff| "
                    f"{worst:.3g}; rtol {tol.rtol:g}, atol {tol.atol:g})",
                    path=self.path, case=case, output=name)


def load_verified(path: str | os.PathLike, *, trust: TrustStore,
                  rollback: RollbackStore | None, backends: Iterable[str],
                  audited_ops: Iterable[tuple[str, int]] = (), now: float | None = None,
                  limits: Limits = DEFAULT_LIMITS, record: bool = True) -> VerifiedArtifact:
    """Verify the artifact at ``path`` and return it loaded (see the module docstring).

    ``trust`` is explicit (there is no default trust). ``rollback`` is the persisted version
    state, or None to skip rollback protection deliberately; with ``record`` the accepted
    version is written to it. ``backends`` are the backend names available on this host.
    ``audited_ops`` are ``(op, version)`` pairs of atomic ops with a recorded audit. ``now``
    is the Unix time expiry is judged at (default: the clock).
    """
    path = os.fspath(path)
    available = frozenset(backends)
    audited = frozenset((str(op), int(v)) for op, v in audited_ops)
    when = time.time() if now is None else float(now)
    artifact = ArtifactFile(path, limits)
    try:
        return _verify(artifact, trust, rollback, available, audited, when, limits, record)
    except ArtifactError as exc:
        exc.path = exc.path or path
        exc.context["path"] = exc.path
        artifact.close()
        raise
    except BaseException:
        artifact.close()
        raise


def _verify(artifact: ArtifactFile, trust: TrustStore, rollback: RollbackStore | None,
            available: frozenset[str], audited: frozenset[tuple[str, int]], now: float,
            limits: Limits, record: bool) -> VerifiedArtifact:
    # 2. signatures over the raw manifest bytes, before the manifest is decoded
    unverified_signatures = artifact.unverified_signatures()
    unverified_manifest_bytes = artifact.unverified_manifest_bytes
    signers = trust.verify_signatures(unverified_manifest_bytes, unverified_signatures)
    manifest_bytes = unverified_manifest_bytes  # authentic from here on

    # 3. decode, schema, per-name threshold
    manifest = check_manifest(decode(manifest_bytes, limits=limits.manifest_decode_limits(),
                                     where="manifest"), limits=limits)
    if manifest.section_length != artifact.header.tensor_length:
        raise ArtifactFormatError(f"tensor section length is {artifact.header.tensor_length}, "
                                  f"the manifest says {manifest.section_length}", where="header")
    trust.check_threshold(manifest.name, signers)
    label = f"artifact {manifest.name!r} {manifest.version}"

    # 4. host ABI, op table, audits
    atomic = check_compatible(manifest)
    unaudited = [(node, op, v) for node, op, v in atomic if (op, v) not in audited]
    if unaudited:
        shown = ", ".join(f"{op} v{v} (node {node!r})" for node, op, v in unaudited)
        raise UnauditedOpError(f"{label} uses atomic op(s) without a recorded audit: {shown}",
                               ops=[(op, v) for _, op, v in unaudited])

    # 5. target backend
    targets = tuple(b for b in manifest.backends if b in available)
    if not targets:
        raise IncompatibleArtifactError(f"{label} targets backend(s) "
                                        f"{', '.join(manifest.backends)}; available here: "
                                        f"{', '.join(sorted(available)) or 'none'}")

    # 6. expiry
    if manifest.expires is not None and now >= manifest.expires:
        raise ExpiredArtifactError(f"{label} expired at {_utc(manifest.expires)} (now "
                                   f"{_utc(now)})", expires=manifest.expires)

    # 7. rollback
    manifest_sha256 = hashlib.sha256(manifest_bytes).hexdigest()
    if rollback is not None:
        rollback.check(manifest.name, manifest.version, manifest_sha256)

    # 8. every tensor byte, the root digest, every padding byte -- hashed in the background
    # while 9. the graph is built over read-only views of the map. Building reads only the
    # views' shapes and dtypes, and nothing is returned unless every hash matched, so the
    # overlap changes the time taken, not what is accepted. A hash failure wins over a graph
    # error: it is the more precise account of a tampered file.
    artifact.populate()
    section = artifact.section()
    # a stop signal waits for the hashing thread (stop_signals.unbroken)
    with unbroken(), ThreadPoolExecutor(max_workers=1) as pool:
        hashing = pool.submit(verify_section, section, manifest.tensors, manifest.section_length,
                              manifest.root_digest)
        graph_error: BaseException | None = None
        try:
            views = tensor_views(artifact.map, artifact.header.tensor_offset, manifest.tensors)
            constants = {e.name: views[e.name] for e in manifest.tensors if e.role != "golden"}
            graph = Graph.from_dict(dict(manifest.graph), constants)
        except BaseException as exc:  # re-raised below, after the hashes have had their say
            graph_error = exc
        try:
            hashing.result()
        finally:
            section.release()
        if graph_error is not None:
            raise graph_error
    if rollback is not None and record:
        rollback.accept(manifest.name, manifest.version, manifest_sha256)
    return VerifiedArtifact(path=artifact.path, manifest=manifest,
                            manifest_sha256=manifest_sha256, signers=tuple(signers),
                            graph=graph, tensors=views, backends=targets,
                            audited_ops=tuple(atomic))


def read_manifest_unverified(path: str | os.PathLike, *,
                             limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The manifest and signature block of an artifact, format-checked but NOT verified.

    For inspection only: the header, the canonical encodings and the manifest schema are
    checked; signatures, trust, tensor bytes, compatibility and rollback are not. Returns
    ``{"path", "format_version", "manifest_sha256", "header", "signatures" (key_id,
    signature hex), "manifest"}`` with plain, JSON-friendly values.
    """
    path = os.fspath(path)
    with ArtifactFile(path, limits) as artifact:
        try:
            signatures = artifact.unverified_signatures()
            unverified_bytes = artifact.unverified_manifest_bytes
            unverified = decode(unverified_bytes, limits=limits.manifest_decode_limits(),
                                where="manifest")
            check_manifest(unverified, limits=limits)
        except ArtifactError as exc:
            exc.path = exc.path or path
            raise
        h = artifact.header
        return {
            "path": path,
            "format_version": FORMAT_VERSION,
            "manifest_sha256": hashlib.sha256(unverified_bytes).hexdigest(),
            "header": {"manifest_length": h.manifest_length,
                       "signatures_length": h.signatures_length,
                       "tensor_offset": h.tensor_offset, "tensor_length": h.tensor_length,
                       "file_size": h.file_size},
            "signatures": [{"key_id": s.key_id, "signature": s.signature.hex()}
                           for s in signatures],
            "manifest": unverified,
        }


def _utc(t: float) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    except (OverflowError, OSError, ValueError):
        return f"Unix time {t}"
