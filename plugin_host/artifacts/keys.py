"""Ed25519 signing keys: generation, key ids, PEM files.

A key id is the first 16 bytes of SHA-256 of the raw 32-byte public key, in lowercase hex (32
digits). It is derived, never chosen, so a signature block cannot claim a key id that does not
belong to the key that verifies it.

Private keys are written as unencrypted PKCS#8 PEM with mode 0600 and refused when readable by
group or others (like ssh); public keys as SubjectPublicKeyInfo PEM.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from abi.artifact import create_new

from ..errors import KeyFileError
from ..files import open_regular

__all__ = ["Ed25519PrivateKey", "Ed25519PublicKey", "generate_key", "key_id",
           "load_private_key", "load_public_key", "write_keypair", "write_public_key",
           "MAX_KEY_FILE_BYTES"]

MAX_KEY_FILE_BYTES = 16 * 1024


def generate_key() -> Ed25519PrivateKey:
    """A new random Ed25519 private key."""
    return Ed25519PrivateKey.generate()


def key_id(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The key id of a public key (or of a private key's public half)."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:32]


def _read(path: str | os.PathLike, what: str) -> bytes:
    try:
        with open_regular(path) as f:
            data = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror}") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{what} {path}: larger than {MAX_KEY_FILE_BYTES} bytes")
    return data


def load_public_key(path: str | os.PathLike) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file; KeyFileError if it is anything else."""
    data = _read(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(f"public key {path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"public key {path}: a {type(key).__name__}, not Ed25519")
    return key


def load_private_key(path: str | os.PathLike) -> Ed25519PrivateKey:
    """An Ed25519 private key from an unencrypted PEM file that only its owner can read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise KeyFileError(f"cannot read private key {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise KeyFileError(f"private key {path} is accessible by group or others (mode "
                           f"{stat.S_IMODE(mode):04o}); chmod 600 it")
    data = _read(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyFileError(f"private key {path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"private key {path}: a {type(key).__name__}, not Ed25519")
    return key


def write_keypair(directory: str | os.PathLike, key: Ed25519PrivateKey | None = None, *,
                  name: str = "signing") -> tuple[Path, Path, str]:
    """Write ``<name>.key`` (private, mode 0600) and ``<name>.pub`` into ``directory``.

    Refuses to overwrite existing files. Returns (private path, public path, key id).
    """
    key = key or generate_key()
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyFileError(f"cannot create {directory}: {exc.strerror}") from None
    private_path, public_path = directory / f"{name}.key", directory / f"{name}.pub"
    private_pem = key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    for path in (private_path, public_path):
        if path.exists():
            raise KeyFileError(f"{path} already exists; refusing to overwrite a key")
    _write_new(private_path, private_pem, 0o600)
    write_public_key(public_path, key)
    return private_path, public_path, key_id(key)


def write_public_key(path: str | os.PathLike, key: Ed25519PrivateKey) -> None:
    """Write ``key``'s public key to ``path`` (PEM, mode 0644); refuses to overwrite."""
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_new(Path(path), pem, 0o644)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """``path`` created with ``data``, complete or not at all (a kill while writing leaves no
    empty or partial key file behind: :func:`~abi.artifact.create_new`)."""
    try:
        create_new(path, lambda f: f.write(data), mode=mode)
    except OSError as exc:
        raise KeyFileError(f"cannot create {path}: {exc.strerror}") from None
