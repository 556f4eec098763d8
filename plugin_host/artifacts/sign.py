"""Add a signature to an artifact.

The signer signs only what it has checked: before signing, the file's header, canonical
encodings, manifest schema, every tensor hash, the root digest and the padding are verified
(trust is not consulted: signing is how trust is created). The manifest bytes are never
changed; the new file (header, manifest, signature block with the new entry, tensor section)
replaces the old one atomically.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from abi.artifact import (DEFAULT_LIMITS, ArtifactFile, Limits, SignatureEntry, atomic_write,
                          check_manifest, copy_chunks, decode, encode_signatures, file_prefix,
                          signed_message, verify_section)

from ..errors import ArtifactError, ArtifactFormatError, UsageError
from .keys import Ed25519PrivateKey, key_id

__all__ = ["sign_artifact"]


def sign_artifact(path: str | os.PathLike, private_key: Ed25519PrivateKey, *,
                  limits: Limits = DEFAULT_LIMITS) -> str:
    """Check the artifact at ``path``, add (or renew) ``private_key``'s signature; return its
    key id. Signatures by other keys are kept."""
    path = os.fspath(path)
    kid = key_id(private_key)
    with ArtifactFile(path, limits) as artifact:
        try:
            manifest_bytes = artifact.unverified_manifest_bytes
            existing = artifact.unverified_signatures()
            manifest = check_manifest(decode(manifest_bytes,
                                             limits=limits.manifest_decode_limits(),
                                             where="manifest"), limits=limits)
            if manifest.section_length != artifact.header.tensor_length:
                raise ArtifactFormatError("tensor section length differs from the manifest",
                                          where="header")
            section = artifact.section()
            try:
                verify_section(section, manifest.tensors, manifest.section_length,
                               manifest.root_digest)
            finally:
                section.release()
            signature = private_key.sign(signed_message(manifest_bytes))
            entries = [e for e in existing if e.key_id != kid] + [SignatureEntry(kid, signature)]
            if len(entries) > limits.max_signatures:
                raise ArtifactFormatError(f"{len(entries)} signatures exceed the cap of "
                                          f"{limits.max_signatures}", where="signature block")
            block = encode_signatures(entries)
            if len(block) > limits.max_signature_block_bytes:
                raise ArtifactFormatError(f"{len(block)} bytes exceed the cap of "
                                          f"{limits.max_signature_block_bytes}",
                                          where="signature block")
        except ArtifactError as exc:
            exc.path = exc.path or path
            raise
        prefix = file_prefix(manifest_bytes, block, artifact.header.tensor_length)
        mode = stat.S_IMODE(os.stat(path).st_mode)

        def write(f: Any) -> None:
            f.write(prefix)
            section = artifact.section()
            try:
                copy_chunks(f, section)
            finally:
                section.release()

        try:
            atomic_write(path, write, mode=mode)
        except OSError as exc:
            raise UsageError(f"cannot write the signed artifact {path}: {exc.strerror}") \
                from None
    return kid
