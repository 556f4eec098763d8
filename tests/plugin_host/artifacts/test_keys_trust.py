"""Keys (ids, PEM files, modes) and the trust store's rules."""

import hashlib
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from abi.artifact import SignatureEntry, signed_message
from plugin_host.artifacts import (TrustStore, generate_key, key_id, load_private_key,
                                   load_public_key, write_keypair)
from plugin_host.errors import (KeyFileError, RevokedKeyError, SignatureError, ThresholdError,
                                UntrustedKeyError, UsageError)


def test_key_id_is_derived_from_the_public_key():
    key = generate_key()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    assert key_id(key) == key_id(key.public_key()) == hashlib.sha256(raw).hexdigest()[:32]
    assert key_id(generate_key()) != key_id(key)


def test_write_keypair_modes_and_round_trip(tmp_path):
    private, public, kid = write_keypair(tmp_path / "keys")
    assert os.stat(private).st_mode & 0o777 == 0o600
    assert os.stat(public).st_mode & 0o777 == 0o644
    assert key_id(load_private_key(private)) == key_id(load_public_key(public)) == kid
    with pytest.raises(KeyFileError, match="already exists"):
        write_keypair(tmp_path / "keys")


def test_private_key_readable_by_others_is_refused(tmp_path):
    private, _, _ = write_keypair(tmp_path)
    os.chmod(private, 0o640)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_private_key(private)


def test_key_files_that_are_not_ed25519(tmp_path):
    other = ec.generate_private_key(ec.SECP256R1())
    pub = tmp_path / "ec.pub"
    pub.write_bytes(other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(KeyFileError, match="not Ed25519"):
        load_public_key(pub)
    garbage = tmp_path / "garbage.pub"
    garbage.write_bytes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(KeyFileError, match="not a PEM public key"):
        load_public_key(garbage)
    with pytest.raises(KeyFileError, match="cannot read"):
        load_public_key(tmp_path / "missing.pub")
    big = tmp_path / "big.pub"
    big.write_bytes(b"x" * 100_000)
    with pytest.raises(KeyFileError, match="larger than"):
        load_public_key(big)
    private, public, _ = write_keypair(tmp_path / "k")
    with pytest.raises(KeyFileError):
        load_public_key(private)


def _signed(manifest, *keys):
    return [SignatureEntry(key_id(k), k.sign(signed_message(manifest))) for k in keys]


def test_trust_store_rules():
    a, b, c = generate_key(), generate_key(), generate_key()
    store = TrustStore()
    store.add_key(a.public_key())
    store.add_key(b.public_key())
    store.add_key(c.public_key(), roles=("policy",))
    assert sorted(store.signers) == sorted([key_id(a), key_id(b)])
    manifest = b"\x80"
    assert store.verify_signatures(manifest, _signed(manifest, a, b)) == [key_id(a), key_id(b)]
    with pytest.raises(UntrustedKeyError, match="only for policy"):
        store.verify_signatures(manifest, _signed(manifest, a, c))
    with pytest.raises(UntrustedKeyError, match="not in the trust store"):
        store.verify_signatures(manifest, _signed(manifest, generate_key()))
    with pytest.raises(SignatureError):
        store.verify_signatures(b"\x81", _signed(manifest, a))
    with pytest.raises(SignatureError):  # the raw manifest bytes alone are not what is signed
        store.verify_signatures(manifest, [SignatureEntry(key_id(a), a.sign(manifest))])
    with pytest.raises(ThresholdError, match="no signature"):
        store.verify_signatures(manifest, [])
    store.set_threshold("m", 2)
    store.check_threshold("m", [key_id(a), key_id(b)])
    with pytest.raises(ThresholdError, match="needs 2 of 2 trusted signer"):
        store.check_threshold("m", [key_id(a), key_id(a)])  # one key counts once
    store.check_threshold("other", [key_id(a)])
    store.revoke(key_id(b))
    assert store.signers == [key_id(a)]
    with pytest.raises(RevokedKeyError):
        store.verify_signatures(manifest, _signed(manifest, a, b))


def test_trust_store_refuses_bad_configuration():
    with pytest.raises(UsageError):
        TrustStore(default_threshold=0)
    store = TrustStore()
    with pytest.raises(UsageError):
        store.set_threshold("x", 0)
    with pytest.raises(UsageError):
        store.revoke("not-a-key-id")
    with pytest.raises(UsageError):
        store.add_key(b"\0" * 32)
