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

import importlib
from typing import Any

#: name -> submodule, imported on first use (PEP 562): ``plugin_host.artifacts.pinned`` (the
#: sandbox worker's loader) must not pull in the signing and trust code (and cryptography)
_EXPORTS = {
    "build_artifact": "build", "DEFAULT_TOLERANCE": "build", "REFERENCE_BACKEND": "build",
    "generate_key": "keys", "key_id": "keys", "load_private_key": "keys",
    "load_public_key": "keys", "write_keypair": "keys", "write_public_key": "keys",
    "VerifiedArtifact": "load", "load_verified": "load", "read_manifest_unverified": "load",
    "load_pinned": "pinned",
    "RollbackStore": "rollback", "default_state_dir": "rollback",
    "sign_artifact": "sign",
    "SIGNER_ROLE": "trust", "TrustedKey": "trust", "TrustStore": "trust",
}

__all__ = [
    "build_artifact", "sign_artifact", "load_verified", "read_manifest_unverified",
    "VerifiedArtifact", "TrustStore", "TrustedKey", "SIGNER_ROLE", "RollbackStore",
    "default_state_dir", "generate_key", "key_id", "load_private_key", "load_public_key",
    "write_keypair", "write_public_key", "DEFAULT_TOLERANCE", "REFERENCE_BACKEND",
    "load_pinned",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
