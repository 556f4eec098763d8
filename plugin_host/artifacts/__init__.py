"""Signed, version-bound model artifacts: build, sign, verify and load.

The file format (canonical msgpack manifest, 64-byte-aligned tensor section, hashes) is
``abi.artifact``; this package holds the authority: Ed25519 keys, the trust store, rollback
state, and the verifying loader.

Typical use::

    from plugin_host.artifacts import (TrustStore, RollbackStore, build_artifact,
                                       sign_artifact, load_verified, load_private_key)

    build_artifact(graph, "model.pha", version="1.0.0")
    sign_artifact("model.pha", load_private_key("keys/signing.key"))

    trust = TrustStore()
    trust.add_key_file("keys/signing.pub")
    loaded = load_verified("model.pha", trust=trust, rollback=RollbackStore(state_dir),
                           backends={"numpy"})
    loaded.graph  # a Graph whose tensors are read-only views of the mapped file
"""

from .build import DEFAULT_TOLERANCE, REFERENCE_BACKEND, build_artifact
from .keys import (generate_key, key_id, load_private_key, load_public_key, write_keypair)
from .load import VerifiedArtifact, load_verified, read_manifest_unverified
from .rollback import RollbackStore, default_state_dir
from .sign import sign_artifact
from .trust import SIGNER_ROLE, TrustedKey, TrustStore

__all__ = [
    "build_artifact", "sign_artifact", "load_verified", "read_manifest_unverified",
    "VerifiedArtifact", "TrustStore", "TrustedKey", "SIGNER_ROLE", "RollbackStore",
    "default_state_dir", "generate_key", "key_id", "load_private_key", "load_public_key",
    "write_keypair", "DEFAULT_TOLERANCE", "REFERENCE_BACKEND",
]
