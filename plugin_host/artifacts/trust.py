"""The trust store: which keys may sign artifacts, which are revoked, and how many must sign.

There is no default trust: a new store holds no keys, so it accepts nothing until keys are
added explicitly. Rules, applied by :meth:`TrustStore.verify_signatures`:

- every signature in an artifact must be by a key this store holds with the ``artifact``
  role, must not be revoked, and must verify; one bad, unknown or revoked signature refuses the
  whole file (no byte of a signed file escapes verification);
- at least ``threshold(name)`` distinct keys must have signed (k of n, where n is the number
  of trusted signer keys). Because the name is inside the manifest, which is decoded only after
  the signatures verified, the per-name threshold is checked in a second step
  (:meth:`TrustStore.check_threshold`); the first step already requires at least one valid
  signature.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from abi.artifact import SignatureEntry, is_key_id, signed_message

from ..errors import (RevokedKeyError, SignatureError, ThresholdError, UntrustedKeyError,
                      UsageError)
from .keys import key_id, load_public_key

__all__ = ["SIGNER_ROLE", "TrustedKey", "TrustStore"]

#: The role a key needs for its signatures on artifacts to count.
SIGNER_ROLE = "artifact"


@dataclass(frozen=True)
class TrustedKey:
    key_id: str
    public_key: Ed25519PublicKey
    roles: frozenset[str]
    label: str = ""


class TrustStore:
    """Public keys with roles, revoked key ids, and k-of-n thresholds per artifact name.

    ``default_threshold`` applies to every artifact name without its own threshold.
    """

    def __init__(self, *, default_threshold: int = 1) -> None:
        self._keys: dict[str, TrustedKey] = {}
        self._revoked: set[str] = set()
        self._thresholds: dict[str, int] = {}
        self.default_threshold = _check_k(default_threshold)

    # -- configuration ------------------------------------------------------------------------

    def add_key(self, public_key: Ed25519PublicKey, *, roles: Iterable[str] = (SIGNER_ROLE,),
                label: str = "") -> str:
        """Trust ``public_key`` for ``roles``; returns its key id."""
        if not isinstance(public_key, Ed25519PublicKey):
            raise UsageError(f"trust store: expected an Ed25519 public key, got "
                             f"{type(public_key).__name__}")
        kid = key_id(public_key)
        self._keys[kid] = TrustedKey(kid, public_key, frozenset(roles), label)
        return kid

    def add_key_file(self, path: str | os.PathLike, *, roles: Iterable[str] = (SIGNER_ROLE,)
                     ) -> str:
        """Trust the Ed25519 public key in a PEM file (KeyFileError if it is not one)."""
        return self.add_key(load_public_key(path), roles=roles, label=str(path))

    def revoke(self, key_id_: str) -> None:
        """Revoke a key id: any artifact carrying its signature is refused from now on."""
        if not is_key_id(key_id_):
            raise UsageError(f"trust store: {key_id_!r} is not a key id (32 lowercase hex "
                             f"digits)")
        self._revoked.add(key_id_)

    def set_threshold(self, artifact_name: str, k: int) -> None:
        """Require ``k`` distinct valid signatures on artifacts called ``artifact_name``."""
        self._thresholds[artifact_name] = _check_k(k)

    # -- queries --------------------------------------------------------------------------------

    def threshold(self, artifact_name: str) -> int:
        return self._thresholds.get(artifact_name, self.default_threshold)

    @property
    def signers(self) -> list[str]:
        """Key ids of the trusted, unrevoked keys with the signer role (the n of k-of-n)."""
        return [k for k, t in self._keys.items()
                if SIGNER_ROLE in t.roles and k not in self._revoked]

    def is_revoked(self, key_id_: str) -> bool:
        return key_id_ in self._revoked

    def key(self, key_id_: str) -> TrustedKey | None:
        return self._keys.get(key_id_)

    # -- verification ---------------------------------------------------------------------------

    def verify_signatures(self, unverified_manifest_bytes: bytes,
                          unverified_signatures: Sequence[SignatureEntry]) -> list[str]:
        """Verify every signature over the manifest bytes; return the signer key ids.

        Raises RevokedKeyError, UntrustedKeyError or SignatureError for the first bad
        signature, ThresholdError when there is none at all. Never returns on failure.
        """
        message = signed_message(unverified_manifest_bytes)
        signers = []
        for entry in unverified_signatures:
            kid = entry.key_id
            if kid in self._revoked:
                raise RevokedKeyError(f"signed by revoked key {kid}", key_id=kid)
            trusted = self._keys.get(kid)
            if trusted is None:
                raise UntrustedKeyError(f"signed by key {kid}, which is not in the trust store "
                                        f"(trusted: {', '.join(self.signers) or 'none'})",
                                        key_id=kid)
            if SIGNER_ROLE not in trusted.roles:
                raise UntrustedKeyError(f"signed by key {kid}, which is trusted only for "
                                        f"{', '.join(sorted(trusted.roles)) or 'no role'}, not "
                                        f"{SIGNER_ROLE!r}", key_id=kid)
            try:
                trusted.public_key.verify(entry.signature, message)
            except InvalidSignature:
                raise SignatureError(f"the signature by key {kid} does not verify over the "
                                     f"manifest", key_id=kid) from None
            signers.append(kid)
        if not signers:
            raise ThresholdError(f"the artifact carries no signature (need at least "
                                 f"{max(1, self._min_threshold())} from "
                                 f"{len(self.signers)} trusted key(s))",
                                 required=self._min_threshold(), trusted=len(self.signers),
                                 valid=[])
        return signers

    def check_threshold(self, artifact_name: str, signers: Sequence[str]) -> None:
        """Raise ThresholdError unless ``signers`` (verified key ids) meet the name's k."""
        k = self.threshold(artifact_name)
        valid = sorted(set(signers))
        if len(valid) < k:
            n = len(self.signers)
            raise ThresholdError(f"artifact {artifact_name!r} needs {k} of {n} trusted "
                                 f"signer(s), got {len(valid)} valid signature(s)"
                                 + (f" ({', '.join(valid)})" if valid else ""),
                                 required=k, trusted=n, valid=valid)

    def _min_threshold(self) -> int:
        return min([self.default_threshold, *self._thresholds.values()])


def _check_k(k: int) -> int:
    if type(k) is not int or k < 1:
        raise UsageError(f"a signature threshold must be an int >= 1, got {k!r}")
    return k
