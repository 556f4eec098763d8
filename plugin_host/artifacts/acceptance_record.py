"""Signed acceptance records: the file format, signing, and verification against an artifact.

A record says: artifact ``name`` ``version`` (root digest, manifest SHA-256) was run on backend
``backend`` by plugin-host ``host_version``, and every golden output was within tolerance and
the latency within the budget (or not). The file is one canonical msgpack map (the artifact
format's encoder, ``abi.artifact.canonical``)::

    {"format": "plugin-host acceptance record", "format_version": 1,
     "body": <bin: the record, itself canonical msgpack>,
     "signatures": [{"key_id": <32 hex digits>, "signature": <bin: 64 bytes>}, ...]}

Each Ed25519 signature covers :data:`SIGNED_CONTEXT` + the body bytes (so neither an artifact
signature nor any other can be replayed as one). Key ids are the artifacts' (``keys.key_id``).

:func:`verify_record` reads hostile bytes: the size is capped before reading, the envelope is
decoded under tight limits, every signature is checked over the raw body before the body is
decoded; then the schema, the binding (digests, name, version), the backend, the host major
version and finally the verdict. It raises at the first failure and never returns a bool.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from cryptography.exceptions import InvalidSignature

from abi.artifact import DecodeLimits, atomic_write, decode, encode, is_key_id

from .. import __version__
from ..errors import (AcceptanceFailedError, AcceptanceMismatchError, AcceptanceRecordError,
                      ArtifactFormatError, RevokedKeyError, SignatureError, UntrustedKeyError)
from ..files import NotARegularFile, open_regular
from .keys import Ed25519PrivateKey, key_id

__all__ = ["ACCEPTANCE_ROLE", "FORMAT_NAME", "FORMAT_VERSION", "MAX_RECORD_BYTES",
           "SIGNED_CONTEXT", "AcceptanceRecord", "default_record_path", "read_record",
           "sign_record", "verify_record", "write_record"]

#: The role a trusted key needs for its signatures on acceptance records to count.
ACCEPTANCE_ROLE = "acceptance"
FORMAT_NAME = "plugin-host acceptance record"
FORMAT_VERSION = 1
SIGNED_CONTEXT = b"plugin-host acceptance record v1\x00"
#: A record holds one latency sample per run: 4 MiB is ~400,000 runs.
MAX_RECORD_BYTES = 4 * 2**20
MAX_SIGNATURES = 16
_LIMITS = DecodeLimits(max_bytes=MAX_RECORD_BYTES, max_depth=8, max_length=2**20,
                       max_items=2**20 + 4096)

#: body key -> type(s), checked on every record read (hostile input)
_BODY = {"artifact": dict, "backend": str, "host_version": str, "passed": bool,
         "reason": str, "date": str, "time": int, "golden_cases": int, "outputs": list,
         "latency": dict, "sandbox": list}
_ARTIFACT = {"name": str, "version": str, "root_digest": str, "manifest_sha256": str}
_OUTPUT = {"name": str, "passed": bool, "max_abs_error": (int, float), "mismatches": int,
           "elements": int, "rtol": (int, float), "atol": (int, float), "worst_case": int}
_LATENCY = {"runs": int, "warmup": int, "p50_ms": (int, float), "p99_ms": (int, float),
            "max_ms": (int, float), "mean_ms": (int, float), "min_ms": (int, float),
            "budget_ms": (int, float), "criterion": str, "passed": bool,
            "max_within_budget": bool, "samples_us": list}


def default_record_path(artifact_file: str | os.PathLike, backend: str) -> str:
    """Where a record is looked for when a policy names none: ``<artifact>.accept-<backend>``."""
    return f"{os.fspath(artifact_file)}.accept-{backend}"


@dataclass(frozen=True)
class AcceptanceRecord:
    """A decoded record. ``body`` is the signed content (see the module docstring), ``signers``
    the key ids whose signatures verified (empty when read without verification)."""

    path: str
    body: Mapping[str, Any]
    signers: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return bool(self.body["passed"])

    @property
    def backend(self) -> str:
        return self.body["backend"]

    @property
    def artifact(self) -> Mapping[str, Any]:
        return self.body["artifact"]


# --- writing -----------------------------------------------------------------------------------


def sign_record(body: Mapping[str, Any], keys: Iterable[Ed25519PrivateKey]) -> bytes:
    """The record file's bytes: ``body`` (checked against the schema) signed by ``keys``."""
    _check_body(dict(body), where="record")
    body_bytes = encode(dict(body), where="record")
    signatures = [{"key_id": key_id(k), "signature": k.sign(SIGNED_CONTEXT + body_bytes)}
                  for k in keys]
    return encode({"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "body": body_bytes,
                   "signatures": signatures}, where="record")


def write_record(path: str | os.PathLike, body: Mapping[str, Any],
                 keys: Iterable[Ed25519PrivateKey]) -> None:
    """Sign ``body`` and write the record atomically (readers see the old file or the new)."""
    data = sign_record(body, keys)
    try:
        atomic_write(path, lambda f: f.write(data))
    except OSError as exc:
        raise AcceptanceRecordError(f"cannot write acceptance record {path}: {exc.strerror}",
                                    path=os.fspath(path)) from None


# --- reading and verifying ---------------------------------------------------------------------


def read_record(path: str | os.PathLike) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The raw body bytes and the ``(key_id, signature)`` pairs of a record file, format-checked
    but NOT verified (nothing in the body is decoded)."""
    path = os.fspath(path)
    try:
        with open_regular(path) as f:
            data = f.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        raise AcceptanceRecordError(f"no acceptance record at {path}", path=path,
                                    where="file") from None
    except NotARegularFile:
        raise _bad(path, "not a regular file") from None
    except OSError as exc:
        raise _bad(path, f"cannot read it: {exc.strerror}") from None
    if len(data) > MAX_RECORD_BYTES:
        raise _bad(path, f"larger than the cap of {MAX_RECORD_BYTES} bytes")
    envelope = _decode(data, path, "record")
    if not isinstance(envelope, dict) or set(envelope) != {"format", "format_version", "body",
                                                           "signatures"}:
        raise _bad(path, "not an acceptance record (expected the keys body, format, "
                         "format_version, signatures)")
    if envelope["format"] != FORMAT_NAME or envelope["format_version"] != FORMAT_VERSION:
        raise _bad(path, f"format {envelope['format']!r} version {envelope['format_version']!r}"
                         f"; this host reads {FORMAT_NAME!r} version {FORMAT_VERSION}")
    body, signatures = envelope["body"], envelope["signatures"]
    if type(body) is not bytes:
        raise _bad(path, "body is not a byte string", where="body")
    if type(signatures) is not list or len(signatures) > MAX_SIGNATURES:
        raise _bad(path, f"signatures must be a list of at most {MAX_SIGNATURES}",
                   where="signatures")
    pairs = []
    for i, s in enumerate(signatures):
        if (type(s) is not dict or set(s) != {"key_id", "signature"}
                or type(s["key_id"]) is not str or not is_key_id(s["key_id"])
                or type(s["signature"]) is not bytes or len(s["signature"]) != 64):
            raise _bad(path, "expected {key_id: 32 hex digits, signature: 64 bytes}",
                       where=f"signatures[{i}]")
        pairs.append((s["key_id"], s["signature"]))
    return body, pairs


def verify_record(path: str | os.PathLike, *, trust, name: str, version: str,
                  root_digest: str, manifest_sha256: str, backend: str,
                  host_version: str = __version__) -> AcceptanceRecord:
    """Verify the record at ``path`` for the artifact so identified on ``backend``; return it.

    ``trust`` is a TrustStore: every signature must be by an unrevoked key it holds with the
    ``acceptance`` role, and verify; at least one is needed. Raises (never returns a bool):
    AcceptanceRecordError (missing, too large, malformed), RevokedKeyError, UntrustedKeyError,
    SignatureError, AcceptanceMismatchError (another artifact, backend or host major version),
    AcceptanceFailedError (a record of a failed acceptance).
    """
    path = os.fspath(path)
    label = f"acceptance record {path} (artifact {name!r} {version} on backend {backend!r})"
    context = {"path": path, "artifact": name, "backend": backend}
    unverified_body, unverified_signatures = read_record(path)
    signers = _verify_signatures(unverified_body, unverified_signatures, trust, label, context)
    body = _decode(unverified_body, path, "body")  # authentic from here on
    _check_body(body, where=f"{path}: body")

    art = body["artifact"]
    for field, want in (("root_digest", root_digest), ("manifest_sha256", manifest_sha256),
                        ("name", name), ("version", version)):
        if art[field] != want:
            raise AcceptanceMismatchError(
                f"{label}: it is for another artifact: {field} {_short(art[field])}, this "
                f"artifact's is {_short(want)}", field=field, expected=want, got=art[field],
                **context)
    if body["backend"] != backend:
        raise AcceptanceMismatchError(
            f"{label}: it accepts backend {body['backend']!r}, not {backend!r}",
            field="backend", expected=backend, got=body["backend"], **context)
    if _major(body["host_version"]) != _major(host_version):
        raise AcceptanceMismatchError(
            f"{label}: made by plugin-host {body['host_version']}, this host is {host_version} "
            f"(another major version: accept the artifact again)", field="host_version",
            expected=host_version, got=body["host_version"], **context)
    if not body["passed"]:
        raise AcceptanceFailedError(f"{label}: the acceptance it records FAILED: "
                                    f"{body['reason']}", **context)
    return AcceptanceRecord(path=path, body=body, signers=tuple(signers))


def _verify_signatures(body: bytes, signatures: list[tuple[str, bytes]], trust, label: str,
                       context: dict[str, Any]) -> list[str]:
    message = SIGNED_CONTEXT + body
    signers = []
    for kid, signature in signatures:
        if trust.is_revoked(kid):
            raise RevokedKeyError(f"{label}: signed by revoked key {kid}", key_id=kid, **context)
        trusted = trust.key(kid)
        if trusted is None:
            raise UntrustedKeyError(f"{label}: signed by key {kid}, which is not trusted",
                                    key_id=kid, **context)
        if ACCEPTANCE_ROLE not in trusted.roles:
            raise UntrustedKeyError(f"{label}: signed by key {kid}, which is trusted only for "
                                    f"{', '.join(sorted(trusted.roles)) or 'no role'}, not "
                                    f"{ACCEPTANCE_ROLE!r}", key_id=kid, **context)
        try:
            trusted.public_key.verify(signature, message)
        except InvalidSignature:
            raise SignatureError(f"{label}: the signature by key {kid} does not verify",
                                 key_id=kid, **context) from None
        signers.append(kid)
    if not signers:
        raise SignatureError(f"{label}: the record is not signed (accept with --key)",
                             **context)
    return signers


def _decode(data: bytes, path: str, where: str) -> Any:
    try:
        return decode(data, limits=_LIMITS, where=where)
    except ArtifactFormatError as exc:
        raise AcceptanceRecordError(f"{path}: {exc}", path=path, where=where) from None


def _check_body(body: Any, *, where: str) -> None:
    """The record schema: exact keys and types (a hostile or foreign map is refused)."""
    _check_map(body, _BODY, where)
    _check_map(body["artifact"], _ARTIFACT, f"{where}.artifact")
    _check_map(body["latency"], _LATENCY, f"{where}.latency")
    for i, out in enumerate(body["outputs"]):
        _check_map(out, _OUTPUT, f"{where}.outputs[{i}]")
    for i, s in enumerate(body["latency"]["samples_us"]):
        if type(s) is not int or s < 0:
            raise AcceptanceRecordError(f"{where}.latency.samples_us[{i}]: not an int >= 0",
                                        where=f"latency.samples_us[{i}]")
    for i, p in enumerate(body["sandbox"]):
        if type(p) is not str:
            raise AcceptanceRecordError(f"{where}.sandbox[{i}]: not a str",
                                        where=f"sandbox[{i}]")


def _check_map(value: Any, schema: Mapping[str, Any], where: str) -> None:
    if type(value) is not dict:
        raise AcceptanceRecordError(f"{where}: expected a map, got {type(value).__name__}",
                                    where=where)
    if set(value) != set(schema):
        missing, extra = sorted(set(schema) - set(value)), sorted(set(value) - set(schema))
        raise AcceptanceRecordError(f"{where}: wrong keys (missing {missing}, unexpected "
                                    f"{extra})", where=where)
    for key, types in schema.items():
        v = value[key]
        ok = isinstance(v, types) and (type(v) is not bool or types is bool)
        if not ok:
            raise AcceptanceRecordError(f"{where}.{key}: wrong type {type(v).__name__}",
                                        where=f"{where}.{key}")


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def _short(value: Any) -> str:
    text = str(value)
    return f"{text[:16]}..." if len(text) > 24 else text


def _bad(path: str, message: str, where: str = "record") -> AcceptanceRecordError:
    return AcceptanceRecordError(f"acceptance record {path}: {where}: {message}", path=path,
                                 where=where)
